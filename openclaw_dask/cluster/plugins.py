"""Worker plugins openclaw registers on the workers of its sessions (and one nanny plugin)."""

from __future__ import annotations

import atexit
import gc
import logging
import os
import time
import weakref
from typing import TYPE_CHECKING, Any

from distributed.diagnostics.plugin import NannyPlugin, WorkerPlugin

from openclaw_dask.cluster.direct import activity
from openclaw_dask.cluster.heap import (
    DISTRIBUTED_TRIM,
    KEEP_IDLE_S,
    KEEP_MIN,
    M_MMAP_MAX,
    M_TRIM_THRESHOLD,
    MMAP_MAX_DEFAULT,
    WORKER_ARENA,
    WORKER_HEAP,
    WORKER_HEAP_MIN_LIMIT,
    WORKER_KEEP,
    glibc,
    heap_free,
    trim_point,
    tunable_glibc,
)
from openclaw_dask.cluster.worker_shape import LOGGERS, TRANSFER_KEYS

if TYPE_CHECKING:
    from distributed import Nanny, Worker
    from distributed.core import Server

__all__ = ["BlasThreads", "CupyPool", "HeapKeeper", "LogLevel", "QuickExit", "QuietNanny", "TransferBuffer", "WorkerHeap",
           "memory_check_after", "pace_memory_check", "stop_callbacks"]


class LogLevel(WorkerPlugin):
    """Set the ``distributed`` and ``openclaw_dask`` log level inside each worker."""

    name = "openclaw-log-level"

    def __init__(self, level: str) -> None:
        self.level = level

    def setup(self, worker: Worker) -> None:
        for name in LOGGERS:
            logging.getLogger(name).setLevel(self.level)


class CupyPool(WorkerPlugin):
    """CuPy's allocations on this worker's GPU: a memory pool of at most ``limit`` bytes, or no pool (None).

    CuPy pools by default, unbounded; ``memory_pooling: false`` turns that off, so each
    allocation goes to the driver. With RMM installed dask-cuda sets up its pool instead.
    """

    name = "openclaw-cupy-pool"

    def __init__(self, limit: int | None) -> None:
        self.limit = limit

    def setup(self, worker: Worker) -> None:
        import cupy

        if self.limit is None:
            cupy.cuda.set_allocator(None)
            return
        pool = cupy.cuda.MemoryPool()
        pool.set_limit(size=self.limit)
        cupy.cuda.set_allocator(pool.malloc)


class TransferBuffer(WorkerPlugin):
    """Pieces a worker fetches from one peer travel together, up to ``limit`` bytes a message.

    openclaw sets :data:`TRANSFER_KEYS` in the dask config of every process it starts; this
    plugin sets them on workers someone else started (backend ``remote``), and puts back
    what they had when the session leaves.
    """

    name = "openclaw-transfer-buffer"

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._before: tuple[float, object] | None = None

    def setup(self, worker: Worker) -> None:
        import dask.config

        # a worker reads the gather limit into its state once, as it starts; p2p reads the config each shuffle
        p2p = TRANSFER_KEYS[1]
        self._before = worker.state.transfer_message_bytes_limit, dask.config.get(p2p)
        worker.state.transfer_message_bytes_limit = self.limit
        dask.config.set({p2p: self.limit})

    def teardown(self, worker: Worker) -> None:
        import dask.config

        if self._before is not None:
            worker.state.transfer_message_bytes_limit, p2p_before = self._before
            dask.config.set({TRANSFER_KEYS[1]: p2p_before})


class BlasThreads(WorkerPlugin):
    """Hold every BLAS/OpenMP pool in the worker process at ``n`` threads (threadpoolctl).

    The environment variables set at spawn cover libraries loaded later; this covers
    those already loaded, whoever started the worker.
    """

    name = "openclaw-blas-threads"

    def __init__(self, n: int) -> None:
        self.n = n
        self._limits: Any = None  # threadpoolctl's limits while set

    def setup(self, worker: Worker) -> None:
        from threadpoolctl import threadpool_limits

        self._limits = threadpool_limits(limits=self.n)

    def teardown(self, worker: Worker) -> None:
        if self._limits is not None:
            self._limits.restore_original_limits()


