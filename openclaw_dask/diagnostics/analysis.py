"""Turn a :class:`~openclaw_dask.diagnostics.collect.RunRecord` into numbers and verdicts.

Each verdict carries its evidence and the exact change that addresses it. The
thresholds are constants here, chosen so that a balanced run on the reference
machine gets no verdict (``tests/test_profile.py`` plants each problem and runs a
balanced control).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from dask.utils import format_bytes, format_time

from openclaw_dask.chunking import TASK_OVERHEAD_S
from openclaw_dask.diagnostics.collect import RunRecord, TaskRecord

__all__ = ["GroupStats", "ProfileReport", "Verdict", "WorkerStats", "analyze"]

IMBALANCE_MAX_OVER_MEAN = 1.5  # busiest lane vs the mean lane
IMBALANCE_CV = 0.25
IMBALANCE_IMPACT = 0.25  # (busiest - mean) lane time over wall time: what balancing could save
MIN_BUSY_S = 0.05  # below this much total work, load figures are noise
SKEW_RATIO = 3.0  # a chunk this many times its group's median size...
SKEW_RARITY = 0.1  # ...in a group where such chunks are rare (halo slivers next to blocks are not skew)...
SKEW_MIN_MEDIAN = 64 * 2**10  # ...of real chunks, not scalars or slivers
STRAGGLER_RATIO = 3.0  # a task this many times its group's median duration...
STRAGGLER_MIN_EXTRA_S = 0.5  # ...and at least this much longer...
STRAGGLER_WALL_FRACTION = 0.1  # ...and the delay is this share of the run (one GC pause is not a verdict)...
STRAGGLER_RARITY = 0.1  # ...and such tasks are rare: many slow tasks are a slow phase, not stragglers
MIN_GROUP = 4  # groups smaller than this have no meaningful median
OVERHEAD_FRACTION = 0.25  # estimated scheduling cost over (cost + compute)
OVERHEAD_MIN_TASKS = 20
OVERHEAD_TARGET = 20  # a task should compute >= 20 x the per-task overhead
MEMORY_FRACTION = 0.7  # distributed's default spill threshold
TRANSFER_FRACTION = 0.25  # transfer time over compute time
MAX_NAMED = 5


@dataclass(frozen=True)
class Verdict:
    """One finding: what, the evidence, and the change that fixes it."""

    kind: str  # load-imbalance | data-skew | stragglers | overhead-bound | memory-pressure | transfer-bound
    summary: str
    evidence: dict[str, Any]
    fix: str


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

    def kinds(self) -> set[str]:
        return {v.kind for v in self.verdicts}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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


def analyze(record: RunRecord, *, chunk_hint: int | None = None) -> ProfileReport:
    """Compute per-worker and per-group statistics and the verdicts for ``record``.

    Parameters
    ----------
    chunk_hint
        The chunk size in bytes the run was configured with, if known; the
        overhead-bound fix scales it (else the typical output size of the biggest group).
    """
    tasks = record.tasks
    wall = max(record.wall_s, 1e-9)
    slots = sum(w.nthreads for w in record.workers.values()) or 1
    workers = []
    for address, w in record.workers.items():
        mine = [t for t in tasks if t.worker == address]
        busy = sum(t.duration for t in mine)
        workers.append(
            WorkerStats(
                address=address, nthreads=w.nthreads, tasks=len(mine), busy_s=busy,
                idle_s=max(0.0, wall * w.nthreads - busy), utilization=busy / (wall * max(1, w.nthreads)),
                bytes_computed=sum(t.nbytes for t in mine), bytes_in=w.bytes_in, bytes_out=w.bytes_out,
                peak_memory=w.peak_memory, memory_limit=w.memory_limit,
            )
        )
    groups = []
    by_group = _groups(tasks)
    for name, members in sorted(by_group.items(), key=lambda kv: -sum(t.duration for t in kv[1])):
        durations = [t.duration for t in members]
        sizes = [t.nbytes for t in members]
        groups.append(
            GroupStats(
                group=name, count=len(members), total_s=sum(durations), p50_s=statistics.median(durations),
                p95_s=_quantile(durations, 0.95), max_s=max(durations),
                bytes_p50=int(statistics.median(sizes)), bytes_max=max(sizes),
            )
        )
    lanes = _lanes(record)
    values = list(lanes.values())
    mean = statistics.fmean(values) if values else 0.0
    imbalance = {
        "max_over_mean": (max(values) / mean) if mean > 0 else 1.0,
        "cv": (statistics.pstdev(values) / mean) if mean > 0 and len(values) > 1 else 0.0,
        "lanes": len(values),
    }
    report = ProfileReport(record.backend, record.wall_s, len(tasks), slots, workers, groups, imbalance)
    skewed = _skew(by_group)
    report.verdicts += skewed
    stragglers = _stragglers(by_group, wall)
    report.verdicts += stragglers
    cause = "data-skew" if skewed else "stragglers" if stragglers else None
    report.verdicts += _imbalance(imbalance, sum(values), lanes, cause, wall)
    report.verdicts += _overhead(record, by_group, chunk_hint)
    report.verdicts += _memory(report.workers, record)
    report.verdicts += _transfer(tasks, report.workers)
    return report


def _skew(by_group: dict[str, list[TaskRecord]]) -> list[Verdict]:
    out = []
    for name, members in by_group.items():
        if len(members) < MIN_GROUP:
            continue
        median = statistics.median(t.nbytes for t in members)
        if median < SKEW_MIN_MEDIAN:
            continue
        big = sorted((t for t in members if t.nbytes > SKEW_RATIO * median), key=lambda t: -t.nbytes)
        if not big or len(big) > max(1, SKEW_RARITY * len(members)):
            continue
        ratio = big[0].nbytes / median
        out.append(
            Verdict(
                "data-skew",
                f"{len(big)} chunk(s) of {name} are up to {ratio:.1f}x the median chunk ({format_bytes(int(median))}), "
                f"e.g. {big[0].key} ({format_bytes(big[0].nbytes)})",
                {"group": name, "median_bytes": int(median), "chunks": [{"key": t.key, "bytes": t.nbytes, "ratio": round(t.nbytes / median, 2)} for t in big[:MAX_NAMED]]},
                "make chunks uniform: rechunk the input (x.rechunk(...)) or build it with session.array/session.from_array, "
                "which balance chunks from parallel.task_chunk_size",
            )
        )
    return out


def _stragglers(by_group: dict[str, list[TaskRecord]], wall: float) -> list[Verdict]:
    out = []
    for name, members in by_group.items():
        if len(members) < MIN_GROUP:
            continue
        median_d = statistics.median(t.duration for t in members)
        median_b = statistics.median(t.nbytes for t in members) or 1
        slow = sorted(
            (
                t for t in members
                if t.duration > STRAGGLER_RATIO * median_d
                and t.duration - median_d > max(STRAGGLER_MIN_EXTRA_S, STRAGGLER_WALL_FRACTION * wall)
                and t.nbytes <= 1.5 * median_b  # a big chunk being slow is skew, not a straggler
            ),
            key=lambda t: -t.duration,
        )
        if not slow or len(slow) > max(1, STRAGGLER_RARITY * len(members)):
            continue
        out.append(
            Verdict(
                "stragglers",
                f"{len(slow)} task(s) of {name} ran up to {slow[0].duration / max(median_d, 1e-9):.0f}x the group median "
                f"({format_time(median_d)}) on normal-sized chunks, e.g. {slow[0].key} on {slow[0].worker}",
                {"group": name, "median_s": median_d, "tasks": [{"key": t.key, "seconds": round(t.duration, 4), "worker": t.worker} for t in slow[:MAX_NAMED]]},
                "look at what those tasks do differently (I/O, a lock, data-dependent work); split such work into "
                "smaller tasks, or check the named worker's machine",
            )
        )
    return out


def _imbalance(imbalance: dict[str, float], busy: float, lanes: dict[str, float], cause: str | None, wall: float) -> list[Verdict]:
    if imbalance["lanes"] < 2 or busy < MIN_BUSY_S:
        return []
    if imbalance["max_over_mean"] <= IMBALANCE_MAX_OVER_MEAN or imbalance["cv"] <= IMBALANCE_CV:
        return []
    mean = busy / len(lanes)
    if (max(lanes.values()) - mean) < IMBALANCE_IMPACT * wall:  # balancing would not shorten the run much
        return []
    busiest = max(lanes, key=lanes.__getitem__)
    fix = (
        f"fix the {cause} first (see that verdict); then" if cause else "give the scheduler more, smaller tasks:"
    ) + " lower parallel.task_chunk_size so each thread gets about ten chunks"
    return [
        Verdict(
            "load-imbalance",
            f"the busiest lane worked {imbalance['max_over_mean']:.2f}x the mean (CV {imbalance['cv']:.2f})",
            {"max_over_mean": round(imbalance["max_over_mean"], 3), "cv": round(imbalance["cv"], 3), "busiest": busiest,
             "busy_s": {k: round(v, 4) for k, v in lanes.items()}},
            fix,
        )
    ]


def _overhead(record: RunRecord, by_group: dict[str, list[TaskRecord]], chunk_hint: int | None) -> list[Verdict]:
    tasks = record.tasks
    if len(tasks) < OVERHEAD_MIN_TASKS:
        return []
    per_task = TASK_OVERHEAD_S.get(record.backend, TASK_OVERHEAD_S["process"])
    compute = sum(t.duration for t in tasks)
    cost = len(tasks) * per_task
    fraction = cost / (cost + compute)
    if fraction <= OVERHEAD_FRACTION:
        return []
    # Scale the chunk size of the group that moves the most bytes until its tasks are long enough.
    heavy = max(by_group.values(), key=lambda m: sum(t.nbytes for t in m))
    median_d = max(statistics.median(t.duration for t in heavy), 1e-6)
    typical = int(statistics.median(t.nbytes for t in heavy))
    chunk = chunk_hint or typical or 2**20
    factor = max(2.0, OVERHEAD_TARGET * per_task / median_d)
    suggested_mib = max(1, round(min(512 * 2**20, chunk * factor) / 2**20))
    if chunk_hint is None and typical < 4096:  # tasks over small Python objects: chunk size is not the lever
        fix = f"batch tiny items into fewer, bigger tasks (about {math.ceil(factor)} items per task), e.g. map over lists of items"
    else:
        fix = f"--set parallel.task_chunk_size={suggested_mib}MiB (or task_chunk_size: auto); batch tiny items into fewer, bigger tasks"
    return [
        Verdict(
            "overhead-bound",
            f"{len(tasks)} tasks with a median of {format_time(statistics.median(t.duration for t in tasks))} each: "
            f"scheduling (~{per_task * 1e3:.2g} ms a task) is about {fraction:.0%} of the work",
            {"tasks": len(tasks), "median_task_s": statistics.median(t.duration for t in tasks),
             "overhead_per_task_s": per_task, "overhead_fraction": round(fraction, 3), "chunk_bytes": chunk},
            fix,
        )
    ]


def _memory(workers: list[WorkerStats], record: RunRecord) -> list[Verdict]:
    out = []
    for w in workers:
        raw = record.workers[w.address]
        near = w.memory_limit and w.peak_memory >= MEMORY_FRACTION * w.memory_limit
        if not (near or raw.spilled_bytes or raw.paused):
            continue
        out.append(
            Verdict(
                "memory-pressure",
                f"worker {w.address} peaked at {format_bytes(w.peak_memory)} of {format_bytes(w.memory_limit)}"
                + (f", spilled {format_bytes(raw.spilled_bytes)} to disk" if raw.spilled_bytes else "")
                + (", and paused" if raw.paused else ""),
                {"worker": w.address, "peak_memory": w.peak_memory, "memory_limit": w.memory_limit,
                 "spilled_bytes": raw.spilled_bytes, "paused": raw.paused},
                "raise cluster.memory_limit, run fewer workers per host, or lower parallel.task_chunk_size "
                "so fewer bytes are in flight per thread",
            )
        )
    return out


def _transfer(tasks: list[TaskRecord], workers: list[WorkerStats]) -> list[Verdict]:
    compute = sum(t.duration for t in tasks)
    transfer = sum(t.transfer_s for t in tasks)
    moved = sum(w.bytes_in for w in workers)
    if compute <= 0 or transfer <= TRANSFER_FRACTION * compute or moved < 2**20:
        return []
    return [
        Verdict(
            "transfer-bound",
            f"tasks waited {format_time(transfer)} for {format_bytes(moved)} moved between workers, "
            f"{transfer / compute:.0%} of compute time",
            {"transfer_s": round(transfer, 4), "compute_s": round(compute, 4), "bytes_moved": moved},
            "keep data where it is used: --set parallel.backend=thread (workers share memory), chunk along the axis "
            "your operations reduce, or persist inputs before reusing them",
        )
    ]
