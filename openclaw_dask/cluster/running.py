"""What a started backend is: one running object per engine kind, owning its compute path and its life.

:meth:`Backend.start <openclaw_dask.cluster.Backend.start>` returns one of these; the session,
the dataflow API and the profiler call it and never ask which kind it is::

    RunningCluster            compute, persist, submit, place, gather, cancel, from_numpy, blocks,
    |                         workers, slots, worker_memory, scale, adapt, record, close
    +-- SyncEngine            dask's synchronous scheduler in the calling thread (serial)
    +-- ThreadedEngine        dask's threaded scheduler on a TaskPool in this process, or on the calling
    |                         thread where a graph's shape was measured faster there (thread; cluster/paths.py)
    +-- DistributedCluster    a distributed.Client and, when openclaw started it, its cluster
        +-- (kubernetes)      scaling and adapting through the operator (cluster/kubernetes.py)

Closing is idempotent and leaves :attr:`RunningCluster.status` ``"closed"``.
"""

from __future__ import annotations

import abc
import concurrent.futures as cf
import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from openclaw_dask.cluster.paths import SERIAL, Choice, PathChooser, signature
from openclaw_dask.errors import OpenclawError, ResizeError

if TYPE_CHECKING:
    from openclaw_dask.cluster.base import Backend
    from openclaw_dask.config import Config

__all__ = ["Progress", "Recorder", "RunningCluster", "SyncEngine", "ThreadedEngine"]

logger = logging.getLogger("openclaw_dask.cluster")

# progress(total) -> a context manager yielding advance(): a bar, or nothing
Progress = Callable[[int], contextlib.AbstractContextManager[Callable[[], None]]]


class Recorder(abc.ABC):
    """What the profiler records with; :meth:`RunningCluster.record` picks the method that fits its engine."""

    @abc.abstractmethod
    def local(self, threads: int, watch: Any = None) -> contextlib.AbstractContextManager[Any]:
        """Record dask's local scheduler over the block.

        ``watch(on_run, on_task)``, where given, is a context manager over which the task pool
        calls ``on_run(thread, start, stop)`` for each graph task, in the thread that ran it, and
        ``on_task(key, thread, start, stop, result)`` for each dataflow task.
        """

    @abc.abstractmethod
    def distributed(self, client: Any) -> contextlib.AbstractContextManager[Any]:
        """Record the cluster behind ``client`` over the block."""


