"""Which path a graph takes on dask's threaded scheduler: the task threads or the calling thread, by measurement.

A second thread gains nothing where a graph is bound by memory bandwidth (a sum that one thread
already streams at the machine's limit) or by the scheduler's cost per task (tasks of a few µs
whose hand-offs between threads cost more than they run), and there it loses: the hand-offs are
paid and nothing is won. Which graphs those are depends on the machine, so it is measured, per
graph shape (:func:`signature`: its layers' kinds, its outputs' chunks), by :class:`PathChooser`:

1. The first three computes of a shape run on the task threads. The first is never counted: it
   pays what a shape pays once (its first BLAS call, its temporaries' first pages), and counted it
   tipped choices: in 2 of 4 quick reports the tree-reduction took one thread, "16.4 ms on one
   thread, 16.7 on 2", where 2 threads take 10 (docs/benchmarks.md, twenty-fourth pass). A later run
   that spent over a quarter of its wall time in the kernel (system time: page faults while the heap
   grows to what two threads hold at once) is warm-up too, not evidence, up to :data:`_KEPT` such runs
   a path: on a VM where a fault costs ~1 ms, stencil's first two runs on 2 threads took 2.6 and 1.1 s
   (4.5 and 1.5 s of system time), then 370 ms each, against 620 ms on one thread; counted, they chose
   one thread for good.
2. The fourth runs once on the calling thread, unless that could cost more than one more run: when
   the tasks' busy time on the threads (what the work would take one thread, or more, since threads
   slow each other down on memory) is over twice the run's wall time. That never holds on 2
   threads, where one thread takes at most about twice as long as both.
3. From then on each compute takes the path whose median of its last three runs is lower (:func:`_typical`).
   The chosen path keeps being measured: if it slows, the other path is taken again.
4. The other path is run once more when its runs are :data:`_RETRY` computes of the shape old, then
   after twice as many each time that changes nothing (up to :data:`_MAX_RETRY`): its kept runs may
   come from a noisy stretch. Without it, three slow runs of the faster path handed a 64 MiB sum to
   one thread for the rest of the session (5.3 ms a run there against 4.5 on 2 threads).

While a profiler records the pool, no trial starts: a profile shows the path the engine has settled
on, or the task threads. The choice and its figures are :attr:`PathChooser.last` (``openclaw run`` prints it).
"""

from __future__ import annotations

import statistics
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

__all__ = ["PARALLEL", "SCHEDULER", "SERIAL", "WORKERS", "Choice", "PathChooser", "path_line", "signature"]

PARALLEL, SERIAL = "threads", "one thread"
# a distributed engine's paths (cluster/direct.py)
WORKERS, SCHEDULER = "straight to the workers", "through the scheduler"
_WARM_RUNS = 2  # counted parallel runs of a shape before it is tried on one thread (after the first, never counted)
_KEPT = 3  # runs kept per path: their median stands for the path
MAX_SIGNED_LAYERS = 10_000  # a bigger graph always takes the task threads: its shape would cost too much to key
_WARMING_SHARE = 0.25  # system time over this share of a run's wall: the run paid page faults, not its path's cost
_WARMING_MIN_S = 0.01  # ... and over this much (getrusage's figures of a short run are a few ticks of noise)
_RETRY, _MAX_RETRY = 8, 64  # computes of a shape after which the path not taken is run again (doubling while it loses)
_MEASURING = "measuring this graph on the task threads"
_TOO_DEAR = "one thread would cost more than one more run to try"


@dataclass
class _Runs:
    parallel: deque[float] = field(default_factory=lambda: deque(maxlen=_KEPT))
    serial: deque[float] = field(default_factory=lambda: deque(maxlen=_KEPT))
    busy: float = 0.0  # task seconds of the last parallel run
    wall: float = 0.0  # and its wall seconds
    tried: bool = False  # the serial trial was decided (run, or refused as too costly)
    warming: Counter[str] = field(default_factory=Counter)  # runs per path not counted: they paid page faults
    count: int = 0  # computes of the shape noted
    latest: dict[str, int] = field(default_factory=dict)  # path -> the count at its latest run
    retry: int = _RETRY  # computes after which the path not taken is run again
    faster: str = PARALLEL  # the path measured faster at the last choice


@dataclass(frozen=True)
class Choice:
    """The path one compute took and the measurements it was chosen by (seconds; ``None``: not measured)."""

    path: str
    reason: str
    parallel_s: float | None
    serial_s: float | None

    def text(self) -> str:
        """One line for a run summary, e.g. ``one thread: 11.2 ms there against 13.0 ms on 2 threads``."""
        return f"{self.path}: {self.reason}"


