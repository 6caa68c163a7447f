"""Large array results that the client reads straight out of its worker processes' memory.

Why. The workers used to write each final block into the client's shared buffer
(:func:`~openclaw_dask.cluster.shared_results.write_block`), mapping it afresh every compute: a
256 MiB block's 65,536 page-table entries cost ~65 ms on this VM beside the copy's 15 ms, on each
worker, every compute. Here each final task keeps its block and returns a :class:`Receipt` (which
process, which address, what layout); the client reads every block with ``process_vm_readv``
straight into its reused, already mapped buffer, one thread per worker process: ~17 ms for two
256 MiB blocks. Nothing is mapped in a worker.

Lifetime. A block is held under its compute's id (:func:`hold_block`) until the client lets go of
that compute (:func:`let_go`), once it has read every block or the compute has failed: not tied to
the receipt's key, which a worker may spill, move to another worker, or reach through an alias
of a fused task. A task of a compute already let go (one still running when another failed) holds
nothing. A worker that dies takes its blocks with it; the client checks each process's start time
before and after reading, so a read never comes from another process that took a dead one's pid.

Permission. Reading another process's memory needs the right to trace it; under Yama's
``ptrace_scope`` 1 a process may trace its descendants, and the workers are the client's (its
nannies started them). It is probed once a session (:func:`workers_readable`); where refused
(``ptrace_scope`` 2, a seccomp filter), the workers write into the client's buffer instead.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import sys
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from itertools import product
from typing import Any, NamedTuple

import numpy as np

__all__ = ["Receipt", "hold_block", "let_go", "probe", "read_blocks", "reads_probe", "workers_readable"]

_IOV_MAX = 1024  # iovecs per process_vm_readv call (Linux's UIO_MAXIOV)
_LOCK = threading.Lock()  # task threads hold, the worker's event loop lets go
_HELD: dict[str, list[np.ndarray[Any, Any]]] = {}  # in a worker: compute id -> the blocks its receipts point at
_LET_GO: deque[str] = deque(maxlen=1024)  # computes let go of: a task of one that finishes late holds nothing
_PROBE = np.frombuffer(b"openclaw: the client may read this worker's memory", dtype=np.uint8)


class Receipt(NamedTuple):
    """Where a worker process holds a final block: the process (pid and start time), the data's address and layout."""

    pid: int
    started: int
    address: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]


def hold_block(block: Any, compute: str) -> np.ndarray[Any, Any]:
    """Keep ``block`` in this worker for the client to read until it lets go of ``compute``; its receipt, in a
    one-element object array.

    A block that is not a plain NumPy array of plain values (a masked array, objects) travels in its
    receipt's place over the comm, as it would without this path.
    """
    receipt = np.empty((1,) * np.ndim(block), dtype=object)
    if type(block) is not np.ndarray or block.dtype.hasobject:
        receipt.flat[0] = block
        return receipt
    if block.ndim == 0 or block.strides[-1] != block.itemsize:
        block = np.ascontiguousarray(block)  # its rows must be runs of memory: the reads copy runs
    with _LOCK:
        if compute in _LET_GO:
            return receipt  # nobody reads it: its compute failed while this task ran
        _HELD.setdefault(compute, []).append(block)
    receipt.flat[0] = Receipt(os.getpid(), _own_start(os.getpid()), block.ctypes.data, block.shape, block.strides)
    return receipt


def _drop(compute: str) -> None:
    with _LOCK:
        _LET_GO.append(compute)
        _HELD.pop(compute, None)


def let_go(client: Any, compute: str) -> None:
    """Every worker lets go of ``compute``'s blocks (read, or never to be)."""
    with contextlib.suppress(Exception):  # a cluster that is going: its workers' blocks go with them
        client.run(_drop, compute, on_error="ignore")


def probe() -> tuple[int, int, int, int]:
    """Where this process's probe bytes lie, for another to read them back (:func:`reads_probe`): its pid, its start
    time, their address and length."""
    return os.getpid(), _own_start(os.getpid()), _PROBE.ctypes.data, _PROBE.nbytes


def reads_probe(pid: int, started: int, address: int, nbytes: int) -> bool:
    """Whether this process reads process ``pid``'s probe bytes back whole (:func:`probe`'s answer there): not where
    refused (EPERM), where that process is gone, or where its start time cannot be read (a reused pid could not be
    told apart)."""
    if started < 0:
        return False
    got = np.empty(nbytes, dtype=np.uint8)
    try:
        _read_all(pid, started, [_runs(got, Receipt(pid, started, address, (nbytes,), (1,)))])
    except OSError:
        return False
    return np.array_equal(got, _PROBE)


def workers_readable(client: Any) -> bool:
    """Whether this process may read every worker's memory (each worker's probe bytes, read back and compared)."""
    if not sys.platform.startswith("linux") or _readv() is None:
        return False
    try:
        return all(reads_probe(*where) for where in client.run(probe).values())
    except Exception:  # noqa: BLE001 - a worker that cannot answer: the write path
        return False


