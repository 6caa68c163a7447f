"""The cuda backend: discovery, the config -> LocalCUDACluster mapping, refusals, CuPy routing.

Everything except the tests marked ``gpu`` runs on any machine, with faked device lists
(dask_cuda is never imported by them). The ``gpu`` tests need an NVIDIA GPU, CuPy and dask-cuda.
"""

from __future__ import annotations

import importlib.util
import logging

import dask.config
import numpy as np
import pytest

from openclaw_dask import ConfigError, Session, load_config
from openclaw_dask.cluster import cuda, gpu
from openclaw_dask.cluster.gpu import Device, GpuInfo, parse_nvidia_smi, visible_devices

from .test_cli import assert_one_line_error, invoke

H200 = Device(0, "GPU-1a2b3c4d-0000-0000-0000-000000000000", "NVIDIA H200", 141 * 10**9)
TWO = GpuInfo((H200, Device(1, "GPU-ffff0000-0000-0000-0000-000000000001", "NVIDIA H200", 141 * 10**9)), "nvml", "570.1", "12.8")
NONE = GpuInfo((), "none", tried=("nvidia-ml-py: not installed", "nvidia-smi: not on PATH"))


@pytest.fixture
def fake_gpus(monkeypatch):
    """This machine 'has' two 141 GB H200s, and dask-cuda and CuPy 'are installed' (nothing imports them)."""
    monkeypatch.setattr(cuda, "discover", lambda: TWO)
    monkeypatch.setattr(cuda.CudaBackend, "missing", lambda self: [])
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return TWO


def test_nvidia_smi_output_is_parsed():
    text = "0, GPU-1a2b, NVIDIA H200, 143771, 570.86.15\n1, GPU-ffff, NVIDIA H200, 143771, 570.86.15\n"
    devices, driver = parse_nvidia_smi(text)
    assert [d.index for d in devices] == [0, 1] and devices[0].memory_bytes == 143771 * 2**20 and driver == "570.86.15"
    assert parse_nvidia_smi("") == ((), None)


def test_visible_devices_follow_gpu_devices_then_cuda_visible_devices():
    devs = TWO.devices
    assert visible_devices(devs, None, env=None) == devs
    assert visible_devices(devs, (1,), env="0") == (devs[1],)  # gpu.devices wins
    assert visible_devices(devs, None, env="1") == (devs[1],)
    assert visible_devices(devs, None, env="GPU-ffff0000") == (devs[1],)  # a UUID prefix, as CUDA takes it
    assert visible_devices(devs, None, env="") == ()  # set but empty hides every GPU
    assert visible_devices(devs, (5,), env=None) == ()


def test_without_a_gpu_the_cuda_backend_is_refused_in_one_line(monkeypatch):
    monkeypatch.setattr(cuda, "discover", lambda: NONE)
    r = invoke("run", "array-sum", "--set", "parallel.backend=cuda")
    assert_one_line_error(r, 2, "no NVIDIA GPU found", "nvidia-smi", "CUDA_VISIBLE_DEVICES")


def test_without_packages_the_install_is_named(monkeypatch):
    monkeypatch.setattr(cuda, "discover", lambda: TWO)
    monkeypatch.setattr(cuda.CudaBackend, "missing", lambda self: ["dask_cuda"])
    r = invoke("run", "--set", "parallel.backend=cuda")
    assert_one_line_error(r, 2, "needs dask_cuda", "pip install 'openclaw-dask[cuda]'")


def test_the_plan_maps_the_config_onto_local_cuda_cluster(fake_gpus, monkeypatch):
    monkeypatch.setattr(cuda, "_installed", lambda name: name == "rmm")
    cfg = load_config(None, {"parallel.backend": "cuda", "parallel.memory_pooling": True, "parallel.gpu_memory_fraction": 0.5})
    kwargs = cuda.CudaBackend().plan(cfg)
    assert kwargs["CUDA_VISIBLE_DEVICES"] == "0,1" and kwargs["n_workers"] == 2 and kwargs["threads_per_worker"] == 1
    assert kwargs["device_memory_limit"] == kwargs["rmm_pool_size"] == int(0.5 * 141e9)
    assert "processes" not in kwargs and kwargs["protocol"] == "tcp" and "enable_nvlink" not in kwargs
    one = load_config(None, {"parallel.backend": "cuda", "gpu.devices": [1]})
    assert cuda.CudaBackend().plan(one)["CUDA_VISIBLE_DEVICES"] == "1"
    first = cuda.CudaBackend().plan(load_config(None, {"parallel.backend": "cuda", "parallel.workers": 1}))
    assert (first["CUDA_VISIBLE_DEVICES"], first["n_workers"]) == ("0", 1)


