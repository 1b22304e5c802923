"""Built-in targets f : 𝒟ⁿ → B (METHOD.md §1, §7).

A target is any callable ``target(database)`` with ``database`` of shape ``(n, *record_shape)``.
The ones here are plain picklable classes with ``identity()``; the cheap ones also offer
``batch(databases)`` mapping ``(B, n, *record_shape) -> (B, *out_shape)`` with the same values as
calling the target on each database (up to float rounding of vectorised numpy).

Argument problems and databases a target cannot handle raise :class:`raydp.errors.TargetError`.
"""

from __future__ import annotations

import math
import numbers
import warnings
from typing import Any

import numpy as np

from raydp.errors import TargetError

__all__ = [
    "mean",
    "median",
    "quantile",
    "svm",
    "kde",
    "as_target",
    "Mean",
    "Median",
    "Quantile",
    "SVM",
    "KDE",
    "KDEFunction",
]


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
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TargetError(f"{name} must be a finite real number, got {value!r}")
    v = float(value)
    if not math.isfinite(v) or (positive and not v > 0):
        raise TargetError(f"{name} must be {'> 0 and ' if positive else ''}finite, got {value!r}")
    return v


# ----------------------------------------------------------------------------- statistics


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
        if not 0.0 <= self.q <= 1.0:
            raise TargetError(f"q must be in [0, 1], got {q!r}")

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


# ----------------------------------------------------------------------------- SVM

# Measured on Figure-5 data (n = 1000, 20 data sets; ‖·‖₁ of (w, b) against a tol=1e-8 fit):
#   d = 8 : tol 1e-3 → max 1.4e-3, 1e-5 → 7.8e-5, 1e-6 → 4.0e-6, 1e-7 → 3.0e-7; fit ≈ 6.4 ms at every tol
#   d = 64: tol 1e-3 → max 7.2e-3, 1e-5 → 6.5e-5, 1e-6 → 6.6e-6, 1e-7 → 7.1e-7; fit ≈ 1.7 ms at every tol
# sklearn's default tol=1e-3 is thus of the same order as the paper's Δ̂ ≈ 0.01 and would pollute
# the sampled sensitivities; 1e-7 costs nothing extra here and is four orders below Δ̂.
DEFAULT_SVM_TOL = 1e-7
DEFAULT_SVM_MAX_ITER = 10_000_000


class SVM:
    """Linear SVM target for databases of rows ``[label, x_1..x_d]`` (labels ±1); returns
    ``np.concatenate([w, [b]])`` (length d + 1). See :func:`svm`."""

    def __init__(self, C: float = 3.0, tol: float = DEFAULT_SVM_TOL, max_iter: int = DEFAULT_SVM_MAX_ITER):
        self.C = _real("C", C, positive=True)
        self.tol = _real("tol", tol, positive=True)
        if isinstance(max_iter, (bool, np.bool_)) or not isinstance(max_iter, numbers.Integral) or int(max_iter) < 1:
            raise TargetError(f"max_iter must be a positive integer, got {max_iter!r}")
        self.max_iter = int(max_iter)

    def __call__(self, database: Any) -> np.ndarray:
        db = _database(database)
        if db.ndim != 2 or db.shape[1] < 2:
            raise TargetError(
                f"svm database must have shape (n, d + 1) with rows [label, x_1..x_d], d >= 1; got {db.shape}"
            )
        if not np.all(np.isfinite(db)):
            raise TargetError("svm database contains NaN or infinite values")
        y, X = db[:, 0], db[:, 1:]
        if not np.all((y == 1.0) | (y == -1.0)):
            bad = np.unique(y[(y != 1.0) & (y != -1.0)])[:5].tolist()
            raise TargetError(f"svm labels (column 0) must be +1 or -1, got {bad}")
        if np.all(y == y[0]):
            raise TargetError(f"svm database has a single class (all labels {y[0]:+g}); an SVM needs both +1 and -1")
        n = db.shape[0]

        # libsvm's C-SVC (sklearn.svm.SVC) minimises exactly ½‖w‖² + C_sk Σ hinge with an
        # UNPENALISED bias b, so C_sk = C/n is the paper's consistent formulation
        # (C/n) Σ hinge + ½‖w‖². LinearSVC (liblinear) would add the intercept to the regulariser
        # (½(‖w‖² + b²) via intercept_scaling), a different objective, hence not used.
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.svm import SVC

        model = SVC(kernel="linear", C=self.C / n, tol=self.tol, max_iter=self.max_iter, shrinking=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            model.fit(X, y)
        if int(np.max(model.n_iter_)) >= self.max_iter:
            raise TargetError(
                f"svm solver did not converge to tol={self.tol:g} within max_iter={self.max_iter}; "
                "raise max_iter or tol"
            )
        # classes_ is [-1, 1], so coef_/intercept_ give a decision function positive for +1.
        return np.concatenate([model.coef_.ravel(), model.intercept_]).astype(np.float64)

    def identity(self) -> dict:
        return {"name": "svm", "params": {"C": self.C, "tol": self.tol, "max_iter": self.max_iter}}

    def __repr__(self) -> str:
        return f"svm(C={self.C!r}, tol={self.tol!r}, max_iter={self.max_iter!r})"


def svm(C: float = 3.0, tol: float = DEFAULT_SVM_TOL, max_iter: int = DEFAULT_SVM_MAX_ITER) -> SVM:
    """Target: linear SVM in the paper's consistent formulation, min (C/n)·Σ hinge + ½‖w‖².

    The database holds rows ``[label, x_1..x_d]`` with labels ±1 (as made by
    ``oracles.svm_two_class``); the result is ``[w_1..w_d, b]`` (length d + 1), decision function
    ``w·x + b`` positive for label +1. The bias b is not regularised. Solved with
    ``sklearn.svm.SVC(kernel="linear", C=C/n)`` (libsvm), which is deterministic.

    ``tol`` (libsvm's KKT stopping tolerance) defaults to 1e-7: on Figure-5 data (n = 1000) the
    ‖·‖₁ change of (w, b) from a tol=1e-8 fit is ≤ 7e-7 at d = 8 and d = 64, four orders of
    magnitude below the paper's Δ̂ ≈ 0.01, whereas sklearn's default 1e-3 gives errors up to 7e-3
    — the size of Δ̂ itself. Fit time does not depend on tol there (≈ 6 ms at d = 8, ≈ 2 ms at
    d = 64). ``max_iter`` bounds libsvm's iterations; hitting it raises TargetError rather than
    returning an inaccurate fit.

    A database with a single class, labels other than ±1, or non-finite values raises TargetError
    (the sampler counts such a pair as G = +inf).
    """
    return SVM(C, tol, max_iter)


# ----------------------------------------------------------------------------- KDE

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


# ----------------------------------------------------------------------------- user targets


def as_target(obj: Any) -> Any:
    """Check ``obj`` is callable (``target(database) -> value``) and return it unchanged."""
    if not callable(obj):
        raise TargetError(
            f"a target must be callable as target(database) -> value, got {type(obj).__name__}"
        )
    return obj
