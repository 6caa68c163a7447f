"""The dataflow API on every engine: pipeline, iterate (sync_interval), batched map, fusion_buffer_size."""

from __future__ import annotations

import math

import numpy as np
import pytest

from openclaw_dask import BatchFailed, ItemFailed, OpenclawError, Session, ShardFailed, load_config
from openclaw_dask.dataflow import Stage, fusion, iterate, map, pipeline, plan_batches
from openclaw_dask.dataflow.batched import OVERHEAD_SHARE
from openclaw_dask.diagnostics.collect import collect

ENGINES = {
    "threads": {},
    "distributed": {"parallel.engine": "distributed", "parallel.workers": 2},
    "serial": {"parallel.enabled": False},
}


def start(overrides=None, **more):
    return Session(load_config(None, {**(overrides or {}), **more})).start()


@pytest.fixture(params=list(ENGINES), scope="module")
def s(request):
    with start(ENGINES[request.param]) as session:
        yield session


# -- pipeline ----------------------------------------------------------------------------------


def double(batch):
    return [2 * v for v in batch]


def total(batch):
    return sum(batch)


def test_pipeline_yields_each_batch_in_order_with_stage_timings(s):
    flow = pipeline(s, [double, Stage(total, name="sum")], range(100), batch_size=8, in_flight=3)
    out = list(flow)
    assert out == [sum(2 * v for v in range(i, min(100, i + 8))) for i in range(0, 100, 8)]
    assert flow.batches == 13 and [t.stage for t in flow.times] == ["double", "sum"]
    assert all(len(t.seconds) == 13 for t in flow.times)
    assert 1 <= flow.peak_in_flight <= 3


def test_pipeline_reads_the_source_no_further_than_in_flight_batches_ahead(s):
    pulled = [0]

    def source():
        for i in range(200):
            pulled[0] += 1
            yield i

    consumed = 0
    for result in pipeline(s, [double, total], source(), batch_size=4, in_flight=2):
        consumed += 4
        # the batch just yielded, plus at most in_flight batches read beyond it
        assert pulled[0] - consumed <= 2 * 4
        assert result >= 0
    assert consumed == 200


def fail_on_13(batch):
    if 13 in batch:
        raise ValueError("bad sample 13")
    return batch


def test_a_failed_batch_names_its_index_and_stage_and_stops_the_stream(s):
    got = []
    with pytest.raises(BatchFailed, match=r"batch 6 failed in stage 'check': ValueError: bad sample 13") as e:
        for r in pipeline(s, [Stage(fail_on_13, name="check"), double], range(40), batch_size=2, in_flight=4):
            got.append(r)
    assert e.value.index == 6 and e.value.stage == "check" and isinstance(e.value.cause, ValueError)
    assert got == [[4 * i, 4 * i + 2] for i in range(6)]  # the batches before it, in order; nothing after


def test_a_consumer_that_stops_early_cancels_the_batches_in_flight(s):
    flow = pipeline(s, [double, total], range(1000), batch_size=1, in_flight=4)
    for result in flow:
        assert result == 0
        break
    assert flow.batches == 1 and flow.wall_s > 0  # the stream ended (its finally ran), one batch taken
    assert list(pipeline(s, [double], range(4), batch_size=2)) == [[0, 2], [4, 6]]  # the engine still works


def test_pinning_a_stage_needs_distributed_workers():
    with start() as s, pytest.raises(OpenclawError, match="needs distributed workers.*parallel.engine=distributed"):
        list(pipeline(s, [Stage(double, workers=["tcp://127.0.0.1:1"])], range(4), batch_size=2))


def where(batch):
    from distributed import get_worker

    return [*batch, get_worker().address]


@pytest.mark.slow
def test_each_stage_runs_on_the_workers_it_is_pinned_to():
    with start({"parallel.backend": "process", "parallel.workers": 2}) as s:
        a, b = sorted(s.workers())
        stages = [Stage(where, name="first", workers=[a]), Stage(where, name="second", workers=[b])]
        for out in pipeline(s, stages, range(12), batch_size=3):
            assert out[-2:] == [a, b]


@pytest.mark.parametrize("engine", ["threads", "serial"])
def test_pipeline_tasks_reach_the_profiler_on_local_engines(engine):
    with start(ENGINES[engine]) as s, collect(s) as record:
        flow = pipeline(s, [double, total], range(40), batch_size=4)
        assert list(flow) == [sum(2 * v for v in range(i, i + 4)) for i in range(0, 40, 4)]
    names = [t.group for t in record.tasks]
    # microsecond stages: once the first batch is back, several batches go into each task, and a task per
    # stage would still cost more than they run: the two stages are one task, named after both
    assert flow.group > 1 and "batch(es) per task" in flow.note and flow.fused
    assert set(names) == {"double+total"} and len(names) < 10


def nap(batch):
    import time

    time.sleep(0.02)
    return batch


