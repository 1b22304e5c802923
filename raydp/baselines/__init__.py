"""Baselines that beat global sensitivity without sampling it (sources: the documentation's method page).

Every release function returns a :class:`BaselineRelease` whose ``notion`` states its privacy:

=========================================  ================================================  ==========
function                                   method (source)                                   notion
=========================================  ================================================  ==========
:func:`global_median_release`,             Laplace at global sensitivity (DMNS 2006)         ε-DP
:func:`global_mean_release`
:func:`smooth_median_release` (δ = 0)      smooth sensitivity + Cauchy-like noise (NRS07)    ε-DP
:func:`smooth_median_release` (δ > 0)      smooth sensitivity + Laplace noise (NRS07)        (ε, δ)-DP
:func:`ptr_median`                         propose-test-release (Dwork & Lei 2009)           (ε, δ)-DP
:func:`sample_and_aggregate`               blocks on Ray + widened Winsorized mean           ε-DP
                                           (NRS07 §4, Smith 2011)
:func:`exponential_quantile`               exponential mechanism on a grid (McSherry &       ε-DP
                                           Talwar 2007)
:func:`inverse_sensitivity_median`         inverse sensitivity on a grid (Asi & Duchi 2020)  ε-DP
=========================================  ================================================  ==========

For contrast, raydp's own Sample-Then-Respond with a sampled Δ̂ is (ε, δ, γ)-*random* DP: the
guarantee holds for all but a γ fraction of neighbouring databases drawn from the oracle.

Sensitivities: :func:`local_sensitivity_median` (closed form), :func:`smooth_sensitivity_median`
(exact), :func:`local_sensitivity_bruteforce` / :func:`smooth_sensitivity_bruteforce` (small
discrete domains). The median throughout is ``x_(⌈n/2⌉)`` (lower median for even n); see
:mod:`raydp.baselines._common`. All noise comes from OpenDP samplers via :mod:`raydp.noise`.

>>> import numpy as np
>>> from raydp import baselines
>>> x = np.array([0.1, 0.4, 0.5, 0.6, 0.9])
>>> baselines.local_sensitivity_median(x, 0.0, 1.0)
0.09999999999999998
>>> round(baselines.smooth_sensitivity_median(x, beta=1.0, lower=0.0, upper=1.0), 6)
0.147152
"""

from ._common import (
    BaselineRelease,
    LowerMedian,
    lower_median,
    median_rank,
    median_target,
)
from .global_sensitivity import global_mean_release, global_median_release
from .models import Clipped, StudentT, clipped, student_t
from .ptr import propose_bound, ptr_distance_to_unsafe, ptr_median, ptr_threshold
from .sample_aggregate import (
    block_values,
    sample_and_aggregate,
    widened_winsorized_mean,
)
from .selection import (
    exponential_quantile,
    exponential_quantile_probabilities,
    inverse_sensitivity_lengths,
    inverse_sensitivity_median,
    inverse_sensitivity_probabilities,
    quantile_utility,
)
from .sensitivity import (
    global_sensitivity_mean,
    global_sensitivity_median,
    local_sensitivity_bruteforce,
    local_sensitivity_mean,
    local_sensitivity_median,
    median_a_k,
    smooth_sensitivity_bruteforce,
    smooth_sensitivity_mean,
    smooth_sensitivity_median,
)
from .smooth import (
    admissible_noise,
    admissible_parameters,
    smooth_mean_release,
    smooth_median_release,
    smooth_release,
)

__all__ = [
    "BaselineRelease", "LowerMedian", "lower_median", "median_rank", "median_target",
    "global_median_release", "global_mean_release",
    "Clipped", "StudentT", "clipped", "student_t",
    "propose_bound", "ptr_distance_to_unsafe", "ptr_median", "ptr_threshold",
    "block_values", "sample_and_aggregate", "widened_winsorized_mean",
    "exponential_quantile", "exponential_quantile_probabilities", "inverse_sensitivity_lengths",
    "inverse_sensitivity_median", "inverse_sensitivity_probabilities", "quantile_utility",
    "global_sensitivity_mean", "global_sensitivity_median", "local_sensitivity_bruteforce",
    "local_sensitivity_mean", "local_sensitivity_median", "median_a_k", "smooth_sensitivity_bruteforce",
    "smooth_sensitivity_mean", "smooth_sensitivity_median",
    "admissible_noise", "admissible_parameters", "smooth_mean_release", "smooth_median_release", "smooth_release",
]
