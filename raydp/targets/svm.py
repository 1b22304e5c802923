"""The linear SVM target (paper's consistent formulation), fitted with libsvm.

:class:`SVM` fits one database with ``sklearn.svm.SVC`` (libsvm); :meth:`SVM.pair` fits a pair
of neighbouring databases with the exact warm-started active-set solver of
:mod:`raydp.targets.svm_pair`, falling back to libsvm whenever that solver cannot certify its answer.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from raydp.errors import TargetError
from raydp.validation import check_int

from ._common import _database, _real
from .svm_pair import (
    _AS_COLD_MAX_BEYOND,
    _ActiveSetFailed,
    _svm_active_set,
    _svm_clean,
    _svm_mid_b,
    _svm_sides,
    _svm_yz,
)

__all__ = ["svm", "SVM", "DEFAULT_SVM_TOL", "DEFAULT_SVM_MAX_ITER"]

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
        self.max_iter = check_int(max_iter, "max_iter", min_value=1, error=TargetError, expected="a positive integer")

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
        amortised pair evaluation, see :meth:`raydp.engine.blocks.PairJob._g_pairwise`).

        D′ is solved by an exact active-set method warm-started from D's solution; D itself by the
        same method when nearly all records are inside the margin (libsvm's slowest case), else by
        libsvm as in ``__call__`` followed by an exact polish. Both results are certified by the
        KKT conditions; whatever is not certified is fitted by ``__call__`` instead. The outputs
        solve the same problem as ``__call__`` with its bias convention, so they agree with it to
        libsvm's tolerance (ℓ1 ≤ ~1e-6 on Figure-5/6 data); the identity is therefore unchanged.
        Invalid databases raise exactly what ``__call__`` raises. With a lowered ``max_iter``
        (below the default) pair() is just two calls of ``__call__``, so that libsvm's iteration cap and
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
    ≈ 1.3–1.7× at d = 8 … 64 (``python tests/unit/test_pair_warm_start.py`` measures it).
    """
    return SVM(C, tol, max_iter)