class RunningCluster(abc.ABC):
    """A started engine: what a session computes on, scales and closes.

    Attributes
    ----------
    backend
        The :class:`~openclaw_dask.cluster.Backend` that started it.
    config
        The configuration it was started with.
    engine
        The :class:`~openclaw_dask.cluster.Engine` it is.
    status
        ``"running"`` until :meth:`close`, then ``"closed"``.
    """

    can_lose_workers: ClassVar[bool] = False  # its workers are processes that can die while it runs
    heap_reuse: bool = True  # malloc keeps freed blocks for this process's tasks (cluster/heap.py)
    cluster: Any = None
    scheduler: Any = None
    threads: int = 1
    dashboard_link: str | None = None
    path: Choice | None = None  # the path the last compute took and why, where the engine chooses one by measurement

    def __init__(self, backend: Backend, config: Config) -> None:
        self.backend, self.config = backend, config
        self.engine = backend.engine(config)
        self.status = "running"

    @property
    def closed(self) -> bool:
        return self.status == "closed"

    @property
    def client(self) -> Any:
        """The :class:`distributed.Client`; here an :class:`OpenclawError` that says how to get one."""
        raise OpenclawError(f"this session has no distributed client: it runs on the {self.engine}; "
                            "set parallel.engine=distributed (backend thread) or parallel.backend=process for one")

    # -- computing --------------------------------------------------------------------------

    @abc.abstractmethod
    def dask_config(self) -> dict[str, Any]:
        """What ``dask.compute`` runs on while the session is open (the session's scoped dask config)."""

    def compute(self, collections: list[Any], **kwargs: Any) -> tuple[Any, ...]:
        """The results of ``collections``, each computed anew."""
        import dask

        return dask.compute(*collections, **{**self.dask_config(), **kwargs})

    def persist(self, collection: Any, progress: Progress | None = None) -> Any:
        """``collection`` computed into memory (here: into its graph); ``progress`` counts finished tasks."""
        from dask.callbacks import Callback

        if progress is None:
            return collection.persist(**self.dask_config())
        with progress(len(collection.__dask_graph__())) as advance, Callback(posttask=lambda *a: advance()):
            return collection.persist(**self.dask_config())

    def blocks(self, array: Any) -> list[Any]:
        """``array``'s blocks along axis 0, in memory where tasks read them (NumPy arrays here)."""
        import numpy as np

        return [np.asarray(b) for b in self.compute([array.blocks[i] for i in range(array.numblocks[0])])]

    def from_numpy(self, x: Any, chunks: tuple[tuple[int, ...], ...]) -> Any:
        """A dask array of the NumPy array ``x`` in ``chunks``, where tasks read it."""
        import dask.array as da

        return da.from_array(x, chunks=chunks)

    # -- the dataflow API's tasks ----------------------------------------------------------------

    @abc.abstractmethod
    def submit(self, key: str, fn: Callable[..., Any], *args: Any, after: Any = None,
               pin: Mapping[str, Any] | None = None) -> Any:
        """``fn(after's result, *args)`` (or ``fn(*args)``) as task ``key``; ``pin`` = workers / resources."""

    def place(self, data: list[Any]) -> list[Any]:
        """Put ``data`` where tasks read it (spread over the workers of a cluster)."""
        return list(data)

    def gather(self, futures: list[Any]) -> list[Any]:
        return [f.result() for f in futures]

    def cancel(self, futures: Iterable[Any]) -> None:
        for f in futures:
            f.cancel()

    # -- workers ---------------------------------------------------------------------------

    def workers(self) -> dict[str, dict[str, Any]]:
        """Scheduler information about each worker (none on a local scheduler)."""
        return {}

    @property
    def slots(self) -> int:
        """Task threads over all workers."""
        return self.threads

    def worker_memory(self) -> tuple[int | None, int]:
        """Memory of one worker (bytes, ``None`` if unbounded) and its task threads, for chunk planning.

        A local engine has this machine's memory, shared by its task threads.
        """
        import psutil

        return psutil.virtual_memory().total, self.slots

    def scale(self, n: int) -> Callable[[], bool]:
        """Grow or shrink to ``n`` workers; return whether the cluster's own view has settled."""
        raise ResizeError(f"resize_workers({n}) refused: backend {self.backend.name} {self.backend.refusal('resize')}")

    def adapt(self) -> Callable[[], None]:
        """Turn ``elastic.adaptive`` on; return what turns it off."""
        raise ResizeError(f"elastic.adaptive: backend {self.backend.name} {self.backend.refusal('adapt')}")

    def record(self, recorder: Recorder) -> contextlib.AbstractContextManager[Any]:
        """``recorder``'s context manager for this engine (the profiler's :func:`collect`)."""
        return recorder.local(self.threads)

    def stall_watch(self, futures: Any = None) -> contextlib.AbstractContextManager[Any]:
        """Ends a wait on workers paused for good (:mod:`~openclaw_dask.cluster.stall`); nothing on a local engine."""
        return contextlib.nullcontext()

    def plugins(self, make: Callable[[], list[Any]]) -> contextlib.AbstractContextManager[Any]:
        """The worker plugins ``make()`` gives, registered for the block (a local engine has no workers: not made)."""
        return contextlib.nullcontext()

    def recovery_watch(self, metrics: Any) -> Any:
        """A context manager counting lost workers and recomputed tasks into ``metrics``, or ``None``."""
        return None

    def lost(self, wait: float = 10.0) -> str | None:
        """Why the cluster ended while in use, or ``None`` while it runs (a local engine cannot end)."""
        return None

    def describe(self) -> str:
        """A few words for ``repr(session)``."""
        return f"{self.engine.kind}, {self.slots} thread(s)"

    def close(self) -> None:
        """Stop what was started; safe to call twice."""
        self.status = "closed"

    def __enter__(self) -> RunningCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SyncEngine(RunningCluster):
    """Serial: dask's synchronous scheduler, every task in the calling thread."""

    def dask_config(self) -> dict[str, Any]:
        from dask.local import get_sync

        return {"scheduler": get_sync}  # the function, not "sync": dask imports distributed to look up a name

    def submit(self, key: str, fn: Callable[..., Any], *args: Any, after: Any = None,
               pin: Mapping[str, Any] | None = None) -> Any:
        """Run the task now, through dask's synchronous scheduler, so that local callbacks see it."""
        from dask.local import get_sync

        _refuse_pin(pin)
        out: cf.Future[Any] = cf.Future()
        try:
            head = () if after is None else (after.result(),)
            out.set_result(get_sync({key: (functools.partial(fn, *head, *args),)}, key))  # no argument is parsed as a key
        except Exception as e:  # noqa: BLE001  (handed to the caller through the future)
            out.set_exception(e)
        return out


