"""Suite kernels timed in one session of one backend: for A/B runs of two checkouts, alternated.

Each kernel (``openclaw_dask.workloads.suite.KERNELS``) is built at ``--size``, run 3 times untimed,
then ``--repeat`` times timed (its ``Prepared.execute``: building the graph and computing it, as the
benchmark times a row); the line gives each kernel's median and fastest run in ms and the path the
last compute took. To compare two commits, run this from each checkout in turn, a few times::

    PYTHONPATH=/path/to/other/checkout python benchmarks/kernels.py --backend process --size 512 matmul linear-model
    python benchmarks/kernels.py --backend process --size 512 matmul linear-model
"""

from __future__ import annotations

import argparse
import statistics

from _timing import times_s

import openclaw_dask
from openclaw_dask.cluster import running_of
from openclaw_dask.workloads.suite import KERNELS


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kernels", nargs="+", choices=sorted(KERNELS))
    ap.add_argument("--backend", default="process", help="thread, process or serial")
    ap.add_argument("--size", type=int, default=512, help="MiB per input, as the suites size them (quick 64, standard 512)")
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    options = {"parallel.enabled": False} if args.backend == "serial" else {"backend": args.backend, "workers": 2}
    cells = []
    with openclaw_dask.session(**options) as s:
        for name in args.kernels:
            prepared = KERNELS[name](s, args.size * 2**20)
            try:
                for _ in range(3):
                    prepared.execute(s)
                times = times_s(lambda p=prepared: p.execute(s), args.repeat)
            finally:
                prepared.close()
            path = running_of(s).path if running_of(s) is not None else None
            cells.append(f"{name} {statistics.median(times) * 1e3:.1f} ms (fastest {min(times) * 1e3:.1f})"
                         f"{'' if path is None else ', ' + path.path}")
    print(f"{args.backend}, {args.size} MiB: " + " | ".join(cells))


if __name__ == "__main__":
    main()
