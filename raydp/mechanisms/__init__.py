"""Sensitivity-induced mechanisms (Rubinstein & Aldà 2017, Corollaries 10–14).

Each mechanism owns the norm in which the sampler measures ``G = ‖f(D) − f(D′)‖``, so a sensitivity
estimate always matches the mechanism that spends it:

=============  ========  =====================================================  ==========
mechanism      norm      release with sensitivity Δ                             guarantee
=============  ========  =====================================================  ==========
Laplace        ℓ1        f(D) + Lap(Δ/ε) per coordinate                         ε-DP
Gaussian       ℓ2        f(D) + N(0, σ²) per coordinate                         (ε, δ)-DP
Exponential    ℓ∞        r with P(r) ∝ exp(ε s(D, r) / (2Δ))                    ε-DP
Bernstein      ℓ∞        Bernstein polynomial of F(D, ·) + Lap(Δ(K+1)^ℓ/ε)      ε-DP
=============  ========  =====================================================  ==========

With a *sampled* Δ̂ the guarantee becomes (ε, δ, γ)-random DP (Theorem 15). All noise comes from
OpenDP's samplers (:mod:`raydp.noise`), never from numpy. Each mechanism also states its own exact
privacy curve on a neighbouring pair (``exact_privacy``), the reference :mod:`raydp.testing` audits against.

One module per family: :mod:`~raydp.mechanisms.base` (the :class:`Mechanism` base class and the
shared checks), :mod:`~raydp.mechanisms.laplace`, :mod:`~raydp.mechanisms.gaussian` (with the analytic
Balle–Wang calibration), :mod:`~raydp.mechanisms.exponential` and :mod:`~raydp.mechanisms.bernstein`
(with Bernstein's polynomial basis and :func:`bernstein_approximation`); :mod:`~raydp.mechanisms.spec` says how
every entry point takes a mechanism: a name with ε and δ, or an object (:func:`as_mechanism`).

>>> import numpy as np
>>> mech = Laplace(epsilon=1.0)
>>> mech.norm, mech.noise_scale(0.5)
('l1', 0.5)
>>> mech.release(np.zeros((2, 2)), sensitivity=0.5).shape
(2, 2)
"""

from .base import Mechanism, check_mechanism
from .bernstein import Bernstein, BernsteinRelease, bernstein_approximation
from .exponential import Exponential
from .gaussian import Gaussian, analytic_gaussian_sigma
from .laplace import Laplace
from .spec import NAMES, as_mechanism

__all__ = [
    "Mechanism",
    "check_mechanism",
    "Laplace",
    "Gaussian",
    "Exponential",
    "Bernstein",
    "BernsteinRelease",
    "bernstein_approximation",
    "analytic_gaussian_sigma",
    "as_mechanism",
    "NAMES",
]
