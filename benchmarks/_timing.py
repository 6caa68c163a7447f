"""Timing shared by the benchmark scripts (run as ``python benchmarks/NAME.py``, so this folder is on sys.path)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def times_s(fn: Callable[[], object], repeat: int) -> list[float]:
    """Seconds of each of ``repeat`` calls of ``fn``, in order."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def median_s(fn: Callable[[], object], repeat: int) -> float:
    """Median seconds of ``repeat`` calls of ``fn``."""
    return statistics.median(times_s(fn, repeat))
