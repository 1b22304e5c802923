"""Global, local and smooth sensitivity of the median (and of the bounded mean), exact and by brute force.

Sources
-------
* Local sensitivity ``LS_f(x) = max_{x′ ≅ x} |f(x) − f(x′)|`` and smooth sensitivity
  ``S*_{f,β}(x) = max_{y} e^{−β d(x, y)} LS_f(y)`` (d = number of differing records):
  K. Nissim, S. Raskhodnikova, A. Smith, "Smooth sensitivity and sampling in private data
  analysis", STOC 2007, Definitions 1.3 and 2.1; the median's closed forms are their §3.1
  (Proposition 3.4). A. Machanavajjhala's lecture "Smooth Sensitivity and Sampling" (Duke CompSci
  590.03, lecture 7, fall 2012) restates them.
* For data in ``[L, U]``, sorted ``x_1 ≤ … ≤ x_n``, padded with ``x_i = L`` for ``i ≤ 0`` and
  ``x_i = U`` for ``i > n``, and ``f(x) = x_m`` (``m = ⌈n/2⌉``, see :mod:`._common`):

      LS(x)      = max(x_m − x_{m−1}, x_{m+1} − x_m)
      A^{(k)}(x) = max_{y: d(x,y) ≤ k} LS(y) = max_{t = 0..k+1} (x_{m+t} − x_{m+t−k−1})
      S*_β(x)    = max_{k = 0..n} e^{−kβ} A^{(k)}(x)

  ``A^{(0)} = LS``. NRS state the formula for the middle rank; the derivation only uses that
  ``f`` is the m-th order statistic, and the brute-force tests check it on small domains for both
  odd and even n. The maximisation stops early once ``e^{−kβ}(U − L)`` cannot beat the running
  maximum (``A^{(k)} ≤ U − L``), so it stays exact and is O(n·K) with K ≈ log((U−L)/S*)/β.
* Global sensitivity of ``x_m`` on ``[L, U]^n`` is ``U − L`` (half the records at L, half at U).
  For the mean of data in ``[L, U]`` it is ``(U − L)/n``; its local sensitivity is
  ``max(max_i x_i − L, U − min_i x_i)/n`` and, because every database at distance ≥ 1 reaches
  ``(U − L)/n``, ``S*_β(x) = max(LS(x), e^{−β}(U − L)/n)`` (no gain over global sensitivity).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np

from raydp.errors import InvalidArgumentError
from raydp.validation import check_int

from ._common import check_beta, check_bounds, check_data, median_rank

__all__ = [
    "global_sensitivity_median",
    "global_sensitivity_mean",
    "local_sensitivity_median",
    "local_sensitivity_mean",
    "median_a_k",
    "smooth_sensitivity_median",
    "smooth_sensitivity_mean",
    "local_sensitivity_bruteforce",
    "smooth_sensitivity_bruteforce",
]

# brute force enumerates |domain|**n databases; refuse beyond this many
_MAX_BRUTE = 2_000_000


def global_sensitivity_median(lower: float, upper: float) -> float:
    """``U − L``: the global sensitivity of ``x_(⌈n/2⌉)`` for data in ``[L, U]`` (NRS 2007 §3.1)."""
    lo, hi = check_bounds(lower, upper)
    return hi - lo


def global_sensitivity_mean(n: int, lower: float, upper: float) -> float:
    """``(U − L)/n``: the global sensitivity of the mean of n records in ``[L, U]``."""
    n = check_int(n, "n", min_value=1)
    lo, hi = check_bounds(lower, upper)
    return (hi - lo) / n


def _padded_sorted(x: np.ndarray, lower: float, upper: float, pad: int) -> np.ndarray:
    """Sorted x with ``pad`` copies of L before and U after: element ``i`` (1-based) is at ``pad + i − 1``."""
    return np.concatenate([np.full(pad, lower), np.sort(x), np.full(pad, upper)])


def local_sensitivity_median(x, lower: float, upper: float) -> float:
    """``LS(x) = max(x_m − x_{m−1}, x_{m+1} − x_m)`` with ``x_0 = L``, ``x_{n+1} = U`` (NRS 2007 §3.1).

    >>> local_sensitivity_median([1.0, 2.0, 4.0], 0.0, 10.0)
    2.0
    """
    lo, hi = check_bounds(lower, upper)
    arr = check_data(x, lo, hi)
    xp = _padded_sorted(arr, lo, hi, 1)
    m = median_rank(arr.size)
    return float(max(xp[m] - xp[m - 1], xp[m + 1] - xp[m]))


def local_sensitivity_mean(x, lower: float, upper: float) -> float:
    """``max(max_i x_i − L, U − min_i x_i)/n``: the mean's local sensitivity for data in ``[L, U]``."""
    lo, hi = check_bounds(lower, upper)
    arr = check_data(x, lo, hi)
    return float(max(arr.max() - lo, hi - arr.min()) / arr.size)


def _a_k(xp: np.ndarray, pad: int, m: int, k: int) -> float:
    # max_{t=0..k+1} (x_{m+t} − x_{m+t−k−1}); x_i sits at index pad + i − 1
    t = np.arange(k + 2)
    hi_idx = pad + m + t - 1
    lo_idx = hi_idx - k - 1
    return float(np.max(xp[hi_idx] - xp[lo_idx]))


