"""Large array results that reach the client's memory from worker processes on this machine without the comm.

A dask array computed on worker processes comes back as pickled chunks over loopback TCP
(2.2-2.4 GB/s on this host), which the client then joins into one array: ~300 ms for the
standard stencil's 512 MiB. When the workers share this machine's memory (backend process), each
chunk goes instead, at its place, into one anonymous shared file (``memfd``) that the client holds
and maps, and there is nothing to join. Two ways, chosen once a session (:meth:`SharedResults.ready`):

- the client reads each chunk out of its worker's memory (:mod:`~openclaw_dask.cluster.pulled`):
  37-50 ms for 512 MiB;
- where this process may not read its workers' memory, each of the array's final tasks writes its
  chunk through ``/proc/<client pid>/fd/<fd>``, which only this user (or root) may open
  (:func:`write_block`): 79-110 ms, most of it the worker mapping the buffer's pages afresh.

Reuse. Fresh pages are slow to fault on some machines (this VM: 0.2-2.4 s a GiB), so the client
keeps the last buffer and lends it again once nothing refers to the array it became: every array
made from a buffer holds a reference to its ``mmap`` (a view holds its base), so a reference
count at its floor means no array of the user's can see it. A compute that fails or is
interrupted discards its buffers instead: tasks may still be writing into them (or a read may have
stopped half way).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import mmap
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = ["MIN_BYTES", "SharedResults", "write_block"]

MIN_BYTES = 32 * 2**20  # below this the TCP path costs a few ms at most
_MADV_POPULATE_WRITE = 23  # map a block's pages in one call instead of one fault per page
_KEEP_FREE = 1  # buffers kept for reuse, besides those lent: the last result's memory, as a heap would keep it


class Buffer:
    """One shared file, mapped in the client, and the ``/proc`` path the workers open it by."""

    def __init__(self, nbytes: int) -> None:
        self.size = -(-nbytes // mmap.PAGESIZE) * mmap.PAGESIZE
        self.fd = os.memfd_create("openclaw-result", os.MFD_CLOEXEC)
        try:
            os.ftruncate(self.fd, self.size)
            self.mm = mmap.mmap(self.fd, self.size)
        except BaseException:
            os.close(self.fd)
            raise
        self.path = f"/proc/{os.getpid()}/fd/{self.fd}"

    def in_use(self) -> bool:
        # getrefcount's own argument and this attribute: any more is an array made from it
        return sys.getrefcount(self.mm) > 2

    def array(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
        return np.ndarray(shape, dtype=dtype, buffer=self.mm)

    def close(self) -> None:
        """Give the file back; the memory goes once no array of the user's maps it."""
        if not self.in_use():  # an array keeps only a reference: unmapping under it would crash the process
            self.mm.close()
        os.close(self.fd)


