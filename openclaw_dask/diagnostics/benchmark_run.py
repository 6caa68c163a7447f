"""Running a benchmark: each configuration's session runs the suite's kernels, timed and checked, into :class:`Row`.

For every configuration and kernel: build the inputs on the workers (not timed), two warm-ups (and more,
up to :data:`_SETTLING_RUNS`, while the engine has yet to try the graph on each of its paths or a run is still
clearly faster than the one before it),
``repeat`` timed runs, then one profiled run (its tasks, latencies and verdicts: the profiler's hooks
cost every task a little, so the timed runs go without); the result is checked against NumPy. A row faster than the memory
bandwidth measured so far has it measured again (:func:`openclaw_dask.workloads.limits.judged`); once every row is
measured, the bandwidth is measured once more, each row is held to the highest figure of the run, and one still
faster than that is marked ``invalid``. Speed-ups over NumPy are over the kernel's fastest NumPy time of the run.
"""

from __future__ import annotations

import functools
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import numpy as np

from openclaw_dask.cluster import running_of
from openclaw_dask.cluster.paths import path_line
from openclaw_dask.config.model import plain as _plain
from openclaw_dask.diagnostics.benchmark_configs import Configuration, unique_labels
from openclaw_dask.diagnostics.benchmark_render import BenchmarkReport
from openclaw_dask.diagnostics.benchmark_report import SCHEMA, Row
from openclaw_dask.diagnostics.benchmark_stats import percentiles, rates, with_speedups
from openclaw_dask.errors import ConfigError
from openclaw_dask.loading import load_checked
from openclaw_dask.workloads.limits import STREAMED, hosts, implausible, judged, measure_bandwidth

if TYPE_CHECKING:
    from openclaw_dask.cluster import SessionLike

__all__ = ["run_benchmark"]

_SETTLING_RUNS = 6  # more warm-ups at most: runs that paid page faults are not counted by the path chooser (3 a path)
STEAL_WINDOW_S = 1.0  # CPU steal is told over timed runs this long at least: 10 ms ticks are then within 1% of it
_WARMING = 0.95  # a warm-up this much faster than the one before it (or more): the kernel is still warming up


def run_benchmark(
    configs: list[Configuration],
    *,
    suite: str = "quick",
    repeat: int = 5,
    progress: Callable[[str], None] | None = None,
    base_overrides: dict[str, Any] | None = None,
) -> BenchmarkReport:
    """Run ``suite`` for each configuration and for the serial baseline; return the report dict.

    The serial baseline is the first configuration's file with ``base_overrides`` and
    ``parallel.enabled: false``.

    Raises
    ------
    ConfigError
        ``suite`` is not a known suite.
    """
    from openclaw_dask.workloads.suite import SUITES

    if suite not in SUITES:
        raise ConfigError(f"--suite {suite}: unknown suite; use one of {', '.join(SUITES)}")
    size, kernels = SUITES[suite]
    say = progress or (lambda message: None)
    say("measuring memory bandwidth")
    bandwidth = measure_bandwidth(min(size, STREAMED))  # over the suite's input size: its caches count
    serial = Configuration("serial", load_checked(configs[0].config.path, {**(base_overrides or {}), "parallel.enabled": False}))
    labelled = unique_labels([serial, *configs])
    limit = _Limit(min(size, STREAMED), bandwidth["all_cores"])
    held = [pair for conf in labelled for pair in _run_configuration(conf, kernels, size, repeat, limit, say)]
    say("measuring memory bandwidth again")
    limit.raised()  # at the end too: one low measurement at the start would flatter every row's efficiency
    rows = with_speedups([limit.hold(row, n) for row, n in held], first=labelled[1].label)  # vs the first configuration given
    bandwidth["all_cores"] = limit.gbps
    return BenchmarkReport({
        "schema": SCHEMA,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["openclaw", *sys.argv[1:]]) if sys.argv and sys.argv[0].endswith("openclaw") else None,
        "suite": suite,
        "input_bytes": size,
        "repeat": repeat,
        **_environment(bandwidth),
        "rows": [r.to_json() for r in rows],
    })


