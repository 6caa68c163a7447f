"""Is one set of timed runs faster than another? The two-sided Mann-Whitney U test, exact for small samples.

Pure (numpy and the standard library): the rule behind ``openclaw tune``'s advice and the
faster/slower words and ``--fail-on-regression`` gate of ``openclaw benchmark --compare``.
A difference counts only when the test says so (p < :data:`ALPHA`) *and* the medians differ by
at least :data:`MIN_CHANGE`; with fewer runs than the test needs to ever reach ``ALPHA``, the
verdict is ``undecided``, never ``same``.

The exact p is the permutation distribution of the rank sum (mid-ranks for ties), counted by
dynamic programming over the runs; beyond :data:`EXACT_MAX_RUNS` runs in all, the normal
approximation with the tie correction.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["ALPHA", "EXACT_MAX_RUNS", "MIN_CHANGE", "Comparison", "compare_runs", "mann_whitney", "runs_to_decide",
           "smallest_p"]

ALPHA = 0.05  # a difference is significant below this two-sided p
MIN_CHANGE = 0.05  # and only if the medians differ by at least 5% (smaller wins are not worth a config change)
EXACT_MAX_RUNS = 50  # up to here the subset counts are exact integers in float64 (C(50, 25) < 2**53)


def _doubled_ranks(values: np.ndarray) -> np.ndarray:
    """Twice each value's rank (1-based, ties share their mid-rank), so that every rank is an integer."""
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values), dtype=np.int64)
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[order[j + 1]] == values[order[i]]:
            j += 1
        ranks[order[i:j + 1]] = i + j + 2  # 2 x the mid-rank of positions i..j (1-based)
        i = j + 1
    return ranks


def _subset_sum_counts(ranks: np.ndarray, m: int) -> np.ndarray:
    """How many ``m``-subsets of ``ranks`` have each sum (index = sum)."""
    total = int(ranks.sum())
    counts = np.zeros((m + 1, total + 1))
    counts[0, 0] = 1.0
    for r in ranks:
        r = int(r)
        counts[1:, r:] = counts[1:, r:] + counts[:-1, : total + 1 - r]  # right side read before the write
    return counts[m]


