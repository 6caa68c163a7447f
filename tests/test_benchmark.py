from __future__ import annotations

import copy
import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest

from openclaw_dask.diagnostics.benchmark import SCHEMA, Row, check_report, compare, configurations, prepare, regressions
from openclaw_dask.diagnostics.benchmark_render import html_layout, markdown
from openclaw_dask.errors import ConfigError, ReportError
from openclaw_dask.workloads.suite import KERNELS

from .conftest import openclaw


def test_sweeps_expand_to_the_cartesian_product(tmp_path):
    confs = configurations([], ["parallel.task_chunk_size=1MiB,64MiB", "parallel.workers=1,2"], {})
    assert [c.label for c in confs] == [
        "task_chunk_size=1MiB, workers=1", "task_chunk_size=1MiB, workers=2",
        "task_chunk_size=64MiB, workers=1", "task_chunk_size=64MiB, workers=2",
    ]
    assert confs[3].config.parallel.workers == 2
    a = tmp_path / "a.yaml"
    a.write_text("parallel: {backend: process}\n")
    (only,) = configurations([str(a)], [], {"parallel.workers": 2})
    assert only.label == "a" and only.config.parallel.backend == "process" and only.config.parallel.workers == 2
    with pytest.raises(ConfigError, match="expected KEY=V1,V2"):
        configurations([], ["parallel.workers"], {})
    with pytest.raises(ConfigError, match="parallel.workers must be"):
        configurations([], ["parallel.workers=0,2"], {})


def test_prepare_checks_the_inputs_before_anything_runs(tmp_path):
    with pytest.raises(ConfigError, match="--configs nope.yaml: no such file"):
        prepare(["nope.yaml"])
    (tmp_path / "taken").write_text("")
    with pytest.raises(ConfigError, match="--out taken/x: cannot create the folder"):
        prepare(out_dir="taken/x")
    plan = prepare(sweeps=["parallel.workers=1,2"], base_overrides={"workload.repeat": 1}, out_dir="out")
    assert [c.label for c in plan.configs] == ["workers=1", "workers=2"] and plan.configs[1].config.workload.repeat == 1
    assert plan.out_dir.is_dir() and plan.baseline is None and plan.base_overrides == {"workload.repeat": 1}


def test_check_report_fails_wrong_rows_then_regressions():
    from openclaw_dask.errors import ResultMismatch, RunError

    ok = {"config": "a", "workload": "sum", "ok": True, "compare": {"status": "slower", "ratio": 1.5}}
    check_report({"rows": [ok]})
    with pytest.raises(RunError, match=r"1 row\(s\) regressed by more than 20%: a/sum 1.50x$"):
        check_report({"rows": [ok]}, 20)
    tested = {**ok, "compare": {"status": "slower", "ratio": 1.5, "p_value": 2 / 252}}
    with pytest.raises(RunError, match=r"regressed by more than 20%: a/sum 1.50x \(p = 0.0079\)"):
        check_report({"rows": [tested]}, 20)
    with pytest.raises(ResultMismatch, match="disagree with NumPy: a/sum"):
        check_report({"rows": [{**ok, "ok": False}]}, 20)


def _row(**fields):
    """A whole row of made-up figures; ``fields`` replace them."""
    row = {"workload": "array-sum", "ok": True, "check": "within 1e-16", "median_s": 0.0098, "min_s": 0.0095, "max_s": 0.011,
           "times_s": (0.0095, 0.0098, 0.011), "nbytes": 2**21, "gbps": 0.21, "gflops": 0.02, "tasks": 4.0, "tasks_per_s": 408.0,
           "task_latency_s": {"p50": 0.0, "p95": 0.0, "p99": 0.0}, "numpy_1thread_s": 0.088, "speedup_vs_numpy_1thread": 9.0,
           "cpu_steal_share": None, "flags": (), "verdicts": (), "config": "process", "settings": {"parallel.enabled": True},
           "workers": 2, "threads": 2, "invalid": None, "bandwidth_gbps": 31.6, "efficiency_vs_bandwidth": 0.01,
           "speedup_vs_serial": 7.0, "speedup_vs_first": 1.0}
    return Row(**{**row, **fields})


