"""Resizing a running session by hand (``Session.resize_workers``)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from openclaw_dask.errors import ResizeError

__all__ = ["ResizeResult", "resize"]

logger = logging.getLogger("openclaw_dask.elastic")


@dataclass(frozen=True)
class ResizeResult:
    """What :meth:`Session.resize_workers` changed."""

    before: int
    after: int
    seconds: float
    bytes_moved: int  # held by the retired workers, moved to the others before they closed


def resize(session: Any, n: int, *, force: bool = False) -> ResizeResult:
    """Resize ``session`` to ``n`` workers; see :meth:`openclaw_dask.Session.resize_workers`."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ResizeError(f"resize_workers({n!r}): the number of workers must be an integer >= 1")
    backend = session.config.parallel.backend if session.config.parallel.enabled else "serial"
    if backend != "process" or session._handle is None or session._handle.cluster is None:
        why = {"thread": "runs one in-process worker (change parallel.workers instead)",
               "remote": "belongs to whoever started dask scheduler and dask worker (start or stop workers there)",
               "mpi": "runs on MPI ranks, and MPI fixes its ranks when mpirun starts (dask-mpi cannot add or remove one)",
               "serial": "has no cluster"}.get(backend, "cannot be resized")
        raise ResizeError(f"resize_workers({n}) refused: backend {backend} {why}; use backend process to resize")
    if session.config.elastic.adaptive:
        raise ResizeError(f"resize_workers({n}) refused: elastic.adaptive is on and sizes the cluster itself; turn it off to resize by hand")
    handle, cooldown = session._handle, session.config.elastic.cooldown
    since = time.monotonic() - handle.last_resize if handle.last_resize is not None else None
    if since is not None and since < cooldown and not force:
        raise ResizeError(
            f"resize_workers({n}) refused: the last resize was {since:.0f}s ago and elastic.cooldown is {cooldown:g}s "
            f"(resizing moves data); wait {cooldown - since:.0f}s, pass force=True, or lower elastic.cooldown"
        )
    held = session.client.run_on_scheduler(_bytes_per_worker)
    before = set(held)
    t0 = time.perf_counter()
    leaving = list(handle.cluster.worker_spec)[n:]  # scale() drops the newest specs first
    if leaving:
        # SpecCluster.scale asks the scheduler to retire workers by *name* where it wants addresses
        # (dask/distributed#4069), so nothing would move first: retire them here, by name.
        session.client.retire_workers(names=leaving)
    handle.cluster.scale(n)
    deadline = time.monotonic() + session.config.parallel.timeout
    # also until the cluster has closed the retired nannies: a resize right after must not race them
    while len(session.workers()) != n or len(handle.cluster.workers) != n:
        if time.monotonic() > deadline:
            raise ResizeError(f"resize_workers({n}): the cluster has {len(session.workers())} workers after {session.config.parallel.timeout:g}s")
        time.sleep(0.05)
    after = set(session.workers())
    handle.last_resize = time.monotonic()
    session.metrics.resized(n)
    result = ResizeResult(len(before), n, time.perf_counter() - t0, sum(held[a] for a in before - after))
    logger.info("resized %d -> %d workers in %.2fs, %d bytes moved off retired workers", result.before, n, result.seconds, result.bytes_moved)
    return result


def _bytes_per_worker(dask_scheduler: Any) -> dict[str, int]:
    return {ws.address: ws.nbytes for ws in dask_scheduler.workers.values()}
