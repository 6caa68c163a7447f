"""How much a process-backend session slows the user's own Python in the client process.

The scheduler and the nannies of a local process cluster run on an event loop in the client
process; each of their timers takes the GIL from the main thread. This times the same pure-Python
work (building tiny-tasks' 1,000 ``dask.delayed`` objects) in turn with the cluster running as it
does, and with every periodic callback of the scheduler and nannies stopped and the worker
processes suspended, round after round in one process, so drift and noise fall on both alike.

    python benchmarks/client_interference.py --rounds 60 --runs 3
"""

from __future__ import annotations

import argparse
import gc
import statistics
import threading
import time
from typing import Any

import psutil

import openclaw_dask
from openclaw_dask.workloads.suite import KERNELS


def _callbacks(servers: list[Any], loop: Any, *, on: bool) -> None:
    """Start or stop every periodic callback of ``servers``, on their event loop."""
    done = threading.Event()

    def switch() -> None:
        for server in servers:
            for pc in server.periodic_callbacks.values():
                if on and not pc.is_running():
                    pc.start()
                elif not on and pc.is_running():
                    pc.stop()
        done.set()

    loop.add_callback(switch)
    done.wait()


def _build_s(build: Any) -> float:
    gc.collect()
    gc.disable()  # the collector's passes fall where they fall: time the work alone
    try:
        t0 = time.perf_counter()
        build()
        return time.perf_counter() - t0
    finally:
        gc.enable()


def one_run(rounds: int) -> tuple[float, float]:
    """Median build seconds with the cluster as it runs, and with it quiet."""
    with openclaw_dask.session(backend="process", workers=2) as s:
        build = KERNELS["tiny-tasks"](s, 0).build
        cluster = s.cluster
        servers = [*cluster.workers.values(), cluster.scheduler]
        workers = psutil.Process().children(recursive=True)
        running, quiet = [], []
        for _ in range(rounds):
            _callbacks(servers, cluster.loop, on=False)
            for p in workers:
                p.suspend()
            time.sleep(0.05)
            quiet.append(_build_s(build))
            for p in workers:
                p.resume()
            _callbacks(servers, cluster.loop, on=True)
            time.sleep(0.05)
            running.append(_build_s(build))
    return statistics.median(running), statistics.median(quiet)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60, help="builds of each kind per run")
    parser.add_argument("--runs", type=int, default=3, help="sessions, one after another")
    args = parser.parse_args()
    for i in range(args.runs):
        running, quiet = one_run(args.rounds)
        print(f"run {i + 1}: cluster running {running * 1e3:.1f} ms, quiet {quiet * 1e3:.1f} ms: "
              f"+{(running - quiet) * 1e3:.1f} ms ({running / quiet - 1:+.1%})")


if __name__ == "__main__":
    main()
