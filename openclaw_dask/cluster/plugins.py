"""Worker plugins openclaw registers on the workers of its sessions."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from distributed.diagnostics.plugin import WorkerPlugin

if TYPE_CHECKING:
    from distributed import Worker

    from openclaw_dask.config import Config

__all__ = ["BLAS_VARIABLES", "LOGGERS", "TRANSFER_KEYS", "BlasThreads", "CupyPool", "LogLevel", "TransferBuffer", "blas_env",
           "blas_threads", "task_threads", "worker_processes"]

LOGGERS = ("openclaw_dask", "distributed")
BLAS_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
# The most bytes one message between two workers carries: the pieces a task needs from one
# peer (gather), and a p2p rechunk's shards. fusion_buffer_size sets both.
TRANSFER_KEYS = ("distributed.worker.transfer.message-bytes-limit", "distributed.p2p.comm.message-bytes-limit")


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


# The shape of one worker process, the same for process, mpi and ``openclaw worker``.


def blas_threads(config: Config) -> int:
    """BLAS/OpenMP threads per worker process: ``omp_threads`` with ``hybrid``, else 1."""
    p = config.parallel
    return p.omp_threads if p.hybrid else 1


def blas_env(config: Config) -> dict[str, str]:
    """The environment that starts a worker process with :func:`blas_threads` BLAS/OpenMP threads."""
    return dict.fromkeys(BLAS_VARIABLES, str(blas_threads(config)))


def task_threads(config: Config) -> int:
    """Task threads per worker process: one with ``hybrid``, else ``omp_threads``."""
    p = config.parallel
    return 1 if p.hybrid else p.omp_threads


def worker_processes(config: Config) -> int:
    """``parallel.workers`` processes; ``auto`` = as many as the cores hold at ``omp_threads`` each."""
    from dask.system import CPU_COUNT

    p = config.parallel
    return max(1, CPU_COUNT // p.omp_threads) if p.workers == "auto" else p.workers
