"""Backends ``thread`` and ``process``: this machine's cores.

``thread`` runs graphs on dask's threaded scheduler with ``workers`` threads in this
process: no cluster, no serialisation, no transfers, and about a fifth of distributed's
cost per task and per compute (docs/benchmarks.md). A setting only a cluster honours
(:func:`cluster_needs`: a dashboard, Prometheus, TLS, retries, spilling, ...) or
``parallel.engine: distributed`` starts one in-process :class:`distributed.LocalCluster`
worker with those threads instead. ``process`` is ``workers`` worker processes under nannies,
each with ``omp_threads`` task threads and one BLAS/OpenMP thread, so processes x
threads never oversubscribe the cores; with ``hybrid`` each has one task thread and
``omp_threads`` BLAS/OpenMP threads instead (set at spawn by
``distributed.nanny.pre-spawn-environ``, held by :class:`~openclaw_dask.cluster.plugins.BlasThreads`).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from dask.system import CPU_COUNT

try:  # dask >= 2026.1: contextvars follow each task into its thread
    from dask.threaded import ContextAwareThreadPoolExecutor as _Executor
except ImportError:  # pragma: no cover - older dask
    from concurrent.futures import ThreadPoolExecutor as _Executor  # type: ignore[assignment]  # its base class, same use

from openclaw_dask.cluster.base import Backend, Capabilities, Engine
from openclaw_dask.cluster.client import DistributedCluster, new_client
from openclaw_dask.cluster.main_guard import refuse_unguarded_main
from openclaw_dask.cluster.network import (
    bind_host,
    dashboard_address,
    dashboard_on,
    http_address,
    http_host,
    protocol,
    require_http_port,
)
from openclaw_dask.cluster.running import RunningCluster, ThreadedEngine
from openclaw_dask.cluster.security import security_for, tls_plan
from openclaw_dask.cluster.settings import dask_settings, listed
from openclaw_dask.cluster.starting import first_cause, interruptible, stop_new_workers
from openclaw_dask.cluster.worker_shape import blas_threads, task_threads, worker_processes
from openclaw_dask.errors import ClusterStartError, ConfigError

if TYPE_CHECKING:
    from openclaw_dask.config import Config

__all__ = ["LocalBackend", "ProcessBackend", "TaskPool", "ThreadBackend", "cluster_needs"]

logger = logging.getLogger("openclaw_dask.cluster")

_NEVER = 10**9  # seconds: about 32 years

# What one more chunk of a reduction costs a compute on dask's threaded scheduler, seconds:
# building, optimising and scheduling its tasks (benchmarks/task_overhead.py; docs/benchmarks.md).
THREADS_TASK_OVERHEAD_S = 0.0008


def _threads(config: Config) -> int:
    """Task threads of the thread backend: ``parallel.workers``, or the cores."""
    return CPU_COUNT if config.parallel.workers == "auto" else config.parallel.workers


class LocalBackend(Backend):
    """A :class:`distributed.LocalCluster` on this machine; subclasses say threads or processes."""

    cluster_keywords = ("distributed.scheduler.allowed-failures", "distributed.scheduler.preload", "distributed.worker.preload")

    def plan(self, config: Config) -> dict[str, Any]:
        """The :class:`~distributed.LocalCluster` keyword arguments for ``config`` (nothing is started)."""
        p, c = config.parallel, config.cluster
        processes = self.capabilities.worker_processes
        threads = task_threads(config) if processes else _threads(config)
        host = bind_host(config)
        web = http_host(config, host)
        kwargs: dict[str, Any] = {
            "n_workers": worker_processes(config) if processes else 1,
            "threads_per_worker": threads,
            "processes": processes,
            "protocol": protocol(config, self),
            "dashboard_address": dashboard_address(config, web),
            # on the bind host, or loopback when only TLS allowed a wider bind
            "scheduler_kwargs": {"dashboard_address": http_address(config, web)},
            "silence_logs": getattr(logging, p.log_level),
        }
        _hand_to_cluster(kwargs, dask_settings(config, self))
        if c.memory_limit != "auto":
            kwargs["memory_limit"] = c.memory_limit
        security = tls_plan(config)  # plain data: the Security object is made at start
        if security is not None:
            kwargs["security"] = security
        if kwargs["protocol"] == "inproc" or web != host:
            # The worker's HTTP server follows the worker's address unless told where: inproc
            # addresses carry no host (so it would listen on every interface), and TLS does not cover HTTP.
            kwargs["worker_dashboard_address"] = f"{web}:0"
        if kwargs["protocol"] != "inproc":
            if p.network_interface is not None:
                kwargs["interface"] = p.network_interface
            else:
                kwargs["host"] = host
        return kwargs

    def cluster_class(self) -> Any:
        """What :meth:`start` calls with :meth:`plan`'s arguments."""
        from distributed import LocalCluster

        return LocalCluster

    def start(self, config: Config) -> RunningCluster:
        """Start the cluster and connect a client to it."""

        kwargs = self.plan(config)
        if "security" in kwargs:  # one Security for the cluster and its client
            kwargs["security"] = security_for(config)
        _warn_oversubscribed(kwargs["n_workers"] * max(kwargs["threads_per_worker"], blas_threads(config)))
        http = kwargs["scheduler_kwargs"]["dashboard_address"]
        require_http_port(config, http)  # a fixed port that is taken: one line, not another port
        if not kwargs["processes"] and not dashboard_on(config, self):
            kwargs["worker_class"] = _worker_without_dashboard()
        logger.info("starting %s cluster: %s", self.name, kwargs)
        with contextlib.ExitStack() as undo:  # Ctrl-C while starting closes what started, here
            try:
                cluster = interruptible(lambda: _all_started(self.cluster_class()(**kwargs)), config.parallel.timeout,
                                        abort=stop_new_workers())
            except Exception as e:  # distributed raises many types for a failed start
                raise ClusterStartError(f"could not start the {self.name} cluster ({first_cause(e)})") from e
            undo.callback(cluster.close)
            require_http_port(config, http, cluster.scheduler)  # taken between the check and the start
            if not dashboard_on(config, self):
                _quiet_scheduler(cluster)
            try:
                # results come straight from the workers, which are on this machine, not relayed by the scheduler
                client = new_client(cluster, timeout=config.parallel.timeout, security=kwargs.get("security"), direct_to_workers=True)
            except Exception as e:
                raise ClusterStartError(f"could not connect to the {self.name} cluster ({type(e).__name__}: {e})") from e
            undo.pop_all()
        return DistributedCluster(self, config, client, cluster)