class SharedResults:
    """The client's result buffers: lent to computes, reused when free, closed with the cluster."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # computes may run from several threads of the client
        self._lent: list[Buffer] = []
        self._free: list[Buffer] = []
        self.usable: bool | None = None  # whether the workers can be read, or open a buffer: probed on first use
        self.pulled = False  # this process may read the workers' blocks into a buffer (cluster/pulled.py)
        self.read_room = math.inf  # results up to this many bytes are read; more are written as they are made

    @classmethod
    def for_workers(cls, capabilities: Any) -> SharedResults | None:
        """One for workers in other processes of this machine (a backend's :class:`~openclaw_dask.cluster.base.Capabilities`)."""
        return cls() if capabilities.local_memory and not capabilities.in_process else None

    def wants(self, array: Any) -> bool:
        """``array`` (a dask array) is large, of NumPy chunks of plain values, and of known shape."""
        return (type(getattr(array, "_meta", None)) is np.ndarray and not array.dtype.hasobject
                and not np.isnan(array.size) and array.nbytes >= MIN_BYTES)

    def lend(self, nbytes: int) -> Buffer:
        """A buffer of at least ``nbytes``: a free one not over twice that, else a new one."""
        with self._lock:
            self._sweep()
            for buf in self._free:
                if nbytes <= buf.size <= 2 * nbytes:
                    self._free.remove(buf)
                    break
            else:
                buf = Buffer(nbytes)
            self._lent.append(buf)
        return buf

    def discard(self, buf: Buffer) -> None:
        """A buffer whose compute did not finish: never lent again."""
        with self._lock:
            self._lent.remove(buf)
        buf.close()

    def _sweep(self) -> None:
        for buf in [b for b in self._lent if not b.in_use()]:
            self._lent.remove(buf)
            self._free.append(buf)
        while len(self._free) > _KEEP_FREE:
            self._free.pop(0).close()

    def ready(self, client: Any) -> bool:
        """Whether this process can read every worker's memory (:mod:`~openclaw_dask.cluster.pulled`), or every
        worker can open a buffer (Linux; not under a ``/proc`` mounted ``hidepid``); asked once."""
        if self.usable is None:
            from openclaw_dask.cluster.pulled import workers_readable

            memfd = hasattr(os, "memfd_create")
            self.pulled = memfd and workers_readable(client)
            written = memfd and _workers_open(client)  # the workers may open a buffer to write their blocks into
            self.read_room = _read_room(client) if self.pulled and written else math.inf
            self.usable = self.pulled or written
        return self.usable

    def reads(self, nbytes: int) -> bool:
        """Whether results of ``nbytes`` in all are read out of the workers, rather than written by them.

        A read block is held by its worker to the end of the compute, as an ordinary result is; a
        written one is gone from the worker as soon as it is written. So results over a quarter of
        the workers' memory limits together are written: held, they could push the workers to spill.
        """
        return self.pulled and nbytes <= self.read_room

    def close(self) -> None:
        with self._lock:
            for buf in self._free + self._lent:
                buf.close()
            self._free, self._lent = [], []


def _limit(dask_worker: Any) -> float:  # client.run hands a function its worker by this name
    return getattr(dask_worker.memory_manager, "memory_limit", None) or math.inf


def _read_room(client: Any) -> float:
    """A quarter of the workers' memory limits together (infinite where one has none)."""
    try:
        return sum(client.run(_limit).values()) / 4
    except Exception:  # noqa: BLE001 - a worker that cannot answer: read nothing that could crowd it
        return 0.0


def _workers_open(client: Any) -> bool:
    probe = Buffer(1)
    try:
        return all(client.run(os.access, probe.path, os.W_OK).values())
    except Exception:  # noqa: BLE001  (a worker that cannot answer: keep the comm)
        return False
    finally:
        probe.close()


def write_block(block: np.ndarray[Any, Any], path: str, shape: tuple[int, ...],
                block_info: dict[Any, Any] | None = None) -> np.ndarray[Any, Any]:
    """Write ``block`` at its place in the result array the client holds at ``path``; a one-byte receipt.

    A block that is one contiguous run of the result is copied through a mapping of the buffer, its
    own pages mapped in one call (79-110 ms for stencil's 512 MiB on two workers). Any other is written
    run by run with ``pwrite`` (~210 ms), which maps nothing: a mapped column of a wide array
    would count every page it touches in this worker's memory, several times the block.
    """
    assert block_info is not None
    where = [slice(a, b) for a, b in block_info[0]["array-location"]]
    runs = list(_runs(where, shape, block.itemsize))
    fd = os.open(path, os.O_RDWR)
    try:
        if len(runs) == 1 and block.size:
            _copy_mapped(fd, runs[0][0], block)
        else:
            for offset, index in runs:  # a run's bytes at a time: a block laid out otherwise is never copied whole
                _write_all(fd, np.ascontiguousarray(block[index]).reshape(-1).view(np.uint8).data, offset)
    finally:
        os.close(fd)
    return np.zeros((1,) * block.ndim, dtype=np.int8)


def _copy_mapped(fd: int, offset: int, block: np.ndarray[Any, Any]) -> None:
    mm = mmap.mmap(fd, 0)
    try:
        start = offset - offset % mmap.PAGESIZE
        with contextlib.suppress(OSError):  # MADV_POPULATE_WRITE is Linux 5.14: else the pages fault one by one
            mm.madvise(_MADV_POPULATE_WRITE, start, offset + block.nbytes - start)
        # straight from the block, whatever its strides (a map_overlap block is a view: no copy first)
        np.frombuffer(mm, dtype=block.dtype, count=block.size, offset=offset).reshape(block.shape)[...] = block
    finally:
        mm.close()


def _write_all(fd: int, data: memoryview, offset: int) -> None:
    start = 0
    while start < len(data):  # pwrite may write less than asked
        start += os.pwrite(fd, data[start:], offset + start)


def _runs(where: list[slice], shape: tuple[int, ...], itemsize: int) -> Iterator[tuple[int, tuple[int, ...]]]:
    """The block at ``where`` as runs contiguous in the C-ordered result: each one's byte offset there, and its index in the block.

    The trailing axes the block spans whole, and the one before them, make one run; each index
    of the axes before that is another.
    """
    if not shape:
        yield 0, ()
        return
    strides = [itemsize * math.prod(shape[i + 1:]) for i in range(len(shape))]
    j = len(shape) - 1
    while j > 0 and where[j] == slice(0, shape[j]):
        j -= 1
    for index in itertools.product(*(range(w.stop - w.start) for w in where[:j])):
        yield sum((w.start + i) * st for w, i, st in zip(where, (*index, 0), strides)), index
