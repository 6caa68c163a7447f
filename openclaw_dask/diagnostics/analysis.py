"""Turn a :class:`~openclaw_dask.diagnostics.collect.RunRecord` into numbers and verdicts.

Each verdict carries its evidence and the change that addresses it: in prose
(``fix``), and, where the fix is a configuration change, as ``overrides`` a program
can apply (``openclaw profile --apply-fix``, :mod:`openclaw_dask.diagnostics.fixes`). The
thresholds are constants here, chosen so that a balanced run on the reference
machine gets no verdict (``tests/test_profile.py`` plants each problem and runs a
balanced control).
"""

from __future__ import annotations

import ast
import heapq
import math
import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

import numpy as np
from dask.utils import format_bytes, format_time, key_split

from openclaw_dask.chunking import MAX_AUTO_CHUNK, min_auto_chunk
from openclaw_dask.config.keys import BACKEND, MEMORY_LIMIT, TASK_CHUNK_SIZE
from openclaw_dask.diagnostics.collect import ChunkLayout, RunRecord, TaskRecord

__all__ = ["GroupStats", "ProfileReport", "Verdict", "WorkerStats", "analyze"]

IMBALANCE_MAX_OVER_MEAN = 1.5  # busiest lane vs the mean lane
IMBALANCE_CV = 0.25
IMBALANCE_IMPACT = 0.25  # (busiest - mean) lane time over wall time: what balancing could save
MIN_BUSY_S = 0.05  # below this much total work, load figures are noise
SKEW_RATIO = 3.0  # a chunk this many times its group's median size...
SKEW_RARITY = 0.1  # ...in a group where such chunks are rare (halo slivers next to blocks are not skew)...
SKEW_MIN_MEDIAN = 64 * 2**10  # ...of real chunks, not scalars or slivers
STRAGGLER_RATIO = 3.0  # a task this many times its group's median duration, on normal-sized data...
STRAGGLER_RARITY = 0.1  # ...where such tasks are rare (many slow tasks are a slow phase, not stragglers)...
STRAGGLER_MIN_COST_S = 0.25  # ...each this much longer, that together cost the run this much wall time...
STRAGGLER_WALL_FRACTION = 0.05  # ...and this share of it (one GC pause is not a verdict)
NORMAL_SIZE = 1.5  # a task reading or writing more than this times its group's median is not "normal-sized"
OUTSIDE_FRACTION = 0.15  # wall time with no task running anywhere, over the wall time...
OUTSIDE_MIN_S = 0.5  # ...and at least this long
LARGE_GRAPH = 10 * 10**6  # distributed.admin.large-graph-warning-threshold's default
MIN_GROUP = 4  # groups smaller than this have no meaningful median
OVERHEAD_FRACTION = 0.25  # estimated scheduling cost over (cost + compute)
OVERHEAD_MIN_TASKS = 20
OVERHEAD_MIN_COST_S = 0.05  # below this much estimated scheduling in the whole run, the work is just small
OVERHEAD_TARGET = 20  # a task should compute >= 20 x the per-task overhead
MEMORY_FRACTION = 0.7  # distributed's default spill threshold
MEMORY_CHUNK_SHARE = 0.1  # chunks in flight (2 per thread) below this share of the limit: chunk size is not the lever
CHUNKS_PER_LANE = 10  # what the load-imbalance fix aims for
TRANSFER_FRACTION = 0.25  # transfer time over compute time
MAX_NAMED = 5


@dataclass(frozen=True)
class Verdict:
    """One finding: what, the evidence, and the change that fixes it.

    Attributes
    ----------
    fix
        The change in words.
    overrides
        The same change as configuration keys by dotted name, each value written as
        ``--set`` takes it (``{"parallel.task_chunk_size": "19MiB"}``); empty when the fix
        is not a configuration change (in the user's code, or not computable from the run).
    """

    kind: str  # load-imbalance | data-skew | stragglers | outside-tasks | overhead-bound | memory-pressure | memory-model | transfer-bound
    summary: str
    evidence: dict[str, Any]
    fix: str
    overrides: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class WorkerStats:
    address: str
    nthreads: int
    tasks: int
    busy_s: float
    idle_s: float
    utilization: float
    bytes_computed: int
    bytes_in: int
    bytes_out: int
    peak_memory: int
    memory_limit: int
    projected_memory: int = 0  # the most memory_model projected before the run's graphs (0: none projected)
    start_memory: int = 0  # its process memory as the run began


