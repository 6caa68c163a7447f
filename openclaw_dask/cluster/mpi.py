"""Backend ``mpi``: a Dask cluster on MPI ranks, through dask-mpi.

Two ways in:

* **launch** (a plain ``openclaw run`` or ``session(backend="mpi")``): openclaw starts
  ``mpiexec -n workers+1`` on this host itself. Rank 0 is the scheduler, ranks 1..N
  are workers, and the client is the calling process (so notebooks work).
* **join** (already started under ``mpirun``/``mpiexec``/``srun``, e.g. across hosts):
  dask-mpi's ``initialize``: rank 0 the scheduler, rank 1 the client that goes on
  with the program, every other rank a worker. Scheduler and worker ranks leave the
  program (exit 0) once the client shuts the cluster down.

MPI fixes the ranks when the job starts: a lost rank ends the whole job (the MPI
launcher kills the others), and ranks cannot be added or removed.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from openclaw_dask.cluster import shm
from openclaw_dask.cluster.base import Backend, Capabilities
from openclaw_dask.cluster.client import DistributedCluster, new_client
from openclaw_dask.cluster.network import bind_host, dashboard_on, http_address, interface_of, protocol
from openclaw_dask.cluster.plugins import BlasThreads
from openclaw_dask.cluster.running import RunningCluster
from openclaw_dask.cluster.scratch import max_spill, named_folder
from openclaw_dask.cluster.settings import dask_settings
from openclaw_dask.cluster.worker_shape import blas_env, blas_threads, task_threads, worker_processes
from openclaw_dask.errors import ClusterStartError, ConfigError

if TYPE_CHECKING:
    from openclaw_dask.config import Config

__all__ = ["MpiBackend", "MpiJob", "launch_command", "rank_environment"]

logger = logging.getLogger("openclaw_dask.cluster.mpi")

# (rank, size) variables of the launchers openclaw recognises
_RANK_VARS = (
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),  # Open MPI
    ("PMI_RANK", "PMI_SIZE"),  # MPICH hydra and gforker, Intel MPI
    ("PMIX_RANK", "PMIX_SIZE"),
    ("MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE"),  # MVAPICH
)


def rank_environment(env: os._Environ[str] | dict[str, str] | None = None) -> tuple[int, int] | None:
    """``(rank, size)`` when this process is an MPI rank, else ``None``."""
    env = os.environ if env is None else env
    for rank, size in _RANK_VARS:
        if rank in env and size in env:
            return int(env[rank]), int(env[size])
    if "SLURM_PROCID" in env and "SLURM_STEP_ID" in env and "SLURM_NTASKS" in env:  # inside srun, not just sbatch
        return int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"])
    return None


class MpiBackend(Backend):
    """``mpi``: scheduler and workers on MPI ranks (dask-mpi); ranks are fixed when the job starts."""

    name = "mpi"
    capabilities = Capabilities(worker_processes=True, shared_memory=True, socket_buffers=True)
    why_not = MappingProxyType({
        "resize": "runs on MPI ranks, and MPI fixes its ranks when mpirun starts (dask-mpi cannot add or remove one)",
        "prometheus": "the MPI scheduler runs in rank 0, where openclaw's metrics are not collected yet; use backend process, "
                      "or scrape rank 0's /metrics for distributed's own",
    })
    requires = ("mpi4py", "dask_mpi")
    extra = "mpi"

    def plan(self, config: Config) -> dict[str, Any]:
        """How the job is joined or launched: ranks, worker ranks, task threads per worker."""
        ranks = rank_environment()
        if ranks is not None:
            return {"mode": "join", "rank": ranks[0], "ranks": ranks[1], "workers": ranks[1] - 2, "threads": task_threads(config)}
        workers, threads = _shape(config)
        return {"mode": "launch", "ranks": workers + 1, "workers": workers, "threads": threads, "blas_threads": blas_threads(config)}

    def start(self, config: Config) -> RunningCluster:
        """Join the MPI job this process is a rank of, or launch one on this host."""
        ranks = rank_environment()
        return _join(self, config, *ranks) if ranks is not None else _launch(self, config)

    def worker_plugins(self, config: Config) -> list[Any]:
        return [*super().worker_plugins(config), BlasThreads(blas_threads(config))]


# -- shape -----------------------------------------------------------------------------


def _shape(config: Config) -> tuple[int, int]:
    """``(worker ranks, task threads per worker)`` of a job openclaw launches.

    ``mpi_shared_memory`` makes one worker of all the host's slots, so same-host
    tasks share memory instead of sending chunks over sockets; ``hybrid`` keeps one
    task thread per rank and gives the cores to BLAS/OpenMP instead.
    """
    workers, threads = worker_processes(config), task_threads(config)
    if config.parallel.mpi_shared_memory:
        return 1, workers * threads
    return workers, threads


# -- launch: openclaw starts mpiexec ------------------------------------------------------


def find_launcher() -> tuple[str, str]:
    """``(path, flavour)`` of the MPI launcher: the one beside this Python first (pip's mpich).

    MPICH's fork-only ``mpiexec.gforker`` is preferred on one host: unlike hydra's
    ``mpirun`` it opens no control port on every interface.
    """
    here = Path(sys.executable).parent
    for name in ("mpiexec.gforker", "mpirun", "mpiexec"):
        for path in (here / name, shutil.which(name)):
            if path and Path(path).is_file() and os.access(path, os.X_OK):
                return str(path), _flavour(str(path))
    raise ClusterStartError(
        "backend mpi found no mpiexec or mpirun beside this Python or on PATH; "
        "run: pip install 'openclaw-dask[mpi]' (brings MPICH), or load your MPI module"
    )


def _flavour(path: str) -> str:
    if path.endswith("gforker"):
        return "gforker"
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return "openmpi" if "Open MPI" in out or "OpenRTE" in out else "hydra" if "HYDRA" in out else "unknown"


def launch_command(launcher: str, flavour: str, ranks: int, iface: str) -> list[str]:
    """The launcher's command line for ``ranks`` local ranks bound to ``iface``."""
    cmd = [launcher, "-n", str(ranks)]
    if flavour == "hydra":
        cmd[1:1] = ["-launcher", "fork", "-iface", iface]
    elif flavour == "openmpi":
        cmd[1:1] = ["--oversubscribe", "--mca", "btl_tcp_if_include", iface, "--mca", "oob_tcp_if_include", iface]
    return cmd


def _launch(backend: MpiBackend, config: Config) -> RunningCluster:
    p = config.parallel
    workers, threads = _shape(config)
    host = bind_host(config)
    iface = interface_of(host)
    launcher, flavour = find_launcher()
    workdir = Path(tempfile.mkdtemp(prefix="openclaw-mpi-"))
    scheduler_file = workdir / "scheduler.json"
    # the ranks spill into the job's own folder (removed with it) unless the config names one
    spill = named_folder(config) or workdir
    spec = {
        "log_level": p.log_level,
        "dask": {**dask_settings(config), "distributed.worker.memory.max-spill": max_spill(config, spill)},
        "execute": {
            "scheduler_file": str(scheduler_file),
            "scheduler_port": 0,
            "interface": iface,
            "protocol": protocol(config, backend),
            "nthreads": threads,
            "memory_limit": config.cluster.memory_limit,
            "dashboard": dashboard_on(config, backend),
            "dashboard_address": http_address(config, host),
            "local_directory": str(spill),
        },
    }
    (workdir / "spec.json").write_text(json.dumps(spec))
    # The ranks import what this process can (as multiprocessing's spawn does for LocalCluster),
    # so tasks defined in the caller's modules unpickle there.
    path = os.pathsep.join(p for p in sys.path if p)
    env = {**os.environ, **blas_env(config), "UCX_NET_DEVICES": iface, "PYTHONPATH": path}
    if os.geteuid() == 0:
        # Open MPI refuses to run as root without both (the guide's advice); MPICH ignores them.
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cmd = [*launch_command(launcher, flavour, workers + 1, iface),
           sys.executable, "-m", "openclaw_dask.cluster.mpi_ranks", str(workdir / "spec.json")]
    logger.info("launching %d MPI ranks (1 scheduler + %d workers x %d threads): %s", workers + 1, workers, threads, " ".join(cmd))
    log = (workdir / "mpi.log").open("wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    job = MpiJob(proc, workdir, scheduler_file)
    try:
        client = job.connect(config, workers)
    except BaseException:
        job.close()
        raise
    return DistributedCluster(backend, config, client, job, shuts_down=True, watch=job.lost)


class MpiJob:
    """An ``mpiexec`` openclaw started: its process, log and scheduler file.

    The handle's client shuts the scheduler down first (the ranks then leave on their
    own); closing waits for that and kills the process group if they linger.
    """

    def __init__(self, proc: subprocess.Popen[bytes], workdir: Path, scheduler_file: Path) -> None:
        self.proc = proc
        self.workdir = workdir
        self.scheduler_file = scheduler_file
        self.address: str | None = None
        self.closing = False
        self.shm: frozenset[str] = frozenset()

    @property
    def log(self) -> str:
        try:
            return (self.workdir / "mpi.log").read_text(errors="replace")
        except OSError:
            return ""

    def connect(self, config: Config, workers: int) -> Any:

        timeout = config.parallel.timeout
        deadline = time.monotonic() + timeout
        while not (self.scheduler_file.exists() and self.scheduler_file.stat().st_size):
            if self.proc.poll() is not None:
                raise ClusterStartError(f"the MPI job ended before its scheduler started (exit {self.proc.returncode}): {_last_error(self.log)}")
            if time.monotonic() > deadline:
                raise ClusterStartError(f"the MPI scheduler did not start within {timeout:g}s (parallel.timeout); its log: {_last_error(self.log)}")
            time.sleep(0.05)
        self.address = json.loads(self.scheduler_file.read_text())["address"]
        try:
            client = new_client(self.address, timeout=timeout)
            client.wait_for_workers(workers, timeout=max(1.0, deadline - time.monotonic()))
        except (OSError, TimeoutError) as e:
            raise ClusterStartError(
                f"{workers} MPI worker rank(s) did not join {self.address} within {timeout:g}s ({type(e).__name__}); "
                f"raise parallel.timeout, or see: {_last_error(self.log)}"
            ) from None
        # the ranks' own shared memory, read before any task runs: a lost rank leaves it behind (cluster/shm.py)
        self.shm = shm.in_use(shm.family(self.proc.pid))
        return client

    def lost(self, wait: float = 10.0) -> str | None:
        """Why the job ended while in use, or ``None`` if it still runs after ``wait`` seconds.

        Called when the scheduler's connection is gone: the launcher takes a few seconds
        to stop the other ranks and report which one was lost.
        """
        if self.closing:
            return None
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(wait)
        if self.proc.returncode is None:
            return None
        return (f"the MPI job ended (exit {self.proc.returncode}; {_lost_rank(self.log)}), and an MPI job cannot replace a rank: "
                "run again (docs/deploy.md, MPI)")

    def close(self) -> None:
        if self.closing:
            return
        self.closing = True
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            logger.warning("MPI ranks still running 10s after shutdown; killing them")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        logger.debug("MPI job ended with %s; log in %s", self.proc.returncode, self.workdir)
        shutil.rmtree(self.workdir, ignore_errors=True)
        shm.remove_orphans(self.shm)


def _last_error(log: str) -> str:
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    errors = [ln for ln in lines if re.search(r"Error|error:|refused|cannot|not found", ln)]
    return (errors or lines or ["(no output)"])[-1][:400]


def _lost_rank(log: str) -> str:
    # gforker: "[0]2:Return code = 0, signaled with Killed"; hydra: "EXIT CODE: 9"
    signaled = re.findall(r"\[\d+\](\d+):Return code = \d+, signaled with (\w+)", log)
    # the others were stopped by the launcher itself (Quit, Interrupt)
    first = [(r, sig) for r, sig in signaled if sig not in ("Quit", "Interrupt")] or signaled
    if first:
        return f"rank {first[0][0]} was {first[0][1].lower()}"
    m = re.search(r"EXIT CODE: (\d+)", log)
    return f"a rank exited with code {m.group(1)}" if m else "a rank exited"


# -- join: this process is already a rank -------------------------------------------------


def _join(backend: MpiBackend, config: Config, rank: int, size: int) -> RunningCluster:
    from dask_mpi import initialize

    if size < 3:
        raise ConfigError(f"backend mpi under mpirun needs at least 3 ranks (scheduler, client, one worker), got {size}",
                          hint="run mpirun -n 3 or more")
    p = config.parallel
    if p.workers != "auto" and p.workers != size - 2:
        raise ConfigError.at(config, "parallel.workers", f"this MPI job has {size} ranks: {size - 2} workers beside the scheduler "
                             "and the client", hint=f"set parallel.workers=auto or run mpirun -n {p.workers + 2}")
    threads = task_threads(config)
    comm, workers, nthreads = None, size - 2, threads
    if p.mpi_shared_memory:
        comm, workers, nthreads = _fold_hosts(rank, threads)
        if comm is None:
            raise SystemExit(0)  # this host's worker rank runs this rank's threads
    host = bind_host(config)
    iface = p.network_interface or interface_of(host)
    os.environ.update(blas_env(config))
    # mpi4py finalises MPI at exit, after which the launcher may stop forwarding output:
    # flush before it (atexit runs the latest registration first).
    atexit.register(sys.stderr.flush)
    atexit.register(sys.stdout.flush)
    is_client = initialize(
        comm=comm,
        interface=iface,
        nthreads=nthreads,
        memory_limit=config.cluster.memory_limit,
        dashboard=dashboard_on(config, backend),
        dashboard_address=http_address(config, host),
        protocol=protocol(config, backend),
        exit=False,
    )
    if not is_client:
        # scheduler or worker rank: the cluster has shut down, this rank's work is done
        raise SystemExit(0)
    client = new_client(timeout=p.timeout)  # initialize put the address in dask.config
    client.wait_for_workers(workers, timeout=p.timeout)
    logger.info("joined MPI job of %d ranks as the client (rank %d)", size, rank)
    return DistributedCluster(backend, config, client, shuts_down=True)


def _fold_hosts(rank: int, threads: int) -> tuple[Any, int, int]:
    """``mpi_shared_memory`` under mpirun: one worker rank per host takes the threads of its others.

    Returns the communicator dask-mpi runs on (scheduler, client and one worker rank per
    host; ``None`` on a folded rank, which leaves), the number of workers, and this rank's
    task threads. Every rank must call it: the splits are collective.
    """
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    node = world.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
    here = sorted(r for r in node.allgather(rank) if r >= 2)  # this host's worker ranks
    node.Free()
    lead = bool(here) and rank == here[0]
    keep = rank < 2 or lead
    comm = world.Split(0 if keep else MPI.UNDEFINED, key=rank)
    workers = world.allreduce(int(lead))
    return (comm if keep else None), workers, threads * len(here) if lead else threads
