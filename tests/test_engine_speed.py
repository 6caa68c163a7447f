"""The distributed engine, fast: fewer, bigger tasks by measurement (small-task pass, pipeline groups), prompt message streams, worker heaps."""

from __future__ import annotations

import dask
import numpy as np
import pytest

from openclaw_dask import Session, load_config
from openclaw_dask.cluster import running_of
from openclaw_dask.dataflow import pipeline
from openclaw_dask.dataflow.pipeline import MAX_GROUP, group_size
from openclaw_dask.dataflow.small_tasks import MIN_GROUP, batch_small_tasks
from openclaw_dask.diagnostics.collect import collect
from openclaw_dask.workloads import streams
from openclaw_dask.workloads.suite import KERNELS

ENGINES = {
    "thread": {},
    "process": {"parallel.backend": "process", "parallel.workers": 2},
    "serial": {"parallel.enabled": False},
}


def start(overrides):
    return Session(load_config(None, overrides)).start()


@pytest.fixture(params=list(ENGINES), scope="module")
def s(request):
    with start(ENGINES[request.param]) as session:
        yield session


def inc(i):
    return i + 1


def loop(n=200):
    return dask.delayed(sum)([dask.delayed(inc)(i) for i in range(n)])


def _same(a, b):
    return np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)


@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_every_suite_kernel_gives_the_same_result_batched_and_unbatched(s, kernel):
    prepared = KERNELS[kernel](s, 2**20)
    try:
        batched = prepared.execute(s)
        if prepared.run is None:  # a graph: the engine's own compute, without the pass
            plain = running_of(s).compute([prepared.build(*prepared.inputs)])[0]
        else:  # pipeline: its stream with one batch per task (a fixed in_flight keeps groups of one)
            plain = None
            if kernel == "pipeline":
                n = max(2, 2**20 // streams.SAMPLE_BYTES)
                flow = pipeline(s, streams.STAGES, range(n), batch_size=16, in_flight=2 * s.slots)
                plain = sum(flow, np.zeros(streams.SIDE))
                assert flow.group == 1
        if kernel in ("tiny-tasks", "pipeline"):  # what the pass and the groups change: bit for bit the same
            assert _same(batched, plain)
        elif plain is not None:  # graphs it leaves alone; a cluster may sum partials in another order run to run
            assert prepared.matches(s, batched, plain)
    finally:
        if prepared.close is not None:
            prepared.close()


def test_a_delayed_loop_runs_in_few_tasks_named_as_the_users(s):
    with collect(s) as record:
        assert s.compute(loop(400)) == sum(range(1, 401))
    names = [t.group for t in record.tasks]
    assert s.small_tasks is not None and "'inc' tasks" in str(s.small_tasks)
    n, batches = s.small_tasks.groups["inc"]
    assert n == 400 and names.count("inc") == batches < 400  # the batches count under the user's name
    assert "_pack" not in names and "pack" not in names


def test_what_is_not_a_tiny_loop_is_left_alone():
    with start({}) as s:
        few = dask.delayed(sum)([dask.delayed(inc)(i) for i in range(MIN_GROUP - 1)])
        run, _, small = batch_small_tasks(s, [few])
        assert small is None and len(run[0].__dask_graph__()) == MIN_GROUP  # one flat graph, every task kept
        x = dask.array.ones(10, chunks=1).sum()
        run, unpack, small = batch_small_tasks(s, [x])
        assert run == [x] and unpack((1,)) == (1,) and small is None  # arrays size their tasks by their chunks
        assert s.compute(few) == sum(range(1, MIN_GROUP))


def test_many_delayed_results_come_back_in_order_from_one_flat_graph(s):
    parts = [dask.delayed(inc)(i) for i in range(300)]
    run, _, _ = batch_small_tasks(s, parts)
    assert len(run) == 1 and isinstance(run[0].dask, dict)  # one flat layer for dask to cull, not 300
    assert s.compute(*parts) == tuple(range(1, 301))


def boom(i):
    if i == 77:
        raise ValueError("item 77")
    return i


def test_a_raising_task_fails_on_the_engine_as_without_the_pass(s):
    with pytest.raises(Exception, match="item 77"):
        s.compute(dask.delayed(sum)([dask.delayed(boom)(i) for i in range(100)]))


def test_results_asked_for_are_never_batched_away():
    with start({}) as s:
        parts = [dask.delayed(inc)(i) for i in range(100)]
        assert s.compute(*parts[:3], loop(100)) == (1, 2, 3, sum(range(1, 101)))


def test_group_size_keeps_the_task_cost_under_five_percent_and_work_for_every_slot():
    assert group_size([0.001] * 4, 0.0027, 2, None) == 54  # 2.7 ms against 1 ms stages
    assert group_size([0.001] * 4, 0.0027, 2, 40) == 10  # two groups per slot of what is left
    assert group_size([1.0], 0.0027, 2, None) == 1  # long stages: one batch per task
    assert group_size([1e-6], 0.0027, 2, None) == MAX_GROUP


def test_a_fixed_in_flight_keeps_one_batch_per_task_and_says_it_is_overhead_bound():
    with start({"parallel.engine": "distributed", "parallel.workers": 1}) as s:
        flow = pipeline(s, [list], range(20), batch_size=2, in_flight=2)
        assert [len(b) for b in flow] == [2] * 10
        assert flow.group == 1 and flow.note.startswith("overhead-bound")


def interval(dask_worker):
    return dask_worker.batched_stream.interval


def test_message_streams_wait_at_most_a_millisecond_to_batch():
    from openclaw_dask.cluster.latency import INTERVAL_S

    with start(ENGINES["process"]) as s:
        client, scheduler = s.client, running_of(s).scheduler
        assert client.scheduler_comm.interval == INTERVAL_S
        assert set(client.run(interval).values()) == {INTERVAL_S}
        assert {c.interval for c in scheduler.stream_comms.values()} == {INTERVAL_S}
        s.resize_workers(3)  # a worker that joins later gets prompt streams too
        assert set(client.run(interval).values()) == {INTERVAL_S}
        assert {c.interval for c in scheduler.stream_comms.values()} == {INTERVAL_S}


def page_faults_of_2mib_temporaries(n=50):
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(n):
        np.ones(2**18).sum()  # 2 MiB, freed at once: what a stage's temporaries do
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


@pytest.mark.parametrize(("limit", "reused"), [("auto", True), ("256MiB", False)])
def test_worker_processes_reuse_freed_blocks_unless_their_limit_is_small(limit, reused):
    # 50 fresh 2 MiB blocks fault in 50 x 512 pages; blocks reused from the heap fault in none
    with start({**ENGINES["process"], "parallel.workers": 1, "cluster.memory_limit": limit}) as s:
        faults = s.client.submit(page_faults_of_2mib_temporaries, pure=False).result()
    assert (faults < 5 * 512) if reused else (faults > 40 * 512)


def page_faults_of_64mib_temporaries(n=8):
    import resource

    np.ones(2**23).sum()  # the heap grows once
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(n):
        np.ones(2**23).sum()  # 64 MiB: a chunk-sized temporary, above glibc's 32 MiB mmap threshold
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def worker_malloc_environment():
    import os

    return {k: v for k, v in os.environ.items() if k.startswith("MALLOC_")}


@pytest.mark.parametrize(("limit", "reused"), [("auto", True), ("256MiB", False)])
def test_worker_processes_start_with_one_arena_and_reuse_chunk_sized_blocks(limit, reused):
    # Fresh 64 MiB blocks fault in at least 32 pages each (2 MiB huge pages; 16,384 of 4 KiB), reused ones none
    with start({**ENGINES["process"], "parallel.workers": 1, "cluster.memory_limit": limit}) as s:
        assert s.client.run(worker_malloc_environment).popitem()[1]["MALLOC_ARENA_MAX"] == "1"
        faults = s.client.submit(page_faults_of_64mib_temporaries, pure=False).result()
    assert (faults < 32) if reused else (faults > 7 * 32)


def test_a_worker_left_to_its_own_malloc_tuning_gets_no_arena_limit(monkeypatch):
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    with start({**ENGINES["process"], "parallel.workers": 1}) as s:
        assert s.client.run(worker_malloc_environment).popitem()[1]["MALLOC_ARENA_MAX"] == "4"


def hole_kept_then(wait_s):
    """Free pages of a 300 MiB hole in this worker's heap: given back at once, and after ``wait_s`` seconds (bytes)."""
    import ctypes
    import time

    import psutil

    libc, process = ctypes.CDLL("libc.so.6"), psutil.Process()
    libc.malloc.restype, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_void_p]

    def block(n):
        address = libc.malloc(n)
        ctypes.memset(address, 1, n)
        return address

    blocks = [block(100 * 2**20) for _ in range(3)]  # each under a 1 GiB worker's mmap threshold (128 MiB): from the heap
    top = block(2**20)  # holds the heap's top: the freed blocks are a hole, which no trim threshold trims
    full = process.memory_info().rss
    for address in blocks:
        libc.free(address)
    at_once = full - process.memory_info().rss
    time.sleep(wait_s)
    later = full - process.memory_info().rss
    libc.free(top)
    return at_once, later


