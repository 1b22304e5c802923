"""Public models of scalar data for the comparison job: oracles with ``sample(rng, size)``.

The sampled-Δ̂ column of ``jobs/compare_baselines.py`` calibrates to these; they are the analyst's
public model of the data, never the private data. :class:`Clipped` applies the same clipping to
the public range that the job applies to its data, so the oracle matches the released statistic's
input exactly.
"""

from __future__ import annotations

import numpy as np

from raydp.errors import OracleError
from raydp.validation import check_real

from ._common import check_bounds

__all__ = ["StudentT", "Clipped", "student_t", "clipped"]


class StudentT:
    """Scalar records from Student's t with ``df`` degrees of freedom (heavy tailed; variance ∞ for df ≤ 2)."""

    def __init__(self, df: float):
        self.df = check_real(df, "df", min_value=0, include_min=False, error=OracleError,
                             expected="a finite real number > 0")

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return rng.standard_t(self.df, size=int(size)).astype(np.float64, copy=False)

    def identity(self) -> dict:
        return {"name": "student_t", "params": {"df": self.df}}

    def __repr__(self) -> str:
        return f"student_t(df={self.df!r})"


class Clipped:
    """``base`` oracle with every record clipped to ``[lower, upper]``."""

    def __init__(self, base, lower: float, upper: float):
        if not callable(getattr(base, "sample", None)):
            raise OracleError(f"base must be an oracle with sample(rng, size), got {type(base).__name__}")
        self.base = base
        self.lower, self.upper = check_bounds(lower, upper)

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return np.clip(np.asarray(self.base.sample(rng, size), dtype=np.float64), self.lower, self.upper)

    def identity(self) -> dict:
        from raydp.identity import describe

        return {"name": "clipped", "params": {"base": describe(self.base), "lower": self.lower, "upper": self.upper}}

    def __repr__(self) -> str:
        return f"clipped({self.base!r}, {self.lower!r}, {self.upper!r})"


def student_t(df: float) -> StudentT:
    """Oracle of iid Student-t(df) scalar records."""
    return StudentT(df)


def clipped(base, lower: float, upper: float) -> Clipped:
    """Oracle ``base`` with records clipped to the public range ``[lower, upper]``."""
    return Clipped(base, lower, upper)
