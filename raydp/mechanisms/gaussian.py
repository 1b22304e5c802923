"""The Gaussian mechanism: ``f(D) + N(0, σ²)`` per coordinate, ℓ2 sensitivity, (ε, δ)-DP.

Two calibrations of σ: the classic one (Dwork & Roth, Thm A.1; ε < 1 only) and the analytic one of
Balle & Wang (2018), the smallest σ satisfying their exact condition (:func:`analytic_gaussian_sigma`).
"""

from __future__ import annotations

import math
import sys

import numpy as np
from scipy import optimize, special

from raydp import noise
from raydp.errors import MechanismError

from .base import (
    Mechanism,
    check_delta,
    check_epsilon,
    check_sensitivity,
    epsilon_at,
)

__all__ = ["Gaussian", "analytic_gaussian_sigma"]

# The analytic Gaussian calibration is verified to bracket and solve its root for every δ in
# [smallest normal float, 1) when ε lies in this range (outside it log Φ under/overflows).
_ANALYTIC_EPSILON_RANGE = (1e-100, 1e15)


def _bw_excess(r: float, epsilon: float) -> float:
    """Balle & Wang's ``Φ(1/(2r) − εr) − e^ε Φ(−1/(2r) − εr)`` with ``r = σ/Δ``, in log space."""
    u = 0.5 / r - epsilon * r
    v = -0.5 / r - epsilon * r
    lu = special.log_ndtr(u)
    lv = special.log_ndtr(v)
    # Φ(u) (1 − e^{ε + log Φ(v) − log Φ(u)}): no overflow of e^ε, no cancellation near the root.
    return float(np.exp(lu) * -np.expm1(epsilon + lv - lu))


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest σ for which N(0, σ²) noise is (ε, δ)-DP at ℓ2 sensitivity Δ (Balle & Wang 2018, Thm 8).

    Solves ``Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ) = δ`` by Brent's method on ``log(σ/Δ)``; the left
    side decreases in σ, so the root is the smallest valid σ. Valid for 1e-100 ≤ ε ≤ 1e15 (wider ε
    under- or overflows log Φ and raises :class:`MechanismError`).

    >>> round(analytic_gaussian_sigma(1.0, 1e-5), 3) < round(math.sqrt(2 * math.log(1.25e5)), 3)
    True
    """
    eps = check_epsilon(epsilon)
    dlt = check_delta(delta)
    sens = check_sensitivity(sensitivity)
    if sens == 0.0:
        return 0.0
    return _analytic_ratio(eps, dlt) * sens


def _analytic_ratio(eps: float, dlt: float) -> float:
    lo, hi = _ANALYTIC_EPSILON_RANGE
    if not lo <= eps <= hi or dlt < sys.float_info.min:
        raise MechanismError(
            f"the analytic Gaussian calibration needs {lo:g} <= epsilon <= {hi:g} and "
            f"delta >= {sys.float_info.min:.4g}, got epsilon={eps!r}, delta={dlt!r}"
        )

    def f(t: float) -> float:
        return _bw_excess(math.exp(t), eps) - dlt

    # start from the classic calibration and walk out until the root is bracketed
    t0 = math.log(math.sqrt(2.0 * math.log(1.25 / dlt)) / eps)
    lo, hi = t0 - 1.0, t0 + 1.0
    for _ in range(200):
        if f(lo) > 0:
            break
        lo -= 2.0
    for _ in range(200):
        if f(hi) <= 0:
            break
        hi += 2.0
    if not (f(lo) > 0 >= f(hi)):  # pragma: no cover - the excess goes 1 -> 0 monotonically
        raise MechanismError(f"could not calibrate the analytic Gaussian for epsilon={eps}, delta={dlt}")
    t = optimize.brentq(f, lo, hi, xtol=1e-15, rtol=4 * np.finfo(float).eps, maxiter=500)
    r = math.exp(t)
    # Brent returns a point within tolerance of the root; step up so the δ condition really holds.
    while _bw_excess(r, eps) > dlt:
        r *= 1.0 + 1e-14
    return r


class Gaussian(Mechanism):
    """Gaussian mechanism: ``f(D) + N(0, σ²)`` on every coordinate; ℓ2 sensitivity; (ε, δ)-DP.

    Parameters
    ----------
    epsilon : float
        Finite and > 0 (the classic calibration needs ε < 1).
    delta : float
        In (0, 1).
    calibration : {"analytic", "classic"}
        ``"analytic"`` (the default; Balle & Wang 2018): the smallest σ satisfying their exact
        condition; valid for every ε in [1e-100, 1e15] and never larger than classic.
        ``"classic"`` (Dwork & Roth, Thm A.1): ``σ = Δ·sqrt(2 log(1.25/δ))/ε``, valid only for ε < 1;
        kept by name for the paper's figures.

    >>> round(Gaussian(epsilon=0.5, delta=1e-5, calibration="classic").noise_scale(1.0), 4)
    9.6896
    >>> Gaussian(2.0, 1e-5).noise_scale(1.0) < 2.5          # analytic: every ε works
    True
    """

    name = "gaussian"
    norm = "l2"
    coordinatewise_noise = True
    CALIBRATIONS = ("classic", "analytic")

    def __init__(self, epsilon: float, delta: float, calibration: str = "analytic"):
        super().__init__(epsilon)
        self._delta = check_delta(delta)
        if calibration not in self.CALIBRATIONS:
            raise MechanismError(
                f"calibration must be one of {self.CALIBRATIONS}, got {calibration!r}"
            )
        self.calibration = calibration
        if calibration == "classic":
            if self._epsilon >= 1.0:
                raise MechanismError(
                    f"the classic Gaussian calibration is only valid for epsilon < 1, got "
                    f"epsilon={self._epsilon}; use calibration='analytic', which is valid for every epsilon > 0"
                )
            self._ratio = math.sqrt(2.0 * math.log(1.25 / self._delta)) / self._epsilon
        else:
            self._ratio = _analytic_ratio(self._epsilon, self._delta)
        if not 0.0 < self._ratio < math.inf:  # ε so small that σ/Δ overflows
            raise MechanismError(f"epsilon={self._epsilon!r} is too small: the Gaussian noise scale overflows")

    def noise_scale(self, sensitivity: float) -> float:
        """Standard deviation σ for ℓ2 sensitivity Δ (σ is proportional to Δ)."""
        return self._ratio * check_sensitivity(sensitivity)

    def variance(self, sensitivity: float) -> float:
        """Noise variance per coordinate, ``σ²``."""
        sigma = self.noise_scale(sensitivity)
        return sigma * sigma  # inf rather than OverflowError for huge σ

    def release(self, value, sensitivity: float) -> np.ndarray:
        """``value`` + N(0, σ²) noise, with ``value``'s shape."""
        return self._add_noise(value, sensitivity, noise.gaussian)

    def exact_privacy(self, value, value_prime, sensitivity: float, *, claim=None) -> dict:
        """Exact δ(ε) and ε(δ) on a pair: Balle & Wang's δ(ε) with ``r = σ/‖d‖₂``, ε(δ) its root in ε.

        >>> mech = Gaussian(1.0, 1e-2, calibration="analytic")
        >>> ex = mech.exact_privacy(0.0, 1.0, 1.0)        # calibrated exactly: δ(ε) = δ
        >>> round(ex["delta"], 6), round(ex["epsilon"], 6)
        (0.01, 1.0)
        """
        eps, dlt, _, _, diff, scale = self._privacy_inputs(value, value_prime, sensitivity, claim)
        r = scale / float(np.linalg.norm(diff))

        def delta_of(e):
            return max(0.0, _bw_excess(r, e))

        return {"epsilon": epsilon_at(delta_of, dlt), "delta": delta_of(eps)}

    def _params(self) -> dict:
        return {"epsilon": self._epsilon, "delta": self._delta, "calibration": self.calibration}
