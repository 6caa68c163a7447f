"""openclaw tune: the grid, successive halving within a budget, the ranking, and --write."""

from __future__ import annotations

import json

import pytest

from openclaw_dask.cluster import load_for_backend as load_config
from openclaw_dask.diagnostics.tune import MIN_SAMPLES, _with_fixes, candidates, profiled_fixes, tune

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
    result = tune(cfg, "array-sum", budget_s=0, space=[{"parallel.task_chunk_size": "4MiB"}])
    assert result.baseline.error is None and len(result.baseline.times) >= MIN_SAMPLES


def test_a_spent_budget_stops_the_trials_but_still_confirms_the_leader():
    cfg = load_config(None, SMALL, override_label="--set")
    space = [{"parallel.task_chunk_size": f"{2 ** i}MiB"} for i in range(6)]
    result = tune(cfg, "array-sum", budget_s=0, space=space)
    assert len(result.baseline.times) >= MIN_SAMPLES
    assert sum(1 for t in result.trials if t.times) <= 2  # nothing but the confirmations ran


@pytest.mark.slow
def test_cli_writes_a_valid_config_that_differs_only_in_tuned_keys(tmp_path):
    base = tmp_path / "base.yaml"
    base.write_text("# my settings\nworkload:\n  size: 8MiB\n  repeat: 2\n")
    out = tmp_path / "tuned.yaml"
    r = invoke("tune", "array-sum", "--config", str(base), "--budget", "20s", "--write", str(out), "--json")
    assert r.exit_code == 0, r.output
    result = json.loads(r.stdout)
    tuned = load_config(out)
    assert out.read_text().startswith("# tuned by `openclaw tune array-sum` on ") and "# my settings" in out.read_text()
    changed = {k for k, src in tuned.sources.items() if src != "default"} - {"workload.size", "workload.repeat"}
    assert changed == set(result["winner"]["overrides"])


def test_a_bad_budget_is_a_usage_error():
    assert_one_line_error(invoke("tune", "--budget", "soon"), 2, "--budget soon: not a duration")
