"""Pipeline parallelism: micro-batches stream through dependent stages, a bounded number at a time.

Each batch becomes a chain of tasks, one per stage, so stage 2 of batch ``i`` runs while
stage 1 of batch ``i + 1`` does (on a cluster the next stage's input never visits the
client). At most ``in_flight`` batches are alive: the source is read only as fast as
results are taken, which bounds memory whatever its length.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Sized
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from openclaw_dask.dataflow._tasks import tasks_of, token
from openclaw_dask.errors import BatchFailed, OpenclawError

if TYPE_CHECKING:
    from openclaw_dask.cluster import RunningCluster, SessionLike

__all__ = ["Pipeline", "Stage", "StageTimes", "pipeline"]


@dataclass(frozen=True)
class Stage:
    """One step of a pipeline: ``fn(batch) -> batch``.

    Parameters
    ----------
    fn
        Takes what the stage before returned (the first stage: the micro-batch, a list of
        ``batch_size`` source items, or one source item when ``batch_size`` is None).
    name
        For task keys, the profile and the timings; default ``fn.__name__``.
    workers, resources
        Pin the stage (distributed engines): worker addresses, or worker resources such as
        ``{"GPU": 1}`` that only some workers have (``dask worker --resources``).
    """

    fn: Callable[[Any], Any]
    name: str = ""
    workers: Sequence[str] | None = None
    resources: Mapping[str, float] | None = None

    @property
    def label(self) -> str:
        return self.name or getattr(self.fn, "__name__", "stage").replace("_", "-")

    def pin(self) -> dict[str, Any]:
        pin: dict[str, Any] = {}
        if self.workers:
            pin["workers"] = list(self.workers)
        if self.resources:
            pin["resources"] = dict(self.resources)
        return pin


@dataclass
class StageTimes:
    """Seconds each batch spent in one stage."""

    stage: str
    seconds: list[float] = field(default_factory=list)

    @property
    def total_s(self) -> float:
        return sum(self.seconds)

    @property
    def median_s(self) -> float:
        return statistics.median(self.seconds) if self.seconds else 0.0

    @property
    def max_s(self) -> float:
        return max(self.seconds, default=0.0)


class _Carry:
    """A stage's output and the (stage, seconds) of every stage so far: timings travel with the data."""

    __slots__ = ("spans", "value")

    def __init__(self, value: Any, spans: tuple[tuple[str, float], ...]) -> None:
        self.value, self.spans = value, spans


class _StageError(Exception):
    """Raised in a task: the stage that failed, and its error (both pickle, as args)."""


def _run_stage(previous: Any, fn: Callable[[Any], Any], name: str) -> _Carry:
    value, spans = (previous.value, previous.spans) if isinstance(previous, _Carry) else (previous, ())
    t0 = time.perf_counter()
    try:
        out = fn(value)
    except Exception as e:
        raise _StageError(name, e) from e
    return _Carry(out, (*spans, (name, time.perf_counter() - t0)))


class Pipeline:
    """The stream :func:`pipeline` returns: iterate it for the results, in order.

    Attributes
    ----------
    times : list of StageTimes
        Per stage, the seconds each finished batch spent in it.
    batches : int
        Batches finished so far.
    peak_in_flight : int
        Most batches alive at once (never above ``in_flight``).
    wall_s : float
        From the first submit to the last result.
    """

    def __init__(self, tasks: RunningCluster, stages: list[Stage], batches: Iterable[Any], in_flight: int, *,
                 total: int | None, progress: bool) -> None:
        self._tasks, self._stages, self._batches = tasks, stages, batches
        self.in_flight, self.total, self.progress = in_flight, total, progress
        self.times = [StageTimes(s.label) for s in stages]
        self.batches = self.peak_in_flight = 0
        self.wall_s = 0.0
        self._token = token()
        self._started = False

    def __iter__(self) -> Iterator[Any]:
        if self._started:
            raise OpenclawError("a pipeline streams once; call pipeline() again for another pass")
        self._started = True
        return self._stream()

    def _submit(self, index: int, batch: Any) -> Any:
        future = None
        for stage in self._stages:
            key = f"{stage.label}-{self._token}-{index}"
            args = (stage.fn, stage.label)
            future = (self._tasks.submit(key, _run_stage, batch, *args, pin=stage.pin()) if future is None
                      else self._tasks.submit(key, _run_stage, *args, after=future, pin=stage.pin()))
        return future

    def _stream(self) -> Iterator[Any]:
        from openclaw_dask.progress import bar

        window: deque[tuple[int, Any]] = deque()
        t0 = time.perf_counter()
        try:
            with bar("pipeline batches", self.total, self.progress) as advance:
                for index, batch in enumerate(self._batches):
                    if len(window) >= self.in_flight:  # back-pressure: read the source no faster than results go
                        yield self._take(window)
                        advance()
                    window.append((index, self._submit(index, batch)))
                    self.peak_in_flight = max(self.peak_in_flight, len(window))
                while window:
                    yield self._take(window)
                    advance()
        finally:  # an error, or a consumer that stopped early: nothing keeps running for nobody
            self._tasks.cancel(f for _, f in window)
            self.wall_s = time.perf_counter() - t0

    def _take(self, window: deque[tuple[int, Any]]) -> Any:
        index, future = window.popleft()
        try:
            carry = self._tasks.gather([future])[0]
        except _StageError as e:
            stage, cause = e.args
            raise BatchFailed(index, stage, cause) from cause
        for times, (_, seconds) in zip(self.times, carry.spans):
            times.seconds.append(seconds)
        self.batches += 1
        return carry.value


def _micro_batches(source: Iterable[Any], batch_size: int | None) -> Iterator[Any]:
    if batch_size is None:
        yield from source
        return
    items = iter(source)
    while batch := list(itertools.islice(items, batch_size)):
        yield batch


def pipeline(session: SessionLike, stages: Sequence[Stage | Callable[[Any], Any]], source: Iterable[Any], *,
             batch_size: int | None = None, in_flight: int | None = None, progress: bool = False) -> Pipeline:
    """Stream ``source`` through ``stages`` in micro-batches; iterate the result for each batch's output, in order.

    Parameters
    ----------
    session
        A started :class:`~openclaw_dask.Session`: its cluster, its thread pool, or (serial) this thread.
    stages
        :class:`Stage` objects, or plain functions (unpinned stages).
    source
        Any iterable, read lazily.
    batch_size
        Source items per micro-batch (a list); default ``parallel.batch_size``. None: each
        source item is one batch, as it is.
    in_flight
        Most batches alive at once; default twice the session's task threads.
    progress
        Show a bar on the terminal.

    Raises
    ------
    BatchFailed
        When a stage raises: the batch's index, the stage's name and the error. The
        stream stops, and the batches still in flight are cancelled.
    """
    pinned = [s if isinstance(s, Stage) else Stage(s) for s in stages]
    if not pinned:
        raise OpenclawError("pipeline() needs at least one stage")
    batch_size = session.config.parallel.batch_size if batch_size is None else batch_size
    in_flight = 2 * session.slots if in_flight is None else in_flight
    if in_flight < 1 or (batch_size is not None and batch_size < 1):
        raise OpenclawError(f"pipeline(): in_flight={in_flight} and batch_size={batch_size} must be at least 1")
    total = None
    if isinstance(source, Sized):
        n = len(source)
        total = n if batch_size is None else -(-n // batch_size)
    return Pipeline(tasks_of(session), pinned, _micro_batches(source, batch_size), in_flight,
                    total=total, progress=progress)
