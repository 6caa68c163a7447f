"""array-sum GB/s: auto vs fixed chunk sizes, thread and process backends, next to NumPy.

Every figure comes from this one run, on data already in memory (generation is not
timed). Prints a Markdown table for docs/benchmarks.md, and a per-task overhead probe
that calibrates each backend's ``task_overhead_s`` (``openclaw_dask.cluster.Backend``).

    python benchmarks/array_sum_chunks.py --size 2GiB --repeat 7
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from dask.utils import format_bytes, parse_bytes

import openclaw_dask
from openclaw_dask.diagnostics.benchmark import measure_bandwidth
from openclaw_dask.workloads import array_sum

CHUNKS = ("auto", "1MiB", "8MiB", "64MiB", "256MiB")


def raw_dask_threads_gbps(size: int, chunk: str, repeat: int) -> float:
    """dask.array on the plain threaded scheduler (no distributed), for reference."""
    import dask
    import dask.array as da

    x = da.arange(size // 8, dtype="f8", chunks=parse_bytes(chunk) // 8)
    (x,) = dask.persist(x, scheduler="threads")
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        x.sum().compute(scheduler="threads")
        times.append(time.perf_counter() - t0)
    return size / statistics.median(times) / 1e9


def overhead_ms(backend: str, workers: int, n_tasks: int = 2000) -> float:
    """Seconds per task of a sum over n_tasks one-element chunks, in ms."""
    kwargs = {"enabled": False} if backend == "sync" else {"backend": backend, "workers": workers}
    with openclaw_dask.session(task_chunk_size="1 element", **kwargs) as s:
        x = s.persist(s.array((n_tasks,), fill="ones"))
        s.compute(x.sum())  # warm-up
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            s.compute(x.sum())
            times.append(time.perf_counter() - t0)
        n = len(x.sum().__dask_graph__()) - n_tasks  # the reduction tasks only
    return statistics.median(times) / n * 1e3


def sweep(size: int, repeat: int, workers: int) -> dict[str, tuple[float, str, int]]:
    """One pass over every configuration: label -> (GB/s, chunk size, number of chunks)."""
    numpy = measure_bandwidth(size, repeat)
    rows = {
        "NumPy, 1 thread": (numpy["1_thread"], "whole array", 1),
        "NumPy, all cores": (numpy["all_cores"], "1/cores each", os.cpu_count()),
        "raw dask.array, threaded scheduler, 64MiB": (raw_dask_threads_gbps(size, "64MiB", repeat), "64.00 MiB", size // 2**26),
    }
    for backend in ("thread", "process"):
        for chunk in CHUNKS:
            with openclaw_dask.session(backend=backend, workers=workers, task_chunk_size=chunk) as s:
                r = array_sum.run(s, size=size, repeat=repeat)
            assert r.ok, r
            rows[f"openclaw {backend}, {chunk}"] = (r.gbps, format_bytes(r.chunk_bytes), r.n_chunks)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="2GiB")
    ap.add_argument("--repeat", type=int, default=7, help="timed sums per configuration (median taken)")
    ap.add_argument("--runs", type=int, default=3, help="passes over all configurations, interleaved")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    size = parse_bytes(args.size)

    passes = [sweep(size, args.repeat, args.workers) for _ in range(args.runs)]
    ref = statistics.median(p["NumPy, all cores"][0] for p in passes)
    print(f"array-sum over {format_bytes(size)} of float64, {args.workers} workers: median of {args.runs} runs "
          f"(each the median of {args.repeat} timed sums), min-max in brackets\n")
    print("| configuration | chunk | chunks | GB/s | vs NumPy, all cores |")
    print("|---|---|---|---|---|")
    for label in passes[0]:
        gbps = [p[label][0] for p in passes]
        _, chunk, n = passes[0][label]
        med = statistics.median(gbps)
        print(f"| {label} | {chunk} | {n} | {med:.1f} [{min(gbps):.1f}-{max(gbps):.1f}] | {med / ref:.2f} |")
    for backend in ("thread", "process"):
        auto = statistics.median(p[f"openclaw {backend}, auto"][0] for p in passes)
        best = max(statistics.median(p[f"openclaw {backend}, {c}"][0] for p in passes) for c in CHUNKS[1:])
        print(f"\n{backend}: auto reaches {auto / best:.2f} of the best fixed chunk size")
    print("\nper-task overhead (ms per reduction task over 2000 one-element chunks):")
    for backend in ("sync", "thread", "process"):
        print(f"  {backend}: {overhead_ms(backend, args.workers):.3f} ms")


if __name__ == "__main__":
    main()
