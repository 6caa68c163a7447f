"""The running object of a distributed engine: a :class:`distributed.Client` and, when openclaw started it, its cluster.

Every backend that runs a cluster (thread with ``parallel.engine: distributed``, process,
remote, mpi, cuda, kubernetes) returns a :class:`DistributedCluster`; kubernetes subclasses
it to scale through its operator. It computes through :func:`~openclaw_dask.cluster.compute.compute`
(every compute computes), waits under the stall watch (:mod:`~openclaw_dask.cluster.stall`),
notices a lost scheduler from its closed comm (:class:`SchedulerComm`), and closes the client,
then the cluster, with Ctrl-C deferred until the close is done.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from openclaw_dask.cluster.network import dashboard_on
from openclaw_dask.cluster.running import Progress, Recorder, RunningCluster, signals_deferred
from openclaw_dask.cluster.shared_results import SharedResults
from openclaw_dask.cluster.tails import tails_bound

if TYPE_CHECKING:
    from distributed import Client, Scheduler

    from openclaw_dask.cluster.base import Backend
    from openclaw_dask.config import Config

__all__ = ["DistributedCluster", "SchedulerComm", "lost_scheduler", "new_client", "run_errors"]

logger = logging.getLogger("openclaw_dask.cluster")


class DistributedCluster(RunningCluster):
    """A connected client and the cluster behind it.

    Parameters
    ----------
    client
        The :class:`distributed.Client`.
    cluster
        The object openclaw started (a ``LocalCluster``, an ``MpiJob``), or ``None`` when someone else owns it.
    shuts_down
        Closing shuts the scheduler and its workers down through the client first (MPI ranks leave once it is gone).
    watch
        ``watch(wait)`` says why the cluster ended under a running session, or ``None``.
    """

    can_lose_workers = True

    def __init__(self, backend: Backend, config: Config, client: Client, cluster: Any = None, *,
                 shuts_down: bool = False, watch: Callable[[float], str | None] | None = None) -> None:
        from openclaw_dask.cluster import code_names, latency, quiet

        super().__init__(backend, config)
        self._client, self.cluster, self.shuts_down, self._watch = client, cluster, shuts_down, watch
        self.heap_reuse = not backend.capabilities.in_process  # results reuse freed blocks; a worker here would not (heap.py)
        self.results = SharedResults.for_workers(backend.capabilities)
        self.computing = _computing(backend, config, client, self.scheduler)  # what compute() is told on this engine
        latency.prompt(client, self.scheduler)  # a compute waits on work, not on message-batching deadlines
        quiet.install()  # a run stopped under distributed logs its teardown: not the user's news
        code_names.install()  # a failing task's traceback names the user's file, not <dynamic-code>
        self.comm = SchedulerComm(self)

    @property
    def client(self) -> Client:
        return self._client

    @property
    def scheduler(self) -> Scheduler | None:
        """The scheduler object when it runs in this process (thread and process backends), else ``None``."""
        from distributed import Scheduler

        scheduler = getattr(self.cluster, "scheduler", None)
        return scheduler if isinstance(scheduler, Scheduler) else None

    def stall_watch(self, futures: Any = None) -> contextlib.AbstractContextManager[Any]:
        """Workers paused for good under a wait for ``futures``: one line after ``parallel.timeout``."""
        from openclaw_dask.cluster.stall import StallWatch, configured_max_spill

        max_spill = configured_max_spill(self.backend.capabilities.owns_cluster) or None  # unbounded: nothing to name
        return StallWatch(self._client, limit=self.config.parallel.timeout, max_spill=max_spill, futures=futures)

    # -- computing --------------------------------------------------------------------------

    def dask_config(self) -> dict[str, Any]:
        from openclaw_dask.cluster.compute import fresh_get

        # x.compute() computes anew too, and a run stuck on paused workers ends as compute()'s does
        return {"scheduler": fresh_get(self._client, self.stall_watch, self.results, **self.computing)}

    def compute(self, collections: list[Any], **kwargs: Any) -> tuple[Any, ...]:
        from openclaw_dask.cluster.compute import compute

        kwargs = {"retries": self.config.fault_tolerance.retries, **self.computing, **kwargs}
        with run_errors(self), _path_told(self):
            return compute(self._client, collections, watch=self.stall_watch, shared=self.results, **kwargs)

    def persist(self, collection: Any, progress: Progress | None = None) -> Any:
        persisted = self._client.persist(collection, retries=self.config.fault_tolerance.retries)
        if progress is not None:
            _wait_counting(persisted, progress)
        return persisted

    def blocks(self, array: Any) -> list[Any]:
        from distributed import futures_of

        return futures_of(self.persist(array))  # block order: (name, 0, 0) ...

    def from_numpy(self, x: Any, chunks: tuple[tuple[int, ...], ...]) -> Any:
        """Scattered to the workers block by block, so the graph stays small."""
        return _scattered(self._client, x, chunks)

    def submit(self, key: str, fn: Callable[..., Any], *args: Any, after: Any = None,
               pin: Mapping[str, Any] | None = None) -> Any:
        head = () if after is None else (after,)
        retries = self.config.fault_tolerance.retries
        return self._client.submit(fn, *head, *args, key=key, pure=False, retries=retries, **(pin or {}))

    def place(self, data: list[Any]) -> list[Any]:
        return self._client.scatter(list(data), hash=False)

    def gather(self, futures: list[Any]) -> list[Any]:
        with self.stall_watch(futures):  # workers paused for good: one line after parallel.timeout, not a wait for ever
            return self._client.gather(futures)

    def cancel(self, futures: Iterable[Any]) -> None:
        if futures := list(futures):
            self._client.cancel(futures)

    def workers(self) -> dict[str, dict[str, Any]]:  # a scheduler in this process: its table, not a round trip (0.4-2 ms)
        return self._client.scheduler_info(n_workers=-1).get("workers", {}) if self.scheduler is None else _table(self.scheduler)

    @property
    def slots(self) -> int:
        return sum(w["nthreads"] for w in self.workers().values()) or 1

    def worker_memory(self) -> tuple[int | None, int]:
        workers = list(self.workers().values())
        memory = min((w.get("memory_limit") or 0 for w in workers), default=0) or None
        return memory, max((w["nthreads"] for w in workers), default=1)

    def scale(self, n: int) -> Callable[[], bool]:
        """distributed's SpecCluster (LocalCluster, LocalCUDACluster): retire the leaving workers by name, then scale."""
        if self.cluster is None or not self.backend.capabilities.resize:
            return super().scale(n)
        return _spec_scaled(self._client, self.cluster, n)

    def adapt(self) -> Callable[[], None]:
        from openclaw_dask.cluster.adaptive import adapt

        self.computing = {**self.computing, "direct": None}  # workers running direct.py's computes look idle: retired
        return adapt(self.cluster, self.config).stop

    def record(self, recorder: Recorder) -> contextlib.AbstractContextManager[Any]:
        return recorder.distributed(self._client)

    def plugins(self, make: Callable[[], list[Any]]) -> contextlib.AbstractContextManager[Any]:
        return _plugins(self, make())

    def recovery_watch(self, metrics: Any) -> Any:
        from openclaw_dask.cluster.recovery import RecoveryWatch

        return RecoveryWatch(self, metrics)

    def lost(self, wait: float = 10.0) -> str | None:
        """The backend's own watch (an MPI job's exit names the rank), then the client's comm: closed is lost at once."""
        reason = None if self._watch is None else self._watch(wait)
        return reason if reason is not None else self.comm.lost()

    @property
    def dashboard_link(self) -> str | None:  # type: ignore[override]
        return str(self._client.dashboard_link) if dashboard_on(self.config, self.backend) and not self.closed else None

    def describe(self) -> str:
        return repr(self._client)

    def close(self) -> None:
        """Close the client, then the cluster if openclaw started it. Safe to call twice."""
        if self.closed:
            return
        with signals_deferred():
            _close(self)


