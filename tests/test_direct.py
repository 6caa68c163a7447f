"""Computes over data already on the workers go straight to those workers (``cluster/direct.py``).

Checked: which graphs split into parts and where each part goes (pure), what a worker answers
(its handler, on a worker-like object), and on real worker processes that such computes give
NumPy's answers without a task reaching the scheduler, that the rest still goes to it, that a
task's error is the user's, and that the profiler sees the tasks a worker ran.
"""

from __future__ import annotations

import asyncio
import operator
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import dask
import dask.array as da
import distributed
import numpy as np
import pytest
from dask._task_spec import Task, TaskRef

import openclaw_dask
from openclaw_dask.cluster import here
from openclaw_dask.cluster.direct import (
    MAX_TASKS,
    DirectRuns,
    Part,
    _output_bytes,
    _too_much,
    activity,
    fetches,
    idle_threads,
    on_idle_threads,
    placed,
    split,
    spread,
)


def _graph(*tasks: Task) -> dict:
    return {t.key: t for t in tasks}


def test_a_graph_splits_into_the_parts_that_read_each_other():
    a1 = Task(("a", 0), operator.add, TaskRef(("x", 0)), 1)
    a2 = Task(("a", 1), operator.add, TaskRef(("x", 1)), 1)
    b1 = Task(("b", 0), operator.mul, TaskRef(("a", 0)), TaskRef(("x", 0)))
    parts = split(_graph(b1, a1, a2), [("b", 0), ("a", 1)])
    assert parts is not None and len(parts) == 2
    first = next(p for p in parts if ("b", 0) in p.outputs)
    assert [t.key for t in first.tasks] == [("a", 0), ("b", 0)]  # in the order they run
    assert first.reads == (("x", 0),) and first.outputs == (("b", 0),)
    second = next(p for p in parts if ("a", 1) in p.outputs)
    assert second.reads == (("x", 1),) and [t.key for t in second.tasks] == [("a", 1)]


def test_graphs_the_scheduler_must_place_do_not_split():
    reads = Task(("a", 0), operator.neg, TaskRef(("x", 0)))
    assert "held data" in split(_graph(reads), [("x", 0)])  # an output that is held data, not a task here
    big = {("a", i): Task(("a", i), operator.neg, TaskRef(("x", i))) for i in range(MAX_TASKS + 1)}
    assert split(big, list(big)) == f"over {MAX_TASKS} tasks"
    assert "not dask's tasks" in split({("a", 0): (operator.neg, ("x", 0))}, [("a", 0)])


def test_parts_that_fan_in_or_out_are_told_from_chains():
    reads = Task(("a", 0), operator.neg, TaskRef(("x", 0)))
    a1 = Task(("a", 1), operator.neg, TaskRef(("x", 1)))
    merge = Task(("m", 0), operator.add, TaskRef(("a", 0)), TaskRef(("a", 1)))
    (fan_in,) = split(_graph(merge, reads, a1), [("m", 0)])
    assert fan_in.branches and fan_in.tasks[-1].key == ("m", 0) and sorted(fan_in.reads) == [("x", 0), ("x", 1)]
    twice = Task(("t", 0), operator.neg, TaskRef(("a", 0)))
    (fan_out,) = split(_graph(reads, twice, Task(("u", 0), abs, TaskRef(("a", 0)))), [("t", 0), ("u", 0)])
    assert fan_out.branches and fan_out.tasks[0].key == ("a", 0) and sorted(fan_out.outputs) == [("t", 0), ("u", 0)]
    assert [p.branches for p in split(_graph(reads, twice, a1), [("t", 0), ("a", 1)])] == [False, False]


def test_parts_that_branch_go_straight_to_the_workers_only_if_every_task_thread_gets_one():
    # a part runs on one thread: where the scheduler would run its branches on threads left idle, it goes there
    rows = [Part((), (f"x{i}",), (f"a{i}",), branches=True) for i in range(2)]
    two = _scheduler(x0=("w1",), x1=("w2",))
    assert idle_threads(two, placed(two, rows)) == []  # matmul's two output rows on 2 workers of one thread each
    assert idle_threads(two, placed(two, rows[:1])) == [(0, "w2")]
    wide = _scheduler(nthreads=2, x0=("w1",), x1=("w2",))
    assert sorted(idle_threads(wide, placed(wide, rows))) == [(0, "w1"), (0, "w2")]  # each worker's second thread
    wide.workers["w1"].processing = {"a task of another compute"}
    assert idle_threads(wide, placed(wide, rows)) == [(0, "w2")]


