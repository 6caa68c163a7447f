"""`openclaw profile` and `openclaw benchmark` stay readable at any width: no cut number, no cut word.

Each real run happens once per module; its result is rendered again at 60, 80 and 200 columns
(rich takes the width from COLUMNS when stdout is not a terminal, and 80 without it: piped).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest

from openclaw_dask.config import load_config
from openclaw_dask.diagnostics.benchmark_render import COLUMNS, BenchmarkReport, row_cells
from openclaw_dask.diagnostics.benchmark_report import rows_of
from openclaw_dask.diagnostics.profile import profile_config
from openclaw_dask.diagnostics.terminal import _b, _short, _t, print_benchmark, print_profile, print_tune
from openclaw_dask.diagnostics.termtable import Col, fit_widths, print_table

WIDTHS = (60, 80, 200)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_BENCH_LABELS = {"config", "workload", "ok", "flags", "compare"}


def _cli(*args: str, columns: int | None) -> str:
    """The real command, its stdout a pipe (and no terminal on stdin or stderr either)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENCLAW_") and k not in ("COLUMNS", "LINES")}
    if columns is not None:
        env["COLUMNS"] = str(columns)
    r = subprocess.run([sys.executable, "-m", "openclaw_dask", *args], check=False, env=env, stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _render(fn, arg, width: int, monkeypatch, capsys) -> str:
    capsys.readouterr()
    monkeypatch.setenv("COLUMNS", str(width))
    fn(arg)
    return _ANSI.sub("", capsys.readouterr().out)


def _token(text: str, lines: list[str]) -> bool:
    """``text`` appears whole on one line, not as part of a longer figure or word."""
    pattern = re.compile(r"(?<![\w.])" + re.escape(text) + r"(?![\w.])")
    return any(pattern.search(line) for line in lines)


def _assert_readable(out: str, width: int, figures: list[str], labels: list[str]) -> None:
    lines = out.splitlines()
    assert "…" not in out, out  # rich's cut mark
    assert not re.search(r"\de[+-]\d", out), out  # 1e+03 MiB
    too_wide = [line for line in lines if len(line.rstrip()) > width and not line.startswith("wrote ")]  # a path is a path
    assert not too_wide, f"lines over {width} columns: {too_wide}"
    cut = [f for f in figures if not _token(f, lines)]
    assert not cut, f"figures not whole on one line at {width} columns: {cut}\n{out}"
    broken = [w for label in labels for w in label.split() if not _token(w, lines)]
    assert not broken, f"label words not whole at {width} columns: {broken}\n{out}"


@pytest.fixture(scope="module", params=["thread", "process"])
def profiled(request):
    cfg = load_config(None, {"workload.size": "16MiB", "parallel.backend": request.param}, env={})
    return profile_config(cfg, "array-sum").report


def _profile_expected(report) -> tuple[list[str], list[str]]:
    # a row's key (worker, group) heads its block when the table does not fit: its header is then not printed
    figures, labels = [], ["tasks", "busy", "idle", "util", "computed", "in", "out", "peak mem", "count", "total", "p50", "p95",
                           "max", "chunk p50", "chunk max"]
    for w in report.workers:
        labels.append(f"{_short(w.address)} x{w.nthreads}")
        figures += [str(w.tasks), _t(w.busy_s), _t(w.idle_s), f"{w.utilization:.0%}", _b(w.bytes_computed), _b(w.bytes_in),
                    _b(w.bytes_out), _b(w.peak_memory)]
    for g in report.groups[:12]:
        labels.append(g.group)
        figures += [str(g.count), _t(g.total_s), _t(g.p50_s), _t(g.p95_s), _t(g.max_s), _b(g.bytes_p50), _b(g.bytes_max)]
    return figures, labels


@pytest.mark.parametrize("width", WIDTHS)
def test_profile_tables_cut_no_figure_and_no_label(profiled, width, monkeypatch, capsys):
    assert profiled.n_tasks and profiled.workers and profiled.groups
    out = _render(print_profile, profiled, width, monkeypatch, capsys)
    figures, labels = _profile_expected(profiled)
    _assert_readable(out, width, figures, labels)
    if width == 200:  # room for both tables: their headers, and each worker on one line
        assert _token("worker x threads", out.splitlines()) and _token("group", out.splitlines())
        for w in profiled.workers:
            line = next(x for x in out.splitlines() if x.startswith(f"{_short(w.address)} x{w.nthreads}"))
            assert _b(w.peak_memory) in line and _t(w.busy_s) in line


@pytest.mark.parametrize("columns", [None, 60])
def test_openclaw_profile_piped(columns):
    out = _cli("profile", "array-sum", "--size", "16MiB", "--set", "parallel.backend=process", columns=columns)
    width = columns or 80
    _assert_readable(out, width, [], ["tasks", "peak", "mem", "openclaw-arange", "sum-aggregate"])
    assert re.search(r"127\.0\.0\.1:\d+ x1", out), out
    assert re.findall(r"\d+(?:\.\d+)? (?:B|KiB|MiB|GiB)\b", out)  # sizes with their units, never cut
    assert "no problems found" in out or "fix:" in out


@pytest.fixture(scope="module")
def bench_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    text = _cli("benchmark", "--suite", "smoke", "--repeat", "1", "--sweep", "parallel.task_chunk_size=1MiB,4MiB",
                "--out", str(out), columns=None)
    return text, BenchmarkReport(json.loads((out / "report.json").read_text()))


def _bench_expected(report) -> tuple[list[str], list[str]]:
    figures, labels = [], list(COLUMNS[2:-1])  # config and workload head each row's block when the table does not fit
    for r in rows_of(report):
        for name, cell in zip(COLUMNS, row_cells(r)):
            (labels if name in _BENCH_LABELS else figures).append(cell)
    return [f for f in figures if f != "-"], [x for x in labels if x]


def test_openclaw_benchmark_piped_prints_the_report(bench_report):
    text, report = bench_report
    figures, labels = _bench_expected(report)
    _assert_readable(text, 80, figures, labels)
    assert "openclaw benchmark (smoke suite)" in text and "speedup over task_chunk_size=1MiB" in text
    assert "|---|" not in text  # tables for people, not report.md's markdown


@pytest.mark.parametrize("width", WIDTHS)
def test_benchmark_report_cuts_no_figure_and_no_label(bench_report, width, monkeypatch, capsys):
    _, report = bench_report
    out = _render(print_benchmark, report, width, monkeypatch, capsys)
    figures, labels = _bench_expected(report)
    _assert_readable(out, width, figures, labels)
    if width == 200:  # the whole table fits: its header, one line per row with its figures
        assert re.search(r"^config +workload +ok", out, re.MULTILINE), out
        r = rows_of(report)[0]
        line = next(x for x in out.splitlines() if x.startswith(f"{r.config} ") and r.workload in x)
        assert all(c in line for c in row_cells(r)[3:7])


@pytest.mark.parametrize("n", [999, 1000 * 2**20, 999.6 * 2**20, 1.95 * 2**30, 2**41])
def test_sizes_keep_the_figure_under_1000_and_never_write_an_exponent(n):
    text = _b(n)
    figure, unit = text.split()
    assert "e" not in figure and float(figure) < 1000 and unit in ("B", "KiB", "MiB", "GiB", "TiB")
    assert _b(1000 * 2**20) == "0.98 GiB" and _b(1.95 * 2**30) == "1.95 GiB" and _b(8 * 2**20) == "8 MiB"


def test_fit_widths_breaks_labels_between_words_and_never_a_figure():
    cols = [Col("name", wrap=True, justify="left"), Col("peak memory"), Col("busy")]
    rows = [["a rather long label of words", "1.95 GiB", "2.81s"]]
    assert fit_widths(cols, rows, 200) == [28, 11, 5]  # as wide as the widest cell or header
    assert fit_widths(cols, rows, 30) == [14, 11, 5]  # the label wraps between words first
    assert fit_widths(cols, rows, 20) == [6, 9, 5]  # then the header; "1.95 GiB" stays whole
    assert fit_widths(cols, rows, 18) is None  # "rather", "1.95 GiB" and "2.81s" cannot all fit: one block per row


def test_a_table_too_wide_becomes_name_value_blocks(monkeypatch, capsys):
    from rich.console import Console

    cols = [Col("configuration", wrap=True, justify="left")] + [Col(f"figure {i}") for i in range(8)]
    rows = [["parallel.task_chunk_size=64MiB"] + [f"{i}.95 GiB" for i in range(8)]]
    console = Console(width=60, file=sys.stdout)
    print_table(console, "wide", cols, rows)
    out = capsys.readouterr().out
    assert out.splitlines()[1] == "parallel.task_chunk_size=64MiB"
    assert all(f"figure {i}: {i}.95 GiB" in out for i in range(8)) and max(len(x.rstrip()) for x in out.splitlines()) <= 60


@pytest.mark.parametrize("width", WIDTHS)
def test_tune_ranking_fits(width, monkeypatch, capsys):
    trial = SimpleNamespace(label="parallel.task_chunk_size=64MiB, parallel.workers=2", times=[0.0056, 0.0094, 0.0071],
                            median_s=0.0071, error=None)
    failed = SimpleNamespace(label="parallel.workers=4", times=[], median_s=None, error="not reached in the budget")
    result = SimpleNamespace(workload="array-sum", spent_s=58.0, budget_s=60.0, baseline=trial, trials=[trial, failed],
                             why=lambda: "the current config is as good as any tried")
    out = _render(print_tune, result, width, monkeypatch, capsys)
    _assert_readable(out, width, ["7.1ms", "5.6ms-9.4ms", "1.00x"], [trial.label, failed.label, failed.error])
