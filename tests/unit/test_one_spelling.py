"""One way to say each thing (issue 38, points 2 and 3): a mechanism is a name or an object, with ε and δ, at every
entry point; ``raydp.plan`` is the module; the command line's names are the Python names; PrivateSearchCV speaks like
PrivateEstimator; what fit() reuses from preview() is a parameter; cv_results_ has scikit-learn's keys.
Small plans (γ = 0.3: m = k = 24 pairs) and fixed seeds."""

from __future__ import annotations

import importlib
import inspect
import warnings

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

import raydp
from raydp import SamplerOptions, oracles, targets
from raydp.cli import make_parser
from raydp.errors import InvalidArgumentError
from raydp.sklearn import PrivateEstimator, PrivateSearchCV

OPT = SamplerOptions(seed=3, progress=False, backend="local")
PLAN = dict(gamma=0.3, time_budget=None)


# ---- raydp.plan is the module ------------------------------------------------------------------------------

def test_raydp_plan_is_the_module_and_make_plan_the_function():
    import raydp.plan as plan_module  # `import a.b as c` reads the attribute b of a: the function hid the module

    assert inspect.ismodule(raydp.plan) and plan_module is importlib.import_module("raydp.plan")
    assert plan_module.plan_for(0.05, 100).m == 1305
    assert raydp.make_plan(gamma=0.05).m == 1305 and "make_plan" in raydp.__all__
    assert not callable(raydp.plan)


# ---- a mechanism: a name or an object, ε and δ the same way everywhere --------------------------------------

def test_every_entry_point_takes_mechanism_epsilon_and_delta():
    for fn in (raydp.estimate_sensitivity, raydp.sample_then_respond, PrivateEstimator.__init__,
               PrivateSearchCV.__init__):
        params = inspect.signature(fn).parameters
        assert {"mechanism", "epsilon", "delta"} <= set(params), fn.__qualname__
    for command in ("estimate", "release"):
        sub = make_parser()._subparsers._group_actions[0].choices[command]
        flags = {s for action in sub._actions for s in action.option_strings}
        assert {"--mechanism", "--mechanism-args", "--epsilon", "--delta"} <= flags, command


def test_a_mechanism_name_samples_as_its_object():
    kw = dict(n=50, gamma=0.3, seed=1, progress=False, backend="local")
    by_object = raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), mechanism=raydp.Gaussian(1, 1e-5),
                                           **kw)
    by_name = raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), mechanism="gaussian", **kw)
    assert by_name.sensitivity == by_object.sensitivity and by_name.norm == "l2"
    with pytest.raises(InvalidArgumentError, match="give ε and δ once"):
        raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), mechanism=raydp.Laplace(1.0),
                                   epsilon=2.0, **kw)
    with pytest.raises(InvalidArgumentError, match="must be a name"):
        raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), mechanism="cauchy", **kw)


def test_a_release_takes_a_name_with_its_privacy_or_an_object_that_agrees():
    data = np.random.default_rng(1).exponential(1.0, 50)
    est = raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), n=50, gamma=0.3, seed=1,
                                     progress=False, backend="local")
    r = raydp.sample_then_respond(data, targets.mean(), "laplace", epsilon=0.5, estimate=est)
    assert (r.epsilon, r.delta, r.mechanism["name"]) == (0.5, 0.0, "laplace")
    same = raydp.sample_then_respond(data, targets.mean(), raydp.Laplace(0.5), epsilon=0.5, delta=0, estimate=est)
    assert same.epsilon == 0.5
    for mechanism, kw, match in (("laplace", {}, "needs epsilon"),
                                 ("laplace", {"epsilon": 1.0, "delta": 1e-5}, "delta applies to the gaussian"),
                                 ("gaussian", {"epsilon": 1.0}, "needs delta > 0"),
                                 ("exponential", {"epsilon": 1.0}, "raydp.Exponential"),
                                 (raydp.Laplace(0.5), {"epsilon": 1.0}, "give ε and δ once")):
        with pytest.raises(InvalidArgumentError, match=match):
            raydp.sample_then_respond(data, targets.mean(), mechanism, estimate=est, **kw)


def test_the_estimator_takes_an_object_with_its_own_delta():
    oracle = oracles.bootstrap(np.column_stack([np.random.default_rng(0).normal(size=(40, 2)), np.arange(40) % 2]))
    make = lambda **kw: PrivateEstimator(LogisticRegression(), oracle=oracle, epsilon=1.0, **kw)  # noqa: E731
    gauss = raydp.Gaussian(1.0, 1e-5)
    assert make(mechanism=gauss)._mechanisms() == [gauss]  # delta left out: the object's
    assert make(mechanism=gauss, delta=1e-5)._mechanisms() == [gauss]
    assert [m.name for m in make(mechanism="gaussian", delta=1e-5)._mechanisms()] == ["gaussian"]
    assert [m.name for m in make()._mechanisms()] == ["laplace"]  # delta None: ε-DP
    with pytest.raises(InvalidArgumentError, match="make them agree"):
        make(mechanism=gauss, delta=1e-6)._mechanisms()


