"""Sampling plans: how many pairs (m), which order statistic (k), what confidence (γ).

Pure maths, no Ray. Formulas follow Rubinstein & Aldà (ICML 2017), Theorem 15 and Table 1, as
restated in ``shared/docs/METHOD.md`` §4–5 (the seed text's formulas are garbled; these were
checked against the paper's Table 1 and reproduce METHOD.md's reference values).

Theorem 15: for γ ∈ (0, 1) and ρ ∈ (0, min{γ, 1/2}), if

    m ≥ log(1/ρ) / (2 (γ − ρ)²)   and   k ≥ m · (1 − γ + ρ + sqrt(log(1/ρ) / (2m)))

with k ≤ m, then Sample-Then-Respond is (ε, δ, γ)-random DP.

>>> p = plan(gamma=0.05)
>>> (p.m, p.k, p.mode)
(1305, 1305, 'm')
>>> round(plan(m=1000).gamma, 7)
0.0564677
"""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass

from scipy.special import lambertw

from .errors import PlanError

MODES = ("m", "gamma", "k", "manual")

# Largest m (and k) a plan allows: beyond 2**53 a float no longer holds every integer, so
# ⌈m · (1 − γ + γ_lo)⌉ cannot be computed to the pair, and lambertw(−1/(4m)) underflows near 1e308.
MAX_M = 2**53



@dataclass(frozen=True)
class Plan:
    """A sampling plan that satisfies Theorem 15.

    ``mode`` says what was optimised: ``"m"`` (fewest pairs for γ), ``"gamma"`` (best γ for m),
    ``"k"`` (smallest order statistic for m and γ), or ``"manual"`` (m and k given; γ reported).
    """

    m: int
    k: int
    gamma: float
    rho: float
    mode: str

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Plan":
        return cls(m=int(d["m"]), k=int(d["k"]), gamma=float(d["gamma"]), rho=float(d["rho"]),
                   mode=str(d["mode"]))

    @property
    def keep(self) -> int:
        """How many of the largest G values determine Δ̂ = G_(k): m − k + 1."""
        return self.m - self.k + 1

    def satisfies_theorem15(self, tol: float = 1e-12) -> bool:
        """Check both inequalities of Theorem 15 for this (m, k, γ, ρ)."""
        if not (0.0 < self.rho < min(self.gamma, 0.5)) or not (1 <= self.k <= self.m):
            return False
        m_ok = self.m >= math.log(1 / self.rho) / (2 * (self.gamma - self.rho) ** 2) * (1 - tol)
        k_ok = self.k >= self.m * (1 - self.gamma + gamma_lo(self.m, self.rho)) * (1 - tol)
        return m_ok and k_ok


def gamma_lo(m: int, rho: float) -> float:
    """γ_lo(m, ρ) = ρ + sqrt(log(1/ρ) / (2m)): the smallest γ that m pairs can certify at this ρ."""
    return rho + math.sqrt(math.log(1.0 / rho) / (2.0 * m))


def rho_for_gamma(gamma: float) -> float:
    """Table 1 row 1: ρ = exp(W₋₁(−γ / (2√e)) + 1/2), the ρ that minimises m for γ."""
    w = lambertw(-gamma / (2.0 * math.sqrt(math.e)), k=-1).real
    return math.exp(w + 0.5)


def rho_for_m(m: int) -> float:
    """Table 1 rows 2–3: ρ = exp(W₋₁(−1/(4m)) / 2), the ρ that minimises γ_lo(m, ·)."""
    w = lambertw(-1.0 / (4.0 * m), k=-1).real
    return math.exp(w / 2.0)


def min_gamma(m: int) -> float:
    """The smallest γ that m pairs can certify (Table 1 row 2)."""
    return gamma_lo(m, rho_for_m(m))


def _ceil(x: float) -> int:
    # Plain ceiling, never rounded down "for float noise": m and k are lower bounds of
    # Theorem 15, and rounding them down would void the guarantee (hypothesis found a case at
    # m ≈ 6.7e8 where a relative slack did exactly that).
    return math.ceil(x)


def _check_gamma(gamma) -> float:
    if isinstance(gamma, bool) or not isinstance(gamma, numbers.Real):
        raise PlanError(f"gamma must be a number in (0, 1), got {gamma!r}")
    g = float(gamma)
    if not (0.0 < g < 1.0):  # also rejects NaN
        raise PlanError(f"gamma must be in the open interval (0, 1), got {gamma!r}")
    return g


def _check_count(name: str, value) -> int:
    given = value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if not isinstance(value, bool) and isinstance(value, numbers.Real) and float(value).is_integer():
            value = int(value)
        else:
            raise PlanError(f"{name} must be a positive integer, got {value!r}")
    if value < 1:
        raise PlanError(f"{name} must be a positive integer, got {value!r}")
    if value > MAX_M:
        raise PlanError(f"{name} must be a positive integer at most 2**53 = {MAX_M}, got {given!r}")
    return int(value)


