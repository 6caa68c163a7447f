"""Pipeline parallelism: micro-batches stream through dependent stages, a bounded number at a time.

Each group of batches becomes a chain of tasks, one per stage, so stage 2 of group ``i`` runs
while stage 1 of group ``i + 1`` does (on a cluster the next stage's input never visits the
client). At most ``in_flight`` batches are alive: the source is read only as fast as results
are taken, which bounds memory whatever its length.

A group is one batch until the first batch has been through every stage; then, unless the
caller fixed ``in_flight``, as many batches go into each task as keep the engine's per-task
cost (``Engine.task_overhead_s``) under 5% of the stages' measured time, as
:func:`~openclaw_dask.dataflow.map` does (at most :data:`MAX_GROUP`), and ``in_flight`` grows
with it. Each stage function is still called once per batch of ``batch_size`` items.

Consecutive stages pinned alike run as one task (:attr:`Pipeline.fused`) for the first batches,
and from then on where one task per stage would still cost more than 5% of its group's time:
each hop between stages is a task, and on worker processes a round trip to the scheduler (the
quick suite's pipeline: 160 ms a run with a task per stage, 119 ms fused). Elsewhere each stage
stays its own task: on a task pool's threads, stages of different groups then share the
interpreter better (the standard suite's: 681 ms a run with a task per stage, 727 ms fused).
"""

from __future__ import annotations

import itertools
import logging
import math
import statistics
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Sized
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from openclaw_dask.dataflow._tasks import tasks_of, token
from openclaw_dask.dataflow.batched import OVERHEAD_SHARE, items_per_task
from openclaw_dask.errors import BatchFailed, OpenclawError

if TYPE_CHECKING:
    from openclaw_dask.cluster import RunningCluster, SessionLike

__all__ = ["MAX_GROUP", "Pipeline", "Stage", "StageTimes", "group_size", "pipeline"]

logger = logging.getLogger("openclaw_dask.dataflow")

MAX_GROUP = 64  # batches per task, at most


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
    """Seconds each batch spent in one stage, and the bytes of what it returned (:func:`dask.sizeof.sizeof`)."""

    stage: str
    seconds: list[float] = field(default_factory=list)
    nbytes: list[int] = field(default_factory=list)

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
    """A stage's output and the (seconds, output bytes) of every stage so far: they travel with the data.

    ``source``: the bytes of the batch the first stage was given.
    """

    __slots__ = ("source", "spans", "value")

    def __init__(self, value: Any, spans: tuple[tuple[float, int], ...], source: int) -> None:
        self.value, self.spans, self.source = value, spans, source


class _StageError(Exception):
    """Raised in a task: the stage that failed, its error, and the batch's place in its group (they pickle, as args)."""


def _run_stage(previous: list[Any], fn: Callable[[Any], Any], name: str) -> list[_Carry]:
    """``fn`` on each batch of a group (source batches, or the carries of the stage before)."""
    from dask.sizeof import sizeof

    out = []
    for offset, item in enumerate(previous):
        value, spans, source = (item.value, item.spans, item.source) if isinstance(item, _Carry) else (item, (), sizeof(item))
        t0 = time.perf_counter()
        try:
            result = fn(value)
        except Exception as e:
            raise _StageError(name, e, offset) from e
        out.append(_Carry(result, (*spans, (time.perf_counter() - t0, sizeof(result))), source))
    return out


def _run_stages(previous: list[Any], steps: tuple[tuple[Callable[[Any], Any], str], ...]) -> list[_Carry]:
    """Each ``(fn, name)`` of ``steps`` in turn on each batch of a group (stages fused into one task)."""
    for fn, name in steps:
        previous = _run_stage(previous, fn, name)
    return previous


def _runs(stages: list[Stage], fused: bool) -> list[list[Stage]]:
    """The stages as the tasks of one group: each its own, or (``fused``) consecutive stages pinned alike together."""
    runs: list[list[Stage]] = []
    for stage in stages:
        if fused and runs and runs[-1][0].pin() == stage.pin():
            runs[-1].append(stage)
        else:
            runs.append([stage])
    return runs


def group_size(stage_s: list[float], task_overhead_s: float, slots: int, remaining: int | None) -> int:
    """Batches per task so the per-task cost stays under ``OVERHEAD_SHARE`` of the stages' time (pure).

    ``stage_s``: one batch's seconds in each stage. Never so many that fewer than two groups
    per slot are left of ``remaining`` batches (None: unknown), nor more than :data:`MAX_GROUP`.
    What is left is then cut into a whole number of groups per slot, as even as they come: 27
    batches on 2 slots in groups of 8 were 8, 8, 8 and 3, and one worker ran 16 while the other ran 11.
    """
    size, slots = items_per_task(task_overhead_s, sum(stage_s) / max(1, len(stage_s))), max(1, slots)
    if remaining is not None and remaining > 0:
        size = min(size, MAX_GROUP, math.ceil(remaining / (2 * slots)))
        groups = slots * math.ceil(math.ceil(remaining / size) / slots)
        size = math.ceil(remaining / groups)
    return max(1, min(size, MAX_GROUP))


