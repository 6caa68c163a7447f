"""A compute's graph as its independent parts: tasks joined by what they read of each other (cluster/direct.py)."""

from __future__ import annotations

from collections import Counter
from graphlib import TopologicalSorter
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = ["MAX_TASKS", "Part", "split"]

MAX_TASKS = 4096  # a bigger graph goes to the scheduler: splitting it here would cost what it saves


class Part(NamedTuple):
    """Tasks that read each other's outputs: in the order they run, the worker's data they read, the outputs wanted,
    and whether they branch (a task reads two of the part's, or two read one): else a chain."""

    tasks: tuple[Any, ...]  # dask._task_spec.GraphNode
    reads: tuple[Any, ...]
    outputs: tuple[Any, ...]
    branches: bool = False
    slices: tuple[Any, ...] = ()  # of ``reads``, slices of blocks that the workers holding them cut (cluster/slices.py)


def split(graph: Mapping[Any, Any], outputs: Iterable[Any]) -> list[Part] | str:
    """``graph``'s independent parts, each tasks reading data outside the graph (the workers'), or none; else why not
    (an output is not a task of the graph, the graph is not dask's task specs).

    A chain (each task reads at most one other of its part, and is read by at most one) runs on one thread as fast
    as on several, and holds one intermediate at a time. A part that fans in or out (a rechunk's merges, the combines
    of blocks on several workers) runs on one thread too, where the scheduler would run its branches on several: it
    goes straight to the workers only when every task thread gets a part (:func:`idle_threads`), as matmul's output
    rows do on 2 worker processes of one thread each.
    """
    from dask._task_spec import GraphNode

    wanted = set(outputs)
    if len(graph) > MAX_TASKS:
        return f"over {MAX_TASKS} tasks"
    if not wanted <= graph.keys() or not all(isinstance(v, GraphNode) for v in graph.values()):
        return "its results are held data, or not dask's tasks"
    parent = {key: key for key in graph}

    def root(key: Any) -> Any:
        while parent[key] != key:
            parent[key] = key = parent[parent[key]]
        return key

    read_by: Counter[Any] = Counter()
    fans_in: set[Any] = set()  # tasks reading two others of the graph (their parts are known once all are joined)
    for key, node in graph.items():
        within = [dep for dep in node.dependencies if dep in graph]
        if len(within) > 1:
            fans_in.add(key)
        for dep in within:
            parent[root(dep)] = root(key)
            read_by[dep] += 1
    branching = {root(key) for key in fans_in} | {root(key) for key, n in read_by.items() if n > 1}
    members: dict[Any, list[Any]] = {}
    for key in graph:
        members.setdefault(root(key), []).append(key)
    parts = []
    for top, keys in members.items():
        inside = set(keys)
        reads = {dep for key in keys for dep in graph[key].dependencies if dep not in inside}
        order = TopologicalSorter({key: graph[key].dependencies & inside for key in keys}).static_order()
        parts.append(Part(tuple(graph[k] for k in order), tuple(reads), tuple(k for k in keys if k in wanted), top in branching))
    return parts