def test_stages_that_outlast_a_task_s_cost_are_each_a_task_once_measured():
    """Fused, the standard suite's pipeline lost 7% on threads (681 against 727 ms): only the first batches are
    one task, until their timings say a task per stage costs under 5% of what the stage runs."""
    with start(ENGINES["threads"]) as s, collect(s) as record:
        flow = pipeline(s, [nap, Stage(nap, name="again")], range(24), batch_size=2)
        assert [len(b) for b in flow] == [2] * 12
    names = [t.group for t in record.tasks]
    assert not flow.fused and "run as" not in flow.note
    assert 1 <= names.count("nap+again") <= 2 * s.slots + 1 and names.count("nap") == names.count("again") >= 2


def test_only_stages_pinned_alike_and_next_to_each_other_run_together():
    from openclaw_dask.dataflow.pipeline import _runs

    a, b, c, d = Stage(double), Stage(double, name="b", workers=["w1"]), Stage(double, name="c", workers=["w1"]), Stage(total)
    assert [[x.label for x in run] for run in _runs([a, b, c, d], True)] == [["double"], ["b", "c"], ["total"]]
    assert [[x.label for x in run] for run in _runs([a, d], True)] == [["double", "total"]]
    assert len(_runs([a, b, c, d], False)) == 4


def test_pipeline_arguments_are_checked():
    with start() as s:
        with pytest.raises(OpenclawError, match="at least one stage"):
            pipeline(s, [], range(3))
        with pytest.raises(OpenclawError, match="in_flight=0"):
            pipeline(s, [double], range(3), in_flight=0)
        flow = pipeline(s, [double], range(4), batch_size=2)
        assert list(flow) == [[0, 2], [4, 6]]
        with pytest.raises(OpenclawError, match="streams once"):
            list(flow)


def test_batch_size_defaults_to_the_config():
    with start({"parallel.batch_size": 5}) as s:
        assert [len(b) for b in pipeline(s, [list], range(12))] == [5, 5, 2]


# -- iterate: sync_interval --------------------------------------------------------------------

W_TRUE = np.array([1.5, -2.0, 0.5])


def _shards(n_shards=4, rows=200):
    rng = np.random.default_rng(0)
    out = []
    for _ in range(n_shards):
        x = rng.standard_normal((rows, 3))
        out.append((x, x @ W_TRUE))
    return out


def sgd_step(w, shard):
    x, y = shard
    return w - 0.5 * x.T @ (x @ w - y) / len(y)


@pytest.mark.parametrize("k", [1, 3, 10])
def test_iterate_syncs_every_k_steps_and_converges_for_every_k(s, k):
    out = iterate(s, sgd_step, np.zeros(3), 60, shards=_shards(), sync_interval=k)
    assert out.syncs == math.ceil(60 / k) and out.iterations == 60 and out.shards == 4
    np.testing.assert_allclose(out.state, W_TRUE, atol=1e-6)  # the stated tolerance, docs/dataflow.md


def count_step(state, shard):
    return state + 1


def test_iterate_counts_local_steps_and_takes_sync_interval_from_the_config():
    with start({"parallel.sync_interval": 4}) as s:
        out = iterate(s, count_step, 0.0, 10, shards=[None, None])
    assert (out.sync_interval, out.syncs, float(out.state)) == (4, 3, 10.0)  # 4 + 4 + 2 local steps


def test_iterate_takes_the_blocks_of_a_dask_array_as_shards(s):
    x = s.array((1000, 3), fill="noise", seed=1, chunks=((250,) * 4, (3,)))
    out = iterate(s, lambda w, b: w + b.sum(axis=0), np.zeros(3), 1, shards=x)
    np.testing.assert_allclose(out.state * 4, s.compute(x.sum(axis=0)))  # the mean of the 4 blocks' sums
    assert out.shards == 4


def fail_on_shard_2_at_7(state, shard):
    if shard == 2 and state == 7:
        raise ValueError(f"diverged at state {int(state)}")
    return state + 1


def test_a_failed_step_names_its_shard_round_and_iteration(s):
    # rounds of 3 steps: iterations 0-2, 3-5, 6-8; state 7 is reached at iteration 7, in round 2
    with pytest.raises(ShardFailed, match=r"^shard 2 failed in round 2 \(iteration 7\): ValueError: diverged at state 7$") as e:
        iterate(s, fail_on_shard_2_at_7, 0, 12, shards=[0, 1, 2, 3], sync_interval=3)
    assert (e.value.shard, e.value.round, e.value.iteration) == (2, 2, 7) and isinstance(e.value.cause, ValueError)
    assert "\n" not in str(e.value)


# -- batched map -------------------------------------------------------------------------------


def square(i):
    return i * i


def test_map_returns_results_in_order_with_many_items_per_task(s):
    assert map(s, square, range(5000)) == [i * i for i in range(5000)]
    assert map(s, square, range(10), batch_size=3) == [i * i for i in range(10)]
    assert map(s, square, []) == []


def fail_at_777(i):
    if i == 777:
        raise KeyError(i)
    return i


def test_map_names_the_failing_item(s):
    with pytest.raises(ItemFailed, match="item 777 failed: KeyError") as e:
        map(s, fail_at_777, range(2000), batch_size=100)
    assert e.value.index == 777


