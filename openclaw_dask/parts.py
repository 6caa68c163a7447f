"""The parts a :class:`~openclaw_dask.Session` is built from, each taken on the session's ExitStack.

Setup order (teardown is the reverse, by construction):

1. the spill folder and its bound (:func:`~openclaw_dask.cluster.scratch.scratch`);
2. the session's :class:`~openclaw_dask.cluster.process_state.Layer` of process-wide state, held in
   :data:`~openclaw_dask.cluster.process_state.PROCESS`: the dask configuration the config implies
   (:func:`~openclaw_dask.cluster.settings.dask_settings`), log levels, SIGTERM unwinding the stack
   as Ctrl-C does, the sized TCP comm backend where socket buffers are asked for, and BLAS/OpenMP
   pools at one thread when tasks run in this process;
3. the running engine (:meth:`Backend.start <openclaw_dask.cluster.Backend.start>`), its threads on glibc's
   main heap (:func:`~openclaw_dask.cluster.heap.one_arena`); what
   ``dask.compute`` runs on joins the layer (:meth:`RunningCluster.dask_config
   <openclaw_dask.cluster.RunningCluster.dask_config>`, each graph's arrays checked first by the session's memory
   check: :func:`~openclaw_dask.memory_model.guarded`), with freed memory kept for reuse on dask's local schedulers;
4. the backend's worker plugins (taken off again where the cluster is someone else's);
5. the recovery watch, adaptive scaling, and the Prometheus collector.

Sessions open inside one another and close in any order: the process shows the newest open
session's layer, and the last to close restores what the first found.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from typing import TYPE_CHECKING, Any

from openclaw_dask.cluster.process_state import Terminated

if TYPE_CHECKING:
    from openclaw_dask.cluster import RunningCluster, SessionLike
    from openclaw_dask.config import Config
    from openclaw_dask.monitoring import RunMetrics

__all__ = ["Terminated", "build", "watch"]


def build(stack: contextlib.ExitStack, session: SessionLike) -> RunningCluster:
    """Take parts 1-4 of ``session`` on ``stack`` and return the running engine."""
    from openclaw_dask import memory_model
    from openclaw_dask.cluster import quiet
    from openclaw_dask.cluster.heap import one_arena
    from openclaw_dask.cluster.process_state import PROCESS, Layer
    from openclaw_dask.cluster.scratch import scratch
    from openclaw_dask.cluster.settings import dask_settings, for_engine, needs_distributed
    from openclaw_dask.monitoring import require_prometheus_client

    config, backend = session.config, session.backend
    handed = backend.cluster_keywords  # the cluster gets these as keywords: not this process's config
    settings = for_engine({**stack.enter_context(scratch(config)),
                           **{k: v for k, v in dask_settings(config, backend).items() if k not in handed}}, config, backend)
    if needs_distributed(settings):  # on a local engine only for the dask: section's keys
        import distributed  # noqa: F401  (its defaults must be in dask.config before keys under them are set)
    layer = Layer(
        dask=settings, log_level=config.parallel.log_level,
        # tasks run in this process: one BLAS/OpenMP thread each, so task threads never oversubscribe the cores
        one_blas_thread=backend.capabilities.in_process,
        # the client starts no server, so no preload sizes its sockets
        sized_sockets=config.parallel.socket_buffer_size is not None and backend.capabilities.socket_buffers,
        spawns_workers=backend.capabilities.worker_processes and backend.capabilities.local_memory,
    )
    owner = object()
    stack.enter_context(PROCESS.holding(owner, layer))
    if config.monitoring.prometheus:
        require_prometheus_client()  # before anything starts
    # before the engine's threads start (a client's IO loop receives results): blocks they free stay reusable
    one_arena()
    # before the start: a Ctrl-C that cuts it short closes what it started, and that teardown's noise is not news either
    quiet.install()
    running = stack.enter_context(backend.start(config))
    # a plain x.compute() in the session runs where Session.compute does, checked as it is
    engine = running.dask_config()
    engine["scheduler"] = memory_model.guarded(engine["scheduler"], functools.partial(memory_model.require_fit, session))
    PROCESS.update(owner, dataclasses.replace(layer, dask={**settings, **engine}, heap_reuse=running.heap_reuse))
    stack.enter_context(running.plugins(lambda: backend.worker_plugins(config)))
    workers = running.workers()
    if workers:
        session.metrics.target_workers = len(workers)
    return running


def watch(stack: contextlib.ExitStack, running: RunningCluster, config: Config, metrics: RunMetrics) -> Any:
    """Take part 5 on ``stack``: the recovery counter (returned, or ``None``), adaptive scaling and Prometheus metrics."""
    recovery = running.recovery_watch(metrics)
    if recovery is not None:
        stack.enter_context(recovery)
    if config.elastic.adaptive:
        stack.callback(running.adapt())
    if config.monitoring.prometheus and running.scheduler is not None:
        from openclaw_dask.monitoring import serving_metrics

        stack.enter_context(serving_metrics(metrics, running.scheduler))
    return recovery
