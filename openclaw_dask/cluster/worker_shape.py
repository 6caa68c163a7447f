"""The shape of one worker process, the same for process, mpi and ``openclaw worker``, and the names the
session's settings use: pure, and free of distributed, which a thread session never imports."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from openclaw_dask.config import Config

__all__ = ["BLAS_VARIABLES", "LOGGERS", "TRANSFER_KEYS", "blas_env", "blas_threads", "task_threads", "worker_processes"]

LOGGERS = ("openclaw_dask", "distributed")
BLAS_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
# The most bytes one message between two workers carries: the pieces a task needs from one
# peer (gather), and a p2p rechunk's shards. fusion_buffer_size sets both.
TRANSFER_KEYS = ("distributed.worker.transfer.message-bytes-limit", "distributed.p2p.comm.message-bytes-limit")


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