def mann_whitney(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """The Mann-Whitney U of ``x`` (pairs where an ``x`` exceeds a ``y``, ties counting half) and the two-sided p.

    Exact for at most :data:`EXACT_MAX_RUNS` values in all (ties included), else the normal
    approximation with tie correction. ``p`` is the same for ``(x, y)`` and ``(y, x)``.

    Raises
    ------
    ValueError
        ``x`` or ``y`` is empty.
    """
    m, n = len(x), len(y)
    if not m or not n:
        raise ValueError(f"Mann-Whitney needs runs on both sides, got {m} and {n}")
    ranks = _doubled_ranks(np.asarray([*x, *y], dtype=float))
    r_x = int(ranks[:m].sum())
    u = r_x / 2 - m * (m + 1) / 2
    if m + n > EXACT_MAX_RUNS or len(set(ranks.tolist())) == 1:
        return u, _normal_p(u, m, n, ranks)
    counts = _subset_sum_counts(ranks, m)
    low, high = counts[: r_x + 1].sum(), counts[r_x:].sum()  # exact integers: p is symmetric to the last bit
    return u, min(1.0, 2 * float(min(low, high)) / math.comb(m + n, m))


def _normal_p(u: float, m: int, n: int, ranks: np.ndarray) -> float:
    """The two-sided p of ``u`` by the normal approximation, tie-corrected, with continuity correction."""
    big = m + n
    _, ties = np.unique(ranks, return_counts=True)
    var = m * n / 12 * ((big + 1) - float((ties**3 - ties).sum()) / (big * (big - 1)))
    if var <= 0:  # every value equal: no evidence of any difference
        return 1.0
    z = max(0.0, abs(u - m * n / 2) - 0.5) / math.sqrt(var)
    return min(1.0, math.erfc(z / math.sqrt(2)))


def smallest_p(m: int, n: int) -> float:
    """The smallest two-sided p the exact test can give for ``m`` and ``n`` runs (no ties, full separation)."""
    return min(1.0, 2 / math.comb(m + n, m)) if m and n else 1.0


def runs_to_decide(alpha: float = ALPHA, overlaps: int = 1) -> int:
    """The fewest runs a side with which the exact test reaches ``alpha`` despite ``overlaps`` out-of-order pairs.

    With ``overlaps=0`` only complete separation is significant (4 a side at 0.05); one overlap
    leaves room for one noisy run (5 a side at 0.05, where full separation gives p = 0.0079).
    """
    for k in range(1, EXACT_MAX_RUNS // 2 + 1):
        counts = _subset_sum_counts(np.arange(2, 4 * k + 1, 2), k)  # no ties: the ranks 1..2k, doubled
        low = counts[: k * (k + 1) + 2 * overlaps + 1].sum()  # U <= overlaps
        if 2 * low / math.comb(2 * k, k) < alpha:
            return k
    raise ValueError(f"alpha {alpha} with {overlaps} overlaps needs more than {EXACT_MAX_RUNS // 2} runs a side")


def _p_text(p: float) -> str:
    return "p < 0.001" if p < 0.001 else f"p = {p:.2g}"


@dataclass(frozen=True)
class Comparison:
    """Runs ``new`` against runs ``old``: the ratio of medians (new over old), the p, and the verdict word."""

    ratio: float
    p: float | None  # None when the test cannot decide with these many runs
    runs: tuple[int, int]
    verdict: str  # faster, slower, same or undecided

    @property
    def significant(self) -> bool:
        return self.verdict in ("faster", "slower")

    def evidence(self) -> str:
        """The test's figures: ``p = 0.0079, Mann-Whitney U on 5 vs 5 runs`` (or why it could not decide)."""
        m, n = self.runs
        if self.p is None:
            return (f"{m} vs {n} runs are too few to tell (p < {ALPHA:g} needs {runs_to_decide(ALPHA, 0)} a side, "
                    f"{runs_to_decide(ALPHA)} to allow one noisy run)")
        return f"{_p_text(self.p)}, Mann-Whitney U on {m} vs {n} runs"

    def text(self) -> str:
        """One sentence from the figures, e.g. ``1.41x faster (p = 0.0079, Mann-Whitney U on 5 vs 5 runs)``."""
        if self.verdict == "faster":
            return f"{1 / self.ratio:.2f}x faster ({self.evidence()})"
        if self.verdict == "slower":
            return f"{self.ratio:.2f}x slower ({self.evidence()})"
        if self.verdict == "undecided":
            return f"undecided at {self.ratio:.2f}x the time: {self.evidence()}"
        if self.p is not None and self.p < ALPHA:
            return f"the same within {MIN_CHANGE:.0%} ({self.ratio:.2f}x the time, {self.evidence()})"
        return f"no significant difference ({self.ratio:.2f}x the time, {self.evidence()})"


def compare_runs(new: Sequence[float], old: Sequence[float], *, alpha: float = ALPHA,
                 min_change: float = MIN_CHANGE) -> Comparison:
    """Is ``new`` faster or slower than ``old`` (times in seconds)? See the module docstring for the rule."""
    m, n = len(new), len(old)
    if not m or not n:
        return Comparison(math.nan, None, (m, n), "undecided")
    ratio = statistics.median(new) / statistics.median(old)
    if smallest_p(m, n) >= alpha:
        return Comparison(ratio, None, (m, n), "undecided")
    _, p = mann_whitney(new, old)
    verdict = "same"
    if p < alpha and ratio < 1 / (1 + min_change):
        verdict = "faster"
    elif p < alpha and ratio > 1 + min_change:
        verdict = "slower"
    return Comparison(ratio, p, (m, n), verdict)