def _k_for(m: int, gamma: float, rho: float) -> int:
    # callers ensure γ ≥ γ_lo(m, ρ), so the bound is ≤ m up to rounding; clamp that rounding only
    k = _ceil(m * (1.0 - gamma + gamma_lo(m, rho)))
    return max(1, min(k, m))


def _min_m_with_some_gamma() -> int:
    # γ_lo(m, ρ*(m)) decreases in m; find the first m where it drops below 1.
    m = 1
    while min_gamma(m) >= 1.0:
        m += 1
    return m


MIN_M = _min_m_with_some_gamma()


def _round_up(x: float, digits: int = 3) -> float:
    scale = 10.0 ** (digits - 1 - math.floor(math.log10(x)))
    return math.ceil(x * scale) / scale


# The smallest γ mode "m" accepts: smaller ones need more than MAX_M pairs (and below ~1e-300 the
# Lambert W of −γ/(2√e) underflows).
MIN_GAMMA = _round_up(min_gamma(MAX_M))


def plan(*, gamma=None, m=None, k=None) -> Plan:
    """Build a Theorem-15 plan from any admissible combination of γ, m and k.

    - ``gamma`` only: minimise m (Table 1 row 1), ``mode="m"``.
    - ``m`` only: minimise γ, k = m (row 2), ``mode="gamma"``.
    - ``m`` and ``gamma``: minimise k (row 3), ``mode="k"``.
    - ``m`` and ``k``: report γ = 1 − k/m + γ_lo(m, ρ*), ``mode="manual"``.

    Raises :class:`raydp.errors.PlanError` (a ``ValueError``) with what was wrong and what is allowed.
    m and k are integers in [1, 2**53]; γ alone must be at least ``MIN_GAMMA`` (3.49e-8, which needs
    about 2**53 pairs). A γ the plan computes (modes ``"gamma"``, ``"manual"``) is rounded up, never down.

    >>> plan(m=2000, gamma=0.05).k
    1983
    """
    given = tuple(name for name, v in (("gamma", gamma), ("m", m), ("k", k)) if v is not None)
    if given == ("gamma",):
        g = _check_gamma(gamma)
        if g < MIN_GAMMA:
            raise PlanError(f"gamma={g!r} needs more than 2**53 pairs; use gamma >= {MIN_GAMMA:g}")
        rho = rho_for_gamma(g)
        mm = _ceil(math.log(1.0 / rho) / (2.0 * (g - rho) ** 2))
        return Plan(m=mm, k=_k_for(mm, g, rho), gamma=g, rho=rho, mode="m")
    if given == ("m",):
        mm = _check_count("m", m)
        rho = rho_for_m(mm)
        g = gamma_lo(mm, rho) * (1.0 + 4 * math.ulp(1.0))  # γ is a claim: round it up, never down
        if g >= 1.0:
            raise PlanError(f"m={mm} is too small to certify any gamma < 1; use m >= {MIN_M}")
        return Plan(m=mm, k=mm, gamma=g, rho=rho, mode="gamma")
    if given == ("gamma", "m"):
        g = _check_gamma(gamma)
        mm = _check_count("m", m)
        rho = rho_for_m(mm)
        lo = gamma_lo(mm, rho)
        if g < lo:
            raise PlanError(
                f"gamma={g} is below the smallest gamma that m={mm} pairs can certify; "
                f"use gamma >= {lo:.7g} or a larger m"
            )
        return Plan(m=mm, k=_k_for(mm, g, rho), gamma=g, rho=rho, mode="k")
    if given == ("m", "k"):
        mm = _check_count("m", m)
        kk = _check_count("k", k)
        if kk > mm:
            raise PlanError(f"k must be at most m, got k={kk} > m={mm}")
        rho = rho_for_m(mm)
        # 1 − k/m loses the low digits of γ when γ is near 1: round the claim up, never down
        g = 1.0 - kk / mm + gamma_lo(mm, rho) + 4 * math.ulp(1.0)
        if g >= 1.0:
            smallest_k = _ceil(mm * (gamma_lo(mm, rho) + 1e-12)) + 1
            raise PlanError(
                f"m={mm}, k={kk} certifies no gamma < 1 (it would be {g:.4g}); "
                + (f"use k >= {min(smallest_k, mm)}" if min_gamma(mm) < 1 else f"use m >= {MIN_M}")
            )
        return Plan(m=mm, k=kk, gamma=g, rho=rho, mode="manual")
    if given == ("gamma", "m", "k"):
        raise PlanError("give at most two of gamma, m, k: gamma | m | m and gamma | m and k")
    if given == ("gamma", "k") or given == ("k",):
        raise PlanError("k needs m: give gamma | m | m and gamma | m and k")
    raise PlanError("give gamma, or m, or m and gamma, or m and k")
