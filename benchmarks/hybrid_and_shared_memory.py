"""Hybrid parallelism on a matmul, and MPI shared memory on a transfer-heavy graph; prints ratios.

* hybrid: ``workers`` processes x 1 BLAS thread (off) against ``workers / omp`` processes x
  ``omp`` BLAS threads (on), the same cores, on ``x @ x.T`` with inputs in worker memory.
* shared memory: backend mpi with ``workers`` ranks (off) against one rank holding every
  thread (on), on ``(x + x.T).sum()``: bytes over TCP between workers and the time.

    python benchmarks/hybrid_and_shared_memory.py --n 4096 --runs 5
"""

from __future__ import annotations

import argparse
import statistics
import time

import openclaw_dask


def _median_time(s, make, runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        s.compute(make())
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _moved(s) -> int:
    return sum(s.client.run(lambda dask_worker: sum(t["total"] for t in dask_worker.transfer_incoming_log)).values())


def hybrid(n: int, workers: int, omp: int, runs: int) -> None:
    results = {}
    for on in (False, True):
        kw = {"hybrid": True, "omp_threads": omp, "workers": workers // omp} if on else {"workers": workers}
        with openclaw_dask.session(backend="process", **kw) as s:
            x = s.persist(s.array((n, n), fill="random", chunks=(n // 2, n)))
            s.compute(x[:1].sum())
            results[on] = _median_time(s, lambda x=x: (x @ x.T).sum(), runs)
        gflops = 2 * n**3 / results[on] / 1e9
        print(f"matmul {n}x{n}: hybrid {'on ' if on else 'off'} {results[on] * 1e3:8.1f} ms  {gflops:6.1f} GFLOP/s  ({kw})")
    print(f"HYBRID on/off time ratio: {results[True] / results[False]:.3f}")


def shared_memory(n: int, workers: int, runs: int) -> None:
    results = {}
    for on in (False, True):
        with openclaw_dask.session(backend="mpi", workers=workers, mpi_shared_memory=on) as s:
            x = s.persist(s.array((n, n), fill="arange", chunks=(n // (2 * workers), n)))
            s.compute(x[:1].sum())
            before = _moved(s)
            results[on] = _median_time(s, lambda x=x: (x + x.T).sum(), runs)
            moved = (_moved(s) - before) / runs
        print(f"(x + x.T).sum() {n}x{n}: shared memory {'on ' if on else 'off'} {results[on] * 1e3:8.1f} ms, "
              f"{moved / 2**20:8.1f} MiB over TCP between workers per run")
    print(f"SHARED MEMORY on/off time ratio: {results[True] / results[False]:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--omp", type=int, default=2)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    hybrid(args.n, args.workers, args.omp, args.runs)
    shared_memory(args.n, args.workers, args.runs)


if __name__ == "__main__":
    main()
