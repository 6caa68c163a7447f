"""A graph's aliases are resolved where its scheduler materializes it (``cluster/aliases.py``)."""

from __future__ import annotations

import operator

import dask
import dask.array as da
import numpy as np
import pytest
from dask._task_spec import Alias, DataNode, Task, TaskRef
from dask.base import collections_to_expr
from dask.core import flatten
from dask.local import get_sync
from distributed import get_task_stream, wait
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import openclaw_dask
from openclaw_dask import Session, load_config
from openclaw_dask.cluster import running_of
from openclaw_dask.cluster.aliases import unaliased
from tests.conftest import dask_deployment

ENGINES = {
    "process": {"parallel.backend": "process", "parallel.workers": 2},
    "in-process": {"parallel.engine": "distributed", "parallel.workers": 2},
}

base = da.arange(48 * 40, dtype="float64").reshape(48, 40).rechunk((12, 20))

OPS = {
    "map_overlap, nearest": lambda x: x.map_overlap(lambda b: b * 2, depth=1, boundary="nearest"),
    "map_overlap, periodic": lambda x: x.map_overlap(lambda b: b + 1, depth=2, boundary="periodic"),
    "map_overlap, none": lambda x: x.map_overlap(lambda b: b - 1, depth=1, boundary="none"),
    "transpose, rechunk, sum": lambda x: x.T.rechunk({0: 10, 1: -1}).sum(axis=1),
    "strided slice": lambda x: x[::3, 5:33],
    "concatenate": lambda x: da.concatenate([x, x[:, ::-1]], axis=0) + 1,
    "stack": lambda x: da.stack([x, 2 * x]).sum(axis=0),
    "flattened": lambda x: x.reshape(-1)[::2],
    "diff": lambda x: da.diff(x, axis=0),
    "cumsum": lambda x: x.cumsum(axis=1),
    "sum along an axis": lambda x: x.sum(axis=0),
}


def graph_of(*arrays):
    expr = collections_to_expr(list(arrays)).optimize()
    return dict(expr.__dask_graph__()), list(flatten(expr.__dask_keys__()))


def aliases(graph):
    return {k for k, node in graph.items() if isinstance(node, Alias)}


def assert_same_results(graph, keys):
    out = unaliased(graph, keys)
    assert aliases(out) <= set(keys), "an alias that is not a result is left"
    assert set(keys) <= set(out)
    assert len(out) == len(graph) - len(aliases(graph) - set(keys))
    for a, b in zip(get_sync(graph, keys), get_sync(out, keys), strict=True):
        np.testing.assert_array_equal(b, a)


@pytest.mark.parametrize("name", sorted(OPS))
def test_a_graph_without_its_aliases_gives_the_same_results(name):
    graph, keys = graph_of(OPS[name](base))
    assert aliases(graph), "this operation no longer makes aliases: pick another"
    assert_same_results(graph, keys)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(sorted(OPS)), min_size=1, max_size=3),
       st.tuples(st.integers(5, 48), st.integers(5, 40)), st.booleans())
def test_any_chain_of_operations_gives_the_same_results(names, chunks, both):
    """Any chunks and any chain of aliasing operations, asked for alone or beside an intermediate result."""
    x, arrays = base.rechunk(chunks), []
    for name in names:
        # what the chain left must be something the next operation takes: a strided slice of 4 columns was
        # empty, and a stencil over it raised in dask (hypothesis found it in a CI run)
        assume(min(x.shape) >= 3)
        x = OPS[name](x)
        x = x if x.ndim == 2 else x.reshape(-1)[:, None] * da.ones((1, 40), chunks=20)  # 2-d again for the next
        arrays.append(x)
    graph, keys = graph_of(*(arrays if both else arrays[-1:]))
    assert_same_results(graph, keys)


def test_readers_read_the_end_of_a_chain_and_result_aliases_stay():
    graph = {
        "x": DataNode("x", 3),
        "y": Alias("y", "x"),
        "z": Alias("z", "y"),
        "w": Task("w", operator.add, TaskRef("z"), 1),
        "far": Alias("far", "persisted"),  # its target is not in the graph: already on the workers
        "v": Task("v", operator.neg, TaskRef("far")),
    }
    out = unaliased(graph, ["w", "z", "v"])
    assert set(out) == {"x", "z", "w", "v"}
    assert out["w"].dependencies == {"x"} and out["v"].dependencies == {"persisted"}
    assert out["z"].target == "x"  # a result asked for keeps its key, named after the end of its chain


def test_old_style_graphs_are_converted_first():
    graph = {"x": 1, "y": "x", "w": (operator.add, "y", 1)}
    out = unaliased(graph, ["w"])
    assert set(out) == {"x", "w"} and get_sync(out, "w") == 2


