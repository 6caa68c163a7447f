"""Many tiny independent tasks of a ``dask.delayed`` graph run as a few batch tasks.

A loop of small calls (``[delayed(f)(i) for i in range(1000)]``) makes one task per call, and
each costs the engine its fixed per-task time (``Engine.task_overhead_s``: ~0.3 ms on dask's
local schedulers, ~2.7 ms on worker processes), far more than a call that takes microseconds.
Before :meth:`Session.compute <openclaw_dask.Session.compute>` runs delayed objects, this pass:

1. finds groups of at least :data:`MIN_GROUP` tasks with the same name (dask's ``key_split``)
   and no dependencies (several results asked for: one task packs them first, so the tasks that
   make them are in groups too; a single result is the graph's last task);
2. when the engine's tasks can run in this process (``Engine.tasks_run_here``), times the first
   tasks of each group here, as :func:`~openclaw_dask.dataflow.map` does, and keeps their
   results when they are small (bigger ones are dropped, and those tasks run again on the engine);
   when the rest of a group would take less time here than one task costs the engine, it runs
   here too; and where the group and the result asked for are the whole graph, when it would take
   less than the round trip (:data:`ROUND_TRIP_TASKS` tasks) that sending any of it costs;
3. puts each group into tasks of :func:`~openclaw_dask.dataflow.batched.plan_batches`' size,
   named ``(<name>-<token>, i)`` so the profiler counts them under the user's task name; each
   consumer reads its item out of the batch's tuple inside its own task (no extra tasks);
4. when all that is left is the one last task (the result asked for, or the packing), its inputs
   all computed here, runs it here too: the engine would add a round trip and no parallelism.

The profiler reports what ran here (``SmallTasks.here``, told to :func:`openclaw_dask.cluster.here.tell`).

Results are those of the unbatched graph: the same calls on the same arguments. Graphs of at
least :data:`MIN_GROUP` layers also reach dask as one flat layer (several results: one task that
packs them), whether or not anything was batched: dask culls one layer per delayed call in
quadratic time (2,000 calls: ~0.4 s). Smaller graphs are left exactly as they are.
"""

from __future__ import annotations

import logging
import math
import operator
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from openclaw_dask.cluster.here import tell
from openclaw_dask.dataflow._tasks import token
from openclaw_dask.dataflow.batched import PROBE_S, plan_batches

if TYPE_CHECKING:
    from openclaw_dask.cluster import SessionLike

__all__ = ["MIN_GROUP", "SmallTasks", "Unpack", "batch_small_tasks"]

logger = logging.getLogger("openclaw_dask.dataflow")

MIN_GROUP = 32  # fewer same-named tasks than this are never worth a pass
KEEP_BYTES = 64 * 2**10  # a timed task's result at most this big goes into the graph as data
# A compute sent to a cluster costs a round trip (~7-9 ms to worker processes): about this many tasks' overhead. The
# tiny-tasks kernel's 1,000 calls took ~4 ms here on an AMD host: against one task's 2 ms, their rest went to the
# workers in 1 compute of 3 (75-79 ms instead of 9-15)
ROUND_TRIP_TASKS = 4


Unpack = Callable[[tuple[Any, ...]], tuple[Any, ...]]  # what was computed -> the results of the collections asked for


@dataclass(frozen=True)
class SmallTasks:
    """What the pass did to one graph (``Session.small_tasks``, and logged): ``{name: (tasks, batch tasks)}`` and why.

    ``here``: ``{name: (calls, seconds)}`` of the tasks that ran in this process, timed, and were not sent
    to the engine (the profiler reports them: :mod:`openclaw_dask.cluster.here`).
    """

    groups: dict[str, tuple[int, int]]
    reason: str
    here: dict[str, tuple[int, float]] = field(default_factory=dict)

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