def test_a_figure_above_the_measured_bandwidth_is_an_invalid_row_never_a_result():
    from openclaw_dask.errors import RunError
    from openclaw_dask.workloads.limits import implausible

    assert implausible(30.0, 31.6) is None and implausible(33.0, 31.6) is None  # within the 5% margin
    reason = implausible(230.0, 31.6)
    assert reason.startswith("230.0 GB/s is 7.3x the memory bandwidth measured in this run (31.6 GB/s)")
    row = _row(invalid=reason, gbps=230.0, tasks_per_s=1e5, efficiency_vs_bandwidth=7.3).to_json()
    report = {"suite": "quick", "created": "now", "repeat": 5, "rows": [row], "machine": {
        "cpu_count": 2, "memory_bytes": 2**34, "bandwidth_gbps_1_thread": 20.0, "bandwidth_gbps_all_cores": 31.6}}
    md = markdown(report)
    plots = html_layout(report).children[1:]  # every row invalid: the plots are empty, not a crash
    assert [list(p.renderers[0].data_source.data["x"]) for p in plots] == [[], [], []]
    line = next(x for x in md.splitlines() if "| array-sum |" in x)
    assert "**invalid**: 230.0 GB/s is 7.3x" in line and "9.8" not in line and "7.00" not in line  # no figure of it printed
    with pytest.raises(RunError, match=r"1 row\(s\) are faster than this machine's memory allows.*process/array-sum: 230.0 GB/s"):
        check_report({"rows": [row]})


def test_array_sum_above_the_limit_is_invalid_and_the_cli_says_so_in_one_line(monkeypatch):
    from click.testing import CliRunner

    from openclaw_dask.cli import main
    from openclaw_dask.workloads import array_sum, limits

    limit = limits.throughput_limit
    seen = []
    monkeypatch.setattr(array_sum, "throughput_limit", lambda s, n: seen.append(limit(s, n)) or 1e-6)  # a limit no run meets
    r = CliRunner().invoke(main, ["run", "array-sum", "--size", "8MiB", "--json"])
    assert r.exit_code == 1, r.output
    result = json.loads(r.output.splitlines()[0])
    assert result["ok"] and result["invalid"].endswith("the timed runs cannot have read their data, so this is not a result")
    assert r.output.splitlines()[-1].startswith("openclaw: error: array-sum:") and "Traceback" not in r.output
    assert seen and 1 < seen[0] < 1e4  # the real limit was measured: GB/s of this machine


