"""``openclaw tune``: find a fast configuration for one workload on this machine, by measuring.

The search space is the local engine's shape: ``parallel.backend`` (thread, process), workers,
threads per worker process (``omp_threads``, or ``hybrid``) and ``task_chunk_size``, seeded from
this machine's cores, the current config and the profiler: one profiled run of the current config,
whose verdicts' ``overrides`` (the fixes ``openclaw profile --apply-fix`` would write) become a
candidate of their own. The strategy is successive halving: every candidate
runs once, the best third runs again with 3 samples, then 5. Trials stop at most of the budget;
the leader and the current config are then confirmed with :data:`MIN_SAMPLES` samples each, so
no winner rests on one noisy sample. What was measured is ranked by its median.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from openclaw_dask.config.keys import BACKEND, HYBRID, OMP_THREADS, TASK_CHUNK_SIZE, WORKERS

__all__ = ["FINAL_SAMPLES", "MIN_SAMPLES", "Trial", "TuneResult", "candidates", "measure", "tune", "tuned_config"]

FINAL_SAMPLES = 5
MIN_SAMPLES = 3  # the fewest samples a winner may have
RUNGS = (1, MIN_SAMPLES, FINAL_SAMPLES)  # samples a candidate has after each rung
KEEP = 3  # each rung keeps the best 1/KEEP (at least two)
CONFIRM_SHARE = 0.2  # of the budget kept for confirming the leader and the current config
CHUNKS = ("auto", "16MiB", "128MiB")


def _label(overrides: dict[str, Any]) -> str:
    return ", ".join(f"{k.rpartition('.')[2]}={v}" for k, v in overrides.items()) or "current config"


@dataclass(eq=False)  # trials are told apart by identity (one per configuration tried)
class Trial:
    """One configuration: the keys it changes and the seconds of each sample of the measured step."""

    overrides: dict[str, Any]
    times: list[float] = field(default_factory=list)
    error: str | None = None

    @property
    def label(self) -> str:
        return _label(self.overrides)

    @property
    def median_s(self) -> float:
        return statistics.median(self.times) if self.times else math.inf

    def to_dict(self) -> dict[str, Any]:
        return {"overrides": self.overrides, "label": self.label, "times_s": self.times,
                "median_s": None if not self.times else self.median_s, "error": self.error}


@dataclass
class TuneResult:
    """The ranked trials, the winner and the current config's trial, and what the search cost."""

    workload: str
    trials: list[Trial]
    baseline: Trial
    budget_s: float
    spent_s: float

    @property
    def winner(self) -> Trial:
        return self.trials[0]

    def why(self) -> str:
        w, b = self.winner, self.baseline
        if not w.times:
            return f"no configuration ran: {w.error or 'the budget ran out'}"
        if not b.times:
            return f"{w.label}: median {w.median_s * 1e3:.1f} ms over {len(w.times)} runs; the current config did not run ({b.error})"
        if w is b:
            return f"the current config was fastest: median {w.median_s * 1e3:.1f} ms over {len(w.times)} runs"
        spread = f"{min(w.times) * 1e3:.1f}-{max(w.times) * 1e3:.1f} ms"
        return (f"{w.label}: median {w.median_s * 1e3:.1f} ms over {len(w.times)} runs ({spread}), "
                f"{b.median_s / w.median_s:.2f}x the current config's {b.median_s * 1e3:.1f} ms")

    def to_dict(self) -> dict[str, Any]:
        return {"workload": self.workload, "winner": self.winner.to_dict(), "baseline": self.baseline.to_dict(),
                "why": self.why(), "budget_s": self.budget_s, "spent_s": self.spent_s,
                "trials": [t.to_dict() for t in self.trials]}


