"""File formats the chunked readers know, as :class:`Reader` classes in a registry.

Built-ins: ``npy`` (memory-mapped), ``raw`` (binary, memory-mapped; needs ``dtype``),
``zarr`` and ``hdf5`` (extra ``io``). Another package adds a format through the entry-point
group ``openclaw_dask.readers``, naming a :class:`Reader` subclass::

    [project.entry-points."openclaw_dask.readers"]
    tiff = "mypackage.readers:TiffReader"
"""

from __future__ import annotations

import importlib.util
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from openclaw_dask.errors import BackendUnavailable, ConfigError

__all__ = ["ENTRY_POINT_GROUP", "Reader", "reader_for", "readers"]

ENTRY_POINT_GROUP = "openclaw_dask.readers"


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

    def available(self) -> bool:
        return self.module is None or importlib.util.find_spec(self.module) is not None

    def require(self) -> None:
        if not self.available():
            raise BackendUnavailable(f"reading {self.name} files needs {self.module}, which is not installed", extra=self.extra)

    def open(self, path: str, **options: Any) -> Any:
        raise NotImplementedError

    def close(self, array: Any) -> None:
        """Release what :meth:`open` returned (memory maps go with their last reference)."""

    def describe(self, path: str, **options: Any) -> tuple[tuple[int, ...], np.dtype]:
        """Shape and dtype of the array in ``path``."""
        array = self.open(path, **options)
        try:
            return tuple(array.shape), np.dtype(array.dtype)
        finally:
            self.close(array)

    def read(self, path: str, index: Any, **options: Any) -> np.ndarray:
        """``array[index]`` of the file, as a NumPy array in memory."""
        array = self.open(path, **options)
        try:
            return np.array(array[index])
        finally:
            self.close(array)


class NpyReader(Reader):
    name, suffixes = "npy", (".npy",)

    def open(self, path: str, **options: Any) -> Any:
        return np.load(path, mmap_mode="r")


class RawReader(Reader):
    """Headerless binary: ``dtype`` (required), ``shape`` (default: 1-D, from the file size), ``offset`` bytes."""

    name, suffixes = "raw", (".raw", ".bin", ".dat")

    def open(self, path: str, *, dtype: Any = None, shape: Any = None, offset: int = 0, **options: Any) -> Any:
        if dtype is None:
            raise ConfigError(f"reading raw file {path}: its dtype is unknown; pass dtype='float64' (and shape=)")
        return np.memmap(path, dtype=np.dtype(dtype), mode="r", offset=offset, shape=None if shape is None else tuple(shape))


class ZarrReader(Reader):
    name, suffixes, module, extra = "zarr", (".zarr",), "zarr", "io"

    def open(self, path: str, **options: Any) -> Any:
        import zarr

        return zarr.open_array(path, mode="r")


class Hdf5Reader(Reader):
    """``dataset``: the path inside the file (default: its only dataset)."""

    name, suffixes, module, extra = "hdf5", (".h5", ".hdf5"), "h5py", "io"

    def open(self, path: str, *, dataset: str | None = None, **options: Any) -> Any:
        import h5py

        f = h5py.File(path, "r")
        if dataset is None:
            names = [k for k, v in f.items() if isinstance(v, h5py.Dataset)]
            if len(names) != 1:
                f.close()
                raise ConfigError(f"{path} holds datasets {names or 'none at its top level'}; pass dataset='NAME'")
            dataset = names[0]
        return f[dataset]

    def close(self, array: Any) -> None:
        array.file.close()


_BUILTIN: dict[str, type[Reader]] = {r.name: r for r in (NpyReader, RawReader, ZarrReader, Hdf5Reader)}


def readers() -> dict[str, type[Reader]]:
    """Every format by name: the built-ins, then entry points of other packages (a built-in name wins)."""
    found = dict(_BUILTIN)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, ep)  # loaded when chosen
    return found


def reader_for(path: str | Path, format: str | None = None) -> Reader:
    """The reader ``format`` names, or the one whose suffix ``path`` has."""
    known = readers()
    if format is None:
        suffix = Path(path).suffix.lower()
        format = next((n for n, r in known.items() if isinstance(r, type) and suffix in r.suffixes), None)
        if format is None:
            raise ConfigError(f"cannot tell the format of {path} from its suffix; pass format= one of {', '.join(known)}")
    if format not in known:
        raise ConfigError(f"format {format!r} is not known; use one of {', '.join(known)}")
    cls = known[format]
    reader = (cls if isinstance(cls, type) else cls.load())()
    reader.require()
    return reader
