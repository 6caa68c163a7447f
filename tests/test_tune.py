"""openclaw tune: the grid, successive halving within a budget, the ranking, and --write."""

from __future__ import annotations

import json
import random
import statistics

import pytest

from openclaw_dask.cluster import load_for_backend as load_config
from openclaw_dask.diagnostics import tune as tune_module
from openclaw_dask.diagnostics.stats import compare_runs
from openclaw_dask.diagnostics.tune import CONFIRM_RUNS, MIN_SAMPLES, _with_fixes, candidates, profiled_fixes, tune

from .test_cli import assert_one_line_error, invoke

SMALL = {"workload.size": 8 * 2**20}


def test_candidates_cover_both_backends_shapes_and_chunk_sizes_without_the_current_config():
    cfg = load_config(None)
    grid = candidates(cfg, cores=8)
    assert {g.get("parallel.backend", cfg.parallel.backend) for g in grid} == {"thread", "process"}
    assert {"parallel.backend": "process", "parallel.workers": 4, "parallel.omp_threads": 2, "parallel.task_chunk_size": "16MiB"} in grid
    assert any(g.get("parallel.hybrid") is True for g in grid)
    assert len(grid) == 5 * 3 - 1  # five shapes x three chunk sizes, less the current config (thread, auto, auto)
    assert len(candidates(cfg, cores=1)) == 2 * 3 - 1
    assert {"parallel.task_chunk_size": "16MiB"} in grid  # only what differs from the current config


def test_the_profiler_s_fixes_seed_the_search():
    cfg = load_config(None, {"workload.size": 16 * 2**20, "parallel.task_chunk_size": "64KiB"}, override_label="--set")
    said = []
    fixes = profiled_fixes(cfg, "array-sum", say=said.append)  # 256 tasks of 64 KiB: overhead-bound
    assert set(fixes) == {"parallel.task_chunk_size"} and fixes["parallel.task_chunk_size"].endswith("MiB")
    assert any("the profiler suggests task_chunk_size=" in m for m in said)
    grid = [{"parallel.backend": "process"}, {"parallel.task_chunk_size": "16MiB"}]
    seeded = _with_fixes(grid, fixes)
    assert seeded[0] == fixes and {"parallel.backend": "process", **fixes} in seeded and seeded[-2:] == grid
    assert _with_fixes(grid, {}) == grid


def test_successive_halving_ranks_by_median_and_confirms_the_winner():
    cfg = load_config(None, SMALL, override_label="--set")
    space = [{"parallel.task_chunk_size": "256KiB"}, {"parallel.task_chunk_size": "4MiB"}, {"parallel.enabled": False}]
    said = []
    result = tune(cfg, "array-sum", budget_s=60, space=space, say=said.append)
    assert said and all(t.times for t in result.trials)
    assert len(result.winner.times) >= MIN_SAMPLES and len(result.baseline.times) >= MIN_SAMPLES
    ranked = [t for t in result.trials if len(t.times) >= MIN_SAMPLES]
    assert [t.median_s for t in ranked] == sorted(t.median_s for t in ranked)
    assert "median" in result.why()


def test_the_caller_s_settings_hold_in_every_trial_the_current_config_too():
    cfg = load_config(None, {**SMALL, "parallel.task_chunk_size": "1MiB"}, override_label="--set")
    result = tune(cfg, "array-sum", budget_s=30, space=[{"parallel.task_chunk_size": "4MiB"}])
    assert result.baseline.error is None and len(result.baseline.times) >= MIN_SAMPLES


class Machine:
    """A simulated machine for tune: a clock, and each configuration's run times (seconds) drawn around its mean.

    ``measure`` replaces tune's: it advances the clock by a session's start and the runs, and records the calls.
    """

    def __init__(self, means: dict[str, float], *, start_s: float = 0.5, noise: float = 0.05, seed: int = 0):
        self.means, self.start_s, self.noise, self.rng = means, start_s, noise, random.Random(seed)
        self.now, self.calls = 0.0, []

    def perf_counter(self) -> float:
        return self.now

    def measure(self, config, target, overrides, samples, script_args=()):
        label = tune_module._label(overrides)
        times = [self.means[label] * (1 + self.rng.uniform(-self.noise, self.noise)) for _ in range(samples)]
        self.now += self.start_s + sum(times)
        self.calls.append((label, samples))
        return times


