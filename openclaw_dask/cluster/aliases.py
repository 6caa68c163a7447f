"""A graph's aliases resolved where its scheduler materializes it: each alias is a task to a distributed engine.

dask marks a key that only renames another (a chunk re-labelled by a rechunk, a slice, a
concatenation or the edges of ``map_overlap``) with ``Alias(key, target)``. dask's local
schedulers run it in microseconds; a distributed scheduler runs it as a task like any other:
a message to a worker, one back, and one scheduling round before the tasks that read it may
start. A 2-chunk ``map_overlap`` with ``boundary="nearest"`` has 20 of them in 46 tasks, up to 3
in a row before its user function starts; ``x.T.rechunk(...)`` 20 of 40.

:func:`unaliased` points every task that reads an alias at the alias's last target and drops
the alias. An alias that is itself a result asked for stays (the client asks for its key; the
task it names keeps its own key, so the profiler still reports the user's function by name).
Results are the same: an alias returns its target's value unchanged. :func:`without_aliases`
wraps a graph's expression so that the scheduler resolves them as it materializes the graph,
in its own thread, at no cost to the client. Its class must be importable there: a scheduler
that cannot read it fails the whole graph. So :mod:`~openclaw_dask.cluster.compute` wraps only
for a scheduler that :func:`resolved_by` says can: one in this process, or one that answers, once
per session, with this module's :data:`FORMAT` (an openclaw without it, or none, cannot answer).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from dask._expr import Expr

if TYPE_CHECKING:
    from dask.typing import Key

__all__ = ["FORMAT", "resolved_by", "unaliased", "without_aliases"]

FORMAT = 1  # of what Unaliased sends: a scheduler whose openclaw answers another number cannot read it


def unaliased(graph: Mapping[Key, Any], keys: Iterable[Key]) -> dict[Key, Any]:
    """``graph`` (dask task specs) with its aliases resolved: readers read the final target, and only aliases
    in ``keys`` (the results asked for) remain, each naming its final target."""
    from dask._task_spec import Alias, convert_legacy_graph

    graph, wanted = convert_legacy_graph(dict(graph)), set(keys)
    targets = {key: _final(graph, key) for key, node in graph.items() if isinstance(node, Alias)}
    targets = {key: target for key, target in targets.items() if target != key}
    out: dict[Key, Any] = {}
    for key, node in graph.items():
        if key in targets:
            if key in wanted:
                out[key] = Alias(key, targets[key])
            continue
        if not node.dependencies.isdisjoint(targets):
            node = node.substitute({dep: targets[dep] for dep in node.dependencies if dep in targets})
        out[key] = node
    return out


def _final(graph: Mapping[Key, Any], key: Key) -> Key:
    """The key at the end of ``key``'s chain of aliases (a cycle stops where it closes)."""
    from dask._task_spec import Alias

    seen = set()
    while isinstance(graph.get(key), Alias) and key not in seen:
        seen.add(key)
        key = graph[key].target
    return key


def resolved_by(client: Any, scheduler: Any) -> bool:
    """Whether ``client``'s scheduler resolves aliases (:class:`Unaliased`): ``scheduler`` is it, in this
    process, or it answers with this :data:`FORMAT` (asked once, at a session's start)."""
    if scheduler is not None:
        return True
    try:
        return bool(client.run_on_scheduler(_format) == FORMAT)
    except Exception:  # noqa: BLE001 - no openclaw there, or none of this module: the graph goes as it is
        return False


def _format() -> int:  # sent by reference: the scheduler imports this module to run it
    return FORMAT


def without_aliases(expr: Any, keys: Iterable[Key]) -> Expr:
    """``expr`` (what ``Client.get`` sends) whose graph, once materialized, has no aliases but ``keys``'."""
    return Unaliased(expr, list(keys))


class Unaliased(Expr):
    """An expression's graph with its aliases resolved (:func:`unaliased`), and its annotations."""

    _parameters = ["expr", "keys"]  # noqa: RUF012 - a plain list, as dask's Expr declares it

    def __dask_graph__(self) -> dict[Key, Any]:
        from dask.utils import ensure_dict

        return unaliased(ensure_dict(self.operand("expr").__dask_graph__()), self.operand("keys"))

    _layer = __dask_graph__

    def __dask_keys__(self) -> Any:
        return self.operand("expr").__dask_keys__()

    def __dask_annotations__(self) -> dict[str, dict[Key, Any]]:  # by key: those of dropped aliases go unread
        return self.operand("expr").__dask_annotations__()