def _all_started(cluster: Any) -> Any:
    """``cluster`` once each of its workers has started; closed, and the failure raised, if one did not.

    dask-cuda's ``LocalCUDACluster`` starts with no worker, then scales: it can return while a
    worker's start is failing (an RMM pool the GPU cannot hold), and a compute would then wait
    for a worker that never comes. A started worker's ``start()`` returns at once; a failed
    one's raises why it failed.
    """
    try:
        for worker in list(cluster.workers.values()):
            cluster.sync(worker.start)
    except BaseException:
        cluster.close()
        raise
    return cluster


@functools.cache
def _worker_without_dashboard() -> type:
    """distributed's in-process ``Worker``, never with a dashboard of its own (nobody would be shown it).

    ``LocalCluster`` turns a worker's dashboard on whenever it is told where the worker's HTTP server
    listens, which an inproc cluster must be (it would listen on every interface otherwise); the
    dashboard then imports bokeh as the worker starts (1.3 s on a slow host).
    """
    from distributed import Worker

    class UnwatchedWorker(Worker):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **{**kwargs, "dashboard": False})

    return UnwatchedWorker


def _hand_to_cluster(kwargs: dict[str, Any], settings: dict[str, Any]) -> None:
    """The scheduler's allowed failures and preloads, and the workers' preloads, as the cluster's keywords
    (:attr:`Backend.cluster_keywords`)."""
    kwargs["scheduler_kwargs"]["allowed_failures"] = settings["distributed.scheduler.allowed-failures"]
    kwargs["scheduler_kwargs"]["preload"] = listed(settings.get("distributed.scheduler.preload", []))
    kwargs["preload"] = listed(settings.get("distributed.worker.preload", []))