class Pipeline:
    """The stream :func:`pipeline` returns: iterate it for the results, in order.

    Attributes
    ----------
    stages : list of Stage
        The stages, in order.
    times : list of StageTimes
        Per stage, the seconds each finished batch spent in it and the bytes it returned.
    source_bytes : int
        The biggest batch the first stage was given, in bytes.
    in_flight : int
        Batches alive at once, at most (grown with ``group`` when chosen).
    batches : int
        Batches finished so far.
    peak_in_flight : int
        Most batches alive at once (never above ``in_flight``).
    group : int
        Batches per task (see the module docstring).
    fused : bool
        Whether consecutive stages pinned alike run as one task (see the module docstring).
    note : str
        How ``group`` was chosen, or that the stream is overhead-bound at a fixed ``in_flight``.
    wall_s : float
        From the first submit to the last result.
    """

    def __init__(self, tasks: RunningCluster, stages: list[Stage], batches: Iterable[Any], in_flight: int | None, *,
                 total: int | None, progress: bool) -> None:
        self._tasks, self.stages, self._batches = tasks, stages, batches
        self._auto = in_flight is None  # the group size, and in_flight with it, follow the first batch's timings
        self.in_flight = 2 * tasks.slots if in_flight is None else in_flight
        self.total, self.progress = total, progress
        self.times = [StageTimes(s.label) for s in stages]
        self.batches = self.peak_in_flight = self.source_bytes = 0
        self.group, self.note = 1, ""
        self.fused = True  # until the first batch's timings say otherwise
        self.wall_s = 0.0
        self._token = token()
        self._started = False
        self._submitted = 0  # batches sent so far

    def __iter__(self) -> Iterator[Any]:
        if self._started:
            raise OpenclawError("a pipeline streams once; call pipeline() again for another pass")
        self._started = True
        return self._stream()

    def _submit(self, index: int, group: list[Any]) -> Any:
        future = None
        for run in _runs(self.stages, self.fused):
            key = f"{'+'.join(stage.label for stage in run)}-{self._token}-{index}"  # the profiler names it so
            steps = tuple((stage.fn, stage.label) for stage in run)
            future = (self._tasks.submit(key, _run_stages, group, steps, pin=run[0].pin()) if future is None
                      else self._tasks.submit(key, _run_stages, steps, after=future, pin=run[0].pin()))
        return future

    def _stream(self) -> Iterator[Any]:
        from openclaw_dask.progress import bar

        window: deque[tuple[int, int, Any]] = deque()  # (first batch's index, batches, future)
        source, index = iter(self._batches), 0
        t0 = time.perf_counter()
        try:
            with bar("pipeline batches", self.total, self.progress) as advance:
                while group := list(itertools.islice(source, self.group if self.batches else 1)):
                    # back-pressure: read the source no faster than results go
                    while window and sum(n for _, n, _ in window) + len(group) > self.in_flight:
                        for value in self._take(window):
                            yield value
                            advance()
                    window.append((index, len(group), self._submit(index, group)))
                    index = self._submitted = index + len(group)
                    self.peak_in_flight = max(self.peak_in_flight, sum(n for _, n, _ in window))
                while window:
                    for value in self._take(window):
                        yield value
                        advance()
        finally:  # an error, or a consumer that stopped early: nothing keeps running for nobody
            self._tasks.cancel(f for _, _, f in window)
            self.wall_s = time.perf_counter() - t0

    def _take(self, window: deque[tuple[int, int, Any]]) -> list[Any]:
        index, _, future = window.popleft()
        try:
            carries = self._tasks.gather([future])[0]
        except _StageError as e:
            stage, cause, offset = e.args
            raise BatchFailed(index + offset, stage, cause) from cause
        for carry in carries:
            self.source_bytes = max(self.source_bytes, carry.source)
            for times, (seconds, nbytes) in zip(self.times, carry.spans):
                times.seconds.append(seconds)
                times.nbytes.append(nbytes)
        if not self.batches:
            self._plan([seconds for seconds, _ in carries[0].spans])
        self.batches += len(carries)
        return [carry.value for carry in carries]

    def _plan(self, stage_s: list[float]) -> None:
        """After the first batch: how many batches go into each task from now on."""
        overhead, stage = self._tasks.engine.task_overhead_s, max(sum(stage_s) / max(1, len(stage_s)), 1e-9)
        share = overhead / stage
        if self._auto:
            remaining = None if self.total is None else self.total - self._submitted  # the first batches went alone
            self.group = group_size(stage_s, overhead, self._tasks.slots, remaining)
            self.in_flight = 2 * self._tasks.slots * self.group
            self.note = (f"{self.group} batch(es) per task: {overhead * 1e3:.2g} ms per task against "
                         f"{stage * 1e3:.3g} ms per stage and batch")
        elif share > OVERHEAD_SHARE:
            self.note = (f"overhead-bound: {overhead * 1e3:.2g} ms per task is {share:.0%} of a stage's time per batch; "
                         "leave in_flight unset to put several batches in each task")
            logger.warning("pipeline: %s", self.note)
        self.fused = share / self.group > OVERHEAD_SHARE
        if self.fused and (tasks := len(_runs(self.stages, True))) < len(self.stages):
            self.note += f"; its {len(self.stages)} stages run as {tasks} task(s) a group"


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
        Most batches alive at once, one batch per task; default: twice the session's task
        threads times the batches per task chosen from the first batch's timings.
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
    if (in_flight is not None and in_flight < 1) or (batch_size is not None and batch_size < 1):
        raise OpenclawError(f"pipeline(): in_flight={in_flight} and batch_size={batch_size} must be at least 1")
    total = None
    if isinstance(source, Sized):
        n = len(source)
        total = n if batch_size is None else -(-n // batch_size)
    return Pipeline(tasks_of(session), pinned, _micro_batches(source, batch_size), in_flight,
                    total=total, progress=progress)
