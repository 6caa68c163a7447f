"""Computing collections on a distributed client: every compute computes, arrays joined where their result is wanted.

Fresh results. A distributed client drops its hold on a result's keys through a callback on its
event loop (``Future.release``), not at once. Computing the same graph again before that
callback has run finds the previous compute's futures still alive, already finished, and
returns their data without running a task: on two worker processes a repeated sum took
8-12 ms instead of ~100 ms, benchmarks printed 7x the machine's memory bandwidth, and the
scheduler logged ``Couldn't gather keys ... forgotten`` when the release then raced the
gather. :func:`compute` releases its futures and waits until the client's loop has sent
the release before it returns, so the next graph with the same keys is computed again
(the release reaches the scheduler first: both go on the client's one ordered stream).
:func:`fresh_get` does the same for a plain ``.compute()`` inside a session.

Joining arrays. ``client.compute`` ends every graph with one ``finalize`` task that joins
each array's chunks on a worker: every chunk moves to that worker, the whole result then
moves on to the client, and the run pays one more scheduling round (about 5-7 ms a compute
on two worker processes here). For dask arrays :func:`compute` gathers the chunks instead
and joins them in the calling process with dask's own ``finalize``, as dask's local
schedulers do (a 128 MiB result 373 -> 131 ms on the process backend, benchmarks/local_engine.py).
Other collections (dataframes, bags, delayed, a mix) keep ``client.compute``. Where the workers
are other processes of this machine, an array of 32 MiB or more is not gathered at all: the
client reads its chunks straight out of the workers' memory into one buffer
(:mod:`~openclaw_dask.cluster.pulled`), or, where it may not, the final tasks write them into that
buffer (:mod:`~openclaw_dask.cluster.shared_results`). :func:`fresh_get` does the same for a plain
``x.compute()`` or ``np.asarray(x)`` of one NumPy-backed array (512 MiB on 2 worker processes:
110-162 ms over the comm, 37-50 ms read out of the workers).

A reduction's combines. The chunks' partials come back and dask's combines of them run here, every
level of the tree (:mod:`~openclaw_dask.cluster.tails`): one scheduling round and one transfer between
workers fewer a level. Up to 64 MiB of partials come from workers of this machine, 1 MiB over a network.

Aliases. Where the scheduler can (it runs in this process, or its openclaw says it reads them), the graph
goes to it wrapped so that it resolves dask's aliases as it materializes the graph
(:mod:`~openclaw_dask.cluster.aliases`): no alias runs as a task (a 2-chunk ``map_overlap`` had 20 in
46 tasks, up to 3 scheduling rounds before its function started).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from openclaw_dask.cluster.here import tell
from openclaw_dask.cluster.pulled import let_go, read_blocks
from openclaw_dask.cluster.tails import MAX_BYTES, Tail, tail_of

if TYPE_CHECKING:
    from openclaw_dask.cluster.direct import Direct
    from openclaw_dask.cluster.shared_results import SharedResults

__all__ = ["as_computed", "compute", "fresh_get"]

Watch = Callable[[list[Any]], contextlib.AbstractContextManager[Any]]  # entered around a wait, given its futures


def _unwatched(futures: list[Any]) -> contextlib.AbstractContextManager[Any]:
    return contextlib.nullcontext()


# what client.get takes of client.compute's keywords; any other keyword keeps client.compute
_GET_KEYWORDS = frozenset({"optimize_graph", "retries", "workers", "allow_other_workers", "resources", "priority", "fifo_timeout"})


def compute(client: Any, collections: list[Any], *, watch: Watch = _unwatched, shared: SharedResults | None = None,
            tails: int = MAX_BYTES, unalias: bool = False, direct: Direct | None = None, **kwargs: Any) -> tuple[Any, ...]:
    """The results of ``collections`` computed on ``client``, in order, each computed anew.

    ``watch(futures)`` is entered around the wait for them (the session's stall watch,
    :mod:`~openclaw_dask.cluster.stall`). With ``shared`` (workers on this machine), large
    arrays reach the client's memory without the comm: read out of the workers, or written by them
    (:mod:`~openclaw_dask.cluster.pulled`, :mod:`~openclaw_dask.cluster.shared_results`).
    A reduction's combines run here (:mod:`~openclaw_dask.cluster.tails`) on at most ``tails`` bytes of its partials
    (0: never). ``unalias`` (a scheduler that can, :func:`~openclaw_dask.cluster.aliases.resolved_by`): the graph's
    aliases are resolved as the scheduler materializes it (:mod:`~openclaw_dask.cluster.aliases`). ``direct``: a graph
    whose tasks read only data on the workers runs on them without the scheduler (:mod:`~openclaw_dask.cluster.direct`).
    """
    import dask.array as da

    if not collections:
        return ()  # nothing left to run (the small-tasks pass ran the graph in this process): no round trip
    if not all(isinstance(c, da.Array) for c in collections) or set(kwargs) - _GET_KEYWORDS:
        return tuple(_gathered(client, client.compute(collections, **kwargs), watch))
    takes = _takes(client, collections, shared)
    lent = [shared.lend(a.nbytes) if shared is not None and t else None for a, t in zip(collections, takes, strict=True)]
    taken = sum(a.nbytes for a, buf in zip(collections, lent, strict=True) if buf is not None)
    held = uuid.uuid4().hex if shared is not None and any(lent) and shared.reads(taken) else None  # its blocks' id
    written = [array if buf is None else _taken(array, buf.path, held) for array, buf in zip(collections, lent, strict=True)]
    ends = [tail_of(a, tails) if tails and buf is None else None for a, buf in zip(collections, lent, strict=True)]
    sent = [x for array, end in zip(written, ends, strict=True) for x in ((array,) if end is None else end.inputs)]
    at = {id(x): i for i, x in enumerate(sent)}  # by identity: == of dask arrays is element-wise
    reads = {at[id(x)]: (buf, array) for x, buf, array in zip(written, lent, collections, strict=True) if buf is not None and held}
    try:
        chunks = iter(_read(reads, _arrays_gathered(client, sent, watch, kwargs, unalias, direct)))
    except BaseException:
        if shared is not None:
            for unfinished in filter(None, lent):  # its tasks may still be writing: never lent again
                shared.discard(unfinished)
        raise
    finally:
        if held is not None:
            let_go(client, held)
    results: list[Any] = []
    for array, buf, end in zip(collections, lent, ends, strict=True):
        if end is not None:
            parts = [next(chunks) for _ in end.inputs]
            results.append(_ended(client, end, parts, watch=watch, unalias=unalias, **kwargs))
        elif buf is not None and next(chunks) is False:  # a worker went before it was read: computed the ordinary way
            shared.discard(buf)  # type: ignore[union-attr]
            results.append(compute(client, [array], watch=watch, tails=tails, unalias=unalias, direct=direct, **kwargs)[0])
        elif buf is not None:
            results.append(buf.array(array.shape, array.dtype))
        else:
            finalize, args = array.__dask_postcompute__()
            results.append(finalize(next(chunks), *args))
    return tuple(results)


def _arrays_gathered(client: Any, arrays: list[Any], watch: Watch, kwargs: dict[str, Any], unalias: bool,
                     direct: Direct | None) -> list[Any]:
    """Each array's chunks (a nested list per array), computed on ``client`` in one graph (on the workers holding
    what it reads, where ``direct`` can)."""
    from dask.base import collections_to_expr
    from dask.core import flatten

    kwargs = dict(kwargs)
    expr = collections_to_expr(arrays, kwargs.pop("optimize_graph", True)).optimize()
    keys = expr.__dask_keys__()
    values = None if direct is None else direct.results(arrays, expr, list(flatten(keys)), kwargs)
    if values is not None:
        return [_nested(k, values) for k in keys]
    return list(_gathered(client, _get(client, expr, keys, unalias, **kwargs), watch))


def _nested(keys: Any, values: dict[Any, Any]) -> Any:
    """``keys`` (dask's nested lists of an array's keys) with each key's value in its place."""
    return [_nested(k, values) for k in keys] if isinstance(keys, list) else values[keys]


