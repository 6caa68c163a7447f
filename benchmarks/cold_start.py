"""Cold start: a tiny job as a whole fresh process, openclaw against plain Dask scripts, run in turn.

Five scripts sum ``arange(1000)`` in two chunks and exit: plain dask (threaded scheduler),
openclaw on the thread backend, a plain ``LocalCluster`` of 2 worker processes, and openclaw on
the process backend with 2 workers, spawned and forked. Each round runs the five in turn (after one warm-up round),
so drift falls on all alike; the table gives each script's median wall time and its ratio to
the plain threaded script and to the plain ``LocalCluster`` one.

    python benchmarks/cold_start.py --rounds 7
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

SCRIPTS = {
    "plain dask, threaded": """
        import dask.array as da
        if __name__ == "__main__":
            assert da.arange(1000, chunks=500).sum().compute() == 499500
        """,
    "openclaw thread": """
        import openclaw_dask
        if __name__ == "__main__":
            with openclaw_dask.session() as s:
                assert s.compute(s.array((1000,), fill="arange", chunks=500).sum()) == 499500
        """,
    "plain LocalCluster, 2 processes": """
        import dask.array as da
        from distributed import Client, LocalCluster
        if __name__ == "__main__":
            with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address="127.0.0.1:0", host="127.0.0.1") as cluster, Client(cluster):
                assert da.arange(1000, chunks=500).sum().compute() == 499500
        """,
    "openclaw process, 2 workers": """
        import openclaw_dask
        if __name__ == "__main__":
            with openclaw_dask.session(backend="process", workers=2) as s:
                assert s.compute(s.array((1000,), fill="arange", chunks=500).sum()) == 499500
        """,
    "openclaw process, 2 workers, worker_start fork": """
        import openclaw_dask
        if __name__ == "__main__":
            with openclaw_dask.session(backend="process", workers=2, worker_start="fork") as s:
                assert s.compute(s.array((1000,), fill="arange", chunks=500).sum()) == 499500
        """,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    times: dict[str, list[float]] = {name: [] for name in SCRIPTS}
    with tempfile.TemporaryDirectory(prefix="openclaw-cold-") as folder:
        paths = {name: Path(folder) / f"job{i}.py" for i, name in enumerate(SCRIPTS)}
        for name, path in paths.items():
            path.write_text(textwrap.dedent(SCRIPTS[name]))
        for r in range(args.rounds + 1):
            for name, path in paths.items():
                t0 = time.perf_counter()
                subprocess.run([sys.executable, str(path)], check=True, cwd=folder, capture_output=True)
                if r:
                    times[name].append(time.perf_counter() - t0)
    medians = {name: statistics.median(t) for name, t in times.items()}
    plain, cluster = medians["plain dask, threaded"], medians["plain LocalCluster, 2 processes"]
    print("| script | median wall (s) | min-max | / plain threaded | / plain LocalCluster |")
    print("|---|---|---|---|---|")
    for name, t in times.items():
        print(f"| {name} | {medians[name]:.2f} | {min(t):.2f}-{max(t):.2f} | {medians[name] / plain:.2f} | "
              f"{medians[name] / cluster:.2f} |")


if __name__ == "__main__":
    main()
