"""Fast forms of an estimator target: many databases fitted at once, with the parameters the fit releases.

The sampler evaluates the target on thousands of neighbouring pairs; a scikit-learn ``fit`` costs about a
millisecond of input checks and solver set-up before any arithmetic, two per pair. For the models below
the target (:class:`~raydp.sklearn.EstimatorTarget`) also has a vectorised form that fits a whole block of
databases in a few numpy calls — ``batch(databases)`` and, for the logistic model, ``pair_batch(D, D′)``,
which the block function (:meth:`raydp.engine.blocks.PairJob.evaluate`) prefers over pair-by-pair fits.

**The rule: the G sampled is the G of the function released.** The release fits the target once on the
private data (``EstimatorTarget.__call__``); the fast forms must give the same parameters.

- ``Ridge`` (solver ``auto``, ``cholesky`` or ``svd``, a scalar ``alpha > 0``, ``positive=False``) and
  ``LinearRegression`` (``positive=False``): the released function stays scikit-learn's own fit. The fast
  form solves the same normal equations — centred as scikit-learn centres them, ``(XᵀX + αI) w = Xᵀy``,
  intercept ``ȳ − x̄·w`` — for every database of a block in one batched Cholesky solve (Jacobi-scaled).
  Both are backward-stable solves of one system, so they agree to the system's condition number times
  the machine epsilon. Each solve bounds that condition number (``p · ‖L⁻¹‖²_F`` of the scaled Cholesky
  factor, an upper bound); above :data:`COND_LIMIT` = 1e6 that database is fitted by scikit-learn itself,
  so the agreement stays within :data:`RTOL` = 1e-9 of the largest parameter (measured: ≤ 1e-12 on the
  tests' data sets, raw columns included). LinearRegression's lstsq also drops the directions whose
  singular value is below ``tol`` (1e-6) times the largest: a database whose bound does not keep them
  100 times clear of that cut (raw breast-cancer columns: s_min / s_max ≈ 1e-6) is fitted by scikit-learn
  too. ``tests/unit/test_sklearn_fast.py`` checks the blocks against separate fits.
- ``LogisticRegression``, binary, L2 (``l1_ratio=0``, finite ``C``), no ``class_weight``, a solver other
  than ``liblinear`` (which penalises the intercept): scikit-learn's own fit stops at ``tol`` (1e-4 by
  default) and its parameters then move with the solver's path by ~1e-3 relative (measured at n = 400,
  d = 17; on raw columns lbfgs stops at ``max_iter`` far from the optimum) — noise a warm start cannot
  reproduce. So here the released function itself is the *exact* minimiser of scikit-learn's objective,
  ``mean log-loss + ‖w‖² / (2·C·n)`` (intercept unpenalised): Newton's method with a backtracking line
  search, Jacobi-scaled Cholesky steps, stopped after a full step smaller than :data:`NEWTON_RTOL` = 1e-10
  relative (quadratic convergence leaves an error of its square; rounding leaves ~1e-13). The release, the
  preview and every pair use it (the target's identity says so: ``"solver"``), and its parameters agree with
  scikit-learn's at ``tol=1e-10`` to ~1e-6 (that solver's own tolerance). In a pair, D is solved from
  the same start as ``__call__`` and D′ is warm-started from D's solution with D's Hessian factor (chord
  steps, Newton when they stall): both are the same minimisers to ~1e-12, within :data:`RTOL`.

How Δ̂ accounts for it. With every parameter of both databases within ``RTOL · (1 + max|θ|)`` of the
released function's, a G differs from the G of two separate fits by at most twice that per released
coordinate (the triangle inequality: ``2 · RTOL · (1 + max|θ|) · p`` in ℓ1 for p coordinates), and an
order statistic moves by no more than the values it is taken from, so Δ̂ is that of the released
function to within the same amount: at most ~4e-8 for 18 coordinates of size 1 — measured ≤ 4e-11
(``jobs/results/sklearn_pair_speed.md``: 512 pairs, Δ̂ ≈ 0.9) — where Δ̂'s own spread from seed to
seed is 5–10% (sd/mean) at the fewest pairs and still ~0.5% at 20 000. As with the witness replay's
tolerance (:mod:`raydp.engine.witness`, 1e-6 relative) and the SVM's warm start (libsvm's tolerance,
:mod:`raydp.targets.svm_pair`), a Δ̂ smaller by a relative δ gives a release as private as one at
ε·(1 + δ). A block whose checks fail (a label outside the public fit's classes, a non-finite record) is
left to the pair-by-pair path, so a failing database fails exactly as its fit does.

Any other estimator, pipeline step or released attribute has no fast form: its pairs are fitted one
database at a time as before. :func:`disabled` turns the fast forms off for targets made inside it (the
benchmark ``jobs/sklearn_pair_speed.py`` measures the pairs per second with and without them, in one
process).
"""

