"""``openclaw benchmark``: compare configurations on a standard suite, with NumPy as referee.

For every configuration and kernel: build the inputs on the workers (not timed), two
warm-ups, then ``repeat`` timed runs; the result is checked against NumPy. Rows report
the median with min-max, GB/s, tasks/s, per-task latency percentiles (task stream),
speedup over the serial scheduler and over NumPy on one thread, efficiency against
the memory bandwidth measured at the start of the same run, and the profiler's
verdicts for the timed runs. The report's schema is in ``docs/benchmark-report.md``.

This module checks a benchmark's inputs (:func:`prepare`) and writes its reports
(:func:`write_reports`); the work is split by job, and each name is importable from here:

- :mod:`~openclaw_dask.diagnostics.benchmark_configs`: files x sweeps -> :class:`Configuration`
- :mod:`~openclaw_dask.diagnostics.benchmark_run`: :func:`run_benchmark`, each row a :class:`Row`
- :mod:`~openclaw_dask.diagnostics.benchmark_stats`: rates, percentiles, speedups
- :mod:`~openclaw_dask.diagnostics.benchmark_compare`: :func:`load_report`, :func:`compare`, :func:`check_gate`,
  :func:`check_report` (faster/slower by :mod:`~openclaw_dask.diagnostics.stats`' test on the timed runs)
- :mod:`~openclaw_dask.diagnostics.benchmark_render`: ``report.json``, ``report.md``, ``report.html``
- :mod:`~openclaw_dask.diagnostics.benchmark_report`: :data:`SCHEMA`, :class:`Row`
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openclaw_dask.diagnostics.benchmark_compare import check_gate, check_report, compare, load_report, regressions
from openclaw_dask.diagnostics.benchmark_configs import Configuration, configurations
from openclaw_dask.diagnostics.benchmark_render import BenchmarkReport
from openclaw_dask.diagnostics.benchmark_report import SCHEMA, Row
from openclaw_dask.diagnostics.benchmark_run import run_benchmark
from openclaw_dask.errors import ConfigError
from openclaw_dask.files import check_folder, write_file
from openclaw_dask.workloads.limits import measure_bandwidth

__all__ = [
    "SCHEMA",
    "BenchmarkReport",
    "Configuration",
    "Plan",
    "Row",
    "benchmark",
    "check_gate",
    "check_report",
    "compare",
    "configurations",
    "load_report",
    "measure_bandwidth",
    "prepare",
    "regressions",
    "run_benchmark",
    "write_reports",
]

REPORT_FILES = {"json": "report.json", "md": "report.md", "html": "report.html"}  # what --out gets


@dataclass(frozen=True)
class Plan:
    """A benchmark's checked inputs: what :func:`prepare` returns and :func:`run_benchmark` takes."""

    configs: list[Configuration]
    base_overrides: dict[str, Any]
    out_dir: Path
    baseline: dict[str, Any] | None = None


def prepare(
    files: Iterable[str] = (),
    sweeps: Iterable[str] = (),
    base_overrides: Mapping[str, Any] | None = None,
    *,
    config_path: str | None = None,
    baseline: str | None = None,
    out_dir: str | Path = "benchmark-report",
    suite: str = "quick",
    force: bool = False,
) -> Plan:
    """Check everything a benchmark needs before the first timed run, so a typo costs nothing.

    Parameters
    ----------
    files, sweeps, base_overrides, config_path
        As for :func:`configurations`.
    baseline
        A previous ``report.json`` to compare against (read and checked now).
    out_dir
        The report folder, created now; its report files must not exist yet, unless ``force``
        (and neither it nor they may be a symbolic link).
    force
        Allow replacing the report files of an earlier run in ``out_dir``.

    Raises
    ------
    ConfigError
        A config file is missing, a sweep or config does not parse, or ``out_dir`` cannot be created.
    ReportError
        The baseline cannot be read, is not a report, or is a report of another suite.
    """
    files = list(files)
    for f in files:
        if not Path(f).is_file():
            raise ConfigError(f"--configs {f}: no such file")
    base = dict(base_overrides or {})
    confs = configurations(files, sweeps, base, config_path=config_path)
    old = load_report(baseline, suite=suite) if baseline else None
    check_folder(out_dir, REPORT_FILES.values(), force=force)
    try:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"--out {out_dir}: cannot create the folder ({e.strerror})") from None
    return Plan(confs, base, Path(out_dir), old)


def write_reports(report: dict[str, Any], out: str | Path, *, force: bool = False) -> dict[str, Path]:
    """Write ``report.json``, ``report.md`` and ``report.html`` into ``out``.

    Each is written as :mod:`openclaw_dask.files` writes (whole or not at all, never through a
    symbolic link); all three are checked before the first is written, so an existing report
    (without ``force``) is refused with nothing changed.
    """
    from openclaw_dask.diagnostics.benchmark_render import render

    out = check_folder(out, REPORT_FILES.values(), force=force)
    texts = render(report)  # all made before any is written
    out.mkdir(parents=True, exist_ok=True)
    return {kind: write_file(out / REPORT_FILES[kind], text, force=force) for kind, text in texts.items()}


def benchmark(sweeps: Iterable[str] = (), configs: Iterable[str] = (), overrides: Mapping[str, Any] | None = None, *,
              suite: str = "quick", repeat: int = 5, out: str | Path | None = None, baseline: str | None = None,
              progress: Callable[[str], None] | None = None, force: bool = False) -> BenchmarkReport:
    """``openclaw benchmark`` from Python (``openclaw_dask.benchmark``): check, run, compare, write.

    Parameters
    ----------
    sweeps
        ``KEY=V1,V2`` sweeps (``--sweep``), e.g. ``["parallel.task_chunk_size=1MiB,8MiB"]``.
    configs
        Config files to compare (``--configs``).
    overrides
        Keys set on every configuration (``--set``), e.g. ``{"parallel.workers": 2}``.
    suite, repeat
        As ``--suite`` (smoke, quick, standard) and ``--repeat``.
    out
        A folder for ``report.json``, ``report.md`` and ``report.html`` (``--out``); ``None``: none written.
    baseline
        A previous ``report.json`` to compare with (``--compare``).
    progress
        Called with a line of text as each configuration and kernel starts (e.g. ``print``).
    force
        Replace the report files of an earlier run in ``out``.

    Returns
    -------
    BenchmarkReport
        The ``report.json`` object; a notebook cell ending with it shows its plots.

    Raises
    ------
    ConfigError, ReportError
        As ``openclaw benchmark``, before the first timed run.
    """
    if out is None:
        base = dict(overrides or {})
        plan = Plan(configurations(list(configs), sweeps, base), base, Path(), load_report(baseline, suite=suite) if baseline else None)
    else:
        plan = prepare(configs, sweeps, overrides, baseline=baseline, out_dir=out, suite=suite, force=force)
    report = run_benchmark(plan.configs, suite=suite, repeat=repeat, progress=progress, base_overrides=plan.base_overrides)
    if plan.baseline is not None:
        compare(report, plan.baseline)
    if out is not None:
        write_reports(report, plan.out_dir, force=force)
    return report