def _get(client: Any, expr: Any, keys: Any, unalias: bool, **kwargs: Any) -> Any:
    """``client.get`` of ``expr`` without waiting; ``unalias``: its aliases resolved by the scheduler (cluster/aliases.py)."""
    from dask._expr import Expr, LLGExpr

    # a plain graph (a dict, an LLGExpr) goes as it is: the scheduler culls those itself, and only those
    if unalias and isinstance(expr, Expr) and not isinstance(expr, LLGExpr):
        from dask.core import flatten

        from openclaw_dask.cluster.aliases import without_aliases

        expr = without_aliases(expr, flatten(keys))
    return client.get(expr, keys, sync=False, **kwargs)


def _read(reads: dict[int, tuple[Any, Any]], data: list[Any]) -> list[Any]:
    """``data`` with each array of ``reads`` (its index there: its buffer, the array) read out of the workers into its
    buffer (:mod:`~openclaw_dask.cluster.pulled`): ``True`` in its place, or ``False`` where a worker went first."""
    for i, (buf, array) in reads.items():
        try:
            read_blocks(data[i], buf.array(array.shape, array.dtype), array.chunks)
            data[i] = True
        except OSError:
            data[i] = False
    return data


def _ended(client: Any, end: Tail, parts: list[Any], **kwargs: Any) -> Any:
    """``end``'s array from its inputs' chunks, its last tasks run here (told to the profiler: :mod:`~openclaw_dask.cluster.here`).

    A tail that raises here (a user's ``aggregate=`` that needs a worker, say) is computed on the
    engine after all, which reports what it raises as it would without this pass.
    """
    try:
        result, here = end.run(parts)
    except Exception:  # noqa: BLE001 - the engine's own run reports it
        return compute(client, [end.array], tails=0, **kwargs)[0]
    tell(here)
    return result


