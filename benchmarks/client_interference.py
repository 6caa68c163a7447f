"""How much a process-backend session slows the user's own Python in the client process.

The scheduler and the nannies of a local process cluster run on an event loop in the client
process; each of their timers takes the GIL from the main thread. This times the same pure-Python
work (building tiny-tasks' 1,000 ``dask.delayed`` objects) in turn in two states of one session,
round after round in one process, so drift and noise fall on both alike:

- by default, the cluster running as it does, against every periodic callback of the scheduler
  and nannies stopped and the worker processes suspended;
- with ``--monitors``, distributed's system monitors of the scheduler and the two nannies
  sampling every 500 ms (distributed's default, which openclaw turns off where no dashboard reads
  them: ``cluster/plugins.py`` ``QuietNanny``), against not.

Callbacks restarted together fire together one period later, so each round waits a random time
before it builds: the builds meet the timers at every phase.

    python benchmarks/client_interference.py --rounds 60 --runs 3
    python benchmarks/client_interference.py --monitors --rounds 40 --runs 2
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import random
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psutil

import openclaw_dask
from openclaw_dask.workloads.suite import KERNELS

RESUMED_S = 1.2  # the longest period of the callbacks that fire during a build, with a margin
BUILDS = 3  # builds per state and round


def _on_loop(loop: Any, fn: Callable[[], None]) -> None:
    done = threading.Event()
    loop.add_callback(lambda: (fn(), done.set()))
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


@contextlib.contextmanager
def _quiet(cluster: Any) -> Iterator[None]:
    """Every periodic callback of the scheduler and nannies stopped, the worker processes suspended."""
    running = [pc for server in (*cluster.workers.values(), cluster.scheduler) for pc in server.periodic_callbacks.values()
               if pc.is_running()]
    workers = psutil.Process().children(recursive=True)
    _on_loop(cluster.loop, lambda: [pc.stop() for pc in running])
    for p in workers:
        p.suspend()
    try:
        yield
    finally:
        for p in workers:
            p.resume()
        _on_loop(cluster.loop, lambda: [pc.start() for pc in running])
        time.sleep(RESUMED_S)  # their first calls after the restart, out of the next round


@contextlib.contextmanager
def _monitors(cluster: Any) -> Iterator[None]:
    """The system monitors of the scheduler and nannies sampling, as distributed starts them."""
    from tornado.ioloop import PeriodicCallback

    sampling = [PeriodicCallback(server.monitor.update, 500) for server in (*cluster.workers.values(), cluster.scheduler)]
    _on_loop(cluster.loop, lambda: [pc.start() for pc in sampling])
    try:
        time.sleep(RESUMED_S)
        yield
    finally:
        _on_loop(cluster.loop, lambda: [pc.stop() for pc in sampling])


def one_run(rounds: int, monitors: bool) -> tuple[float, float]:
    """Median build seconds in the busier state and in the quieter one."""
    with openclaw_dask.session(backend="process", workers=2) as s:
        build = KERNELS["tiny-tasks"](s, 0).build
        busier: Callable[[], Any] = (lambda: _monitors(s.cluster)) if monitors else contextlib.nullcontext
        quieter: Callable[[], Any] = contextlib.nullcontext if monitors else (lambda: _quiet(s.cluster))
        times: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(rounds):
            for busy in random.sample([True, False], 2):
                with busier() if busy else quieter():
                    time.sleep(random.uniform(0.0, 0.6))  # any phase of the timers
                    times[busy] += [_build_s(build) for _ in range(BUILDS)]
    return statistics.median(times[True]), statistics.median(times[False])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60, help="rounds per run (each builds 3 times in each state)")
    parser.add_argument("--runs", type=int, default=3, help="sessions, one after another")
    parser.add_argument("--monitors", action="store_true", help="the system monitors sampling against not")
    args = parser.parse_args()
    names = ("monitors sampling", "not") if args.monitors else ("cluster running", "quiet")
    for i in range(args.runs):
        busy, quiet = one_run(args.rounds, args.monitors)
        print(f"run {i + 1}: {names[0]} {busy * 1e3:.1f} ms, {names[1]} {quiet * 1e3:.1f} ms: "
              f"+{(busy - quiet) * 1e3:.1f} ms ({busy / quiet - 1:+.1%})")


if __name__ == "__main__":
    main()
