"""The fast forms of an estimator target (raydp.sklearn.fast): a block of databases fitted at once, with the
parameters the released function gives — the G sampled is the G of the function released.

Ridge and LinearRegression: the released function is scikit-learn's own fit; the batched normal equations
agree with it within RTOL (1e-9) of the largest parameter. LogisticRegression (binary, L2): the released
function is the exact minimiser of scikit-learn's objective (Newton); D′ warm-started from D agrees with a
cold solve within RTOL, and both with scikit-learn's fit at tol=1e-10 to that solver's own tolerance.
``python jobs/sklearn_pair_speed.py`` measures the pairs per second with and without the fast forms.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.cluster import KMeans
from sklearn.datasets import load_breast_cancer, make_classification, make_regression
from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer, StandardScaler
from sklearn.svm import LinearSVC

import raydp
from raydp import SamplerOptions, oracles
from raydp.sklearn import PrivateEstimator, PublicClip, fast
from raydp.sklearn.fast import RTOL
from raydp.testing.cold import Cold


def _regression(n=1200, d=17, seed=0):
    X, y = make_regression(n, d, noise=10.0, random_state=seed)
    return np.column_stack([X * np.linspace(0.5, 30.0, d) + 5.0, y])


def _classification(n=1200, d=17, seed=0):
    X, y = make_classification(n, d, n_informative=8, random_state=seed)
    return np.column_stack([X * 3.0 + 1.0, y])


def _cancer():
    X, y = load_breast_cancer(return_X_y=True)  # raw columns: areas in the thousands next to ratios near 0.1
    return np.column_stack([X, y])


def target_for(estimator, public, n):
    pe = PrivateEstimator(estimator, oracle=oracles.bootstrap(public), epsilon=1.0, gamma=0.1)
    return pe._skeleton(pe._checked_estimator(), oracles.bootstrap(public), n, public.shape[1] - 1, True).target


def pairs(public, n, count, seed=1):
    records = oracles.bootstrap(public).sample(np.random.default_rng(seed), count * (n + 1))
    records = records.reshape(count, n + 1, -1)
    return records[:, :n], np.concatenate([records[:, : n - 1], records[:, n:]], axis=1)


def cold(target, stack):
    return np.stack([target(db) for db in stack])


def _scale(values):
    return 1.0 + np.abs(values).max(axis=1, keepdims=True)


LINEAR = [
    ("ridge", lambda: Ridge(alpha=1.0), _regression),
    ("ridge, no intercept", lambda: Ridge(alpha=3.0, fit_intercept=False), _regression),
    ("least squares", lambda: LinearRegression(), _regression),
    ("ridge, raw breast-cancer columns", lambda: Ridge(alpha=1.0), _cancer),
    ("least squares, raw breast-cancer columns", lambda: LinearRegression(), _cancer),
    ("public scaler + ridge", lambda: make_pipeline(StandardScaler(), Ridge(alpha=10.0)), _regression),
]


@pytest.mark.parametrize("name,make,data", LINEAR, ids=[c[0] for c in LINEAR])
def test_linear_blocks_agree_with_scikit_learns_own_fits(name, make, data):
    public = data()
    t = target_for(make(), public, 200)
    assert callable(getattr(t, "batch", None)) and getattr(t, "pair_batch", None) is None
    d, d_prime = pairs(public, 200, 24)
    fa, fb = t.batch(d), t.batch(d_prime)
    ca, cb = cold(t, d), cold(t, d_prime)  # __call__: scikit-learn's fit, the released function
    assert fa.shape == ca.shape == (24, t.output_dim)
    assert np.all(np.abs(fa - ca) <= RTOL * _scale(ca)) and np.all(np.abs(fb - cb) <= RTOL * _scale(cb))
    g_fast, g_cold = np.abs(fa - fb).sum(axis=1), np.abs(ca - cb).sum(axis=1)
    assert np.all(np.abs(g_fast - g_cold) <= 2 * RTOL * t.output_dim * _scale(ca)[:, 0])


LOGISTIC = [
    ("logistic", lambda: LogisticRegression(), _classification),
    ("logistic C=100", lambda: LogisticRegression(C=100.0), _classification),
    ("logistic, no intercept", lambda: LogisticRegression(fit_intercept=False), _classification),
    ("logistic, raw breast-cancer columns", lambda: LogisticRegression(C=0.5), _cancer),
    ("public scaler + clip + logistic",
     lambda: make_pipeline(StandardScaler(), PublicClip(3.0), LogisticRegression(C=0.1)), _cancer),
]


@pytest.mark.parametrize("name,make,data", LOGISTIC, ids=[c[0] for c in LOGISTIC])
def test_logistic_pairs_warm_started_agree_with_cold_exact_fits_and_scikit_learn(name, make, data):
    public = data()
    t = target_for(make(), public, 200)
    assert callable(getattr(t, "pair_batch", None))
    d, d_prime = pairs(public, 200, 16)
    fa, fb = t.pair_batch(d, d_prime)  # D′ warm-started from D's solution and Hessian factor
    ca, cb = cold(t, d), cold(t, d_prime)  # the released function: each database solved on its own
    assert np.all(np.abs(fa - ca) <= RTOL * _scale(ca)) and np.all(np.abs(fb - cb) <= RTOL * _scale(cb))
    g_fast, g_cold = np.abs(fa - fb).sum(axis=1), np.abs(ca - cb).sum(axis=1)
    assert np.all(np.abs(g_fast - g_cold) <= 2 * RTOL * t.output_dim * _scale(ca)[:, 0])
    # and it is scikit-learn's model: its own fit to a tight tol lands on the same minimiser, to that solver's
    # tolerance (at the default tol=1e-4 it stops ~1e-3 away: the noise the exact form removes)
    final = clone(t.estimator)  # the public steps as the target has them: fitted on public records, frozen
    model = final.steps[-1][1] if hasattr(final, "steps") else final
    model.set_params(tol=1e-10, max_iter=100_000)
    X, y = t.split(d[0])
    vec = t.vector(final.fit(X, y))
    assert np.max(np.abs(ca[0] - vec)) <= 1e-4 * (1 + np.max(np.abs(vec)))


@pytest.mark.parametrize("make,data", [(lambda: make_pipeline(StandardScaler(), LogisticRegression()), _classification),
                                       (lambda: Ridge(alpha=1.0), _regression)], ids=["pipeline", "ridge"])
def test_the_sampled_g_is_the_g_of_the_released_function(make, data):
    public = data()
    t = target_for(make(), public, 150)
    kw = dict(oracle=oracles.bootstrap(public), n=150, m=64,
              options=SamplerOptions(seed=3, block_size=16, keep_sample=True, backend="local", progress=False))
    fast_est = raydp.estimate_sensitivity(t, **kw)
    slow_est = raydp.estimate_sensitivity(Cold(t), **kw)
    assert fast_est.failures == slow_est.failures == 0
    tol = 4 * RTOL * t.output_dim * max(1.0, float(np.max(np.abs(t(public[:150])))))
    assert np.max(np.abs(fast_est.sample - slow_est.sample)) <= tol
    assert abs(fast_est.sensitivity - slow_est.sensitivity) <= tol
    assert fast_est.target == slow_est.target  # the same identity: the same function


def test_a_failing_database_fails_its_pair_whichever_path_evaluates_it():
    public = _classification()
    t = target_for(LogisticRegression(), public, 40)
    d, d_prime = pairs(public, 40, 4)
    d_prime[2, :, -1] = d_prime[2, 0, -1]  # one class only: the fit cannot take it
    fa, fb = t.pair_batch(d, d_prime)
    assert np.isfinite(fa).all() and np.isfinite(fb[[0, 1, 3]]).all() and not np.isfinite(fb[2]).any()
    with pytest.raises(raydp.errors.TargetError, match="single class"):
        t(d_prime[2])


def test_identity_names_the_exact_solver_and_the_switch_turns_every_fast_form_off():
    public = _classification()
    t = target_for(LogisticRegression(), public, 100)
    assert "solver" in t.identity()["params"]
    ridge = target_for(Ridge(), _regression(), 100)
    with fast.disabled():
        slow = target_for(LogisticRegression(), public, 100)
        slow_ridge = target_for(Ridge(), _regression(), 100)
    assert getattr(slow, "batch", None) is None and getattr(slow, "pair_batch", None) is None
    assert "solver" not in slow.identity()["params"]  # scikit-learn's own lbfgs fit: another function
    assert getattr(slow_ridge, "batch", None) is None
    assert slow_ridge.identity() == ridge.identity()  # Ridge's released function is scikit-learn's either way


@pytest.mark.parametrize("make", [
    lambda: LinearSVC(), lambda: Ridge(solver="sag"), lambda: LogisticRegression(class_weight="balanced"),
    lambda: LogisticRegression(solver="liblinear"), lambda: make_pipeline(StandardScaler(), Ridge()),
], ids=["linear svc", "ridge sag", "class weights", "liblinear", "a scaler fitted on the private data"])
def test_no_fast_form_where_it_would_not_be_the_fit(make):
    public = _classification()
    pe = PrivateEstimator(make(), oracle=oracles.bootstrap(public), epsilon=1.0, gamma=0.1, public_steps=None)
    t = pe._skeleton(pe._checked_estimator(), oracles.bootstrap(public), 100, public.shape[1] - 1, True).target
    assert getattr(t, "batch", None) is None and getattr(t, "pair_batch", None) is None


def _centre(X):
    return X - X.mean(axis=0)  # looks at the whole database: not a map of each row on its own


def test_a_public_step_that_looks_at_the_whole_database_sees_one_database_at_a_time():
    public = _regression()
    t = target_for(make_pipeline(FunctionTransformer(_centre), Ridge()), public, 100)
    assert callable(getattr(t, "batch", None))
    d, _ = pairs(public, 100, 6)
    ca = cold(t, d)
    assert np.all(np.abs(t.batch(d) - ca) <= RTOL * _scale(ca))


def test_no_fast_form_for_a_multiclass_or_unsupervised_model():
    X, y = make_classification(600, 6, n_informative=4, n_classes=3, random_state=0)
    assert getattr(target_for(LogisticRegression(), np.column_stack([X, y]), 100), "pair_batch", None) is None
    pe = PrivateEstimator(KMeans(2, n_init=1), oracle=oracles.bootstrap(X), epsilon=1.0, gamma=0.1)
    km = pe._skeleton(pe._checked_estimator(), oracles.bootstrap(X), 100, 6, False).target
    assert getattr(km, "batch", None) is None
