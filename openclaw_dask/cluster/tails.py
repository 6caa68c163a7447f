"""A reduction's combines run in the client on a distributed engine: its chunks' small partials come back instead.

``x.sum()`` on a cluster ends with one task, dask's ``sum-aggregate``, that combines a partial result
from each chunk (or each group of chunks). Sent to the engine, that task waits for the scheduler to
hear that the partials are done, to place it, and for its worker to fetch the partials from the
others; then its result comes back to the client. Gathering the partials (a few bytes each)
and combining them here skips that scheduling round and the transfer between workers: 1.6-6.4 ms
of a reduction's compute on two worker processes (docs/benchmarks.md, tenth pass). Over more
chunks than its fan-in (``split_every``), dask combines them in levels, ``<reduction>-partial``:
those run here too, and only the chunks' own partials come back (64 chunks at fan-in 4: 76-93 ->
54-60 ms; 1,000 chunks: 832-899 -> 602-670 ms; eleventh pass).

What moves: dask's own aggregate of a NumPy reduction (its layer named ``<reduction>-aggregate``)
and the levels of combines below it, and steps of NumPy's, ``operator``'s or dask's own functions on
such results, not a user's ``map_blocks``: element-wise ones (``x.std()`` is ``sqrt`` of ``var``'s
aggregate, ``x.sum() / n`` a ``truediv``), and others whose result is at most the bound below, as
known from their layer's shape (the least-squares solve of ``X^T X`` and ``X^T y``: a getitem of one
aggregate, then ``np.linalg.solve`` of both, 5-15 ms of scheduling rounds on worker processes;
docs/benchmarks.md, twenty-fourth pass). No annotations (no pinned workers or resources), the
aggregate and each step one task, reading at most :data:`MAX_BYTES` of partials (:data:`LOCAL_MAX_BYTES`
from workers on this machine), known from the layers' shapes before anything runs.
The tasks are the same functions on the same inputs, so the result is the same.
What ran here is told to the profiler (:mod:`openclaw_dask.cluster.here`).
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Any

from openclaw_dask.cluster.here import Ran, add

__all__ = ["LOCAL_MAX_BYTES", "MAX_BYTES", "Tail", "libraries_only", "tail_of", "tails_bound"]

MAX_BYTES = 2**20  # partials at most this big come to the client over a network: under one task's round trip
# From workers of this machine, gathering beat the engine's own levels of combines from 256 KiB to 64 MiB of partials
# (2-d sums along an axis, worker processes and in-process workers; docs/benchmarks.md); this bounds what the client holds.
LOCAL_MAX_BYTES = 64 * 2**20
PARTIAL_SIZE = 8  # a partial is at most this many times the result's bytes (mean's: 2 arrays; a 4th moment's: 5)


@dataclass(frozen=True)
class Tail:
    """The last tasks of ``array``'s graph (its inputs' first), and the arrays whose chunks they read."""

    array: Any
    tasks: tuple[Any, ...]  # dask._task_spec.Task, each after the tasks it reads
    inputs: tuple[Any, ...]

    def run(self, parts: list[Any]) -> tuple[Any, Ran]:
        """The array's result from its inputs' gathered chunks (one nested list per input), and what ran here."""
        from dask.core import flatten
        from dask.utils import key_split

        values: dict[Any, Any] = {}
        for array, chunks in zip(self.inputs, parts, strict=True):
            values.update(zip(flatten(array.__dask_keys__()), flatten(chunks), strict=True))
        ran: Ran = {}
        for task in self.tasks:
            t0 = time.perf_counter()
            values[task.key] = task(values)
            add(ran, key_split(task.key), 1, time.perf_counter() - t0)  # x.sum() / y.sum(): two of one name
        finalize, args = self.array.__dask_postcompute__()
        return finalize(_nested(self.array.__dask_keys__(), values[self.tasks[-1].key]), *args), ran


def _nested(keys: Any, value: Any) -> Any:
    """``keys``' nesting of lists (one key: the array has one chunk) with ``value`` in place of the key."""
    return [_nested(k, value) for k in keys] if isinstance(keys, list) else value


def tails_bound(capabilities: Any) -> int:
    """The bytes of partials a reduction's combines may gather from an engine's workers (a backend's
    :class:`~openclaw_dask.cluster.base.Capabilities`): more where they are on this machine."""
    return LOCAL_MAX_BYTES if capabilities.local_memory else MAX_BYTES


def tail_of(array: Any, max_bytes: int = MAX_BYTES) -> Tail | None:
    """``array``'s last tasks, when they may run here reading at most ``max_bytes`` of partials (see the
    module's docstring); else ``None``."""
    import numpy as np
    from dask.highlevelgraph import HighLevelGraph

    graph = array.__dask_graph__()
    if (not isinstance(graph, HighLevelGraph) or array.npartitions != 1 or type(array._meta) is not np.ndarray
            or array.dtype.hasobject or array.nbytes > max_bytes):
        return None
    tasks: dict[Any, Any] = {}
    inputs: dict[str, Any] = {}
    if not _take(graph, array.name, max_bytes, tasks, inputs):
        return None
    return Tail(array, tuple(tasks.values()), tuple(inputs.values()))


