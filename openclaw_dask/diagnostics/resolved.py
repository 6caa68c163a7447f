"""What each ``auto`` of a config comes to on this machine, in words, for ``openclaw config show``.

Pure reads of the config, the backend's declared class and this machine (cores, memory, free
disk): nothing is started. A key is left out where its ``auto`` is decided elsewhere: by a
remote scheduler, the pods, the MPI ranks, or the GPUs of the machine the cluster starts on.
"""

from __future__ import annotations

import tempfile
from typing import TYPE_CHECKING

from dask.system import CPU_COUNT
from dask.utils import format_bytes

if TYPE_CHECKING:
    from openclaw_dask.cluster.base import Backend, Engine
    from openclaw_dask.config import Config

__all__ = ["resolved_autos"]


def resolved_autos(config: Config) -> dict[str, str]:
    """``{dotted key: what its auto means here}`` for the keys of ``config`` set to ``auto``."""
    from openclaw_dask.cluster.registry import declared_for

    backend = declared_for(config)
    out: dict[str, str] = {}
    local = backend.capabilities.local_memory
    n = _count(config, backend) if local else None  # workers on this machine; None: counted where they start
    engine = _engine(config, backend)
    if config.parallel.workers == "auto" and n:
        out["parallel.workers"] = _workers(config, backend, n)
    if config.parallel.engine == "auto" and engine is not None:
        out["parallel.engine"] = str(engine)
    if config.parallel.communication == "auto":
        from openclaw_dask.cluster.network import protocol

        out["parallel.communication"] = protocol(config, backend)
    if config.parallel.task_chunk_size.kind == "auto" and n:
        out["parallel.task_chunk_size"] = _chunks(config, backend, n, engine)
    if config.cluster.dashboard == "auto":
        from openclaw_dask.cluster.network import dashboard_on

        out["cluster.dashboard"] = ("on" if dashboard_on(config, backend) else
                                    "off here; on in a Jupyter kernel, for a cluster in this process")
    if n:
        out.update(_memory_and_disk(config, backend, n, engine))
    if config.elastic.max_workers == "auto" and local:
        out["elastic.max_workers"] = f"{CPU_COUNT}: this machine's cores"
    return out


def _engine(config: Config, backend: Backend) -> Engine | None:
    """What runs the session's graphs; None where it cannot be told here (a GPU engine on a machine without one)."""
    try:
        return backend.engine(config)
    except Exception:  # noqa: BLE001  (a GPU plan raises ConfigError without a GPU; any backend's own check may too)
        return None


def _count(config: Config, backend: Backend) -> int | None:
    """How many workers a session would start here; None where that is decided where it starts (no GPU here)."""
    from openclaw_dask.errors import ConfigError

    try:
        return backend.memory_workers(config)
    except ConfigError:
        return None


def _workers(config: Config, backend: Backend, n: int) -> str:
    from openclaw_dask.cluster.worker_shape import task_threads

    if backend.capabilities.in_process:
        return f"{CPU_COUNT}: task threads in this process, one per core"
    if backend.capabilities.gpu:
        return f"{n}: worker processes, one per visible GPU"
    return (f"{n}: worker processes of {task_threads(config)} task thread(s) each, "
            f"{CPU_COUNT} cores / omp_threads {config.parallel.omp_threads}")


def _slots(config: Config, backend: Backend, n: int) -> int:
    from openclaw_dask.cluster.worker_shape import task_threads

    if backend.capabilities.in_process:
        return CPU_COUNT if config.parallel.workers == "auto" else int(config.parallel.workers)
    return n * task_threads(config)


def _chunks(config: Config, backend: Backend, n: int, engine: Engine | None) -> str:
    """The chunks auto gives the built-in workloads' ``workload.size`` of float64, and why."""
    from openclaw_dask.chunking import plan_chunks

    if engine is None:
        return "per array, where the cluster runs"
    size = int(config.workload.size)
    plan = plan_chunks((max(1, size // 8),), "float64", task_chunk_size=config.parallel.task_chunk_size,
                       slots=_slots(config, backend, n), task_overhead_s=engine.task_overhead_s,
                       stream_bytes_per_s=engine.stream_bytes_per_s, max_chunk_bytes=engine.max_chunk_bytes)
    return f"per array; for workload.size {format_bytes(size)}: {plan.n_chunks} x {format_bytes(plan.chunk_bytes)}, {plan.reason}"


def _memory_and_disk(config: Config, backend: Backend, n: int, engine: Engine | None) -> dict[str, str]:
    """Each worker's memory limit, the spill folder and the spill bound, where the workers are on this machine."""
    from distributed.system import MEMORY_LIMIT

    from openclaw_dask.cluster.scratch import SPILL_SHARE, max_spill, named_folder, spills

    out: dict[str, str] = {}
    c = config.cluster
    if c.memory_limit == "auto" and backend.capabilities.worker_processes:  # LocalCluster: memory over its workers
        out["cluster.memory_limit"] = (f"{format_bytes(MEMORY_LIMIT // n)} a worker: this machine's "
                                       f"{format_bytes(MEMORY_LIMIT)} / {n} worker(s)")
    folder = named_folder(config)
    root = tempfile.gettempdir() if folder is None else str(folder)
    if c.local_directory == "auto":
        out["cluster.local_directory"] = f"a new {root}/openclaw-<pid>-* folder, removed when the session ends"
    if c.max_spill == "auto" and spills(engine):
        out["cluster.max_spill"] = (f"{format_bytes(int(max_spill(config, root)))} a worker: {SPILL_SHARE:.0%} of the "
                                    f"free disk under {root}, shared by {n} worker(s)")
    return out
