"""Session-aware array creation: new arrays made on the workers, and existing ones wrapped.

Chunks follow the session's ``task_chunk_size`` and ``strategy``. The functions take the
session first and are also :class:`~openclaw_dask.Session` methods (``s.array(...)``,
``s.from_array(...)``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from dask.utils import format_bytes

from openclaw_dask import memory_model
from openclaw_dask.chunking import ChunkPlan, plan_chunks
from openclaw_dask.cluster import running_of
from openclaw_dask.config.values import ChunkSize
from openclaw_dask.errors import OpenclawError

if TYPE_CHECKING:
    import dask.array as da

    from openclaw_dask.cluster import SessionLike

__all__ = ["FILLS", "array", "chunk_plan", "chunks", "from_array", "to_numpy"]

FILLS = ("arange", "random", "noise", "zeros", "ones")


def chunk_plan(session: SessionLike, shape: tuple[int, ...], dtype: Any = "float64") -> ChunkPlan:
    """The chunks :func:`chunks` would choose for ``session``, with the reason (see :mod:`openclaw_dask.chunking`).

    Auto chunks are then held to the memory model: when a map-reduce over the array in them (its chunks
    made, changed and reduced as they go) is projected not to fit a worker, they are lowered to the chunk
    the model names (:func:`openclaw_dask.memory_model.fitting_chunk`).
    """
    p = session.config.parallel
    plan = _planned(session, shape, dtype, p.task_chunk_size)
    if p.task_chunk_size.kind != "auto":
        return plan
    for _ in range(3):  # the model scales footprints with the chunk: one step fits unless rounding is against it
        fit = _fitting_chunk(session, plan)
        if fit is None or fit >= plan.chunk_bytes:
            return plan
        smaller = _planned(session, shape, dtype, ChunkSize("bytes", fit))
        plan = dataclasses.replace(smaller, reason=f"{plan.reason}, lowered to {format_bytes(smaller.chunk_bytes)} "
                                   "so a map-reduce over it fits a worker's memory (docs/memory.md)")
    return plan


def _planned(session: SessionLike, shape: tuple[int, ...], dtype: Any, size: ChunkSize) -> ChunkPlan:
    memory, threads = running_of(session).worker_memory()
    return plan_chunks(
        tuple(shape), dtype, task_chunk_size=size, strategy=session.config.parallel.strategy, slots=session.slots,
        task_overhead_s=session.engine.task_overhead_s, worker_memory=memory, threads_per_worker=threads,
        stream_bytes_per_s=session.engine.stream_bytes_per_s, max_chunk_bytes=session.engine.max_chunk_bytes,
    )


def _fitting_chunk(session: SessionLike, plan: ChunkPlan) -> int | None:
    """The chunk (bytes) the memory model names for a map-reduce over ``plan``'s array, ``None`` when it fits."""
    import dask
    import dask.array as da

    if plan.chunk_bytes <= 0 or session.config.cluster.memory_check == "off":
        return None
    with dask.config.set({"array.backend": "numpy"}):  # a layout to project, never computed: any array backend's chunks
        x = da.ones(plan.shape, dtype=plan.dtype, chunks=plan.chunks)
    # in 80% of what a worker may use: its process memory grows between planning and running (an in-process
    # worker's is the client's too)
    return memory_model.fitting_chunk(session, [(x + 1).sum()], share=0.8)


def chunks(session: SessionLike, shape: tuple[int, ...], dtype: Any = "float64") -> tuple[tuple[int, ...], ...]:
    """Dask chunks for ``shape`` and ``dtype`` from ``task_chunk_size`` and ``strategy``."""
    return chunk_plan(session, shape, dtype).chunks


