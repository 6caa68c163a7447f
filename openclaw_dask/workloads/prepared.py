"""A kernel ready to run (:class:`Prepared`), and what a run of one reports (:class:`WorkloadResult`).

A kernel builds its inputs in the session (made and kept on the workers, not timed) and
returns a :class:`Prepared`: the graph to time (or, for streams, a function that runs),
the same computation in NumPy (the reference, also timed on one thread), and what it
moves. The benchmark suite and ``openclaw run``/``profile`` share these definitions
(:func:`~openclaw_dask.workloads.suite.run_kernel` runs one by name).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from openclaw_dask.workloads.accuracy import Bound, Verdict, compare

if TYPE_CHECKING:
    from openclaw_dask.cluster import SessionLike

__all__ = ["Prepared", "WorkloadResult", "own_memory"]


@dataclass
class Prepared:
    """One kernel ready to run: ``build(*inputs)`` for Dask, ``numpy(*arrays)`` for the reference.

    ``accuracy(*arrays)`` is the kernel's declared error bound
    (:class:`~openclaw_dask.workloads.accuracy.Bound`, from host copies of the inputs): how far
    its answer may be from NumPy's on any CPU and BLAS; a kernel whose check is not a plain
    comparison gives ``verdict(result, reference, *arrays)`` instead. ``run(progress)``, when
    given, replaces computing ``build(*inputs)`` (a stream that is not one graph); ``details()``
    gives summary rows after a run; ``close()`` frees what the kernel made (files), once it is done.
    """

    build: Callable[..., Any]
    numpy: Callable[..., Any]
    inputs: tuple[Any, ...]
    nbytes: int  # bytes the kernel reads (and writes), for GB/s
    flops: float = 0.0
    accuracy: Callable[..., Bound] | None = None
    verdict: Callable[..., Verdict] | None = None
    run: Callable[[bool], Any] | None = None
    details: Callable[[], list[tuple[str, str]]] = field(default=list)
    close: Callable[[], None] = field(default=lambda: None)
    _host: tuple[Any, ...] | None = field(default=None, repr=False)  # the inputs on the host, once fetched

    def execute(self, session: SessionLike, *, progress: bool = False) -> Any:
        """Run the kernel once in ``session`` and return its result."""
        if self.run is not None:
            return self.run(progress)
        return session.compute(self.build(*self.inputs))

    def timed(self, session: SessionLike, repeat: int, *, progress: bool = False) -> tuple[Any, list[float]]:
        """The last of ``repeat`` runs' results, and the seconds of each run.

        Each run starts with the memory the last warm-up had (not one result more) and with no
        garbage left for Python's collector: a full collection scans every object of the process
        (the benchmark's own records included: 25-45 ms in a standard report), so a run that happened
        to trigger one would be timed with the process's history, not its own work.
        """
        import gc

        result, times = None, []
        for _ in range(repeat):
            result = None
            gc.collect()
            t0 = time.perf_counter()
            result = self.execute(session, progress=progress)
            times.append(time.perf_counter() - t0)
        return result, times

    def reference(self, session: SessionLike, runs: int = 1, warmups: int = 1) -> tuple[Any, list[float]]:
        """NumPy's answer on host copies of the inputs, on one thread (the baseline the guide's speedups mean),
        and the seconds of each of ``runs`` runs after ``warmups`` untimed ones.

        NumPy's first runs of a kernel fault in the memory its temporaries take (the standard stencil in a serial
        session: 4.6 and 1.9 s, then 0.46 s a run): timed, they would flatter every speed-up over NumPy, where the
        kernel's own runs are timed after warm-ups.
        """
        from threadpoolctl import threadpool_limits

        arrays = self.host_inputs(session)
        answer, times = None, []
        with threadpool_limits(limits=1):
            for i in range(warmups + runs):
                t0 = time.perf_counter()
                answer = self.numpy(*arrays)
                if i >= warmups:
                    times.append(time.perf_counter() - t0)
        return answer, times

    def host_inputs(self, session: SessionLike) -> tuple[Any, ...]:
        """The inputs as NumPy arrays in memory of NumPy's own (fetched once, for the reference and the bound)."""
        if self._host is None:
            self._host = tuple(own_memory(session.to_numpy(x)) for x in self.inputs)
        return self._host

    def check(self, session: SessionLike, result: Any, reference: Any) -> Verdict:
        """``result`` (brought to the host: CuPy on backend cuda) against ``reference``, within the kernel's bound."""
        result, arrays = session.to_numpy(result), self.host_inputs(session)
        if self.verdict is not None:
            return self.verdict(result, reference, *arrays)
        if self.accuracy is None:
            raise TypeError("a kernel must declare its error bound: Prepared(accuracy=...) or Prepared(verdict=...)")
        return compare(result, reference, self.accuracy(*arrays))

    def matches(self, session: SessionLike, result: Any, reference: Any) -> bool:
        """Whether :meth:`check` passes."""
        return self.check(session, result, reference).ok


def own_memory(array: Any) -> Any:
    """``array``, or a copy in memory NumPy allocates, where it lies in a mapping (a large result of worker processes).

    Such a result arrives in a shared file's 4 KiB pages (:mod:`~openclaw_dask.cluster.shared_results`), where a
    NumPy sum of 512 MiB on one thread took 45 ms against 33 in an array of NumPy's own (huge pages): a reference
    timed there would be slow, and a speed-up over it flattered, on those backends alone (a standard report had
    array-sum on worker processes at 2.73x NumPy on one thread, on 2 cores).
    """
    import mmap

    import numpy as np

    base = array
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return np.array(array, copy=True) if isinstance(base, mmap.mmap) else array


@dataclass(frozen=True)
class WorkloadResult:
    """What ``openclaw run KERNEL`` measured (``to_dict()`` is the ``--json`` object)."""

    workload: str
    ok: bool
    check: str  # how the answer was checked, e.g. "within 2.1e-13 of NumPy's answer; bound 4.4e-12 (2γ_k·|A||B|, k=512)"
    wall_s: float
    run_s: float  # median of the timed runs
    run_s_all: tuple[float, ...]
    numpy_s: float  # the NumPy reference on one thread
    size_bytes: int
    chunks: str
    backend: str
    engine: str
    strategy: str
    workers: int
    threads: int
    rows: tuple[tuple[str, str], ...] = ()  # the kernel's own summary lines
    workers_lost: int | None = 0
    tasks_recomputed: int | None = 0
    failures_recovered: int | None = 0

    @property
    def mismatch(self) -> str:
        return self.check

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["run_s_all"], d["rows"] = list(self.run_s_all), dict(self.rows)
        return d
