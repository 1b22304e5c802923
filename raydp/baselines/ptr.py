"""Propose-test-release for the median (Dwork & Lei, STOC 2009; Dwork & Roth 2014, §7.3).

Algorithm (as in Dwork & Roth, "The Algorithmic Foundations of Differential Privacy"), for a proposed
bound ``b`` on the local sensitivity and a total budget ``(ε, δ)`` split as ``ε/2`` for the test and
``ε/2`` for the answer:

1. ``k = d(x, UNSAFE_b)``: the fewest records of x to change to reach a database whose local
   sensitivity exceeds b. For the median this is exact and cheap:
   ``k = min{k ≥ 0 : A^{(k)}(x) > b}`` with ``A^{(k)}`` of Nissim, Raskhodnikova & Smith 2007 §3.1
   (the largest local sensitivity within k changes; see :mod:`.sensitivity`). If ``b ≥ U − L``
   no database is unsafe and ``k = ∞``.
2. ``k̃ = k + Lap(1/(ε/2))``. If ``k̃ ≤ ln(1/δ)/(ε/2) + 1`` return ⊥ (``None``).
3. Otherwise return ``x_(⌈n/2⌉) + Lap(b/(ε/2))``.

Privacy: **(ε, δ)-DP**. The test is (ε/2)-DP (k has sensitivity 1); on a pair x ≅ x′ with
``LS(x) ≤ b`` the answer is (ε/2)-DP; if ``LS(x) > b`` then ``k(x′) ≤ 1`` and x′ passes the test
with probability ``≤ ½·exp(−(ε/2)(T − 1)) = δ/2`` where T is the threshold — the "+1" in the
threshold is what makes this δ (Dwork & Roth write it the same way).

The proposal ``b`` must not depend on the private data. :func:`propose_bound` makes one from a
public model of the data (the same oracle the sensitivity sampler uses).
"""

from __future__ import annotations

import math

import numpy as np

from raydp import noise
from raydp.validation import check_int, check_nonnegative

from ._common import (
    EPS_DELTA_DP,
    BaselineRelease,
    check_bounds,
    check_data,
    check_delta,
    check_epsilon,
    clamp,
    lower_median,
    median_rank,
)
from .sensitivity import _a_k, _padded_sorted

__all__ = ["ptr_distance_to_unsafe", "ptr_threshold", "ptr_median", "propose_bound"]


def _check_bound(bound) -> float:
    if isinstance(bound, np.generic):
        bound = bound.item()
    return check_nonnegative(bound, "bound (the proposed local-sensitivity bound)")


def ptr_distance_to_unsafe(x, bound: float, lower: float, upper: float) -> float:
    """``min{k : A^{(k)}(x) > bound}``: records to change before the median's local sensitivity can exceed ``bound``.

    Returns ``math.inf`` when ``bound ≥ U − L`` (no database is unsafe). Otherwise the answer is at
    most n (``A^{(n)} = U − L``).

    >>> ptr_distance_to_unsafe([0.0, 0.0, 1.0, 1.0], 0.5, 0.0, 1.0)
    0
    """
    lo, hi = check_bounds(lower, upper)
    arr = check_data(x, lo, hi)
    b = _check_bound(bound)
    if b >= hi - lo:
        return math.inf
    n = arr.size
    pad = n + 1
    xp = _padded_sorted(arr, lo, hi, pad)
    m = median_rank(n)
    for k in range(n + 1):
        if _a_k(xp, pad, m, k) > b:
            return k
    raise AssertionError("A^(n) = U - L > bound, unreachable")  # pragma: no cover


def ptr_threshold(epsilon_test: float, delta: float) -> float:
    """``ln(1/δ)/ε_test + 1``: a noisy distance at or below this returns ⊥."""
    return math.log(1.0 / check_delta(delta)) / check_epsilon(epsilon_test, "epsilon_test") + 1.0


def ptr_median(x, epsilon: float, delta: float, bound: float, lower: float, upper: float, *,
               clip: bool = True) -> BaselineRelease:
    """Propose-test-release of the median ``x_(⌈n/2⌉)`` with proposed bound ``bound``: **(ε, δ)-DP**.

    Returns a :class:`BaselineRelease` whose ``value`` is ``None`` for ⊥. Half of ε tests, half
    answers (module docstring). ``info`` holds the exact distance and the threshold (both private:
    for inspection only, never to be published). Data must lie in ``[lower, upper]``; the answer
    is clamped to it unless ``clip=False``.
    """
    eps = check_epsilon(epsilon)
    d = check_delta(delta)
    lo, hi = check_bounds(lower, upper)
    arr = check_data(x, lo, hi)
    b = _check_bound(bound)
    eps_test = eps_answer = eps / 2.0
    threshold = ptr_threshold(eps_test, d)
    k = ptr_distance_to_unsafe(arr, b, lo, hi)
    info = {"distance": k, "threshold": threshold, "bound": b}
    if math.isfinite(k):
        noisy = float(noise.laplace(np.array([float(k)]), 1.0 / eps_test)[0])
        if noisy <= threshold:
            return BaselineRelease(value=None, epsilon=eps, delta=d, notion=EPS_DELTA_DP, method="ptr_median",
                                   scale=0.0, info=info)
    # k = inf: every database is safe and the test always passes (no noise needed for it)
    scale = b / eps_answer
    value = float(noise.laplace(np.array([lower_median(arr)]), scale)[0])
    if clip:
        value = clamp(value, lo, hi)
    return BaselineRelease(value=value, epsilon=eps, delta=d, notion=EPS_DELTA_DP, method="ptr_median",
                           scale=scale, info=info)


def propose_bound(oracle, n: int, epsilon: float, delta: float, lower: float, upper: float, *,
                  rng: np.random.Generator, simulations: int = 20, coverage: float = 0.9,
                  pass_probability: float = 0.95) -> float:
    """A data-independent proposal ``b`` for :func:`ptr_median`, from a public model of the data.

    With ``ε_test = ε/2`` and threshold T, a database at distance ``k* = ⌈T + ln(1/(2(1 − p)))/ε_test⌉``
    from UNSAFE passes the test with probability ≥ p (= ``pass_probability``). ``b`` is the
    ``coverage`` quantile of ``A^{(k*)}(y)`` over ``simulations`` databases y of size n drawn from
    ``oracle`` (clipped to the range), so for data like the model PTR answers with probability
    about ``coverage · p``. Uses only the public model and ``rng``; never the private data.
    """
    eps = check_epsilon(epsilon)
    d = check_delta(delta)
    lo, hi = check_bounds(lower, upper)
    n = check_int(n, "n", min_value=1)
    sims = check_int(simulations, "simulations", min_value=1)
    eps_test = eps / 2.0
    k_star = math.ceil(ptr_threshold(eps_test, d) + math.log(1.0 / (2.0 * (1.0 - pass_probability))) / eps_test)
    if k_star >= n:
        return hi - lo
    vals = []
    for _ in range(sims):
        y = np.clip(np.asarray(oracle.sample(rng, n), dtype=np.float64).reshape(-1), lo, hi)
        vals.append(_a_k(_padded_sorted(y, lo, hi, n + 1), n + 1, median_rank(n), k_star))
    return float(min(np.quantile(vals, coverage), hi - lo))
