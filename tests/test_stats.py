"""The significance rule behind tune's advice and benchmark's faster/slower words: Mann-Whitney U, exact."""

from __future__ import annotations

import itertools
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openclaw_dask.diagnostics.stats import (
    ALPHA,
    EXACT_MAX_RUNS,
    compare_runs,
    mann_whitney,
    runs_to_decide,
    smallest_p,
)


def _brute_force_p(x: list[float], y: list[float]) -> float:
    """The exact two-sided p by listing every way to split the pooled runs (independent of the module's counting)."""
    pooled = sorted(x + y)
    rank = {v: (pooled.index(v) + 1 + len(pooled) - pooled[::-1].index(v)) / 2 for v in pooled}  # mid-ranks
    ranks = [rank[v] for v in x + y]
    observed = sum(ranks[: len(x)])
    sums = [sum(c) for c in itertools.combinations(ranks, len(x))]
    low, high = sum(s <= observed + 1e-9 for s in sums), sum(s >= observed - 1e-9 for s in sums)
    return min(1.0, 2 * min(low, high) / len(sums))


def test_identical_samples_are_not_significant():
    assert mann_whitney([0.04] * 5, [0.04] * 5) == (12.5, 1.0)
    assert mann_whitney([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])[1] == 1.0
    assert compare_runs([0.04] * 5, [0.04] * 5).verdict == "same"


def test_clearly_separated_5_vs_5_is_significant_with_the_exact_distribution():
    u, p = mann_whitney([1, 2, 3, 4, 5], [6, 7, 8, 9, 10])
    assert u == 0 and p == pytest.approx(2 / 252) and p < 0.05  # 2 of the C(10, 5) = 252 splits are this extreme
    assert mann_whitney([1, 2, 3, 4, 6], [5, 7, 8, 9, 10]) == (1.0, pytest.approx(4 / 252))  # one pair out of order
    assert mann_whitney([1, 2, 3, 5, 6], [4, 7, 8, 9, 10])[1] == pytest.approx(8 / 252)  # U = 2: 1 + 1 + 2 splits
    assert mann_whitney([1, 2, 4, 5, 6], [3, 7, 8, 9, 10])[1] > ALPHA  # U = 3: 2 x 7 / 252 = 0.056
    assert smallest_p(5, 5) == pytest.approx(0.0079, abs=1e-4) and smallest_p(3, 3) == pytest.approx(0.1)


@pytest.mark.parametrize("seed", range(12))
def test_exact_p_matches_brute_force_enumeration_with_ties(seed):
    rng = random.Random(seed)
    m, n = rng.randint(1, 6), rng.randint(1, 6)
    x = [float(rng.randint(0, 5)) for _ in range(m)]  # few distinct values: many ties
    y = [float(rng.randint(0, 5)) for _ in range(n)]
    assert mann_whitney(x, y)[1] == pytest.approx(_brute_force_p(x, y), rel=1e-12)


def test_the_normal_approximation_beyond_the_exact_range_is_close_to_exact():
    rng = random.Random(3)
    x = [rng.gauss(1.0, 0.1) for _ in range(25)]
    y = [rng.gauss(1.08, 0.1) for _ in range(25)]
    exact = mann_whitney(x, y)[1]
    approx = mann_whitney(x + [9.0], y + [9.5])[1]  # 52 runs: past EXACT_MAX_RUNS, two extra far-off runs
    assert len(x + y) + 2 > EXACT_MAX_RUNS and exact < 0.05 and approx == pytest.approx(exact, rel=0.5)


def test_runs_to_decide_follows_from_the_exact_distribution():
    assert runs_to_decide(0.05, overlaps=0) == 4  # 2 / C(8, 4) = 0.029; 3 a side: 2 / 20 = 0.1
    assert runs_to_decide(0.05) == 5
    assert runs_to_decide(0.01, overlaps=0) == 5  # 0.0079
    with pytest.raises(ValueError, match="Mann-Whitney needs runs on both sides"):
        mann_whitney([], [1.0])


_runs = st.lists(st.floats(0.001, 1.0, allow_nan=False), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(_runs, _runs)
def test_p_is_a_probability_and_symmetric(x, y):
    u, p = mann_whitney(x, y)
    u_back, p_back = mann_whitney(y, x)
    assert 0.0 <= p <= 1.0 and p == p_back
    assert 0 <= u <= len(x) * len(y) and u + u_back == len(x) * len(y)
    assert mann_whitney([2 * v for v in x], [2 * v for v in y])[1] == p  # ranks only: units do not matter


def test_compare_runs_words_follow_the_data():
    fast, slow = [0.010, 0.011, 0.012, 0.013, 0.014], [0.020, 0.021, 0.022, 0.023, 0.024]
    c = compare_runs(fast, slow)
    assert (c.verdict, c.runs, round(c.ratio, 3)) == ("faster", (5, 5), round(0.012 / 0.022, 3))
    assert c.text() == f"{0.022 / 0.012:.2f}x faster (p = 0.0079, Mann-Whitney U on 5 vs 5 runs)"
    assert compare_runs(slow, fast).text().startswith(f"{0.022 / 0.012:.2f}x slower (p = 0.0079")
    # separated but by 3%: significant, yet too small to call a change
    tight = [0.0100, 0.0101, 0.0102, 0.0103, 0.0104]
    close = compare_runs([v * 1.03 for v in tight], tight)
    assert close.verdict == "same" and close.p is not None and close.p < ALPHA and "the same within 5%" in close.text()
    noisy = compare_runs([0.010, 0.030, 0.012, 0.028, 0.011], [0.012, 0.029, 0.011, 0.027, 0.013])
    assert noisy.verdict == "same" and noisy.text().startswith("no significant difference (")
    few = compare_runs(fast[:3], slow[:3])  # 1.8x, but 3 vs 3 runs cannot reach p < 0.05
    assert few.verdict == "undecided" and few.p is None and not few.significant
    assert "3 vs 3 runs are too few to tell (p < 0.05 needs 4 a side" in few.text()
    assert compare_runs([], slow).verdict == "undecided" and math.isnan(compare_runs([], slow).ratio)
