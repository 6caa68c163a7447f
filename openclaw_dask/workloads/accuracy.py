"""How close to NumPy's answer a kernel's answer must be: rounding-error bounds that hold on any CPU and BLAS.

Two programs that compute the same formula in floating point (Dask over chunks, NumPy in one
call, OpenBLAS on 1 or 2 threads, AVX-512 or not) add the same terms in different orders, so
their answers differ by rounding. A fixed relative tolerance cannot judge that difference: an
output that is a sum of large terms of mixed signs can be near zero, and its rounding error is
relative to the *terms*, not to the output. Every check here is therefore a bound scaled by the
magnitude of the terms, from the standard error analysis of each operation (N. J. Higham,
*Accuracy and Stability of Numerical Algorithms*, 2nd ed., SIAM 2002; cited as "Higham"):

- ``k`` roundings in a row give a relative error of at most ``gamma(k) = k u / (1 - k u)``,
  ``u = eps / 2`` the unit roundoff (Higham, Lemma 3.1).
- A sum of ``n`` terms in *any* order is within ``gamma(n - 1) * sum(|x_i|)`` of the exact sum
  (Higham, (4.4)); a matrix product ``C = A B`` with inner dimension ``k``, in any order and with
  or without FMA, within ``gamma(k) * (|A| |B|)`` elementwise (Higham, (3.13)).
- A library function (``sin``, ``tanh``) is within ``LIBM_ULPS`` units in the last place of the
  exact value (NumPy's SIMD implementations document at most 4 ULP for float64).

Each answer is within such a bound ``B`` of the exact value, so two answers are within ``2 B`` of
each other: that is what :func:`compare` accepts, elementwise, and no more. A wrong answer (a
dropped or duplicated chunk, an element off by a millionth of its terms) exceeds it by orders of
magnitude. A kernel declares its bound with one of the constructors here (:func:`sum_of`,
:func:`matmul`, :func:`elementwise`, :func:`exact`, :func:`normal_equations`); every function is pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "EPS",
    "LIBM_ULPS",
    "Bound",
    "U",
    "Verdict",
    "abs_matmul",
    "compare",
    "elementwise",
    "exact",
    "gamma",
    "matmul",
    "normal_equations",
    "rounding",
    "sum_of",
]

EPS = float(np.finfo(np.float64).eps)  # 2**-52: the spacing of floats in [1, 2)
U = EPS / 2  # unit roundoff: the relative error of one rounding to nearest
TINY = float(np.finfo(np.float64).smallest_subnormal)  # the absolute error of one rounding that underflows
LIBM_ULPS = 4  # sin, cos, tanh: at most this many ULPs off on any CPU NumPy supports


def gamma(k: int) -> float:
    """Higham's ``gamma_k = k u / (1 - k u)``: the relative error of ``k`` roundings (Lemma 3.1); ``inf`` when ``k u >= 1``."""
    ku = max(0, k) * U
    return math.inf if ku >= 1 else ku / (1 - ku)


@dataclass(frozen=True)
class Bound:
    """How far an answer may be from the reference, elementwise.

    Attributes
    ----------
    allowed
        The largest ``|result - reference|`` that rounding explains, per element (broadcasts).
    magnitude
        The magnitude of the terms each element is made of (what the bound scales with).
    name
        The bound in a few symbols, e.g. ``"2γ_k|A||B|, k=512"``.
    """

    allowed: Any
    magnitude: Any
    name: str


@dataclass(frozen=True)
class Verdict:
    """The outcome of :func:`compare`: the worst element's error, its bound, and which bound."""

    ok: bool
    error: float  # |result - reference| at the element nearest to (or furthest past) its bound
    bound: float  # that element's bound
    name: str
    what: str = "of NumPy's answer"

    def text(self) -> str:
        """One line for reports, e.g. ``within 2.1e-13 of NumPy's answer; bound 4.4e-12 (2γ_k|A||B|, k=512)``."""
        if self.ok:
            return f"within {self.error:.2g} {self.what}; bound {self.bound:.2g} ({self.name})"
        return f"DIFFERENT: {self.error:.2g} off {self.what}, past the bound {self.bound:.2g} ({self.name})"


