"""Statistics of the records: mean, median and quantiles (axis 0), with vectorised ``batch``."""

from __future__ import annotations

from typing import Any

import numpy as np

from raydp.errors import TargetError
from raydp.validation import check_real

from ._common import _batch, _database, _real

__all__ = ["mean", "median", "quantile", "Mean", "Median", "Quantile"]


class Mean:
    """Mean of the records (axis 0): a scalar for scalar records, a vector for vector records."""

    def __call__(self, database: Any) -> np.ndarray:
        return np.mean(_database(database), axis=0)

    def batch(self, databases: Any) -> np.ndarray:
        return np.mean(_batch(databases), axis=1)

    def identity(self) -> dict:
        return {"name": "mean", "params": {}}

    def __repr__(self) -> str:
        return "mean()"


def mean() -> Mean:
    """Target: the mean of the records, ``np.mean(database, axis=0)``."""
    return Mean()


class Median:
    """Median of the records (axis 0), numpy's definition (average of the middle two for even n)."""

    def __call__(self, database: Any) -> np.ndarray:
        return np.median(_database(database), axis=0)

    def batch(self, databases: Any) -> np.ndarray:
        return np.median(_batch(databases), axis=1)

    def identity(self) -> dict:
        return {"name": "median", "params": {}}

    def __repr__(self) -> str:
        return "median()"


def median() -> Median:
    """Target: the median of the records, ``np.median(database, axis=0)``."""
    return Median()


class Quantile:
    """The ``q``-quantile of the records (axis 0), numpy's default linear interpolation."""

    def __init__(self, q: float):
        self.q = _real("q", q)
        check_real(q, "q", min_value=0.0, max_value=1.0, error=TargetError, expected="in [0, 1]")

    def __call__(self, database: Any) -> np.ndarray:
        return np.quantile(_database(database), self.q, axis=0)

    def batch(self, databases: Any) -> np.ndarray:
        return np.quantile(_batch(databases), self.q, axis=1)

    def identity(self) -> dict:
        return {"name": "quantile", "params": {"q": self.q}}

    def __repr__(self) -> str:
        return f"quantile({self.q!r})"


def quantile(q: float) -> Quantile:
    """Target: the ``q``-quantile (``0 <= q <= 1``) of the records, linear interpolation."""
    return Quantile(q)