@dataclass(frozen=True)
class GroupStats:
    group: str
    count: int
    total_s: float
    p50_s: float
    p95_s: float
    max_s: float
    bytes_p50: int
    bytes_max: int


@dataclass
class ProfileReport:
    """The numbers and verdicts of one profiled run (``to_dict()`` is the ``--json`` object)."""

    backend: str
    wall_s: float
    n_tasks: int
    slots: int
    workers: list[WorkerStats]
    groups: list[GroupStats]
    imbalance: dict[str, float]
    verdicts: list[Verdict] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    engine: str = ""  # what ran the graphs, and why
    ran_here: dict[str, tuple[int, float]] = field(default_factory=dict)  # name -> (calls, s): run in the client, not sent

    def here_line(self) -> str:
        """What ran in the client instead of being sent (small-tasks pass, a reduction's combines), e.g. ``1000 'inc' in 2.1ms, 1 'sum' in 15us``."""
        return ", ".join(f"{n:,} '{name}' in {format_time(s)}" for name, (n, s) in self.ran_here.items())

    def kinds(self) -> set[str]:
        return {v.kind for v in self.verdicts}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _size_text(nbytes: float) -> str:
    """A byte count as ``--set`` takes it, rounded down to whole MiB (whole KiB below 1 MiB)."""
    if nbytes >= 2**20:
        return f"{int(nbytes // 2**20)}MiB"
    return f"{max(1, int(nbytes // 2**10))}KiB"


def _quantile(values: list[float], q: float) -> float:
    # the same (interpolating) definition the benchmark's percentiles use
    return float(np.percentile(values, q * 100)) if values else 0.0


def _groups(tasks: list[TaskRecord]) -> dict[str, list[TaskRecord]]:
    out: dict[str, list[TaskRecord]] = defaultdict(list)
    for t in tasks:
        out[t.group].append(t)
    return out


def _lanes(record: RunRecord) -> dict[str, float]:
    """Busy seconds per worker (per thread when there is a single worker), normalised by threads."""
    if len(record.workers) > 1:
        busy = {a: 0.0 for a in record.workers}
        for t in record.tasks:
            busy[t.worker] = busy.get(t.worker, 0.0) + t.duration
        return {a: b / max(1, record.workers[a].nthreads if a in record.workers else 1) for a, b in busy.items()}
    lanes: dict[str, float] = defaultdict(float)
    for t in record.tasks:
        lanes[f"{t.worker}#{t.thread}"] += t.duration
    nthreads = next(iter(record.workers.values())).nthreads if record.workers else 1
    while len(lanes) < nthreads:  # a thread that ran nothing is an idle lane
        lanes[f"idle#{len(lanes)}"] = 0.0
    return dict(lanes)


def _worker_stats(record: RunRecord, wall: float) -> list[WorkerStats]:
    out = []
    for address, w in record.workers.items():
        mine = [t for t in record.tasks if t.worker == address]
        busy = sum(t.duration for t in mine)
        out.append(
            WorkerStats(
                address=address, nthreads=w.nthreads, tasks=len(mine), busy_s=busy,
                idle_s=max(0.0, wall * w.nthreads - busy), utilization=busy / (wall * max(1, w.nthreads)),
                bytes_computed=sum(t.nbytes for t in mine), bytes_in=w.bytes_in, bytes_out=w.bytes_out,
                peak_memory=w.peak_memory, memory_limit=w.memory_limit, projected_memory=record.projected.get(address, 0),
                start_memory=w.start_memory,
            )
        )
    return out


def _group_stats(by_group: dict[str, list[TaskRecord]]) -> list[GroupStats]:
    out = []
    for name, members in sorted(by_group.items(), key=lambda kv: -sum(t.duration for t in kv[1])):
        durations = [t.duration for t in members]
        sizes = [t.nbytes for t in members]
        out.append(
            GroupStats(
                group=name, count=len(members), total_s=sum(durations), p50_s=statistics.median(durations),
                p95_s=_quantile(durations, 0.95), max_s=max(durations),
                bytes_p50=int(statistics.median(sizes)), bytes_max=max(sizes),
            )
        )
    return out