def _takes(client: Any, collections: list[Any], shared: SharedResults | None) -> list[bool]:
    """Per array, whether its workers write it into ``shared`` rather than send its chunks over the comm."""
    if shared is None or not any(map(shared.wants, collections)) or not shared.ready(client):
        return [False] * len(collections)
    return [shared.wants(array) for array in collections]


def as_computed(client: Any, collections: list[Any], shared: SharedResults) -> list[Any]:
    """``collections`` with the writes :func:`compute` adds to those that take ``shared`` (nothing lent)."""
    import dask.array as da

    if not all(isinstance(c, da.Array) for c in collections):
        return collections
    takes = _takes(client, collections, shared)
    # a block read out of its worker is held there until the compute ends, as an ordinary result is
    read = shared.reads(sum(c.nbytes for c, t in zip(collections, takes, strict=True) if t))
    return [_taken(c, "(projected)", None) if t and not read else c for c, t in zip(collections, takes, strict=True)]


def _taken(array: Any, path: str, held: str | None) -> Any:
    """``array``'s chunks, each kept by its worker under the compute id ``held`` for this process to read, or (``None``)
    written into the buffer at ``path`` by the task that makes it; a receipt each
    (:mod:`~openclaw_dask.cluster.pulled`, :mod:`~openclaw_dask.cluster.shared_results`)."""
    import numpy as np

    from openclaw_dask.cluster.pulled import hold_block
    from openclaw_dask.cluster.shared_results import write_block

    receipts = tuple((1,) * len(c) for c in array.chunks)
    if held is not None:
        return array.map_blocks(hold_block, held, dtype=object, chunks=receipts, meta=np.empty((0,) * array.ndim, dtype=object))
    return array.map_blocks(write_block, path, array.shape, dtype=np.int8, chunks=receipts)


