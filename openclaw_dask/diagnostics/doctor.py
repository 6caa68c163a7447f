"""``openclaw doctor``: the guide's troubleshooting checklist, run against this machine and a config.

Each check returns :class:`Check` rows: ``ok``, ``warn`` or ``fail``, what it found, and the fix.
They look (cores, memory, disk, MPI, GPUs, interfaces, TLS files, versions) and try what can be
tried safely: binding the scheduler's port on the configured interface and connecting to it,
and starting and stopping the configured backend on loopback.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import ssl
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import psutil

from openclaw_dask.config.keys import LOCAL_DIRECTORY, MAX_SPILL, MEMORY_LIMIT, SCHEDULER_ADDRESS, WORKERS

__all__ = ["GUIDE_WORKER_MEMORY", "Check", "DoctorReport", "doctor"]

GUIDE_WORKER_MEMORY = 2 * 10**9  # the guide: about 2 GB per worker process
EXTRAS = {  # distribution -> the openclaw-dask extra that brings it
    "mpi4py": "mpi", "dask-mpi": "mpi", "dask-cuda": "cuda", "cupy-cuda12x": "cuda", "cupy-cuda13x": "cuda",
    "nvidia-ml-py": "cuda", "rmm-cu12": "cuda", "distributed-ucxx-cu12": "cuda", "dask-kubernetes": "k8s", "kr8s": "k8s",
    "ipykernel": "notebook", "ipywidgets": "notebook",
    "asyncssh": "ssh", "dask-jobqueue": "slurm", "prometheus-client": "monitoring", "zarr": "io", "h5py": "io", "cryptography": "tls", "joblib": "bench",
}


@dataclass(frozen=True)
class Check:
    """One finding: its area, ``ok`` / ``warn`` / ``fail``, what was found, and what to do."""

    area: str
    status: str
    found: str
    fix: str = ""


@dataclass(frozen=True)
class DoctorReport:
    """Every check's rows; ``ok`` when none failed."""

    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return all(c.status != "fail" for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "checks": [asdict(c) for c in self.checks]}


def _gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB"


def _backend(config: Any) -> Any:
    """The backend the config names, as declared: doctor reports what this machine lacks instead of refusing."""
    from openclaw_dask.cluster.registry import declared

    return declared(config.parallel.backend)


def check_cores(config: Any) -> list[Check]:
    from openclaw_dask.cluster.worker_shape import blas_threads, task_threads, worker_processes

    physical, logical = psutil.cpu_count(logical=False) or 1, psutil.cpu_count() or 1
    p = config.parallel
    if _backend(config).capabilities.worker_processes:
        procs, per = worker_processes(config), max(task_threads(config), blas_threads(config))
        demand, what = procs * per, f"{procs} worker process(es) x {per} thread(s)"
    else:
        demand = logical if p.workers == "auto" else p.workers
        what = f"{demand} task thread(s)"
    found = f"{what} = {demand} on {physical} physical / {logical} logical cores"
    if demand > logical:
        return [Check("cores", "warn", f"oversubscribed: {found}",
                      f"lower {WORKERS} so workers x threads x omp_threads <= {logical} (lscpu shows the cores)")]
    return [Check("cores", "ok", found)]


def check_memory(config: Any) -> list[Check]:
    from openclaw_dask.cluster.scratch import named_folder
    from openclaw_dask.cluster.worker_shape import worker_processes

    vm = psutil.virtual_memory()
    procs = worker_processes(config) if _backend(config).capabilities.worker_processes else 1
    limit = vm.total / procs if config.cluster.memory_limit == "auto" else config.cluster.memory_limit
    rows = []
    found = f"{_gb(limit)} per worker process x {procs} (memory_limit {config.cluster.memory_limit}); {_gb(vm.available)} of {_gb(vm.total)} available"
    if limit * procs > vm.total:
        rows.append(Check("memory", "fail", f"workers may hold more than the machine has: {found}",
                          f"lower {MEMORY_LIMIT} or {WORKERS}"))
    elif limit < GUIDE_WORKER_MEMORY:
        rows.append(Check("memory", "warn", f"under the ~2 GB per worker the guide advises: {found}",
                          f"fewer, bigger worker processes ({WORKERS}), or more memory"))
    else:
        rows.append(Check("memory", "ok", found))
    folder = str(named_folder(config) or tempfile.gettempdir())
    free = shutil.disk_usage(folder if os.path.isdir(folder) else os.path.dirname(folder) or ".").free
    status = "warn" if free < GUIDE_WORKER_MEMORY else "ok"
    rows.append(Check("disk", status, f"{_gb(free)} free for spilling in {folder} ({MAX_SPILL} {config.cluster.max_spill})",
                      f"free space there or set {LOCAL_DIRECTORY} to a bigger disk" if status == "warn" else ""))
    return rows


