"""Shared pieces of the baselines: argument checks, the median convention, the release record.

The median convention. Every median baseline works with the *order statistic* of rank
``m = ⌈n/2⌉`` (1-based), i.e. ``x_((n+1)//2)`` of the sorted data: the median for odd ``n`` and the
*lower* median for even ``n``. That is the function Nissim, Raskhodnikova & Smith (2007, §3.1)
analyse, and every closed form here (local, smooth and inverse sensitivity, PTR's distance to
an unsafe database) is exact for it. ``numpy.median`` averages the two middle values for even ``n``;
the two differ by half of one gap between order statistics.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from raydp import validation
from raydp.errors import InvalidArgumentError, MechanismError
from raydp.mechanisms.base import check_epsilon  # noqa: F401 - the baselines check ε as the mechanisms do
from raydp.validation import check_int as _check_int
from raydp.validation import check_real

__all__ = ["BaselineRelease", "median_rank", "lower_median", "LowerMedian", "median_target"]

EPS_DP = "ε-DP"
EPS_DELTA_DP = "(ε, δ)-DP"


@dataclass(frozen=True)
class BaselineRelease:
    """One private answer of a baseline and the privacy it was released under.

    ``value`` is the released number, or ``None`` for PTR's ⊥ (the test refused to answer).
    ``notion`` is ``"ε-DP"`` or ``"(ε, δ)-DP"`` — every baseline here is a *worst-case* DP mechanism
    (no γ). ``scale`` is the scale of the noise that was added (0 for selection mechanisms, whose
    randomness is the selection). ``info`` holds method-specific numbers (smooth sensitivity, PTR's
    distance, the Winsorization interval, ...).
    """

    value: float | None
    epsilon: float
    delta: float
    notion: str
    method: str
    scale: float = 0.0
    info: dict = field(default_factory=dict, repr=False)

    @property
    def refused(self) -> bool:
        """True when the mechanism returned ⊥ (only PTR does)."""
        return self.value is None


# check_epsilon(epsilon, what="epsilon") is the mechanisms' own check (raydp.mechanisms.base).


def check_delta(delta, *, allow_zero: bool = False) -> float:
    """δ in (0, 1) as the mechanisms require it, or [0, 1) when ``allow_zero`` (pure DP)."""
    return validation.check_delta(delta, allow_zero=allow_zero, error=MechanismError)


def check_beta(beta) -> float:
    """β (the smoothness parameter) as a float: a real number (not a bool), finite and > 0."""
    return check_real(beta, "beta (the smoothness parameter)", min_value=0, include_min=False,
                      expected="a finite real number > 0")


def check_bounds(lower, upper) -> tuple[float, float]:
    """The public range ``[lower, upper]``: two finite real numbers (not bools) with lower < upper."""
    lo, hi = check_real(lower, "lower"), check_real(upper, "upper")
    if not lo < hi:
        raise InvalidArgumentError(f"the public range needs lower < upper, got [{lo}, {hi}]")
    return lo, hi


def check_data(x, lower: float | None = None, upper: float | None = None, *, min_size: int = 1) -> np.ndarray:
    """``x`` as a 1-D float64 array of finite values, inside ``[lower, upper]`` when bounds are given.

    Data outside the public range are refused rather than silently clipped: clipping is a choice
    the caller must make (and state), e.g. ``np.clip(x, lower, upper)``.
    """
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"data must be a 1-D array of real numbers, got {type(x).__name__}") from None
    if arr.ndim != 1:
        raise InvalidArgumentError(f"data must be a 1-D array of scalar records, got shape {arr.shape}")
    if arr.size < min_size:
        raise InvalidArgumentError(f"data must have at least {min_size} record(s), got {arr.size}")
    if not np.all(np.isfinite(arr)):
        raise InvalidArgumentError("data contain NaN or inf; records must be finite")
    if lower is not None and upper is not None:
        lo, hi = float(np.min(arr)), float(np.max(arr))
        if lo < lower or hi > upper:
            raise InvalidArgumentError(
                f"data must lie in the public range [{lower:g}, {upper:g}] but span [{lo:g}, {hi:g}]; "
                "clip them first (np.clip(x, lower, upper)) and say so"
            )
    return arr


def check_grid(grid, lower: float | None = None, upper: float | None = None) -> np.ndarray:
    """A public output grid: 1-D, finite, strictly increasing, at least 2 points."""
    try:
        g = np.asarray(grid, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"grid must be a 1-D array of real numbers, got {type(grid).__name__}") from None
    if g.ndim != 1 or g.size < 2:
        raise InvalidArgumentError(f"grid must be a 1-D array of at least 2 points, got shape {g.shape}")
    if not np.all(np.isfinite(g)):
        raise InvalidArgumentError("grid must be finite")
    if not np.all(np.diff(g) > 0):
        raise InvalidArgumentError("grid must be strictly increasing")
    if lower is not None and (g[0] < lower or g[-1] > upper):
        raise InvalidArgumentError(f"grid spans [{g[0]:g}, {g[-1]:g}], outside the public range [{lower:g}, {upper:g}]")
    return g


def default_grid(lower: float, upper: float, size: int) -> np.ndarray:
    return np.linspace(lower, upper, _check_int(size, "grid_size", min_value=2))


def clamp(value: float, lower: float, upper: float) -> float:
    return float(min(max(value, lower), upper))


# ----------------------------------------------------------------------------- the median


def median_rank(n: int) -> int:
    """The 1-based rank ``m = ⌈n/2⌉ = (n+1)//2`` of the median order statistic.

    >>> median_rank(5), median_rank(6)
    (3, 3)
    """
    return (int(n) + 1) // 2


def lower_median(x) -> float:
    """``x_(m)`` with ``m = ⌈n/2⌉``: the median for odd n, the lower median for even n.

    >>> lower_median([4.0, 1.0, 3.0, 2.0])
    2.0
    """
    arr = check_data(x)
    m = median_rank(arr.size)
    return float(np.partition(arr, m - 1)[m - 1])


class LowerMedian:
    """Target (for :func:`raydp.estimate_sensitivity`): the order statistic ``x_(⌈n/2⌉)`` of scalar records.

    The same function every median baseline here releases, so the sampled-Δ̂ column of the
    comparison is calibrated for exactly that statistic.
    """

    def __call__(self, database) -> np.ndarray:
        db = np.asarray(database, dtype=np.float64).reshape(-1)
        m = median_rank(db.size)
        return np.asarray(np.partition(db, m - 1)[m - 1])

    def batch(self, databases) -> np.ndarray:
        dbs = np.asarray(databases, dtype=np.float64)
        dbs = dbs.reshape(dbs.shape[0], -1)
        m = median_rank(dbs.shape[1])
        return np.partition(dbs, m - 1, axis=1)[:, m - 1]

    def identity(self) -> dict:
        return {"name": "baselines.lower_median", "params": {}}

    def __repr__(self) -> str:
        return "median_target()"


def median_target() -> LowerMedian:
    """The sampler target matching the baselines' median convention (see module docstring)."""
    return LowerMedian()
