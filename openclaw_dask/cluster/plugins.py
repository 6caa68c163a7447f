"""Worker plugins openclaw registers on the workers of its sessions (and one nanny plugin)."""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

from distributed.diagnostics.plugin import NannyPlugin, WorkerPlugin

from openclaw_dask.cluster.heap import (
    DISTRIBUTED_TRIM,
    M_TRIM_THRESHOLD,
    WORKER_HEAP,
    WORKER_HEAP_MIN_LIMIT,
    glibc,
    tunable_glibc,
)
from openclaw_dask.cluster.worker_shape import LOGGERS, TRANSFER_KEYS

if TYPE_CHECKING:
    from distributed import Nanny, Worker
    from distributed.core import Server

__all__ = ["BlasThreads", "CupyPool", "LogLevel", "QuietNanny", "TransferBuffer", "WorkerHeap", "stop_system_monitor"]


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
    """:data:`~openclaw_dask.cluster.heap.WORKER_HEAP` in each worker process; distributed's trim threshold back
    at teardown (why: :mod:`openclaw_dask.cluster.heap`).

    Not in the session's own process (the thread backend's in-process worker: :func:`~openclaw_dask.cluster.heap.heap_reuse`
    decides there), not over the user's own ``MALLOC_*`` tuning, and not under a memory limit
    below :data:`WORKER_HEAP_MIN_LIMIT`: blocks freed in the middle of a heap stay mapped, and a
    150 MiB worker reading Zarr chunks paused at its limit holding 80 bytes of data.
    """

    name = "openclaw-worker-heap"

    def __init__(self) -> None:
        self.client_pid = os.getpid()
        self.applied = False

    def setup(self, worker: Worker) -> None:
        limit = getattr(getattr(worker, "memory_manager", None), "memory_limit", None)
        wanted = os.getpid() != self.client_pid and (limit is None or limit >= WORKER_HEAP_MIN_LIMIT)
        libc = tunable_glibc() if wanted else None
        if libc is not None:
            for param, value in WORKER_HEAP:
                libc.mallopt(param, value)
            self.applied = True

    def teardown(self, worker: Worker) -> None:
        libc = glibc() if self.applied else None
        if libc is not None:
            libc.mallopt(M_TRIM_THRESHOLD, int(DISTRIBUTED_TRIM))
            libc.malloc_trim(0)


class QuietNanny(NannyPlugin):
    """The nanny updates no system monitor: nothing reads a nanny's.

    Every distributed server samples its process's CPU, memory, file descriptors and the host's
    disk and network counters every 500 ms, for the dashboard's plots. The process backend's
    nannies and scheduler run in the session's process, where each sample's ``/proc`` reads hand
    the GIL back and forth with the user's main thread: building 1,000 ``delayed`` objects took
    1.4-3.1% longer with those three monitors sampling (docs/benchmarks.md, ninth pass). The
    workers keep theirs: their heartbeats carry its memory figure to the scheduler.
    """

    name = "openclaw-quiet-nanny"
    idempotent = True

    async def setup(self, nanny: Nanny) -> None:
        await stop_system_monitor(nanny)


async def stop_system_monitor(server: Server) -> None:
    """Stop ``server``'s periodic system-monitor sample, or keep it from starting (on its event loop)."""
    sampling = server.periodic_callbacks.pop("monitor", None)
    if sampling is not None:
        sampling.stop()