def analyze(record: RunRecord, *, chunk_hint: int | None = None) -> ProfileReport:
    """Compute per-worker and per-group statistics and the verdicts for ``record``.

    Parameters
    ----------
    chunk_hint
        The chunk size in bytes the run was configured with, if known. The
        overhead-bound fix scales it (else the typical output size of the biggest
        group); the load-imbalance and memory-pressure fixes give a smaller
        ``parallel.task_chunk_size`` only when it is known.
    """
    tasks = record.tasks
    wall = max(record.wall_s, 1e-9)
    slots = sum(w.nthreads for w in record.workers.values()) or 1
    workers = _worker_stats(record, wall)
    by_group = _groups(tasks)
    groups = _group_stats(by_group)
    lanes = _lanes(record)
    values = list(lanes.values())
    mean = statistics.fmean(values) if values else 0.0
    imbalance = {
        "max_over_mean": (max(values) / mean) if mean > 0 else 1.0,
        "cv": (statistics.pstdev(values) / mean) if mean > 0 and len(values) > 1 else 0.0,
        "lanes": len(values),
    }
    report = ProfileReport(record.backend, record.wall_s, len(tasks), slots, workers, groups, imbalance, engine=record.engine,
                           ran_here=dict(record.ran_here))
    skewed = _one(_layout_skew(record.layouts) or _skew(by_group))  # the layout names the array to rechunk
    report.verdicts += skewed
    stragglers = _stragglers(record, by_group, wall, slots)
    report.verdicts += stragglers
    cause = "data-skew" if skewed else "stragglers" if stragglers else None
    report.verdicts += _imbalance(imbalance, sum(values), lanes, cause, wall, _balanced_chunk(record, by_group, chunk_hint, len(lanes)))
    report.verdicts += _outside(record, wall)
    report.verdicts += _overhead(record, by_group, chunk_hint)
    report.verdicts += _memory(report.workers, record, chunk_hint)
    report.verdicts += _memory_model(report.workers, record)
    report.verdicts += _transfer(tasks, report.workers, shareable=not record.in_process and _one_local_host(report.workers))
    return report


SKEW_FIX = ("make chunks uniform: rechunk the input (x.rechunk(...)) or build it with session.array/session.from_array, "
            f"which balance chunks from {TASK_CHUNK_SIZE}")


def _skewed(sizes: Any) -> tuple[float, Any] | None:
    """(median, indices of the big ones, biggest first) when a few of ``sizes`` are far above the median."""
    sizes = np.asarray(sizes, dtype=float)
    median = float(np.median(sizes)) if sizes.size >= MIN_GROUP else 0.0
    if median < SKEW_MIN_MEDIAN:
        return None
    big = np.flatnonzero(sizes > SKEW_RATIO * median)
    if not big.size or big.size > max(1, SKEW_RARITY * sizes.size):
        return None
    return median, big[np.argsort(-sizes[big], kind="stable")]


def _skew_verdict(name: str, what: str, median: float, named: list[tuple[str, int]]) -> Verdict:
    key, nbytes = named[0]
    return Verdict(
        "data-skew",
        f"{len(named)} chunk(s) of {name} {what} up to {nbytes / median:.1f}x the median chunk ({format_bytes(int(median))}), "
        f"e.g. {key} ({format_bytes(nbytes)})",
        {"group": name, "measure": what, "median_bytes": int(median),
         "chunks": [{"key": k, "bytes": b, "ratio": round(b / median, 2)} for k, b in named[:MAX_NAMED]]},
        SKEW_FIX,
    )


def _one(found: list[Verdict]) -> list[Verdict]:
    """The first skew verdict, naming the others: one uneven input shows in every array and task derived from it."""
    if len(found) < 2:
        return found
    also = [v.evidence["group"] for v in found[1:]]
    first = found[0]
    return [replace(first, summary=f"{first.summary}; also in {', '.join(also)}", evidence={**first.evidence, "also": also})]


