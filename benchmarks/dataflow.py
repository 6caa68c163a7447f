"""What the dataflow settings buy, measured in one run: batched map, sync_interval, fusion_buffer_size.

- **map**: 100,000 tiny calls (``i + 1``) through raw ``client.map`` (one task each) and through
  ``openclaw_dask.map`` (auto batches), on the same cluster; items per second.
- **sync_interval**: local SGD for least squares (``openclaw_dask.iterate``, 8 shards, 120
  steps) with k = 1, 4, 12; wall time, global syncs, and the error against the known answer.
- **fusion_buffer_size**: a sum over 2,000 small chunks with dask's fan-in 16 and with the
  fan-in a 1 MiB buffer picks (``dataflow.fusion.reduce``); tasks and median time.

Each runs on the process backend with 2 workers (a real cluster: where per-task and per-sync
costs are highest) unless ``--backend`` says otherwise. Medians of ``--repeat`` runs.

    python benchmarks/dataflow.py --repeat 5
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import openclaw_dask
from openclaw_dask.dataflow import fusion

W_TRUE = np.linspace(-1.0, 1.0, 16)


def inc(i: int) -> int:
    return i + 1


def sgd_step(w: np.ndarray, shard: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    x, y = shard
    return w - 0.5 * x.T @ (x @ w - y) / len(y)


def _median(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_map(s, repeat: int, n: int = 100_000) -> None:
    items = list(range(n))
    client = s.client
    raw = _median(lambda: client.gather(client.map(inc, items, pure=False)), max(1, repeat // 2))
    batched = _median(lambda: openclaw_dask.map(s, inc, items), repeat)
    print(f"| map, {n:,} tiny items | raw client.map {n / raw:,.0f} items/s | openclaw_dask.map {n / batched:,.0f} "
          f"items/s | {raw / batched:.1f}x |")


def bench_sync(s, repeat: int) -> None:
    rng = np.random.default_rng(0)
    shards = []
    for _ in range(8):
        x = rng.standard_normal((5000, W_TRUE.size))
        shards.append((x, x @ W_TRUE))
    base = None
    for k in (1, 4, 12):
        out = None

        def run(k: int = k) -> None:
            nonlocal out
            out = openclaw_dask.iterate(s, sgd_step, np.zeros(W_TRUE.size), 120, shards=shards, sync_interval=k)

        t = _median(run, repeat)
        base = base or t
        err = float(np.max(np.abs(out.state - W_TRUE)))
        print(f"| sync_interval={k} | {out.syncs} syncs | {t * 1e3:.0f} ms | {base / t:.2f}x | max error {err:.1e} |")


def bench_fusion(s, repeat: int) -> None:
    x = s.persist(s.array((2000 * 64,), fill="arange", chunks=64))
    base = None
    for buffer in (None, 2**20):
        y = fusion.reduce(s, x, "sum", buffer=buffer)
        assert s.compute(y) == x.size * (x.size - 1) / 2
        t = _median(lambda y=y: s.compute(y), repeat)
        base = base or t
        label = "dask's fan-in 16" if buffer is None else f"fusion_buffer_size=1MiB (fan-in {fusion.split_every(8, 2000, buffer)})"
        print(f"| sum of 2,000 chunks, {label} | {len(y.__dask_graph__()) - x.npartitions} reduce tasks | "
              f"{t * 1e3:.1f} ms | {base / t:.2f}x |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--backend", default="process")
    args = ap.parse_args()
    overrides = {"backend": args.backend, "workers": 2} if args.backend == "process" else {"backend": args.backend}
    with openclaw_dask.session(**overrides) as s:
        print(f"engine: {s.engine}, {s.slots} task threads")
        print("\n| what | raw | openclaw | ratio |\n|---|---|---|---|")
        bench_map(s, args.repeat)
        print("\n| setting | global syncs | median | speedup over k=1 | result |\n|---|---|---|---|---|")
        bench_sync(s, args.repeat)
        print("\n| reduction | tasks | median | speedup |\n|---|---|---|---|")
        bench_fusion(s, args.repeat)


if __name__ == "__main__":
    main()
