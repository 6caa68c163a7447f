"""``array-sum``: the guide's smoke test, with a closed-form answer.

A float64 array whose elements are their own index is made chunk-wise on the
workers and kept in their memory; the sum over it is then timed ``repeat`` times.
GB/s counts the bytes the timed sum reads, so generation is reported separately
and never flatters the figure (see DESIGN.md section 6); a figure above the memory
bandwidth measured in the same run is marked invalid (:mod:`~openclaw_dask.workloads.limits`).

Out of core: when the memory model (:mod:`~openclaw_dask.memory_model`) projects that the array
does not fit the workers' memory, nothing is kept: each timed sum generates the chunks and
reduces them as it goes (``out_of_core``), and GB/s then includes generation. When even that is
projected not to fit, the sum is refused before any task runs, naming the chunk size that would.

``workload.skew`` and ``workload.straggler`` plant problems for ``openclaw profile``:
one chunk ``skew`` times bigger than the others, or one chunk whose generation
sleeps ``straggler`` seconds. The answer stays the same.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from openclaw_dask import memory_model
from openclaw_dask.cluster import running_of
from openclaw_dask.cluster.paths import path_line
from openclaw_dask.cluster.stall import stall_watch
from openclaw_dask.progress import track_persist
from openclaw_dask.workloads import accuracy
from openclaw_dask.workloads.limits import judged, throughput_limit

if TYPE_CHECKING:
    from openclaw_dask.cluster import SessionLike

__all__ = ["ArraySumResult", "run"]


@dataclass(frozen=True)
class ArraySumResult:
    """What one ``array-sum`` run measured (``to_dict()`` is the ``--json`` object)."""

    workload: str
    result: float
    expected: float
    ok: bool
    wall_s: float
    generate_s: float
    sum_s: float
    sum_s_all: tuple[float, ...]
    gbps: float
    size_bytes: int
    n_elements: int
    chunk_bytes: int
    n_chunks: int
    chunk_reason: str
    backend: str
    engine: str
    enabled: bool
    workers: int
    threads: int
    bandwidth_gbps: float = math.nan  # the limit gbps must stay under (workloads.limits), measured in this run
    invalid: str | None = None  # why gbps cannot be real (above bandwidth_gbps); None: a result
    workers_lost: int | None = 0  # during this run; None: unknown (remote scheduler without openclaw_dask)
    tasks_recomputed: int | None = 0
    failures_recovered: int | None = 0
    check: str = ""  # the bound the result was checked against (workloads.accuracy)
    out_of_core: bool = False  # the array did not fit: each timed sum generated it on the fly (GB/s includes that)
    path: str | None = None  # where the engine chose the last sum's path by measurement: which and why (cluster/paths.py)

    @property
    def mismatch(self) -> str:
        return f"computed {self.result!r}, expected {self.expected!r}: {self.check}"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["sum_s_all"] = list(self.sum_s_all)
        return d


def run(session: SessionLike, *, size: int | None = None, repeat: int | None = None, progress: bool = False) -> ArraySumResult:
    """Sum ``size`` bytes of float64 in ``session`` and check it against ``n (n - 1) / 2``.

    Parameters
    ----------
    session
        A started :class:`~openclaw_dask.Session`.
    size, repeat
        Default to ``workload.size`` and ``workload.repeat`` of the session's config.
    progress
        Show a progress bar on the terminal while the array is generated.
    """
    cfg = session.config
    size = cfg.workload.size if size is None else size
    repeat = cfg.workload.repeat if repeat is None else repeat
    n = max(1, size // 8)
    plan = session.chunk_plan((n,), "float64")
    chunks = _skewed(plan.chunks[0], cfg.workload.skew)
    before = session.recovery()
    t_start = time.perf_counter()
    total, times, generate_s, out_of_core = _summed(session, _array(session, n, chunks), repeat, progress)
    path = path_line(running_of(session).path)
    wall_s, expected, sum_s = time.perf_counter() - t_start, n * (n - 1) / 2, statistics.median(times)
    # out of core the run never holds its data: the limit is measured over what it holds at once (a cache's
    # bandwidth, a looser bound), not allocated whole beside the workers (an in-process worker's memory is this process's)
    held = min(n * 8, 8 * max(chunks) * session.slots) if out_of_core else n * 8
    gbps, limit, invalid = _judged_gbps(session, n * 8, sum_s, held)
    workers, recovery = session.workers(), session.recovery().since(before)
    # arange(n): n terms of total magnitude n(n-1)/2, summed in any order (workloads.accuracy)
    verdict = accuracy.compare(total, expected, accuracy.sum_of(expected, n), what="of n(n-1)/2")
    if invalid is None:  # Prometheus shows results only
        session.metrics.workload("array-sum", tasks=len(chunks) * (1 + repeat), nbytes=n * 8 * repeat, gbps=gbps)
    return ArraySumResult(
        workload="array-sum", result=total, expected=expected, ok=verdict.ok, check=verdict.text(),
        wall_s=wall_s, generate_s=generate_s, sum_s=sum_s, sum_s_all=tuple(times),
        gbps=gbps, bandwidth_gbps=limit, invalid=invalid,
        size_bytes=n * 8, n_elements=n, chunk_bytes=8 * max(chunks), n_chunks=len(chunks), chunk_reason=plan.reason,
        backend=session.backend.name, engine=str(session.engine), enabled=cfg.parallel.enabled,
        workers=len(workers) or 1, threads=session.slots, workers_lost=recovery.workers_lost,
        tasks_recomputed=recovery.tasks_recomputed, failures_recovered=recovery.failures_recovered,
        out_of_core=out_of_core, path=path,
    )


def _summed(session: SessionLike, x: Any, repeat: int, progress: bool) -> tuple[float, list[float], float, bool]:
    """The sum of ``x``, each timed sum's seconds, the seconds generation took, and whether it ran out of core.

    The one memory check is the model's, on the graph itself: ``x`` is persisted when it fits the workers'
    memory without spilling (a timed sum over spilled chunks would time the disk), else generated in each sum.
    """
    t0 = time.perf_counter()
    out_of_core = not memory_model.fits(session, [x], spill=False)
    if not out_of_core:
        x = _persisted(session, x, progress)
    generate_s = time.perf_counter() - t0
    with stall_watch(session) if out_of_core else contextlib.nullcontext():  # paused workers: as the persist's
        total, times = _timed_sums(session, x, repeat)
    return total, times, generate_s, out_of_core


def _judged_gbps(session: SessionLike, nbytes: int, seconds: float, measured: int) -> tuple[float, float, str | None]:
    """GB/s of reading ``nbytes`` in ``seconds``, the bandwidth over ``measured`` bytes it is held to, and why it
    cannot be real (or None)."""
    gbps = nbytes / seconds / 1e9
    return (gbps, *judged(gbps, throughput_limit(session, measured), lambda: throughput_limit(session, measured)))


def _generated(session: SessionLike, n: int, chunks: tuple[int, ...], progress: bool) -> Any:
    """``arange(n)`` in ``chunks``, persisted (with ``workload.straggler`` planted in the middle chunk)."""
    return _persisted(session, _array(session, n, chunks), progress)


def _array(session: SessionLike, n: int, chunks: tuple[int, ...]) -> Any:
    """The graph of ``arange(n)`` in ``chunks``, with ``workload.straggler`` planted in the middle chunk."""
    import dask.array as da

    straggler = session.config.workload.straggler
    x = session.array((n,), "float64", fill="arange", chunks=(chunks,))
    if straggler > 0:
        x = da.map_blocks(_straggle, x, straggler, len(chunks) // 2, dtype=x.dtype, name="openclaw-straggle")
    return x


def _persisted(session: SessionLike, x: Any, progress: bool) -> Any:
    """``x`` computed into the workers' memory, with a progress bar."""
    memory_model.require_fit(session, [x])  # as Session.persist does: refused before a task runs when it cannot fit
    with stall_watch(session):  # workers paused at their memory limit, nothing moving: ends after parallel.timeout
        return track_persist(running_of(session), x, "generating array", show=progress)


def _timed_sums(session: SessionLike, x: Any, repeat: int) -> tuple[float, list[float]]:
    """The sum of ``x`` and the seconds each of ``repeat`` runs took."""
    total, times = math.nan, []
    for _ in range(repeat):
        t0 = time.perf_counter()
        total = float(session.compute(x.sum()))
        times.append(time.perf_counter() - t0)
    return total, times


def _skewed(chunks: tuple[int, ...], skew: float) -> tuple[int, ...]:
    """The same total in the same number of chunks, the middle one ``skew`` times the rest."""
    if skew <= 1 or len(chunks) < 2:
        return chunks
    n, m = sum(chunks), len(chunks)
    base = max(1, int(n / (m - 1 + skew)))
    sizes = [base] * m
    sizes[m // 2] = n - base * (m - 1)
    return tuple(sizes)


def _straggle(block: Any, seconds: float, target: int, block_id: tuple[int, ...] | None = None) -> Any:
    if block_id is not None and block_id[0] == target:  # None: dask's call on a sample block, in the client
        time.sleep(seconds)
    return block
