"""``openclaw tune``: find a fast configuration for one workload on this machine, by measuring.

The search space is the local engine's shape: ``parallel.backend`` (thread, process), workers,
threads per worker process (``omp_threads``, or ``hybrid``) and ``task_chunk_size``, seeded from
this machine's cores, the current config and the profiler: one profiled run of the current config,
whose verdicts' ``overrides`` (the fixes ``openclaw profile --apply-fix`` would write) become a
candidate of their own. The strategy is successive halving: every candidate runs once, the best
third runs again with 3 samples, then 5, ranked by median. Trials stop when what is left of the
budget is what confirming needs.

The ranking only picks a challenger: the same runs that chose it flatter it. So the leader gets
:data:`CONFIRM_RUNS` fresh runs, then the current config at least :data:`FRESH_BASELINE` more (its
search runs count too: nothing selected them, and so its runs fall before and after the leader's,
in case the machine's load drifts), and the leader is recommended only when its runs are faster by
the rule of :func:`~openclaw_dask.diagnostics.stats.compare_runs`
(two-sided Mann-Whitney U, p < 0.05, medians at least 5% apart). Otherwise the current config is
as good as any tried, and the result says why, or that the budget left too few runs to decide.
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
from openclaw_dask.diagnostics.stats import ALPHA, MIN_CHANGE, Comparison, compare_runs, runs_to_decide

__all__ = ["CONFIRM_RUNS", "FINAL_SAMPLES", "MIN_SAMPLES", "Trial", "TuneResult", "candidates", "measure", "tune",
           "tuned_config"]

FINAL_SAMPLES = 5
MIN_SAMPLES = 3  # the fewest samples a ranking may rest on
RUNGS = (1, MIN_SAMPLES, FINAL_SAMPLES)  # samples a candidate has after each rung
KEEP = 3  # each rung keeps the best 1/KEEP (at least two)
CONFIRM_RUNS = runs_to_decide(ALPHA)  # the leader's fresh runs: p < 0.05 reachable despite one out-of-order run (5)
FEWEST_RUNS = runs_to_decide(ALPHA, overlaps=0)  # below this a side the test can never say yes (4)
FRESH_BASELINE = 2  # the current config's runs after the leader's, however many the search gave it
CHUNKS = ("auto", "16MiB", "128MiB")


def _label(overrides: dict[str, Any]) -> str:
    return ", ".join(f"{k.rpartition('.')[2]}={v}" for k, v in overrides.items()) or "current config"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def _runs(n: int) -> str:
    return f"{n} run" if n == 1 else f"{n} runs"


@dataclass(eq=False)  # trials are told apart by identity (one per configuration tried)
class Trial:
    """One configuration: the keys it changes, the seconds of each sample of the measured step, and what they cost.

    ``times`` are the search's samples; ``confirm`` the fresh ones of the final test (leader and
    current config only). ``sessions`` (each session's wall seconds) and ``overheads`` (each one's start and
    end: its wall less its samples) price more runs.
    """

    overrides: dict[str, Any]
    times: list[float] = field(default_factory=list)
    error: str | None = None
    confirm: list[float] = field(default_factory=list)
    sessions: list[float] = field(default_factory=list)
    overheads: list[float] = field(default_factory=list)

    @property
    def label(self) -> str:
        return _label(self.overrides)

    @property
    def median_s(self) -> float:
        return statistics.median(self.times) if self.times else math.inf

    def cost_s(self, runs: int, *, slowest: bool = False) -> float:
        """Seconds that a session of ``runs`` more samples should take, from what it has cost so far: its start and
        each run typical (mean start, median run), or the slowest yet (what the search keeps in hand for the test, on
        a noisy machine: a CI host's session start once outran the mean, and the test was left too little)."""
        if not self.sessions:
            return 0.0
        start = max(self.overheads) if slowest else statistics.fmean(self.overheads)
        return start + runs * (max(self.times) if slowest and self.times else self.median_s)

    def to_dict(self) -> dict[str, Any]:
        return {"overrides": self.overrides, "label": self.label, "times_s": self.times,
                "median_s": None if not self.times else self.median_s, "confirm_times_s": self.confirm,
                "error": self.error}


@dataclass
class TuneResult:
    """The ranked trials, the leader of the search and the current config's trial, the final test, and the cost.

    ``comparison`` is the leader's fresh runs against the current config's (``None`` when the
    current config led, or one side could not run); :attr:`winner` is the leader only when that
    test found it faster.
    """

    workload: str
    trials: list[Trial]
    baseline: Trial
    budget_s: float
    spent_s: float
    leader: Trial | None = None
    comparison: Comparison | None = None

    @property
    def winner(self) -> Trial:
        """The configuration to use: the leader if it is better with confidence (or the current config failed)."""
        if self.leader is None or not self.leader.times:
            return self.baseline
        if self.baseline.error and not self.baseline.times:
            return self.leader
        return self.leader if self.comparison is not None and self.comparison.verdict == "faster" else self.baseline

    @property
    def recommended(self) -> bool:
        """Whether tune advises a change (and ``--write`` writes one)."""
        return self.winner is not self.baseline

    def why(self) -> str:
        """One sentence, from the measured figures, saying what to use and on what evidence."""
        w, b, c = self.winner, self.baseline, self.comparison
        if not w.times:
            return f"no configuration ran: {w.error or 'the budget ran out'}"
        if not b.times:
            return f"{w.label}: median {_ms(w.median_s)} over {_runs(len(w.times))}; the current config did not run ({b.error})"
        tried = sum(1 for t in self.trials if t.times)
        if self.leader is None or self.leader is b or c is None:
            return (f"the current config is as good as any tried: its median, {_ms(b.median_s)} over {_runs(len(b.times))}, "
                    f"was the best of the {tried} of {len(self.trials)} configurations measured")
        lead = self.leader
        medians = (f"median {_ms(statistics.median(lead.confirm))} on {_runs(len(lead.confirm))} afresh vs "
                   f"{_ms(statistics.median(b.times + b.confirm))}") if lead.confirm else \
            f"median {_ms(lead.median_s)} vs {_ms(b.median_s)} in the search"
        if w is lead:
            return f"{lead.label} is {1 / c.ratio:.2f}x faster than the current config ({medians}; {c.evidence()})"
        if c.verdict == "undecided":
            return (f"the current config is kept: the budget left too few fresh runs to test the best of "
                    f"the {tried} tried, {lead.label} ({medians}): {c.evidence()}; raise --budget")
        return (f"the current config is as good as any tried: the best of the {tried}, {lead.label}, "
                f"took {c.ratio:.2f}x its time ({medians}; {c.evidence()}); a change is advised only at "
                f"p < {ALPHA:g} and at least {MIN_CHANGE:.0%} faster")

    def to_dict(self) -> dict[str, Any]:
        c = self.comparison
        test = None if c is None else {"verdict": c.verdict, "ratio": c.ratio, "p_value": c.p, "runs": list(c.runs),
                                       "text": c.text()}
        return {"workload": self.workload, "winner": self.winner.to_dict(), "baseline": self.baseline.to_dict(),
                "recommended": self.recommended, "leader": None if self.leader is None else self.leader.label,
                "test": test, "why": self.why(), "budget_s": self.budget_s, "spent_s": self.spent_s,
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
    from openclaw_dask.config.model import plain

    # the typed value, as plain data: a source label is shortened and redacted, and its text is a string
    return {k: plain(config.get(k)) for k, src in config.sources.items() if src.startswith("--set ")}


def tune(config: Any, target: str = "array-sum", *, script_args: tuple[str, ...] = (), budget_s: float = 120.0,
         cores: int | None = None, space: list[dict[str, Any]] | None = None,
         say: Callable[[str], None] = lambda m: None) -> TuneResult:
    """Successive halving over :func:`candidates` (or ``space``) for ``target``, then the leader's test, in ``budget_s``.

    Parameters
    ----------
    config
        The current configuration: the baseline trial, and the base of every other.
    target
        A built-in workload (its measured step: the timed sums or runs) or a script (one run).
    budget_s
        The search stops when what is left is what confirming the leader should cost
        (:data:`CONFIRM_RUNS` fresh runs of it, and of the current config); confirming runs as many
        as the rest allows, and none below :data:`FEWEST_RUNS`, with which no test can decide.
    space
        Override dicts to search instead of :func:`candidates` and the profiler's fixes (tests, benchmarks).
    """
    import psutil

    cores, t0 = cores or psutil.cpu_count() or 1, time.perf_counter()  # the profiled run counts against the budget
    baseline = Trial({})
    grid = space if space is not None else _with_fixes(candidates(config, cores), profiled_fixes(config, target, script_args, say))
    everyone = [baseline] + [Trial(o) for o in grid]

    def run(trial: Trial, samples: int, note: str, into: list[float] | None = None) -> None:
        if samples <= 0 or trial.error:
            return
        say(f"{note}: {trial.label} ({samples} run(s))")
        start, got = time.perf_counter(), []
        try:
            got = measure(config, target, trial.overrides, samples, script_args)
        except Exception as e:  # noqa: BLE001  (a configuration that cannot run is a result, not a crash)
            trial.error = f"{type(e).__name__}: {e}"
        (trial.times if into is None else into).extend(got)
        trial.sessions.append(time.perf_counter() - start)
        trial.overheads.append(max(0.0, trial.sessions[-1] - sum(got)))

    def left() -> float:
        return budget_s - (time.perf_counter() - t0)

    ranked = _search(everyone, baseline, run, left)
    leader = ranked[0] if ranked else None
    comparison = None
    if leader is not None and leader is not baseline and baseline.times:
        comparison = _confirm(leader, baseline, run, left)
    return TuneResult(target, ranked + [t for t in everyone if not t.times], baseline, budget_s,
                      time.perf_counter() - t0, leader, comparison)


def _search(everyone: list[Trial], baseline: Trial, run: Callable[..., None], left: Callable[[], float]) -> list[Trial]:
    """Successive halving while the budget ``left`` exceeds what confirming should cost; the ranking by median.

    Trials with fewer samples than the best-measured (up to :data:`MIN_SAMPLES`) rank below those with more.
    """
    alive = list(everyone)
    for rung, samples in enumerate(RUNGS):
        for i, trial in enumerate(alive):
            more = samples - len(trial.times)
            if left() <= _reserve(everyone, baseline) + _next_cost(everyone, trial, more):
                break
            run(trial, more, f"rung {rung + 1}/{len(RUNGS)}, trial {i + 1}/{len(alive)}")
        ranked = sorted((t for t in alive if t.times), key=lambda t: t.median_s)
        alive = list(dict.fromkeys([*ranked[: max(2, math.ceil(len(ranked) / KEEP))], baseline]))
    measured = [t for t in everyone if t.times]
    enough = min(MIN_SAMPLES, max((len(t.times) for t in measured), default=0))
    return sorted(measured, key=lambda t: (len(t.times) < enough, t.median_s))


def _reserve(everyone: list[Trial], baseline: Trial) -> float:
    """What confirming should cost: a session of the likeliest leader's runs and one of the current config's, each run
    as slow as its slowest yet (a CI run on a loaded host once took 145-531 ms a run, median 178: the search, counting
    medians, left the test too little, and tune wrote nothing)."""
    lead = min((t for t in everyone if t.times and t is not baseline), key=lambda t: t.median_s, default=None)
    return (baseline.cost_s(_base_runs(baseline, CONFIRM_RUNS), slowest=True)
            + (lead.cost_s(CONFIRM_RUNS, slowest=True) if lead else 0.0))


def _next_cost(everyone: list[Trial], trial: Trial, runs: int) -> float:
    """What ``runs`` more of ``trial`` should cost; for one not yet run, what the dearest session so far cost."""
    if runs <= 0 or trial.error:
        return 0.0
    if trial.sessions:
        return trial.cost_s(runs, slowest=True)
    return max((wall for t in everyone for wall in t.sessions), default=0.0)


def _base_runs(baseline: Trial, runs: int) -> int:
    """Fresh runs of the current config after the leader's: its search runs count too (no selection chose them)."""
    return max(FRESH_BASELINE, runs - len(baseline.times))


def _confirm(leader: Trial, baseline: Trial, run: Callable[..., None], left: Callable[[], float]) -> Comparison:
    """Fresh runs of ``leader``, then of the current config, as many as the budget allows; the test.

    The current config's sample is its search runs (before) and its fresh ones (after the leader's),
    so a drift in the machine's load does not fall on the leader's side alone.
    """
    runs = CONFIRM_RUNS
    while runs >= FEWEST_RUNS and leader.cost_s(runs) + baseline.cost_s(_base_runs(baseline, runs)) > left():
        runs -= 1
    if runs < FEWEST_RUNS:  # the test could not say yes: spend nothing on it
        return Comparison(leader.median_s / baseline.median_s, None, (0, len(baseline.times)), "undecided")
    run(leader, runs, "confirming", into=leader.confirm)
    run(baseline, _base_runs(baseline, runs), "confirming", into=baseline.confirm)
    if not leader.confirm:
        return Comparison(leader.median_s / baseline.median_s, None, (0, len(baseline.times)), "undecided")
    return compare_runs(leader.confirm, baseline.times + baseline.confirm)


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
