"""Kernels that show ``parallel.strategy``: the same model, data-parallel or model-parallel.

- ``linear-model``: least squares on synthetic data with a known answer, by the normal
  equations (``X^T X w = X^T y``, each product a sum over the chunks).
- ``model-parallel-matmul``: a two-layer MLP forward pass, ``relu(X @ W1) @ W2``.

``data`` chunks the sample axis (rows of ``X``) and keeps the weights whole on every
worker; ``model`` splits the parameter axis (columns of ``X`` for the linear model; the
hidden units, i.e. the columns of ``W1`` and rows of ``W2``, for the MLP) so each worker
holds one slice of the weights and partial results are summed. The inputs are ``noise``
fills, equal for any chunking, so every strategy computes the same numbers; what differs
is the chunk layout and what moves between workers (see ``openclaw profile``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import dask.array as da
import numpy as np

from openclaw_dask.workloads import accuracy
from openclaw_dask.workloads.prepared import Prepared

if TYPE_CHECKING:
    from openclaw_dask.cluster import SessionLike

__all__ = ["FEATURES", "linear_model", "mlp_bound", "model_parallel_matmul"]

FEATURES = 64  # columns of the linear model's X


def _true_weights(d: int) -> np.ndarray:
    return np.linspace(-1.0, 1.0, d) + 0.5 / d  # the known answer; no weight is zero


def _split(session: SessionLike, n: int, planned: int) -> tuple[int, ...]:
    """``n`` cut into at least one piece per task thread (or as the chunk plan asks, if more)."""
    parts = min(n, max(session.slots, planned))
    base, extra = divmod(n, parts)
    return tuple(base + (i < extra) for i in range(parts))


def linear_model(s: SessionLike, size: int) -> Prepared:
    """Least squares on ``size`` bytes of ``X``; ``y = X @ w_true`` exactly, so ``w`` must come back as ``w_true``.

    ``X^T X``, ``X^T y`` and the ``d x d`` solve are one array graph (the memory model projects it).
    """
    d = FEATURES
    n = max(4 * d, size // (8 * d))
    x = s.persist(s.array((n, d), "float64", fill="noise", seed=3))
    w_true = _true_weights(d)
    y = s.persist(x @ w_true)

    def solve(x: Any, y: Any) -> Any:
        # one array graph (the memory model projects it): X^T X and X^T y, then the d x d system, solved by the
        # array library of the blocks (CuPy's solve for CuPy blocks on backend cuda)
        return da.blockwise(np.linalg.solve, "i", (x.T @ x).rechunk(-1), "ij", (x.T @ y).rechunk(-1), "j", concatenate=True,
                            dtype=x.dtype)

    def numpy_solve(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.linalg.solve(x.T @ x, x.T @ y)

    def details() -> list[tuple[str, str]]:
        w = s.to_numpy(s.compute(solve(x, y)))
        return [("known answer", f"max |w - w_true| = {np.max(np.abs(w - w_true)):.2g} over {d} weights")]

    def verdict(w: np.ndarray, reference: np.ndarray, x: np.ndarray, y: np.ndarray) -> accuracy.Verdict:
        return accuracy.normal_equations(x, y, w)  # a residual check: holds whatever the condition number

    return Prepared(solve, numpy_solve, (x, y), x.nbytes, 2.0 * n * d * d, verdict=verdict, details=details)


def model_parallel_matmul(s: SessionLike, size: int) -> Prepared:
    """``relu(X @ W1) @ W2``, three square matrices of ``size / 16`` bytes each."""
    side = max(8, int(math.sqrt(size / 16 / 8)))
    shape = (side, side)
    whole = ((side,), (side,))
    if s.config.parallel.strategy == "model":  # split the hidden units: W1's columns, W2's rows
        hidden = _split(s, side, len(s.chunks(shape, "float64")[1]))
        chunks = {"x": whole, "w1": ((side,), hidden), "w2": (hidden, (side,))}
    else:  # data (and pipeline): split the samples, every worker holds all weights
        rows = _split(s, side, len(s.chunks(shape, "float64")[0]))
        chunks = {"x": (rows, (side,)), "w1": whole, "w2": whole}
    x, w1, w2 = (s.persist(s.array(shape, "float64", fill="noise", seed=seed, chunks=chunks[name]))
                 for seed, name in ((11, "x"), (12, "w1"), (13, "w2")))

    def mlp(x: Any, w1: Any, w2: Any) -> Any:
        import dask.array as da

        return da.maximum(x @ w1, 0.0) @ w2

    def numpy_mlp(x: np.ndarray, w1: np.ndarray, w2: np.ndarray) -> np.ndarray:
        return np.maximum(x @ w1, 0.0) @ w2

    return Prepared(mlp, numpy_mlp, (x, w1, w2), 4 * x.nbytes, 4.0 * side**3, accuracy=mlp_bound)


def mlp_bound(x: np.ndarray, w1: np.ndarray, w2: np.ndarray) -> accuracy.Bound:
    """``relu(X W1) W2``, in any order: within ``gamma(k1 + k2) (|X||W1|)|W2|`` of exact.

    ``H = X W1`` is within ``gamma(k1) |X||W1|``; relu moves no value further apart; the second
    product adds ``gamma(k2) |relu(H)||W2| <= gamma(k2) (1 + gamma(k1)) (|X||W1|)|W2|``, and
    ``gamma(a) + gamma(b) + gamma(a) gamma(b) <= gamma(a + b)`` (Higham, Lemma 3.3). Splitting the
    hidden units (strategy ``model``) sums partial outputs in another order: the same bound.
    """
    k = x.shape[1] + w1.shape[1]
    return accuracy.rounding(accuracy.abs_matmul(accuracy.abs_matmul(x, w1), w2), k, f"2γ_k·|X||W1||W2|, k={k}")
