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


# Amortised pair evaluation (SVM.pair): an exact primal active-set solver for the same problem,
#   min_{w, b} ½‖w‖² + c Σᵢ max(0, 1 − yᵢ(w·xᵢ + b)),   c = C/n, b unpenalised,
# warm-started on D′ from D's exact solution (neighbours share n − 1 records, so D's partition of
# the records into "hinge active" / "on the margin" / "beyond the margin" is nearly D′'s).
# Each iteration solves the equality-constrained QP of the current partition (a (d+1+|W|)-square
# KKT system, W = records held on the margin), then does an exact line search of the piecewise-
# quadratic objective along the step, flipping the records it crosses; a record whose multiplier
# leaves [0, c] is released from W. The result is certified by the KKT conditions (tolerance
# _AS_KKT_TOL); anything uncertified falls back to libsvm, so pair() never returns an unchecked fit.
#
# The bias is not always unique: when no record is strictly on the margin with 0 < α < c (on
# Figure-6 data, d = 2, that is the usual case) every b in an interval [t_(n₊), t_(n₊+1)] is optimal
# (tᵢ = yᵢ − w·xᵢ sorted, n₊ = number of +1 labels). libsvm then returns the interval's midpoint;
# _svm_mid_b reproduces that rule (and returns the unique b when the interval is a point).
_AS_KKT_TOL = 1e-9
# Cold active-set solve of D is tried only when the all-at-bound start w₀ = c·Σ yᵢxᵢ leaves at most
# this fraction of records beyond the margin: then nearly every α is at its bound, libsvm's SMO
# needs ~n/2 iterations (its slowest case) and the active set converges in a few steps. Otherwise
# D is fitted by libsvm exactly as __call__ does and only polished.
_AS_COLD_MAX_BEYOND = 0.2


class _ActiveSetFailed(Exception):
    pass


def _svm_yz(db: np.ndarray) -> np.ndarray:
    """Rows yᵢ·(xᵢ, 1), so that the margin of record i is ``YZ[i] @ (w, b)``."""
    y = db[:, 0]
    return y[:, None] * np.concatenate([db[:, 1:], np.ones((db.shape[0], 1))], axis=1)


def _svm_mid_b(YZ: np.ndarray, w: np.ndarray) -> float:
    """Midpoint of argmin_b of the objective with w fixed (libsvm's choice when b is not unique)."""
    y = YZ[:, -1]
    thr = y - y * (YZ[:, :-1] @ w)  # b at which record i sits on its margin
    npos = int(np.count_nonzero(y > 0))
    part = np.partition(thr, (npos - 1, npos))
    return 0.5 * (float(part[npos - 1]) + float(part[npos]))


def _svm_sides(YZ: np.ndarray, v: np.ndarray, eta: float = 0.0) -> np.ndarray:
    """+1: hinge active (margin < 1), −1: beyond the margin, 0: on the margin within ``eta``."""
    m = YZ @ v
    return np.where(m < 1.0 - eta, 1, np.where(m > 1.0 + eta, -1, 0)).astype(np.int8)


def _svm_active_set(YZ: np.ndarray, c: float, v: np.ndarray, side: np.ndarray, max_iter: int):
    """Exact solution ``(v, side)`` from the start ``(v, side)``; raises _ActiveSetFailed."""
    p = YZ.shape[1]
    v = np.array(v, dtype=np.float64)
    side = np.array(side, dtype=np.int8)
    W = [int(i) for i in np.flatnonzero(side == 0)]
    try:
        if len(W) > p:
            raise _ActiveSetFailed("more records on the margin than dimensions")
        if W:  # put v exactly on the working set's margins (minimum-norm correction)
            A = YZ[W]
            v = v + A.T @ np.linalg.solve(A @ A.T, 1.0 - A @ v)
        P = np.eye(p)
        P[-1, -1] = 0.0
        beta = np.zeros(0)
        for _ in range(max_iter):
            k = len(W)
            if k == 0:  # b is free: minimise over it exactly, then sides from the margins
                v[-1] = _svm_mid_b(YZ, v[:-1])
                side = _svm_sides(YZ, v)
            act = side == 1
            g = act.astype(np.float64) @ YZ
            if k == 0:
                s = np.append(c * g[:-1] - v[:-1], 0.0)
            else:
                A = YZ[W]
                K = np.zeros((p + k, p + k))
                K[:p, :p] = P
                K[:p, p:] = -A.T
                K[p:, :p] = A
                sol = np.linalg.solve(K, np.concatenate([c * g, np.ones(k)]))
                s = sol[:p] - v
                beta = sol[p:]
            m = YZ @ v
            delta = YZ @ s
            d0 = float(v[:-1] @ s[:-1] - c * delta[act].sum())  # slope at t = 0+ (δ = 0 on W)
            if not d0 < -1e-14 * max(1.0, float(v[:-1] @ v[:-1])):
                # no descent left on this partition: optimal unless a multiplier is out of [0, c]
                if k == 0:
                    beta = np.zeros(0)
                    break
                viol = np.maximum(-beta, beta - c)
                a = int(np.argmax(viol))
                if viol[a] <= _AS_KKT_TOL * c:
                    break
                j = W.pop(a)
                side[j] = -1 if beta[a] < 0 else 1
                continue
            # exact line search of the convex piecewise-quadratic objective along s
            a2 = float(s[:-1] @ s[:-1])
            cand = np.flatnonzero(((side == 1) & (delta > 0)) | ((side == -1) & (delta < 0)))
            tb = np.maximum((1.0 - m[cand]) / delta[cand], 0.0)
            order = np.argsort(tb, kind="stable")
            tb, cand = tb[order], cand[order]
            jumps = c * np.abs(delta[cand])
            cum = np.cumsum(jumps)
            before = d0 + a2 * tb + (cum - jumps)  # slope just before each breakpoint
            q = int(np.argmax(before + jumps >= 0)) if cand.size and before[-1] + jumps[-1] >= 0 else cand.size
            if q < cand.size and before[q] <= 0:
                t, stop = float(tb[q]), int(cand[q])
            else:
                if a2 <= 0:
                    raise _ActiveSetFailed("flat direction")
                t, stop = -(d0 + (float(cum[q - 1]) if q else 0.0)) / a2, -1
            crossed = cand[:q]
            side[crossed] = -side[crossed]
            v = v + t * s
            if stop >= 0:
                if len(W) >= p:
                    raise _ActiveSetFailed("working set full")
                side[stop] = 0
                W.append(stop)
        else:
            raise _ActiveSetFailed("iteration budget exhausted")
    except np.linalg.LinAlgError as exc:
        raise _ActiveSetFailed(str(exc)) from None
    if not np.all(np.isfinite(v)):
        raise _ActiveSetFailed("non-finite iterate")
    # certificate: multipliers in [0, c] consistent with the margins, and stationarity
    full = np.where(side == 1, c, 0.0)
    if W:
        full[W] = beta
    v[-1] = _svm_mid_b(YZ, v[:-1])
    m = YZ @ v
    tol = _AS_KKT_TOL
    ok = (np.all(full >= -tol * c) and np.all(full <= c * (1 + tol))
          and np.all(full[m < 1 - tol] >= c * (1 - tol)) and np.all(full[m > 1 + tol] <= tol * c))
    r = full @ YZ
    r[:-1] -= v[:-1]
    if not ok or np.max(np.abs(r)) > 1e-8 * max(1.0, float(np.max(np.abs(v[:-1])))):
        raise _ActiveSetFailed("KKT certificate failed")
    return v, _svm_sides(YZ, v, tol)


