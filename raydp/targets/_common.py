"""Checks shared by the built-in targets: databases, batches of databases and real parameters.

Every failure raises :class:`raydp.errors.TargetError`.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from raydp.errors import TargetError
from raydp.validation import check_real, fail


def _database(database: Any) -> np.ndarray:
    try:
        db = np.asarray(database, dtype=np.float64)
    except (TypeError, ValueError):
        raise TargetError(f"database must be a numeric array, got {type(database).__name__}") from None
    if db.ndim == 0:
        raise TargetError(f"database must be an array with records on axis 0, got shape {db.shape}")
    if db.shape[0] == 0:
        raise TargetError("database has no records; n must be >= 1")
    return db


def _batch(databases: Any) -> np.ndarray:
    dbs = np.asarray(databases, dtype=np.float64)
    if dbs.ndim < 2 or dbs.shape[1] == 0:
        raise TargetError(f"batch needs databases of shape (B, n, *record_shape) with n >= 1, got {dbs.shape}")
    return dbs


def _real(name: str, value: Any, *, positive: bool = False) -> float:
    """``value`` as a float: a real number (bools refused) that is finite, and > 0 if ``positive``.

    Two messages, as ever: "<name> must be a finite real number" for a value that is not a real
    number, "<name> must be [> 0 and ]finite" for one out of range (NaN included).
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise fail(TargetError, name, "a finite real number", value)
    return check_real(value, name, min_value=0.0 if positive else None, include_min=False, error=TargetError,
                      expected="> 0 and finite" if positive else "finite")
