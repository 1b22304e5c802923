"""Sampling plans: how many pairs (m), which order statistic (k), what confidence (γ).

Pure maths, no Ray. Formulas follow Rubinstein & Aldà, "Pain-Free Random Differential Privacy with
Sensitivity Sampling" (ICML 2017), Theorem 15 and Table 1; the documentation's method page states them
with the reference values the tests check (``make_plan(gamma=0.05)`` gives m = k = 1305).

Theorem 15: for γ ∈ (0, 1) and ρ ∈ (0, min{γ, 1/2}), if

    m ≥ log(1/ρ) / (2 (γ − ρ)²)   and   k ≥ m · (1 − γ + ρ + sqrt(log(1/ρ) / (2m)))

with k ≤ m, then Sample-Then-Respond is (ε, δ, γ)-random DP.

The function that builds a plan is :func:`make_plan`, also ``raydp.make_plan``: ``raydp.plan`` is this
module (``import raydp.plan`` and ``from raydp.plan import plan_for`` reach it).

>>> p = make_plan(gamma=0.05)
>>> (p.m, p.k, p.mode)
(1305, 1305, 'm')
>>> round(make_plan(m=1000).gamma, 7)
0.0564677
"""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass

from decimal import ROUND_CEILING, Decimal, localcontext

from scipy.special import lambertw

from .errors import PlanError
from .validation import check_gamma, check_int, fail

__all__ = ["Plan", "make_plan", "plan_for", "format_up", "gamma_lo", "rho_for_gamma", "rho_for_m", "min_gamma",
           "MIN_M", "MIN_GAMMA", "MAX_M", "SIZES", "MAX_SIZED_M", "MODES"]

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

    def satisfies_theorem15(self) -> bool:
        """Check both inequalities of Theorem 15 for this (m, k, γ, ρ), exactly (60-digit decimals, no tolerance)."""
        if not (0.0 < self.rho < min(self.gamma, 0.5)) or not (1 <= self.k <= self.m):
            return False
        return self.m >= _m_bound(self.gamma, self.rho) and self.k >= _k_bound(self.m, self.gamma, self.rho)


# ---- exact bounds --------------------------------------------------------------------------------
# Theorem 15's bounds hold for the float values of γ and ρ a plan carries; they involve a log and a
# square root, so they are evaluated in 60-digit decimal arithmetic and pushed outward by a relative
# 1e-40 (far above that arithmetic's error, far below one pair at m ≤ 2**53). A plan's m and k are
# then never below the exact bounds, and a γ it reports is never below the exact γ it certifies.

_PREC = 60
_OUT = Decimal("1e-40")


def _ln_inv(rho: float) -> Decimal:
    return (Decimal(1) / Decimal(rho)).ln()


def _m_bound(gamma: float, rho: float) -> Decimal:
    """log(1/ρ) / (2 (γ − ρ)²), pushed up."""
    with localcontext() as ctx:
        ctx.prec = _PREC
        d = Decimal(gamma) - Decimal(rho)
        return _ln_inv(rho) / (2 * d * d) * (1 + _OUT)


def _gamma_lo_exact(m: int, rho: float) -> Decimal:
    """ρ + sqrt(log(1/ρ) / (2m)), pushed up."""
    with localcontext() as ctx:
        ctx.prec = _PREC
        return (Decimal(rho) + (_ln_inv(rho) / (2 * Decimal(m))).sqrt()) * (1 + _OUT)


def _k_bound(m: int, gamma: float, rho: float) -> Decimal:
    """m (1 − γ + γ_lo(m, ρ)), pushed up."""
    with localcontext() as ctx:
        ctx.prec = _PREC
        return Decimal(m) * (1 - Decimal(gamma) + _gamma_lo_exact(m, rho)) * (1 + _OUT)


def _ceil_dec(x: Decimal) -> int:
    return int(x.to_integral_value(rounding=ROUND_CEILING))


def _float_up(x: Decimal) -> float:
    """The smallest float >= x."""
    f = float(x)
    return f if Decimal(f) >= x else math.nextafter(f, math.inf)


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
    return check_gamma(gamma, error=PlanError)


