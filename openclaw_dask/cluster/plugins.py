"""Worker plugins openclaw registers on clusters it does not start itself."""

from __future__ import annotations

import logging

from distributed.diagnostics.plugin import WorkerPlugin

__all__ = ["LOGGERS", "LogLevel"]

LOGGERS = ("openclaw_dask", "distributed")


class LogLevel(WorkerPlugin):
    """Set the ``distributed`` and ``openclaw_dask`` log level inside each worker."""

    name = "openclaw-log-level"

    def __init__(self, level: str) -> None:
        self.level = level

    def setup(self, worker) -> None:
        for name in LOGGERS:
            logging.getLogger(name).setLevel(self.level)
