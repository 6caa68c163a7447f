"""What one more chunk costs a compute, per engine: the ``task_overhead_s`` each backend declares.

A sum over ``k`` tiny chunks (10 elements each, already in memory) is timed for k = 8, 20
and 40 chunks; the slope of the median time over k is the cost of one more chunk: building,
optimising and scheduling its tasks, and for a cluster the messages. The auto chunk size keeps
chunks big enough that this stays under 5% (``openclaw_dask.chunking.min_auto_chunk``).

    python benchmarks/task_overhead.py --repeat 25
"""

from __future__ import annotations

import argparse
import statistics
import time

import openclaw_dask

ENGINES = {
    "sync (enabled: false)": {"enabled": False},
    "thread, threads engine": {},
    "thread, distributed engine": {"engine": "distributed"},
    "process, 2 workers": {"backend": "process", "workers": 2},
}
COUNTS = (8, 20, 40)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=25)
    args = ap.parse_args()
    print("| engine | " + " | ".join(f"{k} chunks (ms)" for k in COUNTS) + " | ms per chunk |")
    print("|---|" + "---|" * (len(COUNTS) + 1))
    for label, overrides in ENGINES.items():
        with openclaw_dask.session(**overrides) as s:
            medians = {}
            for k in COUNTS:
                y = s.persist(s.array((k * 10,), fill="arange", chunks=10))
                s.compute(y.sum())
                times = []
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    s.compute(y.sum())
                    times.append(time.perf_counter() - t0)
                medians[k] = statistics.median(times) * 1e3
        slope = (medians[COUNTS[-1]] - medians[COUNTS[0]]) / (COUNTS[-1] - COUNTS[0])
        print(f"| {label} | " + " | ".join(f"{medians[k]:.1f}" for k in COUNTS) + f" | {slope:.2f} |")


if __name__ == "__main__":
    main()