def _fill_block(kind: str, seed: int, dtype: str, block_info: dict[Any, Any]) -> np.ndarray:
    """Make one block on the worker that runs it (nothing travels from the client)."""
    info = block_info[None]
    location = info["array-location"]
    shape = tuple(stop - start for start, stop in location)
    if kind == "arange":  # value = flat index, so sums have a closed form
        strides = np.cumprod((1,) + tuple(info["shape"][:0:-1]))[::-1]
        axes = [np.arange(start * stride, stop * stride, stride, dtype=dtype) for (start, stop), stride in zip(location, strides)]
        if len(axes) == 1:  # the coordinates are the block
            return axes[0]
        block = np.zeros(shape, dtype=dtype)
        for axis, coords in enumerate(axes):
            block += coords.reshape((-1,) + (1,) * (len(shape) - axis - 1))
        return block
    if kind == "noise":  # pseudo-random in (-1, 1) from each element's flat index: the same for any chunks
        index = _fill_block("arange", seed, "float64", block_info)
        return np.modf(np.sin(index * 12.9898 + seed * 78.233) * 43758.5453)[0].astype(dtype)
    if kind == "random":
        rng = np.random.default_rng([seed, *info["chunk-location"]])
        return rng.random(shape, dtype=np.dtype(dtype)) if np.dtype(dtype).kind == "f" else rng.integers(0, 1000, shape).astype(dtype)
    if kind == "zeros":
        return np.zeros(shape, dtype=dtype)
    return np.ones(shape, dtype=dtype)


def array(
    session: SessionLike,
    shape: tuple[int, ...] | int,
    dtype: Any = "float64",
    *,
    fill: str | Callable[..., np.ndarray] = "random",
    seed: int = 0,
    chunks: tuple[tuple[int, ...], ...] | None = None,
) -> da.Array:
    """A new dask array whose blocks are made on the workers.

    Parameters
    ----------
    shape, dtype
        Of the whole array; chunks follow ``task_chunk_size`` and ``strategy``.
    fill
        ``random`` (uniform [0, 1), seeded per block), ``noise`` (pseudo-random in
        (-1, 1) from each element's flat index and ``seed``: equal for any chunks),
        ``arange`` (each element is its flat index), ``zeros``, ``ones``, or a function ``f(block_info=...)``
        as for :func:`dask.array.map_blocks` that returns one block.
    seed
        Seed of ``random``; the same seed gives the same array for any chunking
        of the same shape only block by block, so keep chunks fixed to compare.
    chunks
        Explicit dask chunks instead of the session's choice.
    """
    import dask.array as da
    from dask.base import tokenize

    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    dtype = np.dtype(dtype)
    # block shapes such as (500, 2000) become full chunks, as da.ones(..., chunks=) takes them
    chunks = session.chunks(shape, dtype) if chunks is None else da.core.normalize_chunks(chunks, shape, dtype=dtype)
    meta = np.empty((0,) * len(shape), dtype=dtype)
    if callable(fill):
        return _on_device(session, da.map_blocks(fill, chunks=chunks, dtype=dtype, meta=meta))
    if fill not in FILLS:
        raise OpenclawError(f"fill={fill!r} is not known; use one of {', '.join(FILLS)} or a function")
    # The name must depend on everything that changes the blocks, or two arrays share keys.
    name = f"openclaw-{fill}-{tokenize(fill, seed, shape, dtype.str, chunks)}"
    return _on_device(session, da.map_blocks(_fill_block, fill, seed, dtype.str, chunks=chunks, dtype=dtype, meta=meta, name=name))


def _on_device(session: SessionLike, x: da.Array) -> da.Array:
    """``x`` with chunks of dask's ``array.backend`` in the session, converted where they are made.

    Backend ``cuda`` sets it to ``cupy``; a ``dask:`` section can too, for a ``remote``
    cluster of ``dask cuda worker`` processes.
    """
    import dask

    library = dask.config.get("array.backend", "numpy")  # an array library (cupy), not a cluster backend
    return x if library == "numpy" else x.to_backend(library)


def to_numpy(session: SessionLike, x: Any) -> np.ndarray:
    """Compute ``x`` in ``session`` and bring it home as NumPy (from CuPy chunks too)."""
    result = session.compute(x) if hasattr(x, "__dask_graph__") else x
    return np.asarray(result.get() if type(result).__module__.startswith("cupy") else result)  # device -> host


def from_array(session: SessionLike, x: Any) -> da.Array:
    """Wrap an array-like as a dask array chunked by ``session``.

    NumPy arrays are scattered to the workers block by block, so the graph stays
    small; dask arrays are rechunked; other array-likes (h5py, zarr, memmap) are
    read lazily, chunk by chunk, where the tasks run.
    """
    import dask.array as da

    if isinstance(x, da.Array):
        return _on_device(session, x.rechunk(session.chunks(x.shape, x.dtype)))
    chunks = session.chunks(x.shape, x.dtype)
    if not isinstance(x, np.ndarray):
        return _on_device(session, da.from_array(x, chunks=chunks))
    return _on_device(session, running_of(session).from_numpy(x, chunks))  # scattered block by block to a cluster's workers