def _check_count(name: str, value) -> int:
    # A whole float (1e6, as a command line or a config file gives it) is the integer it equals.
    given = value
    if (not isinstance(value, (bool, numbers.Integral)) and isinstance(value, numbers.Real)
            and math.isfinite(value) and float(value).is_integer()):
        value = int(value)
    try:
        return check_int(value, name, min_value=1, max_value=MAX_M, error=PlanError)
    except PlanError as exc:  # the message shows what was given; a float is a wrong value here, not a wrong type
        wrong_value = isinstance(given, numbers.Real) and not isinstance(given, bool)
        raise fail(PlanError if wrong_value else type(exc), name, "a positive integer at most 2**53", given) from None


def _m_for(gamma: float, rho: float) -> int:
    # the float formula (every plan made so far), raised to the exact bound where rounding put it below
    return max(_ceil(math.log(1.0 / rho) / (2.0 * (gamma - rho) ** 2)), _ceil_dec(_m_bound(gamma, rho)))


def _k_for(m: int, gamma: float, rho: float) -> int:
    # callers ensure γ ≥ γ_lo(m, ρ) exactly, so the bound is ≤ m; the float formula is kept where it is
    # valid (every plan made so far) and raised to the exact bound where rounding put it below
    k = max(_ceil(m * (1.0 - gamma + gamma_lo(m, rho))), _ceil_dec(_k_bound(m, gamma, rho)))
    return max(1, min(k, m))


def _gamma_claim(historic: float, exact: Decimal) -> float:
    """A γ to report: the historic float value where it is not below the exact one, else the exact one rounded up."""
    return historic if Decimal(historic) >= exact else _float_up(exact)


def _manual_gamma(m: int, k: int, rho: float) -> float:
    """γ = 1 − k/m + γ_lo(m, ρ), never below its exact value."""
    with localcontext() as ctx:
        ctx.prec = _PREC
        exact = 1 - Decimal(k) / Decimal(m) + _gamma_lo_exact(m, rho)
    # 1 − k/m loses the low digits of γ when γ is near 1: round the claim up, never down
    return _gamma_claim(1.0 - k / m + gamma_lo(m, rho) + 4 * math.ulp(1.0), exact)


def _smallest_k(m: int, rho: float) -> int:
    """The smallest k whose manual plan certifies some γ < 1 (callers ensure one exists)."""
    with localcontext() as ctx:
        ctx.prec = _PREC
        k = max(1, int(Decimal(m) * _gamma_lo_exact(m, rho)))
    while k > 1 and _manual_gamma(m, k - 1, rho) < 1.0:
        k -= 1
    while _manual_gamma(m, k, rho) >= 1.0:
        k += 1
    return k


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