def candidates(config: Any, cores: int) -> list[dict[str, Any]]:
    """The grid to search, as override dicts (pure): engine shapes x chunk sizes, without repeats."""
    half = max(1, cores // 2)
    shapes: list[dict[str, Any]] = [  # auto: all cores (process: cores // omp_threads processes)
        {BACKEND: "thread", WORKERS: "auto"},
        {BACKEND: "process", WORKERS: "auto", OMP_THREADS: 1},
    ]
    if half < cores:
        shapes += [{BACKEND: "thread", WORKERS: half},
                   {BACKEND: "process", WORKERS: half, OMP_THREADS: 2},
                   {BACKEND: "process", WORKERS: half, HYBRID: True, OMP_THREADS: 2}]
    out, seen = [], set()
    for shape in shapes:
        for chunk in CHUNKS:
            changed = {k: v for k, v in {**shape, TASK_CHUNK_SIZE: chunk}.items() if str(config.get(k)) != str(v)}
            key = tuple(sorted((k, str(v)) for k, v in changed.items()))
            if changed and key not in seen:  # the current config itself is the baseline trial
                seen.add(key)
                out.append(changed)
    return out


def measure(config: Any, target: str, overrides: dict[str, Any], samples: int, script_args: tuple[str, ...] = ()) -> list[float]:
    """Start a session of ``config`` with ``overrides``; the seconds of ``samples`` runs of the measured step."""
    import dataclasses

    from openclaw_dask.loading import load_checked as load_config
    from openclaw_dask.scripts import run_script
    from openclaw_dask.session import Session
    from openclaw_dask.workloads import WORKLOADS

    trial = load_config(config.path, {**_run_overrides(config), **overrides}, override_label="tune")
    trial = dataclasses.replace(trial, workload=dataclasses.replace(trial.workload, repeat=samples))
    with Session(trial).start() as s:
        if target in WORKLOADS:
            result = WORKLOADS[target](s)
            if not result.ok:
                raise RuntimeError(f"{target} gave a wrong answer under {_label(overrides)}")
            return list(getattr(result, "sum_s_all", None) or result.run_s_all)
        times = []
        for _ in range(samples):
            t0 = time.perf_counter()
            if run_script(s, target, script_args):
                raise RuntimeError(f"{target} failed under {_label(overrides)}")
            times.append(time.perf_counter() - t0)
        return times


def _run_overrides(config: Any) -> dict[str, Any]:
    """What the caller set on top of the file (--set, --size): every trial keeps it, under the tuned keys."""
    return {k: src.partition("=")[2] for k, src in config.sources.items() if src.startswith("--set ")}  # as typed


def tune(config: Any, target: str = "array-sum", *, script_args: tuple[str, ...] = (), budget_s: float = 120.0,
         cores: int | None = None, space: list[dict[str, Any]] | None = None,
         say: Callable[[str], None] = lambda m: None) -> TuneResult:
    """Successive halving over :func:`candidates` (or ``space``) for ``target``, within ``budget_s`` seconds.

    Parameters
    ----------
    config
        The current configuration: the baseline trial, and the base of every other.
    target
        A built-in workload (its measured step: the timed sums or runs) or a script (one run).
    budget_s
        Trials stop when all but :data:`CONFIRM_SHARE` of it is spent; the rest confirms the leader
        and the current config with :data:`MIN_SAMPLES` samples each (which may run a little over).
    space
        Override dicts to search instead of :func:`candidates` and the profiler's fixes (tests, benchmarks).
    """
    import psutil

    cores, t0 = cores or psutil.cpu_count() or 1, time.perf_counter()  # the profiled run counts against the budget
    baseline = Trial({})
    grid = space if space is not None else _with_fixes(candidates(config, cores), profiled_fixes(config, target, script_args, say))
    everyone = [baseline] + [Trial(o) for o in grid]
    alive = list(everyone)

    def run(trial: Trial, samples: int, note: str) -> None:
        more = samples - len(trial.times)
        if more <= 0 or trial.error:
            return
        say(f"{note}: {trial.label} ({more} run(s))")
        try:
            trial.times += measure(config, target, trial.overrides, more, script_args)
        except Exception as e:  # noqa: BLE001  (a configuration that cannot run is a result, not a crash)
            trial.error = f"{type(e).__name__}: {e}"

    trials_until = (1 - CONFIRM_SHARE) * budget_s
    for rung, samples in enumerate(RUNGS):
        for i, trial in enumerate(alive):
            if time.perf_counter() - t0 > trials_until:
                break
            run(trial, samples, f"rung {rung + 1}/{len(RUNGS)}, trial {i + 1}/{len(alive)}")
        ranked = sorted((t for t in alive if t.times), key=lambda t: t.median_s)
        alive = list(dict.fromkeys([*ranked[: max(2, math.ceil(len(ranked) / KEEP))], baseline]))
    # No winner from one noisy sample: the leader and the current config get MIN_SAMPLES even past the budget.
    leader = min((t for t in everyone if t.times), key=lambda t: t.median_s, default=baseline)
    for trial in dict.fromkeys([leader, baseline]):
        run(trial, MIN_SAMPLES, "confirming")
    measured = [t for t in everyone if t.times]
    enough = min(MIN_SAMPLES, max((len(t.times) for t in measured), default=0))  # fewer samples rank below
    trials = sorted(measured, key=lambda t: (len(t.times) < enough, t.median_s))
    return TuneResult(target, trials + [t for t in everyone if not t.times], baseline, budget_s, time.perf_counter() - t0)


def profiled_fixes(config: Any, target: str, script_args: tuple[str, ...] = (),
                   say: Callable[[str], None] = lambda m: None) -> dict[str, Any]:
    """The overrides of the verdicts of one profiled run of ``target`` under ``config`` (``{}`` when none)."""
    import dataclasses

    from openclaw_dask.diagnostics.fixes import merge_overrides
    from openclaw_dask.diagnostics.profile import profile_config

    say("profiling the current config once")
    once = dataclasses.replace(config, workload=dataclasses.replace(config.workload, repeat=1))
    try:
        report = profile_config(once, target, script_args).report
    except Exception as e:  # noqa: BLE001  (the search goes on from the grid alone)
        say(f"profiling failed ({type(e).__name__}: {e}); searching the grid alone")
        return {}
    fixes = {key: value for key, (value, _) in merge_overrides(report.verdicts).items()}
    say(f"the profiler suggests {_label(fixes)}" if fixes else f"the profiler found {len(report.verdicts)} verdict(s), none a config fix")
    return fixes


def _with_fixes(grid: list[dict[str, Any]], fixes: dict[str, Any]) -> list[dict[str, Any]]:
    """The profiler's fixes alone, then on each grid shape, then the grid; without repeats."""
    out: list[dict[str, Any]] = []
    for overrides in ([fixes, *({**o, **fixes} for o in grid)] if fixes else []) + grid:
        if overrides not in out:
            out.append(overrides)
    return out


def tuned_config(config: Any, result: TuneResult) -> Any:
    """The config file's text with the winner's keys set, headed by a comment naming the workload and the date."""
    from openclaw_dask.diagnostics.fixes import Change, FixedConfig, apply_overrides, base_text

    base, text = base_text(config)
    keys = result.winner.overrides
    head = f"# tuned by `openclaw tune {result.workload}` on {date.today().isoformat()}: {result.why()}\n"
    changes = [Change(k, v, config.get(k), "tune") for k, v in keys.items()]
    return FixedConfig(head + apply_overrides(text, keys), base, changes)
