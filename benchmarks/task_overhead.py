"""What a task costs, per engine: openclaw beside raw Dask, and the ``task_overhead_s`` each backend declares.

``--paired`` (issue 26): the same work through raw Dask and through openclaw, timed in turn in
one process, round after round, so drift and noise fall on every variant alike. Per task, in
microseconds, graph building included:

- ``2,000 delayed``: 2,000 no-op ``dask.delayed`` calls computed together. Every call is a
  result, so openclaw's small-task pass leaves them alone: this is what openclaw adds per task;
- ``loop of 2,000``: ``delayed(sum)`` over the same calls (the ``tiny-tasks`` shape), which
  openclaw batches;
- ``20,000 map``: ``client.map`` (raw) against :func:`openclaw_dask.dataflow.map`.

Raw engines: dask's threaded scheduler, distributed in-process (2 workers of 1 thread) and
distributed on 2 worker processes, each with distributed's defaults. The openclaw sessions are
the thread backend (threads engine and distributed engine) and the process backend.

Without ``--paired``: a sum over ``k`` tiny chunks (10 elements each, already in memory) is
timed for k = 8, 20 and 40 chunks; the slope of the median time over k is the cost of one more
chunk (the declared ``task_overhead_s``). The auto chunk size keeps chunks big enough that this
stays under 5% (``openclaw_dask.chunking.min_auto_chunk``).

    python benchmarks/task_overhead.py --repeat 25
    python benchmarks/task_overhead.py --paired --repeat 7
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Callable
from typing import Any

import dask

import openclaw_dask

ENGINES = {
    "sync (enabled: false)": {"enabled": False},
    "thread, threads engine": {},
    "thread, distributed engine": {"engine": "distributed"},
    "process, 2 workers": {"backend": "process", "workers": 2},
}
COUNTS = (8, 20, 40)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=25)
    ap.add_argument("--paired", action="store_true", help="openclaw beside raw Dask, per task (see above)")
    args = ap.parse_args()
    if args.paired:
        paired(args.repeat)
        return
    print("| engine | " + " | ".join(f"{k} chunks (ms)" for k in COUNTS) + " | ms per chunk |")
    print("|---|" + "---|" * (len(COUNTS) + 1))
    for label, overrides in ENGINES.items():
        with openclaw_dask.session(**overrides) as s:
            medians = {}
            for k in COUNTS:
                y = s.persist(s.array((k * 10,), fill="arange", chunks=10))
                s.compute(y.sum())
                times = []
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    s.compute(y.sum())
                    times.append(time.perf_counter() - t0)
                medians[k] = statistics.median(times) * 1e3
        slope = (medians[COUNTS[-1]] - medians[COUNTS[0]]) / (COUNTS[-1] - COUNTS[0])
        print(f"| {label} | " + " | ".join(f"{medians[k]:.1f}" for k in COUNTS) + f" | {slope:.2f} |")


N_DELAYED, N_MAP = 2000, 20_000


def noop(i: int) -> int:
    return i


def _calls() -> list[Any]:
    return [dask.delayed(noop)(i) for i in range(N_DELAYED)]


def _loop() -> Any:
    return dask.delayed(sum)(_calls())


def _variants(stack: contextlib.ExitStack) -> dict[str, dict[str, Callable[[], Any]]]:
    """engine -> {work -> a callable that does it once}; every cluster and session goes on ``stack``."""
    from distributed import Client, LocalCluster

    from openclaw_dask.dataflow import map as oc_map

    out: dict[str, dict[str, Callable[[], Any]]] = {
        "raw dask, threaded": {"2,000 delayed": lambda: dask.compute(*_calls(), scheduler="threads"),
                               "loop of 2,000": lambda: dask.compute(_loop(), scheduler="threads")}}
    for label, processes in (("raw distributed, in-process", False), ("raw distributed, 2 processes", True)):
        cluster = stack.enter_context(LocalCluster(n_workers=2, threads_per_worker=1, processes=processes,
                                                   dashboard_address="127.0.0.1:0", host="127.0.0.1" if processes else None))
        client = stack.enter_context(Client(cluster, set_as_default=False))
        out[label] = {"2,000 delayed": lambda c=client: c.gather(c.compute(_calls())),
                      "loop of 2,000": lambda c=client: c.compute(_loop()).result(),
                      "20,000 map": lambda c=client: c.gather(c.map(noop, range(N_MAP), pure=False))}
    for label, overrides in (("openclaw thread, threads engine", {}),
                             ("openclaw thread, distributed engine", {"engine": "distributed", "workers": 2}),
                             ("openclaw process, 2 workers", {"backend": "process", "workers": 2})):
        s = stack.enter_context(openclaw_dask.session(**overrides))
        out[label] = {"2,000 delayed": lambda s=s: s.compute(*_calls()), "loop of 2,000": lambda s=s: s.compute(_loop()),
                      "20,000 map": lambda s=s: oc_map(s, noop, range(N_MAP))}
    return out


def paired(repeat: int) -> None:
    """Each variant in turn, ``repeat`` rounds (after one warm-up round); medians per task in microseconds."""
    counts = {"2,000 delayed": N_DELAYED, "loop of 2,000": N_DELAYED + 1, "20,000 map": N_MAP}
    with contextlib.ExitStack() as stack:
        variants = _variants(stack)
        times: dict[tuple[str, str], list[float]] = {}
        for r in range(repeat + 1):
            for engine, works in variants.items():
                for work, fn in works.items():
                    t0 = time.perf_counter()
                    fn()
                    if r:
                        times.setdefault((engine, work), []).append(time.perf_counter() - t0)
    print("| engine | " + " | ".join(f"{w} (us per task)" for w in counts) + " |")
    print("|---|" + "---|" * len(counts))
    for engine in variants:
        cells = [f"{statistics.median(times[engine, w]) / counts[w] * 1e6:.1f}" if (engine, w) in times else "-"
                 for w in counts]
        print(f"| {engine} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
