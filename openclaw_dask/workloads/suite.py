"""The benchmark suite's kernels, each checked against NumPy (see :mod:`openclaw_dask.workloads.prepared`), and
``openclaw run`` for any of them (:func:`run_kernel`)."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from openclaw_dask import memory_model
from openclaw_dask.cluster import running_of
from openclaw_dask.cluster.paths import path_line
from openclaw_dask.dataflow import fusion
from openclaw_dask.progress import aside
from openclaw_dask.workloads import accuracy, models, streams
from openclaw_dask.workloads.prepared import Prepared, WorkloadResult

if TYPE_CHECKING:
    from openclaw_dask.cluster import SessionLike

__all__ = ["KERNELS", "SUITES", "Prepared", "run_kernel"]


def _vector(s: SessionLike, size: int, fill: str = "arange") -> Any:
    return s.persist(s.array((max(1, size // 8),), "float64", fill=fill))


def _matrix(s: SessionLike, size: int, fill: str = "random", seed: int = 0) -> Any:
    side = max(2, int(math.sqrt(size / 8)))
    return s.persist(s.array((side, side), "float64", fill=fill, seed=seed))


def array_sum(s: SessionLike, size: int) -> Prepared:
    """``x.sum()`` over an index-valued float64 vector, checked against its closed form."""
    x = _vector(s, size)
    return Prepared(lambda x: x.sum(), np.sum, (x,), x.nbytes, accuracy=_total)


def _total(a: np.ndarray) -> accuracy.Bound:
    return accuracy.sum_of(np.abs(a).sum(), a.size)


def elementwise(s: SessionLike, size: int) -> Prepared:
    """``(sin(x) * 2 + x).sum()`` over a random vector: fused element-wise work."""
    x = _vector(s, size, "random")
    return Prepared(lambda x: (np.sin(x) * 2.0 + x).sum(), lambda a: (np.sin(a) * 2.0 + a).sum(), (x,), x.nbytes, 3.0 * x.size,
                    accuracy=_sin_terms)


def _sin_terms(a: np.ndarray) -> accuracy.Bound:
    """Each term ``2 sin(a) + a``: sin's ULPs, one rounding for the sum (times 2 is exact), then the sum."""
    return accuracy.sum_of((2 * np.abs(np.sin(a)) + np.abs(a)).sum(), a.size, ops=1, ulps=accuracy.LIBM_ULPS)


