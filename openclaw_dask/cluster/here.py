"""What ran in this process rather than on the engine, told to the profiler.

Two passes run a graph's cheapest tasks in the client: the small-tasks pass
(:mod:`openclaw_dask.dataflow.small_tasks`) and a reduction's combines on a distributed engine
(:mod:`openclaw_dask.cluster.tails`). Those tasks never reach the engine's task stream, so each pass
tells :func:`tell` what it ran, and the profiler (``openclaw profile``) reports it as run in the
client instead of counting it as time outside tasks.

Tasks a compute sent straight to the workers (:mod:`openclaw_dask.cluster.direct`) never reach the
scheduler's task stream either: :func:`tell_stream` hands the profiler their records in that stream's form.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["Ran", "add", "streamed", "streams_watched", "tell", "tell_stream", "watched"]

Ran = dict[str, tuple[int, float]]  # task name -> (calls, seconds) run here

_WATCHERS: list[Callable[[Ran], None]] = []
_STREAMS: list[Callable[[list[dict[str, Any]]], None]] = []


@contextmanager
def watched(callback: Callable[[Ran], None]) -> Iterator[None]:
    """Call ``callback`` with what ran in this process for each graph computed inside this block."""
    _WATCHERS.append(callback)
    try:
        yield
    finally:
        _WATCHERS.remove(callback)


def add(into: Ran, name: str, calls: int, seconds: float) -> None:
    """Count ``calls`` of ``name`` that took ``seconds`` into ``into``."""
    before = into.get(name, (0, 0.0))
    into[name] = (before[0] + calls, before[1] + seconds)


def tell(ran: Ran) -> None:
    """``ran`` ran here, not on the engine: tell whoever watches."""
    if ran:
        for callback in _WATCHERS.copy():
            callback(ran)


@contextmanager
def streamed(callback: Callable[[list[dict[str, Any]]], None]) -> Iterator[None]:
    """Call ``callback`` with the task-stream records of each compute run on workers outside the scheduler in this
    block (one call a compute)."""
    _STREAMS.append(callback)
    try:
        yield
    finally:
        _STREAMS.remove(callback)


def streams_watched() -> bool:
    """Whether anyone watches the tasks sent straight to the workers (a profiler): records may then carry more."""
    return bool(_STREAMS)


def tell_stream(records: list[dict[str, Any]]) -> None:
    """One compute's tasks ran on workers without the scheduler (records as ``distributed``'s task stream has them,
    with ``input_bytes``): tell whoever watches."""
    for callback in _STREAMS.copy():
        callback(records)
