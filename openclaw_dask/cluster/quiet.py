"""Filters for what distributed logs while a cluster stops under a run: teardown noise, not news.

A run ended by Ctrl-C, SIGTERM or a lost scheduler prints one line of openclaw's own. Without
these filters distributed adds its bookkeeping of that same stop: each task a worker was
running when it closed (``Async instruction ... ended with CancelledError``, which distributed
itself says "should exclusively happen in Worker.close()") and every wait of a gather that the
stop cut short (``Task exception was never retrieved ... AllExit``, distributed's internal
signal for "stop waiting"), a worker's heartbeat that met its scheduler closing, and a worker
whose reply to a peer's data request met that peer closed (``failed during get data``), and a
connection the stop left open, closed when it is collected (``Closing dangling stream``, ``rpc object
... deleted with 1 open comms``), a
scheduler's broadcast to a worker that was closing (``broadcast to ... failed``), and the
``NameError`` distributed's ``sync`` logs when Ctrl-C lands before its call began. Two more are
distributed's own teardown race (seen once in CI, Slurm, Ctrl-C): a scheduler closes its connection
pool twice (``Scheduler.close``, then ``Server.close``) around a connect that outlived its cancel
(Python 3.11's ``wait_for`` can swallow one), and the second close's ``reschedule`` of that
connect's timeout raises (``Exception while handling op terminate ... Cannot change state of
expiring Timeout``); its scratch folder, then released at exit after the session removed the
folder that held it, logs ``Failed to remove ... No such file or directory``. Installed
in openclaw's own worker processes (their scheduler is in the session's process), in the
scheduler and worker tasks of an srun step, and in the session's process. Nothing else is filtered.
"""

from __future__ import annotations

import errno
import logging
import traceback

__all__ = ["install"]


class _TeardownNoise(logging.Filter):
    """Drops a worker's cancelled-at-close tasks and a gather's unretrieved ``AllExit``."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "distributed.worker.state_machine":
            message = str(record.msg)
            return not (message.startswith("Async instruction for") and message.endswith("ended with CancelledError"))
        if record.name == "distributed.worker":
            message = str(record.msg)
            if message.startswith("failed during get data"):  # the worker that asked for it closed first
                return _exc_name(record) != "CommClosedError"
            # a heartbeat in flight as the scheduler closes (its process is ours)
            return not message.startswith("Failed to communicate with scheduler during heartbeat")
        if record.name == "distributed.comm.tcp":  # a comm the stop left open, collected without its close
            return not str(record.msg).startswith("Closing dangling stream")
        if record.name == "distributed.core":  # the same, in an rpc object collected with it (seen under SSH, Ctrl-C)
            return str(record.msg) != "rpc object %s deleted with %d open comms" and not _pool_closed_twice(record)
        if record.name == "distributed.diskutils" and str(record.msg).startswith("Failed to remove"):
            said = record.args[-1] if isinstance(record.args, tuple) and record.args else ""
            return f"[Errno {errno.ENOENT}]" not in str(said)  # already gone
        if record.name == "tornado.application":  # a call cut short by Ctrl-C before it began (distributed's sync)
            return not (_exc_name(record) == "NameError" and "sync.<locals>.cancel" in record.getMessage())
        if record.name in ("distributed.scheduler", "asyncio") and _broadcast_cut(record):
            return False
        exc = record.exc_info[1] if record.exc_info else None
        return type(exc).__name__ != "AllExit" or type(exc).__module__ != "distributed.client"


def _broadcast_cut(record: logging.LogRecord) -> bool:
    """A scheduler's message to every worker (a plugin added, a function run) that met a worker closed.

    Its caller is told (raised or returned); the scheduler also logs it, and where the stop cancelled
    that caller, asyncio logs the unretrieved error again as the task is collected (seen in CI under Slurm).
    """
    message = str(record.msg)
    if record.name == "distributed.scheduler":
        return message.startswith("broadcast to ") and ": CommClosedError: " in message
    return _exc_name(record) == "CommClosedError" and "Scheduler.broadcast.<locals>.send_message" in record.getMessage()


def _pool_closed_twice(record: logging.LogRecord) -> bool:
    """A connection pool's second close met a connect whose timeout its first close had already fired."""
    tb = record.exc_info[2] if record.exc_info else None
    names = {frame.f_code.co_name for frame, _ in traceback.walk_tb(tb)}
    return _exc_name(record) == "RuntimeError" and "cancel_timeout_cb" in names


def _exc_name(record: logging.LogRecord) -> str:
    return type(record.exc_info[1]).__name__ if record.exc_info else ""


_FILTER = _TeardownNoise("openclaw-teardown")


def install() -> None:
    """Put the filter on the loggers it reads, once per process."""
    for name in ("distributed.worker.state_machine", "distributed.worker", "distributed.comm.tcp", "distributed.core",
                 "distributed.scheduler", "distributed.diskutils", "asyncio", "tornado.application"):
        log = logging.getLogger(name)
        if _FILTER not in log.filters:
            log.addFilter(_FILTER)
