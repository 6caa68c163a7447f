"""The dataflow workloads: correct under each strategy, through openclaw run and profile."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from openclaw_dask import ConfigError, Session, load_config
from openclaw_dask.diagnostics.profile import profile
from openclaw_dask.workloads import WORKLOADS
from openclaw_dask.workloads.streams import _free_disk_check
from openclaw_dask.workloads.suite import KERNELS

from .test_cli import invoke

SMALL = str(8 * 2**20)


@pytest.mark.parametrize(("name", "strategy"), [("linear-model", "data"), ("model-parallel-matmul", "model")])
def test_run_strategy_workloads_pass_their_checks(name, strategy):
    r = invoke("run", name, "--size", SMALL, "--json", "--set", f"parallel.strategy={strategy}")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["ok"] and out["strategy"] == strategy and out["workload"] == name


def test_run_pipeline_streams_and_prints_per_stage_timings():
    r = invoke("run", "pipeline", "--size", SMALL, "--set", "parallel.batch_size=8")
    assert r.exit_code == 0, r.output
    for needle in ("correct", "batches of 8", "at most", "stage load", "stage preprocess", "stage compute", "stage reduce"):
        assert needle in r.stdout


def test_run_io_pipeline_with_async_io():
    r = invoke("run", "io-pipeline", "--size", SMALL, "--json", "--set", "parallel.async_io=true")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["ok"] and out["rows"]["async_io"].startswith("reads on I/O threads")


def _answers(strategy, name, size=4 * 2**20):
    with Session(load_config(None, {"parallel.strategy": strategy})).start() as s:
        prepared = KERNELS[name](s, size)
        grids = [tuple(len(c) for c in x.chunks) for x in prepared.inputs]
        return np.asarray(prepared.execute(s)), grids


@pytest.mark.parametrize("name", ["linear-model", "model-parallel-matmul"])
def test_data_and_model_layouts_differ_and_results_agree(name):
    data, data_grids = _answers("data", name)
    model, model_grids = _answers("model", name)
    assert data_grids != model_grids
    assert data_grids[0][0] >= 2  # data: samples split
    assert max(g[-1] for g in model_grids) >= 2  # model: a parameter axis split
    np.testing.assert_allclose(model, data, rtol=1e-10)


def test_the_profiler_shows_each_strategy_s_pieces():
    groups = {}
    for strategy in ("data", "model"):
        conf = {"parallel.strategy": strategy, "workload.repeat": 1, "workload.size": 4 * 2**20}
        with Session(load_config(None, conf)).start() as s:
            r = profile(s, "model-parallel-matmul")
        assert r.exit_code == 0
        groups[strategy] = {g.group for g in r.report.groups}
    # model: each slice of hidden units makes a whole partial output, and they are summed; data sums nothing
    assert any("sum" in g for g in groups["model"]) and not any("sum" in g for g in groups["data"])


def test_profile_sees_the_pipeline_stages():
    with Session(load_config(None, {"workload.size": 2**20, "workload.repeat": 1})).start() as s:
        r = profile(s, "pipeline")
    assert r.exit_code == 0
    # each stage a task, or (stages that run for less than a task costs) one task named after all of them
    assert {"load", "preprocess", "compute", "reduce"} <= {name for g in r.report.groups for name in g.group.split("+")}


def test_io_pipeline_refuses_to_fill_the_disk(tmp_path):
    with pytest.raises(ConfigError, match="io-pipeline would write .* free; lower --size"):
        _free_disk_check(str(tmp_path), 2**62)


def test_every_suite_kernel_is_a_workload():
    assert set(KERNELS) <= set(WORKLOADS)


@pytest.mark.parametrize("path", sorted((Path(__file__).parent.parent / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_example_configs_are_valid(path):
    assert load_config(path).path == path
