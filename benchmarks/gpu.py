"""GPU benchmark: openclaw's cuda backend against CuPy alone, on one machine, in one run.

Prints one table:

- array-sum over ``--size`` bytes of float64 already on the GPU, through openclaw at several
  chunk sizes (and auto), against ``cupy.sum`` on the whole array and against the device-copy
  bandwidth (``b[...] = a``, read + write);
- elementwise ``(sin(x) * 2 + x).sum()`` and a float64 matmul, TFLOP/s, against CuPy alone.

Medians of ``--repeat`` runs, each synchronised. ``--dry-run`` prints the plan and needs no GPU.

    python benchmarks/gpu.py --size 8GiB --repeat 5
"""

from __future__ import annotations

import argparse
import statistics
import time

from dask.utils import format_bytes, parse_bytes

CHUNKS = ("256MiB", "1GiB", "4GiB", "auto")
MATMUL_SIDE = 8192


def _median(fn, repeat: int, sync) -> float:
    fn()
    sync()  # warm-up: kernels compiled, pools grown
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def cupy_alone(n: int, repeat: int) -> dict[str, float]:
    import cupy

    sync = cupy.cuda.Device().synchronize
    a = cupy.random.random(n)
    b = cupy.empty_like(a)
    out = {
        "copy_gbps": 2 * a.nbytes / _median(lambda: b.__setitem__(Ellipsis, a), repeat, sync) / 1e9,
        "sum_gbps": a.nbytes / _median(lambda: a.sum(), repeat, sync) / 1e9,
        "elementwise_tflops": 3 * n / _median(lambda: (cupy.sin(a) * 2 + a).sum(), repeat, sync) / 1e12,
    }
    a = b = None  # free the vectors before the matmul
    m = cupy.random.random((MATMUL_SIDE, MATMUL_SIDE))
    out["matmul_tflops"] = 2 * MATMUL_SIDE**3 / _median(lambda: m @ m, repeat, sync) / 1e12
    return out


def through_openclaw(n: int, repeat: int) -> dict[str, float]:
    import cupy
    import dask.array as da

    import openclaw_dask

    sync = cupy.cuda.Device().synchronize  # compute() returns once the result is on the client
    out = {}
    with openclaw_dask.session(backend="cuda", memory_pooling=True) as s:
        print(f"engine: {s.engine}")
        for chunk in CHUNKS:
            chunks = None if chunk == "auto" else (max(1, parse_bytes(chunk) // 8),)
            x = s.persist(s.array((n,), fill="random", chunks=chunks))
            out[f"sum_gbps[{chunk}]"] = x.nbytes / _median(lambda x=x: s.compute(x.sum()), repeat, sync) / 1e9
            if chunk == "auto":
                out["elementwise_tflops"] = 3 * n / _median(lambda x=x: s.compute((da.sin(x) * 2 + x).sum()), repeat, sync) / 1e12
            del x
        m = s.persist(s.array((MATMUL_SIDE, MATMUL_SIDE), fill="random", chunks=(MATMUL_SIDE // 2, MATMUL_SIDE // 2)))
        out["matmul_tflops"] = 2 * MATMUL_SIDE**3 / _median(lambda: s.compute(m @ m), repeat, sync) / 1e12
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
    ours = through_openclaw(n, args.repeat)
    print("\n| measure | CuPy alone | openclaw | openclaw / CuPy | of device copy |\n|---|---|---|---|---|")
    print(f"| device copy GB/s | {ref['copy_gbps']:.0f} | - | - | 1.00 |")
    for chunk in CHUNKS:
        v = ours[f"sum_gbps[{chunk}]"]
        print(f"| array-sum GB/s, chunks {chunk} | {ref['sum_gbps']:.0f} | {v:.0f} | {v / ref['sum_gbps']:.2f} | "
              f"{v / ref['copy_gbps']:.2f} |")
    for key, label in (("elementwise_tflops", "elementwise TFLOP/s"), ("matmul_tflops", "matmul float64 TFLOP/s")):
        print(f"| {label} | {ref[key]:.2f} | {ours[key]:.2f} | {ours[key] / ref[key]:.2f} | - |")


if __name__ == "__main__":
    main()