def _report(*rows):
    keys = ("config", "workload", "times_s")
    return {"schema": SCHEMA, "suite": "quick", "repeat": 5, "rows": [
        {**dict(zip(keys, r)), "median_s": sorted(r[2])[len(r[2]) // 2], "min_s": min(r[2]), "max_s": max(r[2])} for r in rows]}


RUNS = [1.00, 1.01, 0.99, 1.02, 0.98]


def test_compare_calls_a_row_faster_or_slower_only_when_its_runs_say_so():
    base = _report(("a", "sum", RUNS), ("a", "map", RUNS), ("a", "mm", RUNS), ("a", "few", RUNS[:2]))
    noisy = [1.2, 0.9, 1.25, 0.95, 1.1]  # median 10% up, but straddling the baseline: p = 0.69
    new = _report(("a", "sum", [1.5 * t for t in RUNS]), ("a", "map", noisy), ("a", "mm", [0.5 * t for t in RUNS]),
                  ("a", "few", [2.0, 2.1]), ("b", "sum", RUNS))
    marks = compare(new, base)
    assert [c["status"] for c in marks] == ["slower", "same", "faster", "undecided", "new"]
    assert marks[0]["p_value"] == pytest.approx(2 / 252) and marks[0]["runs"] == [5, 5] and marks[0]["ratio"] == 1.5
    assert marks[1]["p_value"] > 0.05 and marks[1]["text"].startswith("no significant difference (1.10x the time, p = ")
    assert marks[3]["p_value"] is None and "2 vs 2 runs are too few to tell" in marks[3]["text"]
    assert [r["workload"] for r in regressions(new, 20)] == ["sum"]  # 2x on "few" is not a regression anyone showed
    assert regressions(new, 60) == []
    assert {c["status"] for c in compare(copy.deepcopy(base), base)} == {"same", "undecided"}
    with pytest.raises(ReportError, match="not an openclaw benchmark report"):
        compare(new, {"rows": []})


def test_the_compare_and_speedup_cells_show_the_test():
    from openclaw_dask.diagnostics.benchmark_render import _compare_text, _speedup_cell

    new = _report(("a", "sum", [1.5 * t for t in RUNS]), ("a", "map", [1.2, 0.9, 1.25, 0.95, 1.1]), ("a", "few", [2.0, 2.1]))
    base = _report(("a", "sum", RUNS), ("a", "map", RUNS), ("a", "few", RUNS[:2]))
    cells = [_compare_text(c) for c in compare(new, base)]
    assert cells == ["slower (1.50x, p=0.0079, 5 vs 5 runs)", "same (1.10x, p=0.69, 5 vs 5 runs)",
                     "undecided (2.08x, too few runs, 2 vs 2 runs)"]
    first = _row(times_s=tuple(RUNS))
    assert _speedup_cell(_row(times_s=tuple(0.5 * t for t in RUNS), speedup_vs_first=2.0), first) == "2.00 (p=0.0079)"
    assert _speedup_cell(_row(times_s=(1.2, 0.9, 1.25, 0.95, 1.1), speedup_vs_first=0.91), first) == "0.91 (same, p=0.69)"
    assert _speedup_cell(_row(times_s=(0.5, 0.5), speedup_vs_first=2.0), first) == "2.00 (too few runs)"


def test_a_regression_gate_that_could_never_fail_is_refused_before_any_run(tmp_path):
    from openclaw_dask.diagnostics.benchmark import check_gate

    check_gate(None, 1, None)
    check_gate(10, 4, _report(("a", "sum", RUNS[:4])))
    with pytest.raises(ConfigError, match=r"--fail-on-regression with --repeat 3: with fewer than 4 timed runs a row"):
        check_gate(10, 3, _report(("a", "sum", RUNS)))
    with pytest.raises(ConfigError, match=r"the --compare baseline has 2 timed run\(s\) in a row.*--repeat 4 or more"):
        check_gate(10, 5, _report(("a", "sum", RUNS), ("a", "map", RUNS[:2])))
    baseline = tmp_path / "base.json"
    baseline.write_text(json.dumps(_report(("a", "sum", RUNS))))
    r = openclaw("benchmark", "--compare", str(baseline), "--fail-on-regression", "10", "--repeat", "2", "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--fail-on-regression with --repeat 2" in r.stderr


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "out"
    r = openclaw("benchmark", "--suite", "quick", "--sweep", "parallel.task_chunk_size=1MiB,64MiB", "--repeat", "2",
                 "--out", str(out), timeout=300)
    return r, out


@pytest.mark.slow
def test_quick_suite_writes_three_reports_and_flags_tiny_chunks(quick_run):
    r, out = quick_run
    assert r.returncode == 0, r.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["schema"] == SCHEMA
    assert {"cpu_count", "bandwidth_gbps_all_cores"} <= set(report["machine"])
    assert {"dask", "distributed", "numpy", "openclaw_dask"} <= set(report["versions"])
    rows = {(row["config"], row["workload"]): row for row in report["rows"]}
    assert {w for _, w in rows} == set(KERNELS)
    assert {c for c, _ in rows} == {"serial", "task_chunk_size=1MiB", "task_chunk_size=64MiB"}
    assert all(row["ok"] for row in rows.values())
    assert not any(row["invalid"] for row in rows.values())  # every figure under the bandwidth measured in this run
    assert all(row["efficiency_vs_bandwidth"] is None or row["efficiency_vs_bandwidth"] <= 1.05 for row in rows.values())
    assert "overhead-bound" in rows["task_chunk_size=1MiB", "array-sum"]["flags"]
    assert "overhead-bound" not in rows["task_chunk_size=64MiB", "array-sum"]["flags"]
    assert rows["task_chunk_size=1MiB", "array-sum"]["settings"]["parallel.task_chunk_size"] == str(2**20)
    for row in rows.values():
        assert row["min_s"] <= row["median_s"] <= row["max_s"]
        assert set(row["task_latency_s"]) == {"p50", "p95", "p99"}
        assert row["speedup_vs_serial"] > 0 and row["speedup_vs_numpy_1thread"] > 0
        assert row["cpu_steal_share"] is None or 0 <= row["cpu_steal_share"] < 1
    md = (out / "report.md").read_text()
    assert "| task_chunk_size=1MiB | array-sum | yes |" in md and "overhead-bound" in md
    assert "## Speedup over task_chunk_size=1MiB" in md and "| workload | task_chunk_size=64MiB |" in md
    assert rows["task_chunk_size=1MiB", "matmul"]["speedup_vs_first"] == 1.0
    html = (out / "report.html").read_text()
    assert "cdn.bokeh.org" not in html and "Speedup over the serial scheduler" in html


@pytest.mark.slow
def test_compare_against_itself_reports_no_regression(quick_run):
    r, out = quick_run
    assert r.returncode == 0, r.stderr
    # rerunning is what a user does; a report compared with itself is never faster or slower, and with
    # 2 runs a row (too few for the test to decide anything) it is undecided, not "same"
    from openclaw_dask.diagnostics.benchmark import load_report

    report = load_report(out / "report.json")
    assert {c["status"] for c in compare(report, load_report(out / "report.json"))} == {"undecided"}
    inline = report._repr_html_()  # a notebook cell ending with the report shows its plots, offline
    assert inline.startswith("<iframe srcdoc=") and "Speedup over the serial scheduler" in inline and "cdn.bokeh.org" not in inline
    assert regressions(report, 0) == []


def test_cpu_steal_is_a_share_of_the_window_it_was_read_over():
    from openclaw_dask.diagnostics.benchmark_run import STEAL_WINDOW_S, steal_share

    assert steal_share(10.0, 10.5, 2.0) == 0.25
    assert steal_share(10.0, 10.02, 0.05) is None  # two 10 ms ticks in a 50 ms window: too coarse to tell
    assert steal_share(10.0, 13.0, STEAL_WINDOW_S) == 1.0  # ticks read at the window's edges: never over the whole
    assert steal_share(10.0, 9.99, 2.0) == 0.0
    assert steal_share(None, 1.0, 2.0) is None and steal_share(1.0, None, 2.0) is None  # no steal counter here


@pytest.mark.slow
def test_cpu_steal_is_named_in_the_markdown_from_two_percent(quick_run):
    from openclaw_dask.diagnostics.benchmark import load_report

    _, out = quick_run
    report = load_report(out / "report.json")
    for row in report["rows"]:
        row["cpu_steal_share"] = 0.01
    assert "cpu-steal" not in markdown(report)
    report["rows"][0]["cpu_steal_share"] = 0.25  # a quarter of the runs' time went to other guests
    md = markdown(report)
    assert md.count("cpu-steal 25%") == 1 and "the hypervisor ran other guests" in md


@pytest.mark.slow
def test_benchmark_html_renders_in_headless_chromium(quick_run, tmp_path):
    from .browser import plotted_colors, screenshot

    _, out = quick_run
    # the tables and verdicts come first; the plots follow them (tests/test_html_reports.py checks both)
    colors = plotted_colors(screenshot(out / "report.html", tmp_path / "b.png", size="1200,3600"))
    assert len(colors) >= 3, colors


def test_fail_on_regression_needs_a_baseline():
    r = openclaw("benchmark", "--fail-on-regression", "10")
    assert r.returncode == 2 and "needs --compare" in r.stderr


@pytest.mark.slow
def test_cli_compare_with_a_regression_gate(tmp_path):
    # the gate runs on the smoke suite with enough runs for the test to decide, at a threshold no noise
    # reaches; what it says when crossed is test_check_report_fails_wrong_rows_then_regressions
    args = ("benchmark", "--suite", "smoke", "--repeat", "4")
    assert openclaw(*args, "--out", str(tmp_path / "first"), timeout=300).returncode == 0
    r = openclaw(*args, "--out", str(tmp_path / "again"), "--compare", str(tmp_path / "first" / "report.json"),
                 "--fail-on-regression", "100000", timeout=300)
    assert r.returncode == 0, r.stderr
    rows = json.loads((tmp_path / "again" / "report.json").read_text())["rows"]
    assert {row["compare"]["status"] for row in rows} <= {"same", "faster", "slower"}
    assert all(row["compare"]["runs"] == [4, 4] and 0 < row["compare"]["p_value"] <= 1 for row in rows)


def test_baselines_are_checked_before_anything_runs(tmp_path):
    from openclaw_dask.diagnostics.benchmark import load_report

    cases = {
        "list.json": ("[1, 2]", "not an openclaw benchmark report"),
        "rows.json": (json.dumps({"schema": SCHEMA, "rows": [{"config": "a"}]}), "rows lack"),
        "zero.json": (json.dumps({"schema": SCHEMA, "rows": [dict(zip(("config", "workload", "median_s", "min_s", "max_s"), ("a", "s", 0, 0, 0)))]}), "zero median"),
        "suite.json": (json.dumps({"schema": SCHEMA, "suite": "standard", "rows": []}), "compare like with like"),
    }
    for name, (text, needle) in cases.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(ReportError, match=needle):
            load_report(tmp_path / name, suite="quick")


def test_a_baseline_that_is_not_a_report_is_one_line_and_exit_3_before_anything_runs(tmp_path):
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "cut.json").write_text(json.dumps({"schema": SCHEMA, "rows": []})[:-3])  # a truncated file
    for name, needle in (("list.json", "not an openclaw benchmark report"), ("cut.json", "cannot read a benchmark report")):
        r = openclaw("benchmark", "--compare", str(tmp_path / name), "--out", str(tmp_path / "out"))
        assert r.returncode == 3 == ReportError.exit_code, r.stderr
        assert r.stderr.count("\n") == 1 and r.stderr.startswith(f"openclaw: error: --compare {tmp_path / name}: {needle}")
        assert r.stdout == "" and not (tmp_path / "out").exists()  # refused before any row ran or the folder was made


def _documented_row_fields():
    doc = (Path(__file__).resolve().parents[1] / "docs" / "benchmark-report.md").read_text()
    table = doc.split("| row field | meaning |", 1)[1].split("\n\n", 1)[0]
    return [name for line in table.splitlines()[2:] for name in re.findall(r"`([a-z0-9_]+)`", line.split(" | ")[0])]


def test_a_row_round_trips_through_report_json_with_exactly_the_documented_fields():
    row = _row(invalid="too fast", cpu_steal_share=0.01, flags=("overhead-bound",), verdicts=("overhead-bound: x; fix: y",),
               compare={"status": "same", "ratio": 1.01, "p_value": 0.42, "runs": [5, 5], "baseline_median_s": 0.0097,
                        "text": "no significant difference (1.01x the time, p = 0.42, Mann-Whitney U on 5 vs 5 runs)"})
    text = json.dumps(row.to_json())
    assert Row.from_json(json.loads(text)) == row  # tuples come back as tuples, every field as it was
    assert list(row.to_json()) == [f.name for f in dataclasses.fields(Row)]  # JSON in the order declared
    assert sorted(row.to_json()) == sorted(_documented_row_fields())  # docs/benchmark-report.md names each, no more
    assert "compare" not in _row().to_json()  # only a compared row has one
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.ok = False
    older = {k: v for k, v in row.to_json().items() if k not in ("invalid", "bandwidth_gbps", "speedup_vs_first", "compare")}
    assert Row.from_json({**older, "from_a_later_version": 1}).invalid is None  # a report of another version still reads


def test_run_benchmark_assembles_rows_in_the_schema_with_speedups_and_invalid_rows(monkeypatch):
    from openclaw_dask.diagnostics import benchmark_run
    from openclaw_dask.diagnostics.benchmark import run_benchmark
    from openclaw_dask.diagnostics.benchmark_stats import rates

    medians = iter([0.04, 0.08, 0.4, 0.02, 0.04, 0.2, 0.01, 0.02, 1e-9])  # serial, workers=1, workers=2 x 3 kernels
    names = [f.name for f in dataclasses.fields(Row)]
    measured = names[:names.index("config")]  # what _run_kernel gives; the rest is the configuration's and the run's

    def kernel(session, name, size, repeat):
        row = {k: v for k, v in _row(workload=name).to_json().items() if k in measured}
        return {**row, **rates([next(medians)] * repeat, nbytes=2**20, flops=1e6, tasks=4.0)}

    monkeypatch.setattr(benchmark_run, "_run_kernel", kernel)
    monkeypatch.setattr(benchmark_run, "measure_bandwidth", lambda nbytes: {"1_thread": 5.0, "all_cores": 10.0})
    report = run_benchmark(configurations([], ["parallel.workers=1,2"], {}), suite="smoke", repeat=2)
    rows = report["rows"]
    assert [(r["config"], r["workload"]) for r in rows] == [
        (c, w) for c in ("serial", "workers=1", "workers=2") for w in ("array-sum", "elementwise", "matmul")]
    assert all(list(r) == [f.name for f in dataclasses.fields(Row) if f.name != "compare"] for r in rows)
    assert [round(r["speedup_vs_serial"], 6) for r in rows[3:6]] == [2.0, 2.0, 2.0]
    assert [round(r["speedup_vs_first"], 6) for r in rows[6:8]] == [2.0, 2.0] and rows[3]["speedup_vs_first"] == 1.0
    assert rows[8]["invalid"].startswith("1048576.0 GB/s is") and rows[8]["bandwidth_gbps"] == 10.0  # judged again: still 10
    assert not any(r["invalid"] for r in rows[:8]) and rows[0]["efficiency_vs_bandwidth"] == rows[0]["gbps"] / 10.0
    assert rows[0]["settings"]["parallel.enabled"] is False and rows[6]["settings"]["parallel.workers"] == 2
    assert report["schema"] == SCHEMA and report["machine"]["bandwidth_gbps_all_cores"] == 10.0
    assert [Row.from_json(json.loads(json.dumps(r))).to_json() for r in rows] == rows


def test_a_limit_measured_under_load_is_measured_again_before_a_row_is_called_invalid():
    from openclaw_dask.workloads.limits import judged

    fresh = iter([20.0, 31.0])
    assert judged(24.3, 13.9, lambda: next(fresh)) == (31.0, None)  # the standard suite's false alarm, measured again
    limit, why = judged(230.0, 31.6, lambda: 33.0)  # a non-run stays invalid however often the limit is measured
    assert limit == 33.0 and why.startswith("230.0 GB/s is 7.0x")
    calls = []
    assert judged(10.0, 31.6, lambda: calls.append(1) or 40.0) == (31.6, None) and calls == []  # no cost when plausible
    # within the margin but over the limit: the limit was measured low (a standard report's start), not the figure high
    assert judged(25.7, 24.6, lambda: 32.9) == (32.9, None)
    assert judged(25.7, 24.6, lambda: 24.0) == (24.6, None)  # measured again and no higher: within the margin, valid


def test_every_row_of_a_kernel_is_held_to_numpy_s_fastest_time_in_the_run():
    from openclaw_dask.diagnostics.benchmark_stats import with_speedups

    rows = [_row(workload=w, config=c, median_s=m, numpy_1thread_s=n) for w, c, m, n in [
        ("stencil", "serial", 0.6, 1.87), ("stencil", "backend=thread", 0.3, 1.83), ("stencil", "backend=process", 0.4, 0.51),
        ("matmul", "serial", 0.5, 0.8), ("matmul", "backend=thread", 0.25, 0.9), ("matmul", "backend=process", 0.5, 0.85)]]
    held = {(r.workload, r.config): r for r in with_speedups(rows, first="backend=thread")}
    assert {r.numpy_1thread_s for r in held.values() if r.workload == "stencil"} == {0.51}  # the same NumPy, at its best
    assert held["stencil", "backend=thread"].speedup_vs_numpy_1thread == pytest.approx(0.51 / 0.3)  # not 1.83 / 0.3
    assert held["matmul", "backend=process"].speedup_vs_numpy_1thread == pytest.approx(0.8 / 0.5)
    assert held["stencil", "backend=process"].speedup_vs_serial == pytest.approx(1.5)


def test_numpy_s_reference_is_timed_after_its_warm_ups():
    from openclaw_dask.workloads.prepared import Prepared

    calls = []

    def numpy(a):
        calls.append(len(calls))
        return a.sum()

    prepared = Prepared(lambda x: x.sum(), numpy, (), 0, accuracy=lambda: None)
    prepared._host = (np.arange(4.0),)
    answer, times = prepared.reference(None, runs=3, warmups=2)
    assert answer == 6.0 and len(times) == 3 and calls == [0, 1, 2, 3, 4]  # 2 untimed, then 3 timed
    assert len(prepared.reference(None)[1]) == 1 and len(calls) == 7  # by default one warm-up and one timed run


def test_every_row_is_held_to_the_highest_bandwidth_measured_in_the_run(monkeypatch):
    from openclaw_dask.diagnostics import benchmark_run
    from openclaw_dask.diagnostics.benchmark import run_benchmark
    from openclaw_dask.diagnostics.benchmark_stats import rates

    # GB/s of each row: 1 MiB in these seconds; the serial matmul row is at 10.4 GB/s, over the first limit of 10
    medians = iter([2**20 / 5e9, 2**20 / 8e9, 2**20 / 10.4e9, 2**20 / 9e9, 2**20 / 11e9, 2**20 / 7e9])
    names = [f.name for f in dataclasses.fields(Row)]
    measured = names[:names.index("config")]

    def kernel(session, name, size, repeat):
        row = {k: v for k, v in _row(workload=name).to_json().items() if k in measured}
        return {**row, **rates([next(medians)] * repeat, nbytes=2**20, flops=1e6, tasks=4.0)}

    limits = iter([10.0, 12.0, 11.5, 11.0])  # at the start; once for the 10.4 GB/s row; at the end (twice at most for 11)
    monkeypatch.setattr(benchmark_run, "_run_kernel", kernel)
    monkeypatch.setattr(benchmark_run, "measure_bandwidth", lambda nbytes: {"1_thread": 5.0, "all_cores": next(limits)})
    report = run_benchmark(configurations([], ["parallel.workers=2"], {}), suite="smoke", repeat=2)
    rows = report["rows"]
    assert next(limits) == 11.0  # the 11 GB/s row came after the limit was 12: not measured again but at the end
    assert report["machine"]["bandwidth_gbps_all_cores"] == 12.0
    assert [r["bandwidth_gbps"] for r in rows] == [12.0] * 6  # the serial rows too, measured before the limit rose
    assert [round(r["efficiency_vs_bandwidth"], 3) for r in rows] == [0.417, 0.667, 0.867, 0.75, 0.917, 0.583]
    assert not any(r["invalid"] for r in rows)


def test_a_kernel_warms_up_while_its_runs_still_speed_up():
    from openclaw_dask.diagnostics.benchmark_run import warming

    # the standard matmul on worker processes, warm-ups in turn: 402, 357, 339, then 306-327 ms
    assert warming([0.402, 0.357]) and warming([0.402, 0.357, 0.339]) and warming([0.357, 0.339, 0.306])
    assert not warming([0.339, 0.306, 0.315]) and not warming([0.306, 0.300])  # within 5% or slower: warm
    assert not warming([0.4])  # one run says nothing yet
