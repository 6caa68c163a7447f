"""Starting a cluster: interruptible by Ctrl-C without leaving processes behind, and why a start failed in one line."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import wait as wait_for
from typing import Any

from openclaw_dask.errors import first_line, shorten

__all__ = ["first_cause", "interruptible", "stop_new_workers"]


def first_cause(error: BaseException) -> str:
    """The innermost exception under ``error`` ("Nanny failed to start" wraps why), in one short line."""
    seen = {id(error)}
    while (inner := error.__cause__ or error.__context__) is not None and id(inner) not in seen:
        seen.add(id(inner))
        error = inner
    return shorten(first_line(error), 300)


def interruptible(make: Callable[[], Any], wait: float, abort: Callable[[], None] | None = None) -> Any:
    """``make()`` a cluster in a helper thread; if Ctrl-C (or SIGTERM) ends the wait, close it once started.

    Called in this thread, distributed's ``sync`` would cancel the start half way on Ctrl-C, leaving
    nannies that neither it nor its exit hook can close (a traceback at exit, and a worker
    process left running). ``abort``, called on Ctrl-C every 50 ms until the start ends, cuts it
    short (see :func:`stop_new_workers`): otherwise the wait lasts as long as the workers take to start.
    """
    started: Future[Any] = Future()  # made before the thread: a Ctrl-C from its first instruction on finds it

    def run() -> None:
        try:
            started.set_result(_without_sigint(make))
        except BaseException as e:  # noqa: BLE001  (handed to the waiting thread)
            started.set_exception(e)

    try:
        threading.Thread(target=run, name="openclaw-start", daemon=True).start()
        return started.result()
    except (KeyboardInterrupt, SystemExit):
        deadline = time.monotonic() + wait
        while abort is not None and not started.done() and time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                abort()  # again until the start ends: the workers may not have been started yet
            wait_for([started], timeout=0.05)
        with contextlib.suppress(Exception):  # a start that failed has closed itself
            started.result(timeout=wait).close()
        raise


def stop_new_workers() -> Callable[[], None]:
    """A call that kills the worker processes this process starts from now on, for an interrupted start.

    Each spawned worker imports distributed, dask and NumPy before it can take part (1-2 s on a
    slow host); killed, its nanny's start fails at once ("Nanny failed to start") and the
    cluster closes what did start. A worker process is told by its command line: multiprocessing's
    ``spawn_main`` (spawn, forkserver) or this process's own (fork). Other children (a process of
    the user's, multiprocessing's resource tracker) are left alone; so is every process older than this call.
    """
    import psutil

    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    own = me.cmdline()

    def kill() -> None:
        for child in me.children(recursive=True):
            with contextlib.suppress(psutil.Error):  # gone already
                if child.pid not in before and ("spawn_main" in " ".join(cmd := child.cmdline()) or cmd == own):
                    child.kill()

    return kill


def _without_sigint(make: Callable[[], Any]) -> Any:
    """``make()`` with SIGINT blocked in this thread, and so in every thread and process it starts.

    A signal mask is inherited by new threads and kept across fork and exec: the cluster's
    event loop thread, the threads its nannies start worker processes from, and those worker
    processes (from their first instruction, before any preload could run) never take the
    terminal's Ctrl-C. The main thread still does, and the session then stops them.
    """
    import signal
    from multiprocessing import resource_tracker

    from openclaw_dask.cluster.main_guard import start_method

    # Python starts its resource tracker with SIGINT blocked and then *unblocks* SIGINT in the
    # thread that started it: started later in the event loop thread, it would undo this mask.
    # Forked workers need none (nor does anything else here start one): a process and ~25 ms less.
    if start_method() != "fork":
        resource_tracker.ensure_running()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    return make()