@contextlib.contextmanager
def _path_told(running: DistributedCluster) -> Iterator[None]:
    """``running.path``: the path the block's compute took where it could go straight to the workers
    (:mod:`~openclaw_dask.cluster.direct`), and why; else ``None``."""
    direct, running.path = running.computing["direct"], None
    if direct is not None:
        direct.last = None  # set again only where this compute asked it
    yield
    running.path = None if direct is None else direct.last


def _computing(backend: Backend, config: Config, client: Client, scheduler: Scheduler | None) -> dict[str, Any]:
    """:func:`~openclaw_dask.cluster.compute.compute`'s settings: the bound of a reduction's tail here, whether the
    scheduler resolves aliases (asked once; cluster/aliases.py), and whether computes over the workers' data may go
    straight to them (a scheduler in this process, workers that run them: cluster/direct.py)."""
    from openclaw_dask.cluster.aliases import resolved_by
    from openclaw_dask.cluster.direct import Direct, DirectRuns

    runs = scheduler is not None and any(isinstance(p, DirectRuns) for p in backend.worker_plugins(config))
    return {"tails": tails_bound(backend.capabilities), "unalias": resolved_by(client, scheduler),
            "direct": Direct(client, scheduler) if runs and scheduler is not None else None}


def _scattered(client: Client, x: Any, chunks: tuple[tuple[int, ...], ...]) -> Any:
    import itertools
    import uuid

    import dask.array as da
    import numpy as np

    starts = [np.cumsum((0,) + c[:-1]) for c in chunks]
    index = list(itertools.product(*(range(len(c)) for c in chunks)))
    blocks = [x[tuple(slice(starts[a][i], starts[a][i] + chunks[a][i]) for a, i in enumerate(idx))] for idx in index]
    futures = client.scatter(blocks, hash=False)
    name = f"openclaw-scattered-{uuid.uuid4().hex}"
    dsk = {(name, *idx): f for idx, f in zip(index, futures)}
    return da.Array(dsk, name, chunks, dtype=x.dtype, meta=np.empty((0,) * x.ndim, dtype=x.dtype))