def test_a_part_that_reads_nothing_held_is_a_part_of_its_own():
    reads = Task(("a", 0), operator.neg, TaskRef(("x", 0)))
    alone = Task(("c", 0), operator.add, 1, 2)  # makes its data (a chunk of da.random, a reader's)
    then = Task(("d", 0), operator.neg, TaskRef(("c", 0)))
    parts = split(_graph(reads, alone, then), [("a", 0), ("d", 0)])
    assert sorted((p.reads, [t.key for t in p.tasks]) for p in parts) == [
        ((), [("c", 0), ("d", 0)]), ((("x", 0),), [("a", 0)])]


class _Worker(SimpleNamespace):
    __hash__ = object.__hash__  # a member of who_has sets


def _scheduler(nthreads: int = 1, durations: dict | None = None, names: tuple[str, ...] = ("w1", "w2"),
               **held: tuple[str, ...]) -> SimpleNamespace:
    """A scheduler-like object: what placement reads (8-byte blocks held where ``held`` says, at 1 GB/s)."""
    from distributed.core import Status

    workers = {a: _Worker(address=a, nthreads=nthreads, status=Status.running, memory_limit=64, processing=set()) for a in names}
    tasks = {key: SimpleNamespace(state="memory", who_has={workers[a] for a in where}, get_nbytes=lambda: 8)
             for key, where in held.items()}
    prefixes = {name: SimpleNamespace(duration_average=d) for name, d in (durations or {}).items()}
    return SimpleNamespace(tasks=tasks, workers=workers, task_prefixes=prefixes, bandwidth=1e9)


def test_each_part_goes_to_the_worker_holding_most_of_what_it_reads():
    parts = [Part((), (f"x{i}",), (f"a{i}",)) for i in range(4)]
    both = _scheduler(**{f"x{i}": ("w1", "w2") for i in range(4)})
    where = placed(both, parts)
    assert where is not None and sorted(len(p) for p in where.values()) == [2, 2]  # replicas: the least loaded
    split_up = _scheduler(x0=("w1",), x1=("w2",), x2=("w1",), x3=("w2",))
    assert {a: [p.reads for p in ps] for a, ps in placed(split_up, parts).items()} == {
        "w1": [("x0",), ("x2",)], "w2": [("x1",), ("x3",)]}
    apart = Part((), ("x0", "x1", "x2"), ("a",))  # on two workers: where most of it is, the rest fetched
    assert placed(split_up, [apart]) == {"w1": [apart]} and fetches(split_up, apart, "w1") == {"x1": "w2"}
    waiting = _scheduler(x0=("w1",))
    waiting.tasks["x0"].state = "processing"
    assert "not yet in the workers' memory" in placed(waiting, parts[:1])
    assert "not yet in the workers' memory" in placed(waiting, [Part((), ("unknown",), ("a",))])


