"""Planted problems are found and named; balanced runs get no verdict."""

from __future__ import annotations

import json
import textwrap

import pytest

import openclaw_dask
from openclaw_dask.diagnostics.analysis import analyze
from openclaw_dask.diagnostics.collect import RunRecord, TaskRecord, WorkerRecord
from openclaw_dask.diagnostics.profile import profile

from .conftest import openclaw

MiB = 2**20


def run_profile(**overrides):
    with openclaw_dask.session(**{"repeat": 1, **overrides}) as s:
        result = profile(s, "array-sum")
    assert result.exit_code == 0 and result.workload.ok
    return result.report


def test_planted_skew_names_the_big_chunk():
    report = run_profile(workers=2, size="64MiB", task_chunk_size="4MiB", skew=10)
    (skew,) = [v for v in report.verdicts if v.kind == "data-skew"]
    chunk = skew.evidence["chunks"][0]
    assert skew.evidence["group"] == "openclaw-arange" and chunk["key"].endswith(", 8)")  # the middle of 16 chunks
    assert chunk["ratio"] == pytest.approx(10, rel=0.05)
    assert "rechunk" in skew.fix
    assert "stragglers" not in report.kinds()  # a big chunk being slow is skew, not a straggler


def test_planted_straggler_is_named():
    report = run_profile(workers=2, size="64MiB", task_chunk_size="8MiB", straggler="1s")
    (slow,) = [v for v in report.verdicts if v.kind == "stragglers"]
    assert slow.evidence["group"] == "openclaw-straggle"
    assert slow.evidence["tasks"][0]["key"] == "('openclaw-straggle', 4)"
    assert slow.evidence["tasks"][0]["seconds"] >= 1.0
    imbalance = [v for v in report.verdicts if v.kind == "load-imbalance"]
    assert all("stragglers first" in v.fix for v in imbalance)


def test_tiny_chunks_are_overhead_bound_with_a_chunk_size_fix():
    report = run_profile(workers=2, size="16MiB", task_chunk_size="64KiB")
    (over,) = [v for v in report.verdicts if v.kind == "overhead-bound"]
    assert over.evidence["tasks"] > 256
    assert "--set parallel.task_chunk_size=" in over.fix
    suggested = int(over.fix.split("task_chunk_size=")[1].split("MiB")[0])
    assert suggested >= 1


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_balanced_default_run_gets_no_verdict(backend):
    report = run_profile(backend=backend, workers=2, size="1GiB", repeat=3)
    assert report.verdicts == [], [v.summary for v in report.verdicts]
    assert report.imbalance["lanes"] == 2
    assert {w.tasks > 0 for w in report.workers} == {True}
    # each execution counted once: a recomputed key must not carry its earlier intervals
    assert all(w.busy_s <= report.wall_s * w.nthreads * 1.001 for w in report.workers)


def test_transfer_bound_script_is_found(tmp_path):
    script = tmp_path / "pairs.py"
    script.write_text(textwrap.dedent(
        """
        import openclaw_dask
        s = openclaw_dask.session()
        first, second = sorted(s.workers())
        n = 64 * 2**20 // 8
        # a lives on one worker, b on the other: every block of a + b must cross
        a = s.client.persist(s.array((n,), fill="arange"), workers=[first])
        b = s.client.persist(s.array((n,), fill="ones"), workers=[second])
        assert s.compute((a + b).sum()) == n * (n - 1) / 2 + n
        """
    ))
    with openclaw_dask.session(backend="process", workers=2, task_chunk_size="8MiB") as s:
        result = profile(s, script)
    assert result.exit_code == 0
    assert "transfer-bound" in result.report.kinds(), [v.summary for v in result.report.verdicts]
    assert sum(w.bytes_in for w in result.report.workers) >= 64 * MiB


def _record(**workers):
    record = RunRecord(backend="process", start=0.0, stop=1.0)
    for name, (peak, limit, spilled) in workers.items():
        record.workers[name] = WorkerRecord(name, 1, limit, peak, 0, 0, spilled)
        record.tasks.append(TaskRecord("('x', 0)", "x", name, 1, 0.0, 0.5, MiB))
    return record


def test_memory_pressure_from_peak_or_spill():
    report = analyze(_record(a=(900 * MiB, 1000 * MiB, 0), b=(100 * MiB, 1000 * MiB, 0), c=(100 * MiB, 1000 * MiB, 5 * MiB)))
    named = sorted(v.evidence["worker"] for v in report.verdicts if v.kind == "memory-pressure")
    assert named == ["a", "c"]
    assert all("cluster.memory_limit" in v.fix for v in report.verdicts)


def test_cli_profile_json_and_html_on_planted_skew(tmp_path):
    html = tmp_path / "p.html"
    r = openclaw("profile", "array-sum", "--html", str(html), "--json", "--size", "64MiB",
                 "--set", "workload.skew=10", "--set", "parallel.task_chunk_size=4MiB", "--set", "workload.repeat=1", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["workload"]["ok"] is True
    kinds = [v["kind"] for v in out["profile"]["verdicts"]]
    assert "data-skew" in kinds
    assert {"workers", "groups", "imbalance", "n_tasks"} <= set(out["profile"])
    text = html.read_text()
    assert "<script src=\"http" not in text and "cdn.bokeh.org" not in text  # resources inline: works offline
    assert "Task stream" in text and "data-skew" in text and len(text) > 200_000


def test_cli_profile_default_config_reports_no_imbalance(tmp_path):
    r = openclaw("profile", cwd=tmp_path)  # the real defaults: 1 GiB, auto chunks, all cores
    assert r.returncode == 0, r.stderr
    assert "no problems found" in r.stdout
    assert "load-imbalance" not in r.stdout


@pytest.mark.slow
def test_profile_html_renders_its_plots_in_headless_chromium(tmp_path):
    from .browser import plotted_colors, screenshot

    page = tmp_path / "p.html"
    r = openclaw("profile", "--html", str(page), "--size", "64MiB", "--set", "parallel.task_chunk_size=8MiB", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    colors = plotted_colors(screenshot(page, tmp_path / "p.png"))
    # the task-stream groups and the load and histogram bars give several saturated colours
    assert len(colors) >= 4, colors


def test_collector_leaves_the_scheduler_as_it_found_it():
    from openclaw_dask.diagnostics.collect import collect

    def plugins(dask_scheduler):
        return set(dask_scheduler.plugins)

    with openclaw_dask.session(workers=1) as s:
        before = s.client.run_on_scheduler(plugins)
        x = s.persist(s.array((1000,), fill="ones"))
        with collect(s) as record:
            assert s.compute(x.sum()) == 1000
        assert record.tasks
        assert s.client.run_on_scheduler(plugins) == before  # the task-stream plugin is gone again