def test_pools_rmm_then_cupy_then_none(fake_gpus):
    on = load_config(None, {"parallel.backend": "cuda", "parallel.memory_pooling": True})
    assert cuda.gpu_plan(on, TWO, rmm=True, ucx=False).pool == "rmm"
    assert cuda.gpu_plan(on, TWO, rmm=False, ucx=False).pool == "cupy"
    off = load_config(None, {"parallel.backend": "cuda"})
    assert cuda.gpu_plan(off, TWO, rmm=True, ucx=False).pool is None
    assert "no memory pool" in cuda.CudaBackend().engine(off).reason


def test_ucx_nvlink_and_rdma(fake_gpus):
    nccl = load_config(None, {"parallel.backend": "cuda", "parallel.communication": "nccl"})
    assert cuda.gpu_plan(nccl, TWO, rmm=False, ucx=True).protocol == "ucx"
    assert cuda.gpu_plan(nccl, TWO, rmm=False, ucx=False).protocol == "tcp"  # falls back, as DESIGN says
    from openclaw_dask.config import load_config as unchecked  # the config layer alone: no backend check yet

    rdma = unchecked(None, {"parallel.backend": "cuda", "parallel.rdma": True, "parallel.communication": "ucx"})
    with pytest.raises(ConfigError, match="parallel.rdma = true: needs UCX"):
        cuda.gpu_plan(rdma, TWO, rmm=False, ucx=False)
    assert cuda.gpu_plan(rdma, TWO, rmm=False, ucx=True).rdma


def test_refusals(fake_gpus, caplog):
    with pytest.raises(ConfigError, match="one worker per GPU, and 2 GPU"):
        load_config(None, {"parallel.backend": "cuda", "parallel.workers": 3})
    with pytest.raises(ConfigError, match=r"in \(0, 0.95\]"):
        load_config(None, {"parallel.backend": "cuda", "parallel.gpu_memory_fraction": 0.96})
    with pytest.raises(ConfigError, match="none of the GPUs is visible"):
        load_config(None, {"parallel.backend": "cuda", "gpu.devices": [7]})
    with caplog.at_level(logging.WARNING, logger="openclaw_dask.cluster"):
        load_config(None, {"parallel.backend": "cuda", "parallel.gpu_memory_fraction": 0.9})
    assert "above the 0.7 the guide advises" in caplog.text
    for key, value in (("parallel.memory_pooling", True), ("parallel.rdma", True), ("gpu.devices", [0]),
                       ("parallel.gpu_memory_fraction", 0.5)):
        with pytest.raises(ConfigError, match="applies to GPU workers: backend cuda"):
            load_config(None, {key: value})


def test_batch_size_bounds_the_chunks_in_flight_per_gpu(fake_gpus):
    from openclaw_dask.cluster.settings import dask_settings

    settings = dask_settings(load_config(None, {"parallel.backend": "cuda", "parallel.batch_size": 3}))  # what a session runs under
    assert settings["distributed.scheduler.worker-saturation"] == 3.0 and settings["array.backend"] == "cupy"
    plain = cuda.CudaBackend().dask_settings(load_config(None, {"parallel.backend": "cuda"}))
    assert "distributed.scheduler.worker-saturation" not in plain


def test_config_show_gives_the_byte_limits_of_a_141_gb_device(fake_gpus):
    r = invoke("config", "show", "--set", "parallel.backend=cuda", "--set", "parallel.gpu_memory_fraction=0.7",
               "--set", "parallel.memory_pooling=true", "--set", "gpu.devices=0")
    assert r.exit_code == 0, r.output
    line = next(x for x in r.stdout.splitlines() if x.startswith("computed:"))
    assert "GPU 0 (NVIDIA H200, 141.0 GB)" in line and "pool 98.7 GB" in line and "spill above 98.7 GB" in line


def test_an_rmm_pool_the_gpus_cannot_hold_now_is_refused_before_any_worker_starts(fake_gpus, monkeypatch):
    """Seen on an H200: a second session's 98.7 GB RMM pool beside the first's failed every worker's
    start. RMM takes its whole pool at once, so free memory is compared first; CuPy's pool only caps."""
    conf = {"parallel.backend": "cuda", "parallel.memory_pooling": True, "gpu.devices": [0]}
    plan = cuda.gpu_plan(load_config(None, conf), TWO, rmm=True, ucx=False)
    assert plan.short_of_memory({0: 99 * 10**9, 1: 0}) is None  # GPU 1 gets no worker
    why = plan.short_of_memory({0: 40 * 10**9})
    assert why.startswith("GPU 0 has 40.0 GB free, and its RMM pool would take 98.7 GB (gpu_memory_fraction 0.7 of 141.0 GB)")
    assert plan.short_of_memory({}) is None  # free memory unreadable: the start itself says
    assert cuda.gpu_plan(load_config(None, conf), TWO, rmm=False, ucx=False).short_of_memory({0: 0}) is None

    monkeypatch.setattr(cuda, "_installed", lambda module: True)
    monkeypatch.setattr(cuda, "free_memory", lambda: {0: 40 * 10**9, 1: 141 * 10**9})
    r = invoke("run", "array-sum", *(f"--set={k}={v}" for k, v in conf.items()))
    assert_one_line_error(r, 1, "could not start the cuda cluster: GPU 0 has 40.0 GB free",
                          "lower parallel.gpu_memory_fraction or free the GPU")