def make_plan(*, gamma=None, m=None, k=None) -> Plan:
    """Build a Theorem-15 plan from any admissible combination of γ, m and k.

    - ``gamma`` only: minimise m (Table 1 row 1), ``mode="m"``.
    - ``m`` only: minimise γ, k = m (row 2), ``mode="gamma"``.
    - ``m`` and ``gamma``: minimise k (row 3), ``mode="k"``.
    - ``m`` and ``k``: report γ = 1 − k/m + γ_lo(m, ρ*), ``mode="manual"``.

    Raises :class:`raydp.errors.PlanError` (a ``ValueError``) with what was wrong and what is allowed.
    m and k are integers in [1, 2**53]; γ alone must be at least ``MIN_GAMMA`` (3.49e-8, which needs
    about 2**53 pairs). A γ the plan computes (modes ``"gamma"``, ``"manual"``) is rounded up, never down.

    >>> make_plan(m=2000, gamma=0.05).k
    1983
    """
    given = tuple(name for name, v in (("gamma", gamma), ("m", m), ("k", k)) if v is not None)
    if given == ("gamma",):
        g = _check_gamma(gamma)
        if g < MIN_GAMMA:
            raise PlanError(f"gamma={g!r} needs more than 2**53 pairs; use gamma >= {MIN_GAMMA:g}")
        rho = rho_for_gamma(g)
        mm = _m_for(g, rho)
        return Plan(m=mm, k=_k_for(mm, g, rho), gamma=g, rho=rho, mode="m")
    if given == ("m",):
        mm = _check_count("m", m)
        rho = rho_for_m(mm)
        # γ is a claim: round it up, never down
        g = _gamma_claim(gamma_lo(mm, rho) * (1.0 + 4 * math.ulp(1.0)), _gamma_lo_exact(mm, rho))
        if g >= 1.0:
            raise PlanError(f"m={mm} is too small to certify any gamma < 1; use m >= {MIN_M}")
        return Plan(m=mm, k=mm, gamma=g, rho=rho, mode="gamma")
    if given == ("gamma", "m"):
        g = _check_gamma(gamma)
        mm = _check_count("m", m)
        rho = rho_for_m(mm)
        lo = _gamma_lo_exact(mm, rho)
        if Decimal(g) < lo:
            raise PlanError(
                f"gamma={g} is below the smallest gamma that m={mm} pairs can certify; "
                f"use gamma >= {format_up(_float_up(lo))} or a larger m"
            )
        return Plan(m=mm, k=_k_for(mm, g, rho), gamma=g, rho=rho, mode="k")
    if given == ("m", "k"):
        mm = _check_count("m", m)
        kk = _check_count("k", k)
        if kk > mm:
            raise PlanError(f"k must be at most m, got k={kk} > m={mm}")
        rho = rho_for_m(mm)
        g = _manual_gamma(mm, kk, rho)
        if g >= 1.0:
            raise PlanError(
                f"m={mm}, k={kk} certifies no gamma < 1 (it would be {g:.4g}); "
                + (f"use k >= {_smallest_k(mm, rho)}" if min_gamma(mm) < 1 else f"use m >= {MIN_M}")
            )
        return Plan(m=mm, k=kk, gamma=g, rho=rho, mode="manual")
    if given == ("gamma", "m", "k"):
        raise PlanError("give at most two of gamma, m, k: gamma | m | m and gamma | m and k")
    if given == ("gamma", "k") or given == ("k",):
        raise PlanError("k needs m: give gamma | m | m and gamma | m and k")
    raise PlanError("give gamma, or m, or m and gamma, or m and k")


#: The same function under this module's own name (``from raydp.plan import plan``).
plan = make_plan


# The sizes a budget may choose beyond the fewest pairs: round numbers, so that one target on similar
# machines gets the same plan (and so the same Δ̂ for a seed) although the timing differs a little.
SIZES = (2_000, 5_000, 10_000, 20_000, 50_000)
#: Past this many pairs Δ̂ = G_(k) is within a few percent of the (1 − γ)-quantile of G it estimates
#: (k/m − (1 − γ) falls like 1/√m): more pairs buy little and a budget never asks for more.
MAX_SIZED_M = SIZES[-1]


def plan_for(gamma: float, affordable: int) -> Plan:
    """The plan for γ with as many pairs as ``affordable`` allows: the fewest pairs (:func:`make_plan` of γ,
    ``k = m``) when no more fit, else the largest of :data:`SIZES` that fits and k from Theorem 15 for
    that m (Table 1 row 3) — a lower order statistic of more pairs, so a smaller and steadier Δ̂ under
    the same γ. ``affordable`` must come from what is known *before* any G is drawn (a probe's
    timing): choosing m on the G values seen would void the guarantee.

    >>> plan_for(0.05, 100).m, plan_for(0.05, 6000).m, plan_for(0.05, 6000).k
    (1305, 5000, 4885)
    """
    base = make_plan(gamma=gamma)
    fits = [size for size in SIZES if base.m < size <= affordable]
    return make_plan(gamma=base.gamma, m=max(fits)) if fits else base


def format_up(x: float, digits: int = 6) -> str:
    """``x`` with ``digits`` significant digits, rounded toward +∞: a printed ε, δ or γ is never smaller
    than the one it stands for (``f"{x:g}"`` rounds to nearest, which can understate it).

    >>> format_up(0.05646770780814573), format_up(0.5), format_up(0.0)
    ('0.0564678', '0.5', '0')
    """
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    text = f"{x:.{digits}g}"
    if float(text) < x:
        exponent = math.floor(math.log10(abs(x)))
        step = 10.0 ** (exponent - digits + 1)
        text = f"{float(text) + step:.{digits}g}"
        while float(text) < x:  # float steps can land a hair short
            text = f"{math.nextafter(float(text), math.inf):.{digits + 1}g}"
    return text
