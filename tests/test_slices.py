"""Branching computes split per output, slices cut where their blocks lie (``cluster/slices.py``).

Checked: which tasks count as views, how a part splits per output and which blocks it reads only
through slices (pure), what a worker answers when asked to cut (its handler, on a worker-like
object), and on real worker processes that a stencil and an all-to-all rechunk go straight to the
workers, give the scheduler's bits, and show the profiler the views each worker cut.
"""

from __future__ import annotations

import asyncio
import operator

import dask
import distributed
import numpy as np
import pytest
from dask._task_spec import Alias, DataNode, Task, TaskRef
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from openclaw_dask.cluster.direct import DirectRuns, apart, split
from openclaw_dask.cluster.slices import Cut, cut_elsewhere, per_output, sliced, view
from tests.test_direct import _scheduler, _tasks_seen, _with


def _user(block):
    return block + 1


def test_views_are_aliases_slices_and_transposes_of_the_libraries():
    block = TaskRef(("x", 0))
    assert view(Alias(("a", 0), ("x", 0)))
    assert view(Task(("s", 0), operator.getitem, block, (slice(0, 1), slice(None))))
    assert view(Task(("s", 0), operator.getitem, Alias(("a", 0), ("x", 0)), (slice(-1, None), 0, None, Ellipsis)))
    assert view(Task(("t", 0), np.transpose, block, axes=(1, 0)))
    assert not view(Task(("s", 0), operator.getitem, block, [0, 0, 0]))  # fancy indexing copies, maybe more than it cuts
    assert not view(Task(("s", 0), operator.getitem, block, DataNode(None, np.array([0, 0]))))
    assert not view(Task(("n", 0), np.sin, block))  # NumPy's, but work
    assert not view(Task(("u", 0), _user, block))
    assert not view(Task(("s", 0), operator.getitem, block, (slice(0, 1),), extra=_user))


def _stencil_like():
    """Two outputs, each its block (through an alias, as ``map_overlap`` reads it) beside an edge of the other's,
    cut from that alias: joined by the aliases, which are views, so each output can be a part."""
    whole = [Alias(("a", i), f"x{i}") for i in range(2)]
    edge0 = Task(("e", 0), operator.getitem, TaskRef(("a", 0)), (slice(-1, None),))
    edge1 = Task(("e", 1), operator.getitem, TaskRef(("a", 1)), (slice(0, 1),))
    out0 = Task(("o", 0), np.add, TaskRef(("a", 0)), TaskRef(("e", 1)))
    out1 = Task(("o", 1), np.add, TaskRef(("a", 1)), TaskRef(("e", 0)))
    (part,) = split({t.key: t for t in (*whole, edge0, edge1, out0, out1)}, [("o", 0), ("o", 1)])
    return part


def test_a_part_splits_per_output_where_the_tasks_its_outputs_share_are_views():
    part = _stencil_like()
    assert part.branches and len(part.outputs) == 2
    first, second = per_output(part)
    assert {t.key for t in first.tasks} == {("a", 0), ("a", 1), ("e", 1), ("o", 0)} and first.tasks[-1].key == ("o", 0)
    assert {t.key for t in second.tasks} == {("a", 0), ("a", 1), ("e", 0), ("o", 1)} and set(second.reads) == {"x0", "x1"}
    shared = Task(("w", 0), np.sin, TaskRef("x0"))  # read by both outputs, and not a view: never run twice
    both = [Task(("o", i), np.add, TaskRef(("w", 0)), i) for i in range(2)]
    (costly,) = split({t.key: t for t in (shared, *both)}, [("o", 0), ("o", 1)])
    assert per_output(costly) is None
    assert per_output(first) is None  # one output


def test_a_block_read_only_through_slices_is_cut_where_it_lies():
    first, _ = per_output(_stencil_like())
    cuts = sliced(first)
    assert list(cuts) == ["x1"] and cuts["x1"].slices == (("e", 1),) and cuts["x1"].blocks == ("x1",)  # x0: read whole
    assert [t.key for t in cuts["x1"].tasks] == [("a", 1), ("e", 1)]
    kept, away = cut_elsewhere(first, cuts, held_here=["x0"])
    assert [t.key for t in kept.tasks] == [("a", 0), ("o", 0)] and kept.slices == (("e", 1),)
    assert set(kept.reads) == {"x0", ("e", 1)} and away == cuts
    assert cut_elsewhere(first, cuts, held_here=["x0", "x1"]) == (first, {})  # both here: nothing moves
    beside = Task(("w", 1), np.add, TaskRef("x1"), TaskRef(("e", 1)))  # the block itself read beside its slice
    (mixed,) = split({t.key: t for t in (*cuts["x1"].tasks, beside)}, [("w", 1)])
    assert sliced(mixed) == {}