def _layout_skew(layouts: list[ChunkLayout]) -> list[Verdict]:
    """Skew in the chunk layout of an array computed, whatever fusion later did to its tasks."""
    out = []
    for layout in layouts:
        sizes = layout.block_bytes()
        found = _skewed(sizes.ravel())
        if found is not None:
            blocks = [np.unravel_index(i, sizes.shape) for i in found[1]]
            named = [(repr((key_split(layout.name), *map(int, b))), int(sizes[b])) for b in blocks]
            out.append(_skew_verdict(key_split(layout.name), "are", found[0], named))
    return out


def _finalize(group: str) -> bool:
    """A compute's last task, which gathers its whole result for the client: not a chunk."""
    return group.startswith("finalize")


def _skew(by_group: dict[str, list[TaskRecord]]) -> list[Verdict]:
    """Skew in what a group's tasks read (embedded data and dependencies), else in what they wrote."""
    out = []
    for name, members in by_group.items():
        if _finalize(name):
            continue
        for what, size in (("read", lambda t: t.input_bytes), ("wrote", lambda t: t.nbytes)):
            found = _skewed([size(t) for t in members])
            if found is not None:
                out.append(_skew_verdict(name, what, found[0], [(members[i].key, size(members[i])) for i in found[1]]))
                break
    return out


def _makespan(durations: list[float], lanes: int) -> float:
    """How long ``durations`` take on ``lanes``, each started on the first free lane in order (pure)."""
    free = [0.0] * max(1, lanes)
    for d in durations:
        heapq.heappush(free, heapq.heappop(free) + d)
    return max(free)


def _block_index(key: str) -> tuple[int, ...] | None:
    """The block index of a task key written as ``('name', 0, 3)``, else None (pure)."""
    if not key.startswith("("):
        return None
    try:
        parts = ast.literal_eval(key)
    except (ValueError, SyntaxError):
        return None
    index = tuple(parts[1:]) if isinstance(parts, tuple) else ()
    return index if index and all(isinstance(i, int) for i in index) else None


def _oversized(layouts: list[ChunkLayout], members: list[TaskRecord]) -> set[int]:
    """``id`` of the tasks whose block is an oversized chunk of an array with the group's block grid.

    Fusion can hide a big chunk from a task's inputs (``da.ones`` made inside a fused reduction);
    the block index still says which chunk the task worked on.
    """
    index = {id(t): i for t in members if (i := _block_index(t.key)) is not None}
    distinct = set(index.values())
    for layout in layouts:
        sizes = layout.block_bytes()
        fits = all(len(i) == sizes.ndim and all(n < m for n, m in zip(i, sizes.shape)) for i in distinct)
        if fits and len(distinct) >= 0.9 * sizes.size:  # the group covers this array's block grid
            limit = NORMAL_SIZE * float(np.median(sizes))
            return {tid for tid, i in index.items() if sizes[i] > limit}
    return set()


def _stragglers(record: RunRecord, by_group: dict[str, list[TaskRecord]], wall: float, slots: int) -> list[Verdict]:
    """Rare slow tasks on normal-sized data, named when they cost the run wall time (``slots``: the run's lanes)."""
    ordered = sorted(record.tasks, key=lambda t: t.start)
    out = []
    for name, members in by_group.items():
        if len(members) < MIN_GROUP:
            continue
        median_d = statistics.median(t.duration for t in members)
        normal_out = NORMAL_SIZE * statistics.median(t.nbytes for t in members)
        normal_in = NORMAL_SIZE * statistics.median(t.input_bytes for t in members)
        big = _oversized(record.layouts, members)
        skewed = {id(t) for t in members if t.nbytes > normal_out or t.input_bytes > normal_in or id(t) in big}
        slow = sorted(  # a big chunk being slow is skew, not a straggler
            (t for t in members if t.duration > STRAGGLER_RATIO * median_d and t.duration - median_d >= STRAGGLER_MIN_COST_S
             and id(t) not in skewed),
            key=lambda t: -t.duration,
        )
        if not slow or len(slow) > max(1, STRAGGLER_RARITY * len(members)):
            continue
        # What they cost: the run with the skewed chunks already fixed (at the median), against that run with the
        # stragglers at the median too; else a big chunk running beside a straggler hides it (its own verdict).
        named = skewed | {id(t) for t in slow}
        skew_fixed = _makespan([median_d if id(t) in skewed else t.duration for t in ordered], slots)
        cost = skew_fixed - _makespan([median_d if id(t) in named else t.duration for t in ordered], slots)
        if cost < max(STRAGGLER_MIN_COST_S, STRAGGLER_WALL_FRACTION * wall):
            continue
        out.append(
            Verdict(
                "stragglers",
                f"{len(slow)} task(s) of {name} ran up to {slow[0].duration / max(median_d, 1e-9):.0f}x the group median "
                f"({format_time(median_d)}) on normal-sized chunks, costing the run about {format_time(cost)}, "
                f"e.g. {slow[0].key} on {slow[0].worker}",
                {"group": name, "median_s": median_d, "cost_s": round(cost, 4),
                 "tasks": [{"key": t.key, "seconds": round(t.duration, 4), "worker": t.worker} for t in slow[:MAX_NAMED]]},
                "look at what those tasks do differently (I/O, a lock, data-dependent work); split such work into "
                "smaller tasks, or check the named worker's machine",
            )
        )
    return out


