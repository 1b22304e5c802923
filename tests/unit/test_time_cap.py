"""A time budget is a cap (issue 36): a fit stays within about 1.2 times its ``time_budget``, or says before it
samples — with its estimate and what would fit — that even the fewest pairs cost more. ``time_budget=None``
is the way to sample them whatever they take."""

from __future__ import annotations

import time

import numpy as np
import pytest
from sklearn.base import BaseEstimator, RegressorMixin

import raydp
from raydp import SamplerOptions, oracles
from raydp.sampler import TimeBudgetError
from raydp.sklearn import PrivateEstimator, PrivateSearchCV


class SleepyRegressor(RegressorMixin, BaseEstimator):
    """Ridge regression whose every fit first sleeps ``seconds``: a model as slow as one wants."""

    def __init__(self, seconds=0.05, alpha=1.0):
        self.seconds = seconds
        self.alpha = alpha

    def fit(self, X, y):
        time.sleep(self.seconds)
        X, y = np.asarray(X, dtype=float), np.asarray(y, dtype=float)
        xm, ym = X.mean(axis=0), y.mean()
        Xc = X - xm
        self.coef_ = np.linalg.solve(Xc.T @ Xc + self.alpha * np.eye(X.shape[1]), Xc.T @ (y - ym))
        self.intercept_ = float(ym - xm @ self.coef_)
        return self

    def predict(self, X):
        return np.asarray(X, dtype=float) @ self.coef_ + self.intercept_


def _data(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(600, 3))
    y = X @ np.array([1.0, 2.0, 3.0]) + rng.normal(size=600)
    return np.column_stack([X[:400], y[:400]]), X[400:], y[400:]


OPT = SamplerOptions(seed=0, backend="local", progress=False)


@pytest.fixture
def sampled(monkeypatch):
    """Every Δ̂ the estimator samples (none, when it refuses before it samples)."""
    import raydp.sklearn.estimator as est_mod

    calls = []
    real = est_mod.estimate_sensitivity

    def recording(*args, **kwargs):
        calls.append(kwargs["options"].time_budget)
        return real(*args, **kwargs)

    monkeypatch.setattr(est_mod, "estimate_sensitivity", recording)
    return calls


def test_a_slow_model_with_a_5_s_budget_is_refused_before_it_samples(sampled):
    public, X, y = _data()
    t0 = time.perf_counter()
    with pytest.raises(TimeBudgetError) as info:
        PrivateEstimator(SleepyRegressor(0.05), oracle=oracles.bootstrap(public), epsilon=1.0, gamma=0.05,
                         time_budget=5, options=OPT).fit(X, y)
    assert time.perf_counter() - t0 < 6.0
    assert sampled == []  # said before any pair was sampled
    text = str(info.value)
    assert "time budget of 5 s" in text and "1,305 pairs" in text and "nothing was sampled" in text
    assert "a time budget of at least" in text and "time_budget=None" in text


def test_tune_and_the_search_are_refused_before_their_pilots_sample(sampled):
    public, X, y = _data()
    t0 = time.perf_counter()
    with pytest.raises(TimeBudgetError, match="time budget of 5 s"):
        PrivateEstimator(SleepyRegressor(0.05), oracle=oracles.bootstrap(public), epsilon=1.0, gamma=0.05,
                         time_budget=5, tune=True, options=OPT).fit(X, y)
    with pytest.raises(TimeBudgetError, match="this search of 2 candidates"):
        PrivateSearchCV(SleepyRegressor(0.05), {"alpha": [1.0, 10.0]}, oracle=oracles.bootstrap(public), epsilon=1.0,
                        gamma=0.05, time_budget=5, options=OPT).fit(X, y)
    assert time.perf_counter() - t0 < 6.0 and sampled == []


def test_a_budget_that_buys_the_plan_is_kept():
    public, X, y = _data()
    t0 = time.perf_counter()
    pe = PrivateEstimator(SleepyRegressor(0.002), oracle=oracles.bootstrap(public), epsilon=1.0, gamma=0.3,
                          time_budget=3, options=OPT).fit(X, y)
    assert time.perf_counter() - t0 < 1.2 * 3
    sizing = pe.estimate_.sizing
    assert sizing["budget_seconds"] < 3 and sizing["estimated_seconds"] <= sizing["budget_seconds"]


def test_time_budget_none_samples_the_fewest_pairs_whatever_they_take():
    public, X, y = _data()
    pe = PrivateEstimator(SleepyRegressor(0.0), oracle=oracles.bootstrap(public), epsilon=1.0, gamma=0.3,
                          time_budget=None, options=OPT).fit(X, y)
    assert pe.estimate_.plan.m == raydp.make_plan(gamma=0.3).m and pe.estimate_.sizing is None


def test_the_sampler_refuses_a_plan_its_budget_cannot_buy_and_says_what_would():
    def slow_mean(records):
        time.sleep(0.01)
        return np.asarray(records, dtype=float).mean(axis=0)

    t0 = time.perf_counter()
    with pytest.raises(TimeBudgetError) as info:
        raydp.estimate_sensitivity(slow_mean, oracles.normal(dim=1), 20, gamma=0.05,
                                   options=SamplerOptions(seed=0, backend="local", time_budget=2.0))
    assert time.perf_counter() - t0 < 1.0  # the probe and a warm call, no pair of the sample
    text = str(info.value)
    assert "1,305 pairs" in text and "gamma=0." in text and "slots" in text and "time_budget=None" in text
    # an m asked for is a plan too: refused the same way when the budget cannot buy it
    with pytest.raises(TimeBudgetError, match="asked for"):
        raydp.estimate_sensitivity(slow_mean, oracles.normal(dim=1), 20, m=2000, k=2000,
                                   options=SamplerOptions(seed=0, backend="local", time_budget=2.0))
