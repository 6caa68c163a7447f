"""GPU benchmark: openclaw's cuda backend against CuPy alone, on one machine, in one run.

Prints one table:

- array-sum over ``--size`` bytes of float64 already on the GPU, through openclaw at several
  chunk sizes (and auto), against ``cupy.sum`` on the whole array, against dask-cuda alone at
  the same chunks (what openclaw adds) and against the device-copy bandwidth (``b[...] = a``,
  read + write);
- elementwise ``(sin(x) * 2 + x).sum()`` and a float64 matmul, TFLOP/s, against CuPy alone.

Medians of ``--repeat`` runs, each synchronised. ``--dry-run`` prints the plan and needs no GPU.

    python benchmarks/gpu.py --size 8GiB --repeat 5
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time

from dask.utils import format_bytes, parse_bytes

CHUNKS = ("256MiB", "1GiB", "4GiB", "auto")
RAW_CHUNKS = ("1GiB", "4GiB")  # dask-cuda alone at the same chunks, for what openclaw adds
MATMUL_SIDE = 8192


def _median(fn, repeat: int, sync, expect: float | None = None, executed=None, tasks_per_run: int = 0) -> float:
    """Median seconds of ``fn``; with ``expect``, every run's result must be within 1e-6 of it
    (a timed run that returned a stale or wrong value is a bug, not a fast run); with ``executed``
    (the cluster's count of tasks run), the timed runs must have run ``tasks_per_run`` tasks each."""
    fn()
    sync()  # warm-up: kernels compiled, pools grown
    times, before = [], executed() if executed else 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        got = fn()
        sync()
        times.append(time.perf_counter() - t0)
        if expect is not None and abs(float(got) - expect) > 1e-6 * abs(expect):
            raise SystemExit(f"wrong result: {float(got)!r}, expected {expect!r}; no figure is printed")
    if executed and executed() - before < repeat * tasks_per_run:
        raise SystemExit(f"{repeat} timed computes ran {executed() - before} tasks, fewer than their "
                         f"{repeat * tasks_per_run} chunks: a result was not computed; no figure is printed")
    return statistics.median(times)


def _executed(client):
    """Tasks the cluster's workers have run so far."""
    return lambda: sum(client.run(lambda dask_worker: dask_worker.state.executed_count).values())


def _uniform_sum_is_plausible(total: float, n: int) -> float:
    """The sum of ``n`` uniform [0, 1) draws is n/2 with standard deviation sqrt(n/12)."""
    if abs(total - n / 2) > 10 * (n / 12) ** 0.5:
        raise SystemExit(f"implausible sum of {n} uniform draws: {total!r}, expected about {n / 2!r}")
    return total


def cupy_alone(n: int, repeat: int) -> dict[str, float]:
    import cupy

    sync = cupy.cuda.Device().synchronize
    a = cupy.random.random(n)
    b = cupy.empty_like(a)
    total = _uniform_sum_is_plausible(float(a.sum()), n)
    out = {
        "copy_gbps": 2 * a.nbytes / _median(lambda: b.__setitem__(Ellipsis, a), repeat, sync) / 1e9,
        "sum_gbps": a.nbytes / _median(lambda: a.sum(), repeat, sync, expect=total) / 1e9,
        "elementwise_tflops": 3 * n / _median(lambda: (cupy.sin(a) * 2 + a).sum(), repeat, sync) / 1e12,
    }
    a = b = None  # free the vectors before the matmul
    m = cupy.random.random((MATMUL_SIDE, MATMUL_SIDE))
    out["matmul_tflops"] = 2 * MATMUL_SIDE**3 / _median(lambda: m @ m, repeat, sync) / 1e12
    m = None
    cupy.get_default_memory_pool().free_all_blocks()  # hand the GPU back: the session's RMM pool takes 0.7 of it at once
    return out


def through_openclaw(n: int, repeat: int) -> tuple[dict[str, float], int]:
    import cupy
    import dask.array as da

    import openclaw_dask

    sync = cupy.cuda.Device().synchronize  # compute() returns once the result is on the client
    out = {}
    with openclaw_dask.session(backend="cuda", memory_pooling=True) as s:
        print(f"engine: {s.engine}")
        print(f"auto chunks of {format_bytes(n * 8)}: {s.chunk_plan((n,)).reason}")
        pool_bytes = s.backend.gpu_plan(s.config).pool_bytes
        for chunk in CHUNKS:
            chunks = None if chunk == "auto" else (max(1, parse_bytes(chunk) // 8),)
            x = s.persist(s.array((n,), fill="random", chunks=chunks))
            total = _uniform_sum_is_plausible(float(s.compute(x.sum())), n)
            out[f"sum_gbps[{chunk}]"] = x.nbytes / _median(lambda x=x: s.compute(x.sum()), repeat, sync, total,
                                                            _executed(s.client), x.npartitions) / 1e9
            if chunk == "auto":
                out["elementwise_tflops"] = 3 * n / _median(lambda x=x: s.compute((da.sin(x) * 2 + x).sum()), repeat, sync) / 1e12
            del x
        m = s.persist(s.array((MATMUL_SIDE, MATMUL_SIDE), fill="random", chunks=(MATMUL_SIDE // 2, MATMUL_SIDE // 2)))
        out["matmul_tflops"] = 2 * MATMUL_SIDE**3 / _median(lambda: s.compute(m @ m), repeat, sync) / 1e12
    return out, pool_bytes


def raw_dask_cuda(n: int, repeat: int, pool_bytes: int) -> dict[str, float]:
    """The same sums through dask-cuda alone (LocalCUDACluster, one worker, the same RMM pool): what openclaw adds."""
    import cupy
    import dask
    import dask.array as da
    from dask_cuda import LocalCUDACluster
    from distributed import Client, wait

    sync = cupy.cuda.Device().synchronize
    out = {}
    kwargs = {"rmm_pool_size": pool_bytes} if importlib.util.find_spec("rmm") else {}
    with LocalCUDACluster(n_workers=1, threads_per_worker=1, dashboard_address="127.0.0.1:0", **kwargs) as cluster, \
            Client(cluster, direct_to_workers=True) as client, dask.config.set({"array.backend": "cupy"}):
        for chunk in RAW_CHUNKS:
            x = da.random.random(n, chunks=max(1, parse_bytes(chunk) // 8)).persist()
            wait(x)
            total = _uniform_sum_is_plausible(float(client.compute(x.sum()).result()), n)
            out[f"sum_gbps[{chunk}]"] = x.nbytes / _median(lambda x=x: client.compute(x.sum()).result(), repeat, sync,
                                                            total, _executed(client), x.npartitions) / 1e9
            del x
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="8GiB")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dry-run", action="store_true", help="print the plan; needs no GPU")
    args = ap.parse_args()
    n = parse_bytes(args.size) // 8
    if args.dry_run:
        print(f"plan: array-sum over {format_bytes(n * 8)} at chunks {', '.join(CHUNKS)}; cupy.sum and device copy "
              f"on the same {format_bytes(n * 8)}; elementwise over it; float64 matmul {MATMUL_SIDE}^2; "
              f"medians of {args.repeat}")
        return
    ref = cupy_alone(n, args.repeat)
    ours, pool_bytes = through_openclaw(n, args.repeat)
    raw = raw_dask_cuda(n, args.repeat, pool_bytes)
    print("\n| measure | CuPy alone | dask-cuda alone | openclaw | openclaw / dask-cuda | openclaw / CuPy | of device copy |")
    print("|---|---|---|---|---|---|---|")
    print(f"| device copy GB/s | {ref['copy_gbps']:.0f} | - | - | - | - | 1.00 |")
    for chunk in CHUNKS:
        v, r = ours[f"sum_gbps[{chunk}]"], raw.get(f"sum_gbps[{chunk}]")
        if max(v, r or 0) > 1.05 * ref["copy_gbps"]:  # a sum reads each byte once: it cannot beat the copy's bandwidth
            print(f"invalid: array-sum at chunks {chunk} read {max(v, r or 0):.0f} GB/s, above the device copy's {ref['copy_gbps']:.0f}")
        raw_cells = f"{r:.0f} | {v:.0f} | {v / r:.2f}" if r else f"- | {v:.0f} | -"
        print(f"| array-sum GB/s, chunks {chunk} | {ref['sum_gbps']:.0f} | {raw_cells} | {v / ref['sum_gbps']:.2f} | "
              f"{v / ref['copy_gbps']:.2f} |")
    for key, label in (("elementwise_tflops", "elementwise TFLOP/s"), ("matmul_tflops", "matmul float64 TFLOP/s")):
        print(f"| {label} | {ref[key]:.2f} | - | {ours[key]:.2f} | - | {ours[key] / ref[key]:.2f} | - |")


if __name__ == "__main__":
    main()
