"""Resizing a running session by hand (``Session.resize_workers``)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from openclaw_dask.cluster import running_of
from openclaw_dask.errors import ResizeError

if TYPE_CHECKING:
    from openclaw_dask.cluster import SessionLike

__all__ = ["Elastic", "ResizeResult"]

logger = logging.getLogger("openclaw_dask.elastic")


@dataclass(frozen=True)
class ResizeResult:
    """What :meth:`Session.resize_workers` changed."""

    before: int
    after: int
    seconds: float
    bytes_moved: int  # held by the retired workers, moved to the others before they closed


@dataclass
class Elastic:
    """Run-time resizing of one running cluster; sessions that borrow the cluster share it (and its cooldown)."""

    last_resize: float | None = None  # time.monotonic() of the last resize

    def resize(self, session: SessionLike, n: int, *, force: bool = False) -> ResizeResult:
        """Grow or shrink ``session``'s cluster to ``n`` workers, at run time (backends that can resize).

        Growing waits until the new workers have joined (up to ``parallel.timeout``).
        Shrinking retires workers gracefully: the data only they hold is moved to the
        others first, so it need not be recomputed. A call within ``elastic.cooldown`` of the
        previous resize is refused unless ``force=True``, because resizing moves data.

        Raises
        ------
        ResizeError
            Inside the cooldown, on a backend that cannot resize (thread, remote, mpi, serial),
            or while ``elastic.adaptive`` sizes the cluster.
        """
        self._check(session, n, force)
        held = session.client.run_on_scheduler(_bytes_per_worker)
        before = set(held)
        t0 = time.perf_counter()
        settled = running_of(session).scale(n)
        timeout = session.config.parallel.timeout
        deadline = time.monotonic() + timeout
        # also until the cluster agrees: a resize right after must not race the retired workers' shutdown
        while len(session.workers()) != n or not settled():
            if time.monotonic() > deadline:
                raise ResizeError(f"resize_workers({n}): the cluster has {len(session.workers())} workers after {timeout:g}s")
            time.sleep(0.05)
        after = set(session.workers())
        self.last_resize = time.monotonic()
        session.metrics.resized(n)
        result = ResizeResult(len(before), n, time.perf_counter() - t0, sum(held[a] for a in before - after))
        logger.info("resized %d -> %d workers in %.2fs, %d bytes moved off retired workers", result.before, n, result.seconds,
                    result.bytes_moved)
        return result

    def _check(self, session: SessionLike, n: int, force: bool) -> None:
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ResizeError(f"resize_workers({n!r}): the number of workers must be an integer >= 1")
        backend = session.backend
        if not backend.capabilities.resize or session.running is None or session.running.cluster is None:  # joined, not started
            from openclaw_dask.cluster.rules import able

            raise ResizeError(f"resize_workers({n}) refused: backend {backend.name} {backend.refusal('resize')}; "
                              f"use backend {able('resize')} to resize")
        if session.config.elastic.adaptive:
            raise ResizeError(f"resize_workers({n}) refused: elastic.adaptive is on and sizes the cluster itself; turn it off to resize by hand")
        cooldown = session.config.elastic.cooldown
        since = time.monotonic() - self.last_resize if self.last_resize is not None else None
        if since is not None and since < cooldown and not force:
            raise ResizeError(
                f"resize_workers({n}) refused: the last resize was {since:.0f}s ago and elastic.cooldown is {cooldown:g}s "
                f"(resizing moves data); wait {cooldown - since:.0f}s, pass force=True, or lower elastic.cooldown"
            )


def _bytes_per_worker(dask_scheduler: Any) -> dict[str, int]:
    return {ws.address: ws.nbytes for ws in dask_scheduler.workers.values()}
