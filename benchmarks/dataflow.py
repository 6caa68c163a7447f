"""What the dataflow settings buy, measured in one run: batched map, sync_interval, fusion_buffer_size.

- **map**: tiny calls (``i + 1``) through raw ``client.map`` (one task each; 4,000 items) and
  through ``openclaw_dask.map`` (auto batches; 100,000 items), on the same cluster; items per second.
- **sync_interval**: local SGD for least squares (``openclaw_dask.iterate``, 8 shards, 120
  steps) with k = 1, 4, 12; wall time, global syncs, and the error against the known answer.
- **fusion_buffer_size**: a sum over 2,000 small chunks as dask builds it, and with
  ``dataflow.fusion.reduce`` and a 1 MiB buffer (chunks merged, fan-in filled); tasks and median
  time, on the process backend and on the default thread backend. Then the transfers: one task on one worker that needs 2,000 pieces of 512 B held by the other,
  in sessions whose buffer is one piece, 64 KiB and 1 MiB; messages per run and median time.

Each runs on the process backend with 2 workers (a real cluster: where per-task and per-sync
costs are highest) unless ``--backend`` says otherwise. Medians of ``--repeat`` runs.

    python benchmarks/dataflow.py --repeat 5
"""

from __future__ import annotations

import argparse

import numpy as np
from _timing import median_s

import openclaw_dask
from openclaw_dask.dataflow import fusion

W_TRUE = np.linspace(-1.0, 1.0, 16)


def inc(i: int) -> int:
    return i + 1


def sgd_step(w: np.ndarray, shard: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    x, y = shard
    return w - 0.5 * x.T @ (x @ w - y) / len(y)


def bench_map(s, repeat: int, n: int = 100_000, n_raw: int = 4_000) -> None:
    """Items per second; raw client.map gets fewer items (one task each: 100,000 would take minutes)."""
    client = s.client
    raw = n_raw / median_s(lambda: client.gather(client.map(inc, range(n_raw), pure=False)), repeat)
    batched = n / median_s(lambda: openclaw_dask.map(s, inc, range(n)), repeat)
    print(f"| map of tiny calls (i + 1) | client.map, {n_raw:,} items: {raw:,.0f} items/s | "
          f"openclaw_dask.map, {n:,} items: {batched:,.0f} items/s | {batched / raw:.0f}x |")


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

        t = median_s(run, repeat)
        base = base or t
        err = float(np.max(np.abs(out.state - W_TRUE)))
        print(f"| sync_interval={k} | {out.syncs} syncs | {t * 1e3:.0f} ms | {base / t:.2f}x | max error {err:.1e} |")


def bench_fusion(s, repeat: int) -> None:
    x = s.persist(s.array((2000 * 64,), fill="arange", chunks=64))
    base = None
    for buffer in (None, 2**20):
        y = fusion.reduce(s, x, "sum", buffer=buffer)
        assert s.compute(y) == x.size * (x.size - 1) / 2
        t = median_s(lambda y=y: s.compute(y), repeat)
        base = base or t
        label = "fusion_buffer_size null (dask's own fan-in)" if buffer is None else "fusion_buffer_size=1MiB"
        tasks = len(y.__dask_graph__()) - x.npartitions  # less the chunks themselves, already in memory
        print(f"| {s.backend.name} backend: sum of 2,000 chunks of 512 B, {label} | {tasks} tasks | "
              f"{t * 1e3:.1f} ms | {base / t:.2f}x |")


def _total(*pieces: np.ndarray) -> float:
    return float(sum(p.sum() for p in pieces))


def _fetched(dask_worker) -> int:
    return dask_worker.state.transfer_incoming_count_total


def bench_transfers(repeat: int, n: int = 2000) -> None:
    base = None
    for buffer in (512, 64 * 2**10, 2**20):
        with openclaw_dask.session(backend="process", workers=2, fusion_buffer_size=buffer) as s:
            here, there = sorted(s.client.scheduler_info()["workers"])
            pieces = s.client.scatter([np.full(64, i, dtype="float64") for i in range(n)], workers=[here])

            def run(s=s, pieces=pieces, there=there) -> None:  # a new key each time: the pieces move again
                task = s.client.submit(_total, *pieces, workers=[there], allow_other_workers=False, pure=False)
                assert task.result() == 64 * n * (n - 1) / 2

            before = s.client.run(_fetched, workers=[there])[there]
            run()
            messages = s.client.run(_fetched, workers=[there])[there] - before
            t = median_s(run, repeat)
            base = base or t
            print(f"| {n:,} pieces of 512 B to the other worker, buffer {buffer:,} B | {messages:,} message{'s' if messages != 1 else ''} | "
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
    with openclaw_dask.session(backend="thread") as s:  # the default engine: dask's threaded scheduler
        bench_fusion(s, args.repeat)
    print("\n| transfer | messages per run | median | speedup |\n|---|---|---|---|")
    bench_transfers(args.repeat)


if __name__ == "__main__":
    main()