def matmul(s: SessionLike, size: int) -> Prepared:
    """``a @ b``, two random square matrices of 1/8 of the size each."""
    # compute grows as size**1.5: an eighth of the suite size per matrix keeps it in step with the rest
    a, b = _matrix(s, size // 8, seed=1), _matrix(s, size // 8, seed=2)
    n = a.shape[0]
    return Prepared(lambda a, b: a @ b, np.matmul, (a, b), 3 * a.nbytes, 2.0 * n**3, accuracy=accuracy.matmul)


def tree_reduction(s: SessionLike, size: int) -> Prepared:
    """A sum of squares through a tree of combine tasks: fan-in 4, or as fusion_buffer_size merges it."""
    x = _vector(s, size, "random")

    def tree(x: Any) -> Any:
        if s.config.parallel.fusion_buffer_size is None:
            return (x * x).sum(split_every=4)
        return fusion.reduce(s, x * x, "sum")

    def squares(a: np.ndarray) -> accuracy.Bound:  # one rounding per square, then the sum
        return accuracy.sum_of((a * a).sum(), a.size, ops=1)

    return Prepared(tree, lambda a: (a * a).sum(), (x,), x.nbytes, 2.0 * x.size, accuracy=squares)


def stencil(s: SessionLike, size: int) -> Prepared:
    """A 5-point smoothing with ``map_overlap``: neighbours' edges move between chunks."""
    x = _matrix(s, size)

    def smooth(block: np.ndarray) -> np.ndarray:
        return (block[:-2, 1:-1] + block[2:, 1:-1] + block[1:-1, :-2] + block[1:-1, 2:] + 4 * block[1:-1, 1:-1]) / 8

    # smooth's sum holds two temporaries beside the block where NumPy adds in place into the last one, three where
    # it does not (NumPy's heuristic, not the code's choice): at 32 MiB the task usually held 96 MiB, in about
    # 1 pytest run of 10-25 128 (docs/memory.md)
    @memory_model.allocates(inputs=1)
    def padded(block: np.ndarray) -> np.ndarray:  # map_overlap keeps block shapes
        return np.pad(smooth(block), 1)

    def dask_stencil(x: Any) -> Any:
        return x.map_overlap(padded, depth=1, boundary="nearest", dtype=x.dtype)

    def numpy_stencil(a: np.ndarray) -> np.ndarray:
        return smooth(np.pad(a, 1, mode="edge"))

    def terms(a: np.ndarray) -> accuracy.Bound:  # four additions (times 4 and / 8 are exact) of these terms
        return accuracy.elementwise(numpy_stencil(np.abs(a)), 4)

    return Prepared(dask_stencil, numpy_stencil, (x,), 2 * x.nbytes, 6.0 * x.size, accuracy=terms)


def rechunk_transpose(s: SessionLike, size: int) -> Prepared:
    """``x.T.rechunk(...)`` (all-to-all) then a row sum."""
    x = _matrix(s, size)
    if len(x.chunks[0]) < 2:
        # One block (the serial baseline's auto at small sizes) would make the transpose a view
        # and time no all-to-all at all: every configuration moves at least two blocks.
        x = s.persist(x.rechunk({0: math.ceil(x.shape[0] / 2)}))
    # an all-to-all: row blocks become column blocks of the transpose
    def column_sums(a: np.ndarray) -> accuracy.Bound:
        return accuracy.sum_of(np.abs(a).sum(axis=0), a.shape[0])

    return Prepared(lambda x: x.T.rechunk({0: x.chunks[0][0], 1: -1}).sum(axis=1), lambda a: a.T.sum(axis=1), (x,),
                    2 * x.nbytes, accuracy=column_sums)


def tiny_tasks(s: SessionLike, size: int) -> Prepared:
    """Latency probe: 1,000 one-microsecond tasks and a sum; size is ignored."""
    import dask

    n = 1000

    def build() -> Any:
        return dask.delayed(_add_up)([dask.delayed(_inc)(i) for i in range(n)])

    return Prepared(build, lambda: sum(_inc(i) for i in range(n)), (), 0, accuracy=accuracy.exact)


@memory_model.allocates(returns=32)  # a Python int under 2**30 (28 bytes): the memory model projects the graph
def _inc(i: int) -> int:
    return i + 1


@memory_model.allocates(returns=32)
def _add_up(values: list[int]) -> int:
    return sum(values)


KERNELS: dict[str, Callable[[Any, int], Prepared]] = {
    "array-sum": array_sum,
    "elementwise": elementwise,
    "matmul": matmul,
    "tree-reduction": tree_reduction,
    "stencil": stencil,
    "rechunk-transpose": rechunk_transpose,
    "tiny-tasks": tiny_tasks,
    "linear-model": models.linear_model,
    "model-parallel-matmul": models.model_parallel_matmul,
    "pipeline": streams.pipeline,
    "io-pipeline": streams.io_pipeline,
}

# suite -> (bytes per input, kernels); quick fits in under 2 minutes on 2 cores
SUITES: dict[str, tuple[int, tuple[str, ...]]] = {
    "smoke": (16 * 2**20, ("array-sum", "elementwise", "matmul")),  # seconds: notebooks, a first look
    "quick": (64 * 2**20, tuple(KERNELS)),
    "standard": (512 * 2**20, tuple(KERNELS)),
}


def _chunks_text(inputs: tuple[Any, ...]) -> str:
    """The inputs' chunk grids and their biggest chunk, e.g. ``grids 1x1, 1x2, 2x1; chunks <= 32 MiB``."""
    arrays = [x for x in inputs if hasattr(x, "chunks")]
    if not arrays:
        return "-"
    biggest = max(x.dtype.itemsize * math.prod(max(c) for c in x.chunks) for x in arrays)
    grids = ", ".join("x".join(str(len(c)) for c in x.chunks) for x in arrays)
    return f"grid{'s' if len(arrays) > 1 else ''} {grids}; chunks <= {biggest / 2**20:.3g} MiB"


def run_kernel(name: str, session: SessionLike, *, size: int | None = None, repeat: int | None = None,
               progress: bool = False) -> WorkloadResult:
    """Run the suite kernel ``name`` ``repeat`` times in ``session`` and check it against NumPy."""
    cfg = session.config
    size = cfg.workload.size if size is None else size
    repeat = cfg.workload.repeat if repeat is None else repeat
    # no check of the size here: the kernels persist their inputs with Session.persist, which the memory model checks
    before, t_start = session.recovery(), time.perf_counter()
    prepared = KERNELS[name](session, size)
    try:
        result, times = prepared.timed(session, repeat, progress=progress)
        path = path_line(running_of(session).path)  # measured on both paths: the summary says which the last run took
        with aside("checking the answer against NumPy"):
            reference, numpy_times = prepared.reference(session, runs=2)  # the faster: a fault-in can outlast one warm-up
            numpy_s = min(numpy_times)
            verdict = prepared.check(session, result, reference)
        rows = tuple(prepared.details()) + ((("path", path),) if path else ())
    finally:
        prepared.close()
    recovery = session.recovery().since(before)
    return WorkloadResult(
        workload=name, ok=verdict.ok, check=verdict.text(),
        wall_s=time.perf_counter() - t_start, run_s=statistics.median(times), run_s_all=tuple(times), numpy_s=numpy_s,
        size_bytes=prepared.nbytes, chunks=_chunks_text(prepared.inputs),
        backend=session.backend.name, engine=str(session.engine), strategy=cfg.parallel.strategy,
        workers=len(session.workers()) or 1, threads=session.slots, rows=rows, workers_lost=recovery.workers_lost,
        tasks_recomputed=recovery.tasks_recomputed, failures_recovered=recovery.failures_recovered,
    )
