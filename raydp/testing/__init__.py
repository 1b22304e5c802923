"""Test tooling: auditing the guarantee, and checking fast forms (not used by the library itself).

Two independent checks, both statistical, both with a stated false-alarm rate:

* :mod:`raydp.testing.coverage` — the sampler's coverage (Theorem 15) against a target whose law of
  G is known exactly (the median of n iid U(0, 1) records), with a binomial test and wrong samplers
  to show its power;
* :mod:`raydp.testing.privacy` — the mechanisms' privacy loss: a histogram audit giving lower
  confidence bounds on ε and δ on a neighbouring pair, the white-box reference
  (:func:`exact_privacy`, each mechanism's own curve) and :class:`Miscalibrated`, a mechanism with a
  wrong noise scale.

And :class:`raydp.testing.cold.Cold`: a target with its fast pair and block forms hidden, the reference
those forms are checked against.

>>> from raydp import testing
>>> round(testing.median_of_uniforms_quantile(0.05, 21), 4)
0.1013
"""

from .coverage import (
    CoverageResult,
    WrongSamplerResult,
    exact_failure_probability,
    median_of_uniforms_cdf,
    median_of_uniforms_cdf_integral,
    median_of_uniforms_quantile,
    sampler_coverage,
)
from .privacy import AuditResult, Miscalibrated, audit, audit_counts, exact_privacy

__all__ = [
    "AuditResult",
    "CoverageResult",
    "Miscalibrated",
    "WrongSamplerResult",
    "audit",
    "audit_counts",
    "exact_failure_probability",
    "exact_privacy",
    "median_of_uniforms_cdf",
    "median_of_uniforms_cdf_integral",
    "median_of_uniforms_quantile",
    "sampler_coverage",
]
