"""A reduction's last combine runs in the client on a distributed engine: its small inputs come back instead.

``x.sum()`` on a cluster ends with one task, dask's ``sum-aggregate``, that combines a partial result
from each chunk (or each group of chunks). Sent to the engine, that task waits for the scheduler to
hear that the partials are done, to place it, and for its worker to fetch the partials from the
others; then its result comes back to the client. Gathering the partials (a few bytes each)
and combining them here skips that scheduling round and the transfer between workers: a 512 MiB
sum on two worker processes 29-30 -> 21-22 ms (``benchmarks/`` figures in docs/benchmarks.md).

Only dask's own aggregate of a NumPy reduction is moved (its layer named ``<reduction>-aggregate``),
when it is one task, carries no annotations (no pinned workers or resources) and reads at most
:data:`MAX_BYTES` of partials, known from their layer's chunks and dtype before anything runs.
The combine is the same function on the same inputs, so the result is the same.
What ran here is told to the profiler (:mod:`openclaw_dask.cluster.here`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_BYTES", "Tail", "tail_of"]

MAX_BYTES = 2**20  # partials at most this big come to the client: ~0.5 ms on loopback, under one task's round trip
PARTIAL_SIZE = 8  # a partial is at most this many times the result's bytes (mean's: 2 arrays; a 4th moment's: 5)


@dataclass(frozen=True)
class Tail:
    """The one combine task at the end of ``array``'s graph, and the arrays whose chunks it reads."""

    array: Any
    task: Any  # a dask._task_spec.Task
    inputs: tuple[Any, ...]

    @property
    def name(self) -> str:
        from dask.utils import key_split

        return str(key_split(self.task.key))

    def run(self, parts: list[Any]) -> tuple[Any, float]:
        """The array's result from its inputs' gathered chunks (one nested list per input), and the seconds it took."""
        from dask.core import flatten

        values: dict[Any, Any] = {}
        for array, chunks in zip(self.inputs, parts, strict=True):
            values.update(zip(flatten(array.__dask_keys__()), flatten(chunks), strict=True))
        t0 = time.perf_counter()
        value = self.task(values)
        seconds = time.perf_counter() - t0
        finalize, args = self.array.__dask_postcompute__()
        return finalize(_nested(self.array.__dask_keys__(), value), *args), seconds


def _nested(keys: Any, value: Any) -> Any:
    """``keys``' nesting of lists (one key: the array has one chunk) with ``value`` in place of the key."""
    return [_nested(k, value) for k in keys] if isinstance(keys, list) else value


def tail_of(array: Any) -> Tail | None:
    """``array``'s last combine, when it may run here (see the module's docstring); else ``None``."""
    import numpy as np
    from dask._task_spec import convert_legacy_graph
    from dask.highlevelgraph import HighLevelGraph
    from dask.utils import key_split

    graph = array.__dask_graph__()
    if (not isinstance(graph, HighLevelGraph) or array.npartitions != 1 or type(array._meta) is not np.ndarray
            or array.dtype.hasobject or not key_split(array.name).endswith("-aggregate")):
        return None
    layer = graph.layers.get(array.name)
    tasks = {} if layer is None or layer.annotations else dict(layer)
    names = sorted(graph.dependencies.get(array.name, ()))
    reads = {name: set(graph.layers[name].get_output_keys()) for name in names}
    keys = set().union(*reads.values())
    # a partial is the result's shape with the reduced axes of length 1, or a few such arrays (mean, var)
    if len(tasks) != 1 or not keys or len(keys) * PARTIAL_SIZE * max(array.nbytes, 8) > MAX_BYTES:
        return None
    (task,) = convert_legacy_graph(tasks, all_keys=keys | set(tasks)).values()
    inputs = tuple(_input(graph, name, reads[name]) for name in names)
    if any(x is None for x in inputs) or task.dependencies != keys:
        return None
    return Tail(array, task, inputs)


def _input(graph: Any, name: str, keys: set[Any]) -> Any:
    """Layer ``name`` as a dask array of its own (its graph culled to it) whose keys are ``keys``, or ``None``.

    Its chunk sizes only shape the keys: dask's reductions change a layer's chunks after its
    annotations were written, so only their number is checked.
    """
    import dask.array as da
    from dask.core import flatten

    known = getattr(graph.layers[name], "collection_annotations", None) or {}
    if known.get("chunk_type") != "numpy.ndarray" or "chunks" not in known or "dtype" not in known:
        return None
    array = da.Array(graph.cull_layers([name]), name, known["chunks"], dtype=known["dtype"])
    return array if set(flatten(array.__dask_keys__())) == keys else None
