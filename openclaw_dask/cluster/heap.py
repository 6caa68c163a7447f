"""Freed memory kept for reuse in the session's process (glibc's malloc, set through ``mallopt``).

glibc gives every allocation above 32 MiB fresh pages from ``mmap`` and unmaps them when
they are freed, and a task thread's own arena cannot hold one at all. So each chunk-sized
temporary of a task (``np.pad`` of a block, ``np.sin(x)``, ``x + y``) paid page faults on
new memory, and with two task threads the faults queued on the process's address-space lock:
the ``stencil`` kernel ran slower on two threads than on one, and varied 3x from run to run
(docs/benchmarks.md). While a session runs tasks in this process on a dask local scheduler,
big blocks come from the main heap and stay there when freed, for the next task to reuse. The
client of a distributed engine whose workers run elsewhere does the same for the results it
gathers: a 512 MiB stencil result took 0.29-0.91 s to gather into fresh pages, 0.23-0.26 s
into reused ones. Closing the session restores the limits and hands free memory back to the
system (``malloc_trim``); with sessions inside one another it is held once, while the newest
open one wants it (:mod:`~openclaw_dask.cluster.process_state`, its one caller), and
``MALLOC_*`` variables or glibc's malloc tunables (your own tuning, :func:`tuned_by_user`) turn
this off. Two effects outlive it: glibc fixes its arena limit the first time it needs a second
arena, so threads started in this process later may share the main arena; and the mmap
threshold stays at 32 MiB instead of sliding up to it.

That arena limit is why the ``openclaw`` command sets it as it starts (:func:`one_arena`). Set
after some thread of the process already took its own arena (a progress display, a BLAS pool,
a notebook kernel's threads), it is too late: task threads then take arenas of their own, whose
heaps glibc unmaps whenever they are wholly free, however the trim threshold is set. The
standard stencil on two threads then faulted ~6,000 pages in each run (0.3 s of system time in
0.52 s; docs/benchmarks.md) instead of none (0.37 s a run). A session sets it too, before its
engine starts: a distributed client's IO thread receives results into blocks of its own arena
otherwise, and in a script a 128 MiB result was fresh pages at every compute (six heaps, where
the session now leaves one).

Not where a distributed worker runs: it watches its process's memory to decide when to
spill, and memory kept for reuse would look like a leak to it. A worker process gets a
bounded version instead (:class:`~openclaw_dask.cluster.plugins.WorkerHeap`). distributed starts it with
``MALLOC_TRIM_THRESHOLD_=65536``, which also pins glibc's mmap threshold at 128 KiB: every
array above that is fresh pages from ``mmap``, faulted in on first touch and unmapped when
freed. The pipeline kernel's stages (2 MiB batches) ran 3x (``load``) and 8x (``preprocess``)
slower in a worker process than the same calls in the client. With blocks under 32 MiB from
the heap and at most 4 MiB of free memory kept at its top, they run as fast as in the client,
and the worker's memory grew by under 4 MiB (docs/benchmarks.md, "Worker heap").

Chunk-sized blocks need more, and a bound in time. A worker process a session's nanny spawns
starts with one arena (:data:`WORKER_ARENA` in its environment: glibc reads it as the process
starts, before any thread could take an arena of its own), so its task threads' blocks of any
size come from the main heap, and glibc gives none back by itself (:data:`WORKER_KEEP`). The
worker gives its free pages back (``malloc_trim``) once it has been idle :data:`KEEP_IDLE_S`,
and at once when its memory nears the point where distributed would spill or pause
(:func:`trim_point`). So a run of computes reuses the last one's pages, where each faulted its
temporaries in afresh (the standard stencil's 256 MiB blocks: 0.12-0.22 s of system time per
worker a compute, ~0 reused; docs/benchmarks.md, fourteenth pass), and an idle worker holds no
more than it needs for longer than a second. What it holds free is reported with its metrics
(:func:`heap_free`), so the memory check does not count it as taken.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import logging
import os
import sys
from collections.abc import Iterable, Iterator

__all__ = ["DISTRIBUTED_TRIM", "KEEP_IDLE_S", "KEEP_MIN", "MMAP_MAX_DEFAULT", "M_MMAP_MAX", "M_TRIM_THRESHOLD", "WORKER_ARENA", "WORKER_HEAP", "WORKER_HEAP_MIN_LIMIT", "WORKER_KEEP",
           "glibc", "heap_free", "heap_reuse", "one_arena", "trim_point", "tunable_glibc", "tuned_by_user"]

logger = logging.getLogger("openclaw_dask.cluster")

# mallopt parameters (malloc.h) and glibc's defaults for them
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_MMAP_MAX, M_ARENA_MAX = -1, -3, -4, -8
# -1: never trim the heap's top while the session runs. Trimmed pages come back as page faults on
# the next run, and a fault costs ~15 us a page on this VM: a 2 GiB re-growth measured 1-2 s of system time.
_REUSE = ((M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, -1), (M_ARENA_MAX, 1))
# Setting any of them ends glibc's sliding mmap threshold for good: put it where it slides to (32 MiB).
MMAP_MAX_DEFAULT = 65536
_DEFAULTS = ((M_MMAP_MAX, MMAP_MAX_DEFAULT), (M_TRIM_THRESHOLD, 128 * 1024), (M_MMAP_THRESHOLD, 32 * 2**20), (M_ARENA_MAX, 0))
# A worker process: blocks under 32 MiB from the heap, at most 4 MiB free kept at its top (bounded, for the memory monitor)
WORKER_HEAP = ((M_MMAP_THRESHOLD, 32 * 2**20), (M_TRIM_THRESHOLD, 4 * 2**20))
WORKER_HEAP_MIN_LIMIT = 2**30
DISTRIBUTED_TRIM = "65536"  # the MALLOC_TRIM_THRESHOLD_ distributed's nannies set
WORKER_ARENA = {"MALLOC_ARENA_MAX": "1"}  # what a session's nannies spawn worker processes with
# A one-arena worker: every block from the main heap, none given back but by WorkerHeap's malloc_trim
WORKER_KEEP = ((M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, -1))
KEEP_MIN = 4 * 2**20  # less free than this is not worth a trim (what WORKER_HEAP keeps at the top)
KEEP_IDLE_S = 1.0  # an idle worker's free pages go back after this long: the next compute's are mostly warm by then
# set by distributed or by openclaw, not the user's own tuning
_OURS = {"MALLOC_TRIM_THRESHOLD_": DISTRIBUTED_TRIM, **WORKER_ARENA}


@functools.cache
def glibc() -> ctypes.CDLL | None:
    """The C library, where it is glibc (its mallopt parameters); ``None`` elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    for name in _libc_names():
        try:
            libc = ctypes.CDLL(name)
            libc.gnu_get_libc_version  # noqa: B018  (musl and others have no mallopt parameters to set)
        except (OSError, AttributeError):  # None (no library found) loads the program itself: no glibc there either
            continue
        return libc
    return None