def rounding(magnitude: Any, k: int, name: str, *, ulps: float = 0.0) -> Bound:
    """Two answers each within ``(gamma(k) + ulps * EPS) * magnitude`` of the exact value: ``2x`` that apart at most.

    The bound is itself computed in floating point (its magnitude from sums of ``|terms|``, all
    positive, so relatively accurate): it is widened by ``gamma(k + 4)`` for that, and by ``k``
    subnormal units per answer for roundings that underflow (Higham, section 2.1).
    """
    m = np.abs(np.asarray(magnitude, dtype=np.float64))
    rel = 2 * (gamma(k) + ulps * EPS) * (1 + gamma(k + 4))
    with np.errstate(over="ignore", invalid="ignore"):
        allowed = rel * m + 2 * (k + 1) * TINY
    return Bound(allowed, m, name)


def exact(name: str = "exact: integers") -> Bound:
    """No rounding at all (integer arithmetic): the answers must be equal."""
    return Bound(0.0, 0.0, name)


def sum_of(magnitude: Any, n: int, *, ops: int = 0, ulps: float = 0.0) -> Bound:
    """A sum of ``n`` terms, each made by ``ops`` roundings (and library calls of ``ulps`` ULPs), in any order.

    ``magnitude`` is ``sum(|term|)`` (per output element, for a reduction along an axis). The sum
    adds ``n - 1`` roundings to each term's ``ops`` (Higham, (4.4) and Lemma 3.3).
    """
    k = max(0, n - 1) + ops
    return rounding(magnitude, k, f"2γ_k·Σ|x|, k={k}" + (f", {ulps:g} ulp" if ulps else ""), ulps=ulps)


def abs_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """An upper bound of ``|a| @ |b|``, within 1% of it: computed in float32 (half the time of float64) when that is accurate.

    ``|a|`` and ``|b|`` are scaled by powers of two (exactly) to at most 1, so float32 cannot
    overflow; its sum of ``k`` positive terms is within ``gamma32(k + 2)`` (Higham, (3.13)), so the
    result is raised by twice that; terms below float32's normal range (possibly flushed to
    zero) lose at most ``2^-126`` each, added back as ``2 k 2^-126``, scaled.
    """
    a, b = np.abs(np.asarray(a, dtype=np.float64)), np.abs(np.asarray(b, dtype=np.float64))
    k = a.shape[-1]
    u32 = 2.0**-24
    g32 = (k + 2) * u32 / (1 - (k + 2) * u32)
    top_a, top_b = (float(np.max(m, initial=0.0)) for m in (a, b))
    if not 0 < g32 < 0.005 or not (0 < top_a < math.inf and 0 < top_b < math.inf):
        return a @ b
    ea, eb = math.frexp(top_a)[1], math.frexp(top_b)[1]  # top <= 2**e
    m = (np.ldexp(a, -ea).astype(np.float32) @ np.ldexp(b, -eb).astype(np.float32)).astype(np.float64)
    with np.errstate(over="ignore"):
        return np.ldexp(m * (1 + 2 * g32) + 2 * k * 2.0**-126, ea + eb)


def matmul(a: np.ndarray, b: np.ndarray) -> Bound:
    """``a @ b``: within ``gamma(k) * (|a| @ |b|)`` of exact, ``k`` the inner dimension, in any order (Higham, (3.13))."""
    k = a.shape[-1]
    return rounding(abs_matmul(a, b), k, f"2γ_k·|A||B|, k={k}")


def elementwise(magnitude: Any, ops: int, *, ulps: float = 0.0) -> Bound:
    """A formula of ``ops`` roundings (and library calls of ``ulps`` ULPs) per element, ``magnitude`` its terms' ``|.|``.

    For ``(a + b + c) / 8``, the magnitude is ``(|a| + |b| + |c|) / 8``: the terms, not the result,
    which may cancel to near zero.
    """
    return rounding(magnitude, ops, f"2γ_k·|terms|, k={ops}" + (f", {ulps:g} ulp" if ulps else ""), ulps=ulps)


