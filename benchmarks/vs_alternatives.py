"""openclaw's default next to what a user would pick instead, on the same chunked work, in one run.

Two kernels over ``--size`` bytes of float64 already in memory, cut into the chunks openclaw's
``auto`` picks for this machine: ``sum`` (memory-bound) and ``elementwise``
(``(sin(x) * 2 + x).sum()``, compute-bound). Each alternative maps the same function over the
same chunks and adds the partial results:

- openclaw: ``s.compute(...)`` in a default session (the thread backend);
- joblib with threads (``prefer="threads"``) and with loky processes (joblib's default; the
  chunks travel to the workers as memory maps, joblib's own mechanism for big arrays);
- ``concurrent.futures.ThreadPoolExecutor`` and ``ProcessPoolExecutor`` (chunks pickled);
- Ray, when installed: chunks ``ray.put`` once (not timed), tasks over the object refs.

A missing package is skipped with a line that says so. Every row is the median of
``--repeat`` runs after a warm-up, and the ratio is openclaw's speed over that row's.

    pip install joblib ray   # optional
    python benchmarks/vs_alternatives.py --size 512MiB --repeat 7
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import numpy as np
from _timing import median_s
from dask.system import CPU_COUNT
from dask.utils import format_bytes, parse_bytes

import openclaw_dask


def chunk_sum(a: np.ndarray) -> float:
    return float(np.sum(a))


def chunk_elementwise(a: np.ndarray) -> float:
    return float((np.sin(a) * 2.0 + a).sum())


KERNELS: dict[str, Callable[[np.ndarray], float]] = {"sum": chunk_sum, "elementwise": chunk_elementwise}


def checked_median_s(fn: Callable[[], float], repeat: int, expected: float) -> float:
    assert np.isclose(fn(), expected, rtol=1e-9)  # warm-up, and the same answer as NumPy
    return median_s(fn, repeat)


@contextlib.contextmanager
def alternatives(blocks: list[np.ndarray]) -> Iterator[dict[str, Callable[[Callable[[np.ndarray], float]], float] | str]]:
    """name -> run(kernel) over ``blocks``, or the reason it is skipped."""
    with contextlib.ExitStack() as stack:
        out: dict[str, Callable[[Callable[[np.ndarray], float]], float] | str] = {}
        threads = stack.enter_context(ThreadPoolExecutor(CPU_COUNT))
        processes = stack.enter_context(ProcessPoolExecutor(CPU_COUNT))
        out["concurrent.futures threads"] = lambda f: sum(threads.map(f, blocks))
        out["concurrent.futures processes"] = lambda f: sum(processes.map(f, blocks))
        if importlib.util.find_spec("joblib") is None:
            out["joblib"] = "skipped: pip install joblib"
        else:
            from joblib import Parallel, delayed

            joblib_threads = stack.enter_context(Parallel(n_jobs=CPU_COUNT, prefer="threads"))
            loky = stack.enter_context(Parallel(n_jobs=CPU_COUNT))
            out["joblib threads"] = lambda f: sum(joblib_threads(delayed(f)(b) for b in blocks))
            out["joblib loky (processes)"] = lambda f: sum(loky(delayed(f)(b) for b in blocks))
        if importlib.util.find_spec("ray") is None:
            out["Ray"] = "skipped: pip install ray"
        else:
            import ray

            ray.init(num_cpus=CPU_COUNT, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")  # loopback only
            stack.callback(ray.shutdown)
            refs = [ray.put(b) for b in blocks]
            remote = {f: ray.remote(f) for f in KERNELS.values()}
            out["Ray"] = lambda f: sum(ray.get([remote[f].remote(r) for r in refs]))
        yield out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="512MiB")
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    n = parse_bytes(args.size) // 8
    data = np.random.default_rng(0).random(n)
    with openclaw_dask.session() as s:
        x = s.from_array(data)
        blocks = [data[sl] for sl in _slices(x.chunks[0])]
        expected = {name: sum(f(b) for b in blocks) for name, f in KERNELS.items()}
        graphs = {"sum": x.sum(), "elementwise": (np.sin(x) * 2.0 + x).sum()}
        ours = {name: checked_median_s(lambda g=g: float(s.compute(g)), args.repeat, expected[name]) for name, g in graphs.items()}
        engine, chunks = s.engine.kind, f"{len(blocks)} x {format_bytes(blocks[0].nbytes)}"
    print(f"{format_bytes(n * 8)} of float64 in {chunks} chunks, {CPU_COUNT} workers each, median of {args.repeat}\n")
    print("| tool | " + " | ".join(f"{k} (ms) | openclaw speedup" for k in KERNELS) + " |")
    print("|---|" + "---|---|" * len(KERNELS))
    print(f"| openclaw ({engine}) | " + " | ".join(f"{ours[k] * 1e3:.1f} | 1.00" for k in KERNELS) + " |")
    with alternatives(blocks) as tools:
        for tool, run in tools.items():
            if isinstance(run, str):
                print(f"| {tool} | {run} |")
                continue
            cells = []
            for name, f in KERNELS.items():
                seconds = checked_median_s(lambda r=run, f=f: r(f), args.repeat, expected[name])
                cells.append(f"{seconds * 1e3:.1f} | {seconds / ours[name]:.2f}")
            print(f"| {tool} | " + " | ".join(cells) + " |", flush=True)


def _slices(chunks: tuple[int, ...]) -> Iterator[slice]:
    start = 0
    for c in chunks:
        yield slice(start, start + c)
        start += c


if __name__ == "__main__":
    main()
