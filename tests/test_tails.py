"""A reduction's last combine runs in the client on a distributed engine (``cluster/tails.py``)."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest
from dask.utils import key_split
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openclaw_dask import Session, load_config
from openclaw_dask.cluster import here, running_of
from openclaw_dask.cluster.base import Capabilities
from openclaw_dask.cluster.tails import LOCAL_MAX_BYTES, MAX_BYTES, tail_of, tails_bound
from openclaw_dask.diagnostics.collect import collect

ENGINES = {
    "process": {"parallel.backend": "process", "parallel.workers": 2},
    "in-process": {"parallel.engine": "distributed", "parallel.workers": 2},
}

x = da.arange(10_000, chunks=1_000, dtype="float64") % 7 - 3.5  # 10 chunks: one level of partials, then the combine
few = da.arange(2_000, chunks=1_000, dtype="float64")  # 2 chunks: the combine reads the chunks' sums directly
m = da.arange(60_000, chunks=6_000, dtype="float64").reshape(600, 100).rechunk((60, 100))
g = da.from_array(np.random.default_rng(0).random((600, 8)), chunks=(60, 8))  # g.T @ g: well conditioned
# solve(g.T @ g, its first column) is exactly (1, 0, ..., 0), up to rounding. Not g.T @ v for a vector v: matrix-vector
# products of the same blocks gave other bits from compute to compute on 2 worker processes, with or without openclaw
# (raw distributed: 2-4 versions in 5-8 computes), so the engine's own runs differ

REDUCTIONS = {
    "sum": lambda: x.sum(),
    "two-chunk sum": lambda: few.sum(),
    "mean": lambda: x.mean(),
    "var": lambda: x.var(),
    "max": lambda: x.max(),
    "argmin": lambda: x.argmin(),
    "tree of fan-in 2": lambda: (x * x).sum(split_every=2),
    "along an axis": lambda: m.sum(axis=0),
    "dot": lambda: da.dot(x, x),
    "of unknown chunks": lambda: x[x > 0].sum(),
    "std: sqrt of var's combine": lambda: x.std(),
    "a combine divided": lambda: x.sum() / x.size,
    "norm": lambda: da.linalg.norm(x),
    "two combines' ratio": lambda: x.max() / few.sum(),
    "least squares: NumPy's solve of two combines": lambda: da.blockwise(
        np.linalg.solve, "i", g.T @ g, "ij", (g.T @ g)[:, 0], "j", concatenate=True, dtype="float64"),
}


@pytest.fixture(params=list(ENGINES), scope="module")
def s(request):
    with Session(load_config(None, ENGINES[request.param])).start() as session:
        yield session


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_dask_reductions_end_in_a_combine_that_may_run_here(name):
    end = tail_of(REDUCTIONS[name]())
    assert end is not None and any(key_split(t.key).endswith("-aggregate") for t in end.tasks)


def plus_one(a):
    return a + 1


def add_k(a, k):
    return a + k


def test_other_ends_stay_on_the_engine():
    assert tail_of(x + 1) is None and tail_of(x.map_blocks(np.negative)) is None
    assert tail_of(x.sum().map_blocks(plus_one)) is None  # a user's function: it may need a worker, or take long
    with dask.annotate(resources={"GPU": 1}):
        pinned = x.sum()
    assert tail_of(pinned) is None  # annotations (resources, workers) are the engine's to honour
    wide = da.ones((50_000, 40), chunks=(50_000, 1)).sum(axis=1)  # one 400 KB result from 40 partials of 400 KB
    assert wide.npartitions == 1 and 40 * wide.nbytes > MAX_BYTES and tail_of(wide) is None
    assert 40 * 8 * wide.nbytes > LOCAL_MAX_BYTES and tail_of(wide, LOCAL_MAX_BYTES) is None  # partials may be 8x the result
    # a step that is not element-wise may make more than it reads: its result, by its layer's shape, within the bound
    spread_out = da.blockwise(np.resize, "j", x.sum(keepdims=True), "i", new_axes={"j": 400_000}, new_shape=400_000,
                              dtype="float64")
    assert spread_out.nbytes > MAX_BYTES and tail_of(spread_out[:1]) is None and tail_of(spread_out[:1], LOCAL_MAX_BYTES)
    assert tail_of(x.sum(keepdims=True).map_blocks(add_k, k=2)) is None  # the user's function as data of dask's task
    assert tail_of(da.ones(10)) is None and tail_of(da.ones(10) + 1) is None  # no combine: made here, nothing gathered
    for wrapped in (np.vectorize(plus_one), np.frompyfunc(plus_one, 1, 1)):  # NumPy's wrappers of the user's function
        assert tail_of(da.blockwise(wrapped, "i", x.sum(keepdims=True), "i", meta=np.array((), "float64"))) is None


def test_the_bound_is_the_engines_by_where_its_workers_are():
    assert tails_bound(Capabilities(local_memory=True)) == LOCAL_MAX_BYTES
    assert tails_bound(Capabilities(local_memory=False)) == MAX_BYTES  # over a network


def test_more_partials_come_from_workers_of_this_machine():
    """A sum along an axis: 64 partials of 16 KiB, each taken as up to 8x that (a var's are 3 arrays)."""
    rows = da.ones((64 * 8, 2048), chunks=(8, 2048)).sum(axis=0)
    assert 64 * 8 * rows.nbytes > MAX_BYTES and tail_of(rows) is None
    end = tail_of(rows, LOCAL_MAX_BYTES)
    assert end is not None and [len(list(i.__dask_keys__())) for i in end.inputs] == [64]


def _same(a, b):
    return type(a) is type(b) and np.shape(a) == np.shape(b) and np.array_equal(a, b, equal_nan=True)


def test_the_result_is_the_engines_own_bit_for_bit(s):
    """The same combine on the same partials in the same order: every reduction, and several at once."""
    for name, make in REDUCTIONS.items():
        ran: list[str] = []
        with here.watched(lambda done: ran.extend(done)):
            mine = s.compute(make())
        assert any(n.endswith("-aggregate") for n in ran), name  # the combine did run in this process
        assert _same(mine, running_of(s).compute([make()], tails=0)[0]), name
    asked = (x.sum(), x + 1, m.mean(axis=1), few.max())  # combines and an array that is not one, in one compute
    together, alone = s.compute(*asked), running_of(s).compute(list(asked), tails=0)
    assert all(_same(a, b) for a, b in zip(together, alone, strict=True))
    assert tail_of(s.persist(x.sum())) is None  # a persisted result: its future is gathered as it is
    assert x.sum().compute() == together[0]  # a plain .compute() inside the session takes the same path


def test_the_profile_counts_the_combine_as_run_here(s):
    with collect(s) as record:
        assert s.compute(x.sum()) == pytest.approx(float((np.arange(10_000) % 7 - 3.5).sum()))
    groups = {t.group for t in record.tasks}
    assert record.ran_here["sum-aggregate"][0] == 1 and "sum-aggregate" not in groups and groups
    with collect(s) as record:
        s.compute(x.std())
    assert {"var-aggregate", "sqrt"} <= record.ran_here.keys() and not {"var-aggregate", "sqrt"} & {t.group for t in record.tasks}
    with collect(s) as record:
        s.compute(x.sum() / few.sum())  # two combines of one name in one tail: both counted
    assert record.ran_here["sum-aggregate"][0] == 2


def test_every_level_of_a_tree_of_combines_runs_here(s):
    deep = da.arange(64_000, chunks=1_000, dtype="float64")  # 64 chunks at fan-in 4: 16 and 4 partials, then the combine
    tree = (deep * deep).sum(split_every=4)
    with collect(s) as record:
        mine = s.compute(tree)
    assert mine == running_of(s).compute([tree], tails=0)[0]
    assert record.ran_here["sum-partial"][0] == 20 and record.ran_here["sum-aggregate"][0] == 1
    assert record.tasks and not {"sum-partial", "sum-aggregate"} & {t.group for t in record.tasks}  # the engine: the chunks
    end = tail_of(tree)
    assert end is not None and [len(list(i.__dask_keys__())) for i in end.inputs] == [64]  # only the chunks' sums come back


def test_partials_of_an_axis_come_here_from_workers_of_this_machine(s):
    rows = da.arange(64 * 8 * 2048, chunks=8 * 2048, dtype="float64").reshape(64 * 8, 2048).rechunk((8, 2048))
    with collect(s) as record:
        mine = s.compute(rows.sum(axis=0))  # 64 partials of 16 KiB: taken as 8 MiB, over the 1 MiB of a remote cluster
    assert _same(mine, running_of(s).compute([rows.sum(axis=0)], tails=0)[0])
    assert record.ran_here["sum-partial"][0] == 20 and record.ran_here["sum-aggregate"][0] == 1
    assert not {"sum-partial", "sum-aggregate"} & {t.group for t in record.tasks}
    with collect(s) as record:
        plain = rows.sum(axis=0).compute()  # a plain .compute() in the session: the same bound
    assert _same(plain, mine) and record.ran_here["sum-aggregate"][0] == 1


REDUCED = ("sum", "mean", "var", "std", "max", "min", "prod", "nansum", "nanmean", "any", "all", "argmin", "argmax")


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_reduction_along_any_axes_is_the_engines_own(s, data):
    """Fuzzed: shapes, chunks, axes, fan-ins and dtypes; the combines run here (when they may) or on the engine,
    bit for bit the same."""
    name = data.draw(st.sampled_from(REDUCED))
    if data.draw(st.booleans()):  # any shape
        rows, cols = data.draw(st.integers(1, 400)), data.draw(st.integers(1, 48))
        # at most ~16 chunks a side: (1, 1) chunks of 317 x 26 made 8,242 tasks, 27 s a compute on a CI host
        chunks = (data.draw(st.integers(max(1, rows // 16), rows)), data.draw(st.integers(max(1, cols // 16), cols)))
        axis = data.draw(st.sampled_from((0, 1, None) if name.startswith("arg") else (0, 1, None, (0, 1))))
    else:  # rows of wide partials: over the 1 MiB a remote cluster gathers, under this machine's bound
        height, cols = data.draw(st.integers(1, 4)), data.draw(st.integers(2048, 4096))
        rows, chunks, axis = height * data.draw(st.integers(8, 64)), (height, cols), 0
    dtype = data.draw(st.sampled_from(("float64", "float32", "int64")))
    seed = data.draw(st.integers(0, 2**16))
    values = np.random.default_rng(seed).standard_normal((rows, cols))
    values = 1 + values / 100 if name == "prod" else values * 100  # a product of hundreds of terms stays finite
    a = da.from_array(values.astype(dtype), chunks=chunks)
    reduced = getattr(da, name)(a, axis=axis, split_every=data.draw(st.sampled_from((None, 2, 3, 16))))
    assert _same(s.compute(reduced), running_of(s).compute([reduced], tails=0)[0])


def aggregate_on_a_worker(parts, axis, keepdims):
    from distributed import get_worker

    get_worker()  # raises ValueError outside a worker
    return np.sum(parts, axis=axis, keepdims=keepdims)


def test_a_combine_that_fails_here_runs_on_the_engine(s):
    y = da.reduction(x, np.sum, aggregate_on_a_worker, dtype="float64")
    with collect(s) as record:
        assert s.compute(y) == s.compute(x.sum())
    assert "aggregate_on_a_worker-aggregate" in {t.group for t in record.tasks}


def test_a_combine_that_always_fails_raises_as_the_engine_would(s):
    def broken(parts, axis, keepdims):
        raise ZeroDivisionError("the user's aggregate")

    with pytest.raises(ZeroDivisionError, match="the user's aggregate"):
        s.compute(da.reduction(x, np.sum, broken, dtype="float64"))