from __future__ import annotations

import contextlib
import math
import warnings
from dataclasses import dataclass

import numpy as np

__all__ = ["FastForm", "fast_form", "disabled", "enabled", "RTOL", "COND_LIMIT", "NEWTON_RTOL"]

#: The stated tolerance: every released parameter of a fast form within RTOL times (1 + the largest parameter's
#: magnitude) of the fit's.
RTOL = 1e-9
#: Above this bound on the scaled normal equations' condition number a database is fitted by scikit-learn.
COND_LIMIT = 1e6
#: Newton stops after a full step whose largest coordinate is at most this, relative to (1 + that parameter's
#: magnitude).
NEWTON_RTOL = 1e-10
NEWTON_MAX_ITER = 100

_ENABLED = [True]


def enabled() -> bool:
    """Whether targets made now get their fast forms (see :func:`disabled`)."""
    return _ENABLED[0]


@contextlib.contextmanager
def disabled():
    """Targets made inside this block have no fast form: every database is fitted by scikit-learn, one at a
    time (the ``before`` of ``jobs/sklearn_pair_speed.py``; the logistic target then releases scikit-learn's
    own fit at its ``tol``)."""
    before = _ENABLED[0]
    _ENABLED[0] = False
    try:
        yield
    finally:
        _ENABLED[0] = before


#: Fitted scikit-learn transformers whose ``transform`` maps each row on its own (a stack of databases can
#: go through one call: the same rows out, bit for bit, as each database alone).
ROW_WISE = frozenset({
    "StandardScaler", "MinMaxScaler", "MaxAbsScaler", "RobustScaler", "Normalizer", "Binarizer", "OneHotEncoder",
    "OrdinalEncoder", "SimpleImputer", "KBinsDiscretizer", "PolynomialFeatures", "SplineTransformer",
    "QuantileTransformer", "PowerTransformer", "PCA", "TruncatedSVD",
})


def _is_clip(step) -> bool:
    """A :class:`~raydp.sklearn.PublicClip` (by name: its module imports the search, which imports this one)."""
    return type(step).__name__ == "PublicClip" and type(step).__module__ == "raydp.sklearn.suggest"


def _row_wise(step) -> bool:
    from .public import is_frozen

    if _is_clip(step):
        return True
    inner = step.estimator if is_frozen(step) else step
    return type(inner).__name__ in ROW_WISE and type(inner).__module__.startswith("sklearn.")


_RIDGE_SOLVERS = ("auto", "cholesky", "svd")
_LOGISTIC_SOLVERS = ("lbfgs", "newton-cg", "newton-cholesky", "sag", "saga")


def _fixed_steps(estimator):
    """``(leading transforms, final estimator, path prefix)``, or None when a leading step is fitted on the
    data (only frozen public steps, :class:`~raydp.sklearn.PublicClip` and ``passthrough`` are fixed maps)."""
    from sklearn.pipeline import Pipeline

    from .public import is_frozen

    if not isinstance(estimator, Pipeline):
        return (), estimator, ""
    if getattr(estimator, "transform_input", None) is not None:
        return None
    steps = []
    for _, step in estimator.steps[:-1]:
        if step is None or (isinstance(step, str) and step == "passthrough"):
            continue
        if is_frozen(step) or _is_clip(step):
            steps.append(step)
            continue
        return None
    name, final = estimator.steps[-1]
    return tuple(steps), final, name + "."


