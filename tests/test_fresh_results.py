"""Every compute computes: the same expression computed again runs its tasks again, on every engine.

A distributed client used to hand back a finished future of the previous identical compute
(its release was still queued on the client's loop): 8-12 ms instead of ~100 ms, and
benchmark figures 7x the memory bandwidth. Tasks are counted here, not timed.
"""

from __future__ import annotations

import contextlib
import logging

import dask
import distributed
import pytest

import openclaw_dask

REPEAT = 5


def _is_sum(key) -> bool:
    from dask.utils import key_split

    return key_split(key).startswith("sum")


def _sum_tasks(x) -> int:
    """Tasks of one compute of ``x.sum()`` (after dask's optimisation, as the session runs it)."""
    (optimized,) = dask.optimize(x.sum())
    return sum(map(_is_sum, optimized.__dask_graph__()))


def _executions(s, run) -> int:
    """Sum tasks run during ``run()``: the scheduler's task stream, the tasks sent straight to the workers
    (``cluster/direct.py``) and the combines run in the client (``cluster/tails.py``), or dask's callbacks locally."""
    if s.engine.distributed:
        from openclaw_dask.cluster import here

        ran_here: list[int] = []
        with _tasks_run(s.client) as tasks, here.watched(lambda ran: ran_here.extend(
                calls for name, (calls, _) in ran.items() if _is_sum(name))):
            run()
        return sum(_is_sum(task["key"]) for task in tasks) + sum(ran_here)
    from dask.callbacks import Callback

    ran = []
    with Callback(posttask=lambda key, result, dsk, state, worker_id: ran.append(key)):
        run()
    return sum(map(_is_sum, ran))


def _repeated(s, caplog) -> None:
    x = s.persist(s.array((2**20,), "float64", fill="arange", chunks=2**17))
    expected = (2**20 - 1) * 2**20 / 2
    per_compute = _sum_tasks(x)
    assert per_compute > 1
    with caplog.at_level(logging.WARNING, logger="distributed"):
        for how in (lambda: s.compute(x.sum()), lambda: x.sum().compute(), lambda: dask.compute(x.sum())[0]):
            results = []
            ran = _executions(s, lambda: results.extend(float(how()) for _ in range(REPEAT)))
            assert results == [expected] * REPEAT
            assert ran == REPEAT * per_compute, (ran, per_compute)
    noisy = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not noisy, noisy


@pytest.mark.parametrize("overrides", [
    {"enabled": False},
    {"backend": "thread", "workers": 2, "engine": "threads"},
    {"backend": "thread", "workers": 2, "engine": "distributed"},
    {"backend": "process", "workers": 2},
], ids=["sync", "threads", "distributed-in-process", "process"])
def test_the_same_expression_computed_five_times_runs_its_tasks_five_times(overrides, caplog):
    with openclaw_dask.session(**overrides) as s:
        _repeated(s, caplog)


def test_remote_computes_anew_too(dask_scheduler, caplog):
    address, add_worker = dask_scheduler
    add_worker()
    add_worker()
    with openclaw_dask.session(backend="remote", scheduler_address=address, workers=2, timeout="30s") as s:
        _repeated(s, caplog)


def test_a_persisted_result_is_reused_as_the_user_asked():
    with openclaw_dask.session(backend="thread", workers=2, engine="distributed") as s:
        x = s.persist(s.array((2**16,), "float64", fill="arange", chunks=2**13))
        total = s.persist(x.sum())
        distributed.wait(total)
        ran = _executions(s, lambda: [s.compute(total) for _ in range(3)])
        assert ran == 0
        again = x.persist()  # a plain persist in the session keeps its chunks on the workers
        assert all(isinstance(v, distributed.Future) for v in again.__dask_graph__().values())


@pytest.mark.mpi
def test_mpi_computes_anew_too(caplog):
    pytest.importorskip("mpi4py")
    pytest.importorskip("dask_mpi")
    with openclaw_dask.session(backend="mpi", workers=2) as s:
        _repeated(s, caplog)


