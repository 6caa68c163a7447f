"""The local engine next to its limit: array-sum over data already in memory, side by side in one run.

Rows: NumPy on 1 and on all cores (the memory-bandwidth limit), raw dask on its threaded
scheduler, raw distributed (in-process and with worker processes), and openclaw's thread,
process and serial engines. Every GB/s counts only the timed sum (generation is not timed);
each cell is the median of ``--repeat`` sums; the share is against the NumPy all-cores row of
the same run, measured before and after the others (their mean).

    python benchmarks/local_engine.py --size 2GiB --repeat 7
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable

import dask
import dask.array as da
from dask.system import CPU_COUNT
from dask.utils import format_bytes, parse_bytes
from distributed import Client, LocalCluster, wait

import openclaw_dask
from openclaw_dask.diagnostics.benchmark import measure_bandwidth

RAW_CHUNK = "256MiB"


def median_s(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def raw_threaded(n: int, repeat: int) -> float:
    x = da.arange(n, dtype="f8", chunks=parse_bytes(RAW_CHUNK) // 8)
    (x,) = dask.persist(x, scheduler="threads")
    return median_s(lambda: x.sum().compute(scheduler="threads"), repeat)


def raw_distributed(n: int, repeat: int, processes: bool) -> float:
    workers = CPU_COUNT if processes else 1
    threads = 1 if processes else CPU_COUNT
    with LocalCluster(n_workers=workers, threads_per_worker=threads, processes=processes, dashboard_address=None,
                      host="127.0.0.1" if processes else None) as cluster, Client(cluster) as client:
        x = client.persist(da.arange(n, dtype="f8", chunks=parse_bytes(RAW_CHUNK) // 8))
        wait(x)
        return median_s(lambda: client.compute(x.sum(), sync=True), repeat)


def openclaw_engine(n: int, repeat: int, **overrides: object) -> tuple[float, str]:
    with openclaw_dask.session(**overrides) as s:
        x = s.persist(s.array((n,), "f8", fill="arange"))
        assert math.isclose(s.compute(x.sum()), n * (n - 1) / 2, rel_tol=1e-12)
        chunk = format_bytes(8 * max(x.chunks[0]))
        return median_s(lambda: s.compute(x.sum()), repeat), f"{chunk} x {len(x.chunks[0])}, {s.engine.kind}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="2GiB")
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    size = parse_bytes(args.size)
    n = size // 8
    before = measure_bandwidth(size, args.repeat)
    rows: list[tuple[str, float, str]] = []
    rows.append(("raw dask threaded scheduler", raw_threaded(n, args.repeat), RAW_CHUNK))
    rows.append(("raw distributed, in-process cluster", raw_distributed(n, args.repeat, False), RAW_CHUNK))
    rows.append((f"raw distributed, {CPU_COUNT} processes", raw_distributed(n, args.repeat, True), RAW_CHUNK))
    for label, kw in (("openclaw thread (the default)", {}), ("openclaw process", {"backend": "process"}),
                      ("openclaw serial (enabled: false)", {"enabled": False})):
        seconds, what = openclaw_engine(n, args.repeat, **kw)
        rows.append((label, seconds, what))
    after = measure_bandwidth(size, args.repeat)
    limit = (before["all_cores"] + after["all_cores"]) / 2
    one = (before["1_thread"] + after["1_thread"]) / 2
    print(f"array-sum over {format_bytes(size)} in memory, median of {args.repeat}; NumPy {CPU_COUNT}-thread limit "
          f"{before['all_cores']:.1f} GB/s before, {after['all_cores']:.1f} after\n")
    print(f"| engine | chunks | GB/s | share of the NumPy {CPU_COUNT}-thread limit |\n|---|---|---|---|")
    print(f"| NumPy, {CPU_COUNT} threads (the limit) | 1/{CPU_COUNT} each | {limit:.1f} | 1.00 |")
    print(f"| NumPy, 1 thread | whole array | {one:.1f} | {one / limit:.2f} |")
    for label, seconds, what in rows:
        gbps = size / seconds / 1e9
        print(f"| {label} | {what} | {gbps:.1f} | {gbps / limit:.2f} |")


if __name__ == "__main__":
    main()