def _probe(graph: dict[Any, Any], keys: list[Any], subs: dict[Any, Any], seconds: float = PROBE_S
           ) -> tuple[int, float] | None:
    """Run ``keys``' first tasks here for ``seconds``: how many ran and seconds per task; None if one raised.

    A small result leaves ``graph`` and goes into ``subs``, to be inlined into its consumers as data
    (a data node of its own would still be a task on a cluster's scheduler); a raising task is left
    for the engine to report.
    """
    from dask._task_spec import DataNode
    from dask.sizeof import sizeof

    done = 0
    t0 = time.perf_counter()
    while done < len(keys) and (time.perf_counter() - t0 < seconds or not done):
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
    here: dict[str, tuple[int, float]] = {}
    reasons: set[str] = set()
    overhead = session.engine.task_overhead_s
    for name, keys in _groups(graph, outputs).items():
        # the group and the results asked for are the whole graph: all of it here saves the engine's round trip
        budget = overhead * (ROUND_TRIP_TASKS if len(graph) - len(keys) <= len(outputs) else 1)
        probed = _probe(graph, keys, subs)
        if probed is None:
            continue
        ran, item_s = probed
        here[name] = (ran, ran * item_s)
        if 0 < len(keys) - ran and (len(keys) - ran) * item_s <= budget:  # the rest costs less here than there
            more = _probe(graph, keys[ran:], subs, seconds=math.inf)
            if more is not None:
                ran += more[0]
                here[name] = (ran, here[name][1] + more[0] * more[1])
        rest = keys[ran:]
        plan = plan_batches(len(rest), item_s, overhead, session.slots)
        if plan.batch_size > 1:
            subs.update(_batch(graph, name, rest, plan.batch_size))
        done[name] = (len(keys), plan.n_tasks if plan.batch_size > 1 else len(rest))
        reasons.add(plan.reason if rest else f"all ran here while timed ({overhead * 1e3:.1f} ms a task on this engine)")
    for key, node in graph.items():
        if node.dependencies & subs.keys():
            graph[key] = node.substitute(subs)
    return SmallTasks(done, "; ".join(sorted(reasons)), here) if done else None


def _ran_here(graph: dict[Any, Any], key: Any) -> tuple[tuple[Any], float] | None:
    """``key``'s result run here, and its seconds, when the pass left nothing else: one last task whose inputs all ran here.

    Sent to a cluster, that one task would cost the engine a round trip (~7-9 ms to worker
    processes) for no parallelism. None: something else is left, or it raised (the engine runs it
    again and reports what it raises, as without the pass).
    """
    if len(graph) != 1 or graph[key].dependencies:
        return None
    t0 = time.perf_counter()
    try:
        return (graph[key]({}),), time.perf_counter() - t0
    except Exception:  # noqa: BLE001 - the engine reports it, as it would without the pass
        return None


def _same(results: tuple[Any, ...]) -> tuple[Any, ...]:
    return results


def _unpacked(results: tuple[Any, ...]) -> tuple[Any, ...]:
    packed: tuple[Any, ...] = results[0]  # the packing task's tuple
    return packed


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
    from dask.utils import key_split

    graph: dict[Any, Any] = {}
    for c in collections:
        graph.update(convert_legacy_graph(dict(c.__dask_graph__().items())))
    key, unpack = collections[0].key, _same
    if len(collections) > 1:  # one task packs the results: the tasks that make them can be batched like any other
        packed = Task(f"openclaw-results-{token()}", _pack, *(TaskRef(c.key) for c in collections))
        graph[packed.key], key, unpack = packed, packed.key, _unpacked
    small = _batched(session, graph, {key}) if session.engine.tasks_run_here else None
    last = _ran_here(graph, key) if small is not None else None
    if small is not None:
        if last is not None and len(collections) == 1:  # the user's task (not openclaw's packing)
            small = replace(small, here={**small.here, key_split(key): (1, last[1])})
        logger.info("small tasks: %s", small)
        tell(small.here)
    if last is not None:
        return [], lambda _: unpack(last[0]), small  # nothing left for the engine
    return [Delayed(key, graph)], unpack, small
