"""Chunked readers: files as dask arrays chunked by ``task_chunk_size``, read where the tasks run.

:func:`read` opens one ``.npy`` (memory-mapped), raw binary, Zarr or HDF5 file (formats in
:mod:`openclaw_dask.io.formats`, a registry other packages extend). With
``parallel.async_io`` its reads run on dedicated I/O threads, started ahead of compute
(:mod:`openclaw_dask.io.prefetch`). :func:`read_many` joins many small files along axis 0,
each task reading up to ``fusion_buffer_size`` of them.

A file that is missing, truncated, corrupt, or whose header disagrees with its size is a
:class:`~openclaw_dask.errors.ReadError` naming it, on the client or in a worker's task,
never a wrong array; so is a Zarr chunk missing from its store, unless ``io.missing_chunks: fill``.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from openclaw_dask.dataflow.fusion import merge_chunks
from openclaw_dask.errors import OpenclawError
from openclaw_dask.io.formats import Reader, reader_for, readers, reading
from openclaw_dask.io.prefetch import prefetcher

if TYPE_CHECKING:
    from dask.typing import Key

    from openclaw_dask.cluster import SessionLike

__all__ = ["Reader", "Source", "read", "read_many", "readers"]


@dataclass(frozen=True)
class Source:
    """What a read task needs: the file, its format and options, the chunks, and how to read.

    ``latency`` (seconds) is added to every read: it stands in for network storage in
    benchmarks and tests, and is labelled so wherever it is reported.
    """

    format: str
    path: str
    options: tuple[tuple[str, Any], ...]
    chunks: tuple[tuple[int, ...], ...]
    latency: float = 0.0
    prefetch: int = 0  # blocks read ahead on I/O threads (0 = read in the task)
    missing_chunks: str = "error"  # io.missing_chunks
    buffers: int = 0  # bytes the reader's library holds beside a block while reading it (Reader.read_buffers)

    @property
    def numblocks(self) -> tuple[int, ...]:
        return tuple(len(c) for c in self.chunks)

    def block(self, flat: int) -> np.ndarray:
        """Read block number ``flat`` (C order over the block grid)."""
        index = np.unravel_index(flat, self.numblocks)
        starts = [sum(c[:i]) for c, i in zip(self.chunks, index)]
        slices = tuple(slice(s, s + c[i]) for s, c, i in zip(starts, self.chunks, index))
        if self.latency:
            time.sleep(self.latency)
        return _read(self.format, self.path, slices, self.options, self.missing_chunks)


@functools.cache
def _reader(format: str, path: str) -> Reader:
    return reader_for(path, format)


def _describe(format: str, path: str, options: dict[str, Any]) -> tuple[tuple[int, ...], np.dtype]:
    reader = _reader(format, path)
    with reading(path, reader):
        return reader.describe(path, **options)


def _buffers(format: str, path: str, chunks: Any, options: dict[str, Any]) -> int:
    reader = _reader(format, path)
    with reading(path, reader):
        return reader.read_buffers(path, tuple(max(c, default=0) for c in chunks), **options)


class _QuietReadErrors(logging.Filter):
    """Drops a worker's multi-line "Compute Failed" log of a read task that raised openclaw's error.

    The caller gets that error, whose one line says it all; other tasks' failures are logged as before.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        return not (str(record.msg).startswith("Compute Failed") and len(args) > 3
                    and str(args[3]).startswith(("ReadError(", "ConfigError(")))


_QUIET = _QuietReadErrors()


def _read(format: str, path: str, index: Any, options: tuple[tuple[str, Any], ...], missing_chunks: str) -> np.ndarray:
    try:
        reader = _reader(format, path)
        with reading(path, reader):
            return reader.read(path, index, missing_chunks=missing_chunks, **dict(options))
    except OpenclawError:
        logging.getLogger("distributed.worker").addFilter(_QUIET)  # in the process the task ran in; added once
        raise


def _load_block(source: Source, block_info: dict[Any, Any]) -> np.ndarray:
    info = block_info[None]
    flat = int(np.ravel_multi_index(info["chunk-location"], info["num-chunks"]))
    if not source.prefetch:
        return source.block(flat)
    return prefetcher(source, source.block, math.prod(source.numblocks), source.prefetch).get(flat)