def median_a_k(x, k: int, lower: float, upper: float) -> float:
    """``A^{(k)}(x)``: the largest local sensitivity of the median over databases within k changes of x.

    ``A^{(k)}(x) = max_{t=0..k+1} (x_{m+t} − x_{m+t−k−1})`` (NRS 2007 §3.1); ``A^{(0)} = LS``; it
    reaches ``U − L`` once ``k ≥ n``.
    """
    lo, hi = check_bounds(lower, upper)
    arr = check_data(x, lo, hi)
    k = check_int(k, "k", min_value=0)
    n = arr.size
    k = min(k, n)  # A^{(k)} = U − L for every k >= n
    xp = _padded_sorted(arr, lo, hi, n + 1)
    return _a_k(xp, n + 1, median_rank(n), k)


def smooth_sensitivity_median(x, beta: float, lower: float, upper: float) -> float:
    """The β-smooth sensitivity ``S*_β(x) = max_k e^{−kβ} A^{(k)}(x)`` of the median, exactly.

    Data must lie in ``[lower, upper]`` (clip them first). The median is the order statistic
    ``x_(⌈n/2⌉)`` (see :mod:`raydp.baselines._common`). Source: Nissim, Raskhodnikova & Smith,
    STOC 2007, §3.1 (the O(n²) direct maximisation, stopped as soon as no larger k can win).

    >>> smooth_sensitivity_median([0.0, 1.0, 2.0, 3.0, 4.0], beta=10.0, lower=0.0, upper=4.0)
    1.0
    """
    b = check_beta(beta)
    lo, hi = check_bounds(lower, upper)
    arr = check_data(x, lo, hi)
    n = arr.size
    m = median_rank(n)
    pad = n + 1
    xp = _padded_sorted(arr, lo, hi, pad)
    width = hi - lo
    best = 0.0
    for k in range(n + 1):
        cap = math.exp(-k * b) * width
        if cap <= best:
            break  # A^{(k')} <= U − L for every k' >= k, so nothing later can be larger
        best = max(best, math.exp(-k * b) * _a_k(xp, pad, m, k))
    return float(best)


def smooth_sensitivity_mean(x, beta: float, lower: float, upper: float) -> float:
    """``S*_β(x) = max(LS(x), e^{−β}(U − L)/n)`` for the mean of data in ``[L, U]`` (see module docstring)."""
    b = check_beta(beta)
    lo, hi = check_bounds(lower, upper)
    arr = check_data(x, lo, hi)
    return float(max(local_sensitivity_mean(arr, lo, hi), math.exp(-b) * (hi - lo) / arr.size))


# ----------------------------------------------------------------------------- brute force


def _check_domain(domain, x: np.ndarray) -> np.ndarray:
    try:
        dom = np.unique(np.asarray(domain, dtype=np.float64))
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"domain must be a 1-D array of real numbers, got {type(domain).__name__}") from None
    if dom.ndim != 1 or dom.size < 1 or not np.all(np.isfinite(dom)):
        raise InvalidArgumentError("domain must be a non-empty 1-D array of finite numbers")
    if not np.all(np.isin(x, dom)):
        raise InvalidArgumentError("every record of x must be a value of the domain")
    return dom


def _apply(f: Callable, dbs: np.ndarray) -> np.ndarray:
    return np.array([float(f(row)) for row in dbs], dtype=np.float64)


def local_sensitivity_bruteforce(f: Callable, x, domain: Sequence[float]) -> float:
    """``max |f(x) − f(x′)|`` over every x′ obtained by replacing one record of x by a domain value.

    For a small finite domain this *is* the local sensitivity; for a function like the median of
    data in ``[L, U]`` it equals the continuous one when the domain contains L and U.
    """
    arr = check_data(x)
    dom = _check_domain(domain, arr)
    base = float(f(arr))
    best = 0.0
    for i in range(arr.size):
        for v in dom:
            y = arr.copy()
            y[i] = v
            best = max(best, abs(float(f(y)) - base))
    return best


def smooth_sensitivity_bruteforce(f: Callable, x, beta: float, domain: Sequence[float]) -> float:
    """``max_y e^{−β d(x,y)} LS_f(y)`` over every database y in ``domain^n`` (Hamming distance d).

    ``LS_f(y)`` is itself brute-forced over the domain. Exponential in n: refused beyond
    2 000 000 databases. For the median on ``[L, U]`` the maximising y only uses values of x, L and U,
    so a domain containing those gives the exact smooth sensitivity.
    """
    b = check_beta(beta)
    arr = check_data(x)
    dom = _check_domain(domain, arr)
    n, g = arr.size, dom.size
    if g ** n > _MAX_BRUTE:
        raise InvalidArgumentError(f"brute force over {g}^{n} = {g ** n} databases is too large (limit {_MAX_BRUTE})")
    dbs = np.array(list(itertools.product(dom, repeat=n)), dtype=np.float64)  # (g^n, n)
    fy = _apply(f, dbs)
    # neighbours of every y: replace position i by value v
    ls = np.zeros(dbs.shape[0])
    for i in range(n):
        for v in dom:
            nb = dbs.copy()
            nb[:, i] = v
            ls = np.maximum(ls, np.abs(_apply(f, nb) - fy))
    dist = np.sum(dbs != arr[None, :], axis=1)
    return float(np.max(np.exp(-b * dist) * ls))
