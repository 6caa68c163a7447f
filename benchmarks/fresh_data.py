"""Computes over data the compute itself makes (nothing persisted), per engine: serial, thread, process.

The standard suite persists its inputs first; a user's ``(da.random.random(n) * 2 + 1).mean()``
does not: every chunk is made, used and dropped inside one compute. Each case is the mean of
``x * 2 + 1`` over a fresh random vector of SIZE MiB in CHUNKS chunks, through ``Session.compute``.
Per backend one session; per case 3 warm-up computes, then ``--repeat`` timed ones (median). The
path column is the process backend's (``straight to the workers`` or ``through the scheduler``).

    python benchmarks/fresh_data.py --repeat 9
"""

from __future__ import annotations

import argparse

from _timing import median_s

import openclaw_dask

CASES = ((8, 2), (8, 8), (64, 2), (64, 16), (64, 64), (512, 2), (512, 16))  # (MiB, chunks)


def _timings(backend: str, repeat: int) -> tuple[dict[tuple[int, int], float], dict[tuple[int, int], str]]:
    options = {"parallel.enabled": False} if backend == "serial" else {"backend": backend, "workers": 2}
    times, paths = {}, {}
    with openclaw_dask.session(**options) as s:
        for mib, chunks in CASES:
            n = mib * 2**20 // 8

            def job(n: int = n, chunks: int = chunks) -> float:
                x = s.array((n,), "float64", fill="random", seed=1, chunks=-(-n // chunks))
                return float(s.compute((x * 2 + 1).mean()))

            for _ in range(3):
                job()
            times[mib, chunks] = median_s(job, repeat)
            path = getattr(s.running, "path", None) if s.running is not None else None
            paths[mib, chunks] = path.path if path is not None else "-"
    return times, paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args()
    results = {backend: _timings(backend, args.repeat) for backend in ("serial", "thread", "process")}
    print("| MiB, chunks | serial ms | thread ms | process ms | process / thread | process / serial | process path |")
    print("|---|---|---|---|---|---|---|")
    for case in CASES:
        ser, thr, pro = (results[b][0][case] * 1e3 for b in ("serial", "thread", "process"))
        print(f"| {case[0]}, {case[1]} | {ser:.1f} | {thr:.1f} | {pro:.1f} | {thr / pro:.2f} | {ser / pro:.2f} | "
              f"{results['process'][1][case]} |")


if __name__ == "__main__":
    main()
