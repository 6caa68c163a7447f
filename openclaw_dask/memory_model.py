"""Project the peak memory per worker of a dask array graph before it runs (see ``docs/memory.md``).

Every array layer carries its chunks in ``collection_annotations``: from them each task's output
bytes are known, and a task's footprint is its inputs, its output and its known temporaries. The
graph is then run on paper on the cluster's threads in rounds, each round starting the
highest-priority ready tasks of :func:`dask.order.order` (the order workers run ready tasks in),
keeping each output until its last reader has run and the results to the end: the most held at once,
shared among the workers, plus the outputs of the root tasks distributed's ``worker-saturation``
sends a worker beyond its threads, plus one biggest footprint and root output for each thread but
one (threads drift apart: one runs ahead while another finishes a long task), plus a reserve, is the
projection (:func:`project`,
:func:`misfit`: pure). A worker's measured baseline (its process memory before the run) is added by
:func:`require_fit`, the sessions' check.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import operator
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from openclaw_dask.cluster import shared_results
from openclaw_dask.cluster.compute import as_computed
from openclaw_dask.cluster.stall import configured_max_spill
from openclaw_dask.config.keys import MEMORY_CHECK, MEMORY_LIMIT, TASK_CHUNK_SIZE
from openclaw_dask.errors import ConfigError

if TYPE_CHECKING:
    from openclaw_dask.cluster import SessionLike

__all__ = ["LOCAL", "MAX_WALK_TASKS", "RESERVE", "TASK_STATE", "Misfit", "Projection", "Task", "allocates", "describe",
           "fits", "fitting_chunk", "graph_arrays", "guarded", "misfit", "project", "project_stream", "require_fit",
           "stream_steps", "streamed", "suggest_chunk", "watched"]

logger = logging.getLogger("openclaw_dask.memory")
_F = TypeVar("_F", bound=Callable[..., Any])

RESERVE = 4 * 2**20  # per worker: task state, messages and allocator slack that no chunk size shows
# a distributed worker's state per output it holds: 6.9-8.0 KB a task measured on a fresh worker holding the results of
# 1,000 to 20,000 no-op tasks for their sum (benchmarks/task_state_memory.py), 0.9-1.4 KB once it ran a graph before;
# counted for the most outputs the walk holds at once, where that passes RESERVE (more than 409 on a worker)
TASK_STATE = 10 * 2**10
LOCAL = "this process"  # the one worker of a local engine (dask's threaded or synchronous scheduler)
MAX_WALK_TASKS = 10_000  # a bigger graph is projected from its layers' chunks alone, to stay under a second
SMALL_HELD = 2**20  # a delayed graph whose declared results are under this together is projected without a walk


@dataclass(frozen=True)
class Task:
    """The biggest task of a projection: its layer, chunk shape, and input and output bytes."""

    layer: str
    shape: tuple[int, ...] | None
    inputs: int
    output: int
    temporary: int = 0  # e.g. its inputs concatenated before the function runs

    @property
    def footprint(self) -> int:
        """Bytes the task holds while it runs: its inputs, its output and its temporaries."""
        return self.inputs + self.output + self.temporary


@dataclass(frozen=True)
class Projection:
    """The projected peak memory of one graph on each worker, over the worker's baseline.

    Attributes
    ----------
    per_worker
        Projected peak bytes on each worker above its baseline (includes :data:`RESERVE`, or on a distributed
        worker :data:`TASK_STATE` for each of its share of the outputs held at once, where that is more).
    running
        Of it, the bytes that cannot be spilled: ``threads`` running tasks, roots and the reserve.
    held
        The most the graph holds at once, all workers together, its tasks run on their threads in dask's order.
    results
        Of it, each worker's share of the results (held to the end, whatever the chunk size).
    task
        The task with the biggest footprint.
    chunk
        Bytes of the biggest chunk of any array layer.
    tasks, workers, threads
        Tasks in the graph, and the workers and threads per worker projected for.
    walked
        Whether the whole graph was walked (else projected from its layers' chunks: an estimate).
    """

    per_worker: int
    running: int
    held: int
    results: int
    task: Task
    chunk: int
    tasks: int
    workers: int
    threads: int
    walked: bool


def project(collections: list[Any], *, workers: int = 1, threads: int = 1, saturation: float = 1.1,
            relayed: bool = True) -> Projection | None:
    """The :class:`Projection` of computing ``collections`` on ``workers`` workers of ``threads`` threads.

    ``None`` when no collection is a dask array graph (nothing to project from).
    ``saturation`` is distributed's ``scheduler.worker-saturation`` (``inf``: no queuing); ``relayed``: ready
    tasks reach the workers through a scheduler, a round late (distributed; not dask's local schedulers).
    """
    return _project(_arrays(collections), workers=workers, threads=threads, saturation=saturation, relayed=relayed)


def _project(collections: list[Any], *, workers: int, threads: int, saturation: float, relayed: bool) -> Projection | None:
    """:func:`project` of the collections :func:`_arrays` chose (the helpers below take them so)."""
    graph = _graph(collections)
    if graph is None:
        return None
    layouts, results = graph
    workers, threads = max(1, workers), max(1, threads)
    dsk, count = _tasks(collections)
    if not layouts and (tiny := _held_whole(dsk, results, workers, threads, _reserve(len(dsk), workers, relayed))):
        return tiny  # a delayed graph of small declared results: all of them held
    slots = workers * threads
    if count <= MAX_WALK_TASKS:
        ordered = _toposorted(dsk)
        sized = _sizes(dsk, ordered, layouts, copied=workers > 1)
        kept = sum(sized.sizes.get(k, 0) for k in set(results) | {sized.owner[k] for k in results if k in sized.owner})
        blockwise = _blockwise(collections)
        links = _links(dsk)  # the walks' and the roots' inputs and readers, made once
        biggest, roots = sized.biggest, _root_outputs(dsk, links, sized, blockwise)
        relay = blockwise if relayed else None
        held, busy, keys = _walk(dsk, links, ordered, sized, results, slots, relayed=relay)
        carried = _carried(dsk) if relayed else 0
        share = -(-held // workers)
        if workers > 1 and (pulled := _pulled(dsk, ordered)):  # their bytes are not shared out: one worker holds them
            weighted = dataclasses.replace(sized, sizes=_shared(sized.sizes, pulled, workers),
                                           temporary=_shared(sized.temporary, pulled, workers))
            share = _walk(dsk, links, ordered, weighted, results, slots, relayed=relay)[0] + _copies(dsk, pulled, layouts)
    else:
        sizes, biggest, roots = _sampled(collections, layouts)
        kept = sum(sizes.get(k, 0) for k in results)
        held = busy = slots * biggest.footprint
        held += kept
        share, carried, keys = -(-held // workers), 0, 0
    # roots sent to a worker beyond its threads: their outputs can wait for consumers the scheduler sends later
    queued = (0 if math.isinf(saturation) else max(0, math.ceil(saturation * threads) - threads)) * roots
    reserve = _reserve(keys, workers, relayed)
    running = max(-(-busy // workers), biggest.footprint) + queued + carried + reserve
    chunk = max((_block_bytes(c, i, None) for c, i in layouts.values()), default=0)
    # the rounds keep threads in step; real ones drift apart, one running ahead (a task and the root it reads)
    # while another finishes a long task
    drift = (threads - 1) * (biggest.footprint + roots)
    return Projection(max(share, biggest.footprint) + drift + queued + carried + reserve, running, held,
                      -(-kept // workers), biggest, chunk, count, workers, threads, count <= MAX_WALK_TASKS)


Step = tuple[str, int, int, tuple[float, float]]  # a stream's stage: name, input and output bytes of a batch, temporaries


def project_stream(steps: list[Step], *, group: int, in_flight: int, workers: int = 1, threads: int = 1) -> Projection:
    """The :class:`Projection` of a stream (:func:`openclaw_dask.dataflow.pipeline`) of ``steps`` (pure).

    Each task runs one stage on ``group`` batches and holds their inputs, outputs and declared temporaries
    (:func:`allocates`); at most ``in_flight`` batches are alive, each holding at most the biggest stage
    output while it waits for its next stage or to be gathered. Every busy thread runs the biggest task.
    """
    workers, threads = max(1, workers), max(1, threads)
    tasks = [Task(name, None, group * i, group * o, int(group * (ti * i + to * o))) for name, i, o, (ti, to) in steps]
    biggest = max(tasks, key=lambda t: t.footprint)
    busy = min(workers * threads, -(-in_flight // group))  # tasks running at once: no more than the batches allow
    waiting = max(0, in_flight - busy * group) * max(o for _, _, o, _ in steps)
    held = busy * biggest.footprint + waiting
    running = min(threads, busy) * biggest.footprint + RESERVE
    per_worker = max(-(-held // workers), running - RESERVE) + RESERVE
    return Projection(per_worker, running, held, 0, biggest, max(o for _, _, o, _ in steps), len(steps), workers,
                      threads, False)


def stream_steps(flow: Any) -> list[Step]:
    """The steps of a finished :class:`~openclaw_dask.dataflow.Pipeline`: its biggest batch in and out of each stage."""
    steps, inputs = [], flow.source_bytes
    for stage, times in zip(flow.stages, flow.times):
        output = max(times.nbytes, default=0)
        steps.append((stage.label, inputs, output, getattr(stage.fn, _DECLARED, (0.0, 0.0))))
        inputs = output
    return steps


@contextlib.contextmanager
def streamed(session: SessionLike) -> Iterator[Callable[[Any], None]]:
    """Around a stream: call what it yields with the finished :class:`~openclaw_dask.dataflow.Pipeline`.

    While a profile watches (:func:`watched`), the stream's projection, from its batches' measured sizes
    and its ``in_flight`` bound, goes to the profile with each worker's memory before the stream started.
    A stream is not checked before it runs: its batches' sizes are known once they have been through.
    """
    workers, local = _workers(session) if _WATCHERS and session.config.cluster.memory_check != "off" else ({}, True)
    if local or not workers:
        yield lambda flow: None
        return
    workers = _in_use_now(session, workers)
    threads = max(int(w.get("nthreads", 1)) for w in workers.values())

    def tell(flow: Any) -> None:
        if flow.batches:
            _tell(project_stream(stream_steps(flow), group=flow.group, in_flight=flow.in_flight,
                                 workers=len(workers), threads=threads), workers)

    yield tell


def _reserve(keys: int, workers: int, relayed: bool) -> int:
    """:data:`RESERVE`, or on distributed workers :data:`TASK_STATE` for each of a worker's share of ``keys``
    outputs held at once, where that is more."""
    return max(RESERVE, TASK_STATE * -(-keys // max(1, workers))) if relayed else RESERVE


def _held_whole(dsk: dict[Any, Any], results: list[Any], workers: int, threads: int, reserve: int) -> Projection | None:
    """A delayed graph of declared sizes that are under :data:`SMALL_HELD` together, projected as holding them all at
    once (a bound; no walk, which costs ~20 us a task), else ``None``."""
    from dask._task_spec import DataNode
    from dask.sizeof import sizeof
    from dask.utils import key_split

    sizes = {k: int(sizeof(t.value)) if isinstance(t, DataNode) else _returns(t) or 0 for k, t in dsk.items()}
    total = sum(sizes.values())
    if total > SMALL_HELD:
        return None
    inputs = {k: sum(sizes.get(d, 0) for d in getattr(t, "dependencies", ())) for k, t in dsk.items()}
    key = max(dsk, key=lambda k: inputs[k] + sizes[k])
    biggest = Task(key_split(key), None, inputs[key], sizes[key])
    return Projection(total + reserve, min(total, threads * biggest.footprint) + reserve, total,
                      sum(sizes.get(k, 0) for k in results), biggest, 0, len(dsk), workers, threads, False)


def suggest_chunk(projection: Projection, room: int, spill: int = 0) -> int | None:
    """The biggest chunk (bytes) whose projection would fit a worker with ``room`` bytes and ``spill`` to spill.

    The tasks' footprints scale with the chunk; the results do not (an estimate): ``None`` when no chunk
    of 64 KiB or more would fit.
    """
    fixed = RESERVE + projection.results
    if projection.chunk <= 0 or room <= RESERVE or room + spill <= fixed:
        return None
    shares = [(room - RESERVE) / max(1, projection.running - RESERVE),
              (room + spill - fixed) / max(1, projection.per_worker - fixed)]
    fit = int(projection.chunk * min(1.0, *shares))
    return fit if fit >= 2**16 else None


# -- the graph: layouts of its layers, its tasks ------------------------------------------------

Layout = tuple[tuple[tuple[int, ...], ...], int]  # chunks, itemsize


def _graph(collections: list[Any]) -> tuple[dict[str, Layout], list[Any]] | None:
    """Every array layer's chunks (by layer name) and the result keys, or ``None`` without a collection to project."""
    from dask.array import Array
    from dask.core import flatten

    layouts: dict[str, Layout] = {}
    results: list[Any] = []
    for c in collections:
        for name, layer in getattr(c.__dask_graph__(), "layers", {}).items():
            ann = getattr(layer, "collection_annotations", None) or {}
            if ann.get("chunks") and hasattr(ann.get("dtype"), "itemsize") and _known(ann["chunks"]):
                layouts[str(name)] = (tuple(tuple(int(n) for n in a) for a in ann["chunks"]), ann["dtype"].itemsize)
        if isinstance(c, Array) and _known(c.chunks):  # else a delayed graph of declared sizes
            layouts[str(c.name)] = (tuple(tuple(int(n) for n in a) for a in c.chunks), c.dtype.itemsize)
        results.extend(flatten(c.__dask_keys__()))
    return (layouts, results) if results else None


def _known(chunks: tuple[tuple[float, ...], ...]) -> bool:
    """No chunk of unknown size (``x[x > 0]``'s are NaN until computed): such a layer is left out, as an undeclared one."""
    return not any(math.isnan(n) for dim in chunks for n in dim)


def _pulled(dsk: dict[Any, Any], ordered: list[Any]) -> set[Any]:
    """Tasks that run on one worker whatever the workers: the readers of a block persisted before that more than one
    task reads whole (a model's weights), and the tasks they feed. Distributed runs a task where its inputs are."""
    readers: dict[Any, list[Any]] = {}
    for key in ordered:
        if not _slices(dsk[key]):  # a slice runs where its block is, and only the slice moves
            for d in getattr(dsk[key], "dependencies", ()):
                if d not in dsk:
                    readers.setdefault(d, []).append(key)
    pulled = {k for keys in readers.values() if len(keys) > 1 for k in keys}
    for key in ordered:
        if key not in pulled and any(d in pulled for d in _inside(dsk, key)):
            pulled.add(key)
    return pulled


def _copies(dsk: dict[Any, Any], pulled: set[Any], layouts: dict[str, Layout]) -> int:
    """Bytes of the blocks persisted before that ``pulled`` tasks read, but the biggest (on their worker already):
    at worst each was persisted on another worker, and is copied to theirs."""
    blocks = {d for k in pulled for d in getattr(dsk[k], "dependencies", ()) if d not in dsk}
    sizes = sorted(_persisted_bytes(d, layouts) for d in blocks)
    return sum(sizes[:-1])


def _slices(task: Any) -> bool:
    import numpy as np
    from dask.array import chunk

    return getattr(task, "func", None) in (operator.getitem, chunk.getitem, np.transpose)


def _shared(sizes: dict[Any, int], pulled: set[Any], workers: int) -> dict[Any, int]:
    """Each worker's share of ``sizes``: all of a pulled task's bytes, an even share of the others'."""
    return {k: v if k in pulled else -(-v // workers) for k, v in sizes.items()}


def _blockwise(collections: list[Any]) -> set[str]:
    """Names of the blockwise layers (dask fuses a chain of them into one task)."""
    from dask.blockwise import Blockwise

    return {str(n) for c in collections for n, layer in getattr(c.__dask_graph__(), "layers", {}).items()
            if isinstance(layer, Blockwise)}


def _arrays(collections: list[Any]) -> list[Any]:
    """The collections the model projects: the dask arrays, and the delayed graphs whose every task's function
    declares what it returns (:func:`allocates`). A Delayed answers any attribute: duck typing would take it."""
    from dask.array import Array
    from dask.delayed import Delayed

    return [c for c in collections if isinstance(c, Array) or isinstance(c, Delayed) and _declared(c)]


def _declared(delayed: Any) -> bool:
    """Whether every task of ``delayed``'s graph returns a declared size (and there are few enough to look)."""
    from dask._task_spec import DataNode, GraphNode, convert_legacy_graph

    graph = dict(delayed.__dask_graph__())
    if len(graph) > MAX_WALK_TASKS:
        return False
    nodes = graph.values() if all(isinstance(t, GraphNode) for t in graph.values()) else convert_legacy_graph(graph).values()
    return all(isinstance(t, DataNode) or _returns(t) is not None for t in nodes)


def _returns(task: Any) -> int | None:
    """The bytes ``task``'s function declares it returns at most (``@allocates(returns=...)``), else ``None``."""
    return getattr(getattr(task, "func", None), _RETURNS, None)


def _tasks(collections: list[Any]) -> tuple[dict[Any, Any], int]:
    """The tasks of the array collections (empty when there are too many to walk) and how many there are."""
    graphs = [c.__dask_graph__() for c in collections]
    count = sum(_layer_tasks(layer) for g in graphs for layer in getattr(g, "layers", {}).values())
    if count > MAX_WALK_TASKS:
        return {}, count
    from dask._task_spec import convert_legacy_graph

    merged: dict[Any, Any] = {}
    for g in graphs:
        merged.update(g)
    return convert_legacy_graph(merged), count


def _layer_tasks(layer: Any) -> int:
    """Tasks in ``layer``: a block each, counted from its chunks without making its tasks."""
    chunks = (getattr(layer, "collection_annotations", None) or {}).get("chunks")
    return math.prod(len(a) for a in chunks) if chunks else len(layer)


def _name_index(key: Any) -> tuple[str, tuple[Any, ...]]:
    return (str(key[0]), tuple(key[1:])) if isinstance(key, tuple) and key else (str(key), ())


def _block_bytes(chunks: tuple[tuple[int, ...], ...], itemsize: int, index: tuple[Any, ...] | None) -> int:
    """Bytes of block ``index`` (the biggest block when ``index`` does not address one)."""
    if index is not None and len(index) == len(chunks) and all(
            isinstance(i, int) and 0 <= i < len(a) for i, a in zip(index, chunks)):
        return itemsize * math.prod(a[i] for i, a in zip(index, chunks))
    return itemsize * math.prod(max(a, default=0) for a in chunks)


def _shape(chunks: tuple[tuple[int, ...], ...], index: tuple[Any, ...]) -> tuple[int, ...] | None:
    if len(index) == len(chunks) and all(isinstance(i, int) and 0 <= i < len(a) for i, a in zip(index, chunks)):
        return tuple(a[i] for i, a in zip(index, chunks))
    return None


def _sliced(task: Any, shape_of: Callable[[Any], tuple[int, ...] | None]) -> tuple[int, ...] | None:
    """The shape a ``getitem(block, slices)`` task gives (rechunk's splits, overlap's edges), else ``None``."""
    from dask.array import chunk

    if getattr(task, "func", None) not in (operator.getitem, chunk.getitem) or len(getattr(task, "args", ())) != 2:
        return None
    source, index = task.args
    shape = shape_of(getattr(source, "key", None))
    index = getattr(index, "value", index)
    if shape is None or not isinstance(index, tuple) or len(index) != len(shape) or not all(
            isinstance(s, slice) for s in index):
        return None
    return tuple(len(range(*s.indices(n))) for s, n in zip(index, shape))


def _callables(task: Any) -> list[Any]:
    """The functions a task calls: through ``partial``, ``Compose`` and the tasks inlined in its arguments."""
    out, todo = [], [getattr(task, "func", None)]
    todo.extend(a.func for a in getattr(task, "args", ()) if hasattr(a, "func") and hasattr(a, "dependencies"))
    while todo:
        f = todo.pop()
        if f is None:
            continue
        if hasattr(f, "dependencies"):  # an inlined task
            out.extend(_callables(f))
            continue
        todo.extend(getattr(f, "funcs", ()))  # toolz Compose: first, then the rest
        todo.append(getattr(f, "first", None))
        inner = getattr(f, "func", None)  # functools.partial
        if inner is not None:
            todo.append(inner)
        elif not hasattr(f, "funcs"):
            out.append(f)
    if out and getattr(out[0], "__name__", "") == "_pass_extra_kwargs" and getattr(task, "args", ()):
        out.append(getattr(task.args[0], "value", None))  # map_blocks with block_info: the function is its first argument
    return out


def _functions(task: Any) -> list[str]:
    """Names of the functions a task calls (see :func:`_callables`)."""
    return [getattr(f, "__name__", "") for f in _callables(task)]


def _temporaries(task: Any) -> tuple[float, float]:
    """The temporaries a task's functions make (times its inputs, times its output): declared, or dask's known ones."""
    return max(((getattr(f, _DECLARED, None) or _TEMPORARIES.get(getattr(f, "__name__", ""), (0, 0)))
                for f in _callables(task)), default=(0, 0))


def _reduced(task: Any, shape: tuple[int, ...] | None) -> tuple[int, ...] | None:
    """The shape a chunk reduction (``axis=..., keepdims=True``) of a block of ``shape`` gives, else ``None``."""
    kwargs = getattr(task, "kwargs", None) or {}
    axis = kwargs.get("axis")
    if shape is None or kwargs.get("keepdims") is not True or not isinstance(axis, tuple):
        return None
    return tuple(1 if a in axis else n for a, n in enumerate(shape))


def _output(key: Any, task: Any, deps: list[Any], layouts: dict[str, Layout], sizes: dict[Any, int],
            shape_of: Callable[[Any], tuple[int, ...] | None]) -> tuple[tuple[int, ...] | None, int]:
    """The shape (if known) and bytes of ``task``'s output, from its layer's chunks or its inputs' (``shape_of``)."""
    from dask._task_spec import DataNode
    from dask.sizeof import sizeof

    every = list(getattr(task, "dependencies", ()))  # deps, and the data persisted before that the task reads
    first = next(iter(every), None)
    itemsize = _itemsize(first, layouts, sizes, shape_of(first)) if first is not None else 0
    name, index = _name_index(key)
    if len(every) == 1 and itemsize and (shape := _reduced(task, shape_of(first))) is not None:
        return shape, itemsize * math.prod(shape)  # its layer's chunks are the input's: dask sets them after
    if (layout := layouts.get(name)) is not None:
        return _shape(layout[0], index), _block_bytes(layout[0], layout[1], index)
    if isinstance(task, DataNode):
        return None, int(sizeof(task.value))
    if (returns := _returns(task)) is not None:
        return None, returns
    if itemsize and (shape := _sliced(task, shape_of)) is not None:
        return shape, itemsize * math.prod(shape)
    return None, max((sizes[d] for d in deps), default=0)  # no layout: as big as its biggest input (an estimate)


def _layout_shape(key: Any, layouts: dict[str, Layout]) -> tuple[int, ...] | None:
    name, index = _name_index(key)
    return _shape(layouts[name][0], index) if name in layouts else None


def _persisted_bytes(key: Any, layouts: dict[str, Layout]) -> int:
    """Bytes of the block ``key`` of data persisted before the graph (0 when its layer is not an array's)."""
    name, index = _name_index(key)
    return _block_bytes(*layouts[name], index) if name in layouts else 0


def _itemsize(key: Any, layouts: dict[str, Layout], sizes: dict[Any, int], shape: tuple[int, ...] | None) -> int:
    """Bytes per element of ``key``'s block: from its bytes and shape, or (data persisted before) its layer's dtype."""
    if key in sizes:
        return sizes[key] // max(1, math.prod(shape or (1,)))
    layout = layouts.get(_name_index(key)[0])
    return layout[1] if layout is not None else 0


def _sizes(dsk: dict[Any, Any], ordered: list[Any], layouts: dict[str, Layout], *, copied: bool = False) -> _Sizes:
    """Each task's output, temporary bytes and footprint, and the task with the biggest footprint.

    ``copied`` (more than one worker): the data persisted before that a task reads may be on another worker, and
    copied to its own: it counts in the task's inputs (on one worker it is the baseline's). So may the outputs of
    the graph's tasks that it reads, but the biggest: each such copy is held beside its original (kept by the
    worker that made it until its readers are done) while the task runs, which counts it as a temporary.
    Measured: a rechunk's merge on 2 process workers held its own split, the split it sent, the split it
    received and its output (docs/memory.md).
    """
    from dask.utils import key_split

    out = _Sizes({}, {}, {}, set(), Task("", None, 0, 0), {})
    shapes: dict[Any, tuple[int, ...] | None] = {}
    nbytes: dict[Any, int] = {}  # each output's bytes, views' too

    def shape_of(dep: Any) -> tuple[int, ...] | None:  # a task's output; data persisted before the graph: its layer's chunks
        return shapes[dep] if dep in shapes else _layout_shape(dep, layouts)

    for key in ordered:
        task, deps = dsk[key], _inside(dsk, key)
        shapes[key], size = _output(key, task, deps, layouts, nbytes, shape_of)
        nbytes[key] = size
        if (source := _viewed(task, shapes[key], shape_of)):
            size, out.owner[key] = 0, out.owner.get(source, source)  # a view: its input's memory, held while it lives
        # the memory it reads: its inputs, and the blocks its input views share (shards: held once, by the barrier)
        inputs = sum(out.sizes[d] for d in set(_holds(deps, out.owner, dsk)) if d not in out.barriers)
        if copied:
            inputs += sum(_persisted_bytes(d, layouts) for d in getattr(task, "dependencies", ()) if d not in dsk)
        functions = _functions(task)
        if any(f.endswith("_transfer") for f in functions):
            size = 2 * inputs  # p2p: each shard in the comm buffer and in the disk buffer, until unpacked
        elif "p2p_barrier" in functions:
            size = inputs  # the shards, now the barrier's: held until its last dependent (an unpack) has run
            out.barriers.add(key)
        elif "load_store_chunk" in functions and not _loads_stored(task):
            size = 0  # da.store writes the chunk and keeps nothing; the store encodes a copy of it
        out.sizes[key] = size
        if "load_store_chunk" in functions:
            out.temporary[key] = inputs
        elif any(f in _CONCATENATING for f in functions):
            out.temporary[key] = inputs  # the inputs concatenated into one array before the function runs
        elif temporaries := _temporaries(task):
            out.temporary[key] = int(temporaries[0] * inputs + temporaries[1] * size) + _read_buffers(task)
        if copied and key not in out.barriers and len(received := sorted(out.sizes[d] for d in set(deps))) > 1:  # p2p: its buffers
            out.temporary[key] = out.temporary.get(key, 0) + sum(received[:-1])
        footprint = out.footprints[key] = inputs + size + out.temporary.get(key, 0)
        if key not in out.barriers and footprint > out.biggest.footprint:
            shape = shapes[max(deps, key=out.sizes.__getitem__)] if deps and inputs > size else shapes[key]  # the bigger chunk
            out.biggest = Task(key_split(key), shape, inputs, size, out.temporary.get(key, 0))
    return out


def _read_buffers(task: Any) -> int:
    """What the reader's library holds beside the block an ``openclaw_dask.io.read`` task reads (Zarr's chunks)."""
    from openclaw_dask.io import Source

    values = (getattr(a, "value", a) for a in getattr(task, "args", ()))
    return sum(v.buffers for v in values if isinstance(v, Source))


def _loads_stored(task: Any) -> bool:
    """Whether a ``load_store_chunk`` task returns what it stored (``load_stored``, its last argument)."""
    args: tuple[Any, ...] = tuple(getattr(task, "args", ()))
    return bool(args) and getattr(args[-1], "value", args[-1]) is True


_CONCATENATING = frozenset({"_concatenate2", "concatenate_axes"})
# dask's chunk functions that allocate arrays as big as their inputs, and how many at once:
# (times the inputs, times the output): moment_chunk (var, std) holds ``A - mean`` and its power;
# _chunk_sum (matmul) adds its inputs pairwise, a new sum each time; arg_chunk (argmax, argmin): NumPy
# copies the block to make the reduced axis the last; _load_block (openclaw_dask.io.read): the reader's array,
# then NumPy's copy of it
_TEMPORARIES: dict[str, tuple[float, float]] = {"moment_chunk": (2, 0), "_chunk_sum": (0, 1), "arg_chunk": (1, 0), "_load_block": (0, 1)}


_DECLARED = "__openclaw_temporaries__"
_RETURNS = "__openclaw_returns__"


def allocates(inputs: float = 0, output: float = 0, *, returns: int | None = None) -> Callable[[_F], _F]:
    """Declare the temporaries a chunk function makes, for the model to count (a decorator).

    ``inputs``: arrays as big as the task's inputs it holds at once beside them, in multiples of their bytes;
    ``output``: the same in multiples of its output's. E.g. ``(2 * x + np.sin(x) ** 2).sum()`` holds ``2 * x``
    and ``np.sin(x)`` at once: ``@allocates(inputs=2)``. Without it only the task's inputs and output are counted.
    ``returns``: the most bytes its result takes (:func:`dask.sizeof.sizeof`), for a function no array layer
    sizes: a delayed graph is projected when every one of its tasks' functions declares it.
    """
    def declare(fn: _F) -> _F:
        setattr(fn, _DECLARED, (float(inputs), float(output)))
        if returns is not None:
            setattr(fn, _RETURNS, int(returns))
        return fn

    return declare


# a shared result's write maps its block's pages of the result beside the block (cluster/shared_results.py)
allocates(inputs=1)(shared_results.write_block)


@dataclass
class _Sizes:
    sizes: dict[Any, int]
    temporary: dict[Any, int]
    footprints: dict[Any, int]
    barriers: set[Any]
    biggest: Task
    owner: dict[Any, Any]  # a view -> the block whose memory it shares


def _holds(deps: list[Any], owner: dict[Any, Any], dsk: dict[Any, Any]) -> list[Any]:
    """What a task with inputs ``deps`` keeps alive: them, and the blocks of the graph its input views share."""
    return deps + [owner[d] for d in deps if d in owner and owner[d] in dsk]


def _viewed(task: Any, shape: tuple[int, ...] | None, shape_of: Callable[[Any], tuple[int, ...] | None]) -> Any:
    """The input whose memory ``task``'s output shares, if it is a view, else ``None``.

    NumPy's transpose is a view; so is a slice by ``operator.getitem`` (map_overlap's edges), and one by
    dask's chunk ``getitem`` (rechunk's splits, ``x[a:b]``) unless it is at most half its input, which dask copies.
    """
    import numpy as np
    from dask.array import chunk

    func, args = getattr(task, "func", None), tuple(getattr(task, "args", ()))
    source = getattr(args[0], "key", None) if args else None
    if source is None or (func is not np.transpose and shape is None):
        return None
    if func is np.transpose:
        return source
    index = getattr(args[1], "value", args[1]) if len(args) == 2 else None
    if shape is None or not isinstance(index, tuple) or not all(
            i is None or isinstance(i, (slice, int, np.integer)) and not isinstance(i, bool) for i in index):
        return None  # not basic indexing (slices, integers, newaxis): NumPy copies
    whole = shape_of(source)
    if func is operator.getitem or (func is chunk.getitem and whole is not None and math.prod(whole) < 2 * math.prod(shape)):
        return source
    return None


def _inside(dsk: dict[Any, Any], key: Any) -> list[Any]:
    """The dependencies of ``key`` in ``dsk``: data outside it is on the workers already (their baseline)."""
    return [d for d in dsk[key].dependencies if d in dsk]


def _toposorted(dsk: dict[Any, Any]) -> list[Any]:
    from dask.order import order

    priority = order(dsk)
    return sorted(dsk, key=priority.__getitem__)


def _walk(dsk: dict[Any, Any], links: _Links, ordered: list[Any], sized: _Sizes, results: list[Any], slots: int, *,
          relayed: set[str] | None = None) -> tuple[int, int, int]:
    """Run ``dsk`` on ``slots`` threads in rounds, each starting the highest-priority ready tasks (dask's order):
    the most bytes held at once (results kept to the end), the most the tasks of one round held running, and the
    most outputs held at once.

    ``relayed`` (distributed), the graph's blockwise layers: a task whose inputs finish reaches the threads a round
    later (the worker tells the scheduler, which then sends it), and a thread runs the next task it has meanwhile
    (a root, a task of lower priority); unless dask fuses the two into one task: both blockwise, or a chain (the
    input has one reader, which has one input).
    """
    import heapq

    rank = {k: i for i, k in enumerate(ordered)}
    deps, readers = links
    holds = {k: _holds(ds, sized.owner, dsk) for k, ds in deps.items()}  # a view's readers keep its block alive
    unread = Counter(d for held in holds.values() for d in held)  # readers yet to run, of each output
    missing = {k: len(ds) for k, ds in deps.items()}
    ready = [rank[k] for k, ds in deps.items() if not ds]
    heapq.heapify(ready)
    kept, sizes = set(results), sized.sizes
    kept |= {sized.owner[k] for k in results if k in sized.owner}  # a result that is a view keeps its block
    held = peak = busy = alive = most = 0

    def read(key: Any) -> int:  # the bytes freed now that ``key``'s inputs have one reader fewer
        nonlocal alive
        freed = 0
        for d in holds[key]:
            unread[d] -= 1
            if not unread[d] and d not in kept:
                freed, alive = freed + sizes[d], alive - 1
        return freed

    late: list[int] = []  # ready once the scheduler has heard their inputs finished and sent them: a round later
    while ready or late:
        if not ready:  # nothing else to run meanwhile: the threads wait for them
            ready, late = late, []
            heapq.heapify(ready)
        batch = [ordered[heapq.heappop(ready)] for _ in range(min(slots, len(ready)))]
        for r in late:  # for the round after this one: a worker's threads run what they have while the scheduler relays
            heapq.heappush(ready, r)
        late = []
        held -= sum(read(k) for k in batch if k in sized.barriers)  # takes over its inputs' bytes
        held += sum(sizes[k] + sized.temporary.get(k, 0) for k in batch)
        alive += len(batch)
        peak, busy, most = max(peak, held), max(busy, sum(sized.footprints[k] for k in batch)), max(most, alive)
        held -= sum(sized.temporary.get(k, 0) for k in batch)
        held -= sum(read(k) for k in batch if k not in sized.barriers)
        for key in batch:
            if not unread[key] and key not in kept:  # nothing reads it
                held, alive = held - sizes[key], alive - 1
            for r in readers[key]:
                missing[r] -= 1
                if not missing[r]:
                    if relayed is not None and not _fused(key, r, readers, deps, relayed):
                        late.append(rank[r])
                    else:
                        heapq.heappush(ready, rank[r])
    return peak, busy, most


_Links = tuple[dict[Any, list[Any]], dict[Any, list[Any]]]  # each task's inputs inside the graph, and its readers


def _links(dsk: dict[Any, Any]) -> _Links:
    """Each task's inputs inside the graph, and each task's readers."""
    deps = {k: _inside(dsk, k) for k in dsk}
    readers: dict[Any, list[Any]] = {k: [] for k in dsk}
    for key, ds in deps.items():
        for d in ds:
            readers[d].append(key)
    return deps, readers


def _carried(dsk: dict[Any, Any]) -> int:
    """Bytes of the data a graph carries in it (``da.from_array`` of a NumPy array): it travels with the tasks through
    the scheduler, in messages a worker holds beside the arrays; counted whole on each worker."""
    from dask._task_spec import DataNode
    from dask.sizeof import sizeof

    return sum(sizeof(node.value) for node in dsk.values() if isinstance(node, DataNode))


def _root_outputs(dsk: dict[Any, Any], links: _Links, sized: _Sizes, blockwise: set[str]) -> int:
    """The biggest output a root task leaves once it has run: dask fuses a root into its one reader when both are
    blockwise or they are a chain (and on, down the chain), so what waits is the fused task's output."""
    deps, readers = links
    biggest = 0
    for key, task in dsk.items():
        if getattr(task, "dependencies", ()):  # not a root (reading data persisted before: not queued either)
            continue
        end = key
        while len(readers[end]) == 1 and _fused(end, readers[end][0], readers, deps, blockwise):
            end = readers[end][0]
        biggest = max(biggest, sized.sizes.get(sized.owner.get(end, end), 0))  # a view: the block it shares
    return biggest


def _fused(key: Any, reader: Any, readers: dict[Any, list[Any]], deps: dict[Any, list[Any]], blockwise: set[str]) -> bool:
    """Whether dask's optimisation fuses ``key`` and its ``reader`` into one task: both blockwise, or a chain."""
    return len(readers[key]) == len(deps[reader]) == 1 or {_name_index(key)[0], _name_index(reader)[0]} <= blockwise


def _sampled(collections: list[Any], layouts: dict[str, Layout]) -> tuple[dict[Any, int], Task, int]:
    """Sizes of the result blocks, and a footprint of two blocks of each layer (an estimate: no task is read)."""
    biggest, roots = Task("", None, 0, 0), 0
    for name, (chunks, itemsize) in layouts.items():
        block = _block_bytes(chunks, itemsize, None)
        roots = max(roots, block)
        if 2 * block > biggest.footprint:  # a task reads about one block of its kind and writes one
            biggest = Task(name.rsplit("-", 1)[0], tuple(max(a) for a in chunks), block, block)
    sizes: dict[Any, int] = {}
    from dask.array import Array
    from dask.core import flatten

    for c in collections:
        for key in flatten(c.__dask_keys__()) if isinstance(c, Array) else ():
            sizes[key] = _block_bytes(tuple(tuple(a) for a in c.chunks), c.dtype.itemsize, _name_index(key)[1])
    return sizes, biggest, roots


@dataclass(frozen=True)
class Misfit:
    """A worker the projection does not fit: what it has and what would fit (see :func:`misfit`)."""

    worker: str
    baseline: int
    allowed: int
    spill: int
    chunk: int | None  # a task_chunk_size that would fit, bytes
    limit: int  # a memory limit that would fit, bytes


def misfit(projection: Projection, workers: dict[str, dict[str, Any]], *, pause: float,
           max_spill: int | None) -> Misfit | None:
    """The worker of ``workers`` (``scheduler_info()["workers"]``) the projection fits worst, if it does not fit.

    A worker takes ``pause`` of its memory limit before it stops running tasks; less its baseline
    (process memory now, but for freed blocks its heap holds for reuse: the ``heap_free`` metric of
    :class:`~openclaw_dask.cluster.plugins.HeapKeeper`), that must hold the running tasks, and with what it
    may spill (``max_spill`` bytes per worker, ``None``: none) the whole projection.
    """
    worst: Misfit | None = None
    for address, w in workers.items():
        limit = int(w.get("memory_limit") or 0)
        if not limit:
            continue
        metrics = w.get("metrics") or {}
        baseline = max(0, int(metrics.get("memory", 0)) - int(metrics.get("heap_free", 0)))
        allowed = int(pause * limit)
        spill = max_spill or 0
        room = allowed - baseline
        if projection.running <= room and projection.per_worker <= room + spill:
            continue
        need = math.ceil((baseline + max(projection.per_worker - spill, projection.running)) / pause)
        over = Misfit(address, baseline, allowed, spill, suggest_chunk(projection, room, spill), need)
        if worst is None or over.limit - limit > worst.limit - int(workers[worst.worker].get("memory_limit") or 0):
            worst = over
    return worst


def describe(projection: Projection, over: Misfit) -> str:
    """One line: the layer, its chunk, the projected and allowed bytes (no fix; the caller names it)."""
    from dask.utils import format_bytes as fb

    t = projection.task
    shape = "x".join(map(str, t.shape)) if t.shape else "?"
    where = over.worker if over.worker == LOCAL else f"worker {over.worker}"
    tasks = (f"{projection.threads} thread(s) running tasks like '{t.layer}' (chunk {shape}, "
             f"{fb(t.footprint)} of inputs and output)")
    if over.baseline + projection.running > over.allowed:  # what no spilling can make room for
        return (f"this graph's running tasks are projected to need {fb(over.baseline + projection.running)} on "
                f"{where} ({fb(over.baseline)} in use + {tasks} and queued roots, which cannot be spilled) "
                f"but it may use {fb(over.allowed)}")
    return (f"this graph is projected to need {fb(over.baseline + projection.per_worker)} on {where} "
            f"({fb(over.baseline)} in use + {fb(projection.per_worker)}: {tasks}, {fb(projection.held)} held at once) "
            f"but it may use {fb(over.allowed)}" + (f" and spill {fb(over.spill)}" if over.spill else ""))


def require_fit(session: SessionLike, collections: list[Any], *, computed: bool = False) -> Projection | None:
    """Refuse (or warn of, per ``cluster.memory_check``) ``collections`` projected over a worker's memory.

    Returns the projection (``None``: not checked: off, no workers with a limit, or no array graph).
    On a local engine (dask's threaded or synchronous scheduler) the one worker is this process: what
    it may use is the pause fraction of its memory now plus the machine's available memory.
    ``computed``: they go to ``Session.compute``, which may have workers write large arrays straight
    into this process (:mod:`~openclaw_dask.cluster.shared_results`): projected as they run then.

    Raises
    ------
    ConfigError
        With ``cluster.memory_check: error``, naming the layer, its chunk, the projected and allowed
        bytes, and the ``task_chunk_size`` or ``cluster.memory_limit`` that would fit.
    """
    mode = session.config.cluster.memory_check
    running = session.running
    shared = getattr(running, "results", None)  # a distributed engine's (cluster/shared_results.py)
    if computed and mode != "off" and running is not None and shared is not None:
        collections = as_computed(running.client, collections, shared)
    checked = _checked(session, collections) if mode != "off" else None
    if checked is None:
        return None
    projection, workers, over = checked
    if over is None:
        _tell(projection, workers)
        return projection
    if LOCAL in workers:  # no memory_limit to raise: this machine's memory is the limit
        from dask.utils import format_bytes

        fix = f"less data at once, or a machine with {format_bytes(over.limit)} of memory"
    else:
        fix = f"{MEMORY_LIMIT}: {-(-over.limit // 2**20)}MiB"  # whole MiB, as the config file would say it
    chunk = f"{over.chunk // 2**20}MiB" if over.chunk and over.chunk >= 2**20 else f"{(over.chunk or 0) // 2**10}KiB"
    fix = f"{TASK_CHUNK_SIZE}: {chunk} or {fix}" if over.chunk else fix
    line = f"{describe(projection, over)}; {fix} would fit ({MEMORY_CHECK}: warn runs it anyway)"
    if mode == "error":
        raise ConfigError(line)
    logger.warning("%s", line)
    _tell(projection, workers)
    return projection


def guarded(scheduler: Any, check: Callable[[list[Any]], Any]) -> Any:
    """``scheduler`` (a dask ``scheduler=`` callable) that first hands ``check`` what each call computes.

    What a plain ``x.compute()``, ``dask.compute`` or ``x.persist()`` runs on in a session, so that
    they are checked as :meth:`Session.compute <openclaw_dask.Session.compute>` is (``check``: the
    session's :func:`require_fit`). It equals, hashes and pickles as ``scheduler`` (dask compares it
    with a client's ``get`` to choose a lock; worker processes get what ``scheduler`` pickles to), and
    has its ``persist`` when it has one (``dask.persist`` then hands it the collections themselves).
    """
    return (_GuardedPersist if callable(getattr(scheduler, "persist", None)) else _Guarded)(scheduler, check)


class _Guarded:
    def __init__(self, scheduler: Any, check: Callable[[list[Any]], Any]) -> None:
        self.scheduler, self.check = scheduler, check

    def __call__(self, dsk: Any, keys: Any, **kwargs: Any) -> Any:
        arrays = graph_arrays(dsk)
        if arrays:
            self.check(arrays)
        return self.scheduler(dsk, keys, **kwargs)

    def __eq__(self, other: object) -> bool:
        return other is self or bool(self.scheduler == other)

    def __hash__(self) -> int:
        return hash(self.scheduler)

    def __reduce__(self) -> tuple[Any, ...]:
        import copy

        return (copy.copy, (self.scheduler,))  # unpickled: the scheduler itself (no check where no session is)

    def __deepcopy__(self, memo: Any) -> Any:
        return self  # a copy of dask's configuration keeps the live scheduler


class _GuardedPersist(_Guarded):
    def persist(self, collections: Any, *args: Any, **kwargs: Any) -> Any:
        self.check(list(collections) if isinstance(collections, (list, tuple)) else [collections])  # it picks the arrays
        return self.scheduler.persist(collections, *args, **kwargs)


def graph_arrays(expr: Any) -> list[Any]:
    """The dask arrays whose graphs ``expr`` (what ``dask.compute`` hands its scheduler) computes; ``[]`` if none.

    dask wraps each array's (unoptimised) high-level graph and output keys in an expression node; an array is
    rebuilt from them and its output layer's chunks. Anything else (a dict graph, a dataframe's expression, an
    array expression) gives none: it is not projected.
    """
    from dask.array import Array
    from dask.highlevelgraph import HighLevelGraph

    arrays: dict[str, Any] = {}
    nodes = [expr]
    while nodes:
        node = nodes.pop()
        operands = getattr(node, "operands", None)
        if not isinstance(operands, list):
            continue
        params = dict(zip(getattr(type(node), "_parameters", ()), operands))
        graph = params.get("dsk")
        if isinstance(graph, HighLevelGraph):
            for name in {_name_index(k)[0] for k in params.get("output_keys") or ()} - set(arrays):
                ann = getattr(graph.layers.get(name), "collection_annotations", None) or {}
                if ann.get("chunks") is not None and hasattr(ann.get("dtype"), "itemsize"):  # () for a scalar
                    arrays[name] = Array(graph, name, ann["chunks"], dtype=ann["dtype"])
        else:
            nodes.extend(operands)
    return list(arrays.values())


def fits(session: SessionLike, collections: list[Any], *, spill: bool = True) -> bool:
    """Whether ``collections`` are projected to fit ``session``'s workers (``True`` when nothing can be projected).

    Never raises: a workload asks this to choose how to run (e.g. persist its input or stream it).
    ``spill=False``: in memory, without the workers' share of ``cluster.max_spill``.
    ``cluster.memory_check: off`` projects nothing: everything fits.
    """
    checked = _checked(session, collections, spill=spill) if session.config.cluster.memory_check != "off" else None
    return checked is None or checked[2] is None


def fitting_chunk(session: SessionLike, collections: list[Any], *, share: float = 1.0) -> int | None:
    """The biggest chunk (bytes) with which ``collections`` would fit ``share`` of what ``session``'s workers may use.

    ``None`` when they fit, nothing can be projected, or no chunk size would make them fit (see :func:`suggest_chunk`).
    """
    checked = _checked(session, collections, share=share)
    return None if checked is None or checked[2] is None else checked[2].chunk


def _checked(session: SessionLike, collections: list[Any], *, spill: bool = True, share: float = 1.0
             ) -> tuple[Projection, dict[str, dict[str, Any]], Misfit | None] | None:
    """The projection of ``collections`` on ``session``'s workers, the workers, and the worst misfit (if any)."""
    import dask

    collections = _arrays(collections)
    if not collections:
        return None  # nothing the model projects: and no need to ask the workers (a round trip on a cluster)
    workers, local = _workers(session)
    if not workers or not all(w.get("memory_limit") for w in workers.values()):
        return None
    pause = share * float(dask.config.get("distributed.worker.memory.pause", 0.8) or 1.0)
    if not _WATCHERS and _at_most(collections) <= pause / 2 * min(_room(w, 1.0) for w in workers.values()):
        return None  # small beside every worker's memory (locally: this machine's): not worth a projection per compute
    saturation = float(dask.config.get("distributed.scheduler.worker-saturation", 1.1)) if not local else math.inf
    threads = max(int(w.get("nthreads", 1)) for w in workers.values())
    projection = _project(collections, workers=len(workers), threads=threads, saturation=saturation, relayed=not local)
    if projection is None:
        return None
    bound = None if local or not spill else configured_max_spill(session.backend.capabilities.owns_cluster)
    max_spill = None if bound is None else (bound if bound is not False else _free_disk(len(workers)))
    # With half the room to spare by the heartbeats' figures it fits: asking the workers costs a round trip
    # per compute. Else, or when a profile compares the projection with the peak, their memory now.
    if not local and (_WATCHERS or misfit(projection, workers, pause=pause / 2, max_spill=max_spill) is not None):
        workers = _in_use_now(session, workers)
    return projection, workers, misfit(projection, workers, pause=pause, max_spill=max_spill)


def _workers(session: SessionLike) -> tuple[dict[str, dict[str, Any]], bool]:
    """The workers as the scheduler describes them, or this process as one worker on a local engine (and whether)."""
    workers = session.workers()
    if workers or not session.backend.capabilities.in_process:
        return workers, False
    import psutil

    rss = _process_memory()
    # what this process may grow to: its memory now and what the machine has available
    limit = rss + int(psutil.virtual_memory().available)
    return {LOCAL: {"memory_limit": limit, "nthreads": session.slots, "metrics": {"memory": rss}}}, True


def _room(worker: dict[str, Any], pause: float) -> int:
    return int(pause * worker["memory_limit"]) - int(worker["metrics"]["memory"])


def _at_most(collections: list[Any]) -> int:
    """Three times every array layer's bytes together: more than any graph of them holds at once."""
    graph = _graph(collections)
    if graph is None:
        return 0
    return 3 * sum(size * math.prod(sum(a) for a in chunks) for chunks, size in graph[0].values()) + RESERVE


_WATCHERS: list[Callable[[dict[str, int]], None]] = []


@contextlib.contextmanager
def watched(callback: Callable[[dict[str, int]], None]) -> Iterator[None]:
    """While the block runs, ``callback`` gets each graph's projected peak per worker address (baseline included),
    as :func:`require_fit` lets it run (the profiler compares it with the measured peak)."""
    _WATCHERS.append(callback)
    try:
        yield
    finally:
        _WATCHERS.remove(callback)


def _tell(projection: Projection, workers: dict[str, dict[str, Any]]) -> None:
    if LOCAL in workers:  # the profiler compares it per worker: a local engine has none
        return
    peaks = {a: int((w.get("metrics") or {}).get("memory", 0)) + projection.per_worker for a, w in workers.items()}
    for callback in _WATCHERS:
        callback(peaks)


def _free_disk(workers: int) -> int:
    import shutil

    import dask

    return shutil.disk_usage(dask.config.get("temporary-directory") or "/tmp").free // max(1, workers)


def _process_memory() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


def _memory_now(dask_worker: Any) -> dict[str, int]:
    """A worker's process memory now, and of it the freed blocks its heap holds for reuse (its ``heap_free`` metric)."""
    held = dask_worker.metrics.get("heap_free")
    return {"memory": _process_memory(), "heap_free": int(held(dask_worker)) if held else 0}


def _in_use_now(session: SessionLike, workers: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``workers`` with each one's process memory now: the heartbeat's may be from the last run's peak."""
    try:
        now = session.client.run(_memory_now)
    except Exception:
        logger.debug("worker memory from heartbeats", exc_info=True)
        return workers
    return {a: {**w, "metrics": {**(w.get("metrics") or {}), **now.get(a, {"memory": 0, "heap_free": 0})}} for a, w in workers.items()}
