"""``openclaw tune`` against an exhaustive sweep of the same grid, on three workloads, in one run.

For each workload the sweep measures every configuration of ``tune``'s grid (and the current
config) with 5 samples; ``tune`` then runs with a quarter of the sweep's time as its budget.
The table gives the sweep's best, tune's pick and that pick's median *in the sweep* (so both
are judged on the same samples), and the time each took. Goal: tune's pick within 5% of the
best, in at most 25% of the sweep's time.

Workloads: array-sum (256 MiB), matmul (128 MiB) and a user script with a planted skew (one
chunk 16x the others, as issue 13 plants it).

    python benchmarks/tune_vs_sweep.py
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import psutil

from openclaw_dask.cluster import load_for_backend as load_config
from openclaw_dask.diagnostics.tune import FINAL_SAMPLES, Trial, candidates, measure, tune

SKEWED = """\
import numpy as np, dask.array as da, openclaw_dask
s = openclaw_dask.session()
x = da.from_array(np.ones(8_000_000), chunks=((4_000_000,) + (250_000,) * 16,))
s.compute(x.map_blocks(lambda b: np.sqrt(np.exp(b))).sum())
"""


def sweep(config, target: str, grid: list[dict]) -> tuple[list[Trial], float]:
    t0 = time.perf_counter()
    trials = []
    for overrides in [{}, *grid]:
        trial = Trial(overrides)
        try:
            trial.times = measure(config, target, overrides, FINAL_SAMPLES)
        except Exception as e:  # noqa: BLE001  (a configuration that cannot run is a row, not a crash)
            trial.error = str(e)
        trials.append(trial)
    return sorted(trials, key=lambda t: t.median_s), time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="openclaw-tune-") as folder:
        script = Path(folder) / "skewed.py"
        script.write_text(SKEWED)
        compare([("array-sum", {"workload.size": 256 * 2**20}), ("matmul", {"workload.size": 128 * 2**20}), (str(script), {})])


def compare(cases: list[tuple[str, dict]]) -> None:
    """One table row per workload: the sweep's best, tune's pick, and what each took."""
    print("| workload | sweep: best (median) | sweep time | tune's pick | its sweep median | of best | tune time | of sweep time |")
    print("|---|---|---|---|---|---|---|---|")
    for target, sets in cases:
        config = load_config(None, sets, override_label="--set")
        grid = candidates(config, psutil.cpu_count() or 1)
        ranked, sweep_s = sweep(config, target, grid)
        t0 = time.perf_counter()
        picked = tune(config, target, budget_s=sweep_s / 4).winner
        tune_s = time.perf_counter() - t0
        in_sweep = next(t for t in ranked if t.overrides == picked.overrides)
        best = ranked[0]
        name = Path(target).name
        print(f"| {name} | {best.label} ({best.median_s * 1e3:.1f} ms) | {sweep_s:.0f} s | {picked.label} | "
              f"{in_sweep.median_s * 1e3:.1f} ms | {best.median_s / in_sweep.median_s:.2f} | {tune_s:.0f} s | "
              f"{tune_s / sweep_s:.0%} |")


if __name__ == "__main__":
    main()