class _Limit:
    """The highest all-cores bandwidth measured in a run (GB/s per worker host): each measurement can only raise it.

    A limit measured under load is low (24.6 GB/s at a report's start on a host that measured 32.9 minutes
    later): every row is held to the highest figure of the run (at its start, at its end, and whenever a row
    beat the limit so far), so none shows more than 100% of a bandwidth that was measured low.
    """

    def __init__(self, nbytes: int, gbps: float) -> None:
        self.nbytes, self.gbps = nbytes, gbps

    def raised(self, hosts: int = 1) -> float:
        """Measured again; the highest figure so far, for ``hosts`` hosts."""
        self.gbps = max(self.gbps, measure_bandwidth(self.nbytes)["all_cores"])
        return self.gbps * hosts

    def hold(self, row: Row, hosts: int) -> Row:
        """``row`` held to the highest bandwidth of the run on ``hosts`` hosts: its limit, efficiency and validity."""
        limit = self.gbps * hosts
        return replace(row, bandwidth_gbps=limit, invalid=implausible(row.gbps, limit),
                       efficiency_vs_bandwidth=row.gbps / limit if row.nbytes else None)


def _run_configuration(conf: Configuration, kernels: Sequence[str], size: int, repeat: int, limit: _Limit,
                       say: Callable[[str], None]) -> list[tuple[Row, int]]:
    """One session on ``conf``, each kernel a row with its worker hosts; a row over ``limit`` measures it again."""
    from openclaw_dask.session import Session

    rows = []
    with Session(conf.config).start() as s:
        for name in kernels:
            say(f"{conf.label}: {name}")
            measured = _run_kernel(s, name, size, repeat)
            n = hosts(s)
            judged(measured["gbps"], limit.gbps * n, functools.partial(limit.raised, n))  # held to the run's best at the end
            rows.append((Row(
                **measured,
                config=conf.label,
                settings=_settings(conf),
                workers=len(s.workers()) or 1,
                threads=s.slots,
                efficiency_vs_bandwidth=None,
            ), n))
    return rows


def _settings(conf: Configuration) -> dict[str, Any]:
    """Every key that differs from the defaults, plus ``parallel.enabled``."""
    config = conf.config
    settings = {k: _plain(v) for k, v in config.items() if config.sources.get(k) != "default"}
    settings["parallel.enabled"] = config.parallel.enabled
    return settings


def _cpu_steal_s() -> float | None:
    """CPU seconds the hypervisor gave other guests, per core of this machine, since boot (None where the OS does not say)."""
    import psutil

    steal = getattr(psutil.cpu_times(), "steal", None)  # summed over the machine's cores
    return None if steal is None else steal / (psutil.cpu_count() or 1)


def steal_share(before: float | None, after: float | None, wall: float) -> float | None:
    """The share of ``wall`` seconds in which the hypervisor ran other guests, from two :func:`_cpu_steal_s` readings.

    ``None`` where the OS does not count steal, or where ``wall`` is under :data:`STEAL_WINDOW_S`: ``/proc/stat``
    counts it in 10 ms ticks, so one tick in a short window read as more than the window (2.45 of a quick row's
    runs under a loaded CI). Within [0, 1] otherwise.
    """
    if before is None or after is None or wall < STEAL_WINDOW_S:
        return None
    return min(1.0, max(0.0, (after - before) / wall))