def _busy_union(tasks: list[TaskRecord]) -> tuple[float, float, float]:
    """(first start, last stop, seconds when at least one task ran) over ``tasks`` (pure)."""
    spans = sorted((t.start, t.stop) for t in tasks)
    busy, (lo, hi) = 0.0, spans[0]
    for start, stop in spans[1:]:
        if start > hi:
            busy, lo = busy + hi - lo, start
        hi = max(hi, stop)
    return spans[0][0], max(s for _, s in spans), busy + hi - lo


def _left_out(record: RunRecord) -> tuple[list[TaskRecord], dict[str, float]]:
    """The tasks outside :func:`~openclaw_dask.progress.aside` blocks, and the seconds of each block's label."""
    inside = [(a, b) for _, a, b in record.aside]
    run = [t for t in record.tasks if not any(a <= t.start and t.stop <= b for a, b in inside)]
    seconds: dict[str, float] = {}
    for label, a, b in record.aside:
        seconds[label] = seconds.get(label, 0.0) + b - a
    return run, seconds


HERE = "ran in the client, not sent to the engine"


def _outside(record: RunRecord, wall: float) -> list[Verdict]:
    """Wall time with no task running anywhere: graph building and submission, results sent back, or the client's own code.

    Left out: what the workload marked as not the run (checking its answer, and the tasks that ran for it),
    the tasks run in the client (small-tasks pass, reductions' combines), and the scheduling the tasks themselves cost (the overhead-bound verdict's part: it leaves lanes idle too).
    """
    tasks, aside = _left_out(record)
    if not tasks:
        return []
    if record.ran_here:  # the run's own tasks, run in the client (cluster/here.py)
        aside[HERE] = sum(seconds for _, seconds in record.ran_here.values())
    first, last, busy = _busy_union(tasks)
    idle, scheduling = wall - busy, len(tasks) * record.task_overhead_s
    outside = idle - sum(aside.values()) - scheduling
    if outside < max(OUTSIDE_MIN_S, OUTSIDE_FRACTION * wall):
        return []
    before, after = max(0.0, first - record.start), max(0.0, record.stop - last)
    between = max(0.0, idle - before - after)
    returned = sum(t.nbytes for t in tasks if _finalize(t.group))
    if record.graph_bytes >= LARGE_GRAPH and not record.in_process:
        fix = (f"the graphs carried {format_bytes(record.graph_bytes)} of data, sent with every compute (e.g. da.from_array "
               "over an in-memory array): load it inside tasks (openclaw_dask.io.read, da.from_zarr, da.from_delayed), "
               "or send it once with client.scatter and build on the future")
    elif returned >= LARGE_GRAPH and not record.in_process:
        fix = (f"the computes sent {format_bytes(returned)} of results back to the client: reduce before computing, "
               "keep results on the workers (persist), or write them out from the workers (to_zarr)")
    elif record.graphs > 1 and between >= max(before, after):
        fix = (f"{record.graphs} separate computes with {format_time(between)} between them: compute results together "
               "(dask.compute(a, b, ...)) and persist what is reused")
    else:
        fix = ("the client was busy building and sending the graph, or running its own code: fewer, bigger tasks "
               "make smaller graphs; a Python profiler (pyinstrument) on the script shows where the rest goes")
    less = "".join(f", {format_time(v)} {k}" for k, v in aside.items())
    return [
        Verdict(
            "outside-tasks",
            f"{format_time(outside)} ({outside / wall:.0%} of the run) went outside tasks: every lane was idle for "
            f"{format_time(idle)} ({format_time(before)} before the first task, {format_time(between)} between tasks, "
            f"{format_time(after)} after the last), less {format_time(scheduling)} of scheduling{less}",
            {"outside_s": round(outside, 4), "share": round(outside / wall, 3), "idle_s": round(idle, 4),
             "before_first_task_s": round(before, 4), "between_s": round(between, 4), "after_last_task_s": round(after, 4),
             "scheduling_s": round(scheduling, 4), "left_out_s": {k: round(v, 4) for k, v in aside.items()},
             "graphs": record.graphs, "graph_bytes": record.graph_bytes, "result_bytes": returned},
            fix,
        )
    ]


