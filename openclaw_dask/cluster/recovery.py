"""Worker losses a session survived, counted on the scheduler.

A :class:`RecoveryCounter` scheduler plugin reads distributed's own ``remove-worker``
event, which names the tasks the lost worker was running and the results only it
held, and then follows those tasks through the scheduler's transitions:

``workers_lost``
    Workers that left without being retired: killed, crashed, or cut off. Graceful
    retirement (``resize_workers``, adaptive scaling) and ``Client.restart`` are not
    losses. ``Client.restart_workers`` is, since the scheduler sees the same thing.
``tasks_recomputed``
    Task runs a loss forced: a task that was running on the lost worker, or whose
    only result was there, and that the scheduler started again. A task hit by two
    losses in a row counts twice; a result that was lost but is no longer needed
    does not count.
``failures_recovered``
    Losses whose tasks all came back: every task the loss took that was still
    wanted is in memory again (or no longer wanted), and none of them ended in an
    error (for example ``KilledWorker`` once ``allowed_failures`` is used up).

The plugin runs inside the scheduler. For ``thread`` and ``process`` that is this
process and the counts land in the session's :class:`~openclaw_dask.monitoring.RunMetrics`
as they happen. For a scheduler elsewhere (``remote``) the plugin is registered over
the wire, so ``openclaw_dask`` must be importable there; if it is not, the counts are
``None`` ("unknown") and the run goes on.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from typing import TYPE_CHECKING, Any

from distributed.diagnostics.plugin import SchedulerPlugin

if TYPE_CHECKING:
    from openclaw_dask.cluster.client import DistributedCluster
    from openclaw_dask.monitoring import RunMetrics

__all__ = ["RecoveryCounter", "RecoveryWatch", "read_counts"]

logger = logging.getLogger("openclaw_dask.cluster.recovery")

COUNTS = ("workers_lost", "tasks_recomputed", "failures_recovered")
# States in which the scheduler still means to compute a task: a lost task left in one
# of these after the loss must come back before the loss counts as recovered.
_WANTED = frozenset({"waiting", "queued", "no-worker", "processing"})


class RecoveryCounter(SchedulerPlugin):
    """Count unexpected worker losses, the task runs they forced, and the losses recovered from.

    Parameters
    ----------
    metrics
        Where to add the counts as they change; only when the plugin runs in this
        process (it is not pickled along).
    """

    def __init__(self, metrics: RunMetrics | None = None) -> None:
        self.name = f"openclaw-recovery-{uuid.uuid4().hex[:12]}"  # one per session: several may share a scheduler
        self.metrics = metrics
        self.workers_lost = 0
        self.tasks_recomputed = 0
        self.failures_recovered = 0
        self._scheduler: Any = None
        self._events: dict[str, dict[str, Any]] = {}  # worker -> its remove-worker event, until remove_worker() runs
        self._restarting: set[str] = set()  # workers Client.restart is taking down
        self._rerun: set[Any] = set()  # lost tasks not started again yet
        self._losses_of: dict[Any, set[int]] = {}  # lost task -> the losses waiting for it to be in memory
        self._left: dict[int, int] = {}  # loss -> how many of its tasks are still to come back
        self._next_loss = 0

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["metrics"] = state["_scheduler"] = None  # a lock and a live scheduler do not travel
        return state

    async def start(self, scheduler: Any) -> None:
        self._scheduler = scheduler

    def restart(self, scheduler: Any) -> None:
        self._restarting.update(scheduler.workers)

    def log_event(self, topic: str, msg: Any) -> None:
        # The scheduler logs this before it moves the lost tasks on, so it still names them.
        if topic == "all" and isinstance(msg, dict) and msg.get("action") == "remove-worker" and not msg.get("expected"):
            self._events[msg["worker"]] = msg

    def remove_worker(self, scheduler: Any, worker: str, *, stimulus_id: str | None = None, **kwargs: Any) -> None:
        event = self._events.pop(worker, None)
        if worker in self._restarting:
            self._restarting.discard(worker)
            return
        if event is None or scheduler.status.name in ("closing", "closed"):
            return
        failed = bool(event.get("lost-scattered-tasks"))  # scattered data cannot be recomputed
        wanted, started = [], 0
        for key in set(event.get("processing-tasks", ())) | set(event.get("lost-computed-tasks", ())):
            ts = scheduler.tasks.get(key)
            state = "forgotten" if ts is None else ts.state
            if state == "erred":  # e.g. KilledWorker: allowed_failures used up
                failed = True
            elif state == "processing":  # already sent to another worker by this same removal
                started += 1
            elif state in _WANTED or state == "released":  # released: may be asked for again later
                self._rerun.add(key)
            if state in _WANTED:
                wanted.append(key)
        recovered = 0
        if not failed:
            if wanted:
                loss, self._next_loss = self._next_loss, self._next_loss + 1
                self._left[loss] = len(wanted)
                for key in wanted:
                    self._losses_of.setdefault(key, set()).add(loss)
            else:
                recovered = 1
        self._add(workers_lost=1, tasks_recomputed=started, failures_recovered=recovered)

    def transition(self, key: Any, start: str, finish: str, *args: Any, stimulus_id: str | None = None, **kwargs: Any) -> None:
        if not self._rerun and not self._losses_of:  # nothing lost: every transition costs only this
            return
        if finish == "processing":
            if key in self._rerun:
                self._rerun.discard(key)
                self._add(tasks_recomputed=1)
        elif finish in ("memory", "erred", "forgotten"):
            self._rerun.discard(key)
            losses = self._losses_of.pop(key, None)
            if losses:
                self._settle(losses, failed=finish == "erred")

    def _settle(self, losses: set[int], *, failed: bool) -> None:
        recovered = 0
        for loss in losses:
            if loss not in self._left:  # that loss failed already
                continue
            if failed:
                del self._left[loss]
                continue
            self._left[loss] -= 1
            if not self._left[loss]:
                del self._left[loss]
                recovered += 1
        if recovered:
            self._add(failures_recovered=recovered)

    def _add(self, **deltas: int) -> None:
        for name, delta in deltas.items():
            setattr(self, name, getattr(self, name) + delta)
        if self.metrics is not None:
            self.metrics.add_recovery(**deltas)

    def counts(self) -> dict[str, int]:
        """``workers_lost``, ``tasks_recomputed`` and ``failures_recovered`` so far."""
        return {name: getattr(self, name) for name in COUNTS}


def read_counts(dask_scheduler: Any = None, name: str = "") -> dict[str, int] | None:
    """The counts of plugin ``name`` on ``dask_scheduler`` (for ``Client.run_on_scheduler``)."""
    plugin = dask_scheduler.plugins.get(name)
    return None if plugin is None else plugin.counts()


class RecoveryWatch:
    """A :class:`RecoveryCounter` on a session's scheduler, feeding the session's metrics.

    A context manager: leaving it takes the plugin off the scheduler.

    Parameters
    ----------
    handle
        The session's :class:`~openclaw_dask.cluster.RunningCluster`.
    metrics
        The session's metrics; their recovery counts become ``None`` when the
        scheduler cannot run the plugin.
    """

    def __init__(self, handle: DistributedCluster, metrics: RunMetrics) -> None:
        self.handle, self.metrics = handle, metrics
        scheduler = handle.scheduler
        self.local = scheduler is not None
        self.plugin = RecoveryCounter(metrics if self.local else None)
        self.registered = False
        if scheduler is not None:
            # In this process: the scheduler keeps this very object, so counts reach the metrics live.
            handle.cluster.sync(scheduler.register_scheduler_plugin, plugin=self.plugin, name=self.plugin.name, idempotent=False)
            self.registered = True
            return
        try:
            handle.client.register_plugin(self.plugin, name=self.plugin.name)
            self.registered = True
        except (ImportError, AttributeError, TypeError) as e:  # could not unpickle it there: no (or another) openclaw_dask
            metrics.set_recovery(None)
            logger.warning(
                "lost workers and recomputed tasks are unknown for this run: the scheduler at %s could not load "
                "openclaw's counter (%s: %s); install openclaw-dask where the scheduler runs to count them",
                getattr(handle.client.scheduler, "address", None), type(e).__name__, str(e).splitlines()[0] if str(e) else "",
            )

    def refresh(self) -> None:
        """Fetch the counts from a scheduler in another process (in this one they are live)."""
        if self.local or not self.registered or self.handle.client.status != "running":
            return
        counts = self.handle.client.run_on_scheduler(read_counts, name=self.plugin.name)
        self.metrics.set_recovery(counts)

    def close(self) -> None:
        """Take the plugin off the scheduler (a remote one is the user's and lives on)."""
        if not self.registered:
            return
        self.registered = False
        with contextlib.suppress(Exception):
            if self.local:
                # Before the cluster closes, so its workers shutting down are not counted.
                self.handle.cluster.sync(self.handle.cluster.scheduler.unregister_scheduler_plugin, name=self.plugin.name)
            elif self.handle.client.status == "running":
                self.refresh()
                self.handle.client.unregister_scheduler_plugin(self.plugin.name)

    def __enter__(self) -> RecoveryWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
