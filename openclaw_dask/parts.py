"""The parts a :class:`~openclaw_dask.Session` is built from, each taken on one of the session's two ExitStacks.

Setup order (teardown is the reverse, by construction). What changes the whole process (log
levels, signal handler, dask configuration, BLAS pools, malloc tuning) is on the second stack,
undone after the first, so that sessions closed out of order still leave dask's configuration
as it was (:func:`openclaw_dask.session._opened`).

1. log levels of ``openclaw_dask`` and ``distributed``, and SIGTERM unwinding the stack as Ctrl-C does;
2. the spill folder and its bound (:func:`~openclaw_dask.cluster.scratch.scratch`), then the dask
   configuration the config implies (:func:`~openclaw_dask.cluster.settings.dask_settings`);
3. the sized TCP comm backend, where socket buffers are asked for (installed for good: it is inert when unset);
4. BLAS/OpenMP pools at one thread, when tasks run in this process;
5. the running cluster (:meth:`Backend.start <openclaw_dask.cluster.Backend.start>`), or the
   local scheduler (and its thread pool) that ``dask.compute`` then uses by default, with
   freed memory kept for reuse (:mod:`~openclaw_dask.cluster.heap`); with a client, ``dask.compute``
   goes to it through :func:`~openclaw_dask.cluster.compute.fresh_get` (never a result kept from before);
6. the backend's worker plugins (taken off again where the cluster is someone else's);
7. the recovery watch on the scheduler, adaptive scaling, and the Prometheus collector.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from openclaw_dask.cluster import Backend, RunningCluster
    from openclaw_dask.cluster.recovery import RecoveryWatch
    from openclaw_dask.config import Config
    from openclaw_dask.monitoring import RunMetrics

__all__ = ["Terminated", "build", "run_errors", "watch"]


class Terminated(SystemExit):
    """SIGTERM arrived: the session unwinds as for Ctrl-C and the process exits with 128 + 15."""


def build(stack: contextlib.ExitStack, process: contextlib.ExitStack, config: Config, backend: Backend,
          metrics: RunMetrics) -> RunningCluster:
    """Take parts 1-6 and return the running cluster.

    What changes the whole process (log levels, the SIGTERM handler, dask's configuration, BLAS
    pools, malloc tuning) goes on ``process``, the rest on ``stack``; the session undoes ``process``
    after ``stack``, or later where a newer session still runs on top of it.
    """
    import dask
    import distributed  # noqa: F401  (its defaults must be in dask.config before keys under them are set)

    from openclaw_dask.cluster.scratch import scratch
    from openclaw_dask.cluster.settings import dask_settings
    from openclaw_dask.monitoring import require_prometheus_client

    process.enter_context(_log_levels(config.parallel.log_level))
    process.enter_context(_terminate_unwinds())
    process.enter_context(dask.config.set(stack.enter_context(scratch(config))))
    process.enter_context(dask.config.set(dask_settings(config, backend)))
    if config.parallel.socket_buffer_size is not None and backend.capabilities.socket_buffers:
        from openclaw_dask.cluster.sockets import install

        install()  # the client starts no server, so no preload reaches this process
    if backend.capabilities.in_process:
        # Tasks run in this process: one BLAS/OpenMP thread each, so task threads never
        # oversubscribe the cores (process workers get the same from their nanny and a plugin).
        from threadpoolctl import threadpool_limits

        process.enter_context(threadpool_limits(limits=1))
    if config.monitoring.prometheus:
        require_prometheus_client()  # before anything starts
    running = stack.enter_context(backend.start(config))
    if running.local:  # a plain .compute() in the session runs where Session.compute does
        from openclaw_dask.cluster.heap import heap_reuse

        process.enter_context(dask.config.set(running.local))
        process.enter_context(heap_reuse())  # chunk-sized temporaries reuse memory instead of faulting it in
    if running.client is not None:
        from openclaw_dask.cluster.compute import fresh_get
        from openclaw_dask.cluster.stall import watch_running

        # x.compute() computes anew too, and a run stuck on paused workers ends as Session.compute's does
        process.enter_context(dask.config.set(scheduler=fresh_get(running.client, lambda fs: watch_running(running, config, fs))))
        stack.enter_context(_plugins(running, backend.worker_plugins(config)))
        metrics.target_workers = len(running.client.scheduler_info(n_workers=-1)["workers"])
    return running


def watch(stack: contextlib.ExitStack, running: RunningCluster, config: Config, metrics: RunMetrics) -> RecoveryWatch:
    """Take part 7 on ``stack``: the recovery counter, adaptive scaling and Prometheus metrics."""
    from openclaw_dask.cluster.recovery import RecoveryWatch

    recovery = stack.enter_context(RecoveryWatch(running, metrics))
    if config.elastic.adaptive:
        stack.callback(running.backend.adapt(running.cluster, config).stop)
    if config.monitoring.prometheus and running.scheduler is not None:
        from openclaw_dask.monitoring import serving_metrics

        stack.enter_context(serving_metrics(metrics, running.scheduler))
    return recovery


@contextlib.contextmanager
def _log_levels(level: str) -> Iterator[None]:
    from openclaw_dask.cluster.plugins import LOGGERS

    before = {name: logging.getLogger(name).level for name in LOGGERS}
    for name in LOGGERS:
        logging.getLogger(name).setLevel(level)
    try:
        yield
    finally:
        for name, old in before.items():
            logging.getLogger(name).setLevel(old)


@contextlib.contextmanager
def _terminate_unwinds() -> Iterator[None]:
    """SIGTERM ends the session as Ctrl-C does (the stack unwinds: workers stop, the spill folder goes).

    Only where SIGTERM would otherwise kill the process outright: in the main thread, with
    no handler of the program's own.
    """
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def terminate(signum: int, frame: Any) -> None:
        raise Terminated(128 + signum)

    signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGTERM) is terminate:  # not one the program set meanwhile
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextlib.contextmanager
def _plugins(running: RunningCluster, plugins: list[Any]) -> Iterator[None]:
    """Register worker plugins (one mechanism for every backend; they survive worker restarts)."""
    for plugin in plugins:
        running.client.register_plugin(plugin)
    try:
        yield
    finally:
        if not running.backend.capabilities.owns_cluster and running.client.status == "running":
            for plugin in plugins:  # someone else's workers: leave them as they were
                with contextlib.suppress(Exception):
                    running.client.unregister_worker_plugin(plugin.name)


@contextlib.contextmanager
def run_errors(config: Config, running: RunningCluster) -> Iterator[None]:
    """Distributed's failures that end a run, as one clear :class:`~openclaw_dask.errors.RunError` each."""
    from concurrent.futures import CancelledError

    from distributed.client import ClosedClientError
    from distributed.scheduler import KilledWorker

    from openclaw_dask.cluster.base import lost_scheduler
    from openclaw_dask.errors import RunError

    try:
        yield
    except KilledWorker as e:
        raise RunError(
            f"task {e.task} was running on {config.fault_tolerance.allowed_failures + 1} workers that died "
            f"(the last {e.last_worker.address}); it may crash or exhaust its worker. "
            "Fix the task, give workers more memory (cluster.memory_limit), or raise fault_tolerance.allowed_failures"
        ) from None
    except (CancelledError, ClosedClientError) as e:  # closed: the scheduler's comm closed earlier (SchedulerComm)
        client = running.client
        if client.status == "running" and "connection-lost" not in str(e):
            raise
        lost = running.lost()
        if lost:
            raise RunError(lost) from None
        raise RunError(lost_scheduler(getattr(client.scheduler, "address", None), "connection lost")) from None