def _simulated(monkeypatch, machine: Machine, space, budget_s: float = 60):
    monkeypatch.setattr(tune_module, "measure", machine.measure)
    monkeypatch.setattr(tune_module, "time", machine)
    return tune(load_config(None), "array-sum", budget_s=budget_s, space=space)


CHUNKS = [{"parallel.task_chunk_size": size} for size in ("4MiB", "16MiB", "64MiB", "128MiB")]


def test_a_config_better_with_confidence_is_advised_with_its_p(monkeypatch):
    means = {"current config": 0.040, "task_chunk_size=4MiB": 0.080, "task_chunk_size=16MiB": 0.045,
             "task_chunk_size=64MiB": 0.030, "task_chunk_size=128MiB": 0.010}
    result = _simulated(monkeypatch, Machine(means), CHUNKS)
    best, base = result.winner, result.baseline
    assert result.recommended and best.overrides == {"parallel.task_chunk_size": "128MiB"}
    assert len(best.confirm) == CONFIRM_RUNS and len(base.confirm) == 2  # the leader's runs are fresh, not those that chose it
    c = compare_runs(best.confirm, base.times + base.confirm)  # the current config's search runs are unbiased: they count
    assert result.comparison == c and c.verdict == "faster" and c.runs == (5, 7) and c.p == pytest.approx(2 / 792)
    # the sentence is made of these figures
    assert result.why() == (f"task_chunk_size=128MiB is {1 / c.ratio:.2f}x faster than the current config "
                            f"(median {statistics.median(best.confirm) * 1e3:.1f} ms on 5 runs afresh vs "
                            f"{statistics.median(base.times + base.confirm) * 1e3:.1f} ms; p = 0.0025, Mann-Whitney U on 5 vs 7 runs)")
    assert result.to_dict()["test"]["p_value"] == c.p and result.to_dict()["recommended"] is True


def test_confirming_runs_the_leader_afresh_then_the_current_config_again(monkeypatch):
    means = {"current config": 0.040, **{tune_module._label(o): 0.02 * (i + 1) for i, o in enumerate(CHUNKS)}}
    machine = Machine(means)
    _simulated(monkeypatch, machine, CHUNKS)
    assert machine.calls[-2:] == [("task_chunk_size=4MiB", CONFIRM_RUNS), ("current config", 2)]


def test_a_noise_level_leader_is_rarely_advised(monkeypatch):
    # every configuration the same: whichever leads the search leads by noise alone (+-20% per run)
    means = {"current config": 0.040, **{tune_module._label(o): 0.040 for o in CHUNKS}}
    results = [_simulated(monkeypatch, Machine(means, noise=0.2, seed=seed), CHUNKS) for seed in range(100)]
    advised = [r for r in results if r.recommended]
    assert len(advised) <= 8  # a false "faster" at p < 0.05, two-sided, is about 1 in 40 (the search leader differs ~3 in 4)
    assert all(r.comparison is not None and r.comparison.p is not None and r.comparison.p < 0.05 for r in advised)
    tested = [r for r in results if not r.recommended and r.comparison is not None]
    assert tested
    for r in tested:  # the sentence shows the test's own figures
        c, why = r.comparison, r.why()
        assert r.winner is r.baseline and why.startswith("the current config is as good as any tried")
        assert f"took {c.ratio:.2f}x its time" in why and (f"p = {c.p:.2g}" in why or "p < 0.001" in why)
        assert "a change is advised only at p < 0.05 and at least 5% faster" in why


def test_the_search_stops_in_time_for_the_test_and_all_fits_the_budget(monkeypatch):
    means = {"current config": 1.0, **{tune_module._label(o): 0.1 * (i + 1) for i, o in enumerate(CHUNKS)}}
    result = _simulated(monkeypatch, Machine(means, start_s=2.0), CHUNKS, budget_s=30)
    assert result.spent_s <= 30 and result.recommended and len(result.winner.confirm) == CONFIRM_RUNS
    unhurried = _simulated(monkeypatch, Machine(means, start_s=2.0), CHUNKS, budget_s=300)
    assert sum(len(t.times) for t in result.trials) < sum(len(t.times) for t in unhurried.trials)  # the search gave way