def _run_kernel(session: SessionLike, name: str, size: int, repeat: int) -> dict[str, Any]:
    """The measured fields of a row: kernel ``name`` warmed up, timed ``repeat`` times, profiled once, checked."""
    from openclaw_dask.diagnostics.analysis import analyze
    from openclaw_dask.diagnostics.collect import collect
    from openclaw_dask.workloads.suite import KERNELS

    prepared = KERNELS[name](session, size)
    try:
        result, seconds = _timed_run(prepared, session)  # warm-up, and the answer to check
        runs = [seconds]
        # A second warm-up while that answer is held: memory grows to what a timed run needs beside it
        # (else the first timed run pays the page faults, seen as a 2-4x outlier on big kernels). More while the
        # engine has yet to try the graph on one thread (the thread backend, cluster/paths.py): that one-time trial
        # was the first timed run (the standard stencil's: 611-683 ms beside ~400 on the path it then kept); and
        # while runs still speed up (the standard matmul on worker processes: 402, 357, 339, then 306-327 ms).
        runs.append(_timed_run(prepared, session)[1])
        for _ in range(_SETTLING_RUNS):
            if _settled(session) and not warming(runs):
                break
            runs.append(_timed_run(prepared, session)[1])
        stolen, began = _cpu_steal_s(), time.perf_counter()
        _, times = prepared.timed(session, repeat)  # not profiled: the profiler's hooks cost every task a little
        path = path_line(running_of(session).path)  # the last timed run's, before the profiled run
        steal = steal_share(stolen, _cpu_steal_s(), time.perf_counter() - began)
        with collect(session) as record:  # one more run, profiled: tasks, latencies, verdicts
            prepared.execute(session)
        reference, numpy_times = prepared.reference(session, runs=max(1, min(repeat, 3)), warmups=2)  # its first runs fault in its temporaries
        verdict = prepared.check(session, result, reference)  # within the kernel's error bound (workloads.accuracy)
    finally:
        prepared.close()
    first = prepared.inputs[0] if prepared.inputs else None
    chunk = first.dtype.itemsize * math.prod(max(c) for c in first.chunks) if first is not None else None
    report = analyze(record, chunk_hint=chunk)
    measured = rates(times, nbytes=prepared.nbytes, flops=prepared.flops,
                     tasks=len(record.tasks))  # tasks that ran in one run (inputs already in memory are not tasks)
    numpy_s = statistics.median(numpy_times)
    return {
        "workload": name,
        "ok": verdict.ok,
        "check": verdict.text(),
        **measured,
        "task_latency_s": percentiles([t.duration for t in record.tasks]),
        "numpy_1thread_s": numpy_s,
        "speedup_vs_numpy_1thread": numpy_s / measured["median_s"],
        "cpu_steal_share": steal,
        "path": path,
        "flags": tuple(sorted(report.kinds())),
        "verdicts": tuple(f"{v.kind}: {v.summary}; fix: {v.fix}" for v in report.verdicts),
    }


def _timed_run(prepared: Any, session: SessionLike) -> tuple[Any, float]:
    """The result of one run of ``prepared``, and its seconds."""
    start = time.perf_counter()
    result = prepared.execute(session)
    return result, time.perf_counter() - start


def warming(runs: Sequence[float]) -> bool:
    """Whether the last of ``runs`` (seconds, in order) was clearly faster than the one before it: still warming up."""
    return len(runs) > 1 and runs[-1] < _WARMING * runs[-2]


def _settled(session: SessionLike) -> bool:
    """Whether the engine is past its one-time trial of the last compute's graph (the thread backend's path chooser)."""
    paths = getattr(running_of(session), "paths", None)
    return paths is None or paths.settled()


def cpu_model() -> str:
    """The CPU's model name (Linux ``/proc/cpuinfo``, else what :mod:`platform` says, else the machine type)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _environment(bandwidth: dict[str, float]) -> dict[str, Any]:
    """The report's ``machine`` and ``versions``: what a reader needs to compare two reports."""
    from importlib.metadata import PackageNotFoundError, version

    import dask
    import distributed
    import psutil

    try:  # as openclaw_dask.__version__, without importing the package root, which imports this module
        ours = version("openclaw-dask")
    except PackageNotFoundError:
        ours = "0+unknown"
    return {
        "machine": {
            "cpu": cpu_model(),
            "cpu_count": os.cpu_count(),
            "memory_bytes": int(psutil.virtual_memory().total),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "bandwidth_gbps_1_thread": bandwidth["1_thread"],
            "bandwidth_gbps_all_cores": bandwidth["all_cores"],
        },
        "versions": {
            "openclaw_dask": ours,
            "dask": dask.__version__,
            "distributed": distributed.__version__,
            "numpy": np.__version__,
        },
    }