def test_parts_that_would_wait_for_a_thread_go_to_idle_ones_when_their_tasks_outlast_the_fetch():
    task = SimpleNamespace(key=("matmul-2fad0ca660a708356fd2c035e25e169a", 0))  # of the prefix "matmul"
    parts = [Part((task,), (f"x{i}",), (f"a{i}",)) for i in range(3)]
    on_one = {f"x{i}": ("w1",) for i in range(3)}
    slow = _scheduler(durations={"matmul": 0.1}, **on_one)
    where = spread(slow, placed(slow, parts))
    assert {a: len(ps) for a, ps in where.items()} == {"w1": 2, "w2": 1}  # w2's one thread takes one; the third waits
    assert fetches(slow, where["w2"][0], "w2") == {where["w2"][0].reads[0]: "w1"}
    unmeasured = _scheduler(**on_one)
    assert {a: len(ps) for a, ps in spread(unmeasured, placed(unmeasured, parts)).items()} == {"w1": 3}
    quick = _scheduler(durations={"matmul": 1e-9}, **on_one)  # 8 bytes at 1 GB/s take longer than the task
    assert {a: len(ps) for a, ps in spread(quick, placed(quick, parts)).items()} == {"w1": 3}
    wide = _scheduler(nthreads=3, durations={"matmul": 0.1}, **on_one)  # no part waits
    assert {a: len(ps) for a, ps in spread(wide, placed(wide, parts)).items()} == {"w1": 3}
    three = _scheduler(durations={"matmul": 0.1}, names=("w1", "w2", "w3"), x0=("w1",), x1=("w1",), x2=("w1", "w3"), x3=("w1",))
    mixed = [parts[0], Part((task,), ("x2", "x3"), ("b",)), parts[1]]  # the second: most of it on w1, half on w3 too
    assert {a: [p.reads for p in ps] for a, ps in spread(three, placed(three, mixed)).items()} == {
        "w1": [("x0",)], "w3": [("x2", "x3")], "w2": [("x1",)]}  # each waiting part to the idle worker holding most of it
    # what a worker fetches is held outside what it manages: over a quarter of its memory limit, the scheduler moves it
    out = Part((), ("x0", "x1"), ("a",))
    assert _too_much(slow, {"w2": {"x0": "w1", "x1": "w1"}}, {"w2": [out]}, {}) is None  # 16 bytes of 64
    assert "over a quarter of its memory limit" in _too_much(slow, {"w2": {"x0": "w1", "x1": "w1", "x2": "w1"}}, {"w2": [out]}, {})
    # and so are the results it makes until it answers
    assert _too_much(slow, {"w2": {}}, {"w2": [out]}, {"a": 16}) is None
    assert "17 B" not in (held := _too_much(slow, {"w2": {"x0": "w1"}}, {"w2": [out]}, {"a": 9})) and "quarter" in held
    # and what a part that branches holds between its tasks: each result at most its biggest block (8 bytes here)
    made = SimpleNamespace(key="a")
    two, three = Part((task, made), ("x0",), ("a",), branches=True), Part((task, task, made), ("x0",), ("a",), branches=True)
    assert _too_much(slow, {"w2": {}}, {"w2": [two]}, {"a": 4}) is None  # 4 + 8 of 64
    assert "quarter" in _too_much(slow, {"w2": {}}, {"w2": [three]}, {"a": 4})  # 4 + 16
    assert _too_much(slow, {"w2": {}}, {"w2": [three._replace(branches=False)]}, {"a": 4}) is None


def test_the_bytes_a_direct_run_makes_are_read_off_the_chunk_grids():
    x = da.ones((10, 6), chunks=(4, 3), dtype="float32")
    y = x[x[:, 0] > 0]  # rows unknown until computed
    made = _output_bytes([x, y])
    assert made[(x.name, 0, 0)] == 4 * 3 * 4 and made[(x.name, 2, 1)] == 2 * 3 * 4 and len([k for k in made if k[0] == x.name]) == 6
    assert {made[k] for k in made if k[0] == y.name} == {0}


def test_parts_that_make_their_data_share_out_the_idle_threads_if_alike():
    make = SimpleNamespace(key=("random-2fad0ca660a708356fd2c035e25e169a", 0))
    fresh = [Part((make,), (), (f"c{i}",)) for i in range(5)]
    two = _scheduler(nthreads=2, x0=("w1",))
    load = placed(two, [Part((), ("x0",), ("a",))])  # one of w1's two threads is taken
    where = on_idle_threads(two, load, fresh[:3])
    assert {a: [p.outputs for p in ps] for a, ps in where.items()} == {
        "w1": [("a",), ("c0",)], "w2": [("c1",), ("c2",)]}  # each idle thread one, the workers in turn
    busy = _scheduler(nthreads=2)
    busy.workers["w2"].processing = {"a task of another compute"}
    assert on_idle_threads(busy, {}, fresh) == {"w1": [fresh[0], fresh[2], fresh[3]], "w2": [fresh[1], fresh[4]]}
    other = Part((SimpleNamespace(key=("ones-2fad0ca660a708356fd2c035e25e169a", 0)),), (), ("o",))
    assert on_idle_threads(busy, {}, [*fresh[:2], other]) == {"w1": [fresh[0], other], "w2": [fresh[1]]}
    assert on_idle_threads(busy, {}, [*fresh, other]) == (  # unlike ones take unlike times: as threads free up
        "6 parts of different kinds make their own data, more than the 3 idle task threads")
    full = _scheduler(nthreads=1)
    assert "no task thread is idle" in on_idle_threads(full, {"w1": [other], "w2": [other]}, fresh)