class WorkerHeap(WorkerPlugin):
    """How a worker process's malloc keeps freed blocks (why: :mod:`openclaw_dask.cluster.heap`); glibc's own
    limits back at teardown.

    A worker spawned with one arena (:data:`~openclaw_dask.cluster.heap.WORKER_ARENA`) keeps every freed block
    until its :class:`HeapKeeper` gives the pages back; any other keeps blocks under 32 MiB
    (:data:`~openclaw_dask.cluster.heap.WORKER_HEAP`). Not in the session's own process (the thread backend's
    in-process worker: :func:`~openclaw_dask.cluster.heap.heap_reuse` decides there), not over the user's own
    ``MALLOC_*`` tuning, and not under a memory limit below :data:`WORKER_HEAP_MIN_LIMIT`: blocks freed in
    the middle of a heap stay mapped, and a 150 MiB worker reading Zarr chunks paused at its limit holding
    80 bytes of data.
    """

    name = "openclaw-worker-heap"
    tending = "openclaw-heap-keeper"  # the keeper's periodic callback on the worker

    def __init__(self) -> None:
        self.client_pid = os.getpid()
        self.applied = False
        self.keeper: HeapKeeper | None = None  # in a worker that keeps its freed blocks

    def setup(self, worker: Worker) -> None:
        memory = worker.memory_manager
        limit = memory.memory_limit
        wanted = os.getpid() != self.client_pid and (limit is None or limit >= WORKER_HEAP_MIN_LIMIT)
        libc = tunable_glibc() if wanted else None
        if libc is None:
            return
        # glibc read the arena limit as the process started (a nanny sets it first); a fork keeps its parent's heaps
        keeps = all(os.environ.get(k) == v for k, v in WORKER_ARENA.items()) and heap_free(libc) is not None
        for param, value in WORKER_KEEP if keeps else WORKER_HEAP:
            libc.mallopt(param, value)
        self.applied = True
        if keeps:
            from tornado.ioloop import PeriodicCallback

            self.keeper = keeper = HeapKeeper(worker, libc, trim_point(limit, (memory.memory_spill_fraction, memory.memory_pause_fraction)))
            worker.metrics["heap_free"] = keeper.free  # read with every heartbeat: the memory check's baseline
            every = 1000 * memory.memory_monitor_interval  # as often as distributed's own memory monitor looks
            worker.periodic_callbacks[self.tending] = callback = PeriodicCallback(keeper.tend, every)
            callback.start()

    def teardown(self, worker: Worker) -> None:
        callback = worker.periodic_callbacks.pop(self.tending, None)
        if callback is not None:
            callback.stop()
        libc = glibc() if self.applied else None
        if libc is not None:
            libc.mallopt(M_MMAP_MAX, MMAP_MAX_DEFAULT)
            libc.mallopt(M_TRIM_THRESHOLD, int(DISTRIBUTED_TRIM))
            libc.malloc_trim(0)


class HeapKeeper:
    """A worker's freed heap pages, given back (``malloc_trim``) once it has been idle
    :data:`~openclaw_dask.cluster.heap.KEEP_IDLE_S`, or at once while its memory is above ``point`` bytes.

    ``mallinfo2`` counts pages given back as free too: what was free just after the last trim is the
    floor, and only what is free beyond it is held (:meth:`free`).
    """

    def __init__(self, worker: Worker, libc: Any, point: int | None) -> None:
        self.worker, self.libc, self.point = worker, libc, point
        self.busy_at, self.executed, self.direct = time.monotonic(), worker.state.executed_count, activity()[0]
        self.floor = self.trims = 0
        self.trim()

    def free(self, worker: Worker | None = None) -> int:
        """Bytes freed since the last trim and still held (a worker metric: called with the worker)."""
        now = heap_free(self.libc) or 0
        self.floor = min(self.floor, now)  # pages given back were taken again
        return now - self.floor

    def trim(self) -> None:
        self.libc.malloc_trim(0)
        self.floor, self.trims = heap_free(self.libc) or 0, self.trims + 1

    def tend(self) -> None:
        state, now = self.worker.state, time.monotonic()
        # busy now, or since the last look: a task that ran between two looks counts too (else its blocks went at once);
        # tasks sent straight to the worker (cluster/direct.py) too
        direct_runs, direct_running = activity()
        if state.executing_count or state.in_flight_tasks or state.executed_count != self.executed or direct_running \
                or direct_runs != self.direct:
            self.busy_at, self.executed, self.direct = now, state.executed_count, direct_runs
        if self.free() < KEEP_MIN:
            return
        idle = now - self.busy_at >= KEEP_IDLE_S
        if idle or (self.point is not None and self.worker.monitor.get_process_memory() > self.point):
            self.trim()


