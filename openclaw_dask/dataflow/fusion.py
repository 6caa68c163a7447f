"""``fusion_buffer_size``: merge small pieces up to a buffer before each one costs a task or a transfer.

Two places where Dask pays per piece:

- a reduction's tasks: one partial per chunk however small the chunk, and dask's default
  fan-in (``split_every``, 4 unless dask's ``split_every`` setting says otherwise) whatever the
  partials weigh, so a sum over 2,000 small chunks builds 2,000 partials and six levels of
  combine tasks. :func:`reduce` merges the small chunks up to the buffer first, and
  :func:`split_every` picks the fan-in that fills it.
- many small chunks, e.g. one per small file: :func:`merge_chunks` groups neighbours
  into blocks of at most the buffer, so each task (and each transfer) carries a buffer's
  worth.

Both are pure, so what they decide can be checked without running anything;
:func:`reduce` and :func:`merged` apply them to a dask array.

The third place, transfers between workers (GPUs included), needs no call: the key sets how
many bytes of pieces one message carries (:data:`~openclaw_dask.cluster.worker_shape.TRANSFER_KEYS`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from openclaw_dask.cluster import SessionLike

__all__ = ["merge_chunks", "merged", "reduce", "split_every"]

def split_every(partial_bytes: int, n_pieces: int, buffer: int | None) -> int | None:
    """Fan-in of a reduction whose per-chunk partials weigh ``partial_bytes``: as many as fit ``buffer``.

    At least 2 (a tree must shrink), at most ``n_pieces`` (one combine); ``buffer`` None gives None,
    which leaves the fan-in to dask (its ``split_every`` setting, else 4).
    """
    if buffer is None:
        return None
    return max(2, min(max(2, n_pieces), buffer // max(1, partial_bytes)))


def merge_chunks(chunks: Sequence[int], bytes_per_unit: int, buffer: int | None) -> tuple[int, ...]:
    """Group neighbouring chunks of one axis so each group holds at most ``buffer`` bytes (a chunk bigger stays alone)."""
    if buffer is None:
        return tuple(chunks)
    merged: list[int] = []
    for c in chunks:
        if merged and (merged[-1] + c) * bytes_per_unit <= buffer:
            merged[-1] += c
        else:
            merged.append(c)
    return tuple(merged)


def _buffer(session: SessionLike, buffer: int | None) -> int | None:
    return session.config.parallel.fusion_buffer_size if buffer is None else buffer


def merged(session: SessionLike, x: Any, *, axis: int = 0, buffer: int | None = None) -> Any:
    """``x`` with its small chunks along ``axis`` merged up to ``buffer`` (default ``parallel.fusion_buffer_size``)."""
    buffer = _buffer(session, buffer)
    per_unit = x.dtype.itemsize * math.prod(max(c, default=0) for a, c in enumerate(x.chunks) if a != axis)
    new = merge_chunks(x.chunks[axis], per_unit, buffer)
    return x if new == x.chunks[axis] else x.rechunk({axis: new})


def reduce(session: SessionLike, x: Any, how: str = "sum", *, axis: int | tuple[int, ...] | None = None,
           buffer: int | None = None) -> Any:
    """``x.<how>(axis)`` (sum, mean, max, ...): chunks smaller than ``buffer`` merged, and the fan-in that fills it."""
    buffer = _buffer(session, buffer)
    axes = tuple(range(x.ndim)) if axis is None else ((axis,) if isinstance(axis, int) else tuple(axis))
    for a in axes:  # a partial per merged block, not per small chunk
        x = merged(session, x, axis=a, buffer=buffer)
    kept = [max(c, default=1) for a, c in enumerate(x.chunks) if a not in axes]
    partial = x.dtype.itemsize * math.prod(kept) * (2 if how in ("mean", "var", "std") else 1)
    pieces = math.prod(len(x.chunks[a]) for a in axes)
    return getattr(x, how)(axis=axis, split_every=split_every(partial, pieces, buffer))