def _with(data: dict, status: str = "running") -> SimpleNamespace:
    """A worker-like object: what the handler reads of a worker."""
    from distributed.core import Status

    return SimpleNamespace(status=Status(status), data=data, handlers={}, executors={"default": ThreadPoolExecutor(1)})


def _answer(worker: SimpleNamespace, parts: list[Part]) -> dict:
    plugin = DirectRuns()
    plugin.setup(worker)
    try:
        return asyncio.run(worker.handlers["openclaw_direct"](parts=parts))
    finally:
        plugin.teardown(worker)
        worker.executors["default"].shutdown()


def test_a_worker_runs_its_parts_from_its_own_data_or_none_of_them():
    double = Task(("a", 0), operator.mul, TaskRef(("x", 0)), 2)
    plus = Task(("b", 0), operator.add, TaskRef(("a", 0)), 1)
    part = Part((double, plus), (("x", 0),), (("b", 0),))
    started = activity()[0]
    reply = _answer(_with({("x", 0): 20}), [part])
    assert reply["status"] == "OK" and activity() == (started + 1, 0)  # the heap keeper sees it as work
    (values, ran), = reply["results"].data
    assert values == {("b", 0): 41}
    assert [r[0] for r in ran] == [("a", 0), ("b", 0)] and all(r[2] <= r[3] for r in ran)
    assert _answer(_with({}), [part])["status"] == "missing"
    assert _answer(_with({("x", 0): 20}, status="paused"), [part])["status"] == "busy"
    failing = Part((Task(("c", 0), operator.truediv, TaskRef(("x", 0)), 0),), (("x", 0),), (("c", 0),))
    assert _answer(_with({("x", 0): 20}), [part, failing])["status"] == "failed"


def test_a_worker_keeps_an_intermediate_until_its_last_reader_ran():
    twice = Task(("s", 0), operator.mul, TaskRef(("x", 0)), 2)  # read by two tasks
    up, down = Task(("u", 0), operator.add, TaskRef(("s", 0)), 1), Task(("d", 0), operator.sub, TaskRef(("s", 0)), 1)
    both = Task(("m", 0), operator.mul, TaskRef(("u", 0)), TaskRef(("d", 0)))
    part = Part((twice, up, down, both), (("x", 0),), (("m", 0), ("u", 0)), branches=True)
    data = {("x", 0): 20}
    reply = _answer(_with(data), [part])
    assert reply["status"] == "OK" and data == {("x", 0): 20}
    (values, ran), = reply["results"].data
    assert values == {("m", 0): 41 * 39, ("u", 0): 41} and [r[0] for r in ran] == [t.key for t in part.tasks]


def _tasks_seen(s, run):
    """What ``run()`` returns, the keys the scheduler ran, and the records of tasks sent straight to workers."""
    from distributed import get_task_stream

    sent: list[dict] = []
    with get_task_stream(s.client) as ts, here.streamed(sent.extend):
        value = run()
    return value, [t["key"] for t in ts.data], sent


@pytest.fixture(scope="module")
def process_session():
    with openclaw_dask.session(backend="process", workers=2) as s:
        yield s


def test_computes_over_held_data_run_on_the_workers_holding_it(process_session):
    s = process_session
    a = np.arange(64 * 48, dtype="float64").reshape(64, 48)
    x = s.persist(s.array((64, 48), "float64", fill="arange", chunks=(16, 24)))
    distributed.wait(x)
    cases = [
        (lambda: s.compute(x.sum()), a.sum()),
        (lambda: s.compute(x.mean()), a.mean()),
        (lambda: x.std().compute(), a.std()),
        (lambda: s.compute((x * 2 + 1)[::7]), (a * 2 + 1)[::7]),
        (lambda: s.compute(x.map_blocks(np.sin).max()), np.sin(a).max()),
    ]
    for run, want in cases:
        value, scheduled, sent = _tasks_seen(s, run)
        np.testing.assert_allclose(value, want, rtol=1e-12)
        assert not scheduled and sent, (scheduled, sent)
        assert {r["worker"] for r in sent} <= set(s.client.scheduler_info()["workers"])