def _wait_counting(persisted: Any, progress: Progress) -> None:
    from distributed import as_completed, futures_of

    futures = futures_of(persisted)
    with progress(len(futures)) as advance:
        for future in as_completed(futures):
            if future.status == "error":  # raise the first task error now; never gather the data itself
                future.result()
            advance()


def _spec_scaled(client: Client, cluster: Any, n: int) -> Callable[[], bool]:
    leaving = list(cluster.worker_spec)[n:]  # scale() drops the newest specs first
    if leaving:
        # SpecCluster.scale asks the scheduler to retire workers by *name* where it wants addresses
        # (dask/distributed#4069), so nothing would move first: retire them here, by name.
        client.retire_workers(names=leaving)
    cluster.scale(n)
    return lambda: len(cluster.workers) == n  # the retired nannies have closed too


def _close(running: DistributedCluster) -> None:
    gone = running.lost(0) is not None
    running.status = "closed"
    running.comm.stop()
    if running.shuts_down and not gone:
        with contextlib.suppress(Exception):
            _workers_leave_first(running.client)
        with contextlib.suppress(Exception):
            running.client.shutdown()
    client_log = logging.getLogger("distributed.client")
    level = client_log.level
    if gone:  # the reason was reported already; cancelling the reconnect would log a traceback
        client_log.setLevel(logging.CRITICAL)
    try:
        for thing in (running.client, running.cluster):
            # A cluster that already lost its scheduler must not turn close() into an error.
            with contextlib.suppress(Exception):
                if thing is not None:
                    thing.close()
    finally:
        client_log.setLevel(level)
        client_log.removeFilter(_silent)
        if running.results is not None:  # after the workers: none of them writes into a buffer any more
            running.results.close()
    logger.debug("closed %s cluster", running.backend.name)


@contextlib.contextmanager
def _plugins(running: DistributedCluster, plugins: list[Any]) -> Iterator[None]:
    """Register worker plugins (one mechanism for every backend; they survive worker restarts)."""
    running.client.sync(_register, running.client, plugins)
    for plugin in plugins:  # what a plugin does once all of them are set up on every worker (peer_reads.PeerReads)
        if hasattr(plugin, "registered"):
            plugin.registered(running.client)
    try:
        yield
    finally:
        if not running.backend.capabilities.owns_cluster and running.client.status == "running":
            for plugin in plugins:  # someone else's workers: leave them as they were
                with contextlib.suppress(Exception):
                    running.client.unregister_worker_plugin(plugin.name)