class PathChooser:
    """Per graph shape, the path measured faster: the pool's ``threads`` task threads or the calling thread."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self._shapes: dict[Any, _Runs] = {}
        self.last: Choice | None = None  # the choice of the most recent compute
        self._last_runs: _Runs | None = None  # and its shape's runs (None: no shape)

    def path(self, shape: Any, *, trial: bool = True) -> str:
        """The path the next compute of ``shape`` takes (also kept as :attr:`last`); ``trial=False``: no trial run now."""
        runs = self._shapes.setdefault(shape, _Runs()) if shape is not None else _Runs()
        self._last_runs = runs if shape is not None else None
        if shape is None or len(runs.parallel) < _WARM_RUNS and not runs.serial:
            return self._chose(PARALLEL, _MEASURING, runs)
        if not runs.tried and not trial:
            return self._chose(PARALLEL, f"{_MEASURING} (no trial while profiled)", runs)
        if not runs.tried:
            runs.tried = True
            if runs.busy > 2 * runs.wall:  # the same run's: the fastest run's wall made noise refuse it for good
                return self._chose(PARALLEL, _TOO_DEAR, runs)
            return self._chose(SERIAL, "trying this graph on one thread", runs)
        if not runs.serial:
            return self._chose(PARALLEL, _TOO_DEAR, runs)
        serial_s, parallel_s = _typical(runs.serial), _typical(runs.parallel)
        faster = SERIAL if serial_s < parallel_s else PARALLEL
        if faster != runs.faster:
            runs.faster, runs.retry = faster, _RETRY
        other = SERIAL if faster == PARALLEL else PARALLEL
        if trial and runs.count - runs.latest.get(other, 0) >= runs.retry:  # its runs are old: measure it again
            runs.retry = min(2 * runs.retry, _MAX_RETRY)
            return self._chose(other, f"measuring {other} again after {runs.count - runs.latest.get(other, 0)} runs", runs)
        return self._chose(faster, f"measured faster ({_ms(serial_s)} on one thread, {_ms(parallel_s)} on {self.threads})", runs)

    def settled(self) -> bool:
        """Whether the last compute's shape is past its trial on one thread: run and counted, or refused as too dear."""
        return self._last_runs is None or self._last_runs.tried

    def ran(self, shape: Any, path: str, seconds: float, busy: float, system: float = 0.0) -> None:
        """Note a compute of ``shape`` on ``path``: its wall ``seconds``, its tasks' ``busy`` seconds and the
        process's ``system`` seconds meanwhile (a run mostly in the kernel is warm-up: not counted, up to a limit)."""
        if shape is None:
            return
        runs = self._shapes.setdefault(shape, _Runs())
        runs.count += 1
        runs.latest[path] = runs.count
        if runs.count == 1:  # the shape's first run: its one-time costs say nothing of its path
            return
        if system > max(_WARMING_SHARE * seconds, _WARMING_MIN_S) and runs.warming[path] < _KEPT:
            runs.warming[path] += 1
            runs.tried = runs.tried and path != SERIAL  # a trial that only warmed up is tried again
            return
        if path == SERIAL:
            runs.serial.append(seconds)
        else:
            runs.parallel.append(seconds)
            runs.busy, runs.wall = busy, seconds

    def _chose(self, path: str, reason: str, runs: _Runs) -> str:
        self.last = Choice(path, reason, _typical(runs.parallel) if runs.parallel else None,
                           _typical(runs.serial) if runs.serial else None)
        return path


def path_line(choice: Choice | None) -> str | None:
    """``choice``'s line for a run summary: a path of the threaded scheduler once both were measured (else ``None``:
    nothing chosen yet), any other path (a distributed engine's: :mod:`~openclaw_dask.cluster.direct`) as it is."""
    if choice is None or (choice.path in (PARALLEL, SERIAL) and choice.serial_s is None):
        return None
    return choice.text()


def signature(collections: list[Any]) -> Any:
    """A hashable shape of ``collections``' graph: each layer's kind, counted, and each array's chunks and dtype.

    Two graphs of one shape run the same kinds of task on the same blocks (the same kernel on new
    data, a loop's next step); ``None`` where the graph is too big to key cheaply.
    """
    from dask.utils import key_split

    kinds: Counter[str] = Counter()
    outputs = []
    for c in collections:
        graph = c.__dask_graph__()
        layers = getattr(graph, "layers", None)
        names = layers.keys() if layers is not None else graph.keys()
        if len(names) > MAX_SIGNED_LAYERS:
            return None
        kinds.update(key_split(name) for name in names)
        kind = type(c)  # asked of the class: a Delayed makes any attribute it is asked for into a task
        outputs.append((kind.__name__, c.chunks if hasattr(kind, "chunks") else None, str(c.dtype) if hasattr(kind, "dtype") else ""))
    return frozenset(kinds.items()), tuple(outputs)


def _typical(runs: deque[float]) -> float:
    """What a path's kept runs say a run takes: their median.

    Not their fastest: on 2 cores, two task threads ran a 64 MiB sum in 4 ms now and then and in 6-8 ms
    most of the time; chosen by its fastest runs, the quick suite's sum ran at 0.84-0.98x serial (docs/benchmarks.md,
    twenty-second pass).
    """
    return statistics.median(runs)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"
