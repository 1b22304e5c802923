"""Releases calibrated to smooth sensitivity (Nissim, Raskhodnikova & Smith, STOC 2007, §2).

If S is a β-smooth upper bound on the local sensitivity of f and Z has an (α, β)-admissible
density, then ``f(x) + (S(x)/α)·Z`` is differentially private (NRS Lemma 2.6 / Definition 2.5).
Two admissible choices are offered:

=====================  =================================  ============  ===================  =========
noise                  density of Z                       α             β                    notion
=====================  =================================  ============  ===================  =========
Cauchy-like, γ > 1     ``h(z) ∝ 1/(1 + |z|^γ)``           ε/(4γ)        ε/γ                  ε-DP
Laplace                ``h(z) = ½ e^{−|z|}``              ε/2           ε/(2 ln(2/δ))        (ε, δ)-DP
=====================  =================================  ============  ===================  =========

(NRS Lemma 2.10 for the first row — also Machanavajjhala's lecture "Smooth Sensitivity and Sampling",
slide 22: "α = ε/4γ, S* is ε/γ smooth";
NRS Example 2 / Lemma 2.9 for the Laplace row.) The default exponent γ = 4 gives Z a finite
variance; γ = 2 is the standard Cauchy (no mean).

How the noise is drawn (no numpy randomness)
--------------------------------------------
OpenDP has no sampler for ``h(z) ∝ 1/(1 + |z|^γ)``, so :func:`admissible_noise` builds it by
rejection sampling from OpenDP draws only:

* proposal: a standard Cauchy ``C = G₁/G₂`` with ``G₁, G₂`` OpenDP Gaussians (``raydp.noise.gaussian``);
* acceptance: accept ``C`` when ``E ≥ log(M / r(C))``, where ``r(z) = (1 + z²)/(1 + |z|^γ)``,
  ``M ≥ sup r`` (finite for γ ≥ 2), and ``E = |L|`` with ``L`` an OpenDP Laplace(1) draw, so
  ``E ~ Exp(1)`` and the test is the usual ``U ≤ r/M`` with ``U = e^{−E}`` uniform.

In exact arithmetic the accepted C has density ∝ h. The *randomness* is OpenDP's (CSPRNG, exact
discrete samplers), but the ratio, the logarithms and the final ``f(x) + (S/α)·Z`` are ordinary
float operations, so this release carries the floating-point caveat of textbook samplers
(Mironov 2012): it is **not** hardened against attacks on the pattern of representable outputs.
Exponents 1 < γ < 2 (tails heavier than Cauchy) have no such envelope and are refused. The
Laplace release goes entirely through OpenDP's Laplace mechanism (``raydp.noise.laplace``) with a
data-dependent scale ``2·S*_β(x)/ε``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache

import numpy as np
from scipy import optimize

from raydp import noise
from raydp.errors import InvalidArgumentError
from raydp.validation import check_int, check_real

from ._common import (
    EPS_DELTA_DP,
    EPS_DP,
    BaselineRelease,
    check_bounds,
    check_data,
    check_delta,
    check_epsilon,
    clamp,
    lower_median,
)
from .sensitivity import smooth_sensitivity_mean, smooth_sensitivity_median

__all__ = [
    "admissible_noise",
    "admissible_parameters",
    "smooth_release",
    "smooth_median_release",
    "smooth_mean_release",
]


def _check_exponent(exponent) -> float:
    return check_real(exponent, "exponent", min_value=2.0,
                      expected="a finite real number >= 2 (the density 1/(1+|z|^γ) with γ < 2 has heavier tails "
                               "than the Cauchy proposal this sampler uses)")


@lru_cache(maxsize=64)
def _envelope(exponent: float) -> float:
    """An upper bound M on r(z) = (1 + z²)/(1 + |z|^γ). For |z| ≥ 1, r ≤ 1; the max on [0, 1] is numeric."""
    r = lambda z: (1.0 + z * z) / (1.0 + abs(z) ** exponent)
    grid = np.linspace(0.0, 1.0, 20001)
    best = float(np.max((1.0 + grid**2) / (1.0 + grid**exponent)))
    res = optimize.minimize_scalar(lambda z: -r(z), bounds=(0.0, 1.0), method="bounded", options={"xatol": 1e-12})
    best = max(best, -float(res.fun), 1.0)
    return best * (1.0 + 1e-9)  # a slightly larger M keeps the sampler exact (it only rejects more)


def admissible_noise(size: int, exponent: float = 4.0) -> np.ndarray:
    """``size`` iid draws of Z with density ``∝ 1/(1 + |z|^γ)``, γ = ``exponent`` ≥ 2 (OpenDP randomness).

    Rejection sampling from a Cauchy proposal built from OpenDP Gaussians, accepted with an
    OpenDP-Laplace-derived exponential variate (see the module docstring, including its
    floating-point caveat). Acceptance rate: 0.586 for γ = 4, 1 for γ = 2.
    """
    size = check_int(size, "size", min_value=1)
    g = _check_exponent(exponent)
    log_m = math.log(_envelope(g))
    out: list[float] = []
    while len(out) < size:
        batch = 2 * (size - len(out)) + 8
        g1 = noise.gaussian(np.zeros(batch), 1.0)
        g2 = noise.gaussian(np.zeros(batch), 1.0)
        e = np.abs(noise.laplace(np.zeros(batch), 1.0))
        ok = g2 != 0.0
        c = g1[ok] / g2[ok]
        e = e[ok]
        log_r = np.log1p(c * c) - np.log1p(np.abs(c) ** g)
        accept = e >= log_m - log_r
        out.extend(c[accept].tolist())
    return np.asarray(out[:size], dtype=np.float64)


def admissible_parameters(epsilon: float, delta: float = 0.0, exponent: float = 4.0) -> tuple[float, float]:
    """``(α, β)`` of the admissible noise for the target privacy.

    ``delta == 0``: Cauchy-like noise, ``(ε/(4γ), ε/γ)`` (NRS Lemma 2.10), ε-DP.
    ``delta > 0``: Laplace noise, ``(ε/2, ε/(2 ln(2/δ)))`` (NRS Example 2), (ε, δ)-DP.

    >>> admissible_parameters(1.0)
    (0.0625, 0.25)
    """
    eps = check_epsilon(epsilon)
    d = check_delta(delta, allow_zero=True)
    if d == 0.0:
        g = _check_exponent(exponent)
        return eps / (4.0 * g), eps / g
    return eps / 2.0, eps / (2.0 * math.log(2.0 / d))


def smooth_release(value: float, smooth_sensitivity: Callable[[float], float], epsilon: float, *,
                   delta: float = 0.0, exponent: float = 4.0, method: str = "smooth",
                   clip: tuple[float, float] | None = None) -> BaselineRelease:
    """``value + (S*_β/α)·Z`` with ``(α, β)`` from :func:`admissible_parameters`.

    ``smooth_sensitivity(beta)`` must return a β-smooth upper bound on the local sensitivity of
    the function whose value is ``value`` (at the private data). ``clip=(L, U)`` clamps the
    released number to the public range (post-processing: privacy unchanged).
    """
    eps = check_epsilon(epsilon)
    d = check_delta(delta, allow_zero=True)
    alpha, beta = admissible_parameters(eps, d, exponent)
    s = float(smooth_sensitivity(beta))
    if not math.isfinite(s) or s < 0:
        raise InvalidArgumentError(f"smooth sensitivity must be finite and >= 0, got {s!r}")
    scale = s / alpha
    if d == 0.0:
        released = float(value) + scale * float(admissible_noise(1, exponent)[0]) if scale > 0 else float(value)
        notion, kind = EPS_DP, f"cauchy-like(γ={float(exponent):g})"
    else:
        released = float(noise.laplace(np.array([float(value)]), scale)[0])
        notion, kind = EPS_DELTA_DP, "laplace"
    if clip is not None:
        released = clamp(released, *clip)
    return BaselineRelease(value=released, epsilon=eps, delta=d, notion=notion, method=method, scale=scale,
                           info={"smooth_sensitivity": s, "alpha": alpha, "beta": beta, "noise": kind})


def smooth_median_release(x, epsilon: float, lower: float, upper: float, *, delta: float = 0.0,
                          exponent: float = 4.0, clip: bool = True) -> BaselineRelease:
    """Median ``x_(⌈n/2⌉)`` + noise scaled to its exact smooth sensitivity (NRS 2007 §2, §3.1).

    ``delta == 0`` (default): Cauchy-like admissible noise with exponent γ, **ε-DP**.
    ``delta > 0``: Laplace noise, **(ε, δ)-DP**. Data must lie in ``[lower, upper]``; the result is
    clamped to that range unless ``clip=False``.
    """
    lo, hi = check_bounds(lower, upper)
    arr = check_data(x, lo, hi)
    return smooth_release(lower_median(arr), lambda b: smooth_sensitivity_median(arr, b, lo, hi), epsilon,
                          delta=delta, exponent=exponent, method="smooth_median",
                          clip=(lo, hi) if clip else None)


def smooth_mean_release(x, epsilon: float, lower: float, upper: float, *, delta: float = 0.0,
                        exponent: float = 4.0, clip: bool = True) -> BaselineRelease:
    """Mean of data in ``[lower, upper]`` + noise scaled to its smooth sensitivity (ε-DP or (ε, δ)-DP).

    Included for the comparison only: the bounded mean's smooth sensitivity is within ``e^{−β}`` of
    its global sensitivity ``(U − L)/n``, so this is never better than the Laplace mechanism.
    """
    lo, hi = check_bounds(lower, upper)
    arr = check_data(x, lo, hi)
    return smooth_release(float(np.mean(arr)), lambda b: smooth_sensitivity_mean(arr, b, lo, hi), epsilon,
                          delta=delta, exponent=exponent, method="smooth_mean",
                          clip=(lo, hi) if clip else None)
