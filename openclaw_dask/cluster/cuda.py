"""``cuda``: dask-cuda's ``LocalCUDACluster``, one worker process per GPU, CuPy chunks.

The mapping from a config to the cluster's arguments (:func:`gpu_plan`, then
:meth:`CudaBackend.plan`) is pure: it takes the devices as data, so it is tested with faked
device lists on any machine. What the keys mean here:

- ``gpu.devices`` (or ``CUDA_VISIBLE_DEVICES``) picks the GPUs; ``workers: auto`` is one per GPU.
- ``gpu_memory_fraction`` f: each worker's pool (with ``memory_pooling``) and its spill threshold
  (``device_memory_limit``) are f x that device's memory. Above 0.7 a warning, above 0.95 refused.
- ``memory_pooling``: an RMM pool on every worker (``rmm_pool_size``) when RMM is installed, else
  CuPy's own pool limited to the same size; false turns CuPy's default pool off.
- ``communication: ucx | nccl``: UCX with NVLink; ``rdma`` adds InfiniBand and RDMA-CM.
- ``batch_size``: at most that many chunks per GPU in flight (root-task queuing's
  ``worker-saturation``, with one task thread per worker).
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from openclaw_dask.cluster.base import Capabilities, Engine
from openclaw_dask.cluster.gpu import Device, GpuInfo, discover, free_memory, visible_devices
from openclaw_dask.cluster.local import ProcessBackend
from openclaw_dask.errors import ClusterStartError, ConfigError

if TYPE_CHECKING:
    from openclaw_dask.cluster.running import RunningCluster
    from openclaw_dask.config import Config

__all__ = ["FRACTION_ADVISED", "CudaBackend", "GpuPlan", "gpu_plan"]

logger = logging.getLogger("openclaw_dask.cluster")

FRACTION_ADVISED = 0.7  # the guide's advice: gpu_memory_fraction <= 0.7 per process
# A low bound on what one GPU streams (an H200 copied 4.2 TB/s in scripts/gpu-check.sh): auto
# chunks big enough that distributed's ~2.5 ms a task stays small beside the work.
GPU_STREAM_BYTES_PER_S = 1e12


@dataclass(frozen=True)
class GpuPlan:
    """What a cuda session would set up: devices, per-device byte limits, pool, transport."""

    devices: tuple[Device, ...]
    workers: int
    fraction: float
    pool: str | None  # "rmm", "cupy" or None
    protocol: str
    rdma: bool

    def limit(self, device: Device) -> int:
        """Bytes of ``device`` its worker may hold before spilling (and its pool's size)."""
        return int(self.fraction * device.memory_bytes)

    @property
    def used(self) -> tuple[Device, ...]:
        """The devices that get a worker: the first ``workers`` visible ones."""
        return self.devices[: self.workers]

    @property
    def pool_bytes(self) -> int:
        """One size for every worker's pool and spill threshold: the smallest device's limit (dask-cuda takes one value)."""
        return min(self.limit(d) for d in self.used)

    def short_of_memory(self, free: Mapping[int, int]) -> str | None:
        """Why an RMM pool cannot be made now, given each device's ``free`` bytes (pure); None if it can.

        RMM takes its whole pool when a worker starts, so a GPU that another process (or another
        session) holds would fail every worker's start; CuPy's pool only caps what it may take.
        """
        if self.pool != "rmm":
            return None
        for d in self.used:
            if d.index in free and free[d.index] < self.pool_bytes:
                return (f"GPU {d.index} has {_gb(free[d.index])} free, and its RMM pool would take {_gb(self.pool_bytes)} "
                        f"(gpu_memory_fraction {self.fraction:g} of {_gb(d.memory_bytes)}): another process holds "
                        "the rest (nvidia-smi lists it); lower parallel.gpu_memory_fraction or free the GPU")
        return None

    def describe(self) -> list[str]:
        """Lines for ``openclaw config show``: each device and the limits computed for it."""
        lines = []
        for d in self.used:
            pool = f"{self.pool} pool {_gb(self.pool_bytes)}" if self.pool else "no pool"
            lines.append(f"GPU {d.index} ({d.name}, {_gb(d.memory_bytes)}): {pool}, spill above "
                         f"{_gb(self.limit(d))} (gpu_memory_fraction {self.fraction:g})")
        return lines


def _gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB"


def gpu_plan(config: Config, info: GpuInfo, *, rmm: bool, ucx: bool) -> GpuPlan:
    """The :class:`GpuPlan` of ``config`` on the devices ``info`` lists (pure).

    Raises
    ------
    ConfigError
        No GPU, more workers than GPUs, or a transport that is not installed.
    """
    p = config.parallel
    devices = visible_devices(info.devices, config.gpu.devices)
    if not devices:
        raise ConfigError.at(config, "parallel.backend", info.none_found() if not info.devices else
                             "none of the GPUs is visible (gpu.devices / CUDA_VISIBLE_DEVICES)",
                             hint=f"this machine has GPUs {[d.index for d in info.devices]}" if info.devices else None)
    workers = len(devices) if p.workers == "auto" else p.workers
    if workers > len(devices):
        raise ConfigError.at(config, "parallel.workers", f"backend cuda runs one worker per GPU, and {len(devices)} "
                             "GPU(s) are visible", hint="set parallel.workers=auto or list more gpu.devices")
    wants_ucx = p.communication in ("ucx", "nccl") or p.rdma
    if wants_ucx and not ucx and (p.rdma or p.communication_strict):
        key = "parallel.rdma" if p.rdma else "parallel.communication"
        raise ConfigError.at(config, key, "needs UCX (distributed-ucxx), which is not installed",
                             hint="pip install distributed-ucxx-cu12, or set communication: tcp and rdma: false")
    pool = ("rmm" if rmm else "cupy") if p.memory_pooling else None
    return GpuPlan(devices, workers, p.gpu_memory_fraction, pool, "ucx" if wants_ucx and ucx else "tcp", p.rdma)


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


class CudaBackend(ProcessBackend):
    """``cuda``: a ``LocalCUDACluster`` on this machine's GPUs; arrays the session makes have CuPy chunks."""

    name = "cuda"
    # one task thread per GPU: no omp_threads, hybrid
    capabilities = Capabilities(prometheus=True, tls=True, gpu=True, local_memory=True)
    tasks_run_here = False  # its tasks run on a GPU worker's device and memory pool
    why_not = MappingProxyType({"resize": "backend cuda runs one worker per GPU: list the GPUs in gpu.devices instead"})
    requires = ("distributed", "dask_cuda", "cupy")
    extra = "cuda"
    array_backend = "cupy"

    def available(self, config: Config | None = None) -> None:
        """No GPU is the first thing to say (exit 2, what to check); then the missing packages."""
        info = discover()
        if not info.devices:
            raise ConfigError(f"backend cuda: {info.none_found()}", key="parallel.backend", value="cuda",
                              source=None if config is None else config.sources.get("parallel.backend"))
        super().available(config)

    def describe(self, config: Config) -> list[str]:
        if not discover().devices:
            return ["no GPU on this machine: the per-GPU limits are worked out where the cluster starts"]
        return self.gpu_plan(config).describe()

    def gpu_plan(self, config: Config) -> GpuPlan:
        return gpu_plan(config, discover(), rmm=_installed("rmm"), ucx=_installed("distributed_ucxx"))

    def check(self, config: Config) -> None:
        super().check(config)
        if not discover().devices:  # a config is checked anywhere; the GPUs are counted where it starts (available)
            return
        plan = self.gpu_plan(config)
        if plan.fraction > FRACTION_ADVISED:
            logger.warning("parallel.gpu_memory_fraction = %g is above the %g the guide advises per process: "
                           "little room is left for CUDA contexts and libraries", plan.fraction, FRACTION_ADVISED)

    def memory_workers(self, config: Config) -> int:
        return self.gpu_plan(config).workers  # one worker process per GPU

    def plan(self, config: Config) -> dict[str, Any]:
        """The ``LocalCUDACluster`` keyword arguments (nothing is started)."""
        gp = self.gpu_plan(config)
        kwargs = super().plan(config)
        kwargs.pop("processes")
        kwargs.update(
            CUDA_VISIBLE_DEVICES=",".join(str(d.index) for d in gp.used),
            n_workers=gp.workers,
            threads_per_worker=1,
            device_memory_limit=gp.pool_bytes,
            protocol=gp.protocol if kwargs["protocol"] != "tls" else "tls",
        )
        if gp.pool == "rmm":
            kwargs["rmm_pool_size"] = gp.pool_bytes
        if gp.protocol == "ucx":
            kwargs.update(enable_nvlink=True, enable_infiniband=gp.rdma, enable_rdmacm=gp.rdma)
        return kwargs

    def engine(self, config: Config) -> Engine:
        gp = self.gpu_plan(config)
        pool = f"{'an RMM' if gp.pool == 'rmm' else 'a CuPy'} pool of {_gb(gp.pool_bytes)} each" if gp.pool else "no memory pool"
        return Engine("distributed", f"backend cuda: {gp.workers} GPU worker(s), {pool}, spill above "
                      f"{_gb(gp.pool_bytes)}, {gp.protocol}", self.task_overhead_s,
                      stream_bytes_per_s=GPU_STREAM_BYTES_PER_S, max_chunk_bytes=gp.pool_bytes // 4)

    def dask_settings(self, config: Config) -> dict[str, Any]:
        settings = super().dask_settings(config)
        if config.parallel.batch_size is not None:
            # One task thread per GPU: the scheduler sends each worker at most batch_size root tasks
            # (chunks being made or read) at a time, so an array bigger than the device streams through it.
            settings["distributed.scheduler.worker-saturation"] = float(config.parallel.batch_size)
        return settings

    def worker_plugins(self, config: Config) -> list[Any]:
        from openclaw_dask.cluster.plugins import CupyPool

        gp = self.gpu_plan(config)
        plugins = super().worker_plugins(config)
        if gp.pool != "rmm":  # RMM's pool is dask-cuda's to set up (rmm_pool_size)
            plugins.append(CupyPool(gp.pool_bytes if gp.pool == "cupy" else None))
        return plugins

    def start(self, config: Config) -> RunningCluster:
        """Refuse, in one line, a pool the GPUs cannot hold now, before any worker tries and fails."""
        why = self.gpu_plan(config).short_of_memory(free_memory())
        if why:
            raise ClusterStartError(f"could not start the cuda cluster: {why}")
        return super().start(config)

    def cluster_class(self) -> Any:
        from dask_cuda import LocalCUDACluster

        return LocalCUDACluster