def test_session_arrays_route_through_dask_s_array_backend():
    """What CuPy chunks rest on, without CuPy: a registered NumPy-based backend marks each block.

    Backend cuda sets ``array.backend: cupy`` (above); here the ``dask:`` section sets it, as a
    client of a remote cluster of ``dask cuda worker`` processes does.
    """
    from dask.array.backends import NumpyBackendEntrypoint, array_creation_dispatch

    class Marked(np.ndarray):
        pass

    class MarkedBackend(NumpyBackendEntrypoint):
        @classmethod
        def to_backend_dispatch(cls):
            from dask.array.dispatch import to_numpy_dispatch

            return to_numpy_dispatch

        @staticmethod
        def to_backend(data, **kwargs):
            return data.map_blocks(lambda b: np.asarray(b).view(Marked), dtype=data.dtype)

    array_creation_dispatch.register_backend("openclaw-marked", MarkedBackend())
    with Session(load_config(None, {"parallel.enabled": False, "dask.array.backend": "openclaw-marked"})).start() as s:
        x = s.array((100,), fill="arange", chunks=25)
        assert all(isinstance(b, Marked) for b in s.compute(*[x.blocks[i] for i in range(4)]))
        y = s.from_array(np.arange(100.0))
        assert isinstance(s.compute(y.blocks[0]), Marked)
        np.testing.assert_array_equal(s.to_numpy(x), np.arange(100.0))


# -- on a GPU ----------------------------------------------------------------------------------

needs_gpu = pytest.mark.skipif(
    importlib.util.find_spec("cupy") is None or importlib.util.find_spec("dask_cuda") is None or not gpu.discover().devices,
    reason="needs an NVIDIA GPU, CuPy and dask-cuda (pip install 'openclaw-dask[cuda]')",
)


@pytest.fixture(scope="module")
def gpu_session():
    conf = {"parallel.backend": "cuda", "parallel.memory_pooling": True, "parallel.fusion_buffer_size": "16MiB"}
    with Session(load_config(None, conf)).start() as s:
        yield s


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("kernel", ["array-sum", "elementwise", "matmul", "tree-reduction"])
def test_kernels_on_cupy_chunks_equal_numpy(gpu_session, kernel):
    from openclaw_dask.workloads import WORKLOADS

    r = WORKLOADS[kernel](gpu_session, size=64 * 2**20, repeat=1)
    assert r.ok, getattr(r, "check", r)


@pytest.mark.gpu
@needs_gpu
def test_chunks_are_cupy_and_pools_limits_and_message_size_are_on_every_worker(gpu_session):
    import cupy

    x = gpu_session.array((1000,), fill="random")
    assert isinstance(gpu_session.compute(x.blocks[0]), cupy.ndarray)
    plan = gpu_session.backend.gpu_plan(gpu_session.config)
    seen = gpu_session.client.run(_pool_and_limit)
    assert len(seen) == plan.workers
    for pool, limit, spill in seen.values():
        assert pool == plan.pool and spill == plan.pool_bytes
        assert plan.pool == "rmm" or limit == plan.pool_bytes
    # fusion_buffer_size: bytes per message between GPU workers
    assert set(gpu_session.client.run(lambda dask_worker: dask_worker.state.transfer_message_bytes_limit).values()) == {16 * 2**20}


@pytest.mark.gpu
@needs_gpu
def test_batch_size_bounds_device_memory():
    """8 GiB through a CuPy pool: with batch_size 2 the pool never holds more than a few 256 MiB chunks.

    The module's session holds 0.7 of the GPU (all of it at once with RMM): this one takes 0.2."""
    conf = {"parallel.backend": "cuda", "parallel.memory_pooling": True, "parallel.batch_size": 2, "gpu.devices": [0],
            "parallel.gpu_memory_fraction": 0.2}
    with Session(load_config(None, conf)).start() as s:
        n, chunk = 2**30, 2**25  # float64: 8 GiB in 32 chunks of 256 MiB
        x = s.array((n,), fill="ones", chunks=chunk)
        assert float(s.compute(x.sum())) == n
        held = max(s.client.run(_pool_bytes).values())
    if held is None:
        pytest.skip("RMM holds the pool here; the CuPy pool's size is what this test reads")
    assert held <= 6 * chunk * 8, f"the pool grew to {held / 2**30:.1f} GiB"


