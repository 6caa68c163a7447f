"""What a backend is: declared capabilities, its own checks, a pure plan, and a start.

A backend is a :class:`Backend` subclass, one per module of this package (``local``,
``remote``, ``mpi``, ``serial``) or from another package through the entry-point group
``openclaw_dask.backends`` (see :mod:`~openclaw_dask.cluster.registry`). Code outside
``cluster/`` asks the object what it can do (``backend.capabilities.resize``) and never
compares backend names.

Life of a backend in a session::

    backend = backend_for(config)      # registry: the class parallel.backend names
    backend.check(config)              # its rules, each in one place (load_config runs them too)
    backend.plan(config)               # pure: what would start, for tests and --dry-run
    with backend.start(config) as running:    # a RunningCluster: client, cluster, close()
        client.register_plugin(p) for p in backend.worker_plugins(config)
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

from openclaw_dask.errors import BackendUnavailable

if TYPE_CHECKING:
    from distributed import Client, Scheduler

    from openclaw_dask.config import Config

__all__ = ["Backend", "Capabilities", "Engine", "RunningCluster", "SchedulerComm", "lost_scheduler"]

logger = logging.getLogger("openclaw_dask.cluster")


@dataclass(frozen=True)
class Engine:
    """What runs a session's graphs, and why that one.

    Attributes
    ----------
    kind
        ``distributed`` (a client and a cluster), ``threads`` (dask's threaded scheduler
        in this process, no cluster) or ``sync`` (dask's synchronous scheduler).
    reason
        Why, for the run summary and the profile.
    task_overhead_s
        Fixed cost of one more task on it: the auto chunk size keeps it small.
    """

    kind: str
    reason: str
    task_overhead_s: float

    @property
    def distributed(self) -> bool:
        """Tasks go through a :class:`distributed.Client` (and so retries, dashboards, worker memory)."""
        return self.kind == "distributed"

    def __str__(self) -> str:
        label = {"threads": "dask threaded scheduler", "sync": "dask synchronous scheduler"}.get(self.kind, "distributed cluster")
        return f"{label} ({self.reason})"


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do; each flag turns rules and session features on or off.

    Attributes
    ----------
    owns_cluster
        Starts (and stops) its scheduler and workers; ``False``: connects to someone else's.
    in_process
        Tasks run in the calling process: BLAS pools are held there, ``inproc`` comms work.
    worker_processes
        Workers are processes openclaw shapes: ``omp_threads`` and ``hybrid`` apply.
    shared_memory
        ``parallel.mpi_shared_memory`` can fold a host's workers into one.
    resize, adapt
        ``resize_workers`` and ``elastic.adaptive`` work.
    prometheus
        The scheduler runs in this process, so openclaw's metrics join its ``/metrics``.
    tls
        The ``security:`` section applies.
    socket_buffers
        ``parallel.socket_buffer_size`` reaches its sockets.
    threaded
        Can run graphs on dask's threaded scheduler in this process, with no cluster
        (``parallel.engine: threads``).
    gpu
        Its workers own GPUs: ``memory_pooling``, ``gpu_memory_fraction`` and ``rdma`` apply.
    pods
        Its scheduler and workers are Kubernetes pods: the ``kubernetes`` section applies.
    local_memory
        Its workers run on this machine and share its memory: their ``cluster.memory_limit``
        together (:meth:`Backend.memory_workers` of them) must fit in it. ``False`` where the
        memory is elsewhere (a remote scheduler's workers, pods, MPI ranks on other hosts).
    """

    owns_cluster: bool = True
    in_process: bool = False
    worker_processes: bool = False
    shared_memory: bool = False
    resize: bool = False
    adapt: bool = False
    prometheus: bool = False
    tls: bool = False
    socket_buffers: bool = False
    threaded: bool = False
    gpu: bool = False
    pods: bool = False
    local_memory: bool = False


class Backend:
    """Base class of every backend; subclasses declare, check, plan and start.

    Class attributes
    ----------------
    name
        The value of ``parallel.backend`` that selects it.
    capabilities
        A :class:`Capabilities`.
    why_not
        For a capability it lacks, the reason a refusal gives (``{"resize": "..."}``).
    requires, extra
        Modules it needs beyond the base install, and the ``openclaw-dask`` extra that brings them.
    default_protocol
        What ``parallel.communication: auto`` means without TLS.
    task_overhead_s
        Fixed cost of one more task, seconds: the auto chunk size keeps it small.
    array_backend
        The dask ``array.backend`` its sessions run under (``cupy``), so that the chunks a session
        makes are of it; None: NumPy, or whatever the ``dask:`` section says.
    """

    name: ClassVar[str] = ""
    capabilities: ClassVar[Capabilities] = Capabilities()
    why_not: ClassVar[Mapping[str, str]] = MappingProxyType({})
    requires: ClassVar[tuple[str, ...]] = ("distributed",)
    extra: ClassVar[str | None] = None
    default_protocol: ClassVar[str] = "tcp"
    task_overhead_s: ClassVar[float] = 0.002  # a distributed cluster's (measured in-process: 1.96 ms)
    array_backend: ClassVar[str | None] = None

    def missing(self) -> list[str]:
        """The required modules that are not installed (nothing is imported)."""
        return [m for m in self.requires if importlib.util.find_spec(m) is None]

    def available(self, config: Config | None = None) -> None:
        """Raise when this machine cannot run the backend: :class:`BackendUnavailable` names the ``pip install``."""
        missing = self.missing()
        if missing:
            what = f"backend {self.name} needs {', '.join(missing)}, which is not installed"
            if self.extra is None:  # a plugin's own dependencies: no openclaw-dask extra brings them
                raise BackendUnavailable(f"{what}; run: pip install {' '.join(missing)}")
            raise BackendUnavailable(what, extra=self.extra)

    def refusal(self, capability: str) -> str:
        """Why this backend cannot do ``capability``, for an error message."""
        return self.why_not.get(capability, f"backend {self.name} cannot do that")

    def check(self, config: Config) -> None:
        """Raise :class:`ConfigError` for the first setting this backend cannot honour.

        The base class enforces the rules that follow from :attr:`capabilities`;
        subclasses add their own and call ``super().check(config)``.
        """
        from openclaw_dask.cluster import rules

        rules.check_capabilities(self, config)

    def plan(self, config: Config) -> Any:
        """What :meth:`start` would start, as plain data; starts nothing."""
        raise NotImplementedError

    def describe(self, config: Config) -> list[str]:
        """Settings this backend computes from ``config`` that are worth showing (``openclaw config show``)."""
        return []

    def engine(self, config: Config) -> Engine:
        """What will run the graphs of a session of ``config``, and why (pure)."""
        return Engine("distributed", f"backend {self.name} runs a distributed cluster", self.task_overhead_s)

    def start(self, config: Config) -> RunningCluster:
        """Start (or reach) the cluster and connect a client; call inside the session's dask config."""
        raise NotImplementedError

    def memory_workers(self, config: Config) -> int:
        """How many workers, each of ``cluster.memory_limit``, a session of ``config`` starts (pure)."""
        from openclaw_dask.cluster.plugins import worker_processes

        return worker_processes(config) if self.capabilities.worker_processes else 1

    def worker_plugins(self, config: Config) -> list[Any]:
        """The :class:`~distributed.diagnostics.plugin.WorkerPlugin` s every worker of a session gets."""
        from openclaw_dask.cluster.plugins import LogLevel

        return [LogLevel(config.parallel.log_level)]

    def scale(self, session: Any, n: int) -> Callable[[], bool]:
        """Grow or shrink the started cluster to ``n`` workers; return whether the cluster's own view has settled.

        This default is for distributed's SpecCluster (LocalCluster, LocalCUDACluster).
        """
        cluster = session.running.cluster
        leaving = list(cluster.worker_spec)[n:]  # scale() drops the newest specs first
        if leaving:
            # SpecCluster.scale asks the scheduler to retire workers by *name* where it wants addresses
            # (dask/distributed#4069), so nothing would move first: retire them here, by name.
            session.client.retire_workers(names=leaving)
        cluster.scale(n)
        return lambda: len(cluster.workers) == n  # the retired nannies have closed too

    def adapt(self, cluster: Any, config: Config) -> Any:
        """Turn on ``elastic.adaptive`` for the started ``cluster``; the result's ``stop()`` turns it off."""
        from openclaw_dask.cluster.adaptive import adapt

        return adapt(cluster, config)

    def dask_settings(self, config: Config) -> dict[str, Any]:
        """``dask.config`` keys this backend needs on top of :func:`~openclaw_dask.cluster.settings.dask_settings`."""
        return {}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


@dataclass
class RunningCluster:
    """A started backend: the connected client and, when openclaw owns it, the cluster behind it.

    A context manager: leaving it closes the client, then the cluster if openclaw started it.

    Attributes
    ----------
    backend
        The :class:`Backend` that started it.
    client
        The :class:`distributed.Client`; ``None`` when a local dask scheduler runs the tasks.
    cluster
        The object openclaw started (a ``LocalCluster``, an ``MpiJob``), or ``None`` when
        someone else owns the cluster.
    shutdown
        Closing shuts the scheduler and its workers down through the client first
        (MPI ranks leave once their scheduler is gone).
    watch
        ``watch(wait)`` says why the cluster ended under a running session, or ``None``.
    local
        Without a client: the :func:`dask.compute` keywords of the local scheduler that runs
        the tasks (``{"scheduler": "sync"}``, or ``"threads"`` with the session's own ``pool``).
    threads
        Task threads of the local scheduler (with a client, the scheduler knows).
    comm
        The :class:`SchedulerComm` watch on the client's connection to its scheduler.
    """

    backend: Backend
    client: Client | None
    cluster: Any = None
    shutdown: bool = False
    watch: Callable[[float], str | None] | None = None
    local: Mapping[str, Any] = field(default_factory=dict)
    threads: int = 1
    closed: bool = field(default=False, init=False)
    comm: SchedulerComm | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.client is not None:
            from openclaw_dask.cluster import quiet

            quiet.install()  # a run stopped under distributed logs its teardown: not the user's news
            self.comm = SchedulerComm(self)

    @property
    def scheduler(self) -> Scheduler | None:
        """The scheduler object when it runs in this process (thread and process backends), else ``None``."""
        from distributed import Scheduler

        scheduler = getattr(self.cluster, "scheduler", None)
        return scheduler if isinstance(scheduler, Scheduler) else None

    def lost(self, wait: float = 10.0) -> str | None:
        """Why the cluster ended while in use, waiting up to ``wait`` s to learn it; ``None`` if it runs.

        The backend's own watch (an MPI job's exit names the rank) first, then the client's
        connection to the scheduler: a closed one is a lost scheduler at once.
        """
        reason = None if self.watch is None else self.watch(wait)
        if reason is None and self.comm is not None:
            reason = self.comm.lost()
        return reason

    def close(self) -> None:
        """Close the client, then the cluster if openclaw started it (or the local pool). Safe to call twice."""
        if self.closed or self.client is None:
            if not self.closed and "pool" in self.local:
                self.local["pool"].shutdown(wait=False, cancel_futures=True)
            self.closed = True
            return
        with _signals_deferred():
            self._close_client_and_cluster()

    def _close_client_and_cluster(self) -> None:
        gone = self.lost(0) is not None
        self.closed = True
        if self.comm is not None:
            self.comm.stop()
        if self.shutdown and not gone:
            with contextlib.suppress(Exception):
                _workers_leave_first(self.client)
            with contextlib.suppress(Exception):
                self.client.shutdown()
        client_log = logging.getLogger("distributed.client")
        level = client_log.level
        if gone:  # the reason was reported already; cancelling the reconnect would log a traceback
            client_log.setLevel(logging.CRITICAL)
        try:
            for thing in (self.client, self.cluster):
                # A cluster that already lost its scheduler must not turn close() into an error.
                with contextlib.suppress(Exception):
                    if thing is not None:
                        thing.close()
        finally:
            client_log.setLevel(level)
            client_log.removeFilter(_silent)
        logger.debug("closed %s cluster", self.backend.name)

    def __enter__(self) -> RunningCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Ctrl-C or SIGTERM while the cluster closes takes effect once it has closed.

    Raised half way, the interrupt would leave the nannies and worker processes to distributed's
    exit hooks: seconds more, "Failed to remove" errors and tracebacks. Blocking the signals in
    the main thread is not enough (the kernel hands them to another thread, and Python runs the
    handler in the main thread all the same), so the handlers are replaced by one that notes
    the signal, and a noted signal is sent again once the close is done.
    """
    import os
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[int] = []
    kinds = (signal.SIGINT, signal.SIGTERM)
    before = {k: signal.signal(k, lambda signum, frame: noted.append(signum)) for k in kinds}
    try:
        yield
    finally:
        for kind, handler in before.items():
            signal.signal(kind, handler)
        for signum in dict.fromkeys(noted):  # each once, in the order they came
            if before[signum] not in (signal.SIG_IGN, None):
                os.kill(os.getpid(), signum)


class SchedulerComm:
    """Watches a client's connection to its scheduler and ends the session's use of it once it closes.

    distributed's client answers a closed scheduler comm by cancelling every future (a compute
    in flight fails at once) and then reconnecting for ``parallel.timeout``; work submitted in
    the meantime waits that long and then fails with a traceback (10.3 s with a 10 s timeout,
    30.5 s by default). A scheduler's task state does not survive it anyway, so the first look
    that finds the comm closed (:meth:`lost`, or a check on the client's loop every 0.1 s)
    records the loss and closes the client: later calls fail at once, and :meth:`lost` names it.
    """

    INTERVAL_MS = 100

    def __init__(self, running: RunningCluster) -> None:
        from tornado.ioloop import PeriodicCallback

        self.running = running
        client = running.client
        self.address = getattr(client.scheduler, "address", None)
        self.since: float | None = None
        self._check = PeriodicCallback(self._poll, self.INTERVAL_MS)
        client.loop.add_callback(self._check.start)

    def lost(self) -> str | None:
        """Why the scheduler is gone (its comm closed), or ``None`` while it is connected."""
        if self.since is None and not self.running.closed and self.running.client.status == "connecting":
            self._gone()
        if self.since is None:
            return None
        return lost_scheduler(self.address, "its connection closed")

    def stop(self) -> None:
        """Stop watching (the session closes the client itself)."""
        with contextlib.suppress(Exception):
            self.running.client.loop.add_callback(self._check.stop)

    def _poll(self) -> None:
        if self.running.closed:
            self._check.stop()
        elif self.since is None and self.running.client.status == "connecting":
            self._gone()

    def _gone(self) -> None:
        import asyncio

        self.since = time.monotonic()
        logger.debug("the connection to the scheduler at %s closed", self.address)
        client = self.running.client
        # its reconnect attempt, cancelled by the close, logs a traceback: the loss is reported once, by openclaw
        logging.getLogger("distributed.client").addFilter(_silent)
        client.loop.add_callback(lambda: asyncio.ensure_future(client._close(fast=True)))


def _silent(record: logging.LogRecord) -> bool:
    return False


def lost_scheduler(address: str | None, how: str) -> str:
    """The one line for a run whose scheduler at ``address`` is gone (``how`` it was noticed)."""
    return (f"lost the scheduler at {address} ({how}); its task state is gone, "
            "so the run cannot go on: restart the scheduler and run again")


def _workers_leave_first(client: Client, wait: float = 10.0) -> None:
    """Close every worker and wait until they have left, so that their scheduler stops last.

    ``client.shutdown()`` alone closes the scheduler while its workers still run: a worker
    heartbeat in flight then breaks, and that worker logs a traceback (seen under mpirun).
    """
    client.run_on_scheduler(_close_workers)
    deadline = time.monotonic() + wait
    while client.scheduler_info(n_workers=-1)["workers"] and time.monotonic() < deadline:
        time.sleep(0.05)


def _close_workers(dask_scheduler: Scheduler) -> None:
    for address in list(dask_scheduler.workers):  # each worker stops its heartbeats, then leaves
        dask_scheduler.close_worker(address)
