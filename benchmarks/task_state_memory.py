"""A distributed worker's memory per task of a graph: the figure behind ``memory_model.TASK_STATE``.

For each graph size, a fresh session of one process worker runs ``N`` no-op delayed tasks and a sum
over them twice, through the client itself (not ``Session.compute``, which would batch them). Printed:
the worker's growth over its memory before each run, by its high-water mark (``VmHWM``, reset first),
in MiB and bytes per task. Linux only.

    python benchmarks/task_state_memory.py
    python benchmarks/task_state_memory.py --tasks 1000 10000 20000
"""

from __future__ import annotations

import argparse

import dask

import openclaw_dask


def _inc(i: int) -> int:
    return i + 1


def _add_up(values: list[int]) -> int:
    return sum(values)


def _reset() -> int:
    import psutil

    with open("/proc/self/clear_refs", "w") as f:  # the high-water mark starts again from the memory now
        f.write("5")
    return int(psutil.Process().memory_info().rss)


def _high_water() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, nargs="+", default=[1000, 10000, 20000])
    args = parser.parse_args()
    for n in args.tasks:
        with openclaw_dask.session(backend="process", workers=1, omp_threads=1, memory_limit="2GiB") as s:
            runs = []
            for _ in range(2):
                graph = dask.delayed(_add_up)([dask.delayed(_inc)(i) for i in range(n)])
                before = next(iter(s.client.run(_reset).values()))
                assert s.client.compute(graph).result() == n * (n + 1) // 2
                grew = next(iter(s.client.run(_high_water).values())) - before
                runs.append(f"{grew / 2**20:.1f} MiB ({grew / n:.0f} B a task)")
        print(f"{n} tasks: first run {runs[0]}, second {runs[1]}", flush=True)


if __name__ == "__main__":
    main()