def _pool_bytes(dask_worker):
    """Bytes the worker's CuPy pool holds: it keeps freed blocks, so this is its peak."""
    import cupy

    pool = getattr(cupy.cuda.get_allocator(), "__self__", None)
    return pool.total_bytes() if isinstance(pool, cupy.cuda.MemoryPool) else None


def _pool_and_limit(dask_worker):
    """(pool kind, CuPy pool limit, device spill threshold) inside a worker."""
    import cupy

    buffer = getattr(dask_worker.data, "device_buffer", None)  # dask-cuda's DeviceHostFile: a zict.Buffer
    spill = getattr(buffer, "n", None)
    try:
        import rmm

        if "Pool" in type(rmm.mr.get_current_device_resource()).__name__:
            return "rmm", None, spill
    except ImportError:
        pass
    allocator = cupy.cuda.get_allocator()
    pool = getattr(allocator, "__self__", None)
    return ("cupy", pool.get_limit(), spill) if isinstance(pool, cupy.cuda.MemoryPool) else (None, None, spill)


def test_gpu_check_dry_run_passes_without_a_gpu():
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).parent.parent / "scripts" / "gpu-check.sh"
    r = subprocess.run(["bash", str(script), "--dry-run"], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHON": sys.executable})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "tests collected" in r.stdout and "plan: array-sum" in r.stdout and "dry run passed" in r.stdout


def test_openclaw_worker_with_the_cuda_backend_starts_dask_cuda_worker(fake_gpus, monkeypatch):
    from openclaw_dask.cluster.deploy import worker_command

    monkeypatch.setattr(cuda, "_installed", lambda name: name == "rmm")
    cfg = load_config(None, {"parallel.backend": "cuda", "parallel.memory_pooling": True, "gpu.devices": [1]})
    cmd = worker_command(cfg, "tcp://127.0.0.1:8786")
    assert cmd.argv[1:4] == ["cuda", "worker", "tcp://127.0.0.1:8786"] and "--nworkers" not in cmd.argv
    limit = str(int(0.7 * 141e9))
    assert cmd.argv[cmd.argv.index("--device-memory-limit") + 1] == limit == cmd.argv[cmd.argv.index("--rmm-pool-size") + 1]
    assert cmd.env["CUDA_VISIBLE_DEVICES"] == "1"
    assert not any("cupy_pool" in m for m in cmd.settings.get("distributed.worker.preload", []))  # RMM: dask-cuda's pool
    # without RMM, each worker sets CuPy's pool as it starts: limited with memory_pooling, off without
    monkeypatch.setattr(cuda, "_installed", lambda name: False)
    for pooling, limit in ((True, int(0.7 * 141e9)), (False, None)):
        cmd = worker_command(load_config(None, {"parallel.backend": "cuda", "parallel.memory_pooling": pooling}), "tcp://127.0.0.1:8786")
        assert "--rmm-pool-size" not in cmd.argv
        assert "openclaw_dask.cluster.cupy_pool_preload" in cmd.settings["distributed.worker.preload"]
        assert cmd.settings["openclaw.cupy-pool"] == limit
        handed = dask.config.deserialize(cmd.env["DASK_INTERNAL_INHERIT_CONFIG"])  # what the workers' config gets
        assert handed["openclaw"]["cupy-pool"] == limit
        assert "openclaw_dask.cluster.cupy_pool_preload" in handed["distributed"]["worker"]["preload"]
    cpu = worker_command(load_config(None, {"parallel.backend": "process"}), "tcp://127.0.0.1:8786")
    assert cpu.argv[1] == "worker" and "--nworkers" in cpu.argv


def test_fusion_buffer_sizes_the_messages_between_gpu_workers(fake_gpus):
    from openclaw_dask.cluster.deploy import worker_command
    from openclaw_dask.cluster.settings import dask_settings
    from openclaw_dask.cluster.worker_shape import TRANSFER_KEYS

    cfg = load_config(None, {"parallel.backend": "cuda", "parallel.fusion_buffer_size": "8MiB"})
    assert all(dask_settings(cfg)[k] == 8 * 2**20 for k in TRANSFER_KEYS)  # a LocalCUDACluster's nannies hand this on
    handed = dask.config.deserialize(worker_command(cfg, "tcp://127.0.0.1:8786").env["DASK_INTERNAL_INHERIT_CONFIG"])
    assert handed["distributed"]["worker"]["transfer"]["message-bytes-limit"] == 8 * 2**20  # dask cuda worker's
    assert handed["distributed"]["p2p"]["comm"]["message-bytes-limit"] == 8 * 2**20