class TaskPool(_Executor):
    """The thread backend's task threads, for dask's threaded scheduler; it can report each task's run.

    dask's local callbacks run in the scheduling thread, so their times include the wait
    for a free thread and for the scheduler to notice the result. ``on_run(thread, start,
    stop)`` is called in the task thread itself, before the result is handed back: per
    thread, the calls come in the order dask's ``posttask`` callbacks do.

    The session puts it in ``dask.config`` (``pool``), which distributed copies into the
    worker processes it spawns: there, a copy is no pool at all (dask's own default).

    :meth:`submit_task` runs a named task outside any graph (the dataflow API's tasks);
    ``on_task(key, thread, start, stop, result)`` reports each such task.
    """

    on_run: Callable[[int, float, float], None] | None = None
    on_task: Callable[[str, int, float, float, Any], None] | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._busy: dict[int, float] = {}  # per thread that ran graph tasks, their seconds (one writer per entry)

    def busy_s(self) -> float:
        """Seconds graph tasks have run on this pool's threads (and through :class:`InlinePool`) so far."""
        return sum(list(self._busy.values()))

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        return _no_pool, ()

    def __deepcopy__(self, memo: dict[int, Any]) -> TaskPool:
        return self

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        if threading.current_thread() in self._threads:
            # A task that computes a graph itself: run that here, as dask's own per-thread pools
            # would; queued behind it, a pool whose threads all wait on inner computes deadlocks.
            future: Future[Any] = Future()
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as e:  # noqa: BLE001  (handed to the caller, as the pool would)
                future.set_exception(e)
            return future
        return super().submit(self._timed, fn, args, kwargs)

    @contextlib.contextmanager
    def watched(self, on_run: Callable[[int, float, float], None],
                on_task: Callable[[str, int, float, float, Any], None]) -> Iterator[None]:
        """Report each task's run to ``on_run`` and each named task to ``on_task`` over the block."""
        self.on_run, self.on_task = on_run, on_task
        try:
            yield
        finally:
            self.on_run = self.on_task = None

    def submit_task(self, key: str, fn: Callable[..., Any], /, *args: Any) -> Future[Any]:
        """Queue ``fn(*args)`` as the task ``key``, even from a task thread (it waits on nothing here)."""
        return super().submit(self._keyed, key, fn, args)

    def _keyed(self, key: str, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        start = time.time()
        result = fn(*args)
        on_task = self.on_task
        if on_task is not None:
            on_task(key, threading.get_ident(), start, time.time(), result)
        return result

    def _timed(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        start = time.time()
        try:
            return fn(*args, **kwargs)
        finally:
            stop, thread = time.time(), threading.get_ident()
            self._busy[thread] = self._busy.get(thread, 0.0) + stop - start
            on_run = self.on_run
            if on_run is not None:
                on_run(thread, start, stop)


class InlinePool(Executor):
    """The calling thread as a one-thread pool: dask's threaded scheduler on it runs a graph as its synchronous
    scheduler does, each task timed and reported by ``pool`` (:meth:`TaskPool._timed`) as on its own threads."""

    _max_workers = 1  # what dask.threaded.get reads

    def __init__(self, pool: TaskPool) -> None:
        self._pool = pool

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            result = self._pool._timed(fn, args, kwargs)
        except BaseException as e:  # noqa: BLE001  (handed to dask through the future, as its SynchronousExecutor does)
            future.set_exception(e)
        else:  # a Ctrl-C inside set_result (it notifies waiters) finds the future finished: it goes up as it is
            future.set_result(result)
        return future


def _no_pool() -> None:
    return None


def _warn_oversubscribed(slots: int) -> None:
    if slots > CPU_COUNT:
        logger.warning("%d worker threads on %d cores: tasks will time-share the cores (check lscpu); lower parallel.workers",
                       slots, CPU_COUNT)


UNWATCHED_TICK = "500ms"


def _unwatched(config: Config) -> dict[str, Any]:
    """Settings for a cluster whose dashboard is off.

    distributed names the scheduler's HTTP server (health, /metrics) "dashboard" even without the
    dashboard's pages, so client.dashboard_link would be a URL that answers 404: its template empty,
    the link is "". Each scheduler, nanny and worker times its event loop every 20 ms
    (``distributed.admin.tick``) for the dashboard's and /metrics' figures; with neither, every
    500 ms still logs a loop blocked past ``distributed.admin.tick.limit`` (3 s), and this process's
    main thread, which shares its GIL with the scheduler and nannies, is cut in on 6 times a second,
    not 150 (tiny-tasks on 2 worker processes: fastest of 15 runs 160-166 ms, not 170-179; docs/benchmarks.md).
    Each worker samples its task threads' stacks every 10 ms for the dashboard's profile page alone
    (``distributed.worker.profile``): 100 wake-ups a second that took 2.5-3.5% from its tasks
    (elementwise at 512 MiB on 2 worker processes; docs/benchmarks.md, eighteenth pass), so it is off too.
    """
    settings: dict[str, Any] = {"distributed.dashboard.link": "", "distributed.worker.profile.enabled": False}
    if not config.monitoring.prometheus:
        settings["distributed.admin.tick.interval"] = UNWATCHED_TICK
    return settings


def cluster_needs(config: Config) -> list[tuple[str, str]]:
    """The settings of ``config`` that only a distributed cluster honours: ``(key, why)`` pairs."""
    p, c = config.parallel, config.cluster
    needs = [
        (c.dashboard not in (False, "auto"), "cluster.dashboard", "the dashboard is distributed's"),  # auto: never by itself
        (config.monitoring.prometheus, "monitoring.prometheus", "the metrics are the scheduler's"),
        (config.security.temporary_certificates, "security.temporary_certificates", "TLS protects a cluster's comms"),
        (config.security.cert_file, "security.cert_file", "TLS protects a cluster's comms"),
        (p.communication != "auto", "parallel.communication", "it says how client, scheduler and worker talk"),
        (p.network_interface, "parallel.network_interface", "a cluster binds it"),
        (c.preload, "cluster.preload", "it runs in the scheduler and the worker"),
        (config.fault_tolerance.retries, "fault_tolerance.retries", "the scheduler retries failed tasks"),
        (c.memory_limit != "auto", "cluster.memory_limit", "a worker spills and pauses at it"),
        (c.max_spill != "auto", "cluster.max_spill", "it bounds a worker's spilling"),
        (c.local_directory != "auto", "cluster.local_directory", "it holds a worker's spill files"),
        (any(k.startswith("distributed.") for k in config.dask), "dask: distributed.*", "those keys configure a cluster"),
    ]
    return [(key, why) for wanted, key, why in needs if wanted]


def _quiet_scheduler(cluster: Any) -> None:
    """Stop what the in-process scheduler runs for nothing here, as its nannies do (plugins.QuietNanny).

    Its system monitor (with no dashboard nothing reads it), and its idle and no-workers checks
    where neither timeout is set: 4 wake-ups a second each, that only close the scheduler or fail
    tasks once a timeout passes (an ``idle_since`` asked for is then counted from that request).
    """
    from distributed.utils import sync

    from openclaw_dask.cluster.plugins import stop_callbacks

    scheduler = cluster.scheduler
    timeouts = {"idle-timeout": scheduler.idle_timeout, "no-workers-timeout": scheduler.no_workers_timeout}
    sync(cluster.loop, stop_callbacks, scheduler, ("monitor", *(name for name, timeout in timeouts.items() if not timeout)))


class ThreadBackend(LocalBackend):
    """``thread``: ``workers`` threads in this process, on dask's threaded scheduler or one in-process worker."""

    name = "thread"
    capabilities = Capabilities(in_process=True, prometheus=True, tls=True, socket_buffers=True, threaded=True,
                                local_memory=True)
    why_not = MappingProxyType({"resize": "runs in this one process (change parallel.workers instead)"})
    default_protocol = "inproc"

    def engine(self, config: Config) -> Engine:
        if config.parallel.engine == "distributed":
            return Engine("distributed", "parallel.engine: distributed", self.task_overhead_s, tasks_run_here=True)
        needs = cluster_needs(config)
        if needs:
            key, why = needs[0]
            return Engine("distributed", f"{key} needs a cluster: {why}", self.task_overhead_s, tasks_run_here=True)
        return Engine("threads", "no setting needs a cluster; parallel.engine: distributed starts one", THREADS_TASK_OVERHEAD_S,
                      tasks_run_here=True)

    def check(self, config: Config) -> None:
        super().check(config)
        needs = cluster_needs(config)
        if config.parallel.engine == "threads" and needs:
            key, why = needs[0]
            message, hint = f"needs a distributed cluster ({why}), but parallel.engine is threads", \
                f"set parallel.engine=auto or distributed, or remove {key}"
            if key.startswith("dask:"):  # keys of the dask: section, not one of openclaw's
                raise ConfigError(f"{key} {message}", key="dask", hint=hint)
            raise ConfigError.at(config, key, message, hint=hint)

    def plan(self, config: Config) -> dict[str, Any]:
        """dask's threaded scheduler and its threads, or the :class:`~distributed.LocalCluster` keyword arguments."""
        if self.engine(config).distributed:
            return super().plan(config)
        return {"scheduler": "threads", "num_workers": _threads(config)}

    def start(self, config: Config) -> RunningCluster:
        """A pool of task threads for dask's threaded scheduler, or the in-process cluster and its client."""
        if self.engine(config).distributed:
            return super().start(config)
        threads = _threads(config)
        _warn_oversubscribed(threads)
        pool = TaskPool(threads, thread_name_prefix="openclaw-task")
        logger.info("running on dask's threaded scheduler with %d threads", threads)
        return ThreadedEngine(self, config, pool, threads, InlinePool(pool))

    def worker_plugins(self, config: Config) -> list[Any]:
        from openclaw_dask.cluster.direct import DirectRuns

        return [*super().worker_plugins(config), DirectRuns()]  # the distributed engine's in-process worker

    def dask_settings(self, config: Config) -> dict[str, Any]:
        if not dashboard_on(config, self):
            return _unwatched(config)
        # inproc addresses carry the machine's IP, not the host the dashboard binds
        return {"distributed.dashboard.link": "{scheme}://" + bind_host(config) + ":{port}/status"}


LOOPBACK_BANDWIDTH = 2**30  # bytes/s between two worker processes of one host, at the least: 1.5-5.3 GiB/s measured
# (loopback TCP on the AMD host; blocks read out of a peer on the Intel one: benchmarks/worker_transfer.py)


class ProcessBackend(LocalBackend):
    """``process``: ``workers`` worker processes under nannies, shaped by ``omp_threads`` and ``hybrid``."""

    name = "process"
    capabilities = Capabilities(worker_processes=True, resize=True, adapt=True, prometheus=True, tls=True, socket_buffers=True,
                                fork=True, local_memory=True)
    task_overhead_s = 0.0027  # measured with 2 workers (benchmarks/task_overhead.py)
    tasks_run_here = True  # worker processes of this machine, in this environment

    def start(self, config: Config) -> RunningCluster:
        """Start the worker processes, unless each would run the main script's top level that starts them."""
        refuse_unguarded_main(self.name)
        if config.cluster.worker_start == "fork":
            # a forked worker inherits what this process has imported: the module each worker preloads
            # (cluster/settings.py) is imported here once, not in every worker on its first task
            importlib.import_module("dask.array")
        return super().start(config)

    def worker_plugins(self, config: Config) -> list[Any]:
        from openclaw_dask.cluster.direct import DirectRuns
        from openclaw_dask.cluster.peer_reads import PeerReads
        from openclaw_dask.cluster.plugins import BlasThreads, QuickExit, QuietNanny

        quiet = [] if dashboard_on(config, self) else [QuietNanny()]  # its nannies run in this process
        return [*super().worker_plugins(config), BlasThreads(blas_threads(config)), QuickExit(), DirectRuns(), PeerReads(), *quiet]

    def dask_settings(self, config: Config) -> dict[str, Any]:
        from openclaw_dask.cluster.settings import add_preload

        # SpecCluster closes a nanny, for good, when its worker is missing from the scheduler
        # lost-worker-timeout (15 s) after *any* earlier loss, even one the nanny had already
        # recovered from: a worker that crashes again while restarting then never comes back,
        # and a run waiting for it hangs (seen under chaos, 1 in about 8 runs). Our nannies
        # restart their workers themselves, so that reaper is switched off.
        settings: dict[str, Any] = {"distributed.deploy.lost-worker-timeout": f"{_NEVER}s"}
        if not dashboard_on(config, self):
            settings.update(_unwatched(config))
        add_preload(settings, ("openclaw_dask.cluster.interrupt_preload",), ("worker",))
        # each nanny reads it as it starts (or restarts) its worker; main_guard reads it too
        settings["distributed.worker.multiprocessing-method"] = config.cluster.worker_start
        # where a task runs weighs moving its inputs at this rate (the scheduler's choices, and direct.spread's) until the
        # workers have measured theirs; at distributed's 100 MB/s (a network's) model-parallel-matmul's weights looked
        # dearer to move than a core's idling
        settings["distributed.scheduler.bandwidth"] = LOOPBACK_BANDWIDTH
        return settings
