"""A rechunk's splits placed by distributed's root-task queue, against where their blocks are.

The standard suite's rechunk-transpose (``x.T.rechunk(...).sum(axis=1)``) on the process backend,
its input persisted, computed round after round in one session with the in-process scheduler's
placement switched in turn (``cluster/placement.py``): distributed's own ``is_rootish``, then
openclaw's, the order alternated every round. Prints, per placement, the median compute time, the
bytes the workers received and each worker's peak memory over its baseline.

With 2 workers of 2 threads and 4 or more row blocks, the splits are a root-ish group to
distributed (more than twice the cluster's threads, under 5 tasks to depend on); with one thread
a worker, or 2 blocks, they are not and both rows move the same bytes.

    python benchmarks/split_placement.py --mib 128 --threads 2 --rounds 10
    python benchmarks/split_placement.py --mib 512 --threads 2 --rounds 6 --memory-limit 4GiB
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from distributed import futures_of, wait

import openclaw_dask
from openclaw_dask import memory_model
from openclaw_dask.cluster import placement, running_of
from openclaw_dask.diagnostics.collect import collect
from openclaw_dask.workloads.suite import KERNELS

MiB = 2**20


def _place(scheduler: Any, how: str) -> None:
    if how == "openclaw":
        placement.keep_inputs_local(scheduler)
    else:
        scheduler.__dict__.pop("is_rootish", None)  # the class's own method


def _one(s: Any, prepared: Any) -> tuple[float, float, float]:
    before = s.client.run(memory_model._process_memory)
    with collect(s) as record:
        start = time.perf_counter()
        prepared.execute(s)
        seconds = time.perf_counter() - start
    peak = max((w.peak_memory - before[a]) / MiB for a, w in record.workers.items())
    return seconds, sum(w.bytes_in for w in record.workers.values()) / MiB, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=128, help="input size (MiB)")
    parser.add_argument("--threads", type=int, default=2, help="task threads per worker (parallel.omp_threads)")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--memory-limit", default="1GiB")
    a = parser.parse_args()
    runs: dict[str, list[tuple[float, float, float]]] = {"distributed": [], "openclaw": []}
    with openclaw_dask.session(backend="process", workers=2, omp_threads=a.threads, memory_limit=a.memory_limit) as s:
        scheduler = running_of(s).scheduler
        prepared = KERNELS["rechunk-transpose"](s, a.mib * MiB)
        try:
            wait(futures_of(list(prepared.inputs)))
            print(f"{a.mib} MiB, row blocks {prepared.inputs[0].chunks[0]}, 2 workers of {a.threads} threads")
            for i in range(a.rounds):
                for how in list(runs)[:: 1 if i % 2 else -1]:
                    _place(scheduler, how)
                    runs[how].append(_one(s, prepared))
        finally:
            _place(scheduler, "openclaw")
            prepared.close()
    for how, rows in runs.items():
        seconds, received, peak = (statistics.median(r[i] for r in rows) for i in range(3))
        print(f"{how:12} compute {seconds * 1e3:7.1f} ms   received {received:6.0f} MiB   peak per worker {peak:6.1f} MiB"
              f" (max {max(r[2] for r in rows):.1f})")


if __name__ == "__main__":
    main()
