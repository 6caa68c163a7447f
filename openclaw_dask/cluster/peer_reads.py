"""Array blocks that a worker process reads straight out of the memory of the worker that holds them.

Why. Two worker processes of one session move a block over loopback TCP: the holder serializes it
and writes it through a socket, the asker reads it back, each copy on a core the tasks want
(~2.3 GiB/s on the Intel host, ~1.5 on the AMD one: docs/benchmarks.md, nineteenth pass). Here the
holder answers with where the block lies instead (:class:`~openclaw_dask.cluster.pulled.Receipt`),
and the asker copies it with one ``process_vm_readv``, as the client reads its results
(:mod:`~openclaw_dask.cluster.pulled`).

How. A serialization family, ``openclaw-peer``, known to every worker process of the session. A
worker asks for its dependencies with that family first among the ones it accepts (distributed's
``get_data_from_worker``, wrapped in the asking worker); the holder's ``get_data`` then serializes
each plain NumPy array of at least :data:`MIN_BYTES`, whose rows are runs of memory, as a receipt
and no frames, and anything else as before (``NotImplementedError`` passes it to the next family).

Lifetime. The asker reads the block while it deserializes the answer, before it replies "OK"; the
holder's ``get_data`` keeps the arrays it answered with until that reply. So the memory read is the
block's, by construction. The holder's pid and start time are checked before and after the read: a
holder that died (its pid taken by another process) is an ``OSError``, which distributed treats as a
failed transfer (it asks again, elsewhere or later).

Permission. The workers are siblings, and under Yama's ``ptrace_scope`` 1 a process may read only
its descendants: each worker names the session's process as its tracer (``PR_SET_PTRACER``), which
lets that process's descendants, its sibling workers, read it too. Once the workers run, each reads
every other's probe bytes (:func:`start_asking`) and asks this way only if all of them read back
whole; where refused (``ptrace_scope`` 2, a seccomp filter, workers of several hosts) blocks go over
TCP as before. A worker that joins later does not ask, but answers.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import sys
from typing import TYPE_CHECKING, Any

import distributed.worker
import numpy as np
from distributed.diagnostics.plugin import WorkerPlugin
from distributed.protocol.serialize import register_serialization_family

from openclaw_dask.cluster.pulled import Receipt, _own_start, _read_all, _runs, _tail, probe, reads_probe

if TYPE_CHECKING:
    from distributed import Client, Worker

__all__ = ["FAMILY", "MIN_BYTES", "PeerReads", "asked_with", "reads_done", "start_asking"]

logger = logging.getLogger(__name__)

FAMILY = "openclaw-peer"
MIN_BYTES = 2**20  # smaller blocks go over TCP: a few ms saved needs megabytes
_MIN_RUN = 4096  # bytes per run on average, or the reads cost more in iovecs than they save
_ASKED_WITH = [FAMILY, "dask", "pickle", "error"]  # a worker's own default, with this family first
_PR_SET_PTRACER = 0x59616D61  # linux/prctl.h: "Yama"
_READ = {"blocks": 0, "bytes": 0}  # in an asking worker: what it has read out of its peers


def _dumps(x: Any) -> tuple[dict[str, Any], list[Any]]:
    """A block's receipt for a peer to read it by, or ``NotImplementedError``: the next family serializes it."""
    if type(x) is not np.ndarray or x.ndim == 0 or x.nbytes < MIN_BYTES or x.dtype.hasobject or x.dtype.fields is not None:
        raise NotImplementedError
    transposed = x.strides[-1] != x.itemsize and x.strides[0] == x.itemsize  # Fortran order: its transpose is rows
    block = x.T if transposed else x
    if block.strides[-1] != block.itemsize:
        raise NotImplementedError
    runs = int(np.prod(block.shape[:block.ndim - _tail(block.shape, block.strides, block.itemsize)]))
    if block.nbytes < _MIN_RUN * runs:
        raise NotImplementedError
    header = {"receipt": [os.getpid(), _own_start(os.getpid()), block.ctypes.data, list(block.shape), list(block.strides)],
              "dtype": block.dtype.str, "transposed": transposed}
    return header, []


def _loads(header: dict[str, Any], frames: list[Any]) -> np.ndarray[Any, Any]:
    """The block a receipt points at, copied out of its holder (``OSError`` where that process is gone)."""
    pid, started, address, shape, strides = header["receipt"]
    out = np.empty(tuple(shape), dtype=np.dtype(header["dtype"]))
    _read_all(pid, started, [_runs(out, Receipt(pid, started, address, tuple(shape), tuple(strides)))])
    _READ["blocks"] += 1
    _READ["bytes"] += out.nbytes
    return out.T if header["transposed"] else out


register_serialization_family(FAMILY, _dumps, _loads)


async def _asking(rpc: Any, keys: Any, worker: str, *, who: str | None = None, serializers: Any = None,
                  deserializers: Any = None) -> Any:
    """distributed's ``get_data_from_worker``, accepting this family first unless told otherwise."""
    return await _ORIGINAL(rpc, keys, worker, who=who, serializers=serializers,
                           deserializers=_ASKED_WITH if deserializers is None else deserializers)


def asked_with() -> list[str] | None:
    """In a worker: the serializers it accepts its peers' blocks in (this family first while it asks this way), or
    ``None``: distributed's own."""
    return _ASKED_WITH if distributed.worker.get_data_from_worker is _asking else None


def _ask(on: bool) -> None:
    distributed.worker.get_data_from_worker = _asking if on else _ORIGINAL


_ORIGINAL = distributed.worker.get_data_from_worker  # what a worker's gather_dep calls, by its module's name


class PeerReads(WorkerPlugin):
    """Lets the session's process and its descendants, the sibling workers, read this worker's memory;
    undoes the asking at teardown."""

    name = "openclaw-peer-reads"

    def __init__(self) -> None:
        self.tracer = os.getpid()  # the session's process: the workers are its children

    def setup(self, worker: Worker) -> None:
        if sys.platform.startswith("linux") and os.getpid() != self.tracer:
            _libc().prctl(_PR_SET_PTRACER, ctypes.c_ulong(self.tracer), 0, 0, 0)  # EINVAL without Yama: nothing to lift

    def registered(self, client: Client) -> None:
        """In the session's process, once every worker has set this plugin up."""
        start_asking(client)

    def teardown(self, worker: Worker) -> None:
        _ask(False)


@functools.cache
def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def _ask_if_all_read(peers: list[tuple[int, int, int, int]]) -> bool:
    """In a worker: read every other worker's probe (:func:`~openclaw_dask.cluster.pulled.probe`); ask this way if
    each came back whole."""
    if not all(reads_probe(*peer) for peer in peers if peer[0] != os.getpid()):
        return False
    _ask(True)
    return True


def start_asking(client: Client) -> bool:
    """Have each worker of ``client`` read its peers' blocks out of their memory, if every one can; whether they do."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        peers = list(client.run(probe).values())
        asking = len(peers) > 1 and all(client.run(_ask_if_all_read, peers).values())
    except Exception as e:  # noqa: BLE001 - a worker that cannot answer: blocks keep going over TCP
        logger.debug("workers read each other's blocks over TCP: %s", e)
        return False
    logger.debug("workers read each other's blocks out of their memory: %s", asking)
    return asking


def reads_done() -> dict[str, int]:
    """In a worker: the blocks, and their bytes, it has read out of its peers (for tests and benchmarks)."""
    return dict(_READ)