def read_blocks(receipts: Any, out: np.ndarray[Any, Any], chunks: tuple[tuple[int, ...], ...]) -> None:
    """Copy every block of ``receipts`` (nested as the array's blocks) to its place in ``out``.

    Raises ``OSError`` where a block cannot be read whole from the process that made it (gone, say).
    """
    starts = [np.cumsum((0, *c)) for c in chunks]
    by_process: dict[tuple[int, int], list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]]] = {}
    for index in product(*(range(len(c)) for c in chunks)):
        receipt = _at(receipts, index).flat[0]
        place = out[tuple(slice(s[i], s[i + 1]) for s, i in zip(starts, index, strict=True))]
        if receipt is None:
            raise OSError(f"block {index} was let go before it was read")
        if not isinstance(receipt, Receipt):
            place[...] = receipt  # it came over the comm
        elif place.size:
            by_process.setdefault((receipt.pid, receipt.started), []).append(_runs(place, receipt))
    with ThreadPoolExecutor(max(1, len(by_process))) as pool:  # ctypes lets go of the GIL: processes are read at once
        for done in [pool.submit(_read_all, pid, started, runs) for (pid, started), runs in by_process.items()]:
            done.result()


def _at(nested: Any, index: tuple[int, ...]) -> Any:
    for i in index:
        nested = nested[i]
    return nested


def _runs(place: np.ndarray[Any, Any], receipt: Receipt) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """The block as pairs of runs, here and in the worker: (address, bytes) rows, one run each, in C order."""
    shape, itemsize = place.shape, place.itemsize
    k = min(_tail(shape, place.strides, itemsize), _tail(shape, receipt.strides, itemsize)) if shape else 0
    lead, length = shape[:len(shape) - k], itemsize * int(np.prod(shape[len(shape) - k:]))
    local = place.ctypes.data + _offsets(lead, place.strides)
    remote = receipt.address + _offsets(lead, receipt.strides)
    size = np.full(local.size, length, dtype=np.uint64)
    return np.stack([local.astype(np.uint64), size], axis=1), np.stack([remote.astype(np.uint64), size], axis=1)


def _tail(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> int:
    """How many trailing axes (at least the last) are one run of memory in this layout."""
    k, step = 1, itemsize * shape[-1]
    while k < len(shape) and (shape[-k - 1] == 1 or strides[-k - 1] == step):
        step *= shape[-k - 1]
        k += 1
    return k


def _offsets(lead: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray[Any, Any]:
    offsets = np.zeros(1, dtype=np.int64)
    for n, stride in zip(lead, strides, strict=False):
        offsets = (offsets[:, None] + np.arange(n, dtype=np.int64) * stride).reshape(-1)
    return offsets


def _read_all(pid: int, started: int, blocks: list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]]) -> None:
    """Every block from process ``pid``, which must be the process that started at ``started`` throughout."""
    _same(pid, started)
    for local, remote in blocks:
        for start in range(0, len(local), _IOV_MAX):
            _read(pid, local[start:start + _IOV_MAX], remote[start:start + _IOV_MAX])
    _same(pid, started)  # not another process that took a dead worker's pid while it was read


def _same(pid: int, started: int) -> None:
    if _started(pid) != started:
        raise OSError(f"worker process {pid} is gone")


@functools.cache
def _own_start(pid: int) -> int:
    """This worker process's start time, read once (keyed by the pid: a forked child reads its own)."""
    return _started(pid)


def _started(pid: int) -> int:
    """When process ``pid`` started (clock ticks since boot, /proc/<pid>/stat), or -1: no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[19])  # field 22; the name before ")" may hold spaces
    except (OSError, IndexError, ValueError):
        return -1


def _read(pid: int, local: np.ndarray[Any, Any], remote: np.ndarray[Any, Any]) -> None:
    """One ``process_vm_readv``: ``remote``'s runs in process ``pid`` into ``local``'s, every byte or ``OSError``."""
    local, remote = np.ascontiguousarray(local), np.ascontiguousarray(remote)
    want = int(local[:, 1].sum())
    got = _readv()(pid, local.ctypes.data, len(local), remote.ctypes.data, len(remote), 0)
    if got != want:  # -1 with errno, or a partial read: a run that is no longer mapped
        errno = ctypes.get_errno() if got < 0 else 0
        raise OSError(errno, f"read {got} of {want} bytes from worker process {pid}: {os.strerror(errno) if errno else 'partial'}")


@functools.cache
def _readv() -> Any:
    """libc's ``process_vm_readv`` (``None`` where it has none)."""
    try:
        call = ctypes.CDLL(None, use_errno=True).process_vm_readv
    except (AttributeError, OSError):
        return None
    call.restype = ctypes.c_ssize_t
    call.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    return call