# ---- the command line says what Python says -------------------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["release", "--estimate", "s", "--data", "d", "--target", "t", "--gamma", "0.1", "--epsilon", "1"],
    ["release", "--store", "s", "--data", "d", "--target", "t", "--gamma", "0.1", "--epsilon", "1", "--label", "x"],
    ["release", "--store", "s", "--data", "d", "--target", "t", "--gamma", "0.1", "--epsilon", "1",
     "--budget-epsilon", "1"],
    ["ledger", "create", "l.json", "--budget-epsilon", "1"],
    ["estimate", "--target", "t", "--oracle", "o", "--n", "5", "--out", "s"],
])
def test_the_other_names_are_gone(argv):
    with pytest.raises(InvalidArgumentError, match="unrecognized arguments|required"):
        make_parser().parse_args(argv)


def test_the_ledger_label_has_its_python_name():
    a = make_parser().parse_args(["release", "--store", "s", "--data", "d", "--target", "t", "--gamma", "0.1",
                                  "--epsilon", "1", "--ledger", "l.json", "--ledger-label", "q1"])
    assert a.ledger_label == "q1" and "ledger_label" in inspect.signature(raydp.sample_then_respond).parameters


# ---- PrivateSearchCV speaks like PrivateEstimator --------------------------------------------------------------

def test_search_takes_on_useless_and_has_a_statement():
    from raydp.sklearn import UtilityError, UtilityWarning  # noqa: F401 - importable where the estimators are

    search = PrivateSearchCV(LogisticRegression(), {"C": [0.1, 1.0]}, oracle=None, epsilon=1.0, on_useless="refuse")
    assert search.get_params()["on_useless"] == "refuse"
    assert search._candidate({"C": 0.1}).on_useless == "refuse"
    assert callable(getattr(PrivateSearchCV, "statement", None))


# ---- scikit-learn conventions ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def two_class():
    rng = np.random.default_rng(0)

    def rows(size):
        y = rng.integers(0, 2, size)
        return np.column_stack([rng.normal(y[:, None] - 0.5, 0.5, (size, 2)), y])

    public, private = rows(400), rows(120)
    return oracles.bootstrap(public), private[:, :2], private[:, 2]


def test_reuse_preview_is_a_parameter(two_class):
    oracle, X, y = two_class
    make = lambda **kw: PrivateEstimator(LogisticRegression(), oracle=oracle, epsilon=1.0, **PLAN,  # noqa: E731
                                         options=OPT, **kw)
    assert make().get_params()["reuse_preview"] is True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", raydp.sklearn.UtilityWarning)
        reused = make()
        reused.preview(len(X), repeats=2)
        assert reused.fit(X, y).estimate_ is reused.preview_estimate_
        own = make(reuse_preview=False)
        own.preview(len(X), repeats=2)
        assert own.fit(X, y).estimate_ is not own.preview_estimate_
        assert own.estimate_.sensitivity == own.preview_estimate_.sensitivity  # one seed, one Δ̂: sampled again
    with pytest.raises(InvalidArgumentError, match="reuse_preview must be True or False"):
        make(reuse_preview="yes").fit(X, y)


def test_random_state_seeds_the_sampler_never_the_noise(two_class):
    oracle, X, y = two_class
    fits = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", raydp.sklearn.UtilityWarning)
        for _ in range(2):
            fits.append(PrivateEstimator(LogisticRegression(), oracle=oracle, epsilon=1.0, **PLAN, random_state=7,
                                         options=SamplerOptions(progress=False, backend="local")).fit(X, y))
    a, b = fits
    assert a.estimate_.seed == b.estimate_.seed == 7 and a.estimate_.sensitivity == b.estimate_.sensitivity
    assert a.estimate_.sensitivity > 0 and not np.array_equal(a.release_.value, b.release_.value)  # fresh noise
    assert "never seeds the noise" in " ".join(PrivateEstimator.__doc__.split())


def test_cv_results_follow_scikit_learns_keys():
    import pandas as pd

    from raydp.sklearn.search import _results

    grid = [{"C": 0.1, "public_steps": "auto"}, {"C": 1.0}]
    r = _results(grid, [(0.8, 0.1, 0.9, 0.5, 2.0, None), (np.nan,) * 5 + ("failed",)])
    assert {"params", "param_C", "param_public_steps", "mean_test_score", "std_test_score",
            "mean_nonprivate_test_score", "mean_trivial_test_score", "sensitivity", "error"} <= set(r)
    assert r["param_public_steps"].mask.tolist() == [False, True] and r["param_C"].tolist() == [0.1, 1.0]
    assert len(pd.DataFrame(r)) == 2
