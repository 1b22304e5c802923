"""Selection mechanisms on a public grid: the exponential mechanism for quantiles and the inverse
sensitivity mechanism for the median. Both are **ε-DP** and both are sampled in log space.

Exponential mechanism (McSherry & Talwar, FOCS 2007, "Mechanism design via differential privacy"): over responses t in a
finite set, ``P(t) ∝ exp(ε·u(x, t) / (2Δu))``. For the q-quantile on a grid (as in Smith 2011 and
Gillenwater, Joseph & Kulesza 2021, here restricted to grid points)::

    u(x, t) = −| #{i : x_i ≤ t} − q·n |,     Δu = 1

(replacing one record changes the count by at most one).

Inverse sensitivity mechanism (Asi & Duchi, NeurIPS 2020, "Instance-optimality in differential
privacy via approximate inverse sensitivity mechanisms"):

    P(t) ∝ exp(−ε·len_f(x; t) / 2),   len_f(x; t) = min{ d(x, x′) : f(x′) = t }

``len`` changes by at most one between neighbours, so this is the exponential mechanism with
utility −len and Δu = 1. For ``f(x) = x_(m)``, ``m = ⌈n/2⌉`` (see :mod:`._common`), with
``a = #{x_i < t}`` and ``e = #{x_i = t}``: ``f(x′) = t`` needs at most m − 1 records below t, at
least m at or below t, and t itself among the records, so

    len(x; t) = max(a − m + 1,  m − a − e,  0)

(move the surplus records below t — or the missing ones from above — onto t; the tests check this
against a brute-force search).

Log space: the unnormalised log-weights ``ε·u/(2Δu)`` are never exponentiated. A response is drawn
by report-noisy-max with Gumbel noise (``raydp.noise.noisy_max_index``, OpenDP
``make_noisy_max``), which picks index i with probability ``exp(s_i/scale)/Σ_j exp(s_j/scale)``.
The ``*_probabilities`` helpers normalise with a log-sum-exp, for checks and plots.
"""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp

from raydp import noise
from raydp.validation import check_real

from ._common import (
    EPS_DP,
    BaselineRelease,
    check_bounds,
    check_data,
    check_epsilon,
    check_grid,
    default_grid,
    median_rank,
)

__all__ = [
    "quantile_utility",
    "exponential_quantile_probabilities",
    "exponential_quantile",
    "inverse_sensitivity_lengths",
    "inverse_sensitivity_probabilities",
    "inverse_sensitivity_median",
]

DEFAULT_GRID_SIZE = 4001


def _check_q(q) -> float:
    return check_real(q, "q", min_value=0.0, max_value=1.0, expected="a real number in [0, 1]")


def quantile_utility(x, q: float, grid) -> np.ndarray:
    """``u(x, t) = −|#{x_i ≤ t} − q·n|`` for every grid point t (sensitivity 1)."""
    arr = np.sort(check_data(x))
    g = check_grid(grid)
    qq = _check_q(q)
    counts = np.searchsorted(arr, g, side="right")
    return -np.abs(counts - qq * arr.size)


def _probabilities(log_weights: np.ndarray) -> np.ndarray:
    return np.exp(log_weights - logsumexp(log_weights))


def exponential_quantile_probabilities(x, q: float, epsilon: float, grid) -> np.ndarray:
    """Selection probabilities ``exp(ε u/2) / Σ exp(ε u/2)`` over ``grid`` (log-sum-exp normalised)."""
    eps = check_epsilon(epsilon)
    return _probabilities(eps * quantile_utility(x, q, grid) / 2.0)


def _resolve_grid(grid, lower, upper, grid_size):
    lo, hi = check_bounds(lower, upper)
    g = default_grid(lo, hi, grid_size) if grid is None else check_grid(grid, lo, hi)
    return lo, hi, g


def exponential_quantile(x, q: float, epsilon: float, lower: float, upper: float, *, grid=None,
                         grid_size: int = DEFAULT_GRID_SIZE) -> BaselineRelease:
    """The q-quantile by the exponential mechanism over a public grid in ``[lower, upper]``: **ε-DP**.

    ``grid`` defaults to ``grid_size`` equally spaced points from lower to upper. Records may lie
    anywhere (the utility only counts them), but the answer is always a grid point.
    """
    eps = check_epsilon(epsilon)
    _, _, g = _resolve_grid(grid, lower, upper, grid_size)
    u = quantile_utility(x, q, g)
    idx = noise.noisy_max_index(u, 2.0 / eps)  # P ∝ exp(u / (2/ε)) = exp(ε u / 2)
    return BaselineRelease(value=float(g[idx]), epsilon=eps, delta=0.0, notion=EPS_DP,
                           method="exponential_quantile", info={"q": _check_q(q), "grid_points": g.size})


def inverse_sensitivity_lengths(x, grid) -> np.ndarray:
    """``len(x; t)``: the fewest records to change so that ``x_(⌈n/2⌉) = t``, for every grid point t."""
    arr = np.sort(check_data(x))
    g = check_grid(grid)
    m = median_rank(arr.size)
    below = np.searchsorted(arr, g, side="left")          # a = #{x < t}
    at_or_below = np.searchsorted(arr, g, side="right")   # a + e
    return np.maximum.reduce([below - m + 1, m - at_or_below, np.zeros_like(below)])


def inverse_sensitivity_probabilities(x, epsilon: float, grid) -> np.ndarray:
    """Selection probabilities ``exp(−ε len/2) / Σ exp(−ε len/2)`` over ``grid``."""
    eps = check_epsilon(epsilon)
    return _probabilities(-eps * inverse_sensitivity_lengths(x, grid) / 2.0)


def inverse_sensitivity_median(x, epsilon: float, lower: float, upper: float, *, grid=None,
                               grid_size: int = DEFAULT_GRID_SIZE) -> BaselineRelease:
    """The median ``x_(⌈n/2⌉)`` by the inverse sensitivity mechanism on a public grid: **ε-DP**.

    Asi & Duchi (2020); ``P(t) ∝ exp(−ε·len(x; t)/2)`` sampled with Gumbel-max in log space.
    """
    eps = check_epsilon(epsilon)
    _, _, g = _resolve_grid(grid, lower, upper, grid_size)
    lens = inverse_sensitivity_lengths(x, g)
    idx = noise.noisy_max_index(-lens.astype(np.float64), 2.0 / eps)
    return BaselineRelease(value=float(g[idx]), epsilon=eps, delta=0.0, notion=EPS_DP,
                           method="inverse_sensitivity_median", info={"grid_points": g.size})
