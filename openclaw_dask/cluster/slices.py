"""Branching computes over held blocks split per output, each output's slices of other workers' blocks cut there.

Why. A stencil (``map_overlap``) or an all-to-all rechunk is one connected part: each output reads
slices of its neighbours' blocks (an edge row, a rechunk's piece), and the outputs are joined by
the views and slices they share. Direct runs (:mod:`~openclaw_dask.cluster.direct`) send a part to
one worker, so such a compute, which would leave threads idle, went to the scheduler: a 64 MiB
stencil on 2 worker processes spent 45 ms of 117 before its first block task, placing ~40 slicing
tasks of a few µs a round trip at a time; serial took 102 ms (docs/benchmarks.md, twenty-fifth pass).

What.

1. :func:`per_output`: each output of a branching part becomes a part of its own, the tasks it
   needs. A task needed by several outputs runs once for each, so every such task must be a view
   or a slice (:func:`view`: an alias, ``getitem`` or ``transpose`` of NumPy's, dask's or
   ``operator``'s, on constants): nothing a user wrote and nothing costly runs twice.
2. :func:`sliced`: a block such a part reads only through slices (each path from it a chain of
   views ending in a ``getitem``) need not move whole. :func:`~openclaw_dask.cluster.direct.apart`
   sends each part to the worker holding the most bytes it reads whole (a part that reads only
   slices, as an all-to-all rechunk's do, to the least loaded); where a sliced block lies on
   another worker, :func:`cut_elsewhere` hands its chain of views to that worker, which runs it on
   its data and sends only the slices: an edge row, not the block.

Results are the same: the same functions on the same blocks.
"""

from __future__ import annotations

import functools
from collections import Counter
from typing import TYPE_CHECKING, Any, NamedTuple

from openclaw_dask.cluster.graph_parts import Part, split

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = ["Cut", "cut_elsewhere", "per_output", "sliced", "view"]

_MAX_COPIES = 4  # tasks, counted once per output that needs them, over the part's: more is a broadcast, not slices


class Cut(NamedTuple):
    """The views a part takes of blocks: their tasks in the order they run, the slices the part reads, the blocks."""

    tasks: tuple[Any, ...]  # dask._task_spec.GraphNode
    slices: tuple[Any, ...]
    blocks: tuple[Any, ...]

    def merged(self, other: Cut) -> Cut:
        """Both cuts, as one message to the worker holding their blocks (a view two parts take, once)."""
        keys = {task.key for task in self.tasks}
        return Cut(self.tasks + tuple(t for t in other.tasks if t.key not in keys), tuple(dict.fromkeys(self.slices + other.slices)),
                   tuple(dict.fromkeys(self.blocks + other.blocks)))


@functools.cache
def _views() -> frozenset[Any]:
    import numpy as np

    return _getitems() | {np.transpose}


@functools.cache
def _getitems() -> frozenset[Any]:
    import operator

    from dask.array.chunk import getitem

    return frozenset({operator.getitem, getitem})


def view(node: Any) -> bool:
    """Whether ``node`` is an alias, or a ``getitem`` or ``transpose`` of NumPy's, dask's or ``operator``'s on
    constants (dask's fused tasks of those too): cheap, and no user code."""
    from dask._task_spec import Alias, Task, _execute_subgraph

    from openclaw_dask.cluster.tails import libraries_only

    if isinstance(node, Alias):
        return True
    if not isinstance(node, Task):
        return False
    if node.func is _execute_subgraph:
        inner = next((a for a in node.args if isinstance(a, dict)), None)
        return inner is not None and all(map(view, inner.values()))
    if node.func not in _views() or not all(isinstance(a, Alias) or libraries_only(a) for a in (*node.args, *node.kwargs.values())):
        return False  # (an alias as an argument reads the task it names)
    return node.func not in _getitems() or len(node.args) == 2 and _basic(_constant(node.args[1]))


def _constant(arg: Any) -> Any:
    from dask._task_spec import DataNode

    return arg.value if isinstance(arg, DataNode) else arg


def _basic(index: Any) -> bool:
    """Whether ``index`` is NumPy's basic indexing (slices, integers, ``None``, ``...``): a view, no bigger than what
    it cuts."""
    parts = index if isinstance(index, tuple) else (index,)
    return all(isinstance(i, (slice, int)) or i is None or i is Ellipsis for i in parts) and not any(
        isinstance(i, bool) for i in parts)


def per_output(part: Part) -> list[Part] | None:
    """``part`` as one part per output (each the tasks that output needs), or ``None``: one output, a task that is not
    a view needed by several, or views needed by so many that splitting and sending them would cost more than the
    scheduler's round (over :data:`_MAX_COPIES` tasks per task of the part)."""
    if len(part.outputs) < 2:
        return None
    tasks = {task.key: task for task in part.tasks}
    needs = {output: _needed(tasks, output) for output in part.outputs}
    shared = Counter(key for keys in needs.values() for key in keys)
    if sum(shared.values()) > _MAX_COPIES * len(tasks) or any(n > 1 and not view(tasks[key]) for key, n in shared.items()):
        return None
    parts = []
    for output, keys in needs.items():
        found = split({task.key: task for task in part.tasks if task.key in keys}, (output,))
        if isinstance(found, str) or len(found) != 1:
            return None
        parts.append(found[0])
    return parts


def _needed(tasks: Mapping[Any, Any], output: Any) -> set[Any]:
    """The keys of ``tasks`` that ``output`` reads, itself included."""
    seen: set[Any] = set()
    todo = [output]
    while todo:
        key = todo.pop()
        if key in seen or key not in tasks:
            continue
        seen.add(key)
        todo.extend(tasks[key].dependencies)
    return seen


def sliced(part: Part) -> dict[Any, Cut]:
    """The blocks ``part`` reads only through slices, each with the views it takes of it (see the module's docstring)."""
    cuts = {}
    for block in part.reads:
        taken: dict[Any, Any] = {}
        for task in part.tasks:  # in the order they run: a view of the block, or of views of it
            if task.dependencies and task.dependencies <= {block, *taken} and view(task):
                taken[task.key] = task
        read = {dep for task in part.tasks if task.key not in taken for dep in task.dependencies}
        slices = tuple(key for key in taken if key in read or key in part.outputs)
        if block not in read and slices and all(_getitem(taken[key]) for key in slices):
            cuts[block] = Cut(tuple(taken.values()), slices, (block,))
    return cuts


def _getitem(node: Any) -> bool:
    from dask._task_spec import Task

    return isinstance(node, Task) and node.func in _getitems()


def cut_elsewhere(part: Part, cuts: Mapping[Any, Cut], held_here: Iterable[Any]) -> tuple[Part, dict[Any, Cut]]:
    """``part`` without the views it takes of blocks not ``held_here`` (it reads their slices instead), and those
    views by block, for the workers holding them to run."""
    here = set(held_here)
    away = {block: cut for block, cut in cuts.items() if block not in here}
    if not away:
        return part, {}
    moved = {task.key for cut in away.values() for task in cut.tasks}
    slices = tuple(key for cut in away.values() for key in cut.slices)
    reads = tuple(key for key in part.reads if key not in away) + slices
    kept = tuple(task for task in part.tasks if task.key not in moved)
    return part._replace(tasks=kept, reads=reads, slices=part.slices + slices), away