class ThreadedEngine(RunningCluster):
    """dask's threaded scheduler on the thread backend's :class:`~openclaw_dask.cluster.local.TaskPool`."""

    def __init__(self, backend: Backend, config: Config, pool: Any, threads: int, inline: Any = None) -> None:
        super().__init__(backend, config)
        self._pool, self.threads = pool, threads
        self._inline = inline  # the calling thread as a pool, for graphs measured faster there (cluster/paths.py)
        self.paths = PathChooser(threads) if inline is not None and threads > 1 else None

    def dask_config(self) -> dict[str, Any]:
        from dask.threaded import get

        return {"scheduler": get, "pool": self._pool}  # the function, not "threads": dask imports distributed to look up a name

    def compute(self, collections: list[Any], **kwargs: Any) -> tuple[Any, ...]:
        """The results of ``collections``, on the task threads or the calling thread, whichever this graph's shape
        was measured faster on (:class:`~openclaw_dask.cluster.paths.PathChooser`)."""
        import dask

        if self.paths is None or kwargs or not collections:
            self.path = None  # no path taken (none: the small-tasks pass ran the whole graph in this thread)
            return super().compute(collections, **kwargs)
        shape = signature(collections)
        path = self.paths.path(shape, trial=self._pool.on_run is None)  # no trial while the profiler records
        self.path = self.paths.last
        # BLAS stays at one thread on the calling thread too: a pool raised for one run spins ~0.1 s after it,
        # and two task threads running next went at half speed (docs/benchmarks.md, twenty-second pass)
        pool = self._inline if path == SERIAL else self._pool
        busy, system, start = self._pool.busy_s(), _system_s(), time.perf_counter()
        results = dask.compute(*collections, **{**self.dask_config(), "pool": pool})
        self.paths.ran(shape, path, time.perf_counter() - start, self._pool.busy_s() - busy, _system_s() - system)
        return results

    def submit(self, key: str, fn: Callable[..., Any], *args: Any, after: Any = None,
               pin: Mapping[str, Any] | None = None) -> Any:
        _refuse_pin(pin)
        if after is None:
            return self._pool.submit_task(key, fn, *args)
        out: cf.Future[Any] = cf.Future()

        def start(done: cf.Future[Any]) -> None:  # in the thread that finished ``after``: queue, never run here
            if done.cancelled():
                out.cancel()
                return
            if not out.set_running_or_notify_cancel():
                return
            if done.exception() is not None:
                out.set_exception(done.exception())
                return
            self._pool.submit_task(key, fn, done.result(), *args).add_done_callback(lambda f: _copy(f, out))

        after.add_done_callback(start)
        return out

    def record(self, recorder: Recorder) -> contextlib.AbstractContextManager[Any]:
        return recorder.local(self.threads, self._pool.watched)

    def close(self) -> None:
        if not self.closed:
            self._pool.shutdown(wait=False, cancel_futures=True)
        super().close()


def _system_s() -> float:
    """This process's system (kernel) seconds so far: what its page faults cost, among the rest."""
    try:
        import resource
    except ImportError:  # not on Windows: there no run is taken for warm-up by its system time
        return 0.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_stime


def _copy(source: cf.Future[Any], target: cf.Future[Any]) -> None:
    if source.cancelled():  # the pool shut down under it: the chained future must still end
        target.set_exception(cf.CancelledError())
    elif source.exception() is not None:
        target.set_exception(source.exception())
    else:
        target.set_result(source.result())


def _refuse_pin(pin: Mapping[str, Any] | None) -> None:
    if pin:
        raise OpenclawError(f"pinning a stage ({', '.join(pin)}) needs distributed workers; this session runs its "
                            "tasks in one process: set parallel.engine=distributed or parallel.backend=process")


def signals_deferred() -> contextlib.AbstractContextManager[None]:
    """Ctrl-C or SIGTERM while a cluster closes takes effect once it has closed (see :func:`_signals_deferred`)."""
    if threading.current_thread() is not threading.main_thread():
        return contextlib.nullcontext()
    return _signals_deferred()


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Note SIGINT and SIGTERM during the block and send them again after it.

    Raised half way, the interrupt would leave the nannies and worker processes to distributed's
    exit hooks: seconds more, "Failed to remove" errors and tracebacks. Blocking the signals in
    the main thread is not enough (the kernel hands them to another thread, and Python runs the
    handler in the main thread all the same), so the handlers are replaced by one that notes
    the signal, and a noted signal is sent again once the close is done.
    """
    import os
    import signal

    noted: list[signal.Signals] = []
    kinds = (signal.SIGINT, signal.SIGTERM)
    before = {k: signal.signal(k, lambda signum, frame: noted.append(signal.Signals(signum))) for k in kinds}
    try:
        yield
    finally:
        for kind, handler in before.items():
            signal.signal(kind, handler)
        for signum in dict.fromkeys(noted):  # each once, in the order they came
            handler = before[signum]
            if handler is not None and handler != signal.SIG_IGN:
                os.kill(os.getpid(), signum)