def test_computes_that_need_the_scheduler_still_go_to_it(process_session):
    s = process_session
    a = np.arange(64 * 48, dtype="float64").reshape(64, 48)
    x = s.persist(s.array((64, 48), "float64", fill="arange", chunks=(16, 24)))
    distributed.wait(x)
    ones = s.array((64, 48), "float64", fill="ones", chunks=(16, 24))
    unlike = da.concatenate([ones, s.array((64 * 64, 48), "float64", fill="random", chunks=(16, 24))])
    value, scheduled, sent = _tasks_seen(s, lambda: s.compute(unlike.sum()))
    assert value > a.size and scheduled and not sent  # made by unlike tasks: the scheduler balances them as threads free up
    assert "parts of different kinds make their own data" in s.running.path.reason
    value, scheduled, sent = _tasks_seen(s, lambda: s.compute((x + ones).sum()))
    assert value == (a + 1).sum() and sent and not scheduled  # each task makes its ones beside a block it reads
    value, scheduled, _ = _tasks_seen(s, lambda: s.compute(x.sum(), workers=list(s.client.scheduler_info()["workers"])[:1]))
    assert value == a.sum() and scheduled  # pinned to a worker: only the scheduler honours that
    with dask.annotate(priority=1):
        y = x + 1
    value, scheduled, sent = _tasks_seen(s, lambda: s.compute(y.sum()))
    assert value == (a + 1).sum() and scheduled and not sent  # annotated: the scheduler reads annotations


def test_a_compute_that_makes_its_data_runs_on_idle_workers_without_the_scheduler(process_session):
    s = process_session
    threads = sum(w["nthreads"] for w in s.client.scheduler_info()["workers"].values())
    fresh = s.array((64 * 5 * threads, 48), "float64", fill="random", seed=7, chunks=(64, 48))  # 5 chunks a thread
    want = s.compute(fresh.sum(), workers=list(s.client.scheduler_info()["workers"]))  # through the scheduler
    for run in (lambda: s.compute((fresh * 2 + 1).mean()), lambda: s.compute(fresh.sum())):
        value, scheduled, sent = _tasks_seen(s, run)
        assert not scheduled and len({r["worker"] for r in sent}) == len(s.client.scheduler_info()["workers"]), sent
    assert value == want  # the same blocks, summed the same way
    np.testing.assert_allclose(s.compute((fresh * 2 + 1).mean()), 2 * want / fresh.size + 1, rtol=1e-12)


def test_a_compute_whose_data_lies_on_one_worker_runs_on_both_and_equals_numpy(process_session):
    """Its second half fetches what it reads from the first worker (read out of its memory where the workers may)."""
    s = process_session
    c = s.client
    first = min(c.scheduler_info()["workers"])
    x = c.persist(s.array((2048, 512), "float64", fill="arange", chunks=(1024, 512)), workers=[first])
    w = c.persist(s.array((512, 512), "float64", fill="ones", chunks=-1), workers=[first])
    distributed.wait([x, w])
    c.compute(np.sin(x[:, ::-1] @ w) @ w).result()  # the scheduler measures the products (other keys: nothing kept)
    value, scheduled, sent = _tasks_seen(s, lambda: s.compute(np.sin(x @ w) @ w))  # two chains of two products
    a = np.arange(2048 * 512, dtype="float64").reshape(2048, 512)
    np.testing.assert_allclose(value, np.sin(a @ np.ones((512, 512))) @ np.ones((512, 512)), rtol=1e-12)
    assert not scheduled and {r["worker"] for r in sent} == set(c.scheduler_info()["workers"]), sent
    assert any(st["action"] == "transfer" for r in sent for st in r["startstops"])  # the fetch, as its first task's transfer


