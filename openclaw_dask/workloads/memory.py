"""Refuse a built-in workload whose input cannot fit, before it runs (it would spill, pause or fail)."""

from __future__ import annotations

from typing import Any

from openclaw_dask.errors import ConfigError

__all__ = ["FIT_SHARE", "require_memory", "session_memory"]

FIT_SHARE = 0.8  # of a session's memory an input may take: distributed pauses a worker at 80% of its limit


def session_memory(session: Any) -> int | None:
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


def require_memory(session: Any, nbytes: int) -> None:
    """Refuse an input of ``nbytes`` that does not fit in ``session``'s memory (:func:`session_memory`).

    Raises
    ------
    ConfigError
        On ``workload.size``, naming the size, the memory and the fixes.
    """
    from dask.utils import format_bytes

    memory = session_memory(session)
    if memory is not None and nbytes > FIT_SHARE * memory:
        workers = len(session.workers()) or 1
        raise ConfigError(
            f"workload.size = {format_bytes(nbytes)} does not fit in memory: this session's {workers} worker(s) hold "
            f"{format_bytes(memory)}, {FIT_SHARE:.0%} of it usable ({format_bytes(int(FIT_SHARE * memory))})",
            key="workload.size", hint="lower --size, add workers, or raise cluster.memory_limit",
        )