def test_a_budget_too_small_to_decide_says_so_and_spends_nothing_on_the_test(monkeypatch):
    means = {"current config": 1.0, "task_chunk_size=4MiB": 0.5}
    machine = Machine(means, noise=0.0)
    result = _simulated(monkeypatch, machine, CHUNKS[:1], budget_s=8)
    assert machine.calls == [("current config", 1), ("task_chunk_size=4MiB", 1)]  # 5 fresh runs a side would not fit
    assert not result.recommended and result.comparison is not None and result.comparison.verdict == "undecided"
    assert result.why().startswith("the current config is kept: the budget left too few fresh runs to test the best of "
                                   "the 2 tried, task_chunk_size=4MiB (median 500.0 ms vs 1000.0 ms in the search)")
    assert result.why().endswith("(p < 0.05 needs 4 a side, 5 to allow one noisy run); raise --budget")


def test_a_spent_budget_runs_nothing_and_says_so(monkeypatch):
    machine = Machine({"current config": 1.0})
    result = _simulated(monkeypatch, machine, CHUNKS, budget_s=0)
    assert machine.calls == [] and not result.recommended
    assert result.why() == "no configuration ran: the budget ran out"


def test_cli_write_writes_nothing_when_no_config_is_better_and_says_why(monkeypatch, tmp_path):
    machine = Machine({"current config": 0.040, **{tune_module._label(o): 0.041 for o in CHUNKS}}, noise=0.01)
    monkeypatch.setattr(tune_module, "measure", machine.measure)
    monkeypatch.setattr(tune_module, "time", machine)
    monkeypatch.setattr(tune_module, "candidates", lambda config, cores: CHUNKS)
    monkeypatch.setattr(tune_module, "profiled_fixes", lambda *a, **k: {})
    out = tmp_path / "t.yaml"
    r = invoke("tune", "array-sum", "--budget", "60s", "--write", str(out))
    assert r.exit_code == 0, r.output
    assert not out.exists()
    assert f"wrote nothing to {out}: no configuration tried is better than the current one with confidence" in r.stdout
    assert "the current config is as good as any tried" in r.stdout.replace("\n", " ")
    r = invoke("tune", "array-sum", "--budget", "60s", "--write", str(out), "--json")
    result = json.loads(r.stdout)
    assert result["written"] is None and result["recommended"] is False and not out.exists()


@pytest.mark.slow
def test_cli_writes_a_valid_config_that_differs_only_in_tuned_keys(tmp_path):
    base = tmp_path / "base.yaml"  # 256 tasks of 128 KiB: overhead-bound, a fix the test can find with confidence
    base.write_text("# my settings\nworkload:\n  size: 32MiB\n  repeat: 2\nparallel:\n  task_chunk_size: 128KiB\n")
    out = tmp_path / "tuned.yaml"
    r = invoke("tune", "array-sum", "--config", str(base), "--budget", "40s", "--write", str(out), "--json")
    assert r.exit_code == 0, r.output
    result = json.loads(r.stdout)
    assert result["recommended"] and result["test"]["verdict"] == "faster" and result["test"]["p_value"] < 0.05
    tuned = load_config(out)
    assert out.read_text().startswith("# tuned by `openclaw tune array-sum` on ") and "# my settings" in out.read_text()
    changed = {k for k, src in tuned.sources.items() if src != "default"} - {"workload.size", "workload.repeat"} \
        - ({"parallel.task_chunk_size"} - set(result["winner"]["overrides"]))
    assert changed == set(result["winner"]["overrides"])


def test_a_bad_budget_is_a_usage_error():
    assert_one_line_error(invoke("tune", "--budget", "soon"), 2, "--budget soon: not a duration")


def test_every_trial_reloads_the_caller_s_set_values_typed_and_whole():
    """tune passed each --set value on as its source label's text: '1' for workload.repeat failed every
    trial (ConfigError: must be an integer, got '1'), and a value over 40 characters came back cut."""
    from openclaw_dask.cli._app import load
    from openclaw_dask.diagnostics.tune import _run_overrides
    from openclaw_dask.loading import load_checked

    long = [f"mypackage.module_{i}" for i in range(4)]
    sets = ("workload.repeat=1", "parallel.timeout=10s", "parallel.task_chunk_size=1MiB", f"cluster.preload={long}")
    cfg = load(None, sets)
    again = load_checked(None, _run_overrides(cfg), override_label="tune")
    for key in ("workload.repeat", "parallel.timeout", "parallel.task_chunk_size", "cluster.preload"):
        assert again.get(key) == cfg.get(key), key