class QuickExit(WorkerPlugin):
    """A worker process the session started ends without the interpreter's last scan of everything it holds.

    As a spawned process exits, CPython's final garbage collections walk every object still alive, the
    modules of dask, distributed and NumPy included: 70-80 ms a worker here, and closing the session waits
    for its workers to end (docs/benchmarks.md, seventeenth pass). Frozen at exit (``atexit``), those objects
    are left for the process's end to free, as a forked worker's ``os._exit`` leaves all of them; the other
    ``atexit`` handlers still run, and modules are still torn down. Never in the session's own process.
    """

    name = "openclaw-quick-exit"
    idempotent = True

    def __init__(self) -> None:
        self.client_pid = os.getpid()

    def setup(self, worker: Worker) -> None:
        if os.getpid() != self.client_pid:
            atexit.unregister(gc.freeze)  # once, however often the plugin is set up
            atexit.register(gc.freeze)


class QuietNanny(NannyPlugin):
    """The nanny wakes the session's event loop no more often than what it watches needs.

    The process backend's nannies and scheduler share one event loop in the session's process,
    and every wake-up takes the GIL from the user's main thread, a hand-off between cores that
    costs that thread more than the callback's own time (docs/benchmarks.md, ninth and twelfth
    passes). Where no dashboard reads them, each nanny keeps:

    - no system monitor: every distributed server samples its CPU, memory, file descriptors and
      the host's disk and network counters every 500 ms, for the dashboard's plots; the workers
      keep theirs (their heartbeats carry its memory figure to the scheduler);
    - no tick of its own: the scheduler times the same event loop, and logs it when blocked;
    - its memory check, which terminates a worker past ``distributed.worker.memory.terminate``,
      paced by how soon the worker could get there (:func:`memory_check_after`): as often as
      distributed checks (100 ms) near the threshold, up to once a second far below it.
    """

    name = "openclaw-quiet-nanny"
    idempotent = True

    async def setup(self, nanny: Nanny) -> None:
        await stop_callbacks(nanny, ("monitor", "tick", "ticks"))
        pace_memory_check(nanny)


# bytes a second one worker thread could add to its process's memory: above the 14.8 GiB/s at which one
# thread faulted in fresh (huge) pages here, 20 GiB/s for two, and the 26 GiB/s it wrote to pages it had
FILL_RATE = 32 * 2**30
MAX_CHECK_S = 1.0  # the memory check's longest pause, however far below its threshold the worker is
_PACED: weakref.WeakSet[Any] = weakref.WeakSet()  # the checks paced already (a nanny's plugins may be set up again)


def memory_check_after(rss: int, limit: int, fraction: float, threads: int, interval: float) -> float:
    """Seconds until the nanny's next memory check: the soonest its worker, at ``rss`` bytes, could pass
    ``fraction`` of ``limit`` filling :data:`FILL_RATE` per thread; never under ``interval`` (distributed's
    ``memory.monitor-interval``) nor over :data:`MAX_CHECK_S`."""
    headroom = limit * fraction - rss
    return min(MAX_CHECK_S, max(interval, headroom / (FILL_RATE * max(1, threads))))


def pace_memory_check(nanny: Nanny) -> None:
    """Run ``nanny``'s memory check (distributed's, unchanged) paced by :func:`memory_check_after`."""
    checking = nanny.periodic_callbacks.get("memory_monitor")
    limit, fraction = nanny.memory_manager.memory_limit, nanny.memory_manager.memory_terminate_fraction
    if checking is None or not limit or fraction is False or checking in _PACED:
        return  # no limit to check against (distributed starts no check either), or paced already
    check, interval = checking.callback, checking.callback_time / 1000
    watched: list[Any] = []  # the worker's psutil.Process, kept while its pid stays the same (_worker_rss)

    def paced() -> None:
        rss = _worker_rss(nanny, watched)
        after = interval if rss is None else memory_check_after(rss, limit, fraction, nanny.nthreads, interval)
        checking.callback_time = after * 1000  # tornado reads it as it schedules the next run
        if after <= interval:  # near or past the threshold, or no worker: distributed's check, which reads the memory again
            check()

    checking.callback = paced
    _PACED.add(checking)


def _worker_rss(nanny: Nanny, watched: list[Any]) -> int | None:
    """The resident bytes of ``nanny``'s worker process, as distributed's memory check reads them; ``None``: no worker."""
    import psutil

    worker = nanny.process.process if nanny.process is not None else None
    if worker is None or worker.pid is None:
        return None
    try:
        if not watched or watched[0].pid != worker.pid:  # a restarted worker is a new process
            watched[:] = [psutil.Process(worker.pid)]
        return int(watched[0].memory_info().rss)
    except psutil.Error:
        return None


async def stop_callbacks(server: Server, names: tuple[str, ...]) -> None:
    """Stop ``server``'s periodic callbacks ``names``, or keep them from starting (on its event loop)."""
    for name in names:
        if (callback := server.periodic_callbacks.pop(name, None)) is not None:
            callback.stop()