def fresh_get(client: Any, watch: Watch = _unwatched, shared: SharedResults | None = None,
              tails: int = MAX_BYTES, unalias: bool = False, direct: Direct | None = None) -> Callable[..., Any]:
    """A dask ``scheduler=`` callable that runs graphs on ``client`` as :func:`compute` does (never a kept result).

    It has the client's ``persist``, which ``dask.persist`` looks for, so persisted data stays on
    the workers. Pickled (dask's configuration goes to every worker process a nanny starts), it
    becomes ``"dask.distributed"``: that process's own default client, as without openclaw.
    """
    return _FreshGet(client, watch, shared, tails, unalias, direct)


class _FreshGet:
    def __init__(self, client: Any, watch: Watch, shared: SharedResults | None, tails: int, unalias: bool,
                 direct: Direct | None) -> None:
        self.client, self.watch, self.shared, self.tails, self.unalias = client, watch, shared, tails, unalias
        self.direct = direct

    def __call__(self, dsk: Any, keys: Any, **kwargs: Any) -> Any:
        from distributed.worker import thread_state

        if getattr(thread_state, "key", None):  # inside a task: the client's own path secedes first
            return self.client.get(dsk, keys, **kwargs)
        kwargs.pop("sync", None)
        array = _one_array(dsk, keys)
        if array is not None:  # as Session.compute: its chunks come here once, or are written here
            return list(compute(self.client, [array], watch=self.watch, shared=self.shared, tails=self.tails,
                                unalias=self.unalias, direct=self.direct, **kwargs))
        return _gathered(self.client, _get(self.client, dsk, keys, self.unalias, **kwargs), self.watch)

    def persist(self, *args: Any, **kwargs: Any) -> Any:
        return self.client.persist(*args, **kwargs)

    # dask picks a lock between worker processes (da.store, to_hdf5) when the scheduler == client.get
    def __eq__(self, other: object) -> bool:
        return other is self or other == self.client.get

    def __hash__(self) -> int:
        return hash(self.client.get)

    def __reduce__(self) -> tuple[Any, ...]:
        return (str, ("dask.distributed",))

    def __deepcopy__(self, memo: Any) -> _FreshGet:
        return self  # a copy of dask's configuration in this process keeps the live client


def _one_array(expr: Any, keys: Any) -> Any:
    """The NumPy-backed dask array that the graph dask's ``compute`` hands a scheduler computes
    (``x.compute()``, ``np.asarray(x)``), else ``None`` (any other graph runs as it is).

    dask ends that graph with a task that joins the chunks on a worker: every chunk would move
    there, and the whole array on to this process.
    """
    import dask.array as da
    from dask import _expr
    from dask.array.core import finalize
    from dask.core import flatten

    sequence: Any = getattr(_expr, "_HLGExprSequence", None)  # what dask.compute makes of one collection
    if sequence is not None and isinstance(expr, sequence) and len(expr.operands) == 1:
        expr = expr.operands[0]
    if not isinstance(expr, _expr.HLGFinalizeCompute) or list(keys) != list(expr.__dask_keys__()):
        return None
    chunks = expr.operand("dsk")
    post = getattr(chunks, "postcompute", None)
    if not isinstance(chunks, _expr.HLGExpr) or not isinstance(post, tuple) or not post or post[0] is not finalize:
        return None
    key = next(flatten(chunks.output_keys), None)
    name = key[0] if isinstance(key, tuple) and key else key
    layer = chunks.hlg.layers.get(name)
    known = getattr(layer, "collection_annotations", None) or {}
    if known.get("chunk_type") != "numpy.ndarray" or "chunks" not in known or "dtype" not in known:
        return None  # CuPy's, or a layer that does not say: dask's own path
    return da.Array(chunks.hlg, name, known["chunks"], dtype=known["dtype"])


def _gathered(client: Any, futures: Any, watch: Watch) -> Any:
    """The data of ``futures`` (any nesting), waited for under ``watch``; the client's hold on them is gone on return."""
    from distributed.client import futures_of

    flat = futures_of(futures)
    try:
        with watch(flat):
            return client.gather(futures)
    finally:
        for future in flat:
            future.release()
        client.sync(_loop_turned)  # runs after the releases queued on the client's loop: they have been sent


async def _loop_turned() -> None:
    return None
