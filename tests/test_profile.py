"""Planted problems are found and named; balanced runs get no verdict."""

from __future__ import annotations

import contextlib
import json
import re
import textwrap
from pathlib import Path

import dask
import dask.array as da
import pytest
from click.testing import CliRunner
from dask.utils import parse_bytes

import openclaw_dask
from openclaw_dask.cli import main
from openclaw_dask.config import load_config
from openclaw_dask.diagnostics.analysis import _busy_union, _makespan, analyze
from openclaw_dask.diagnostics.calibrate import expected_kinds, judge
from openclaw_dask.diagnostics.collect import RunRecord, TaskRecord, WorkerRecord, _stream_tasks, layouts_of
from openclaw_dask.diagnostics.fixes import FixedConfig, apply_overrides, write_fixed
from openclaw_dask.diagnostics.profile import profile
from openclaw_dask.errors import ConfigError

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
    assert "rechunk" in skew.fix and skew.overrides == {}
    assert "stragglers" not in report.kinds()  # a big chunk being slow is skew, not a straggler


def test_planted_straggler_is_named():
    report = run_profile(workers=2, size="64MiB", task_chunk_size="8MiB", straggler="1s")
    (slow,) = [v for v in report.verdicts if v.kind == "stragglers"]
    assert slow.evidence["group"] == "openclaw-straggle"
    assert slow.evidence["tasks"][0]["key"] == "('openclaw-straggle', 4)"
    assert slow.evidence["tasks"][0]["seconds"] >= 1.0
    imbalance = [v for v in report.verdicts if v.kind == "load-imbalance"]
    assert all("stragglers first" in v.fix and v.overrides == {} for v in imbalance)
    assert slow.overrides == {}  # the fix is in the user's code


def test_tiny_chunks_are_overhead_bound_with_a_chunk_size_fix():
    report = run_profile(workers=2, size="16MiB", task_chunk_size="64KiB")
    (over,) = [v for v in report.verdicts if v.kind == "overhead-bound"]
    assert over.evidence["tasks"] > 256
    suggested = over.overrides["parallel.task_chunk_size"]
    assert suggested.endswith("MiB") and int(suggested[:-3]) >= 1
    assert f"parallel.task_chunk_size to {suggested}" in over.fix  # the prose names the same value


def _starved(report) -> bool:
    """Only a load-imbalance verdict, over workers that were given the same tasks and bytes: a lane ran slower, not
    longer (under xdist the other test process can hold a core for part of a run: 1.57x the mean once in CI)."""
    same = len(report.workers) > 1 and len({(w.tasks, w.bytes_computed) for w in report.workers}) == 1
    return same and [v.kind for v in report.verdicts] == ["load-imbalance"]


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_balanced_default_run_gets_no_verdict(backend):
    for _ in range(3):  # a verdict from a starved lane is measured again; an unequal share of the work fails at once
        report = run_profile(backend=backend, workers=2, size="1GiB", repeat=3)
        if not _starved(report):
            break
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
    # 2 MiB blocks: each transfer's fixed cost weighs more against an add's; with 8 MiB a fast host's transfers
    # came under the verdict's 25% of compute time (a CI run's two workers: 0.069 s and 0.186 s busy, 67 MB in)
    with openclaw_dask.session(backend="process", workers=2, task_chunk_size="2MiB") as s:
        result = profile(s, script)
    assert result.exit_code == 0
    report = result.report  # what the verdict weighs, shown if it is missing (it once was, in a CI run)
    weighed = {"workers": [(w.tasks, w.busy_s, w.bytes_in) for w in report.workers], "groups": report.groups,
               "verdicts": [v.summary for v in report.verdicts]}
    assert "transfer-bound" in report.kinds(), weighed
    (transfer,) = [v for v in result.report.verdicts if v.kind == "transfer-bound"]
    assert transfer.overrides == {"parallel.backend": "thread"}
    assert sum(w.bytes_in for w in result.report.workers) >= 64 * MiB


