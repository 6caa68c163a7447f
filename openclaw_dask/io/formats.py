"""File formats the chunked readers know, as :class:`Reader` classes in a registry.

Built-ins: ``npy`` (memory-mapped), ``raw`` (binary, memory-mapped; needs ``dtype``),
``zarr`` and ``hdf5`` (extra ``io``). Another package adds a format through the entry-point
group ``openclaw_dask.readers``, naming a :class:`Reader` subclass whose ``name`` is the entry
point's::

    [project.entry-points."openclaw_dask.readers"]
    tiff = "mypackage.readers:TiffReader"

Such a format is read by :func:`openclaw_dask.io.read` (by ``format=`` or its suffixes) and can be
``workload.io_format`` (then it needs :meth:`Reader.writing` too). A built-in name wins over a plugin's.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import importlib.util
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from openclaw_dask.errors import BackendUnavailable, ConfigError, OpenclawError, ReadError
from openclaw_dask.registry import Registry

if TYPE_CHECKING:
    from openclaw_dask.config import Config

__all__ = ["ENTRY_POINT_GROUP", "READERS", "Reader", "check_format", "reader_for", "readers", "reading"]

ENTRY_POINT_GROUP = "openclaw_dask.readers"
_REWRITE = "write the file again (or restore it from a copy)"
_RESAVE = "write it again with numpy.save (or restore it from a copy)"


class Reader:
    """One file format: what it is called, which files it claims, what it needs, how to open one.

    ``open`` returns an array-like with ``shape``, ``dtype`` and ``__getitem__`` over a tuple
    of slices, without reading the data; ``close`` lets go of it. Every read opens and closes
    the file (on the worker that runs it): nothing keeps a deleted file's space in use.
    """

    name: ClassVar[str] = ""
    suffixes: ClassVar[tuple[str, ...]] = ()
    module: ClassVar[str | None] = None  # import that must work, else ``extra`` is named
    extra: ClassVar[str | None] = None
    folder: ClassVar[bool] = False  # a store is a folder (Zarr): a folder is not refused as "not a file"
    metadata_errors: ClassVar[tuple[str, ...]] = ()  # its library's errors that mean missing or corrupt metadata
    headerless: ClassVar[bool] = False  # the file holds no shape or dtype: reading it back needs dtype= and shape=

    def available(self) -> bool:
        return self.module is None or importlib.util.find_spec(self.module) is not None

    def require(self) -> None:
        if not self.available():
            raise BackendUnavailable(f"reading {self.name} files needs {self.module}, which is not installed", extra=self.extra)

    def open(self, path: str, **options: Any) -> Any:
        raise NotImplementedError

    def close(self, array: Any) -> None:
        """Release what :meth:`open` returned (memory maps go with their last reference)."""

    @contextlib.contextmanager
    def writing(self, path: str, shape: tuple[int, ...], dtype: Any, chunk_rows: int) -> Iterator[Any]:
        """A new file of ``shape`` and ``dtype`` to assign to, written ``chunk_rows`` rows at a time (io-pipeline)."""
        raise ConfigError(f"format {self.name} is read-only here: it has no writer, and io-pipeline writes its file first",
                          key="workload.io_format", value=self.name, hint="choose a format with a writer (npy, raw, zarr, hdf5)")
        yield  # pragma: no cover

    def describe(self, path: str, **options: Any) -> tuple[tuple[int, ...], np.dtype]:
        """Shape and dtype of the array in ``path``."""
        array = self.open(path, **options)
        try:
            return tuple(array.shape), np.dtype(array.dtype)
        finally:
            self.close(array)

    def read(self, path: str, index: Any, *, missing_chunks: str = "error", **options: Any) -> np.ndarray:
        """``array[index]`` of the file, as a NumPy array in memory.

        ``missing_chunks``: ``error`` refuses a region with a chunk the file lacks (see
        :meth:`require_chunks`), ``fill`` reads it as the fill value.
        """
        array = self.open(path, **options)
        try:
            if missing_chunks == "error":
                self.require_chunks(path, array, index)
            try:
                return np.array(array[index])
            except (OpenclawError, MemoryError):
                raise
            except Exception as e:
                raise ReadError(path, f"the data of {_show(index)} is corrupt ({type(e).__name__}: {_one_line(e)})",
                                _REWRITE) from e
        finally:
            self.close(array)

    def require_chunks(self, path: str, array: Any, index: Any) -> None:
        """Raise :class:`ReadError` if a chunk under ``index`` is absent (formats whose chunks are separate objects)."""

    def read_buffers(self, path: str, block: tuple[int, ...], **options: Any) -> int:
        """Bytes the library holds beside the array :meth:`read` returns while it reads a block of shape ``block``
        (decoded chunks in flight; the memory model counts them). 0: it reads straight into the array."""
        return 0


def _npy_header(path: str) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """Shape, Fortran order, dtype and data offset from a ``.npy`` header (format versions 1 and 2)."""
    fmt = np.lib.format
    with open(path, "rb") as f:
        try:
            version = fmt.read_magic(f)
        except ValueError:
            raise ReadError(path, "not a .npy file (it does not start with \\x93NUMPY)", _RESAVE + ", or read it "
                            "with format='raw' and its dtype=") from None
        try:
            shape, fortran, dtype = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}[version](f)
        except (KeyError, ValueError, SyntaxError) as e:
            raise ReadError(path, f"its .npy header (version {version[0]}.{version[1]}) is corrupt or not supported "
                            f"({_one_line(e)})", _RESAVE) from None
        return shape, fortran, dtype, f.tell()


class NpyReader(Reader):
    """Memory-mapped after a check that the file holds exactly the bytes its header promises."""

    name, suffixes = "npy", (".npy",)

    def open(self, path: str, **options: Any) -> Any:
        shape, fortran, dtype, offset = _npy_header(path)
        if dtype.hasobject:
            raise ReadError(path, f"it holds Python objects (dtype {dtype}), which cannot be read in chunks",
                            "save a numeric array instead")
        need, held = math.prod(shape) * dtype.itemsize, os.path.getsize(path) - offset
        if need != held:
            raise ReadError(path, f"its header says {dtype.str} {shape} ({need} bytes of data) but the file holds {held} bytes "
                            f"after the header: it is {'truncated' if held < need else 'longer than that'}, or the header names "
                            "the wrong dtype or shape", _RESAVE)
        if need == 0:
            return np.empty(shape, dtype)
        return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape, order="F" if fortran else "C")

    @contextlib.contextmanager
    def writing(self, path: str, shape: tuple[int, ...], dtype: Any, chunk_rows: int) -> Iterator[Any]:
        out = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=shape)
        yield out
        out.flush()


class RawReader(Reader):
    """Headerless binary: ``dtype`` (required), ``shape`` (default: 1-D, from the file size), ``offset`` bytes.

    The file must hold exactly ``offset`` + the shape's bytes: a size that does not match
    means a wrong dtype or shape, whose read would be garbage.
    """

    name, suffixes, headerless = "raw", (".raw", ".bin", ".dat"), True

    def open(self, path: str, *, dtype: Any = None, shape: Any = None, offset: int = 0, **options: Any) -> Any:
        if dtype is None:
            raise ConfigError(f"reading raw file {path}: its dtype is unknown; pass dtype='float64' (and shape=)")
        try:
            dtype = np.dtype(dtype)
        except TypeError:
            raise ConfigError(f"reading raw file {path}: dtype={dtype!r} is not a NumPy dtype; pass e.g. dtype='float64'") from None
        held = os.path.getsize(path) - offset
        if offset < 0 or held < 0:
            raise ConfigError(f"reading raw file {path}: offset={offset} is outside the file ({held + offset} bytes); "
                              "pass an offset from 0 to the file's size")
        if shape is None:
            if held % dtype.itemsize:
                raise ReadError(path, f"it holds {held} bytes after offset {offset}, not a whole number of {dtype} "
                                f"({dtype.itemsize} bytes each)", "pass the dtype= (and offset=) it was written with")
            shape = (held // dtype.itemsize,)
        shape = tuple(int(n) for n in shape)
        if math.prod(shape) * dtype.itemsize != held:
            raise ReadError(path, f"it holds {held} bytes after offset {offset}, but shape {shape} of {dtype} needs "
                            f"{math.prod(shape) * dtype.itemsize}: the file is truncated, or the shape or dtype is wrong",
                            "pass the shape= and dtype= it was written with (or write it again)")
        if held == 0:
            return np.empty(shape, dtype)
        return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape)

    @contextlib.contextmanager
    def writing(self, path: str, shape: tuple[int, ...], dtype: Any, chunk_rows: int) -> Iterator[Any]:
        out = np.memmap(path, dtype=dtype, mode="w+", shape=shape)
        yield out
        out.flush()


class ZarrReader(Reader):
    """A Zarr v2 or v3 array; a chunk missing from the store is an error unless ``io.missing_chunks: fill``.

    Zarr leaves out chunks that hold only the fill value unless written with
    ``write_empty_chunks=True``: such a store needs ``fill``.
    """

    name, suffixes, module, extra = "zarr", (".zarr",), "zarr", "io"
    folder, metadata_errors = True, ("ArrayNotFoundError", "NodeTypeValidationError", "JSONDecodeError")

    def open(self, path: str, **options: Any) -> Any:
        import zarr

        if "://" not in path and not os.path.isdir(path):
            raise ReadError(path, "not a Zarr store (a store is a folder holding zarr.json or .zarray)",
                            "pass the store's folder, or format= the file's own format")
        return zarr.open_array(path, mode="r")

    def read_buffers(self, path: str, block: tuple[int, ...], **options: Any) -> int:
        """Zarr decodes up to ``async.concurrency`` of the block's chunks at once, each copied into the block."""
        import zarr

        array = self.open(path, **options)
        grid = array.shards or array.chunks  # the objects in the store
        touched = math.prod(min(-(-b // c) + 1, -(-n // c)) for b, c, n in zip(block, grid, array.shape))  # unaligned: +1
        concurrency = int(zarr.config.get("async.concurrency") or 1)
        return min(concurrency, touched) * math.prod(grid) * array.dtype.itemsize

    @contextlib.contextmanager
    def writing(self, path: str, shape: tuple[int, ...], dtype: Any, chunk_rows: int) -> Iterator[Any]:
        import zarr

        yield zarr.open_array(path, mode="w", shape=shape, chunks=(chunk_rows, *shape[1:]), dtype=dtype)

    def require_chunks(self, path: str, array: Any, index: Any) -> None:
        from zarr.core.sync import sync

        grid = array.shards or array.chunks  # the objects in the store: shards when sharded
        ranges = []
        for n, c, part in zip(array.shape, grid, _region(index, len(array.shape))):
            start, stop, _ = part.indices(n)
            ranges.append(range(start // c, -(-stop // c)) if stop > start else range(0))
        prefix = f"{array.path}/" if array.path else ""
        keys = [prefix + array.metadata.encode_chunk_key(tuple(r[i] for r, i in zip(ranges, coords)))
                for coords in np.ndindex(*(len(r) for r in ranges))]
        missing = sync(_absent(array.store, keys))  # one trip to zarr's event loop for all of them
        if missing:
            shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
            raise ReadError(path, f"chunk {shown} is missing (io.missing_chunks = error)",
                            "restore the chunk, or set io.missing_chunks: fill if this store leaves out chunks that "
                            "hold only the fill value (zarr does unless written with write_empty_chunks=True)")


async def _absent(store: Any, keys: list[str]) -> list[str]:
    found = await asyncio.gather(*(store.exists(key) for key in keys))
    return [key for key, there in zip(keys, found) if not there]


def _region(index: Any, ndim: int) -> tuple[slice, ...]:
    """A slice per axis that covers ``index`` (slices, integers, ``...``; anything else: the whole axis)."""
    index = index if isinstance(index, tuple) else (index,)
    if Ellipsis in index:
        at = index.index(Ellipsis)
        index = index[:at] + (slice(None),) * (ndim - len(index) + 1) + index[at + 1:]
    out = []
    for part in index + (slice(None),) * (ndim - len(index)):
        if isinstance(part, (int, np.integer)) and part >= 0:
            out.append(slice(int(part), int(part) + 1))
        elif isinstance(part, slice) and part.step in (None, 1):
            out.append(part)
        else:  # a negative or fancy index: every chunk along the axis
            out.append(slice(None))
    return tuple(out)


class Hdf5Reader(Reader):
    """``dataset``: the path inside the file (default: its only dataset)."""

    name, suffixes, module, extra = "hdf5", (".h5", ".hdf5"), "h5py", "io"

    def open(self, path: str, *, dataset: str | None = None, **options: Any) -> Any:
        import h5py

        f = h5py.File(path, "r")
        names = [k for k, v in f.items() if isinstance(v, h5py.Dataset)]
        if dataset is None and len(names) == 1:
            dataset = names[0]
        found = f.get(dataset) if dataset is not None else None
        if not isinstance(found, h5py.Dataset):
            f.close()
            what = f"holds datasets {names or 'none at its top level'}" if dataset is None else \
                f"has no dataset {dataset!r} (its top-level datasets: {names or 'none'})"
            raise ConfigError(f"{path} {what}; pass dataset='NAME'")
        return found

    def close(self, array: Any) -> None:
        array.file.close()

    @contextlib.contextmanager
    def writing(self, path: str, shape: tuple[int, ...], dtype: Any, chunk_rows: int) -> Iterator[Any]:
        import h5py

        with h5py.File(path, "w") as f:
            yield f.create_dataset("data", shape=shape, dtype=dtype)


_BUILTIN = {name: f"{__name__}:{cls}" for name, cls in
            (("npy", "NpyReader"), ("raw", "RawReader"), ("zarr", "ZarrReader"), ("hdf5", "Hdf5Reader"))}
READERS: Registry[Reader] = Registry(ENTRY_POINT_GROUP, Reader, _BUILTIN, key="format", what="reader")


def readers() -> list[str]:
    """Every format's name: the built-ins, then entry points of other packages (none is imported)."""
    return READERS.names()


def check_format(config: Config) -> None:
    """Refuse a ``workload.io_format`` that no installed reader has, listing those that are (nothing is imported)."""
    name = config.workload.io_format
    if name not in READERS.names():
        raise ConfigError(key="workload.io_format", value=name, source=config.sources.get("workload.io_format"),
                          allowed=f"one of {', '.join(READERS.names())}")


def reader_for(path: str | Path, format: str | None = None) -> Reader:
    """The reader ``format`` names, or the one whose suffix ``path`` has (built-ins first, then plugins)."""
    if format is None:
        suffix = Path(path).suffix.lower()
        format = next((n for n in READERS.names() if suffix in READERS.get(n).suffixes), None)
        if format is None:
            raise ConfigError(f"cannot tell the format of {path} from its suffix; pass format= one of {', '.join(readers())}")
    if format not in READERS.names():
        raise ConfigError(f"format {format!r} is not known; use one of {', '.join(readers())}")
    reader = READERS.get(format)()
    reader.require()
    return reader


def _show(index: Any) -> str:
    """``index`` as it would be written in a subscript: ``[16:32, :]``."""
    parts = index if isinstance(index, tuple) else (index,)
    return "[" + ", ".join(f"{'' if p.start is None else p.start}:{'' if p.stop is None else p.stop}"
                           if isinstance(p, slice) else "..." if p is Ellipsis else str(p) for p in parts) + "]"


def _one_line(error: BaseException, limit: int = 200) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _check_path(path: str, reader: Reader) -> None:
    """Refuse what is not there or not a file of ``format``'s kind, before a library reports it its own way."""
    if "://" in path:  # a URL: its store library checks it
        return
    try:
        st = os.stat(path)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise ReadError(path, "it is a symlink loop", "point the link at the real file") from None
        if isinstance(e, FileNotFoundError):
            what = "a symlink to nothing" if os.path.islink(path) else "no such file or folder"
            raise ReadError(path, what, "check the path (a relative path starts where the workers run)") from None
        raise
    if not reader.folder and os.path.isdir(path):
        raise ReadError(path, "it is a folder, not a file", f"pass the {reader.name} file itself")
    if not reader.folder and st.st_size == 0:
        raise ReadError(path, "the file is empty (0 bytes)", _REWRITE)


def _explain(path: str, reader: Reader, error: Exception) -> ReadError:
    """The :class:`ReadError` for a library's own error while reading ``path``."""
    if isinstance(error, PermissionError):
        return ReadError(path, "permission denied", "make it readable by the user the workers run as")
    if type(error).__name__ in reader.metadata_errors:
        return ReadError(path, f"its metadata is missing or corrupt ({_one_line(error)})",
                         "restore the store's metadata, or write the store again")
    if isinstance(error, OSError) and "truncated" in str(error):
        return ReadError(path, f"the file is truncated ({_one_line(error)})", _REWRITE)
    kind = "store" if reader.folder else "file"
    return ReadError(path, f"corrupt, or not a {reader.name} {kind} ({type(error).__name__}: {_one_line(error)})", _REWRITE)


@contextlib.contextmanager
def reading(path: str, reader: Reader) -> Iterator[None]:
    """Where a reader opens or reads ``path``: every error it raises becomes one naming the file.

    openclaw's own errors pass as they are; any other (NumPy's, h5py's, zarr's, a
    plugin's) becomes a :class:`ReadError` that says what is wrong and how to fix it.
    """
    try:
        _check_path(path, reader)
        yield
    except (OpenclawError, MemoryError):
        raise
    except Exception as e:
        raise _explain(path, reader, e) from e