def _libc_names() -> Iterator[str | None]:
    yield "libc.so.6"  # glibc's own name, tried first: find_library runs ldconfig in a child process (~4 ms)
    yield ctypes.util.find_library("c")


def tuned_by_user() -> bool:
    """``MALLOC_*`` variables or glibc's malloc tunables: the user's own tuning, which openclaw leaves alone.

    Not what nannies write into the environment of the process that spawns workers (and so into
    each worker's): distributed's trim threshold, :data:`DISTRIBUTED_TRIM`, and the session's
    :data:`WORKER_ARENA`.
    """
    own = {k: v for k, v in os.environ.items() if k.startswith("MALLOC_")}
    return any(_OURS.get(k) != v for k, v in own.items()) or "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", "")


def tunable_glibc() -> ctypes.CDLL | None:
    """glibc, where openclaw may tune its malloc: not without glibc, nor over the user's own tuning."""
    return None if tuned_by_user() else glibc()


def one_arena() -> bool:
    """Have every thread of this process allocate from glibc's main heap; call it before threads start.

    For a process that runs sessions' tasks in its own threads, as the ``openclaw`` command does.
    Whether it was set (glibc, and no malloc tuning of the user's).
    """
    libc = tunable_glibc()
    if libc is None:
        return False
    libc.mallopt(M_ARENA_MAX, 1)
    return True


@contextlib.contextmanager
def heap_reuse() -> Iterator[None]:
    """Keep freed blocks in the heap while the block runs; give them back on exit (glibc only)."""
    libc = tunable_glibc()
    if libc is not None:
        for param, value in _REUSE:
            libc.mallopt(param, value)
        logger.debug("malloc keeps freed memory for reuse while the session runs")
    try:
        yield
    finally:
        if libc is not None:
            for param, value in _DEFAULTS:
                libc.mallopt(param, value)
            libc.malloc_trim(0)


def trim_point(limit: int | None, fractions: Iterable[float | bool | None]) -> int | None:
    """The process memory (bytes) above which a worker gives its free heap pages back, pure.

    Nine tenths of the lowest of distributed's ``spill`` and ``pause`` fractions of ``limit`` (those
    not turned off): kept pages go before its memory monitor could count them as data.
    ``None``: no limit, or both off.
    """
    on = [f for f in fractions if f]
    return int(0.9 * min(on) * limit) if on and limit else None


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def heap_free(libc: ctypes.CDLL) -> int | None:
    """Bytes free in glibc's heaps (``mallinfo2``'s ``fordblks``: trimmed pages too); ``None`` before glibc 2.33."""
    mallinfo2 = getattr(libc, "mallinfo2", None)
    if mallinfo2 is None:
        return None
    mallinfo2.restype = _Mallinfo2
    return int(mallinfo2().fordblks)
