"""A reduction's fan-in (``split_every``) on each engine: dask's default 4 against 16 and 64.

For 16, 64 and 256 persisted chunks of 1 MiB: a 1-d sum, and a 2-d sum along axis 0; the median
of ``--repeat`` computes of each fan-in, alternated in rounds so the machine's drift is shared.

    python benchmarks/fan_in.py --backend thread
    python benchmarks/fan_in.py --backend process
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

import dask.array as da

import openclaw_dask

FAN_INS = (4, 16, 64)


def _summed(array: da.Array, axis: int | None, split_every: int) -> da.Array:
    return array.sum(axis=axis, split_every=split_every)


def _timed(s: openclaw_dask.Session, graph: object) -> float:
    t0 = time.perf_counter()
    s.compute(graph)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="thread")
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    with openclaw_dask.session(backend=args.backend, workers=2) as s:
        for n in (16, 64, 256):
            x = s.persist(da.random.random((n * 2**17,), chunks=2**17))
            y = s.persist(da.random.random((n * 64, 2048), chunks=(64, 2048)))
            for label, array, axis in (("1-d sum", x, None), ("2-d sum, axis 0", y, 0)):
                make = functools.partial(_summed, array, axis)
                times: dict[int, list[float]] = {k: [] for k in FAN_INS}
                for k in FAN_INS:
                    s.compute(make(k))  # warm-up
                for _ in range(args.repeat):
                    for k in FAN_INS:
                        times[k].append(_timed(s, make(k)))
                cells = "  ".join(f"{k}: {statistics.median(t) * 1e3:.1f} ms" for k, t in times.items())
                print(f"{n:4d} chunks, {label:16s} {cells}", flush=True)


if __name__ == "__main__":
    main()