def _heaviest(by_group: dict[str, list[TaskRecord]]) -> list[TaskRecord]:
    """The group that moves the most bytes: the one whose chunk size the config sets."""
    return max(by_group.values(), key=lambda m: sum(t.nbytes for t in m))


def _balanced_chunk(record: RunRecord, by_group: dict[str, list[TaskRecord]], chunk_hint: int | None, lanes: int) -> int | None:
    """A chunk size giving each lane about ten chunks, if clearly smaller than the run's; else None.

    Not below the size at which scheduling would dominate again (the overhead-bound rule).
    """
    if not chunk_hint or not by_group:
        return None
    heavy = _heaviest(by_group)
    per_task = record.task_overhead_s
    median_d = max(statistics.median(t.duration for t in heavy), 1e-6)
    floor = chunk_hint * OVERHEAD_TARGET * per_task / median_d
    target = max(sum(t.nbytes for t in heavy) / (CHUNKS_PER_LANE * max(1, lanes)), floor)
    return int(target) if target < 0.75 * chunk_hint else None


def _imbalance(imbalance: dict[str, float], busy: float, lanes: dict[str, float], cause: str | None, wall: float,
               smaller: int | None) -> list[Verdict]:
    if imbalance["lanes"] < 2 or busy < MIN_BUSY_S:
        return []
    if imbalance["max_over_mean"] <= IMBALANCE_MAX_OVER_MEAN or imbalance["cv"] <= IMBALANCE_CV:
        return []
    mean = busy / len(lanes)
    if (max(lanes.values()) - mean) < IMBALANCE_IMPACT * wall:  # balancing would not shorten the run much
        return []
    busiest = max(lanes, key=lanes.__getitem__)
    overrides: dict[str, Any] = {}
    target = ""
    if cause is None and smaller is not None:  # with a cause, the fix is in the user's code first
        overrides = {TASK_CHUNK_SIZE: _size_text(smaller)}
        target = f" to {overrides[TASK_CHUNK_SIZE]}"
    fix = (
        f"fix the {cause} first (see that verdict); then" if cause else "give the scheduler more, smaller tasks:"
    ) + f" lower {TASK_CHUNK_SIZE}{target} so each thread gets about ten chunks"
    return [
        Verdict(
            "load-imbalance",
            f"the busiest lane worked {imbalance['max_over_mean']:.2f}x the mean (CV {imbalance['cv']:.2f})",
            {"max_over_mean": round(imbalance["max_over_mean"], 3), "cv": round(imbalance["cv"], 3), "busiest": busiest,
             "busy_s": {k: round(v, 4) for k, v in lanes.items()}},
            fix,
            overrides,
        )
    ]


