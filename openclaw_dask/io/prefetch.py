"""``async_io``: chunk reads on dedicated I/O threads, started a bounded distance ahead of compute.

A read task asks its process's :class:`Prefetcher` for block ``i``; the prefetcher hands
back the read already in flight (or starts it) and queues reads of the next ``depth``
blocks on its own I/O threads, so the task threads compute on block ``i`` while blocks
``i+1 .. i+depth`` load. Dask runs a chunked read's tasks roughly in block order, forwards
or (a reduction's graph, often) backwards: the prefetcher reads backwards after a request
just behind the last one, forwards otherwise. A block another process took is dropped once it falls ``depth`` behind.
Memory: at most ``depth`` prefetched blocks per array per process.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Prefetcher", "Stats", "prefetcher"]

MAX_OPEN = 4  # prefetchers (arrays) kept per process; the oldest is shut down


@dataclass
class Stats:
    """Reads this process served: ``ahead`` had been started before their task asked."""

    ahead: int = 0
    waited: int = 0
    dropped: int = 0


@dataclass
class Prefetcher:
    """Reads of one array's blocks (``read(i)``, ``n`` blocks), ``depth`` ahead on ``depth`` I/O threads."""

    read: Callable[[int], Any]
    n: int
    depth: int
    stats: Stats = field(default_factory=Stats)

    def __post_init__(self) -> None:
        self._pool = ThreadPoolExecutor(self.depth, thread_name_prefix="openclaw-io")
        self._pending: dict[int, Future[Any]] = {}
        self._taken: OrderedDict[int, None] = OrderedDict()
        self._last = -1
        self._lock = threading.Lock()

    def get(self, i: int) -> Any:
        """Block ``i``: the read in flight, or a new one; then queue the next ``depth``."""
        with self._lock:
            if i in self._taken:  # read again: a new pass over the array (another compute), so all may be read ahead
                self._taken.clear()
                self._last = -1
            future = self._pending.pop(i, None)
            if future is None:
                future = self._pool.submit(self.read, i)
                self.stats.waited += 1
            else:
                self.stats.ahead += 1
            self._taken[i] = None
            while len(self._taken) > 4 * self.depth:
                self._taken.popitem(last=False)
            step = -1 if self._last - self.depth <= i < self._last else 1  # just behind the last: going backwards
            self._last = i
            for j in range(i + step, i + step * (self.depth + 1), step):
                if 0 <= j < self.n and j not in self._pending and j not in self._taken:
                    self._pending[j] = self._pool.submit(self.read, j)
            for j in [j for j in self._pending if (j - i) * step < -self.depth]:  # taken elsewhere: free its memory
                self._pending.pop(j).cancel()
                self.stats.dropped += 1
        return future.result()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._pending.clear()


_OPEN: OrderedDict[Hashable, Prefetcher] = OrderedDict()
_OPEN_LOCK = threading.Lock()


def prefetcher(key: Hashable, read: Callable[[int], Any], n: int, depth: int) -> Prefetcher:
    """This process's prefetcher for the array ``key`` (made on first use; at most :data:`MAX_OPEN` kept)."""
    with _OPEN_LOCK:
        p = _OPEN.get(key)
        if p is None:
            p = _OPEN[key] = Prefetcher(read, n, depth)
            while len(_OPEN) > MAX_OPEN:
                _OPEN.popitem(last=False)[1].close()
        _OPEN.move_to_end(key)
        return p