def test_map_refuses_a_bad_batch_size(s):
    with pytest.raises(OpenclawError, match="batch_size=0"):
        map(s, square, range(3), batch_size=0)


def test_plan_batches_keeps_scheduling_under_five_percent():
    plan = plan_batches(100_000, item_s=1e-6, task_overhead_s=2e-3, slots=2)
    assert 2e-3 / (plan.batch_size * 1e-6) <= OVERHEAD_SHARE and plan.n_tasks == math.ceil(100_000 / plan.batch_size)
    slow = plan_batches(1000, item_s=0.01, task_overhead_s=2e-3, slots=2)  # slow items: spread over the threads
    assert slow.n_tasks == 8 and "tasks per thread" in slow.reason
    assert plan_batches(0, 1e-6, 2e-3, 2).n_tasks == 0


# -- fusion_buffer_size ------------------------------------------------------------------------


def test_split_every_fills_the_buffer():
    assert fusion.split_every(8, 1000, None) is None  # dask's own (4, or its split_every setting)
    assert fusion.split_every(8, 1000, 64) == 8
    assert fusion.split_every(8, 1000, 2**20) == 1000  # one combine for all
    assert fusion.split_every(2**20, 1000, 64) == 2  # never below a tree that shrinks


def test_merge_chunks_groups_neighbours_up_to_the_buffer():
    assert fusion.merge_chunks((10,) * 7, 8, 200) == (20, 20, 20, 10)
    assert fusion.merge_chunks((10, 50, 10), 8, 200) == (10, 50, 10)  # a big chunk stays alone
    assert fusion.merge_chunks((10,) * 3, 8, None) == (10, 10, 10)


def test_fused_reduction_has_fewer_tasks_and_the_same_result():
    with start({"parallel.fusion_buffer_size": 2**20}) as s:
        x = s.array((4096,), fill="arange", chunks=16)  # 256 chunks: partials of 8 bytes
        plain, fused = x.sum(), fusion.reduce(s, x, "sum")
        assert len(fused.__dask_graph__()) < len(plain.__dask_graph__())
        assert s.compute(fused) == s.compute(plain) == 4096 * 4095 / 2
        merged = fusion.merged(s, x)
        assert merged.npartitions == 1 and s.compute(merged.sum()) == s.compute(plain)


def test_many_small_files_are_read_a_buffer_per_task(tmp_path):
    from openclaw_dask.io import read_many

    paths = []
    for i in range(12):
        paths.append(tmp_path / f"part{i:02d}.npy")
        np.save(paths[-1], np.full((100, 4), i, dtype="float64"))  # 3,200 bytes each
    with start() as s:
        one_each = read_many(s, paths)
        fused = read_many(s, paths, buffer=4 * 3200)
        assert one_each.npartitions == 12 and fused.npartitions == 3
        np.testing.assert_array_equal(s.compute(fused), s.compute(one_each))
    with start({"parallel.fusion_buffer_size": 6 * 3200}) as s:
        assert read_many(s, paths).npartitions == 2



def test_the_buffer_sets_how_much_one_message_between_workers_carries():
    from openclaw_dask.cluster.settings import dask_settings
    from openclaw_dask.cluster.worker_shape import TRANSFER_KEYS

    assert not set(TRANSFER_KEYS) & set(dask_settings(load_config(None, {})))  # null: dask's own (50 MB, 2 MiB)
    assert all(dask_settings(load_config(None, {"parallel.fusion_buffer_size": "4MiB"}))[k] == 4 * 2**20 for k in TRANSFER_KEYS)
    mine = {"parallel.fusion_buffer_size": "4MiB", f"dask.{TRANSFER_KEYS[0]}": "1MiB"}
    assert dask_settings(load_config(None, mine))[TRANSFER_KEYS[0]] == "1MiB"  # the dask: section wins


def _gathered(dask_worker):
    """Keys per message this worker fetched from its peers (newest last)."""
    return [len(t["keys"]) for t in dask_worker.transfer_incoming_log]


@pytest.mark.parametrize(("buffer", "per_message"), [(64, [1] * 16), (4 * 8192, [4] * 4), (2**20, [16])])
def test_pieces_a_task_needs_from_one_worker_travel_a_buffer_per_message(buffer, per_message):
    """16 pieces of 8 KiB on one worker, summed on the other: the buffer sets how many go in one message."""
    with start({"parallel.backend": "process", "parallel.workers": 2, "parallel.fusion_buffer_size": buffer}) as s:
        here, there = sorted(s.client.scheduler_info()["workers"])
        pieces = s.client.scatter([np.full(1024, i, dtype="float64") for i in range(16)], workers=[here])
        total = s.client.submit(lambda *p: float(sum(a.sum() for a in p)), *pieces, workers=[there], allow_other_workers=False)
        assert total.result() == 1024 * sum(range(16))
        assert s.client.run(_gathered, workers=[there])[there] == per_message
        assert s.client.run(lambda dask_worker: dask_worker.state.transfer_message_bytes_limit) == {here: buffer, there: buffer}
