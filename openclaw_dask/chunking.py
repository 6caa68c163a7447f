"""Turn ``task_chunk_size`` and ``strategy`` into dask chunks for a shape and dtype.

The ``auto`` rule
-----------------
1. Start from the guide's rule: ``total bytes / (parallel slots x 10)``, so every
   thread gets about ten chunks and the scheduler can balance load.
2. Raise it to :func:`min_auto_chunk` of the backend's per-task overhead: below
   that, fixed per-task cost (scheduling, messages) dominates the work. The floor is
   the chunk a memory-bound NumPy reduction streams in ``20 x`` the per-task overhead,
   so overhead stays under 5%: ``overhead_s x 13.5 GB/s x 20``.
3. Lower it to :data:`MAX_AUTO_CHUNK` and to a quarter of one thread's share of
   worker memory, so a worker holds a few chunks per thread at once.
4. Lower it to ``total / slots`` so every slot has at least one chunk.
5. Lower it slightly so the number of chunks is a multiple of the slots: 5 equal
   chunks on 2 threads leave one thread idle for a fifth of the run, 6 do not.

The constants are measured on the 2-core reference machine; ``docs/benchmarks.md``
shows the sweep behind them (``python benchmarks/array_sum_chunks.py``).

Layout
------
``data`` splits the first (sample) axis and keeps the others whole; ``model`` splits
the last (parameter) axis first. When one slice along that axis is bigger than the
target, the next axis is split as well. Chunks along an axis are balanced (sizes
differ by at most one) rather than leaving a small remainder.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from dask.utils import format_bytes

from openclaw_dask.config.schema import MAX_CHUNKS, ChunkSize
from openclaw_dask.errors import ConfigError

__all__ = ["DEFAULT_TASK_OVERHEAD_S", "MAX_AUTO_CHUNK", "ChunkPlan", "min_auto_chunk", "plan_chunks"]

# What one more chunk costs a compute on a distributed cluster, seconds; each backend declares its
# own (Backend.task_overhead_s), measured by benchmarks/task_overhead.py (docs/benchmarks.md).
DEFAULT_TASK_OVERHEAD_S = 0.002
_STREAM_BYTES_PER_S = 13.5e9  # one thread summing float64 from memory
_OVERHEAD_FACTOR = 20  # work per task >= 20 x overhead, i.e. overhead <= 5%
MAX_AUTO_CHUNK = 512 * 2**20


def min_auto_chunk(task_overhead_s: float, stream_bytes_per_s: float | None = None, cap: int | None = None) -> int:
    """The smallest auto chunk for a per-task overhead: whole MiB, between 4 MiB and ``cap`` (:data:`MAX_AUTO_CHUNK`).

    Distributed's per-chunk cost (2-2.7 ms here) asks for more than the cap: 512 MiB chunks
    took a 2 GiB sum on two worker processes from 0.65 to 0.74 of the memory bandwidth
    against 256 MiB ones (docs/benchmarks.md). ``stream_bytes_per_s`` is one task slot's
    (a CPU thread's, 13.5 GB/s, unless the engine says otherwise).
    """
    rate = _STREAM_BYTES_PER_S if stream_bytes_per_s is None else stream_bytes_per_s
    floor = int(task_overhead_s * rate * _OVERHEAD_FACTOR) // 2**20 * 2**20
    return min(MAX_AUTO_CHUNK if cap is None else cap, max(4 * 2**20, floor))


@dataclass(frozen=True)
class ChunkPlan:
    """Chunks chosen for one array, and why.

    Attributes
    ----------
    chunks
        Normalised dask chunks, one tuple of block sizes per axis.
    target_bytes
        The chunk size aimed for.
    reason
        One line explaining how ``target_bytes`` was chosen.
    """

    shape: tuple[int, ...]
    dtype: np.dtype
    chunks: tuple[tuple[int, ...], ...]
    target_bytes: int
    reason: str

    @property
    def n_chunks(self) -> int:
        return math.prod(len(c) for c in self.chunks)

    @property
    def chunk_bytes(self) -> int:
        """Bytes of the largest chunk."""
        return self.dtype.itemsize * math.prod(max(c, default=0) for c in self.chunks)


def _auto_target(total: int, itemsize: int, slots: int, overhead_s: float, worker_memory: int | None,
                 threads_per_worker: int, stream_bytes_per_s: float | None, max_chunk_bytes: int | None) -> tuple[int, str]:
    guide = total / (slots * 10)
    target, steps = guide, [f"auto: {format_bytes(total)} / ({slots} slots x 10) = {format_bytes(int(guide))}"]
    limit = MAX_AUTO_CHUNK if max_chunk_bytes is None else max_chunk_bytes
    floor = min_auto_chunk(overhead_s, stream_bytes_per_s, limit)
    at_floor = target < floor
    if at_floor:
        at_floor = floor < limit  # a floor clamped to the largest chunk is a cap: no chunk may outgrow it
        target = floor
        rate = "" if stream_bytes_per_s is None else f" at {stream_bytes_per_s / 1e9:.0f} GB/s a slot"
        largest = "" if at_floor else ", the largest auto chunk"
        steps.append(f"raised to {format_bytes(floor)}{largest} (per-task overhead {overhead_s * 1e3:.2g} ms{rate})")
    cap = limit
    if worker_memory:
        cap = min(cap, worker_memory // (4 * max(1, threads_per_worker)))
    if target > cap:
        target, at_floor = cap, False
        steps.append(f"lowered to {format_bytes(cap)} ({'memory per thread / 4' if cap < limit else 'the largest auto chunk'})")
    share = math.ceil(total / itemsize / slots) * itemsize  # whole elements, so exactly one chunk per slot
    if target > share:
        target, at_floor = share, False
        steps.append(f"lowered to {format_bytes(share)} (one chunk per slot)")
    # The count of chunks, a multiple of the slots, rounded towards the bound that decided:
    # down at the overhead floor (no chunk smaller than it), up below a cap (none bigger).
    n = total / max(1, target)
    n = max(1, math.floor(n + 1e-9) if at_floor else math.ceil(n - 1e-9))
    if n % slots:
        down = max(slots, n // slots * slots)
        at_floor = at_floor and total / down <= cap  # fewer chunks only while none outgrows the cap
        n = down if at_floor else math.ceil(n / slots) * slots
        steps.append(f"{'raised' if at_floor else 'lowered'} to {format_bytes(math.ceil(total / itemsize / n) * itemsize)} "
                     f"({n} chunks, a multiple of {slots} slots)")
    final = math.ceil(total / itemsize / n) * itemsize  # whole elements, so exactly n chunks
    if not steps[-1].endswith(f"a multiple of {slots} slots)") and format_bytes(final) != format_bytes(int(target)):
        # the size a whole number of chunks gives, so the note ends on the size the table shows
        steps.append(f"{'raised' if final > target else 'lowered'} to {format_bytes(final)} ({n} equal chunks)")
    return final, ", ".join(steps)


def _balanced(n: int, size: int) -> tuple[int, ...]:
    if n == 0:
        return (0,)
    blocks = math.ceil(n / max(1, size))
    base, extra = divmod(n, blocks)
    return tuple(base + (1 if i < extra else 0) for i in range(blocks))


def _refuse_too_many(shape: tuple[int, ...], dtype: np.dtype, block: list[int], task_chunk_size: ChunkSize) -> None:
    """Refuse a layout of more than MAX_CHUNKS chunks before building it: 16-byte chunks of 1 GiB are 67 million
    tasks, whose graph alone outgrows memory and whose scheduling takes hours."""
    count = math.prod(math.ceil(n / max(1, b)) for n, b in zip(shape, block))
    if count > MAX_CHUNKS:
        total = format_bytes(dtype.itemsize * math.prod(shape))
        raise ConfigError(f"splits a {total} array into {count:,} chunks, more than the {MAX_CHUNKS:,} a run can schedule",
                          key="parallel.task_chunk_size", value=str(task_chunk_size),
                          hint="use a larger task_chunk_size, or auto")


def plan_chunks(
    shape: tuple[int, ...],
    dtype: np.dtype | str,
    *,
    task_chunk_size: ChunkSize,
    strategy: str = "data",
    slots: int = 1,
    task_overhead_s: float = DEFAULT_TASK_OVERHEAD_S,
    worker_memory: int | None = None,
    threads_per_worker: int = 1,
    stream_bytes_per_s: float | None = None,
    max_chunk_bytes: int | None = None,
) -> ChunkPlan:
    """Choose chunks for an array of ``shape`` and ``dtype``.

    Parameters
    ----------
    task_chunk_size
        Bytes, elements, or auto (see the module docstring for the rule).
    strategy
        ``data`` (and ``pipeline``, whose micro-batches are samples) splits axis 0 first;
        ``model`` splits the last axis first.
    slots
        Threads that run tasks at once, over all workers.
    task_overhead_s
        Fixed cost of one more task on the scheduler that runs them (``Backend.task_overhead_s``).
    worker_memory, threads_per_worker
        Memory limit of one worker and its threads, for the auto upper bound.
    stream_bytes_per_s, max_chunk_bytes
        One slot's streaming rate and the largest auto chunk (:class:`~openclaw_dask.cluster.base.Engine`);
        None: a CPU thread's 13.5 GB/s and :data:`MAX_AUTO_CHUNK`.
    """
    shape = tuple(int(s) for s in shape)
    dtype = np.dtype(dtype)
    total = dtype.itemsize * math.prod(shape)
    size = task_chunk_size.value  # None only for auto
    if task_chunk_size.kind == "bytes" and size is not None:
        target, reason = int(size), f"task_chunk_size = {format_bytes(size)}"
    elif task_chunk_size.kind == "elements" and size is not None:
        target = int(size) * dtype.itemsize
        reason = f"task_chunk_size = {size} elements x {dtype.itemsize} B"
    else:
        target, reason = _auto_target(total, dtype.itemsize, max(1, slots), task_overhead_s, worker_memory,
                                      threads_per_worker, stream_bytes_per_s, max_chunk_bytes)

    block = list(shape)
    budget = max(1, target // dtype.itemsize)  # elements per chunk
    order = reversed(range(len(shape))) if strategy == "model" else range(len(shape))  # pipeline streams samples
    for axis in order:
        others = math.prod(block[a] for a in range(len(shape)) if a != axis)
        if others * shape[axis] <= budget:
            break
        block[axis] = max(1, budget // max(1, others))
        if others <= budget:
            break
    _refuse_too_many(shape, dtype, block, task_chunk_size)
    chunks = tuple(_balanced(n, b) for n, b in zip(shape, block))
    return ChunkPlan(shape=shape, dtype=dtype, chunks=chunks, target_bytes=target, reason=reason)