def _kind(report, kind):
    return [v for v in report.verdicts if v.kind == kind]


def _record(**workers):
    record = RunRecord(backend="process", start=0.0, stop=1.0)
    for name, (peak, limit, spilled) in workers.items():
        record.workers[name] = WorkerRecord(name, 1, limit, peak, 0, 0, spilled)
        record.tasks.append(TaskRecord("('x', 0)", "x", name, 1, 0.0, 0.5, MiB))
    return record


def _streamed(*startstops):
    return [{"key": f"('x', {i})", "worker": "w", "startstops": [{"action": "compute", "start": a, "stop": b}]}
            for i, (a, b) in enumerate(startstops)]


def test_a_streamed_task_the_clock_offset_puts_outside_the_block_keeps_its_duration():
    """The scheduler shifts a worker's times by its estimated clock offset, ms off on a new cluster: the last short
    task of a block seemed to start after it ended, and the profile dropped it (1 run in 3 of a one-task compute)."""
    record = RunRecord(backend="process", start=10.0, stop=11.0)
    tasks = list(_stream_tasks(_streamed((11.002, 11.003), (9.5, 10.5), (10.2, 10.3), (8.0, 9.0), (5.0, 15.0)), record, {}))
    spans = [(round(t.start, 6), round(t.stop, 6)) for t in tasks]
    assert spans == [(10.999, 11.0), (10.0, 10.5), (10.2, 10.3), (10.0, 11.0), (10.0, 11.0)]


def test_tasks_run_in_the_client_are_not_time_outside_tasks():
    record = RunRecord(backend="process", start=0.0, stop=1.0, task_overhead_s=0.0)
    record.workers["w"] = WorkerRecord("w", 1, 1024 * MiB, MiB, 0, 0, 0)
    record.tasks.append(TaskRecord("('x', 0)", "x", "w", 1, 0.9, 1.0, MiB))
    assert _kind(analyze(record), "outside-tasks")  # 0.9 s before the only task
    record.ran_here["inc"] = (1000, 0.85)
    assert not _kind(analyze(record), "outside-tasks") and analyze(record).here_line() == "1,000 'inc' in 850.00 ms"


def test_memory_pressure_from_peak_or_spill():
    report = analyze(_record(a=(900 * MiB, 1000 * MiB, 0), b=(100 * MiB, 1000 * MiB, 0), c=(100 * MiB, 1000 * MiB, 5 * MiB)))
    named = sorted(v.evidence["worker"] for v in report.verdicts if v.kind == "memory-pressure")
    assert named == ["a", "c"]
    assert all("cluster.memory_limit" in v.fix and v.overrides == {} for v in _kind(report, "memory-pressure"))  # chunk size unknown


def test_memory_pressure_halves_chunks_only_when_they_fill_memory():
    record = _record(a=(900 * MiB, 1000 * MiB, 0))
    (big,) = _kind(analyze(record, chunk_hint=64 * MiB), "memory-pressure")  # 2 x 64 MiB in flight: a real share of 1000 MiB
    assert big.overrides == {"parallel.task_chunk_size": "32MiB"} and "to 32MiB" in big.fix
    (small,) = _kind(analyze(record, chunk_hint=MiB), "memory-pressure")  # 2 MiB in flight cannot be what fills it
    assert small.overrides == {}


@pytest.mark.parametrize(("hosts", "in_process", "overrides"), [
    (("127.0.0.1", "127.0.0.1"), False, {"parallel.backend": "thread"}),  # local worker processes: threads can share
    (("10.255.0.1", "10.255.0.2"), False, {}),  # other hosts: no one process can hold them
    (("127.0.0.1", "127.0.0.1"), True, {}),  # already one process
])
def test_transfer_fix_is_threads_only_for_worker_processes_on_this_machine(hosts, in_process, overrides):
    record = RunRecord(backend="any", start=0.0, stop=1.0, in_process=in_process)
    for i, host in enumerate(hosts):
        address = f"tcp://{host}:{4000 + i}"
        record.workers[address] = WorkerRecord(address, 1, 2**34, MiB, 8 * MiB, 8 * MiB, 0)
        record.tasks.append(TaskRecord(f"('x', {i})", "x", address, 1, 0.0, 0.5, MiB, transfer_s=0.5))
    (transfer,) = [v for v in analyze(record).verdicts if v.kind == "transfer-bound"]
    assert transfer.overrides == overrides
    assert ("parallel.backend to thread" in transfer.fix) == bool(overrides)