def _hashable(options: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in options.items()))


def _threads_per_process(session: SessionLike) -> int:
    workers = session.workers()
    return max((w["nthreads"] for w in workers.values()), default=session.slots)


def read(session: SessionLike, path: str | Path, *, format: str | None = None, chunks: Any = None,
         async_io: bool | None = None, latency: float = 0.0, **options: Any) -> Any:
    """A dask array over the file ``path``, chunked by the session's ``task_chunk_size``.

    Parameters
    ----------
    format
        ``npy``, ``raw``, ``zarr``, ``hdf5`` or a plugin's name; default: from the suffix.
    chunks
        Explicit dask chunks instead of the session's choice.
    async_io
        Read ahead on I/O threads; default ``parallel.async_io``.
    latency
        Seconds added to each read, standing in for network storage (benchmarks, tests).
    options
        For the format: ``dtype``, ``shape``, ``offset`` (raw), ``dataset`` (hdf5).
    """
    import dask.array as da
    from dask.base import tokenize

    path = str(path)
    fmt = reader_for(path, format).name
    opts = _hashable(options)
    shape, dtype = _describe(fmt, path, options)
    chunks = session.chunks(shape, dtype) if chunks is None else da.core.normalize_chunks(chunks, shape, dtype=dtype)
    on = session.config.parallel.async_io if async_io is None else async_io
    depth = max(2, _threads_per_process(session)) if on else 0
    source = Source(fmt, path, opts, tuple(chunks), latency, depth, _missing_chunks(session),
                    _buffers(fmt, path, chunks, options))
    name = f"read-{fmt}-{tokenize(source, Path(path).stat().st_mtime_ns if Path(path).exists() else 0)}"
    return da.map_blocks(_load_block, source, chunks=chunks, dtype=dtype, meta=np.empty((0,) * len(shape), dtype), name=name)


def _missing_chunks(session: SessionLike) -> str:
    return session.config.io.missing_chunks


def _load_files(format: str, paths: tuple[str, ...], options: tuple[tuple[str, Any], ...], missing_chunks: str) -> np.ndarray:
    return np.concatenate([_read(format, p, ..., options, missing_chunks) for p in paths])


def read_many(session: SessionLike, paths: Sequence[str | Path], *, format: str | None = None,
              buffer: int | None = None, **options: Any) -> Any:
    """Many files of one format joined along axis 0; each task reads neighbours up to ``buffer`` bytes.

    ``buffer`` defaults to ``parallel.fusion_buffer_size``; None reads one file per task,
    as ``da.concatenate`` over per-file arrays would.
    """
    import dask.array as da
    from dask.base import tokenize
    from dask.highlevelgraph import HighLevelGraph

    names = [str(p) for p in paths]
    fmt = reader_for(names[0], format).name
    opts = _hashable(options)
    rows = []
    for p in names:  # each file's header, read once
        shape, dtype = _describe(fmt, p, options)
        rows.append(shape[0])
    rest = shape[1:]  # the columns of every file (np.concatenate refuses files whose columns differ)
    buffer = session.config.parallel.fusion_buffer_size if buffer is None else buffer
    lengths = merge_chunks(rows, dtype.itemsize * math.prod(rest), buffer)
    groups, start = [], 0
    for length in lengths:  # the files whose rows make up each merged block
        end, taken = start, 0
        while taken < length:
            taken, end = taken + rows[end], end + 1
        groups.append(tuple(names[start:end]))
        start = end
    name = f"read-many-{fmt}-{tokenize(names, opts, lengths, _missing_chunks(session))}"
    zeros = (0,) * len(rest)
    missing = _missing_chunks(session)
    dsk: dict[Key, Any] = {(name, i, *zeros): (_load_files, fmt, g, opts, missing) for i, g in enumerate(groups)}
    graph = HighLevelGraph.from_collections(name, dsk, dependencies=())
    return da.Array(graph, name, (lengths, *((r,) for r in rest)), meta=np.empty((0,) * (1 + len(rest)), dtype))