def test_output_rows_that_branch_run_on_the_workers_holding_them_when_each_gets_one(process_session):
    """matmul of two row-split matrices: each output row reads its row of x and all of y, splitting its row and summing
    two products (it branches), one row per worker: each runs on one worker, which fetches the half of y it lacks."""
    s = process_session
    c = s.client
    workers = sorted(c.scheduler_info()["workers"])

    def rows(seed):  # row block i on workers[i]
        with dask.annotate(workers=lambda key: [workers[key[1]]]):
            made = s.array((256, 256), "float64", fill="random", seed=seed, chunks=(128, 256))
        return c.persist(made, optimize_graph=False)

    x, y = rows(1), rows(2)
    distributed.wait([x, y])
    value, scheduled, sent = _tasks_seen(s, lambda: s.compute(x @ y))
    np.testing.assert_allclose(value, s.compute(x) @ s.compute(y), rtol=1e-12)
    assert not scheduled and {r["worker"] for r in sent} == set(workers), (scheduled, sent)
    # one row: its two outputs (a product each, summed here) share only a slice of x, taken by both: one per worker
    value, scheduled, sent = _tasks_seen(s, lambda: s.compute(x[:128] @ y))
    assert not scheduled and {r["worker"] for r in sent} == set(workers), (scheduled, sent)
    np.testing.assert_allclose(value, s.compute(x[:128]) @ s.compute(y), rtol=1e-12)
    # its one result cut in two: both halves read the one product, which is no view to take twice: the other worker would idle
    value, scheduled, sent = _tasks_seen(s, lambda: s.compute((x[:128] @ y).rechunk((128, 128))))
    assert scheduled and not sent and "1 task thread(s) would be idle" in s.running.path.reason
    np.testing.assert_allclose(value, s.compute(x[:128]) @ s.compute(y), rtol=1e-12)


def _ones_where_it_runs(block):
    """Ones, if distributed can say which worker runs it (a user's task may ask)."""
    return np.ones_like(block) * distributed.get_worker().address.startswith("tcp://")


def test_a_users_task_may_ask_which_worker_runs_it(process_session):
    """get_worker() inside a task sent straight to a worker answers as in a task the scheduler sent: it used to raise
    there, and every such compute ran twice (failed on the workers, then through the scheduler)."""
    s = process_session
    x = s.persist(s.array((64,), "float64", fill="arange", chunks=16))
    distributed.wait(x)
    ones = x.map_blocks(_ones_where_it_runs, meta=np.array((), dtype=x.dtype))  # meta: dask need not call it here
    value, scheduled, sent = _tasks_seen(s, lambda: s.compute(ones.sum()))
    assert value == 64 and not scheduled and sent, s.running.path


def _fails(block):
    raise ValueError("a block the user's function refuses")


def test_a_task_that_raises_raises_the_users_error(process_session):
    s = process_session
    x = s.persist(s.array((64,), "float64", fill="arange", chunks=16))
    distributed.wait(x)
    with pytest.raises(Exception, match="a block the user's function refuses"):
        s.compute(x.map_blocks(_fails).sum())
    assert s.compute(x.sum()) == np.arange(64).sum()  # and the session goes on


def test_the_profiler_sees_the_tasks_a_worker_ran(process_session):
    from openclaw_dask.diagnostics.collect import collect

    s = process_session
    x = s.persist(s.array((2**16,), "float64", fill="arange", chunks=2**14))
    distributed.wait(x)
    s.compute(x.sum())
    with collect(s) as record:
        assert s.compute(x.sum()) == np.arange(2**16).sum()
    sums = [t for t in record.tasks if t.group.startswith("sum")]
    assert len(sums) == 4 and {t.worker for t in sums} <= set(s.client.scheduler_info()["workers"])
    assert not any(t.scheduled for t in sums)  # no scheduling of their own: the overhead-bound verdict leaves them out
    assert all(record.start <= t.start <= t.stop <= record.stop for t in sums)


def test_a_run_summary_says_which_path_the_last_compute_took(process_session):
    from openclaw_dask.cluster.paths import SCHEDULER, WORKERS
    from openclaw_dask.workloads import run_kernel

    s = process_session
    summed = dict(run_kernel("array-sum", s, size=2**20, repeat=2).rows)["path"]
    assert summed.startswith(f"{WORKERS}: ") and "no scheduling round" in summed
    x = s.persist(s.array((64,), "float64", fill="arange", chunks=16))
    distributed.wait(x)
    s.compute(x.sum(), workers=list(s.client.scheduler_info()["workers"])[:1])
    assert s.running.path.text() == f"{SCHEDULER}: pinned to workers, or annotated"
