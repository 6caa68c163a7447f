"""Worker plugins openclaw registers on the workers of its sessions."""

from __future__ import annotations

import logging

from distributed.diagnostics.plugin import WorkerPlugin

__all__ = ["LOGGERS", "BlasThreads", "LogLevel", "blas_threads"]

LOGGERS = ("openclaw_dask", "distributed")


class LogLevel(WorkerPlugin):
    """Set the ``distributed`` and ``openclaw_dask`` log level inside each worker."""

    name = "openclaw-log-level"

    def __init__(self, level: str) -> None:
        self.level = level

    def setup(self, worker) -> None:
        for name in LOGGERS:
            logging.getLogger(name).setLevel(self.level)


class BlasThreads(WorkerPlugin):
    """Hold every BLAS/OpenMP pool in the worker process at ``n`` threads (threadpoolctl).

    The environment variables set at spawn cover libraries loaded later; this covers
    those already loaded, whoever started the worker.
    """

    name = "openclaw-blas-threads"

    def __init__(self, n: int) -> None:
        self.n = n
        self._limits = None

    def setup(self, worker) -> None:
        from threadpoolctl import threadpool_limits

        self._limits = threadpool_limits(limits=self.n)

    def teardown(self, worker) -> None:
        if self._limits is not None:
            self._limits.restore_original_limits()


def blas_threads(config) -> int:
    """BLAS/OpenMP threads per worker process: ``omp_threads`` with ``hybrid``, else 1."""
    p = config.parallel
    return p.omp_threads if p.hybrid else 1
