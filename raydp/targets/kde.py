"""The kernel density estimate target: a function-valued target for the Bernstein mechanism."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from raydp.errors import TargetError

from ._common import _database, _real

__all__ = ["kde", "KDE", "KDEFunction"]

_SQRT_2PI = math.sqrt(2.0 * math.pi)
_CHUNK_ELEMENTS = 1 << 22  # cap the (points × data) matrix at ~32 MB per block


class KDEFunction:
    """A fitted 1-D Gaussian kernel density estimate, F(x) = (1/n) Σ_i φ((x − x_i)/h) / h.

    Picklable; call it on points of shape ``(p,)`` or ``(p, 1)`` (or a scalar) to get densities of
    shape ``(p,)`` (or a float).
    """

    def __init__(self, data: np.ndarray, bandwidth: float):
        self.data = np.ascontiguousarray(data, dtype=np.float64).ravel()
        self.bandwidth = float(bandwidth)

    def __call__(self, points: Any) -> Any:
        pts = np.asarray(points, dtype=np.float64)
        scalar = pts.ndim == 0
        if pts.ndim == 2 and pts.shape[1] == 1:
            pts = pts[:, 0]
        elif pts.ndim > 1:
            raise TargetError(f"KDE is 1-D: evaluate it at points of shape (p,) or (p, 1), got {pts.shape}")
        pts = pts.reshape(-1)
        h, n = self.bandwidth, self.data.size
        out = np.empty(pts.size, dtype=np.float64)
        step = max(1, _CHUNK_ELEMENTS // max(n, 1))
        for start in range(0, pts.size, step):
            z = (pts[start : start + step, None] - self.data[None, :]) / h
            out[start : start + step] = np.exp(-0.5 * z * z).sum(axis=1)
        out /= n * h * _SQRT_2PI
        return float(out[0]) if scalar else out

    def __repr__(self) -> str:
        return f"KDEFunction(n={self.data.size}, bandwidth={self.bandwidth!r})"


class KDE:
    """Function-valued target: database of scalar records → :class:`KDEFunction`."""

    KERNELS = ("gaussian",)

    def __init__(self, bandwidth: float, kernel: str = "gaussian"):
        self.bandwidth = _real("bandwidth", bandwidth, positive=True)
        if kernel not in self.KERNELS:
            raise TargetError(f"kernel must be one of {list(self.KERNELS)}, got {kernel!r}")
        self.kernel = kernel

    def __call__(self, database: Any) -> KDEFunction:
        db = _database(database)
        if db.ndim == 2 and db.shape[1] == 1:
            db = db[:, 0]
        if db.ndim != 1:
            raise TargetError(f"kde needs scalar records, shape (n,) or (n, 1); got {db.shape}")
        if not np.all(np.isfinite(db)):
            raise TargetError("kde database contains NaN or infinite values")
        return KDEFunction(db, self.bandwidth)

    def identity(self) -> dict:
        return {"name": "kde", "params": {"bandwidth": self.bandwidth, "kernel": self.kernel}}

    def __repr__(self) -> str:
        return f"kde(bandwidth={self.bandwidth!r}, kernel={self.kernel!r})"


def kde(bandwidth: float, kernel: str = "gaussian") -> KDE:
    """Target: 1-D kernel density estimate with bandwidth ``h`` > 0 (Gaussian kernel).

    Returns a function value (a picklable :class:`KDEFunction`), meant for the Bernstein
    mechanism on [0, 1], which evaluates it on its lattice.
    """
    return KDE(bandwidth, kernel)