async def _register(client: Client, plugins: list[Any]) -> None:
    """Each of ``plugins`` (worker or nanny plugins, independent of one another) on every worker, all at once.

    ``client.register_plugin`` waits for every worker to set one plugin up before it sends the next: a round trip
    to the scheduler and its broadcast to the workers for each (2-3 ms apiece on this machine, a network's latency
    on a remote cluster). Sent together, the process backend's 8 took 112 ms of a session's start, not 126
    (the median of 5, alternated; docs/benchmarks.md).
    """
    import asyncio

    from distributed.diagnostics.plugin import NannyPlugin

    await asyncio.gather(*((client._register_nanny_plugin if isinstance(p, NannyPlugin) else client._register_worker_plugin)(
        p, p.name, getattr(p, "idempotent", False)) for p in plugins))


def _table(scheduler: Scheduler) -> dict[str, dict[str, Any]]:
    """The workers as ``scheduler_info()`` describes them, read from a scheduler in this process.

    ``dict.values`` copies the table in one step under the GIL, which the scheduler's event loop may be changing.
    """
    return {ws.address: ws.identity() for ws in sorted(dict.values(scheduler.workers), key=lambda ws: ws.address)}


@contextlib.contextmanager
def run_errors(running: DistributedCluster) -> Iterator[None]:
    """Distributed's failures that end a run, as one clear :class:`~openclaw_dask.errors.RunError` each."""
    from concurrent.futures import CancelledError

    from distributed.client import ClosedClientError
    from distributed.scheduler import KilledWorker

    from openclaw_dask.errors import RunError

    try:
        yield
    except KilledWorker as e:
        raise RunError(
            f"task {e.task} was running on {running.config.fault_tolerance.allowed_failures + 1} workers that died "
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


def new_client(*args: Any, **kwargs: Any) -> Client:
    """A new :class:`distributed.Client` (same arguments), or its error with no half-made client left running.

    A client whose start fails (a plain connection under ``require_encryption``, say) keeps its
    IO-loop thread until the garbage collector finds it. If that happens in the IO-loop thread of
    the next client as it starts, both wait on distributed's one ``LoopRunner`` lock and the new
    client fails after 10 s (seen in CI, then reproduced). So the half-made client is closed here,
    at once, in the thread that made it.
    """
    import traceback

    from distributed import Client

    try:
        return Client(*args, **kwargs)
    except BaseException as e:
        for frame, _ in traceback.walk_tb(e.__traceback__):
            half_made = frame.f_locals.get("self")
            if isinstance(half_made, Client):
                with contextlib.suppress(Exception):  # the start's own error is the one to report
                    half_made.close()
                break
        raise


class SchedulerComm:
    """Watches a client's connection to its scheduler and ends the session's use of it once it closes.

    distributed's client answers a closed scheduler comm by cancelling every future (a compute
    in flight fails at once) and then reconnecting for ``parallel.timeout``; work submitted in
    the meantime waits that long and then fails with a traceback. A scheduler's task state does
    not survive it anyway, so the first look that finds the comm closed (:meth:`lost`, or a
    check on the client's loop every 0.1 s) records the loss and closes the client: later calls
    fail at once, and :meth:`lost` names it. A scheduler in the session's own process (thread and
    process backends) closes only when the session closes it: no periodic check there, whose ten
    wake-ups a second were half its event loop's, each taking the GIL from the user's Python.
    """

    INTERVAL_MS = 100

    def __init__(self, running: DistributedCluster) -> None:
        from tornado.ioloop import PeriodicCallback

        self.running = running
        client = running.client
        self.address = getattr(client.scheduler, "address", None)
        self.since: float | None = None
        self._check = PeriodicCallback(self._poll, self.INTERVAL_MS)
        if running.scheduler is None:
            self._soon(self._check.start)

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
            self._soon(self._check.stop)

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
        self._soon(lambda: asyncio.ensure_future(client._close(fast=True)))

    def _soon(self, fn: Callable[[], Any]) -> None:
        """Run ``fn`` on the client's event loop (which a closed client no longer has: then nothing runs)."""
        loop = self.running.client.loop
        if loop is not None:
            loop.add_callback(fn)


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
