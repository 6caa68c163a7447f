"""A benchmark against its baseline and its gates: reading a ``--compare`` report, faster/slower/same, exit status.

A row is matched to the baseline row of the same ``(config, workload)``; its timed runs are tested
against the baseline row's by :func:`~openclaw_dask.diagnostics.stats.compare_runs` (two-sided
Mann-Whitney U, p < 0.05, medians at least 5% apart), so a gate never fails on noise.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from openclaw_dask.diagnostics.benchmark_render import BenchmarkReport
from openclaw_dask.diagnostics.benchmark_report import SCHEMA
from openclaw_dask.diagnostics.stats import ALPHA, compare_runs, runs_to_decide
from openclaw_dask.errors import ConfigError, ReportError, ResultMismatch, RunError

__all__ = ["check_gate", "check_report", "compare", "load_report", "regressions"]

_ROW_FIELDS = ("config", "workload", "median_s", "min_s", "max_s")  # what a baseline row needs to be compared


def load_report(path: str | Path, *, suite: str | None = None) -> BenchmarkReport:
    """Read and check a ``report.json`` (before any benchmark runs); a clear error if it is not one.

    With ``suite``, the baseline must come from the same suite: other input sizes are not comparable.

    Raises
    ------
    ReportError
        The file cannot be read as JSON, is not an ``openclaw-benchmark/1`` report, has rows
        that cannot be compared, or comes from another suite.
    """
    try:
        report = json.loads(Path(path).read_text("utf-8"))
    except (OSError, ValueError) as e:
        raise ReportError(f"--compare {path}: cannot read a benchmark report ({e})") from None
    _check_schema(report, f"--compare {path}")
    rows = report.get("rows")
    if not isinstance(rows, list) or not all(_comparable(r) for r in rows):
        raise ReportError(f"--compare {path}: its rows lack {', '.join(_ROW_FIELDS)} or have a zero median; regenerate it")
    if suite is not None and report.get("suite") != suite:
        raise ReportError(f"--compare {path}: it is a {report.get('suite')} suite report, this run is --suite {suite}; "
                          "compare like with like")
    return BenchmarkReport(report)


def _check_schema(report: Any, where: str) -> None:
    if not isinstance(report, dict) or report.get("schema") != SCHEMA:
        got = report.get("schema") if isinstance(report, dict) else type(report).__name__
        raise ReportError(f"{where}: not an openclaw benchmark report (schema {got!r}, expected {SCHEMA})")


def _comparable(row: Any) -> bool:
    return isinstance(row, dict) and all(f in row for f in _ROW_FIELDS) and row["median_s"] > 0


def compare(report: dict[str, Any], baseline: dict[str, Any]) -> list[dict[str, Any]]:
    """Mark each row faster, slower, same or undecided against the baseline row of the same config and workload.

    ``faster``/``slower`` only when the two rows' timed runs differ by the test of
    :func:`~openclaw_dask.diagnostics.stats.compare_runs`; ``undecided`` when either row has
    too few runs for the test to ever say so. Rows are annotated in place under ``"compare"``
    (``status``, ``ratio`` of medians, ``p_value``, ``runs``, ``baseline_median_s``, ``text``);
    the annotations are returned.

    Raises
    ------
    ReportError
        ``baseline`` is not an ``openclaw-benchmark/1`` report.
    """
    _check_schema(baseline, "--compare")
    old = {(r["config"], r["workload"]): r for r in baseline["rows"]}
    out = []
    for r in report["rows"]:
        b = old.get((r["config"], r["workload"]))
        if b is None:
            r["compare"] = {"status": "new"}
        else:
            test = compare_runs(r.get("times_s") or [], b.get("times_s") or [])
            r["compare"] = {"status": test.verdict, "ratio": r["median_s"] / b["median_s"], "p_value": test.p,
                            "runs": list(test.runs), "baseline_median_s": b["median_s"], "text": test.text()}
        out.append(r["compare"])
    return out


def regressions(report: dict[str, Any], pct: float) -> list[dict[str, Any]]:
    """Rows slower than their baseline with confidence (see :func:`compare`) and by more than ``pct`` percent."""
    return [
        r for r in report["rows"]
        if r.get("compare", {}).get("status") == "slower" and (r["compare"]["ratio"] - 1) * 100 > pct
    ]


def check_gate(fail_pct: float | None, repeat: int, baseline: dict[str, Any] | None) -> None:
    """Before any run: refuse a ``--fail-on-regression`` gate that could never fail, for too few timed runs.

    Raises
    ------
    ConfigError
        This run's ``repeat``, or the baseline's runs per row, are below the fewest with which
        the test can reach p < 0.05 (4 a side).
    """
    if fail_pct is None:
        return
    fewest = runs_to_decide(ALPHA, overlaps=0)
    if repeat < fewest:
        raise ConfigError(f"--fail-on-regression with --repeat {repeat}: with fewer than {fewest} timed runs a row no "
                          f"slowdown is significant (p < {ALPHA:g}), so the gate could never fail; use --repeat {fewest} or more")
    runs = min((len(r.get("times_s") or []) for r in (baseline or {}).get("rows", [])), default=fewest)
    if runs < fewest:
        raise ConfigError(f"--fail-on-regression: the --compare baseline has {runs} timed run(s) in a row, fewer than the "
                          f"{fewest} with which a slowdown can be significant (p < {ALPHA:g}); rerun it with --repeat {fewest} or more")


def check_report(report: dict[str, Any], fail_pct: float | None = None) -> None:
    """Raise when a row disagrees with NumPy, or (with ``fail_pct``) regressed beyond it.

    Raises
    ------
    ResultMismatch
        A row computed a wrong answer.
    RunError
        A row is faster than this machine's memory allows (``invalid``), or slower than the
        baseline with confidence and by more than ``fail_pct`` percent.
    """
    rows = report["rows"]
    for error in (_mismatched(rows), _invalid(rows), _regressed(report, fail_pct)):
        if error is not None:
            raise error


def _mismatched(rows: list[dict[str, Any]]) -> ResultMismatch | None:
    bad = [r for r in rows if not r["ok"]]
    if not bad:
        return None
    return ResultMismatch(f"{len(bad)} row(s) disagree with NumPy: "
                          + "; ".join(f"{r['config']}/{r['workload']}: {r.get('check', 'DIFFERENT')}" for r in bad))


def _invalid(rows: list[dict[str, Any]]) -> RunError | None:
    invalid = [r for r in rows if r.get("invalid")]
    if not invalid:
        return None
    return RunError(f"{len(invalid)} row(s) are faster than this machine's memory allows, so not results: "
                    + "; ".join(f"{r['config']}/{r['workload']}: {r['invalid']}" for r in invalid))


def _regressed(report: dict[str, Any], fail_pct: float | None) -> RunError | None:
    slower = regressions(report, fail_pct) if fail_pct is not None else []
    if not slower:
        return None
    return RunError(f"{len(slower)} row(s) regressed by more than {fail_pct:g}%: " + ", ".join(
        f"{r['config']}/{r['workload']} {r['compare']['ratio']:.2f}x" + _p(r['compare']) for r in slower))


def _p(cmp: dict[str, Any]) -> str:
    return f" (p = {cmp['p_value']:.2g})" if cmp.get("p_value") is not None else ""