@pytest.mark.parametrize(("spill", "trimmed"), [(0.7, False), (0.2, True)])
def test_a_worker_keeps_freed_blocks_until_its_memory_nears_the_spill_point(spill, trimmed):
    # a 1 GiB worker keeps blocks up to 128 MiB+ in its heap; above 0.9 x spill x limit it gives free pages back
    config = {**ENGINES["process"], "parallel.workers": 1, "cluster.memory_limit": "1GiB",
              "dask.distributed.worker.memory.spill": spill}
    with start(config) as s:
        released_at_once, released_later = s.client.submit(hole_kept_then, 1.0, pure=False).result()
    assert released_at_once < 16 * 2**20, "a freed block in the heap stays for the next task"
    assert (released_later > 280 * 2**20) if trimmed else (released_later < 16 * 2**20)


def test_worker_heap_thresholds_follow_the_memory_limit():
    from openclaw_dask.cluster.heap import M_TRIM_THRESHOLD, trim_point, tuned_by_user, worker_heap

    mib = 2**20
    assert worker_heap(16 * 2**30, True) == worker_heap(None, True) == ((-3, 1024 * mib), (M_TRIM_THRESHOLD, 1024 * mib))
    assert worker_heap(2 * 2**30, True) == ((-3, 256 * mib), (M_TRIM_THRESHOLD, 256 * mib))
    assert worker_heap(2**30, False) == ((-3, 32 * mib), (M_TRIM_THRESHOLD, 4 * mib))  # arenas of its own: no big blocks
    assert trim_point(1000, (0.7, 0.8)) == 630 and trim_point(1000, (False, 0.5)) == 450
    assert trim_point(1000, (False, False)) is None
    assert not tuned_by_user() or any(k.startswith("MALLOC_") for k in __import__("os").environ)
