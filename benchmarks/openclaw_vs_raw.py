"""The same array-sum graph in raw Dask and through openclaw_dask, interleaved; prints the ratios.

Same chunks (openclaw's auto choice), input already in worker memory. Raw Dask runs twice:
on openclaw's own cluster (so only graph building and the compute call differ), and on a
plain ``LocalCluster`` of the same shape with distributed's defaults (the whole stack).

    python benchmarks/openclaw_vs_raw.py --size 1GiB --repeat 15
"""

from __future__ import annotations

import argparse
import statistics
import time

import dask.array as da
from dask.utils import parse_bytes
from distributed import Client, LocalCluster, wait

import openclaw_dask
from openclaw_dask.diagnostics.collect import collect


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="1GiB")
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    n = parse_bytes(args.size) // 8
    for backend in ("thread", "process"):
        with openclaw_dask.session(backend=backend, workers=args.workers, engine="distributed" if backend == "thread" else "auto") as s:
            chunks = s.chunks((n,), "f8")
            x = s.persist(s.array((n,), fill="arange"))
            wait(x)
            processes = backend == "process"
            with LocalCluster(n_workers=args.workers if processes else 1, threads_per_worker=1 if processes else args.workers,
                              processes=processes, dashboard_address="127.0.0.1:0", host="127.0.0.1" if processes else None) as lc, \
                    Client(lc, set_as_default=False) as raw:
                y = raw.persist(da.arange(n, dtype="f8", chunks=chunks))
                z = s.client.persist(da.arange(n, dtype="f8", chunks=chunks))  # raw graph, openclaw's cluster
                wait([y, z])
                expected = n * (n - 1) / 2
                assert raw.compute(y.sum()).result() == s.client.compute(z.sum()).result() == s.compute(x.sum()) == expected
                def profiled() -> float:
                    with collect(s):
                        return timed(lambda: s.compute(x.sum()))

                runs = {
                    "raw": lambda: timed(lambda: raw.compute(y.sum()).result()),
                    "raw-same-cluster": lambda: timed(lambda: s.client.compute(z.sum()).result()),
                    "openclaw": lambda: timed(lambda: s.compute(x.sum())),
                    "profiled": profiled,
                }
                times: dict[str, list[float]] = {k: [] for k in runs}
                for i in range(args.repeat):  # interleaved, order rotated: drift and order effects hit all alike
                    names = list(runs)[i % len(runs):] + list(runs)[: i % len(runs)]
                    for name in names:
                        times[name].append(runs[name]())
        r, rs, o, p = (statistics.median(times[k]) for k in ("raw", "raw-same-cluster", "openclaw", "profiled"))
        print(f"{backend}: {len(chunks[0])} chunks; openclaw {o * 1e3:.1f} ms; raw Dask on the same cluster {rs * 1e3:.1f} ms "
              f"(openclaw/raw = {o / rs:.3f}); raw Dask on its own LocalCluster {r * 1e3:.1f} ms (openclaw/raw = {o / r:.3f}); "
              f"with the profiler collecting {p * 1e3:.1f} ms (overhead {p / o - 1:+.1%})")


if __name__ == "__main__":
    main()