def test_imbalance_without_a_cause_asks_for_about_ten_chunks_per_lane():
    record = RunRecord(backend="process", start=0.0, stop=4.0)
    for name in ("a", "b"):
        record.workers[name] = WorkerRecord(name, 1, 2**34, MiB, 0, 0, 0)
    for i in range(5):  # 5 chunks of 64 MiB, 1 s each: 4 on worker a, one on b
        worker, start = ("a", float(i)) if i < 4 else ("b", 0.0)
        record.tasks.append(TaskRecord(f"('x', {i})", "x", worker, 1, start, start + 1.0, 64 * MiB))
    (imbalance,) = analyze(record, chunk_hint=64 * MiB).verdicts
    assert imbalance.kind == "load-imbalance"
    assert imbalance.overrides == {"parallel.task_chunk_size": "16MiB"}  # 320 MiB / (2 lanes x 10)
    assert "lower parallel.task_chunk_size to 16MiB" in imbalance.fix
    (unknown,) = [v for v in analyze(record).verdicts if v.kind == "load-imbalance"]
    assert unknown.overrides == {}  # a script's chunk size is not known: prose only


def test_cli_profile_json_and_html_on_planted_skew(tmp_path):
    html = tmp_path / "p.html"
    r = openclaw("profile", "array-sum", "--html", str(html), "--json", "--size", "64MiB",
                 "--set", "workload.skew=10", "--set", "parallel.task_chunk_size=4MiB", "--set", "workload.repeat=1", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["workload"]["ok"] is True
    kinds = [v["kind"] for v in out["profile"]["verdicts"]]
    assert "data-skew" in kinds
    assert all(isinstance(v["overrides"], dict) for v in out["profile"]["verdicts"])
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


def test_profile_result_shows_its_plots_inline_in_a_notebook():
    with openclaw_dask.session(workers=2) as s:
        result = profile(s, "array-sum")
    inline = result._repr_html_()
    assert inline.startswith("<iframe srcdoc=") and "Bokeh" in inline and "cdn.bokeh.org" not in inline
    if result.report.verdicts:
        assert all(v.kind in inline for v in result.report.verdicts)
    else:
        assert "no problems found" in inline


def test_collector_cleans_up_when_the_block_raises():
    from openclaw_dask.diagnostics.collect import collect

    def plugins(dask_scheduler):
        return set(dask_scheduler.plugins)

    with openclaw_dask.session(workers=1, engine="distributed") as s:
        before = s.client.run_on_scheduler(plugins)
        with pytest.raises(ZeroDivisionError), collect(s):
            s.compute(s.array((1000,), fill="ones").sum())
            1 / 0  # noqa: B018
        assert s.client.run_on_scheduler(plugins) == before
        assert dask.config.get("array_optimize", None) is None


def test_an_interrupt_while_the_collector_starts_stays_an_interrupt(monkeypatch):
    # Seen in CI: Ctrl-C landed while the layout probe was being set up, before the task stream existed; undoing
    # the stream then raised "Could not find plugin 'task-stream'", and the CLI exited 1 with a traceback, not 130.
    from openclaw_dask.diagnostics import collect as collect_module

    @contextlib.contextmanager
    def interrupted(record, client):
        raise KeyboardInterrupt
        yield

    monkeypatch.setattr(collect_module, "_probe_layouts", interrupted)
    with openclaw_dask.session(workers=1, engine="distributed") as s:
        before = s.client.run_on_scheduler(lambda dask_scheduler: set(dask_scheduler.plugins))
        with pytest.raises(KeyboardInterrupt), collect_module.collect(s):
            pass
        assert s.client.run_on_scheduler(lambda dask_scheduler: set(dask_scheduler.plugins)) == before


def test_collector_leaves_the_scheduler_as_it_found_it():
    from openclaw_dask.diagnostics.collect import collect

    def plugins(dask_scheduler):
        return set(dask_scheduler.plugins)

    with openclaw_dask.session(workers=1, engine="distributed") as s:
        before = s.client.run_on_scheduler(plugins)
        x = s.persist(s.array((1000,), fill="ones"))
        with collect(s) as record:
            assert dask.config.get("array_optimize") is not None  # the layout probe
            assert s.compute(x.sum()) == 1000
        assert record.tasks and record.layouts and record.graphs >= 1
        assert s.client.run_on_scheduler(plugins) == before  # the task-stream and input plugins are gone again
        assert dask.config.get("array_optimize", None) is None


def test_cli_apply_fix_on_planted_tiny_chunks_removes_the_verdict(tmp_path):
    # 16 MiB in 64 KiB chunks: 256 chunks, ~1,000 tasks of a fraction of the 0.8 ms each costs to schedule
    r = openclaw("profile", "--size", "16MiB", "--set", "parallel.task_chunk_size=64KiB",
                 "--json", "--apply-fix", "fixed.yaml", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    verdicts = out["profile"]["verdicts"]
    assert verdicts and all("overrides" in v for v in verdicts)
    (over,) = [v for v in verdicts if v["kind"] == "overhead-bound"]
    fix = over["overrides"]["parallel.task_chunk_size"]
    assert parse_bytes(fix) > 64 * 2**10
    changes = {c["key"]: c for c in out["apply_fix"]["changes"]}
    assert changes["parallel.task_chunk_size"] == {"key": "parallel.task_chunk_size", "value": fix, "before": "64KiB", "reason": "overhead-bound"}
    assert changes["workload.size"]["reason"] == "--set"  # --size was part of the run described
    text = (tmp_path / "fixed.yaml").read_text()
    assert f"  task_chunk_size: {fix}\n" in text and "# Every key below is shown with its default" in text
    r = CliRunner().invoke(main, ["config", "validate", "fixed.yaml"])
    assert r.exit_code == 0 and "fixed.yaml: valid" in r.stdout, r.output
    r = CliRunner().invoke(main, ["profile", "--config", "fixed.yaml", "--json"])  # the same size and repeat, from the file
    assert r.exit_code == 0, r.output
    again = json.loads(r.stdout)
    assert again["workload"]["size_bytes"] == 16 * 2**20 and again["workload"]["chunk_bytes"] == parse_bytes(fix)
    assert "overhead-bound" not in [v["kind"] for v in again["profile"]["verdicts"]]


def test_cli_apply_fix_keeps_the_users_file_and_says_what_changed(tmp_path):
    conf = tmp_path / "mine.yaml"
    conf.write_text("# my settings\nparallel:\n  task_chunk_size: 64KiB  # planted\nworkload: {size: 4MiB, repeat: 1}\n")
    r = CliRunner().invoke(main, ["profile", "-c", str(conf), "--apply-fix", "fixed.yaml"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    line = next(x for x in r.stdout.splitlines() if "parallel.task_chunk_size" in x and "->" in x)
    assert line.strip().startswith("parallel.task_chunk_size: 64KiB -> ") and line.endswith("(fixes overhead-bound)")
    text = (tmp_path / "fixed.yaml").read_text()
    assert text.startswith("# my settings\nparallel:\n  task_chunk_size: ") and text.endswith("  # planted\nworkload: {size: 4MiB, repeat: 1}\n")
    assert conf.read_text().count("64KiB") == 1  # the input is left alone
    r = CliRunner().invoke(main, ["profile", "-c", str(conf), "--set", "parallel.task_chunk_size=auto", "--apply-fix", "same.yaml"])
    assert r.exit_code == 0 and "no verdict has a config fix" in r.stdout, r.output
    assert re.search(r"task_chunk_size: auto +# planted", (tmp_path / "same.yaml").read_text())  # the comment stays


def test_a_fix_says_what_the_runs_own_set_changed_the_file_from():
    """Notebook 02 printed `workload.repeat: 1 -> 1`: the before of a --set was the run's own value."""
    from openclaw_dask.diagnostics.fixes import fix_config

    run = {"workload.repeat": 1, "parallel.task_chunk_size": "64KiB"}
    config = load_config(None, run, env={})
    changes = {c.key: c for c in fix_config(config, run, []).changes}
    assert (changes["workload.repeat"].before, changes["workload.repeat"].value) == (3, 1)
    assert changes["parallel.task_chunk_size"].before == "auto"


def test_a_round_trip_changes_only_the_keys_it_means_to():
    """Every null once came back as an empty value: 8 unneeded diff lines in the packaged defaults."""
    import difflib

    from openclaw_dask.config import default_config_text

    text = default_config_text()
    assert "null" in text
    out = apply_overrides(text, {"parallel.task_chunk_size": "19MiB"})
    changed = [line for line in difflib.unified_diff(text.splitlines(), out.splitlines(), n=0, lineterm="")
               if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert len(changed) == 2 and all("task_chunk_size" in line for line in changed), changed


def test_apply_overrides_edits_in_place_and_adds_missing_keys(tmp_path):
    text = "# top\nparallel:\n  workers: 4  # four\n  # about the next key\n  backend: process\ncluster: {host: 127.0.0.1}\n"
    out = apply_overrides(text, {"workers": 2, "parallel.task_chunk_size": "19MiB", "cluster.memory_limit": "2GiB",
                                 "workload.size": "16MiB", "dask.array.chunk-size": "32MiB"})
    assert out.startswith("# top\nparallel:\n  workers: 2  # four\n  # about the next key\n  backend: process\n"
                          "  task_chunk_size: 19MiB\ncluster: {host: 127.0.0.1, memory_limit: 2GiB}\n")
    (tmp_path / "f.yaml").write_text(out)
    cfg = load_config(tmp_path / "f.yaml", env={})
    assert (cfg.parallel.workers, cfg.parallel.backend, cfg.workload.size) == (2, "process", 16 * 2**20)
    assert cfg.parallel.task_chunk_size.value == 19 * 2**20 and cfg.cluster.memory_limit == 2 * 2**30
    assert cfg.dask["array.chunk-size"] == "32MiB"
    with pytest.raises(ConfigError, match="unknown key parallel.bogus"):
        apply_overrides(text, {"parallel.bogus": 1})


def test_write_fixed_refuses_a_config_that_does_not_validate(tmp_path):
    bad = FixedConfig(apply_overrides("", {"parallel.workers": 0}), None)
    with pytest.raises(ConfigError, match=r"does not validate, so .*fixed.yaml was not written: .*fixed.yaml:2: parallel.workers"):
        write_fixed(bad, tmp_path / "fixed.yaml")
    assert list(tmp_path.iterdir()) == []  # no draft left behind either


# -- what users write: planted scripts (examples/planted), and the rules behind their verdicts --------

PLANTED = sorted((Path(__file__).resolve().parent.parent / "examples" / "planted").glob("*.py"))


# The embedded-array scripts plant outside-tasks only on worker processes; in one process their runs also show
# the client's own time allocating and hashing 128-256 MB, which varies from run to run (docs/profile.md).
# They are tested on the process backend below.
@pytest.mark.parametrize("script", [p for p in PLANTED if p.stem not in ("graph_embedded_array", "issue_example")],
                         ids=lambda p: p.stem)
def test_planted_script_gets_its_verdicts_and_no_false_ones(script):
    expected = expected_kinds(script, "thread")
    with openclaw_dask.session(backend="thread", workers=2) as s:
        result = profile(s, script)
    assert result.exit_code == 0
    judged = judge(expected, result.report.verdicts)
    assert not judged.missed and not judged.false, [v.summary for v in result.report.verdicts]


@pytest.mark.parametrize("name", ["issue_example", "graph_embedded_array"])
def test_planted_graph_data_is_measured_on_worker_processes(name):
    script = PLANTED[[p.stem for p in PLANTED].index(name)]
    with openclaw_dask.session(backend="process", workers=2) as s:
        result = profile(s, script)
    judged = judge(expected_kinds(script, "process"), result.report.verdicts)
    # outside-tasks itself was found in 2 of 3 warm runs (docs/profile.md): its rule is tested on records below
    assert judged.missed <= {"outside-tasks"} and not judged.false, [v.summary for v in result.report.verdicts]
    assert result.record.graph_bytes >= 100 * MiB and result.record.graphs >= 1
    assert all("client.scatter" in v.fix for v in _kind(result.report, "outside-tasks"))


def test_layouts_name_the_uneven_chunk_of_each_array_inputs_first():
    x = da.ones(1000, chunks=((400,) + (50,) * 12,))
    (first, *_) = layouts_of((x + 1).sum().__dask_graph__())
    assert first.name.startswith("ones") and first.itemsize == 8
    assert first.block_bytes().tolist() == [3200] + [400] * 12
    grid = layouts_of(da.ones((40, 30), chunks=(10, (20, 10))).__dask_graph__())[0]
    assert grid.block_bytes().shape == (4, 2) and grid.block_bytes()[0, 0] == 10 * 20 * 8


def test_expect_lines_and_what_counts_as_false(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("# expect: data-skew, outside-tasks on process\n")
    assert expected_kinds(script, "thread") == {"data-skew"}
    assert expected_kinds(script, "process") == {"data-skew", "outside-tasks"}
    script.write_text("print(1)\n")
    with pytest.raises(ValueError, match="# expect:"):
        expected_kinds(script, "thread")
    from openclaw_dask.diagnostics.analysis import Verdict

    effect = Verdict("load-imbalance", "", {}, "fix the stragglers first (see that verdict); then ...")
    judged = judge(frozenset({"stragglers"}), [Verdict("stragglers", "", {}, ""), effect, Verdict("overhead-bound", "", {}, "")])
    assert judged.found == {"stragglers"} and judged.false == ("overhead-bound",)


def test_makespan_and_busy_union_are_plain_arithmetic():
    assert _makespan([1.0, 0.5, 0.5, 0.5, 0.5], 2) == 1.5
    assert _makespan([0.2] * 10, 1) == pytest.approx(2.0)
    tasks = [TaskRecord("a", "g", "w", 0, s, e, 1) for s, e in [(0.0, 1.0), (0.5, 2.0), (3.0, 4.0)]]
    assert _busy_union(tasks) == (0.0, 4.0, 3.0)


def _lanes_record(durations_a, durations_b, stop):
    record = RunRecord(backend="process", start=0.0, stop=stop)
    for lane, durations in (("a", durations_a), ("b", durations_b)):
        record.workers[lane] = WorkerRecord(lane, 1, 2**34, MiB, 0, 0, 0)
        t = 0.0
        for i, d in enumerate(durations):
            record.tasks.append(TaskRecord(f"('x', '{lane}{i}')", "x", lane, 1, t, t + d, MiB, input_bytes=MiB))
            t += d
    return record


def test_a_straggler_is_named_when_it_costs_wall_time_even_with_balanced_lanes():
    # lane a: one 1 s task; lane b: ten 0.1 s tasks. Both lanes end at 1 s, yet at the median the run takes 0.6 s.
    report = analyze(_lanes_record([1.0], [0.1] * 10, 1.0))
    (slow,) = _kind(report, "stragglers")
    assert slow.evidence["cost_s"] == pytest.approx(0.4) and "costing the run about 400" in slow.summary
    assert not _kind(report, "load-imbalance")
    # a 0.4 s task early in a long run: the other lane absorbs most of its delay (0.15 s): no verdict
    assert not _kind(analyze(_lanes_record([0.4] + [0.1] * 14, [0.1] * 18, 1.8)), "stragglers")


def test_a_big_input_being_slow_is_skew_not_a_straggler():
    record = _lanes_record([0.1] * 8, [0.1] * 7, 1.0)
    record.tasks.append(TaskRecord("('x', 'big')", "x", "b", 1, 0.7, 2.3, 8, input_bytes=16 * MiB))  # writes 8 bytes, reads 16x
    record.stop = 2.3
    (skew,) = _kind(analyze(record), "data-skew")
    assert skew.evidence["measure"] == "read" and skew.evidence["chunks"][0]["key"] == "('x', 'big')"
    assert not _kind(analyze(record), "stragglers")


def test_a_straggler_running_beside_a_slow_big_chunk_is_still_named():
    # Seen in issue 13's example: block 5 sleeps 1.5 s on lane a while the 16x chunk takes 1.4 s on lane b.
    # As run, the stragglers cost nothing (the big chunk ends the run anyway); with the skew fixed they cost ~1.4 s.
    record = _lanes_record([0.1] * 4 + [1.5], [0.1] * 4, 1.9)
    record.tasks.append(TaskRecord("('x', 'big')", "x", "b", 1, 0.4, 1.8, 8, input_bytes=16 * MiB))
    report = analyze(record)
    assert _kind(report, "data-skew")
    (slow,) = _kind(report, "stragglers")
    assert slow.evidence["tasks"][0]["key"] == "('x', 'a4')" and slow.evidence["cost_s"] == pytest.approx(1.4)


@pytest.mark.parametrize(("graph_bytes", "graphs", "in_process", "fix"), [
    (200 * MiB, 1, False, "client.scatter"),  # data sent inside the graph
    (200 * MiB, 1, True, "pyinstrument"),  # ... costs nothing to send within one process
    (0, 8, False, "dask.compute(a, b, ...)"),  # the client's own work between computes
])
def test_time_outside_tasks_names_its_cause(graph_bytes, graphs, in_process, fix):
    record = RunRecord(backend="process", start=0.0, stop=4.0, in_process=in_process, graphs=graphs, graph_bytes=graph_bytes)
    record.workers["a"] = WorkerRecord("a", 1, 2**34, MiB, 0, 0, 0)
    first = 2.0 if graphs == 1 else 0.0  # one submission before the first task, or gaps between eight computes
    for i in range(8):
        start = first + (0.25 if graphs == 1 else 0.5) * i
        record.tasks.append(TaskRecord(f"('x', {i})", "x", "a", 1, start, start + 0.2, MiB))
    (outside,) = _kind(analyze(record), "outside-tasks")
    assert fix in outside.fix and outside.overrides == {}


def test_what_the_workload_sets_aside_and_the_tasks_run_for_it_are_left_out():
    record = RunRecord(backend="process", start=0.0, stop=4.0)
    record.workers["a"] = WorkerRecord("a", 1, 2**34, MiB, 0, 0, 0)
    record.tasks += [TaskRecord(f"('x', {i})", "x", "a", 1, 0.2 * i, 0.2 * i + 0.2, MiB) for i in range(8)]
    (outside,) = _kind(analyze(record), "outside-tasks")  # 2.4 s idle after the last task
    assert outside.evidence["idle_s"] == pytest.approx(2.4)
    record.aside.append(("checking the answer", 1.6, 4.0))
    record.tasks.append(TaskRecord("('finalize-x', 0)", "finalize-x", "a", 1, 2.0, 2.5, 64 * MiB))  # the check's own task
    assert not _kind(analyze(record), "outside-tasks")


def test_a_task_on_an_oversized_chunk_of_the_array_is_skew_even_when_fusion_hides_its_input():
    from openclaw_dask.diagnostics.collect import ChunkLayout

    record = _lanes_record([0.1] * 8, [0.1] * 7, 1.0)
    for i, t in enumerate(record.tasks):  # blocks 1..15 of a 16-block array; block 0 is 8x the others
        record.tasks[i] = TaskRecord(f"('mean_chunk-1', {i + 1})", "mean_chunk", t.worker, 1, t.start, t.stop, 8, input_bytes=500)
    record.tasks.append(TaskRecord("('mean_chunk-1', 0)", "mean_chunk", "b", 1, 0.7, 1.5, 8, input_bytes=500))
    record.stop = 1.5
    assert _kind(analyze(record), "stragglers")  # no layout: it looks like a straggler
    record.layouts.append(ChunkLayout("ones_like-1", ((4_000_000,) + (500_000,) * 15,), 8))
    report = analyze(record)
    assert _kind(report, "data-skew") and not _kind(report, "stragglers")


@pytest.mark.parametrize(("wall", "bound"), [(0.3, False), (0.45, True)])
def test_scheduling_is_charged_no_more_than_the_time_the_threads_stood_idle(wall, bound):
    """The engine's figure (2 ms here) is one more reduction chunk's cost; map_overlap's slicing tasks cost less, and
    its planted balanced run was told it was overhead-bound (docs/profile.md). 100 tasks of 5.5 ms on 2 threads:
    2 x 0.3 s of thread time holds 0.05 s outside tasks, 2 x 0.45 s holds 0.35 s."""
    record = RunRecord(backend="thread", start=0.0, stop=wall, task_overhead_s=0.002)
    record.workers["local"] = WorkerRecord("local", 2, 0, 0, 0, 0, 0)
    record.tasks += [TaskRecord(f"('x', {i})", "x", "local", i % 2, i // 2 * 5.8e-3, i // 2 * 5.8e-3 + 5.5e-3, 2**20)
                     for i in range(100)]
    over = _kind(analyze(record, chunk_hint=2**20), "overhead-bound")
    assert bool(over) is bound
    if bound:  # 0.2 s estimated, under the 0.35 s idle: charged in full
        assert over[0].evidence["overhead_s"] == 0.2 and "~2 ms a task" in over[0].summary


def test_tasks_run_straight_on_their_workers_are_charged_no_scheduling():
    """A stencil's ~140 slicing tasks on worker processes ran in direct runs (cluster/direct.py): one round trip per
    worker a compute, not ~2.7 ms a task, so they are no sign of an overhead-bound run; scheduled, the same are."""
    import dataclasses

    record = RunRecord(backend="process", start=0.0, stop=1.0, task_overhead_s=0.0027)
    record.workers["w"] = WorkerRecord("w", 2, 0, 0, 0, 0, 0)
    record.tasks += [TaskRecord(f"('x', {i})", "x", "w", i % 2, i * 2e-3, i * 2e-3 + 1e-5, 2**20, scheduled=False)
                     for i in range(140)]
    assert not _kind(analyze(record, chunk_hint=2**20), "overhead-bound")
    record.tasks[:] = [dataclasses.replace(t, scheduled=True) for t in record.tasks]
    assert _kind(analyze(record, chunk_hint=2**20), "overhead-bound")


def test_an_overhead_bound_run_whose_chunks_cannot_grow_says_why_in_its_own_figures():
    """The smoke benchmark was told 'the chunks are as big as the threads allow' for chunks set to 1 MiB:
    the sentence now gives the share each thread gets and the chunk size, both from the run."""
    record = RunRecord(backend="thread", start=0.0, stop=1.0, task_overhead_s=0.002)
    record.workers["local"] = WorkerRecord("local", 2, 0, 0, 0, 0, 0)
    record.tasks += [TaskRecord(f"('x', {i})", "x", "local", i % 2, i * 1e-4, i * 1e-4 + 1e-4, 40 * 1024) for i in range(50)]
    (over,) = _kind(analyze(record, chunk_hint=1024 * 1024), "overhead-bound")
    assert over.overrides == {}
    assert over.fix.startswith("each of the 2 thread(s) gets about 1000KiB of x, so chunks of at least twice 1MiB would "
                               "leave a thread idle"), over.fix
