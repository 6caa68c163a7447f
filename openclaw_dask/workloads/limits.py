"""The physical limit a throughput figure must stay under: memory bandwidth, measured in the same run.

A timed run that reads its input once cannot go faster than this machine's memory can
deliver those bytes: NumPy summing an array of the same size on every core, the best of a
few runs, on each host that holds workers. A figure above it means the timed runs did not
do the work (a result kept from an earlier compute did this once: 7x the limit), so it is
an invalid row with the reason, never a result.

The limit is measured over the same number of bytes as the figure it bounds (up to 256 MiB;
past that every CPU here streams from memory), so data small enough to sit in a cache gets
the cache's limit, not memory's. The bound is generous on purpose (best run, a 5% margin):
it flags what cannot be, not what is merely fast. A limit measured while other work held the
memory bus is low (13.9 GB/s once, on a machine that streams 30-58): a figure above the first
measurement is judged again against fresh ones (:func:`judged`) before it is called invalid.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import numpy as np

from openclaw_dask.progress import aside

if TYPE_CHECKING:
    from openclaw_dask.cluster import SessionLike

__all__ = ["MARGIN", "implausible", "judged", "measure_bandwidth", "throughput_limit"]

MARGIN = 1.05  # a figure this far over the best measured bandwidth is invalid
STREAMED = 256 * 2**20  # past this many bytes no cache here holds the data


def measure_bandwidth(nbytes: int = STREAMED, repeat: int = 5) -> dict[str, float]:
    """Memory bandwidth of a NumPy sum over ``nbytes``, on one thread and on all cores (GB/s, best of ``repeat``)."""
    from dask.system import CPU_COUNT

    x = np.arange(max(1, nbytes // 8), dtype="f8")
    out = {}
    for threads in sorted({1, CPU_COUNT}):
        parts = np.array_split(x, threads)
        best = float("inf")
        with ThreadPoolExecutor(threads) as pool:
            for _ in range(repeat):
                t0 = time.perf_counter()
                sum(pool.map(np.sum, parts))
                best = min(best, time.perf_counter() - t0)
        out["1_thread" if threads == 1 else "all_cores"] = x.nbytes / best / 1e9
    out.setdefault("all_cores", out["1_thread"])
    return out


def hosts(session: SessionLike) -> int:
    """Machines whose memory a session's tasks read: the distinct hosts of its workers (1 on a local engine)."""
    addresses = session.workers()
    return max(1, len({urlsplit(a).hostname for a in addresses})) if addresses else 1


def throughput_limit(session: SessionLike, nbytes: int) -> float:
    """GB/s that reading ``nbytes`` once cannot beat on ``session``'s workers (this host's bandwidth per host).

    Hosts other than this one are taken to be as fast as this one. Measured inside a run, it is the referee,
    not the run: an :func:`~openclaw_dask.progress.aside` for the profiler (NumPy on fresh memory here).
    """
    with aside("measuring the memory bandwidth limit"):
        return measure_bandwidth(min(max(nbytes, 8), STREAMED))["all_cores"] * hosts(session)


def implausible(gbps: float, limit_gbps: float) -> str | None:
    """Why ``gbps`` cannot be a real figure under ``limit_gbps``, or ``None`` when it can."""
    if gbps <= limit_gbps * MARGIN:
        return None
    return (f"{gbps:.1f} GB/s is {gbps / limit_gbps:.1f}x the memory bandwidth measured in this run "
            f"({limit_gbps:.1f} GB/s): the timed runs cannot have read their data, so this is not a result")


def judged(gbps: float, limit_gbps: float, remeasure: Callable[[], float], tries: int = 2) -> tuple[float, str | None]:
    """The limit ``gbps`` is held to, and why it cannot be real (``None``: it can).

    A figure over ``limit_gbps``, even within the margin, is compared with up to ``tries`` fresh
    measurements (``remeasure()``, GB/s): the highest limit seen is returned, so a limit measured
    low (under load) does not put a real figure at more than 100% of the bandwidth, and a figure
    still over the margin after them is called invalid. A figure under the limit costs nothing.
    """
    for _ in range(tries):
        if gbps <= limit_gbps:
            break
        limit_gbps = max(limit_gbps, remeasure())
    return limit_gbps, implausible(gbps, limit_gbps)
