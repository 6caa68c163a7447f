"""A rechunk's splits placed by distributed's root-task queue, against where their blocks are.

The standard suite's rechunk-transpose (``x.T.rechunk(...).sum(axis=1)``) on the process backend,
its input persisted, computed round after round in one session with the in-process scheduler's
placement switched in turn (``cluster/placement.py``): distributed's own ``is_rootish``, then
openclaw's, the order alternated every round. Prints, per placement, the median compute time, the
bytes the workers received and each worker's peak memory over its baseline.

With 2 workers of 2 threads and 4 or more row blocks, the splits are a root-ish group to
distributed (more than twice the cluster's threads, under 5 tasks to depend on); with one thread
a worker, or 2 blocks, they are not and both rows move the same bytes.

With ``--spread``, what the placement costs where the queue helped: 40 tasks of 100 ms of CPU over
4 blocks of 64 MiB that all sit on one of 2 workers of one thread. distributed's queue copies the
blocks to the other worker at once; openclaw's placement starts the tasks on the blocks' worker,
and only distributed's work stealing (which weighs the copy) moves some. Prints the median wall
time and, each round, how many tasks ran on the blocks' worker.

    python benchmarks/split_placement.py --mib 128 --threads 2 --rounds 10
    python benchmarks/split_placement.py --mib 512 --threads 2 --rounds 6 --memory-limit 4GiB
    python benchmarks/split_placement.py --spread --rounds 6
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np
from distributed import futures_of, wait

import openclaw_dask
from openclaw_dask.cluster import placement, running_of
from openclaw_dask.diagnostics.collect import collect
from openclaw_dask.workloads.suite import KERNELS

MiB = 2**20


def _place(scheduler: Any, how: str) -> None:
    if how == "openclaw":
        placement.keep_inputs_local(scheduler)
    else:
        scheduler.__dict__.pop("is_rootish", None)  # the class's own method


def _rss() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


def _one(s: Any, prepared: Any) -> tuple[float, float, float]:
    before = s.client.run(_rss)
    with collect(s) as record:
        start = time.perf_counter()
        prepared.execute(s)
        seconds = time.perf_counter() - start
    peak = max((w.peak_memory - before[a]) / MiB for a, w in record.workers.items())
    return seconds, sum(w.bytes_in for w in record.workers.values()) / MiB, peak


def _block(i: int) -> np.ndarray:
    return np.full(8 * MiB, float(i))  # 64 MiB


def _busy(block: np.ndarray, j: int) -> float:
    start = time.perf_counter()
    while time.perf_counter() - start < 0.1:  # 100 ms of CPU
        pass
    return float(block[j])


def spread(rounds: int) -> None:
    """Many long tasks over a few big blocks on one worker, placed each way in turn."""
    runs: dict[str, list[tuple[float, int]]] = {"distributed": [], "openclaw": []}
    with openclaw_dask.session(backend="process", workers=2, omp_threads=1) as s:
        client, scheduler = s.client, running_of(s).scheduler
        holder = next(iter(client.scheduler_info()["workers"]))
        blocks = [client.submit(_block, i, workers=[holder], pure=False) for i in range(4)]
        wait(blocks)
        for i in range(rounds):
            for how in list(runs)[:: 1 if i % 2 else -1]:
                _place(scheduler, how)
                start = time.perf_counter()
                tasks = [client.submit(_busy, blocks[k % 4], k, pure=False, key=f"busy-{i}-{how}-{k}") for k in range(40)]
                wait(tasks)
                where = client.who_has(tasks)
                runs[how].append((time.perf_counter() - start, sum(holder in where[t.key] for t in tasks)))
        _place(scheduler, "openclaw")
    for how, rows in runs.items():
        print(f"{how:12} wall {statistics.median(r[0] for r in rows):5.2f} s   tasks on the blocks' worker, each round: "
              f"{[r[1] for r in rows]} of 40")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=128, help="input size (MiB)")
    parser.add_argument("--threads", type=int, default=2, help="task threads per worker (parallel.omp_threads)")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--memory-limit", default="1GiB")
    parser.add_argument("--spread", action="store_true", help="long tasks over blocks that sit on one worker")
    a = parser.parse_args()
    if a.spread:
        return spread(a.rounds)
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
