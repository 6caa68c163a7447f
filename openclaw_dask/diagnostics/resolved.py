"""What each ``auto`` of a config comes to on this machine, in words, for ``openclaw config show``.

Pure reads of the config, the backend's declared class and this machine (cores, memory, free
disk): nothing is started. A key is left out where its ``auto`` is decided elsewhere: by a
remote scheduler, the pods, the MPI ranks, or the GPUs of the machine the cluster starts on.
"""

from __future__ import annotations

import contextlib
import tempfile
from typing import TYPE_CHECKING

from dask.system import CPU_COUNT
from dask.utils import format_bytes

if TYPE_CHECKING:
    from openclaw_dask.cluster.base import Backend
    from openclaw_dask.config import Config

__all__ = ["resolved_autos"]


def resolved_autos(config: Config) -> dict[str, str]:
    """``{dotted key: what its auto means here}`` for the keys of ``config`` set to ``auto``."""
    from openclaw_dask.cluster.registry import declared_for

    backend = declared_for(config)
    out: dict[str, str] = {}
    local = backend.capabilities.local_memory
    if config.parallel.workers == "auto" and local and _count(config, backend):
        out["parallel.workers"] = _workers(config, backend)
    if config.parallel.engine == "auto":
        with contextlib.suppress(Exception):  # an engine that needs this machine's GPUs, say
            out["parallel.engine"] = str(backend.engine(config))
    if config.parallel.communication == "auto":
        from openclaw_dask.cluster.network import protocol

        out["parallel.communication"] = protocol(config, backend)
    if config.parallel.task_chunk_size.kind == "auto" and local and _count(config, backend):
        out["parallel.task_chunk_size"] = _chunks(config, backend)
    if config.cluster.dashboard == "auto":
        from openclaw_dask.cluster.network import dashboard_on

        out["cluster.dashboard"] = ("on" if dashboard_on(config, backend) else
                                    "off here; on in a Jupyter kernel, for a cluster in this process")
    out.update(_memory_and_disk(config, backend))
    if config.elastic.max_workers == "auto" and local:
        out["elastic.max_workers"] = f"{CPU_COUNT}: this machine's cores"
    return out


def _count(config: Config, backend: Backend) -> int | None:
    """How many workers a session would start here; None where that is decided where it starts (no GPU here)."""
    from openclaw_dask.errors import ConfigError

    try:
        return backend.memory_workers(config)
    except ConfigError:
        return None


def _workers(config: Config, backend: Backend) -> str:
    from openclaw_dask.cluster.plugins import task_threads

    if backend.capabilities.in_process:
        return f"{CPU_COUNT}: task threads in this process, one per core"
    n = backend.memory_workers(config)
    if backend.capabilities.gpu:
        return f"{n}: worker processes, one per visible GPU"
    return (f"{n}: worker processes of {task_threads(config)} task thread(s) each, "
            f"{CPU_COUNT} cores / omp_threads {config.parallel.omp_threads}")


def _slots(config: Config, backend: Backend) -> int:
    from openclaw_dask.cluster.plugins import task_threads

    if backend.capabilities.in_process:
        return CPU_COUNT if config.parallel.workers == "auto" else int(config.parallel.workers)
    return backend.memory_workers(config) * task_threads(config)


def _chunks(config: Config, backend: Backend) -> str:
    """The chunks auto gives the built-in workloads' ``workload.size`` of float64, and why."""
    from openclaw_dask.chunking import plan_chunks

    try:
        engine = backend.engine(config)
    except Exception:  # noqa: BLE001  (a GPU engine asked on a machine without one: decided where it runs)
        return "per array, where the cluster runs"
    size = int(config.workload.size)
    plan = plan_chunks((max(1, size // 8),), "float64", task_chunk_size=config.parallel.task_chunk_size,
                       slots=_slots(config, backend), task_overhead_s=engine.task_overhead_s,
                       stream_bytes_per_s=engine.stream_bytes_per_s, max_chunk_bytes=engine.max_chunk_bytes)
    return f"per array; for workload.size {format_bytes(size)}: {plan.n_chunks} x {format_bytes(plan.chunk_bytes)}, {plan.reason}"


def _memory_and_disk(config: Config, backend: Backend) -> dict[str, str]:
    """Each worker's memory limit, the spill folder and the spill bound, where the workers are on this machine."""
    from distributed.system import MEMORY_LIMIT

    from openclaw_dask.cluster.scratch import SPILL_SHARE, max_spill, named_folder

    out: dict[str, str] = {}
    c = config.cluster
    if not backend.capabilities.local_memory or not _count(config, backend):
        return out
    if c.memory_limit == "auto" and backend.capabilities.worker_processes:
        n = backend.memory_workers(config)  # distributed's LocalCluster: the machine's memory over its workers
        out["cluster.memory_limit"] = (f"{format_bytes(MEMORY_LIMIT // n)} a worker: this machine's "
                                       f"{format_bytes(MEMORY_LIMIT)} / {n} worker(s)")
    folder = named_folder(config)
    root = tempfile.gettempdir() if folder is None else str(folder)
    if c.local_directory == "auto":
        out["cluster.local_directory"] = f"a new {root}/openclaw-<pid>-* folder, removed when the session ends"
    if c.max_spill == "auto" and _spills(config, backend):
        out["cluster.max_spill"] = (f"{format_bytes(int(max_spill(config, root)))} a worker: {SPILL_SHARE:.0%} of the "
                                    f"free disk under {root}, shared by {backend.memory_workers(config)} worker(s)")
    return out


def _spills(config: Config, backend: Backend) -> bool:
    """Workers spill only on a distributed cluster: dask's threaded scheduler keeps everything in memory."""
    try:
        return backend.engine(config).distributed
    except Exception:  # noqa: BLE001  (an engine that needs this machine's GPUs: a cluster of workers)
        return True