def test_each_output_goes_where_its_whole_block_is_and_the_others_cut_its_edges():
    scheduler = _scheduler(x0=("w1",), x1=("w2",))
    load, away = apart(scheduler, [_stencil_like()])
    assert {a: [p.outputs for p in ps] for a, ps in load.items()} == {"w1": [(("o", 0),)], "w2": [(("o", 1),)]}
    assert {a: {h: (c.slices, c.blocks) for h, c in cut.items()} for a, cut in away.items()} == {
        "w1": {"w2": ((("e", 1),), ("x1",))}, "w2": {"w1": ((("e", 0),), ("x0",))}}
    one = _scheduler(x0=("w1",), x1=("w1",))  # both blocks on one worker: the other would idle
    assert apart(one, [_stencil_like()]) is None


def test_outputs_that_only_cut_blocks_share_out_the_workers_wherever_the_blocks_are():
    """An all-to-all rechunk: each output cuts a piece of every block (through a transpose both share)."""
    turned = [Task(("t", i), np.transpose, TaskRef(f"x{i}")) for i in range(2)]
    pieces = [Task(("p", i, j), operator.getitem, TaskRef(("t", j)), (slice(i, i + 1),)) for i in range(2) for j in range(2)]
    outs = [Task(("o", i), np.add, TaskRef(("p", i, 0)), TaskRef(("p", i, 1))) for i in range(2)]
    (part,) = split({t.key: t for t in (*turned, *pieces, *outs)}, [("o", 0), ("o", 1)])
    load, away = apart(_scheduler(x0=("w1",), x1=("w1",)), [part])  # both blocks on w1: still one output each
    assert sorted(len(ps) for ps in load.values()) == [1, 1] and set(away) == {"w2"}
    assert set(away["w2"]["w1"].blocks) == {"x0", "x1"} and len(away["w2"]["w1"].slices) == 2  # one message for both


class _Comm:
    """What the cut handler writes, and the asker's "OK"."""

    def __init__(self) -> None:
        self.written: list = []

    async def write(self, msg, serializers=None):
        self.written.append(msg)

    async def read(self):
        return "OK"


def _cut(worker, cut: Cut) -> dict:
    plugin = DirectRuns()
    plugin.setup(worker)
    comm = _Comm()
    try:
        from distributed.core import Status

        assert asyncio.run(worker.handlers["openclaw_direct_cut"](comm, cut=cut)) == Status.dont_reply
    finally:
        plugin.teardown(worker)
        worker.executors["default"].shutdown()
    (reply,) = comm.written
    return reply


def test_a_worker_cuts_the_slices_of_its_blocks_it_is_asked_for():
    edge = Task(("e", 1), operator.getitem, TaskRef("x1"), (slice(0, 1),))
    cut = Cut((edge,), (("e", 1),), ("x1",))
    reply = _cut(_with({"x1": np.arange(6.0).reshape(3, 2)}), cut)
    assert reply["status"] == "OK" and list(reply["data"]) == [("e", 1)]
    np.testing.assert_array_equal(reply["data"][("e", 1)].data, [[0.0, 1.0]])
    assert [r[0] for r in reply["ran"].data] == [("e", 1)]
    assert _cut(_with({}), cut)["status"] == "missing"
    assert _cut(_with({"x1": np.zeros(2)}, status="paused"), cut)["status"] == "busy"
    bad = Cut((Task(("e", 1), operator.getitem, TaskRef("x1"), (slice(0, 1), 5)),), (("e", 1),), ("x1",))
    assert _cut(_with({"x1": np.zeros((3, 2))}), bad)["status"] == "failed"  # the scheduler's run reports it


@pytest.fixture(scope="module")
def held():
    import openclaw_dask

    with openclaw_dask.session(backend="process", workers=2) as s:
        workers = sorted(s.client.scheduler_info()["workers"])
        with dask.annotate(workers=lambda key: [workers[key[1] % 2]]):  # row blocks on alternate workers
            made = s.array((256, 96), "float64", fill="random", seed=3, chunks=(64, 96))
        x = s.client.persist(made, optimize_graph=False)
        distributed.wait(x)
        yield s, x, workers


def _smooth(block):
    return (block[:-2, 1:-1] + block[2:, 1:-1] + block[1:-1, :-2] + block[1:-1, 2:] + 4 * block[1:-1, 1:-1]) / 8


def _padded(block):
    return np.pad(_smooth(block), 1)


@pytest.mark.parametrize("kernel", ["stencil", "rechunk-transpose"])
def test_stencils_and_all_to_all_rechunks_run_on_the_workers_with_the_schedulers_bits(held, kernel):
    s, x, workers = held
    build = {"stencil": lambda x: x.map_overlap(_padded, depth=1, boundary="nearest", dtype=x.dtype),
             "rechunk-transpose": lambda x: x.T.rechunk({0: 48, 1: -1}).sum(axis=1)}[kernel]
    value, scheduled, sent = _tasks_seen(s, lambda: s.compute(build(x)))
    assert not scheduled and {r["worker"] for r in sent} == set(workers), (s.running.path, scheduled)
    through = s.compute(build(x), workers=workers)  # pinned: the scheduler's run
    assert s.running.path.path == "through the scheduler"
    np.testing.assert_array_equal(value, through)
    a = s.compute(x)
    want = _padded(np.pad(a, 1, mode="edge"))[1:-1, 1:-1] if kernel == "stencil" else a.T.sum(axis=1)
    np.testing.assert_allclose(value, want, rtol=1e-12)


