"""End a distributed run that cannot proceed: workers paused near their memory limit, spill bound reached, nothing moving.

A distributed worker whose process memory passes ``distributed.worker.memory.pause`` (80% of
``cluster.memory_limit``) stops taking tasks until its memory drops. Spilling brings it down;
but once ``cluster.max_spill`` is reached, distributed keeps the data in memory ("Spill file on
disk reached capacity"), the worker stays paused, and a compute waiting on it waits for ever.

:class:`StallWatch` polls the scheduler (``scheduler_info``, so it works for a remote scheduler
too) from a thread while a run waits. A run is *stalled* while at least one worker is paused,
no worker executes a task, and nothing changes on any worker (task states, data held or
spilled, transfers). Once that has lasted ``parallel.timeout``, the watch cancels the futures
the run waits for and the wait ends in one :class:`~openclaw_dask.errors.RunError` line naming
the limit that stopped it (``cluster.memory_limit``, ``cluster.max_spill``) and the key to
change. A long task, a worker paused for a moment, or a slow but moving run is never stopped.

A run also stalls, paused or not, where nothing moves and tasks wait that may run only on workers
that left the cluster (pinned with ``workers=`` and no ``allow_other_workers``, then the worker
died: its restart has a new address). The scheduler is asked about those only while nothing moves.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from openclaw_dask.errors import RunError

if TYPE_CHECKING:
    from openclaw_dask.cluster.session_like import SessionLike

__all__ = ["StallWatch", "configured_max_spill", "stall_watch"]

logger = logging.getLogger("openclaw_dask.cluster")


def stall_watch(session: SessionLike, futures: Any = None) -> contextlib.AbstractContextManager[Any]:
    """A :class:`StallWatch` for a wait on ``session``'s client (nothing on a local engine).

    Parameters
    ----------
    session
        A started :class:`~openclaw_dask.Session`.
    futures
        The futures the wait is for; ``None``: those the client makes inside the block (all of
        its futures if it makes none).
    """
    return contextlib.nullcontext() if session.running is None else session.running.stall_watch(futures)


def configured_max_spill(owns_cluster: bool) -> int | bool | None:
    """Bytes each worker of this process's dask config may spill; ``False``: unbounded; ``None``: no spilling or not known.

    A cluster openclaw did not start spills as its owner set it (``None``). The value may be a
    string from a ``dask:`` section or ``--set`` (``"10GiB"``), read as dask reads it.
    """
    import dask
    from dask.utils import parse_bytes

    memory = dask.config.get("distributed.worker.memory", {})
    if not owns_cluster or (memory.get("target") is False and memory.get("spill") is False):
        return None
    bound = memory.get("max-spill")
    if bound is False or bound is None:
        return bound
    return parse_bytes(bound) if isinstance(bound, str) else int(bound)


class StallWatch:
    """While the block runs, end its wait on ``client`` once the run has stalled for ``limit`` seconds.

    A context manager. On a stall it cancels the futures the block waits for (their wait then
    raises or ends) and leaving the block raises :class:`RunError` with :attr:`reason`.

    Parameters
    ----------
    client
        The :class:`distributed.Client` the block waits on.
    limit
        Seconds without progress, with a worker paused, before the run is ended (``parallel.timeout``).
    max_spill
        Bytes each worker may spill (``cluster.max_spill`` per worker), for the message; ``None``
        when spilling is unbounded, off or not known.
    futures
        What to cancel; ``None``: the client's futures made inside the block (nothing made: nothing cancelled).
    interval
        Seconds between polls (default: a quarter of ``limit``, at most 1 s).
    """

    def __init__(self, client: Any, *, limit: float, max_spill: int | None = None, futures: Any = None,
                 interval: float | None = None) -> None:
        self.client, self.limit, self.max_spill, self.futures = client, float(limit), max_spill, futures
        self.interval = interval if interval is not None else min(1.0, max(0.05, self.limit / 4))
        self.reason: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._before: set[Any] = set()
        self._asks = True  # whether the scheduler may be asked for tasks pinned to workers that left

    def __enter__(self) -> StallWatch:
        if self.futures is None:  # what the block makes is what it waits for
            self._before = set(self.client.futures.copy())  # copied at once: the client's loop adds to it meanwhile
        self._thread = threading.Thread(target=self._watch, name="openclaw-stall-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + 5)  # a daemon: never hold the caller (Ctrl-C) on a stuck poll
        if self.reason is not None and not isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise RunError(self.reason) from None  # the watch cancelled what the block waits for (a wait() returns): say why

    def _watch(self) -> None:
        last: Any = None
        since = time.monotonic()
        while not self._stop.wait(self.interval):
            try:
                workers = self.client.scheduler_info(n_workers=-1).get("workers", {})
            except Exception as e:  # noqa: BLE001  (one failed poll must not end the watch; a lost client is reported elsewhere)
                logger.debug("stall watch: no scheduler info this time (%s)", e)
                if self.client.status in ("closing", "closed"):
                    return
                continue
            now, state = time.monotonic(), _progress(workers)
            paused = {a: w for a, w in workers.items() if w.get("status") == "paused"}
            executing = any((w.get("metrics") or {}).get("task_counts", {}).get("executing") for w in workers.values())
            if executing or state != last:
                last, since = state, now
                continue
            away = None if paused or not self._asks else self._pinned_away()  # asked only while nothing moves
            if not paused and not away:
                since = now
                continue
            if now - since >= self.limit:
                self.reason = self._away_reason(*away) if away else self._reason(paused, len(workers))
                logger.debug("stalled: %s", self.reason)
                self._cancel()
                return

    def _cancel(self) -> None:
        from distributed import Future

        futures = self.futures
        if futures is None:  # only what the block made: never the user's persisted data
            futures = [Future(k, self.client) for k in self.client.futures.copy() if k not in self._before]
        with contextlib.suppress(Exception):  # a client closing meanwhile ends the wait itself
            self.client.cancel(futures, reason="stalled", msg=self.reason)

    def _pinned_away(self) -> tuple[int, list[str]] | None:
        """How many tasks wait, and for which workers, where they may run only on workers that left the cluster."""
        try:
            return self.client.run_on_scheduler(_pinned_away_on)
        except Exception as e:  # noqa: BLE001  (a scheduler without openclaw, or one closing: nothing to tell)
            logger.debug("stall watch: could not ask the scheduler for tasks pinned away (%s)", e)
            self._asks = False  # once, not at every poll (a scheduler without openclaw would log each)
            return None

    def _stalled(self, why: str, fix: str) -> str:
        return f"the run made no progress for {self.limit:g} s: {why}; {fix} (parallel.timeout bounds this wait)"

    def _away_reason(self, tasks: int, gone: list[str]) -> str:
        named = ", ".join(gone[:3]) + (f" and {len(gone) - 3} more" if len(gone) > 3 else "")
        return self._stalled(f"{tasks} task(s) may run only on worker(s) that left the cluster ({named}), pinned there "
                             "with workers= and no allow_other_workers", "pin with allow_other_workers=True so that they may run elsewhere")

    def _reason(self, paused: dict[str, dict[str, Any]], n: int) -> str:
        from dask.utils import format_bytes as fb

        address = max(paused, key=lambda a: (paused[a].get("metrics") or {}).get("memory", 0))
        w = paused[address]
        m = w.get("metrics") or {}
        held, disk = m.get("managed_bytes", 0), (m.get("spilled_bytes") or {}).get("disk", 0)
        where = (f"{len(paused)} of {n} worker(s) paused near their memory limit ({address}: process "
                 f"{fb(m.get('memory', 0))} of cluster.memory_limit {fb(w.get('memory_limit') or 0)}, data {fb(held)}")
        fewer = "or give the run less data or more workers"
        if self.max_spill and held:
            return self._stalled(f"{where}, {fb(disk)} spilled, and cluster.max_spill ({fb(self.max_spill)} per worker) "
                                 "lets no more data go to disk)", f"raise cluster.max_spill or cluster.memory_limit, {fewer}")
        return self._stalled(f"{where})", f"raise cluster.memory_limit, {fewer}")


def _pinned_away_on(dask_scheduler: Any) -> tuple[int, list[str]] | None:
    """On the scheduler: its unrunnable tasks restricted to workers of which none is in the cluster any more.

    A worker that died and was started again has a new address, so a task pinned to the old one (``workers=``
    without ``allow_other_workers``, as lost blocks of a pinned persist are recomputed) can never run:
    distributed waits for ever without ``distributed.scheduler.no-workers-timeout``.
    """
    live, tasks, gone = dask_scheduler.workers, 0, set()
    for ts in dask_scheduler.unrunnable:
        if ts.worker_restrictions and not ts.loose_restrictions and not any(w in live for w in ts.worker_restrictions):
            tasks += 1
            gone |= ts.worker_restrictions
    return (tasks, sorted(gone)) if tasks else None


def _progress(workers: dict[str, dict[str, Any]]) -> tuple[Any, ...]:
    """What changes on the workers while a run moves (not their process memory, which drifts)."""
    out = []
    for address, w in sorted(workers.items()):
        m = w.get("metrics") or {}
        out.append((address, w.get("status"), tuple(sorted((m.get("task_counts") or {}).items())), m.get("managed_bytes"),
                    (m.get("spilled_bytes") or {}).get("disk"), (m.get("transfer") or {}).get("incoming_count_total"),
                    (m.get("transfer") or {}).get("outgoing_count_total"), (m.get("transfer") or {}).get("outgoing_bytes")))
    return tuple(out)