def test_a_normal_process_run_logs_no_scheduler_error_and_reports_a_real_figure():
    import json

    from tests.conftest import openclaw

    r = openclaw("run", "array-sum", "--size", "64MiB", "--set", "parallel.backend=process", "--set", "parallel.workers=2",
                 "--set", "workload.repeat=7", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads(r.stdout)
    assert result["ok"] and result["invalid"] is None and result["gbps"] <= result["bandwidth_gbps"] * 1.05
    assert "ERROR" not in r.stderr and "WARNING" not in r.stderr and "Couldn't gather" not in r.stderr, r.stderr


def test_worker_processes_started_inside_a_session_start(tmp_path):
    # dask's configuration, with the session's scheduler in it, is pickled to every worker process a nanny starts
    from distributed import Client, LocalCluster

    with openclaw_dask.session(backend="thread", workers=1, engine="distributed") as s, \
            LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0", host="127.0.0.1",
                         local_directory=str(tmp_path)) as cluster, Client(cluster, set_as_default=False) as raw:
        assert raw.submit(lambda: dask.config.get("scheduler", None), pure=False).result() in (None, "dask.distributed")
        assert s.compute(s.array((10,), fill="arange").sum()) == 45


def test_writes_from_worker_processes_lock_across_processes():
    # da.store / to_hdf5 lock with distributed's Lock only when dask sees the client as the scheduler
    import distributed.lock
    from dask.utils import SerializableLock, get_scheduler_lock

    with openclaw_dask.session(backend="process", workers=1) as s:
        assert isinstance(get_scheduler_lock(s.array((10,), fill="arange")), distributed.lock.Lock)
    with openclaw_dask.session(enabled=False) as s:
        assert isinstance(get_scheduler_lock(s.array((10,), fill="arange")), SerializableLock)


@contextlib.contextmanager
def _tasks_run(client):
    """The task-stream records of the tasks run in the block: scheduled, or sent straight to the workers (cluster/direct.py)."""
    from distributed import get_task_stream

    from openclaw_dask.cluster import here

    records: list[dict] = []
    with get_task_stream(client) as ts, here.streamed(records.extend):
        yield records
    records.extend(ts.data)


def test_a_plain_compute_of_one_array_joins_its_chunks_here_not_on_a_worker():
    # dask ends x.compute()'s graph with a task that joins the chunks on a worker: every chunk moved
    # there and the whole array on to the client (512 MiB: 353-376 ms, now 54-60; docs/benchmarks.md)
    import numpy as np

    with openclaw_dask.session(backend="process", workers=2) as s:
        x = s.persist(s.array((64, 48), "float64", fill="arange", chunks=(16, 24)))
        a = np.arange(64 * 48, dtype="float64").reshape(64, 48)
        with _tasks_run(s.client) as ts:
            got = [x.compute(), np.asarray(x), dask.compute(x)[0], x.T[3:40].compute(), x.sum().compute(), x[5, 7].compute()]
        for value, want in zip(got, [a, a, a, a.T[3:40], a.sum(), a[5, 7]], strict=True):
            np.testing.assert_array_equal(value, want)
        assert not [t["key"] for t in ts if "finalize" in str(t["key"])]
        # a large one is read out of its workers (or written by them) straight into this process's memory, as Session.compute's
        big = s.persist(s.array((5 * 2**20,), "float64", fill="arange"))
        with _tasks_run(s.client) as ts:
            np.testing.assert_array_equal(big.compute(), np.arange(5 * 2**20, dtype="float64"))
        names = {str(t["key"][0]).split("-")[0] for t in ts}
        way = "hold_block" if s.running.results.pulled else "write_block"
        assert way in names and "finalize" not in names, names  # (and the one probe of the path's first use)
        # more than one collection, or another kind, keeps dask's own path
        both = dask.compute(x, x.sum())
        np.testing.assert_array_equal(both[0], a)
        assert both[1] == a.sum() and dask.delayed(sum)([1, 2]).compute() == 3