def fast_form(estimator, *, params, shapes, supervised: bool, classes, kinds) -> "FastForm | None":
    """The fast form of the target ``records -> params of estimator fitted``, or None (module docstring)."""
    if not enabled() or not supervised or kinds:
        return None
    split = _fixed_steps(estimator)
    if split is None:
        return None
    steps, final, prefix = split
    from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge

    kind = {Ridge: "ridge", LinearRegression: "least-squares", LogisticRegression: "logistic"}.get(type(final))
    if kind is None:
        return None
    slots = []
    for path, shape in zip(params, shapes):
        attr = path[len(prefix):] if path.startswith(prefix) else None
        if attr not in ("coef_", "intercept_"):
            return None
        slots.append((attr, tuple(shape)))
    p = final.get_params(deep=False)
    fit_intercept = p.get("fit_intercept")
    if not isinstance(fit_intercept, (bool, np.bool_)):
        return None
    if kind == "ridge":
        alpha = p.get("alpha")
        if (np.ndim(alpha) != 0 or isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.number))
                or not (math.isfinite(float(alpha)) and float(alpha) > 0) or p.get("positive")
                or p.get("solver") not in _RIDGE_SOLVERS):
            return None
        return FastForm(kind, steps, bool(fit_intercept), float(alpha), tuple(slots), None)
    if kind == "least-squares":
        # scikit-learn's lstsq drops the directions whose singular value is below tol times the largest (its
        # ``cond``): the normal equations give its answer only where none is near that cut (see linear())
        cut = p.get("tol", 0.0)
        if p.get("positive") or not isinstance(cut, (int, float, np.number)) or isinstance(cut, bool) or cut < 0:
            return None
        return FastForm(kind, steps, bool(fit_intercept), float(cut), tuple(slots), None)
    C = p.get("C")
    if (classes is None or len(classes) != 2 or p.get("class_weight") is not None or p.get("dual")
            or p.get("solver") not in _LOGISTIC_SOLVERS or p.get("penalty", "deprecated") != "deprecated"
            or p.get("l1_ratio", 0.0) not in (0, 0.0) or isinstance(C, bool)
            or not isinstance(C, (int, float, np.number)) or not (0 < float(C) < math.inf)):
        return None
    return FastForm(kind, steps, bool(fit_intercept), float(C), tuple(slots), tuple(float(c) for c in classes))


class _Failed(Exception):
    pass