def _overhead(record: RunRecord, by_group: dict[str, list[TaskRecord]], chunk_hint: int | None) -> list[Verdict]:
    # a task a worker ran straight from a direct run (cluster/direct.py) paid no scheduling of its own: a compute
    # costs one round trip per worker there, whatever its tasks
    tasks = [t for t in record.tasks if t.scheduled]
    if len(tasks) < OVERHEAD_MIN_TASKS:
        return []
    per_task = record.task_overhead_s
    compute = sum(t.duration for t in record.tasks)
    estimate = len(tasks) * per_task
    # the engine's figure is what one more chunk of a reduction costs; map_overlap's many slicing tasks cost less
    # each, and scheduling cannot have taken more of the work than the time the threads stood outside tasks
    cost = min(estimate, _idle_lane_s(record))
    fraction = cost / (cost + compute)
    if fraction <= OVERHEAD_FRACTION or estimate < OVERHEAD_MIN_COST_S:
        return []
    heavy = _heaviest(by_group)
    median_d = max(statistics.median(t.duration for t in heavy), 1e-6)
    typical = int(statistics.median(t.nbytes for t in heavy))
    chunk = chunk_hint or typical or 2**20
    factor = max(2.0, OVERHEAD_TARGET * per_task / median_d)
    bigger = _bigger_chunk(record, heavy, chunk, factor)
    overrides: dict[str, Any] = {}
    if chunk_hint is None and typical < 4096:  # tasks over small Python objects: chunk size is not the lever
        fix = f"batch tiny items into fewer, bigger tasks (about {math.ceil(factor)} items per task), e.g. map over lists of items"
    elif bigger is None:
        share, slots = _thread_share(record, heavy)
        fix = (f"each of the {slots} thread(s) gets about {_size_text(share)} of {heavy[0].group if heavy else 'the data'}, "
               f"so chunks of at least twice {_size_text(chunk)} would leave a thread idle; batch tiny items into fewer, "
               "bigger tasks, or fuse steps")
    else:
        overrides = {TASK_CHUNK_SIZE: _size_text(bigger)}
        fix = f"raise {TASK_CHUNK_SIZE} to {overrides[TASK_CHUNK_SIZE]} (or to auto); batch tiny items into fewer, bigger tasks"
    return [
        Verdict(
            "overhead-bound",
            f"{len(tasks)} tasks with a median of {format_time(statistics.median(t.duration for t in tasks))} each: "
            f"scheduling (~{cost / len(tasks) * 1e3:.2g} ms a task) is about {fraction:.0%} of the work",
            {"tasks": len(tasks), "median_task_s": statistics.median(t.duration for t in tasks),
             "overhead_per_task_s": per_task, "overhead_s": round(cost, 4), "overhead_fraction": round(fraction, 3),
             "chunk_bytes": chunk},
            fix,
            overrides,
        )
    ]


def _idle_lane_s(record: RunRecord) -> float:
    """Thread-seconds of the run outside tasks and outside :func:`~openclaw_dask.progress.aside` blocks (inf: unknown)."""
    slots = sum(w.nthreads for w in record.workers.values())
    if not slots or record.wall_s <= 0:
        return math.inf
    run, aside = _left_out(record)
    return max(0.0, slots * (record.wall_s - sum(aside.values())) - sum(t.duration for t in run))


def _bigger_chunk(record: RunRecord, heavy: list[TaskRecord], chunk: int, factor: float) -> int | None:
    """A chunk size whose tasks outlast the per-task overhead, or ``None`` if none bigger helps.

    Scaling the measured tasks by ``factor`` underestimates it (a tiny task's time is mostly
    fixed cost), so it is raised to the auto rule's floor for this overhead
    (:func:`~openclaw_dask.chunking.min_auto_chunk`), then lowered so every thread keeps a chunk.
    """
    share, _ = _thread_share(record, heavy)
    target = min(max(chunk * factor, min_auto_chunk(record.task_overhead_s)), MAX_AUTO_CHUNK, share)
    return int(target) if target >= 2 * chunk else None


def _thread_share(record: RunRecord, heavy: list[TaskRecord]) -> tuple[float, int]:
    """Bytes of the heaviest group each task thread gets, and how many threads there are."""
    slots = sum(w.nthreads for w in record.workers.values()) or 1
    return sum(t.nbytes for t in heavy) / slots, slots


def _memory_fix(w: WorkerStats, chunk_hint: int | None) -> tuple[str, dict[str, Any]]:
    """Half the run's chunk size when its chunks in flight (about two per thread) are a real share of the limit.

    cluster.memory_limit is not raised for you: the run does not show how much memory the host has.
    """
    if chunk_hint and (not w.memory_limit or 2 * w.nthreads * chunk_hint >= MEMORY_CHUNK_SHARE * w.memory_limit):
        half = _size_text(chunk_hint / 2)
        return (f"lower {TASK_CHUNK_SIZE} to {half} so fewer bytes are in flight per thread, "
                f"raise {MEMORY_LIMIT}, or run fewer workers per host"), {TASK_CHUNK_SIZE: half}
    return (f"raise {MEMORY_LIMIT}, run fewer workers per host, or lower {TASK_CHUNK_SIZE} "
            "so fewer bytes are in flight per thread"), {}


