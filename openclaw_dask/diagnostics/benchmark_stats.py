"""The figures of a benchmark row: timing summaries, rates, latency percentiles and speedups.

Whether two rows differ is :mod:`~openclaw_dask.diagnostics.stats`' test on their timed runs.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from typing import Any

import numpy as np

from openclaw_dask.diagnostics.benchmark_report import Row

__all__ = ["percentiles", "rates", "with_speedups"]


def percentiles(values: list[float]) -> dict[str, float]:
    """``p50``, ``p95`` and ``p99`` of ``values`` (all 0 for none)."""
    if not values:
        return {"p50": 0.0, "p95": 0.0, "p99": 0.0}
    return {f"p{q}": float(np.percentile(values, q)) for q in (50, 95, 99)}


def rates(times: list[float], *, nbytes: int, flops: float, tasks: float) -> dict[str, Any]:
    """A row's timing fields: the median, min, max and the runs, and GB/s, GFLOP/s and tasks/s at the median."""
    median = statistics.median(times)
    return {
        "median_s": median,
        "min_s": min(times),
        "max_s": max(times),
        "times_s": tuple(times),
        "nbytes": nbytes,
        "gbps": nbytes / median / 1e9,
        "gflops": flops / median / 1e9,
        "tasks": tasks,
        "tasks_per_s": tasks / median,
    }


def with_speedups(rows: list[Row], first: str) -> list[Row]:
    """``rows`` with ``speedup_vs_serial`` (over the ``serial`` row), ``speedup_vs_first`` (over config ``first``) and
    ``speedup_vs_numpy_1thread`` over the fastest NumPy time of the row's kernel in the run.

    NumPy runs the same computation on the same data in every row; its times differ with what each session did
    to the process's memory before (the standard stencil's: 0.51 s in one row, 1.83 and 1.87 s in two others of
    one report). Each row is held to the best, as to the best bandwidth (benchmark_run).
    """
    serial = {r.workload: r.median_s for r in rows if r.config == "serial"}
    firsts = {r.workload: r.median_s for r in rows if r.config == first}
    numpy: dict[str, float] = {}
    for r in rows:
        numpy[r.workload] = min(numpy.get(r.workload, r.numpy_1thread_s), r.numpy_1thread_s)
    return [replace(r, speedup_vs_serial=serial[r.workload] / r.median_s, speedup_vs_first=firsts[r.workload] / r.median_s,
                    numpy_1thread_s=numpy[r.workload], speedup_vs_numpy_1thread=numpy[r.workload] / r.median_s)
            for r in rows]