def _take(graph: Any, name: str, max_bytes: int, tasks: dict[Any, Any], inputs: dict[str, Any]) -> bool:
    """Add layer ``name``'s one task to ``tasks`` (after those it reads) and the arrays it reads to ``inputs``,
    when it is dask's combine of a reduction or a step of the libraries' functions on such combines."""
    from dask.blockwise import Blockwise
    from dask.highlevelgraph import MaterializedLayer
    from dask.utils import key_split

    layer = graph.layers[name]
    combine = key_split(name).endswith("-aggregate")
    if layer.annotations or not (combine or isinstance(layer, (Blockwise, MaterializedLayer))):
        return False  # decided before any key is listed: most one-chunk results are neither
    if combine:
        return _combined(graph, name, max(_nbytes(layer), 8), max_bytes, tasks, inputs)
    names = sorted(graph.dependencies.get(name, ()))
    task = _one_task(layer, set().union(*(graph.layers[d].get_output_keys() for d in names)))
    if not names or task is None or not libraries_only(task) or not (_elementwise(task) or _nbytes(layer) <= max_bytes):
        return False  # a step reads the combines below it: one that reads nothing makes data (a chunk's fill)
    if not all(_take(graph, d, max_bytes, tasks, inputs) for d in names):
        return False
    tasks[task.key] = task
    return True


def _combined(graph: Any, name: str, nbytes: float, max_bytes: int, tasks: dict[Any, Any], inputs: dict[str, Any]) -> bool:
    """Add combine layer ``name``'s tasks to ``tasks``, after those of the combine layers below it (dask's
    ``<reduction>-partial`` levels of a tree), and the arrays of partials they start from to ``inputs``:
    each level run here is one scheduling round and one transfer between workers fewer.

    ``nbytes``: the result's bytes, which a partial is at most :data:`PARTIAL_SIZE` times.
    """
    from dask._task_spec import Task, convert_legacy_graph
    from dask.utils import key_split

    names = sorted(graph.dependencies.get(name, ()))
    reads = {d: set(graph.layers[d].get_output_keys()) for d in names}
    keys = set().union(*reads.values())
    layer = dict(graph.layers[name])
    level = list(convert_legacy_graph(layer, all_keys=keys | set(layer)).values())
    if not level or not all(isinstance(t, Task) for t in level) or set().union(*(t.dependencies for t in level)) != keys:
        return False  # a persisted future, or a level that reads only part of the one below
    for d in names:
        if key_split(d).endswith("-partial") and not graph.layers[d].annotations:
            if not _combined(graph, d, nbytes, max_bytes, tasks, inputs):
                return False
        elif len(reads[d]) * PARTIAL_SIZE * nbytes > max_bytes or (found := _input(graph, d, reads[d])) is None:
            return False
        else:
            inputs[d] = found
    tasks.update((t.key, t) for t in level)
    return True


def _one_task(layer: Any, reads: set[Any]) -> Any:
    """The layer's task (a ``dask._task_spec.Task``), if it has exactly one."""
    from dask._task_spec import Task, convert_legacy_graph

    graph = dict(layer)
    if len(graph) != 1:
        return None
    task = next(iter(convert_legacy_graph(graph, all_keys=reads | set(graph)).values()), None)  # none: a persisted future
    return task if isinstance(task, Task) else None


def _elementwise(task: Any) -> bool:
    """Whether ``task`` is dask's element-wise step (``_enforce_dtype`` of a function): its result no bigger than its inputs."""
    from dask.array.core import _enforce_dtype

    return task.func is _enforce_dtype and "enforce_dtype_function" in task.kwargs


_LIBRARIES = ("numpy", "operator", "_operator", "dask")
_CONTAINERS = (list, tuple, dict, set, slice)  # what dask's nested task specs name as the type they make


def libraries_only(node: Any) -> bool:
    """Whether ``node`` runs only NumPy's, ``operator``'s and dask's own functions (its nested tasks' too, and any
    function handed to them as an argument) on references and constants: no user code runs in the client."""
    from dask._task_spec import DataNode, GraphNode, Task, TaskRef

    if isinstance(node, TaskRef):
        return True
    if isinstance(node, DataNode):  # a function may come as data: map_blocks hands dask its user's function so
        return libraries_only(node.value)
    if isinstance(node, Task):
        return _library(node.func) and all(libraries_only(a) for a in (*node.args, *node.kwargs.values()))
    if isinstance(node, GraphNode):
        return False
    if isinstance(node, (list, tuple, set)):
        return all(libraries_only(v) for v in node)
    if isinstance(node, dict):
        return all(libraries_only(v) for v in node.values())
    return not callable(node) or node in _CONTAINERS or _library(node)


def _library(function: Any) -> bool:
    """Whether ``function`` is NumPy's, ``operator``'s or dask's (a ``functools.partial`` of one, on plain arguments)."""
    import numpy as np

    if isinstance(function, functools.partial):
        return _library(function.func) and all(libraries_only(a) for a in (*function.args, *function.keywords.values()))
    if isinstance(function, np.vectorize) or isinstance(function, np.ufunc) and function.__name__.endswith("(vectorized)"):
        return False  # NumPy's wrappers of a Python function (np.vectorize, np.frompyfunc): the user's code
    return str(getattr(function, "__module__", None) or "").split(".")[0] in _LIBRARIES


def _nbytes(layer: Any) -> float:
    """The bytes of the array a layer makes, by its annotations (infinite if they do not say)."""
    import math

    known = getattr(layer, "collection_annotations", None) or {}
    shape, dtype = known.get("shape"), known.get("dtype")
    if shape is None or dtype is None or any(math.isnan(n) for n in shape):
        return math.inf  # unknown: taken as too big
    return int(math.prod(shape)) * int(dtype.itemsize)


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