def _memory(workers: list[WorkerStats], record: RunRecord, chunk_hint: int | None) -> list[Verdict]:
    out = []
    for w in workers:
        raw = record.workers[w.address]
        near = w.memory_limit and w.peak_memory >= MEMORY_FRACTION * w.memory_limit
        if not (near or raw.spilled_bytes or raw.paused):
            continue
        fix, overrides = _memory_fix(w, chunk_hint)
        out.append(
            Verdict(
                "memory-pressure",
                f"worker {w.address} peaked at {format_bytes(w.peak_memory)} of {format_bytes(w.memory_limit)}"
                + (f", spilled {format_bytes(raw.spilled_bytes)} to disk" if raw.spilled_bytes else "")
                + (", and paused" if raw.paused else ""),
                {"worker": w.address, "peak_memory": w.peak_memory, "memory_limit": w.memory_limit,
                 "spilled_bytes": raw.spilled_bytes, "paused": raw.paused},
                fix,
                overrides,
            )
        )
    return out


def _memory_model(workers: list[WorkerStats], record: RunRecord) -> list[Verdict]:
    """Workers that peaked above the memory projected before the run, when every graph of the run was projected.

    The peak counts from the run's start, the projection from the worker's memory as its graph came: a worker
    that gave back freed blocks in between (its heap keeper, after a second idle) peaked at what it held before
    the run (tiny-tasks, which runs nothing on the workers, "peaked at 188 MiB, above the 81 MiB projected" in
    half the benchmark reports). Only a peak above that too is the run's own.
    """
    if not record.projected or record.projected_graphs < record.graphs or record.in_process:
        return []  # a graph the model did not see, or the client's own work in the workers' process, can account for it
    return [
        Verdict(
            "memory-model",
            f"worker {w.address} peaked at {format_bytes(w.peak_memory)}, above the {format_bytes(w.projected_memory)} "
            "projected before the run from its graphs' chunks (docs/memory.md)",
            {"worker": w.address, "peak_memory": w.peak_memory, "projected_memory": w.projected_memory},
            "the tasks allocate more than their chunks show (a function's temporaries, a library's copies): "
            f"lower {TASK_CHUNK_SIZE} to leave room for them, or read docs/memory.md for what the model counts",
            {},
        )
        for w in workers if w.projected_memory and w.peak_memory > max(w.projected_memory, w.start_memory)
    ]


def _one_local_host(workers: list[WorkerStats]) -> bool:
    """Whether every worker listened on this machine, where the client runs the analysis."""
    import psutil

    hosts = {urlsplit(w.address).hostname for w in workers}
    local = {"localhost", *(a.address for addrs in psutil.net_if_addrs().values() for a in addrs)}
    return len(hosts) == 1 and hosts <= local


def _transfer(tasks: list[TaskRecord], workers: list[WorkerStats], *, shareable: bool) -> list[Verdict]:
    """``shareable``: the workers were processes on this machine, so threads of one process could replace them."""
    compute = sum(t.duration for t in tasks)
    transfer = sum(t.transfer_s for t in tasks)
    moved = sum(w.bytes_in for w in workers)
    if compute <= 0 or transfer <= TRANSFER_FRACTION * compute or moved < 2**20:
        return []
    fix = "keep data where it is used: " + (f"set {BACKEND} to thread (workers share memory), " if shareable else "")
    return [
        Verdict(
            "transfer-bound",
            f"tasks waited {format_time(transfer)} for {format_bytes(moved)} moved between workers, "
            f"{transfer / compute:.0%} of compute time",
            {"transfer_s": round(transfer, 4), "compute_s": round(compute, 4), "bytes_moved": moved},
            fix + "chunk along the axis your operations reduce, or persist inputs before reusing them",
            {BACKEND: "thread"} if shareable else {},
        )
    ]
