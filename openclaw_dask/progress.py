"""Progress bars for long work (on the terminal only, never in ``--json`` output), and the phases of a run
that are not the run itself (:func:`aside`)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from openclaw_dask.cluster import RunningCluster

__all__ = ["aside", "bar", "status", "track_persist", "watch_aside"]

_WATCHERS: list[Callable[[str, float, float], None]] = []


@contextmanager
def bar(description: str, total: int | None, enabled: bool) -> Iterator[Any]:
    """Yield ``advance(n=1)``: a bar on the terminal when ``enabled`` (``total`` None: no end known), else nothing."""
    if not enabled:
        yield lambda n=1: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(description, total=total)
        yield lambda n=1: progress.advance(task, n)


def track_persist(running: RunningCluster, collection: Any, description: str, *, show: bool) -> Any:
    """Persist ``collection`` on the started engine ``running`` and wait for it, with a bar per finished task."""
    return running.persist(collection, progress=lambda total: bar(description, total, show))


@contextmanager
def status(label: str, *, show: bool) -> Iterator[Any]:
    """Yield ``say(message)``: a spinner line on a terminal, one plain line per message otherwise."""
    if not show:
        yield lambda message: print(f"{label}: {message}", file=sys.stderr, flush=True)
        return
    from rich.console import Console

    with Console(stderr=True).status(label, spinner="dots") as spinner:
        yield lambda message: spinner.update(f"{label}: {message}")


@contextmanager
def aside(label: str) -> Iterator[None]:
    """Mark client-side work that is not part of the run (checking its answer against NumPy).

    Each :func:`watch_aside` callback gets ``(label, start, stop)`` (``time.time()``) when the block ends;
    the profiler leaves that time, and the tasks run inside it, out of the run's time outside tasks.
    """
    start = time.time()
    try:
        yield
    finally:
        for watch in _WATCHERS.copy():  # a callback may stop watching
            watch(label, start, time.time())


@contextmanager
def watch_aside(callback: Callable[[str, float, float], None]) -> Iterator[None]:
    """Call ``callback(label, start, stop)`` for each :func:`aside` block that ends inside this one."""
    _WATCHERS.append(callback)
    try:
        yield
    finally:
        _WATCHERS.remove(callback)
