"""Computing collections on a distributed client, with arrays joined where their result is wanted.

``client.compute`` ends every graph with one ``finalize`` task that joins each array's
chunks on a worker: every chunk moves to that worker, the whole result then moves on to
the client, and the run pays one more scheduling round (about 5-7 ms a compute on two
worker processes here). For dask arrays :func:`compute` gathers the chunks instead and
joins them in the calling process with dask's own ``finalize``, as dask's local
schedulers do. Measured on the process backend (benchmarks/local_engine.py,
docs/benchmarks.md): a sum over 8 chunks 48 -> 34 ms, a 128 MiB result 373 -> 131 ms
(with the client gathering straight from the workers, which local backends turn on).
Other collections (dataframes, bags, delayed, a mix) keep ``client.compute``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["compute"]

# what client.get takes of client.compute's keywords; any other keyword keeps client.compute
_GET_KEYWORDS = frozenset({"optimize_graph", "retries", "workers", "allow_other_workers", "resources", "priority", "fifo_timeout"})


def compute(client: Any, collections: list[Any], **kwargs: Any) -> tuple[Any, ...]:
    """The results of ``collections`` computed on ``client``, in order."""
    import dask.array as da

    if not collections or not all(isinstance(c, da.Array) for c in collections) or set(kwargs) - _GET_KEYWORDS:
        return tuple(client.compute(collections, sync=True, **kwargs))
    from dask.base import collections_to_expr

    expr = collections_to_expr(collections, kwargs.pop("optimize_graph", True)).optimize()
    chunks = client.get(expr, expr.__dask_keys__(), sync=True, **kwargs)
    results = []
    for array, parts in zip(collections, chunks, strict=True):
        finalize, args = array.__dask_postcompute__()
        results.append(finalize(parts, *args))
    return tuple(results)