def compare(result: Any, reference: Any, bound: Bound, *, what: str = "of NumPy's answer") -> Verdict:
    """Is ``|result - reference| <= bound.allowed`` for every element? Non-finite values must match exactly.

    The verdict names the element whose error is largest relative to its bound (on failure, the
    furthest past it).
    """
    r, ref = np.asarray(result, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    if r.shape != ref.shape:
        return Verdict(False, math.inf, 0.0, f"shape {r.shape} instead of {ref.shape}", what)
    allowed = np.broadcast_to(np.asarray(bound.allowed, dtype=np.float64), r.shape)
    finite = np.isfinite(r) & np.isfinite(ref)
    same_special = (r == ref) | (np.isnan(r) & np.isnan(ref))
    if not np.all(finite | same_special):
        return Verdict(False, math.inf, 0.0, bound.name + "; a non-finite value differs", what)
    if r.size == 0:
        return Verdict(True, 0.0, 0.0, bound.name, what)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        err = np.where(finite, np.abs(r - ref), 0.0)
        ratio = np.where(err > 0, np.where(allowed > 0, err / allowed, math.inf), 0.0)
    i = int(np.argmax(ratio))
    ok = bool(np.all(err <= allowed))
    return Verdict(ok, float(err.flat[i]), float(allowed.flat[i]), bound.name, what)


def _lu_magnitude(g: np.ndarray) -> np.ndarray:
    """``P^T |L| |U|`` of the LU factorisation with partial pivoting of square ``g`` (what LAPACK's ``gesv`` does)."""
    n = g.shape[0]
    a, perm = np.array(g, dtype=np.float64), np.arange(n)
    for j in range(n - 1):
        p = j + int(np.argmax(np.abs(a[j:, j])))
        a[[j, p]], perm[[j, p]] = a[[p, j]], perm[[p, j]]
        if a[j, j] != 0:
            a[j + 1:, j] /= a[j, j]
            a[j + 1:, j + 1:] -= np.outer(a[j + 1:, j], a[j, j + 1:])
    lower, upper = np.tril(a, -1) + np.eye(n), np.triu(a)
    out = np.empty_like(a)
    out[perm] = np.abs(lower) @ np.abs(upper)
    return out


def normal_equations(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> Verdict:
    """Does ``w`` solve NumPy's normal equations ``(x^T x) w = x^T y`` up to rounding? A residual check.

    ``w`` came from ``solve(G', b')``, with ``G' = x^T x`` and ``b' = x^T y`` formed in another order:
    ``G'`` and NumPy's ``G`` are each within ``gamma(n) |x|^T |x|`` of exact (``n`` rows), ``b'`` and
    ``b`` within ``gamma(n) |x|^T |y|``; LU with partial pivoting solves ``(G' + E) w = b'`` with
    ``|E| <= gamma(3d) |L||U|`` (Higham, Theorem 9.4; ``|L||U|`` taken from NumPy's ``G``, as the
    two matrices agree to rounding); and the residual ``G w - b`` is itself computed within
    ``gamma(d + 1) (|G||w| + |b|)``. Their sum bounds the residual, elementwise, whatever the
    condition number; a wrong ``w`` (one weight off by a millionth of ``max |w|``) leaves a residual
    of about ``n / 3`` millionths, far past it for any ``n`` below about ``1e8`` rows.
    """
    n, d = x.shape
    g, b, aw = x.T @ x, x.T @ y, np.abs(w)
    ax = np.abs(x)
    residual = g @ w - b
    allowed = (2 * gamma(n) * (ax.T @ (ax @ aw) + ax.T @ np.abs(y)) + gamma(3 * d) * (_lu_magnitude(g) @ aw)
               + gamma(d + 1) * (np.abs(g) @ aw + np.abs(b))) * (1 + gamma(n + 4))
    bound = Bound(allowed, np.max(aw, initial=0.0), f"2γ_n|Xᵀ||X||w| + γ_3d|L||U||w|, n={n}, d={d}")
    return compare(residual, np.zeros_like(residual), bound, what="of zero residual in NumPy's normal equations")
