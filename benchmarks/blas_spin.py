"""Why the thread backend never raises BLAS threads for a run: the pool spins after it, and slows the next one.

Two task threads run the same work (NumPy ``sin`` over 16 MiB, or a 700x700 matmul with BLAS at one
thread each) after a pause of 0 ms to 1 s, in turn with and without one matmul with BLAS on as many
threads as there are task threads just before the pause. OpenBLAS's threads wait for more work by
spinning (its thread timeout, ~0.1 s here) and OpenMP's likewise (its blocktime): while they spin,
the two task threads share the cores with them. Each cell: the median with that call, and its ratio
to the median without it (the same pause: an idle core may itself be slow to wake on a VM).

    python benchmarks/blas_spin.py --rounds 6
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections.abc import Callable

import numpy as np
from threadpoolctl import ThreadpoolController

TASK_THREADS = 2
GAPS_S = (0.0, 0.01, 0.05, 0.2, 1.0)


def _pair(work: Callable[[], object]) -> float:
    """Seconds for ``TASK_THREADS`` threads each running ``work`` 4 times."""
    threads = [threading.Thread(target=lambda: [work() for _ in range(4)]) for _ in range(TASK_THREADS)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args()
    controller = ThreadpoolController()
    print("BLAS:", ", ".join(f"{i['internal_api']} {i['version']} ({i.get('threading_layer')})" for i in controller.info()
                             if i["user_api"] == "blas") or "none found")
    a, b, x = np.random.rand(700, 700), np.random.rand(700, 700), np.random.rand(2**21)
    works = {"sin, 16 MiB": lambda: np.sin(x), "matmul 700": lambda: a @ b}
    print("| work | " + " | ".join(f"{g * 1e3:g} ms pause" for g in GAPS_S) + " |")
    print("|---|" + "---|" * len(GAPS_S))
    with controller.limit(limits=1, user_api="blas"):  # as the session holds it
        for name, work in works.items():
            _pair(work)
            cells = []
            for gap in GAPS_S:
                runs: dict[bool, list[float]] = {True: [], False: []}
                for _ in range(args.rounds):
                    for raised in (True, False):
                        with controller.limit(limits=TASK_THREADS if raised else 1, user_api="blas"):
                            a @ b  # one call, with the pool raised or not
                        time.sleep(gap)
                        runs[raised].append(_pair(work))
                        time.sleep(0.5)  # a raised pool asleep again before the next pair
                after, control = (statistics.median(runs[k]) for k in (True, False))
                cells.append(f"{after * 1e3:.1f} ({after / control:.2f}x)")
            print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