def _svm_clean(database: Any) -> np.ndarray | None:
    """The database as float64 if SVM.__call__ would accept it, else None (let __call__ raise)."""
    try:
        db = np.asarray(database, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    if db.ndim != 2 or db.shape[0] < 2 or db.shape[1] < 2 or not np.all(np.isfinite(db)):
        return None
    y = db[:, 0]
    pos = y == 1.0
    if not np.all(pos | (y == -1.0)) or pos.all() or not pos.any():
        return None
    return db


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

    def pair(self, database: Any, database_prime: Any) -> tuple[np.ndarray, np.ndarray]:
        """``(f(D), f(D′))`` for neighbouring databases, faster than two calls (the sampler's
        amortised pair evaluation, see :meth:`raydp.blocks.PairJob._g_pairwise`).

        D′ is solved by an exact active-set method warm-started from D's solution; D itself by the
        same method when nearly all records are inside the margin (libsvm's slowest case), else by
        libsvm as in ``__call__`` followed by an exact polish. Both results are certified by the
        KKT conditions; whatever is not certified is fitted by ``__call__`` instead. The outputs
        solve the same problem as ``__call__`` with its bias convention, so they agree with it to
        libsvm's tolerance (ℓ1 ≤ ~1e-6 on Figure-5/6 data); the identity is therefore unchanged.
        Invalid databases raise exactly what ``__call__`` raises. With a lowered ``max_iter``
        (below the default) pair() is just two ``__call__``s, so that libsvm's iteration cap and
        its TargetError apply to every database exactly as without pairs.
        """
        db, dbp = _svm_clean(database), _svm_clean(database_prime)
        if db is None or dbp is None or db.shape != dbp.shape or self.max_iter < DEFAULT_SVM_MAX_ITER:
            return self(database), self(database_prime)
        n, p = db.shape[0], db.shape[1]
        c = self.C / n
        YZ = _svm_yz(db)
        solved = None
        v0 = np.append(c * YZ[:, :-1].sum(axis=0), 0.0)  # every α at its bound
        v0[-1] = _svm_mid_b(YZ, v0[:-1])
        start = _svm_sides(YZ, v0)
        if np.count_nonzero(start == -1) <= _AS_COLD_MAX_BEYOND * n:
            try:
                solved = _svm_active_set(YZ, c, v0, start, max_iter=20 + 4 * p)
            except _ActiveSetFailed:
                pass
        if solved is None:
            fitted = self(database)
            try:  # libsvm's answer is within its tolerance: polish it to the exact solution
                solved = _svm_active_set(YZ, c, fitted, _svm_sides(YZ, fitted, 1e-6), max_iter=20 + 4 * p)
            except _ActiveSetFailed:
                return fitted, self(database_prime)
        v, side = solved
        changed = np.flatnonzero(np.any(db != dbp, axis=1))
        YZp = YZ.copy()
        YZp[changed] = _svm_yz(dbp[changed])
        side = side.copy()
        side[changed] = np.where(YZp[changed] @ v < 1.0, 1, -1)
        try:
            vp, _ = _svm_active_set(YZp, c, v, side, max_iter=50 + 4 * p)
        except _ActiveSetFailed:
            vp = self(database_prime)
        return v, vp

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

    The sampler evaluates neighbouring pairs with :meth:`SVM.pair`: an exact active-set solver of
    the same problem, warm-started on D′ from D's solution, which agrees with two plain calls
    to libsvm's tolerance (ℓ1 ≤ ~1.5e-6 on Figure-5/6 data, n = 1000) and is ≈ 20× faster at d = 2,
    ≈ 1.3–1.7× at d = 8 … 64 (``python tests/test_pair_warm_start.py`` measures it).
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
