"""Many tiny independent tasks of a ``dask.delayed`` graph run as a few batch tasks.

A loop of small calls (``[delayed(f)(i) for i in range(1000)]``) makes one task per call, and
each costs the engine its fixed per-task time (``Engine.task_overhead_s``: ~0.3 ms on dask's
local schedulers, ~2.7 ms on worker processes), far more than a call that takes microseconds.
Before :meth:`Session.compute <openclaw_dask.Session.compute>` runs delayed objects, this pass:

1. finds groups of at least :data:`MIN_GROUP` tasks with the same name (dask's ``key_split``),
   no dependencies, and not asked for as results;
2. when the engine's tasks can run in this process (``Engine.tasks_run_here``), times the first
   tasks of each group here, as :func:`~openclaw_dask.dataflow.map` does, and keeps their
   results when they are small (bigger ones are dropped, and those tasks run again on the engine);
3. puts each group into tasks of :func:`~openclaw_dask.dataflow.batched.plan_batches`' size,
   named ``(<name>-<token>, i)`` so the profiler counts them under the user's task name; each
   consumer reads its item out of the batch's tuple inside its own task (no extra tasks).

Results are those of the unbatched graph: the same calls on the same arguments. Graphs of at
least :data:`MIN_GROUP` layers also reach dask as one flat layer (several results: one task that
packs them), whether or not anything was batched: dask culls one layer per delayed call in
quadratic time (2,000 calls: ~0.4 s). Smaller graphs are left exactly as they are.
"""

from __future__ import annotations

import logging
import operator
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from openclaw_dask.dataflow._tasks import token
from openclaw_dask.dataflow.batched import PROBE_S, plan_batches

if TYPE_CHECKING:
    from openclaw_dask.cluster import SessionLike

__all__ = ["MIN_GROUP", "SmallTasks", "Unpack", "batch_small_tasks"]

logger = logging.getLogger("openclaw_dask.dataflow")

MIN_GROUP = 32  # fewer same-named tasks than this are never worth a pass
KEEP_BYTES = 64 * 2**10  # a timed task's result at most this big goes into the graph as data


Unpack = Callable[[tuple[Any, ...]], tuple[Any, ...]]  # what was computed -> the results of the collections asked for


@dataclass(frozen=True)
class SmallTasks:
    """What the pass did to one graph (``Session.small_tasks``, and logged): ``{name: (tasks, batch tasks)}`` and why."""

    groups: dict[str, tuple[int, int]]
    reason: str

    def __str__(self) -> str:
        parts = ", ".join(f"{n} '{name}' tasks in {b} batch task(s)" for name, (n, b) in self.groups.items())
        return f"{parts} ({self.reason})"


def _pack(*values: Any) -> tuple[Any, ...]:
    return values


def _groups(graph: dict[Any, Any], outputs: set[Any]) -> dict[str, list[Any]]:
    from dask._task_spec import Task
    from dask.utils import key_split

    groups: dict[str, list[Any]] = defaultdict(list)
    for key, node in graph.items():
        if isinstance(node, Task) and not node.dependencies and key not in outputs:
            groups[key_split(key)].append(key)
    return {name: keys for name, keys in groups.items() if len(keys) >= MIN_GROUP}


def _probe(graph: dict[Any, Any], keys: list[Any], subs: dict[Any, Any]) -> tuple[int, float] | None:
    """Run ``keys``' first tasks here for :data:`PROBE_S`: how many ran and seconds per task; None if one raised.

    A small result leaves ``graph`` and goes into ``subs``, to be inlined into its consumers as data
    (a data node of its own would still be a task on a cluster's scheduler); a raising task is left
    for the engine to report.
    """
    from dask._task_spec import DataNode
    from dask.sizeof import sizeof

    done = 0
    t0 = time.perf_counter()
    while done < len(keys) and (time.perf_counter() - t0 < PROBE_S or not done):
        key = keys[done]
        try:
            value = graph[key]({})
        except Exception:  # noqa: BLE001 - the engine reports it, as it would without the pass
            return None
        if sizeof(value) <= KEEP_BYTES:
            del graph[key]
            subs[key] = DataNode(None, value)
        done += 1
    return done, (time.perf_counter() - t0) / done


def _batch(graph: dict[Any, Any], name: str, keys: list[Any], size: int) -> dict[Any, Any]:
    """Put ``keys`` into tasks of ``size``; returns what each old key becomes inside its consumers."""
    from dask._task_spec import Task, TaskRef

    tag, subs = f"{name}-{token()}", {}
    for i, start in enumerate(range(0, len(keys), size)):
        chunk = keys[start:start + size]
        batch = Task((tag, i), _pack, *(graph.pop(k) for k in chunk))
        graph[batch.key] = batch
        subs.update({k: Task(None, operator.getitem, TaskRef(batch.key), j) for j, k in enumerate(chunk)})
    return subs


def _batched(session: SessionLike, graph: dict[Any, Any], outputs: set[Any]) -> SmallTasks | None:
    """Batch ``graph``'s groups of tiny tasks in place; what was done, or None."""
    subs: dict[Any, Any] = {}
    done: dict[str, tuple[int, int]] = {}
    reasons: set[str] = set()
    for name, keys in _groups(graph, outputs).items():
        probed = _probe(graph, keys, subs)
        if probed is None:
            continue
        ran, item_s = probed
        rest = keys[ran:]
        plan = plan_batches(len(rest), item_s, session.engine.task_overhead_s, session.slots)
        if plan.batch_size > 1:
            subs.update(_batch(graph, name, rest, plan.batch_size))
        done[name] = (len(keys), plan.n_tasks if plan.batch_size > 1 else len(rest))
        reasons.add(plan.reason if rest else f"all ran while timed here, under {PROBE_S * 1e3:g} ms")
    for key, node in graph.items():
        if node.dependencies & subs.keys():
            graph[key] = node.substitute(subs)
    return SmallTasks(done, "; ".join(sorted(reasons))) if done else None


def _same(results: tuple[Any, ...]) -> tuple[Any, ...]:
    return results


def _layers(collections: list[Any]) -> int:
    return sum(len(getattr(c.dask, "layers", (c,))) for c in collections)  # a Delayed's graph: one layer per call


def batch_small_tasks(session: SessionLike, collections: list[Any]) -> tuple[list[Any], Unpack, SmallTasks | None]:
    """What to compute for ``collections``, how its results become theirs, and what was batched (or None).

    Only graphs of :class:`dask.delayed.Delayed` objects are touched (arrays and dataframes size
    their tasks by their chunks). Those become one flat graph, and several of them one task that
    packs their results: dask culls a graph of one layer per delayed call in quadratic time
    (2,000 calls: ~0.4 s), one flat layer in linear time.
    """
    from dask.delayed import Delayed

    if not all(type(c) is Delayed for c in collections) or _layers(collections) < MIN_GROUP:
        return collections, _same, None  # nothing to batch, and a few layers cull fast: a small compute pays nothing
    from dask._task_spec import Task, TaskRef, convert_legacy_graph

    graph: dict[Any, Any] = {}
    for c in collections:
        graph.update(convert_legacy_graph(dict(c.__dask_graph__().items())))
    small = _batched(session, graph, {c.key for c in collections}) if session.engine.tasks_run_here else None
    if small is not None:
        logger.info("small tasks: %s", small)
    if len(collections) == 1:
        return [Delayed(collections[0].key, graph)], _same, small
    packed = Task(f"openclaw-results-{token()}", _pack, *(TaskRef(c.key) for c in collections))
    graph[packed.key] = packed
    return [Delayed(packed.key, graph)], operator.itemgetter(0), small
