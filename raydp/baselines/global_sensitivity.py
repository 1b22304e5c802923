"""Laplace mechanism at global sensitivity (Dwork, McSherry, Nissim & Smith, TCC 2006): **ε-DP**.

``f(x) + Lap(GS_f/ε)`` with, for data in the public range ``[L, U]``,
``GS = U − L`` for the median ``x_(⌈n/2⌉)`` and ``GS = (U − L)/n`` for the mean (see
:mod:`.sensitivity`). Noise from OpenDP's Laplace sampler (``raydp.noise.laplace``).
"""

from __future__ import annotations

import numpy as np

from raydp import noise

from ._common import (
    EPS_DP,
    BaselineRelease,
    check_bounds,
    check_data,
    check_epsilon,
    clamp,
    lower_median,
)
from .sensitivity import global_sensitivity_mean, global_sensitivity_median

__all__ = ["global_median_release", "global_mean_release"]


def _release(value: float, gs: float, eps: float, lo: float, hi: float, clip: bool, method: str) -> BaselineRelease:
    scale = gs / eps
    out = float(noise.laplace(np.array([value]), scale)[0])
    if clip:
        out = clamp(out, lo, hi)
    return BaselineRelease(value=out, epsilon=eps, delta=0.0, notion=EPS_DP, method=method, scale=scale,
                           info={"global_sensitivity": gs})


def global_median_release(x, epsilon: float, lower: float, upper: float, *, clip: bool = True) -> BaselineRelease:
    """``x_(⌈n/2⌉) + Lap((U − L)/ε)``: **ε-DP**; clamped to ``[lower, upper]`` unless ``clip=False``."""
    eps = check_epsilon(epsilon)
    lo, hi = check_bounds(lower, upper)
    arr = check_data(x, lo, hi)
    return _release(lower_median(arr), global_sensitivity_median(lo, hi), eps, lo, hi, clip, "global_median")


def global_mean_release(x, epsilon: float, lower: float, upper: float, *, clip: bool = True) -> BaselineRelease:
    """``mean(x) + Lap((U − L)/(nε))``: **ε-DP**; clamped to ``[lower, upper]`` unless ``clip=False``."""
    eps = check_epsilon(epsilon)
    lo, hi = check_bounds(lower, upper)
    arr = check_data(x, lo, hi)
    return _release(float(np.mean(arr)), global_sensitivity_mean(arr.size, lo, hi), eps, lo, hi, clip, "global_mean")