def check_mpi(config: Any) -> list[Check]:
    from openclaw_dask.cluster.mpi import find_launcher
    from openclaw_dask.errors import ClusterStartError

    needed = "mpi4py" in _backend(config).requires
    try:
        path, flavour = find_launcher()
        rows = [Check("mpi", "ok", f"launcher {path} ({flavour})")]
    except ClusterStartError as e:
        rows = [Check("mpi", "fail" if needed else "ok", str(e).partition(";")[0] + ("" if needed else " (backend is not mpi)"),
                      "pip install 'openclaw-dask[mpi]' (MPICH from pip), or add your MPI's bin to PATH" if needed else "")]
    if importlib.util.find_spec("mpi4py") is None:
        return rows if not needed else [*rows, Check("mpi", "fail", "mpi4py is not installed", "pip install 'openclaw-dask[mpi]'")]
    try:
        import mpi4py

        mpi4py.rc.initialize = False  # load the library, start nothing
        from mpi4py import MPI

        library = MPI.Get_library_version().splitlines()[0].strip()
        rows.append(Check("mpi", "ok", f"MPI library loads: {library}"))
    except Exception as e:  # noqa: BLE001  (a broken MPI install is what this check is for)
        return [*rows, Check("mpi", "fail" if needed else "warn", f"the MPI library does not load ({type(e).__name__}: {e})",
                             "check LD_LIBRARY_PATH points at the MPI that built mpi4py")]
    if os.geteuid() == 0 and "Open MPI" in library and not os.environ.get("OMPI_ALLOW_RUN_AS_ROOT"):
        rows.append(Check("mpi", "warn", "running as root with Open MPI, and OMPI_ALLOW_RUN_AS_ROOT is not set",
                          "export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"))
    return rows


def check_gpu(config: Any) -> list[Check]:
    from openclaw_dask.cluster.gpu import cupy_version, discover

    backend = _backend(config)
    needed = backend.capabilities.gpu
    info = discover()
    if not info.devices:
        return [Check("gpu", "fail" if needed else "ok", info.none_found() if needed else "no NVIDIA GPU (none needed)",
                      "see docs/gpu.md" if needed else "")]
    devices = ", ".join(f"{d.index}: {d.name} {_gb(d.memory_bytes)}" for d in info.devices)
    rows = [Check("gpu", "ok", f"{devices}; driver {info.driver}, CUDA {info.cuda or '?'} ({info.source})")]
    cupy = cupy_version()
    rows.append(Check("gpu", "ok" if cupy else ("fail" if needed else "warn"), cupy or "CuPy is not installed",
                      "" if cupy else "pip install 'openclaw-dask[cuda]'"))
    if needed:
        try:
            rows += [Check("gpu", "ok", line) for line in backend.describe(config)]
        except Exception as e:  # noqa: BLE001  (a refusal: shown as the check's finding)
            rows.append(Check("gpu", "fail", str(e)))
    return rows


def check_network(config: Any) -> list[Check]:
    from openclaw_dask.cluster.network import bind_host
    from openclaw_dask.errors import ConfigError

    p, rows = config.parallel, []
    if p.communication in ("ucx", "nccl") or p.rdma:
        ucx = importlib.util.find_spec("distributed_ucxx") is not None
        rows.append(Check("comms", "ok" if ucx else ("fail" if p.rdma or p.communication_strict else "warn"),
                          f"UCX {'installed' if ucx else 'is not installed'} (communication {p.communication})",
                          "" if ucx else "pip install distributed-ucxx-cu12, or communication: tcp (falls back to tcp otherwise)"))
    try:
        host = bind_host(config)  # the address a session binds: the interface's, or cluster.host
    except ConfigError as e:
        rows.append(Check("interface", "fail", f"network interface {p.network_interface}: {e.message} (no port check "
                          "without it)", e.hint or ""))
        return rows + _tls_check(config)
    if p.network_interface is not None:
        rows.append(Check("interface", "ok", f"{p.network_interface} has address {host}"))
    rows.append(_port_check(config, host))
    return rows + _tls_check(config)


