"""The local engine next to its limit: array-sum over data already in memory, side by side in one run.

Rows: NumPy on 1 thread, raw dask on its threaded scheduler, raw distributed (in-process,
and with worker processes), and openclaw's thread, process and serial engines. The limit is
NumPy summing the same bytes on all cores; it is timed alternately with each row while that
row's engine is up (its data in memory, its processes running), so drift on a shared machine
and the engine's own background work hit both alike. GB/s counts only the timed sum (the data
is made first, untimed); each cell is a median of ``--repeat``.

    python benchmarks/local_engine.py --size 2GiB --repeat 7
"""

from __future__ import annotations

import argparse
import contextlib
import math
import statistics
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import dask
import dask.array as da
import numpy as np
from dask.system import CPU_COUNT
from dask.utils import format_bytes, parse_bytes
from distributed import Client, LocalCluster

import openclaw_dask

RAW_CHUNK = "256MiB"


@contextlib.contextmanager
def raw_threaded(n: int) -> Iterator[tuple[Callable[[], object], str]]:
    (x,) = dask.persist(da.arange(n, dtype="f8", chunks=parse_bytes(RAW_CHUNK) // 8), scheduler="threads")
    yield (lambda: x.sum().compute(scheduler="threads")), RAW_CHUNK


@contextlib.contextmanager
def raw_distributed(n: int, processes: bool) -> Iterator[tuple[Callable[[], object], str]]:
    with LocalCluster(n_workers=CPU_COUNT if processes else 1, threads_per_worker=1 if processes else CPU_COUNT,
                      processes=processes, dashboard_address="127.0.0.1:0", host="127.0.0.1" if processes else None) as cluster, \
            Client(cluster, set_as_default=False) as client:
        x = client.persist(da.arange(n, dtype="f8", chunks=parse_bytes(RAW_CHUNK) // 8))
        client.compute(x.sum(), sync=True)  # waits for the persisted chunks
        yield (lambda: client.compute(x.sum(), sync=True)), RAW_CHUNK


@contextlib.contextmanager
def openclaw_engine(n: int, **overrides: object) -> Iterator[tuple[Callable[[], object], str]]:
    with openclaw_dask.session(**overrides) as s:
        x = s.persist(s.array((n,), "f8", fill="arange"))
        assert math.isclose(s.compute(x.sum()), n * (n - 1) / 2, rel_tol=1e-12)
        yield (lambda: s.compute(x.sum())), f"{format_bytes(8 * max(x.chunks[0]))} x {len(x.chunks[0])}, {s.engine.kind}"


def paired(limit: Callable[[], object], run: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Median seconds of ``run`` and of the NumPy limit, timed alternately after a warm-up of each."""
    times: tuple[list[float], list[float]] = ([], [])
    for i in range(repeat + 1):
        for k, fn in ((0, run), (1, limit)) if i % 2 else ((1, limit), (0, run)):
            t0 = time.perf_counter()
            fn()
            if i:
                times[k].append(time.perf_counter() - t0)
    return statistics.median(times[0]), statistics.median(times[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="2GiB")
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    size = parse_bytes(args.size)
    n = size // 8
    data = np.arange(n, dtype="f8")
    parts = np.array_split(data, CPU_COUNT)
    engines: dict[str, Callable[[], contextlib.AbstractContextManager[tuple[Callable[[], object], str]]]] = {
        "NumPy, 1 thread": lambda: contextlib.nullcontext(((lambda: np.sum(data)), "whole array")),
        "raw dask threaded scheduler": lambda: raw_threaded(n),
        "raw distributed, in-process cluster": lambda: raw_distributed(n, False),
        f"raw distributed, {CPU_COUNT} processes": lambda: raw_distributed(n, True),
        "openclaw thread (the default)": lambda: openclaw_engine(n),
        "openclaw process": lambda: openclaw_engine(n, backend="process"),
        "openclaw serial (enabled: false)": lambda: openclaw_engine(n, enabled=False),
    }
    print(f"array-sum over {format_bytes(size)} in memory; each row: median of {args.repeat} sums, timed alternately "
          f"with the NumPy {CPU_COUNT}-thread sum (the limit) while that engine is up\n")
    print(f"| engine | chunks | GB/s | limit GB/s | share of the NumPy {CPU_COUNT}-thread limit |\n|---|---|---|---|---|")
    with ThreadPoolExecutor(CPU_COUNT) as pool:
        def limit() -> object:
            return sum(pool.map(np.sum, parts))

        for label, engine in engines.items():
            with engine() as (run, what):
                seconds, limit_s = paired(limit, run, args.repeat)
            print(f"| {label} | {what} | {size / seconds / 1e9:.1f} | {size / limit_s / 1e9:.1f} | {limit_s / seconds:.2f} |",
                  flush=True)


if __name__ == "__main__":
    main()
