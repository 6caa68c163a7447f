"""``openclaw config show`` says what each ``auto`` comes to on this machine, and it is what a session then runs with."""

from __future__ import annotations

import json

from dask.system import CPU_COUNT
from dask.utils import format_bytes

import openclaw_dask
from openclaw_dask.cluster import load_for_backend as load_config
from openclaw_dask.diagnostics.resolved import resolved_autos

from .test_cli import invoke


def test_thread_autos_are_what_a_thread_session_runs_with():
    autos = resolved_autos(load_config(None))
    assert autos["parallel.workers"].startswith(f"{CPU_COUNT}: task threads")
    assert autos["parallel.engine"].startswith("dask threaded scheduler")
    assert "cluster.max_spill" not in autos and "cluster.memory_limit" not in autos  # no cluster, no spilling
    with openclaw_dask.session() as s:
        plan = s.chunk_plan((2**30 // 8,))
    assert f"for workload.size 1.00 GiB: {plan.n_chunks} x {format_bytes(plan.chunk_bytes)}, {plan.reason}" in \
        autos["parallel.task_chunk_size"]


def test_process_autos_are_what_its_workers_get():
    config = load_config(None, {"parallel.backend": "process", "parallel.workers": 1})
    autos = resolved_autos(config)
    assert "parallel.workers" not in autos  # set, so nothing to resolve
    with openclaw_dask.session(config) as s:
        limits = {w["memory_limit"] for w in s.client.scheduler_info()["workers"].values()}
        spill = s.client.run(lambda: __import__("dask").config.get("distributed.worker.memory.max-spill"))
    assert autos["cluster.memory_limit"].startswith(f"{format_bytes(limits.pop())} a worker")
    assert autos["cluster.max_spill"].split(" a worker")[0] == format_bytes(next(iter(spill.values())))
    assert autos["parallel.communication"] == "tcp"


def test_config_show_prints_them_and_json_carries_them():
    r = invoke("config", "show", "--json", "--set", "parallel.backend=process")
    shown = json.loads(r.stdout)
    assert shown["parallel.workers"]["value"] == "auto" and shown["parallel.workers"]["resolved"].endswith(
        f"{CPU_COUNT} cores / omp_threads 1")
    assert "resolved" not in shown["parallel.backend"]
    r = invoke("config", "show", "--set", "cluster.dashboard=false", env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "auto (= dask threaded scheduler" in r.stdout and "cluster.dashboard" in r.stdout
    assert "false (=" not in r.stdout
