"""Refuse a built-in workload whose input cannot fit, before it runs (it would pause, spill past its bound, or fail).

On a distributed engine the input fits when it fits in what the workers can hold before they
pause, plus what they may spill: per worker, distributed's pause fraction of its memory limit,
less the memory its process uses already (interpreter, libraries, data held from before) and
a chunk per task thread in flight; plus its share of ``cluster.max_spill`` in whole chunks
(a chunk bigger than that bound cannot be spilled at all). A worker at its pause fraction with
its spill bound reached waits for ever: :mod:`openclaw_dask.cluster.stall` ends such a run, and
this check refuses the runs that would surely get there.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from openclaw_dask.cluster.stall import configured_max_spill
from openclaw_dask.config.keys import MAX_SPILL, MEMORY_LIMIT, SIZE
from openclaw_dask.errors import ConfigError

if TYPE_CHECKING:
    from openclaw_dask.cluster import SessionLike

__all__ = ["FIT_SHARE", "Capacity", "capacity", "require_memory", "session_memory"]

FIT_SHARE = 0.8  # of a session's memory an input may take: distributed pauses a worker at 80% of its limit


@dataclass(frozen=True)
class Capacity:
    """What a session's workers can take: bytes in memory before they pause, and bytes they may spill.

    Attributes
    ----------
    workers
        How many workers were counted.
    limits
        Their memory limits together.
    memory
        Bytes of new data they can hold before they pause.
    used
        Bytes their processes use already (counted against ``memory``).
    spill
        Bytes they may spill to disk (whole chunks); 0 when spilling is off or unknown.
    max_spill
        Bytes each may spill (``cluster.max_spill`` per worker); ``None``: spilling off or unknown.
    pause
        The fraction of its limit at which a worker pauses.
    """

    workers: int
    limits: int
    memory: int
    used: int
    spill: int
    max_spill: int | None
    pause: float

    @property
    def total(self) -> int:
        """Bytes of new data that fit: in memory plus spilled."""
        return self.memory + self.spill


def capacity(workers: dict[str, dict[str, Any]], *, pause: float, max_spill: int | None, chunk: int = 0) -> Capacity:
    """The :class:`Capacity` of ``workers`` (``scheduler_info()["workers"]``), pure.

    Parameters
    ----------
    pause
        distributed's ``worker.memory.pause`` fraction (1.0 when pausing is off).
    max_spill
        Bytes each worker may spill; ``None``: none (spilling off, or not known).
    chunk
        Bytes of the input's biggest chunk: each task thread holds one in flight, and only
        whole chunks are spilled.
    """
    limits = memory = used = spill = 0
    for w in workers.values():
        limit, rss = w.get("memory_limit") or 0, (w.get("metrics") or {}).get("memory", 0)
        limits, used = limits + limit, used + rss
        memory += max(0, int(pause * limit) - rss - w.get("nthreads", 1) * chunk)
        if max_spill:
            spill += max_spill // chunk * chunk if chunk else max_spill
    return Capacity(len(workers), limits, memory, used, spill, max_spill, pause)


def session_memory(session: SessionLike) -> int | None:
    """Bytes ``session`` can hold: its workers' memory limits together, and no more than this
    machine has available where the tasks run in this process (a local engine has no limits);
    ``None`` when a worker elsewhere has no limit."""
    import psutil

    limits = [w.get("memory_limit") or 0 for w in session.workers().values()]
    total = sum(limits) if limits and all(limits) else None
    if session.backend.capabilities.in_process:
        available = psutil.virtual_memory().available
        return available if total is None else min(total, available)
    return total


def _session_capacity(session: SessionLike, chunk: int) -> Capacity | None:
    """The capacity of ``session``'s workers, or ``None`` without workers that all have a limit."""
    import dask

    workers = session.workers()
    if not workers or not all(w.get("memory_limit") for w in workers.values()):
        return None
    pause = dask.config.get("distributed.worker.memory").get("pause") or 1.0
    # The spill settings of workers openclaw started are this process's; a remote cluster's are its own: none counted.
    max_spill = configured_max_spill(session.backend.capabilities.owns_cluster)
    if max_spill is False:  # no bound: the spill folder's free disk
        max_spill = shutil.disk_usage(dask.config.get("temporary-directory") or "/tmp").free // len(workers)
    return capacity(workers, pause=pause, max_spill=max_spill, chunk=chunk)


def require_memory(session: SessionLike, nbytes: int, *, chunk: int = 0) -> None:
    """Refuse an input of ``nbytes`` (in chunks of at most ``chunk`` bytes) that cannot fit in ``session``.

    Raises
    ------
    ConfigError
        On ``workload.size``, naming the size, the memory, the spill bound and the fixes.
    """
    from dask.utils import format_bytes as fb

    room = _session_capacity(session, chunk)  # None on a local engine: no workers
    if room is None:
        memory = session_memory(session)
        if memory is not None and nbytes > FIT_SHARE * memory:
            raise ConfigError(
                f"{SIZE} = {fb(nbytes)} does not fit in memory: this session's {len(session.workers()) or 1} worker(s) "
                f"hold {fb(memory)}, {FIT_SHARE:.0%} of it usable ({fb(int(FIT_SHARE * memory))})",
                key=SIZE, hint=f"lower --size, add workers, or raise {MEMORY_LIMIT}",
            )
        return
    if nbytes <= room.total:
        return
    if room.spill:
        spill = f"and may spill {fb(room.spill)} ({MAX_SPILL})"
    elif room.max_spill:
        spill = f"and can spill no chunk of {fb(chunk)} ({MAX_SPILL}: {fb(room.max_spill)} per worker)"
    else:
        spill = "and spill nothing"
    raise ConfigError(
        f"{SIZE} = {fb(nbytes)} does not fit: this session's {room.workers} worker(s) have "
        f"{fb(room.limits)} of {MEMORY_LIMIT}, take {fb(room.memory)} before they pause "
        f"({room.pause:.0%} of it, less {fb(room.used)} their processes hold already and a chunk per thread) {spill}",
        key=SIZE, hint=f"lower --size, add workers, or raise {MEMORY_LIMIT} or {MAX_SPILL}",
    )
