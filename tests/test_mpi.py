"""Backend mpi for real: MPICH from pip, dask-mpi, ranks on loopback."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

import openclaw_dask
from openclaw_dask.cluster.mpi import launch_command, rank_environment
from openclaw_dask.errors import ConfigError, RunError
from tests.conftest import BIN, openclaw

pytest.importorskip("mpi4py")
pytest.importorskip("dask_mpi")
psutil = pytest.importorskip("psutil")

pytestmark = pytest.mark.mpi
GFORKER = BIN / "mpiexec.gforker"


def _ranks(session) -> list[psutil.Process]:
    return psutil.Process(session.cluster.proc.pid).children(recursive=True)


def test_cli_launches_mpirun_itself_and_is_correct_without_tracebacks():
    r = openclaw("run", "array-sum", "--set", "parallel.backend=mpi", "--set", "parallel.workers=2",
                 "--set", "parallel.network_interface=lo", "--size", "64MiB")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "correct" in r.stdout and "mpi: 2 worker(s)" in r.stdout
    assert "Traceback" not in r.stdout + r.stderr


def test_session_has_one_rank_per_worker_plus_the_scheduler_all_on_loopback():
    with openclaw_dask.session(backend="mpi", workers=2) as s:
        assert len(s.workers()) == 2
        assert s.compute(s.array((2000, 500), fill="ones").sum()) == 1_000_000
        assert s.client.run_on_scheduler(lambda dask_scheduler: "is_rootish" in vars(dask_scheduler))  # cluster/placement.py
        ranks = [p for p in _ranks(s) if "openclaw_dask.cluster.mpi_ranks" in " ".join(p.cmdline())]
        assert len(ranks) == 3
        listening = [c.laddr for p in [psutil.Process(s.cluster.proc.pid), *_ranks(s)]
                     for c in p.net_connections("inet") if c.status == psutil.CONN_LISTEN]
        assert listening and all(a.ip == "127.0.0.1" for a in listening), listening
        # the ranks spill into the job's folder, bounded like local workers (cluster/scratch.py)
        spill = s.client.run(lambda dask_worker: (dask_worker.memory_manager.max_spill, dask_worker.local_directory))
        assert all(bound and str(s.cluster.workdir) in folder for bound, folder in spill.values()), spill
        job = s.cluster
    assert job.proc.returncode is not None  # the ranks left when the session closed


def test_a_lost_rank_ends_the_run_with_one_clear_error():
    import threading

    import dask.array as da

    before = set(Path("/dev/shm").glob("mpich_shm_*"))
    with openclaw_dask.session(backend="mpi", workers=2, timeout=20) as s:
        victim = min(s.client.run(os.getpid).values())
        x = da.ones((16, 1000), chunks=(1, 1000)).map_blocks(_slow, dtype=float, meta=np.empty((0, 0)))
        threading.Timer(1.0, _kill, (victim,)).start()
        t0 = time.monotonic()
        with pytest.raises(RunError, match=r"the MPI job ended .*rank \d+ was killed.*cannot replace a rank"):
            s.compute(x.sum())
        assert time.monotonic() - t0 < 15
    # the killed rank could not unlink MPICH's segment (3 MiB of memory): the session did (cluster/shm.py)
    assert not set(Path("/dev/shm").glob("mpich_shm_*")) - before


def _kill(pid):
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _slow(block):
    time.sleep(0.5)
    return block


def test_joins_an_mpirun_it_runs_under(tmp_path):
    # the user's own mpiexec: rank 0 scheduler, rank 1 the CLI (client), ranks 2-3 workers
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENCLAW_")} | {"UCX_NET_DEVICES": "lo"}
    r = subprocess.run([str(GFORKER), "-n", "4", str(BIN / "openclaw"), "run", "array-sum", "--json",
                        "--set", "parallel.backend=mpi", "--size", "32MiB"],
                       capture_output=True, text=True, timeout=90, env=env, cwd=tmp_path, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)  # only the client rank prints
    assert out["ok"] and out["backend"] == "mpi" and out["workers"] == 2
    assert "Traceback" not in r.stderr


def test_shared_memory_under_your_mpirun_folds_a_hosts_worker_ranks_into_one(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENCLAW_")} | {"UCX_NET_DEVICES": "lo"}
    r = subprocess.run([str(GFORKER), "-n", "5", str(BIN / "openclaw"), "run", "array-sum", "--json",
                        "--set", "parallel.backend=mpi", "--set", "parallel.mpi_shared_memory=true", "--size", "32MiB"],
                       capture_output=True, text=True, timeout=90, env=env, cwd=tmp_path, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert out["ok"] and (out["workers"], out["threads"]) == (1, 3)  # ranks 2-4 on one host: one worker


def test_joining_with_the_wrong_worker_count_is_a_config_error(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENCLAW_")} | {"UCX_NET_DEVICES": "lo"}
    r = subprocess.run([str(GFORKER), "-n", "3", str(BIN / "openclaw"), "run", "array-sum",
                        "--set", "parallel.backend=mpi", "--set", "parallel.workers=4"],
                       capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path, check=False)
    assert "this MPI job has 3 ranks: 1 workers" in r.stderr and "mpirun -n 6" in r.stderr
    assert "Traceback" not in r.stderr


def test_rank_environment_of_each_launcher():
    assert rank_environment({}) is None
    assert rank_environment({"PMI_RANK": "1", "PMI_SIZE": "4"}) == (1, 4)
    assert rank_environment({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "3"}) == (0, 3)
    assert rank_environment({"SLURM_PROCID": "0", "SLURM_NTASKS": "8"}) is None  # sbatch script, not srun
    assert rank_environment({"SLURM_PROCID": "2", "SLURM_NTASKS": "8", "SLURM_STEP_ID": "0"}) == (2, 8)


def test_launch_command_keeps_each_launcher_on_the_interface():
    assert launch_command("/x/mpiexec.gforker", "gforker", 3, "lo") == ["/x/mpiexec.gforker", "-n", "3"]
    assert launch_command("mpirun", "hydra", 3, "lo") == ["mpirun", "-launcher", "fork", "-iface", "lo", "-n", "3"]
    cmd = launch_command("mpirun", "openmpi", 3, "eth1")
    assert "--oversubscribe" in cmd and cmd[cmd.index("btl_tcp_if_include") + 1] == "eth1"


def test_mpi_refuses_resize_and_prometheus():
    with pytest.raises(ConfigError, match="monitoring.prometheus"):
        openclaw_dask.session(backend="mpi", prometheus=True)
    with openclaw_dask.session(backend="mpi", workers=1) as s, pytest.raises(openclaw_dask.ResizeError, match="MPI fixes its ranks"):
        s.resize_workers(2, force=True)


# -- hybrid and shared memory -----------------------------------------------------------


def _blas_threads(_):
    import numpy  # noqa: F401  (loads the BLAS whose pool is read)
    from threadpoolctl import threadpool_info

    return sorted({p["num_threads"] for p in threadpool_info()})


@pytest.mark.parametrize("backend", ["process", "mpi"])
@pytest.mark.parametrize(("hybrid", "expected"), [(True, [2]), (False, [1])])
def test_hybrid_gives_each_worker_omp_threads_blas_threads_and_one_task_thread(backend, hybrid, expected):
    with openclaw_dask.session(backend=backend, workers=1, hybrid=hybrid, omp_threads=2) as s:
        assert s.client.submit(_blas_threads, 0, pure=False).result() == expected
        assert [w["nthreads"] for w in s.workers().values()] == ([1] if hybrid else [2])


def _tcp_bytes_in(dask_worker) -> int:
    return sum(t["total"] for t in dask_worker.transfer_incoming_log)


@pytest.mark.parametrize(("shared", "workers_seen"), [(False, 2), (True, 1)])
def test_shared_memory_makes_same_host_transfers_vanish(shared, workers_seen):
    with openclaw_dask.session(backend="mpi", workers=2, mpi_shared_memory=shared) as s:
        assert len(s.workers()) == workers_seen
        x = s.array((2000, 2000), fill="arange", chunks=(500, 2000))
        assert s.compute((x + x.T).sum()) == pytest.approx(2 * (2000 * 2000 - 1) * 2000 * 2000 / 2)
        moved = sum(s.client.run(_tcp_bytes_in).values())
        assert (moved == 0) if shared else (moved > 0)
        assert sum(w["nthreads"] for w in s.workers().values()) == 2


def test_mpi_shared_memory_needs_backend_mpi():
    with pytest.raises(ConfigError, match="applies to backend mpi"):
        openclaw_dask.session(backend="process", mpi_shared_memory=True)