def test_the_profiler_sees_the_views_each_worker_cut_for_another(held):
    from dask.utils import key_split

    s, x, workers = held
    _, _, sent = _tasks_seen(s, lambda: s.compute(x.map_overlap(_padded, depth=1, boundary="nearest", dtype=x.dtype)))
    cut = [r for r in sent if key_split(r["key"]) == "getitem"]
    assert cut and {r["worker"] for r in cut} == set(workers)
    assert all(r["startstops"][0]["start"] <= r["startstops"][0]["stop"] for r in cut)


def _refuses(block):
    raise ValueError("a block the user's stencil refuses")


def test_a_stencil_that_raises_raises_the_users_error(held):
    s, x, _ = held
    with pytest.raises(Exception, match="a block the user's stencil refuses"):
        s.compute(x.map_overlap(_refuses, depth=1, boundary="nearest", dtype=x.dtype))
    assert s.compute(x.map_overlap(_padded, depth=1, boundary="nearest", dtype=x.dtype)).shape == x.shape


def test_a_rechunk_of_the_whole_array_is_no_stencil(held):
    """Every output needs every block: cut per output, each worker takes its share of the pieces."""
    s, x, workers = held
    y = x.rechunk((128, 48))
    value, scheduled, sent = _tasks_seen(s, lambda: s.compute(y))
    np.testing.assert_array_equal(value, s.compute(x))
    assert not scheduled and {r["worker"] for r in sent} == set(workers)


_OPS = {
    "stencil": lambda x, depth, boundary, chunks: x.map_overlap(_padded, depth=depth, boundary=boundary, dtype=x.dtype),
    "overlap-sum": lambda x, depth, boundary, chunks: x.map_overlap(np.cumsum, depth=depth, boundary=boundary, axis=0, dtype=x.dtype),
    "rechunk": lambda x, depth, boundary, chunks: x.rechunk(chunks),
    "transpose-rechunk-sum": lambda x, depth, boundary, chunks: x.T.rechunk(chunks).sum(axis=1),
}


# dask's sizeof samples big collections with the random module's own generator, on the client's event loop thread
# (distributed's, ~70 calls a session here): a draw that overlaps one reads as a strategy that used random.
@pytest.mark.filterwarnings("ignore:Do not use the `random` module inside strategies:hypothesis.errors.HypothesisDeprecationWarning")
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(_OPS)), st.tuples(st.integers(8, 64), st.integers(8, 48)), st.tuples(st.integers(3, 24), st.integers(3, 24)),
       st.integers(1, 2), st.sampled_from(["nearest", "reflect", "periodic", 0.5]), st.tuples(st.integers(2, 30), st.integers(2, 30)))
def test_any_stencil_or_rechunk_gives_the_schedulers_bits(held, name, shape, chunks, depth, boundary, target):
    """Any shape, chunking, depth, boundary and target chunks: straight to the workers or not, the scheduler's result."""
    s, _, workers = held
    with dask.annotate(workers=lambda key: [workers[sum(key[1:]) % 2]]):  # blocks on alternate workers
        made = s.array(shape, "float64", fill="random", seed=sum(shape), chunks=chunks)
    assume("overlap" not in name and name != "stencil" or min(map(min, made.chunks)) > depth)  # blocks deeper than the overlap
    x = s.client.persist(made, optimize_graph=False)
    distributed.wait(x)
    run = _OPS[name]
    value = s.compute(run(x, depth, boundary, target))
    np.testing.assert_array_equal(value, s.compute(run(x, depth, boundary, target), workers=workers))
    del x


def _dies_once(marker, here, block):
    """The stencil's function, but its first call in a worker process kills that process (SIGKILL, mid-run)."""
    import os
    import signal

    if os.getpid() == here:  # dask calls it in the test's process too, on a tiny block, for its result's type
        return _padded(block)
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL)
    except FileExistsError:
        return _padded(block)
    os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_worker_killed_during_a_run_with_cuts_leaves_the_right_answer(tmp_path):
    """A worker dies inside a direct run whose parts read slices cut by the other: the compute goes to the scheduler,
    which recomputes the lost blocks, and the answer is the stencil's."""
    import functools
    import os

    import openclaw_dask

    with openclaw_dask.session(backend="process", workers=2, timeout="60s") as s:
        workers = sorted(s.client.scheduler_info()["workers"])
        # loosely: the lost blocks are recomputed on the restarted worker, which has another address
        with dask.annotate(workers=lambda key: [workers[key[1] % 2]], allow_other_workers=True):
            made = s.array((128, 64), "float64", fill="random", seed=5, chunks=(32, 64))
        x = s.client.persist(made, optimize_graph=False)
        distributed.wait(x)
        want = s.compute(x.map_overlap(_padded, depth=1, boundary="nearest", dtype=x.dtype))
        assert s.running.path.path == "straight to the workers"
        dies = functools.partial(_dies_once, str(tmp_path / "died"), os.getpid())
        got = s.compute(x.map_overlap(dies, depth=1, boundary="nearest", dtype=x.dtype))
        assert (tmp_path / "died").exists()  # a worker did die
        np.testing.assert_array_equal(got, want)
