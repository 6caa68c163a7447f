"""Run metrics a session keeps, and their Prometheus exposition (``monitoring.prometheus``).

:class:`RunMetrics` is plain state, updated by workloads, the profiler and
``resize_workers`` whether or not Prometheus is on. With ``monitoring.prometheus: true``
a collector in ``prometheus_client``'s default registry turns it into ``openclaw_*``
metrics; distributed's scheduler serves that registry at ``/metrics`` beside its own.
The recovery counts (``workers_lost``, ``tasks_recomputed``, ``failures_recovered``)
come from a scheduler plugin, :mod:`openclaw_dask.cluster.recovery`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import threading
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from openclaw_dask.errors import BackendUnavailable

__all__ = ["Recovery", "RunMetrics", "register_collector", "require_prometheus_client", "serving_metrics"]


@dataclass(frozen=True)
class Recovery:
    """Worker losses and what they cost, as counted on the scheduler (see :mod:`openclaw_dask.cluster.recovery`).

    Attributes
    ----------
    workers_lost : int or None
        Workers that left without being retired. ``None``: unknown (a remote
        scheduler without openclaw_dask).
    tasks_recomputed : int or None
        Task runs the losses forced.
    failures_recovered : int or None
        Losses whose tasks all came back without an error.
    """

    workers_lost: int | None = 0
    tasks_recomputed: int | None = 0
    failures_recovered: int | None = 0

    def since(self, before: Recovery) -> Recovery:
        """What happened between ``before`` and this snapshot (``None`` stays unknown)."""
        def minus(a: int | None, b: int | None) -> int | None:
            return None if a is None or b is None else a - b

        return Recovery(*(minus(getattr(self, f), getattr(before, f)) for f in ("workers_lost", "tasks_recomputed", "failures_recovered")))


@dataclass
class RunMetrics:
    """What the session has done so far (thread-safe: scrapes run on the scheduler's thread)."""

    target_workers: int = 0
    resize_events: int = 0
    runs: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    tasks: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    bytes: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    last_gbps: dict[str, float] = field(default_factory=dict)
    imbalance: float | None = None
    verdicts: dict[str, int] = field(default_factory=dict)
    workers_lost: int | None = 0  # None: unknown (remote scheduler without openclaw_dask)
    tasks_recomputed: int | None = 0
    failures_recovered: int | None = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def workload(self, name: str, *, tasks: int, nbytes: int, gbps: float) -> None:
        with self.lock:
            self.runs[name] += 1
            self.tasks[name] += tasks
            self.bytes[name] += nbytes
            self.last_gbps[name] = gbps

    def profiled(self, report: Any) -> None:
        with self.lock:
            self.imbalance = report.imbalance["max_over_mean"]
            self.verdicts = {k: sum(v.kind == k for v in report.verdicts) for k in report.kinds()}

    def resized(self, n: int) -> None:
        with self.lock:
            self.resize_events += 1
            self.target_workers = n

    def add_recovery(self, **deltas: int) -> None:
        """Add to ``workers_lost``, ``tasks_recomputed``, ``failures_recovered`` (the scheduler plugin calls this)."""
        with self.lock:
            for name, delta in deltas.items():
                value = getattr(self, name)
                if value is not None:
                    setattr(self, name, value + delta)

    def set_recovery(self, counts: dict[str, int] | None) -> None:
        """Replace the recovery counts with those read from a remote scheduler (``None``: unknown)."""
        with self.lock:
            for name in ("workers_lost", "tasks_recomputed", "failures_recovered"):
                setattr(self, name, None if counts is None else counts[name])

    def recovery(self) -> Recovery:
        """A snapshot of the recovery counts."""
        with self.lock:
            return Recovery(self.workers_lost, self.tasks_recomputed, self.failures_recovered)


def register_collector(metrics: RunMetrics, scheduler: Any) -> Any:
    """Register ``openclaw_*`` metrics for ``metrics`` and the in-process ``scheduler``; returns the collector."""
    from prometheus_client import REGISTRY
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    class OpenclawCollector:
        def collect(self) -> Iterator[Any]:
            workers = list(scheduler.workers.values())  # read on the scheduler's own thread: no RPC
            yield GaugeMetricFamily("openclaw_workers", "Workers connected to the scheduler", value=len(workers))
            yield GaugeMetricFamily("openclaw_threads", "Task threads over all workers", value=sum(w.nthreads for w in workers))
            with metrics.lock:
                yield GaugeMetricFamily("openclaw_target_workers", "Workers last asked for (start or resize_workers)",
                                        value=metrics.target_workers)
                yield CounterMetricFamily("openclaw_resize_events", "resize_workers calls that changed the cluster",
                                          value=metrics.resize_events)
                for name, help_text, values in (
                    ("openclaw_workload_runs", "Built-in workload runs", metrics.runs),
                    ("openclaw_workload_tasks", "Tasks processed by built-in workloads", metrics.tasks),
                    ("openclaw_workload_bytes", "Bytes processed by built-in workloads", metrics.bytes),
                ):
                    family = CounterMetricFamily(name, help_text, labels=["workload"])
                    for workload, value in values.items():
                        family.add_metric([workload], value)
                    yield family
                gbps = GaugeMetricFamily("openclaw_workload_last_gbps", "GB/s of the last run", labels=["workload"])
                for workload, last in metrics.last_gbps.items():
                    gbps.add_metric([workload], last)
                yield gbps
                if metrics.imbalance is not None:
                    yield GaugeMetricFamily("openclaw_profile_imbalance", "Busiest lane over the mean lane, last profile",
                                            value=metrics.imbalance)
                for name, help_text, known in (
                    ("openclaw_workers_lost", "Workers that left without being retired (killed, crashed, cut off)",
                     metrics.workers_lost),
                    ("openclaw_tasks_recomputed", "Task runs that lost workers forced", metrics.tasks_recomputed),
                    ("openclaw_failures_recovered", "Worker losses whose tasks all came back without an error",
                     metrics.failures_recovered),
                ):
                    if known is not None:
                        yield CounterMetricFamily(name, help_text, value=known)
                verdicts = GaugeMetricFamily("openclaw_profile_verdicts", "Verdicts of the last profile", labels=["kind"])
                for kind, count in metrics.verdicts.items():
                    verdicts.add_metric([kind], count)
                yield verdicts

    collector = OpenclawCollector()
    REGISTRY.register(collector)
    return collector


def require_prometheus_client() -> None:
    """Fail early, with the ``pip install``, when ``monitoring.prometheus`` cannot be served."""
    if importlib.util.find_spec("prometheus_client") is None:
        raise BackendUnavailable("monitoring.prometheus needs prometheus-client, which is not installed", extra="monitoring")


@contextlib.contextmanager
def serving_metrics(metrics: RunMetrics, scheduler: Any) -> Iterator[Any]:
    """Serve ``metrics`` beside ``scheduler``'s own at its ``/metrics`` until the block ends."""
    from prometheus_client import REGISTRY

    collector = register_collector(metrics, scheduler)
    try:
        yield collector
    finally:
        REGISTRY.unregister(collector)