def _port_check(config: Any, host: str) -> Check:
    address = config.cluster.scheduler_address
    # the port a scheduler of ours would take; a remote scheduler's port is someone else's (already bound)
    port = int(address.rpartition(":")[2]) if address and _backend(config).capabilities.owns_cluster else 0
    try:
        with socket.socket() as server, socket.socket() as client:
            server.bind((host, port))
            server.listen(1)
            client.settimeout(2)
            client.connect(server.getsockname())
            bound = server.getsockname()[1]
    except OSError as e:
        return Check("port", "fail", f"cannot bind and connect to {host}:{port} ({e.strerror or e})",
                     f"free the port, pick another in {SCHEDULER_ADDRESS}, or open the firewall on that interface")
    return Check("port", "ok", f"bound and connected to {host}:{bound}" + ("" if port else " (a free port)"))


def _tls_check(config: Any) -> list[Check]:
    s = config.security
    if s.cert_file is None:
        return [Check("tls", "ok", "temporary certificates (made in memory)" if s.temporary_certificates else "no TLS configured")]
    cert, key, ca = (config.resolve_path(f"security.{k}") for k in ("cert_file", "key_file", "ca_file"))
    try:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(cert), None if key is None else str(key))
        if ca is not None:
            ctx.load_verify_locations(str(ca))
    except (OSError, ssl.SSLError) as e:
        return [Check("tls", "fail", f"the certificate files do not load together ({e})",
                      "check the paths are readable and the key belongs to the certificate")]
    return [Check("tls", "ok", f"certificate {cert} and its key match" + (f"; CA {ca} readable" if ca else ""))]


def check_ssh(config: Any) -> list[Check]:
    """Backend ssh: each host logs this user in with the configured key, and its Python imports openclaw_dask and distributed."""
    if not _backend(config).capabilities.ssh:
        return []
    if importlib.util.find_spec("asyncssh") is None:
        return [Check("ssh", "fail", "backend ssh needs asyncssh, which is not installed", "pip install 'openclaw-dask[ssh]'")]
    from openclaw_dask.cluster.ssh import probe_each
    from openclaw_dask.errors import ConfigError

    try:
        results = probe_each(config)
    except ConfigError as e:
        return [Check("ssh", "fail", str(e))]
    return [Check("ssh", "ok", f"{host}: logged in; {host.python} imports openclaw_dask and distributed ({r} cores)")
            if isinstance(r, int) else Check("ssh", "fail", r.partition("; ")[0], r.partition("; ")[2]) for host, r in results]


def check_slurm(config: Any) -> list[Check]:
    """Backend slurm: Slurm's commands, its controller (``sinfo``), the partition, munge."""
    if not _backend(config).capabilities.jobs:
        return []
    if importlib.util.find_spec("dask_jobqueue") is None:
        return [Check("slurm", "fail", "backend slurm needs dask-jobqueue, which is not installed", "pip install 'openclaw-dask[slurm]'")]
    from openclaw_dask.cluster.slurm import probe

    return [Check("slurm", status, found, fix) for status, found, fix in probe(config)]


def check_software(config: Any) -> list[Check]:
    def ver(dist: str) -> str | None:
        try:
            return version(dist)
        except PackageNotFoundError:
            return None

    core = ", ".join(f"{d} {ver(d)}" for d in ("dask", "distributed", "numpy"))
    extras = ", ".join(f"{d} {v} [{e}]" for d, e in EXTRAS.items() if (v := ver(d)))
    return [Check("software", "ok", core), Check("software", "ok", f"extras: {extras or 'none installed'}")]


def check_startup(config: Any) -> list[Check]:
    from openclaw_dask.session import Session

    t0 = time.perf_counter()
    try:
        with Session(config).start() as s:
            engine, workers = str(s.engine), len(s.workers()) or 1
    except Exception as e:  # noqa: BLE001  (why the backend cannot start is the finding)
        return [Check("start-up", "fail", f"backend {config.parallel.backend} did not start: {type(e).__name__}: {e}",
                      "fix the failed checks above; `openclaw config show` lists the settings")]
    return [Check("start-up", "ok", f"backend {config.parallel.backend} started and stopped in "
                  f"{time.perf_counter() - t0:.1f} s: {workers} worker(s), {engine}")]


CHECKS: tuple[Callable[[Any], list[Check]], ...] = (
    check_cores, check_memory, check_mpi, check_gpu, check_network, check_ssh, check_slurm, check_software, check_startup,
)


def doctor(config: Any) -> DoctorReport:
    """Run every check against ``config`` on this machine."""
    return DoctorReport(tuple(row for check in CHECKS for row in check(config)))