@dataclass(frozen=True, eq=False)
class FastForm:
    """How a block of databases is fitted at once (see :func:`fast_form`). ``strength`` is Ridge's ``alpha``,
    LinearRegression's ``tol`` (its lstsq cut) or LogisticRegression's ``C``; ``slots`` say, in the released order, which of ``coef_``/``intercept_``
    each released path is and its shape; ``classes`` are the public fit's two labels (logistic)."""

    kind: str
    steps: tuple
    fit_intercept: bool
    strength: float
    slots: tuple
    classes: tuple | None

    def identity(self) -> dict | None:
        """What the released function is, when it is not scikit-learn's own fit (None: it is)."""
        if self.kind != "logistic":
            return None
        return {"exact": "Newton's method to the minimiser of scikit-learn's objective", "rtol": NEWTON_RTOL}

    # ---- features -------------------------------------------------------------------------
    def features(self, X: np.ndarray) -> np.ndarray:
        """Databases ``X`` (B, n, d) through the fixed leading steps: (B, n, p). Steps that map each row on its
        own (:data:`ROW_WISE`, :class:`~raydp.sklearn.PublicClip`) see every row of the stack in one call; any
        other (a ``FunctionTransformer`` may look at the whole database) sees one database at a time, as in
        the fit."""
        if not self.steps:
            return X
        B, n = X.shape[:2]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if all(_row_wise(step) for step in self.steps):
                Z = X.reshape(B * n, X.shape[-1])
                for step in self.steps:
                    Z = step.transform(Z)
                Z = np.asarray(Z, dtype=np.float64)
                if Z.ndim != 2 or Z.shape[0] != B * n:
                    raise _Failed("a public step changed the number of rows")
                return Z.reshape(B, n, Z.shape[1])
            out = []
            for db in X:
                Z = db
                for step in self.steps:
                    Z = step.transform(Z)
                out.append(np.asarray(Z, dtype=np.float64))
        Z = np.stack(out)
        if Z.ndim != 3 or Z.shape[1] != n:
            raise _Failed("a public step changed the number of rows")
        return Z

    def vectors(self, w: np.ndarray, b: np.ndarray) -> np.ndarray:
        """The released vectors (B, out_dim) from coefficients ``w`` (B, p) and intercepts ``b`` (B,)."""
        parts = []
        for attr, shape in self.slots:
            size = math.prod(shape)
            value = w if attr == "coef_" else b[:, None]
            if value.shape[1] != size:
                raise _Failed(f"{attr} of {value.shape[1]} values, the released shape is {shape}")
            parts.append(value)
        return np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0].copy()

    # ---- least squares and ridge ------------------------------------------------------------
    def linear(self, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(w, b, ok)`` for every database: the centred normal equations, solved by a Jacobi-scaled
        Cholesky factorisation; ``ok`` False where the condition bound exceeds :data:`COND_LIMIT` (or the
        system is singular), whose database the caller fits by scikit-learn instead."""
        B, n, p = X.shape
        if self.fit_intercept:
            xm, ym = X.mean(axis=1), y.mean(axis=1)
            Xc, yc = X - xm[:, None, :], y - ym[:, None]
        else:
            xm, ym = np.zeros((B, p)), np.zeros(B)
            Xc, yc = X, y
        XT = Xc.transpose(0, 2, 1)
        A = np.matmul(XT, Xc)
        rhs = np.matmul(XT, yc[:, :, None])[:, :, 0]
        diag = np.arange(p)
        if self.kind == "ridge":
            A[:, diag, diag] += self.strength
        d = A[:, diag, diag]
        ok = np.all(d > 0, axis=1) & np.all(np.isfinite(A), axis=(1, 2))
        s = 1.0 / np.sqrt(np.where(d > 0, d, 1.0))
        As = A * s[:, :, None] * s[:, None, :]
        As[~ok] = np.eye(p)
        L, good = _cholesky(As)
        ok &= good
        Linv = np.linalg.inv(L)
        bound = p * np.einsum("bij,bij->b", Linv, Linv)  # ≥ the scaled system's condition number
        ok &= bound <= COND_LIMIT
        if self.kind == "least-squares":
            # scikit-learn's lstsq keeps every direction only while s_min / s_max > its cut (tol, or the machine
            # precision times the larger dimension when tol is 0); cond(XᵀX) ≤ bound · max(d) / min(d) bounds
            # (s_max / s_min)², so the answers are the same one where that bound is 100 times clear of the cut
            cut = self.strength if self.strength > 0 else max(n, p) * np.finfo(np.float64).eps
            unscaled = bound * np.max(d, axis=1) / np.min(np.where(d > 0, d, np.inf), axis=1)
            ok &= np.sqrt(unscaled) * cut * 100.0 < 1.0
        u = np.matmul(Linv, (rhs * s)[:, :, None])
        w = np.matmul(Linv.transpose(0, 2, 1), u)[:, :, 0] * s
        b = ym - np.einsum("bp,bp->b", xm, w) if self.fit_intercept else np.zeros(B)
        ok &= np.all(np.isfinite(w), axis=1) & np.isfinite(b)
        return w, b, ok

    # ---- binary logistic regression -----------------------------------------------------------
    def _design(self, X: np.ndarray) -> np.ndarray:
        if not self.fit_intercept:
            return X
        return np.concatenate([X, np.ones(X.shape[:-1] + (1,))], axis=-1)

    def _reg(self, n: int, q: int) -> np.ndarray:
        lam = np.full(q, 1.0 / (self.strength * n))
        if self.fit_intercept:
            lam[-1] = 0.0
        return lam

    def _split(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.fit_intercept:
            return theta[:, :-1], theta[:, -1]
        return theta, np.zeros(theta.shape[0])

    def logistic(self, X: np.ndarray, y01: np.ndarray, start=None) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple]:
        """``(w, b, ok, (theta, factors))``: the exact minimiser of each database's objective (:func:`_minimise`)
        from ``start`` (the public fit's parameters; None: w = 0 and the labels' log-odds); ``ok`` False where
        it did not converge or a class is missing. ``theta`` and the Hessian ``factors`` warm-start a neighbour."""
        B, n, _ = X.shape
        Z = self._design(X)
        q = Z.shape[2]
        mean = y01.mean(axis=1)
        both = (mean > 0) & (mean < 1)
        if start is not None and np.shape(start) == (q,):
            theta = np.repeat(np.asarray(start, dtype=np.float64)[None, :], B, axis=0)
        else:
            theta = np.zeros((B, q))
            if self.fit_intercept:
                theta[both, -1] = np.log(mean[both] / (1.0 - mean[both]))
        theta, ok, factors = _minimise(Z, y01, self._reg(n, q), theta, both)
        w, b = self._split(theta)
        return w, b, ok, (theta, factors)

    def logistic_from(self, X: np.ndarray, y01: np.ndarray, warm: tuple, ok0: np.ndarray):
        """``(w, b, ok)`` of D′ warm-started from D's solution and Hessian factor (``warm`` from
        :meth:`logistic`): D′ shares n − 1 records with D, so the first steps are chord steps at a rate of
        about 1/n. The same minimiser as a cold solve, to rounding."""
        B, n, _ = X.shape
        Z = self._design(X)
        q = Z.shape[2]
        mean = y01.mean(axis=1)
        both = (mean > 0) & (mean < 1) & ok0
        theta0, factors = warm
        theta, ok, _ = _minimise(Z, y01, self._reg(n, q), theta0, both, factors)
        w, b = self._split(theta)
        return w, b, ok


# Databases solved together: their design matrices stay in the cache (a block of 300 was ~1.5x slower per
# database than chunks of 32 at n = 400, d = 17).
_CHUNK_BYTES = 1 << 21


def _minimise(Z, y, lam, theta, active, factors=None):
    """Newton–chord minimisation of the L2 logistic objective, chunk by chunk (:func:`_minimise_chunk`)."""
    B, n, q = Z.shape
    step = max(1, _CHUNK_BYTES // max(1, 8 * n * q))
    if B <= step:
        return _minimise_chunk(Z, y, lam, theta, active, factors)
    theta_out, ok_out = np.empty((B, q)), np.zeros(B, dtype=bool)
    L_out, s_out = np.empty((B, q, q)), np.empty((B, q))
    for i in range(0, B, step):
        j = slice(i, i + step)
        f = None if factors is None else (factors[0][j], factors[1][j])
        theta_out[j], ok_out[j], (L_out[j], s_out[j]) = _minimise_chunk(Z[j], y[j], lam, theta[j], active[j], f)
    return theta_out, ok_out, (L_out, s_out)


def _minimise_chunk(Z, y, lam, theta, active, factors=None):
    """``(theta, converged, (L, scale))`` for every database with ``active`` True.

    Each iteration takes the step −H⁻¹g with H the Hessian at the current iterate (Newton) or, while the
    steps shrink fast enough, the last factor kept (a chord step: one gradient, no Hessian); a step larger
    than 1e-2 relative is backtracked on the objective (Armijo). It stops after a full step of at most
    :data:`NEWTON_RTOL` relative taken with a fresh Hessian (quadratic convergence: the error left is of its
    square) or of at most NEWTON_RTOL / 10 with the steps shrinking at least twofold (linear: the error left
    is at most the step). ``factors`` (Cholesky factor and Jacobi scaling of a Hessian, per database) start
    it as chord steps (a neighbour's Hessian)."""
    B, n, q = Z.shape
    theta = np.array(theta, dtype=np.float64, copy=True)
    if factors is None:
        L, scale = np.broadcast_to(np.eye(q), (B, q, q)).copy(), np.ones((B, q))
        stale = np.ones(B, dtype=bool)  # no factor yet: the first step is Newton's
    else:
        L, scale = np.array(factors[0], copy=True), np.array(factors[1], copy=True)
        stale = np.zeros(B, dtype=bool)
    ok = np.zeros(B, dtype=bool)
    prev = np.full(B, np.inf)
    todo = np.flatnonzero(active)
    diag = np.arange(q)
    for _ in range(NEWTON_MAX_ITER):
        if not todo.size:
            break
        Za, ya, ta = Z[todo], y[todo], theta[todo]
        z = np.matmul(Za, ta[:, :, None])[:, :, 0]
        pr = _sigmoid(z)
        g = np.matmul((pr - ya)[:, None, :], Za)[:, 0, :] / n + lam * ta
        fresh = stale[todo]
        good = np.ones(todo.size, dtype=bool)
        if fresh.any():
            k = np.flatnonzero(fresh)
            Zk = Za[k]
            H = np.matmul(Zk.transpose(0, 2, 1), Zk * (pr[k] * (1.0 - pr[k]) / n)[:, :, None])
            H[:, diag, diag] += lam
            d = H[:, diag, diag]
            s = 1.0 / np.sqrt(np.where(d > 0, d, 1.0))
            Lk, good_k = _cholesky(H * s[:, :, None] * s[:, None, :])
            L[todo[k]], scale[todo[k]] = Lk, s
            good[k] = good_k
        step = -_solve_factor(L[todo], scale[todo], g)
        rel = np.max(np.abs(step) / (1.0 + np.abs(ta)), axis=1)
        good &= np.isfinite(rel)
        t = np.ones(todo.size)
        trial = ta + step
        far = good & (rel > 1e-2)
        if far.any():
            f0 = np.mean(np.logaddexp(0.0, z) - ya * z, axis=1) + 0.5 * np.sum(lam * ta * ta, axis=1)
            slope = np.sum(g * step, axis=1)
            bad = far & (slope < 0)
            good &= ~(far & ~(slope < 0))  # not a descent direction: the factor is useless, Newton next
            for _ in range(60):
                idx = np.flatnonzero(bad)
                if not idx.size:
                    break
                trial[idx] = ta[idx] + t[idx, None] * step[idx]
                f1 = _objective(Za[idx], ya[idx], trial[idx], lam)
                bad[idx[f1 <= f0[idx] + 1e-4 * t[idx] * slope[idx]]] = False
                t[bad] *= 0.5
            good &= ~bad
        theta[todo] = np.where(good[:, None], trial, ta)
        ratio = rel / prev[todo]
        finished = good & (t == 1.0) & np.where(fresh, rel <= NEWTON_RTOL, (rel <= 0.1 * NEWTON_RTOL) & (ratio <= 0.5))
        ok[todo[finished]] = True
        # the next step is Newton's where this one failed, was damped, or the steps shrank too slowly
        slow = ~good | (t < 1.0) | (ratio > 0.25)
        retry = ~good & fresh  # a fresh Hessian that failed: give up on that database
        stale[todo] = slow
        prev[todo] = np.where(good, rel, np.inf)
        todo = todo[~finished & ~retry]
    return theta, ok, (L, scale)


def _cholesky(As: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cholesky factors of a stack; a matrix that is not positive definite gets the identity and False."""
    try:
        return np.linalg.cholesky(As), np.ones(As.shape[0], dtype=bool)
    except np.linalg.LinAlgError:
        L = np.empty_like(As)
        good = np.ones(As.shape[0], dtype=bool)
        for i in range(As.shape[0]):
            try:
                L[i] = np.linalg.cholesky(As[i])
            except np.linalg.LinAlgError:
                L[i] = np.eye(As.shape[1])
                good[i] = False
        return L, good


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 + 0.5 * np.tanh(0.5 * z)


def _objective(Z, y, theta, lam):
    z = np.matmul(Z, theta[:, :, None])[:, :, 0]
    return np.mean(np.logaddexp(0.0, z) - y * z, axis=1) + 0.5 * np.sum(lam * theta * theta, axis=1)


def _solve_factor(L: np.ndarray, scale: np.ndarray, g: np.ndarray) -> np.ndarray:
    """H⁻¹ g for H = S⁻¹ L Lᵀ S⁻¹ (S = diag(scale))."""
    u = np.linalg.solve(L, (g * scale)[:, :, None])
    return np.linalg.solve(L.transpose(0, 2, 1), u)[:, :, 0] * scale
