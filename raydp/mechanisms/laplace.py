"""The Laplace mechanism: ``f(D) + Lap(Δ/ε)`` per coordinate, ℓ1 sensitivity, ε-DP."""

from __future__ import annotations

import math

import numpy as np

from raydp import noise

from .base import Mechanism, check_sensitivity

__all__ = ["Laplace"]


class Laplace(Mechanism):
    """Laplace mechanism: ``f(D) + Lap(Δ/ε)`` on every coordinate; ℓ1 sensitivity; ε-DP.

    Parameters
    ----------
    epsilon : float
        Privacy parameter, finite and > 0.

    The release has the shape of the target's output (scalars come back as 0-d arrays).

    >>> mech = Laplace(epsilon=0.5)
    >>> mech.noise_scale(1.0), mech.variance(1.0)
    (2.0, 8.0)
    >>> mech.release([1.0, 2.0, 3.0], sensitivity=0.0)   # Δ = 0: nothing to hide
    array([1., 2., 3.])
    """

    name = "laplace"
    norm = "l1"
    coordinatewise_noise = True

    def noise_scale(self, sensitivity: float) -> float:
        """Laplace scale ``b = Δ/ε``."""
        return check_sensitivity(sensitivity) / self._epsilon

    def variance(self, sensitivity: float) -> float:
        """Noise variance per coordinate, ``2 b²``."""
        b = self.noise_scale(sensitivity)
        return 2.0 * b * b  # float ** 2 raises OverflowError for b > 1e154; b * b gives inf

    def release(self, value, sensitivity: float) -> np.ndarray:
        """``value`` + Laplace(Δ/ε) noise, with ``value``'s shape."""
        return self._add_noise(value, sensitivity, noise.laplace)

    def exact_privacy(self, value, value_prime, sensitivity: float, *, claim=None) -> dict:
        """Exact ε(δ) and δ(ε) on a pair that differs in one coordinate by d (else both None).

        With ``ε_t = |d|/b``: ``δ(ε) = 1 − e^{−(ε_t − ε)/2}`` for ε < ε_t (0 above) and
        ``ε(δ) = ε_t + 2 log(1 − δ)`` (clipped at 0).

        >>> Laplace(1.0).exact_privacy(0.0, 1.0, 1.0)
        {'epsilon': 1.0, 'delta': 0.0}
        >>> round(Laplace(1.0).exact_privacy(0.0, 1.0, 0.5)["delta"], 4)   # noise for Δ = 0.5: ε_t = 2
        0.3935
        """
        eps, dlt, _, _, diff, scale = self._privacy_inputs(value, value_prime, sensitivity, claim)
        if np.count_nonzero(diff) != 1:
            return {"epsilon": None, "delta": None}
        et = float(np.abs(diff).sum()) / scale
        return {"epsilon": max(0.0, et + 2.0 * math.log1p(-dlt)),
                "delta": max(0.0, -math.expm1(-(et - eps) / 2.0)) if et > eps else 0.0}