def test_only_an_expression_that_culls_itself_is_wrapped():
    """The scheduler culls a plain graph (a dict, an ``LLGExpr``) itself, and only those: they go as they are."""
    from dask._expr import LLGExpr

    from openclaw_dask.cluster.aliases import Unaliased
    from openclaw_dask.cluster.compute import _get

    class Sent:  # what Client.get was handed
        def get(self, expr, keys, **kwargs):
            return expr

    expr = collections_to_expr([OPS["strided slice"](base)]).optimize()
    plain = {"x": DataNode("x", 1)}
    assert isinstance(_get(Sent(), expr, expr.__dask_keys__(), True), Unaliased)
    assert _get(Sent(), expr, expr.__dask_keys__(), False) is expr
    assert _get(Sent(), plain, ["x"], True) is plain
    assert isinstance(_get(Sent(), LLGExpr(plain), ["x"], True), LLGExpr)


@pytest.fixture(params=list(ENGINES), scope="module")
def s(request):
    with Session(load_config(None, ENGINES[request.param])).start() as session:
        yield session


def persisted(s, x):
    x = s.persist(x)
    wait(x)  # its tasks done before any task stream starts
    return x


def ran(s, compute, what="key"):
    """What ``compute()`` returns, and ``what`` of each task the workers ran for it (its key, its worker)."""
    with get_task_stream(client=running_of(s).client) as stream:
        result = compute()
    return result, {t[what] for t in stream.data}


def test_no_alias_runs_as_a_task_on_the_engine(s):
    assert running_of(s).computing["unalias"]  # its scheduler resolves them: it runs here, or it answered
    x = persisted(s, base)
    y = OPS["map_overlap, nearest"](x)
    graph, keys = graph_of(y)
    # pinned to the workers: through the scheduler (unpinned, a stencil over held blocks goes straight to them)
    result, keys_run = ran(s, lambda: s.compute(y, workers=sorted(running_of(s).workers())))
    np.testing.assert_array_equal(result, OPS["map_overlap, nearest"](base).compute(scheduler="sync"))
    assert keys_run and not keys_run & (aliases(graph) - set(keys))
    assert len(keys_run) <= len(graph) - len(aliases(graph) - set(keys))


def test_a_plain_compute_and_two_arrays_at_once_too(s):
    x = persisted(s, base)
    names = ["map_overlap, nearest", "map_overlap, periodic"]
    y, z = (OPS[name](x) for name in names)
    expected = [OPS[name](base).compute(scheduler="sync") for name in names]
    pinned = sorted(running_of(s).workers())  # through the scheduler, whose resolving of aliases is checked
    both, keys_run = ran(s, lambda: dask.compute(y, z, workers=pinned))  # two arrays: dask's own graph, on to Client.get
    for got, want in zip(both, expected, strict=True):
        np.testing.assert_array_equal(got, want)
    graph, keys = graph_of(y, z)
    assert keys_run and not keys_run & (aliases(graph) - set(keys))
    one, keys_run = ran(s, lambda: y.compute(workers=pinned))
    np.testing.assert_array_equal(one, expected[0])
    graph, keys = graph_of(y)
    assert keys_run and not keys_run & (aliases(graph) - set(keys))


def test_annotations_still_reach_the_scheduler(s):
    """A task annotated to run on one worker does, through the scheduler's resolving of aliases."""
    x = persisted(s, base)
    y = OPS["map_overlap, nearest"](x)
    for worker in sorted(running_of(s).workers()) * 2:  # each worker in turn: not where it would go anyway
        with dask.annotate(workers=[worker], allow_other_workers=False):
            total = dask.delayed(np.sum)(y)
        with get_task_stream(client=running_of(s).client) as stream:
            (result,) = dask.compute(total)
        assert result == OPS["map_overlap, nearest"](base).sum().compute(scheduler="sync")
        assert {t["worker"] for t in stream.data if t["key"] == total.key} == {worker}


def remote(address):
    return openclaw_dask.session(backend="remote", scheduler_address=address, workers=2, timeout="30s")


def test_a_scheduler_of_its_own_with_this_openclaw_resolves_them(dask_scheduler):
    address, add_worker = dask_scheduler
    add_worker()
    add_worker()
    with remote(address) as s:
        test_no_alias_runs_as_a_task_on_the_engine(s)


# a scheduler's preload that makes openclaw unimportable there: a scheduler someone else installed without it
WITHOUT_OPENCLAW = """
import sys

class NoOpenclaw:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "openclaw_dask":
            raise ImportError(f"no {name} on this scheduler")

sys.meta_path.insert(0, NoOpenclaw())
"""


def test_a_scheduler_without_openclaw_gets_the_graph_as_it_is(tmp_path):
    preload = tmp_path / "without_openclaw.py"
    preload.write_text(WITHOUT_OPENCLAW)
    with dask_deployment(tmp_path, ["--preload", str(preload)]) as (address, add_worker):
        add_worker()
        add_worker()
        with remote(address) as s:
            assert not running_of(s).computing["unalias"]
            y = OPS["map_overlap, nearest"](persisted(s, base))
            result, keys_run = ran(s, lambda: s.compute(y))
            np.testing.assert_array_equal(result, OPS["map_overlap, nearest"](base).compute(scheduler="sync"))
            assert keys_run & aliases(graph_of(y)[0]), "its aliases ran as tasks, as distributed runs them"
