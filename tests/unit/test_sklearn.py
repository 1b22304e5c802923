"""raydp.sklearn.PrivateEstimator on real data (bundled with scikit-learn), and jobs/sklearn_utility.py.

Sampling runs use small plans (γ = 0.3: m = k = 24 pairs) and fixed seeds, so every Δ̂ here is a
fixed number. The release noise comes from OpenDP and cannot be seeded: assertions about released
values are either exact (the model predicts with what was released) or hold with a stated
probability (see each test).
"""

from __future__ import annotations

import math
import pickle

import numpy as np
import pyarrow.parquet as pq
import pytest
from sklearn import datasets
from sklearn.base import clone
from sklearn.cluster import KMeans
from sklearn.decomposition import PCA
from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge
from sklearn.mixture import GaussianMixture
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC, LinearSVC
from sklearn.tree import DecisionTreeClassifier

import raydp
from job_util import run_job
from raydp import SamplerOptions, oracles
from raydp.errors import BudgetError, EstimateMismatchError, InvalidArgumentError, OracleError, StoreError
from raydp.sklearn import EstimatorTarget, PrivateEstimator, fitted_float_params
from raydp.sklearn.estimator import _PUBLIC_SEED, PILOT_PAIRS_UNBUDGETED
from paths import JOBS

FAST = dict(gamma=0.3, time_budget=None)  # m = k = 24 pairs (the fewest: no time budget)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def split(loader, *, regression=False, seed=0):
    """(public rows [X | y], private X, private y): halves of a shuffled data set, scaled with public statistics
    and every row clipped to ‖x‖ ≤ 1 (a per-record map)."""
    X, y = loader(return_X_y=True)
    order = np.random.default_rng(seed).permutation(len(X))
    X, y = X[order].astype(float), y[order].astype(float)
    half = len(X) // 2
    sd = X[:half].std(axis=0)
    sd[sd == 0] = 1.0
    Z = (X - X[:half].mean(axis=0)) / sd
    Z /= np.quantile(np.linalg.norm(Z[:half], axis=1), 0.95)
    Z /= np.maximum(np.linalg.norm(Z, axis=1, keepdims=True), 1.0)
    if regression:
        y = (y - y[:half].mean()) / y[:half].std()
    return np.column_stack([Z[:half], y[:half]]), Z[half:], y[half:]


@pytest.fixture(scope="module")
def cancer():
    return split(datasets.load_breast_cancer)


@pytest.fixture(scope="module")
def diabetes():
    return split(datasets.load_diabetes, regression=True)


@pytest.fixture(scope="module")
def wine():
    return split(datasets.load_wine)


def linear_vector(model) -> np.ndarray:
    return np.concatenate([np.ravel(model.coef_), np.ravel(model.intercept_)])


# ----------------------------------------------------------------------------- one line, every model, both backends

MODELS = {
    "logistic": (lambda: LogisticRegression(C=0.5), "cancer"),
    "linear_svm": (lambda: LinearSVC(C=0.05), "cancer"),
    "ridge": (lambda: Ridge(alpha=10.0), "diabetes"),
    "linear_regression": (lambda: LinearRegression(), "diabetes"),
    "multinomial_logistic": (lambda: LogisticRegression(C=0.5), "wine"),
}


@pytest.fixture(scope="module")
def local_fits(request):
    """Each model fitted once in process (seed 3); reused by the Ray test to compare Δ̂ bit for bit."""
    out = {}
    for name, (make, data) in MODELS.items():
        public, X, y = request.getfixturevalue(data)
        pe = PrivateEstimator(make(), oracle=oracles.bootstrap(public), epsilon=1.0, **FAST, options=SamplerOptions(seed=3))
        out[name] = pe.fit(X, y)
    return out


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.slow
def test_every_linear_model_is_private_in_one_line(name, local_fits, request):
    make, data = MODELS[name]
    public, X, y = request.getfixturevalue(data)
    pe = local_fits[name]
    est, rel = pe.estimate_, pe.release_
    assert est.failures == 0 and 0 < est.sensitivity < math.inf and est.norm == "l1"
    assert pe.released_params_ == ["coef_", "intercept_"]
    assert (rel.epsilon, rel.delta, rel.gamma) == (1.0, 0.0, 0.3) and rel.mechanism["name"] == "laplace"
    assert rel.statement().startswith("(1, 0, 0.3)-random differential privacy")
    # the released model holds exactly the released vector ...
    released = linear_vector(pe.estimator_)
    np.testing.assert_array_equal(released, rel.value)
    # ... which is not the private fit (Laplace noise is continuous: equality has probability 0)
    private = clone(make()).fit(X, y)
    assert released.shape == linear_vector(private).shape
    assert np.all(released != linear_vector(private))
    # predictions are the released model's, computed here by hand from the released vector
    scores = X @ pe.estimator_.coef_.T + pe.estimator_.intercept_
    if name in ("ridge", "linear_regression"):
        np.testing.assert_allclose(pe.predict(X), scores.ravel(), rtol=1e-12, atol=1e-12)
        assert pe.score(X, y) == pytest.approx(1 - np.sum((y - scores.ravel()) ** 2) / np.sum((y - y.mean()) ** 2))
    else:
        np.testing.assert_allclose(pe.decision_function(X), scores.ravel() if scores.shape[1] == 1 else scores)
        labels = pe.classes_[(scores.ravel() > 0).astype(int)] if scores.shape[1] == 1 else pe.classes_[scores.argmax(1)]
        np.testing.assert_array_equal(pe.predict(X), labels)
        assert pe.score(X, y) == pytest.approx(np.mean(labels == y))
    if name == "multinomial_logistic":
        assert pe.estimator_.coef_.shape == (3, X.shape[1]) and list(pe.classes_) == [0, 1, 2]
        np.testing.assert_allclose(pe.predict_proba(X).sum(axis=1), 1.0)


@pytest.mark.slow
@pytest.mark.ray
def test_every_linear_model_on_ray_gives_the_same_sensitivity(ray_session, local_fits, request):
    for name, (make, data) in MODELS.items():
        public, X, y = request.getfixturevalue(data)
        pe = PrivateEstimator(make(), oracle=oracles.bootstrap(public), epsilon=1.0, **FAST, options=SamplerOptions(seed=3, backend="ray"))
        pe.fit(X, y)
        assert pe.estimate_.sensitivity == local_fits[name].estimate_.sensitivity, name  # bit for bit
        assert pe.estimate_.identity == local_fits[name].estimate_.identity
        np.testing.assert_array_equal(linear_vector(pe.estimator_), pe.release_.value)


def test_large_epsilon_recovers_the_non_private_model(cancer):
    """ε = 1e6 with Δ̂ < 1: a coordinate's Laplace noise (scale Δ̂/ε < 1e-6) exceeds 1e-3 with probability
    exp(-1000) per coordinate, so the assertions below fail with probability < 31·e^-1000."""
    public, X, y = cancer
    Xtr, ytr, Xte, yte = X[:200], y[:200], X[200:], y[200:]
    pe = PrivateEstimator(LogisticRegression(C=0.5), oracle=oracles.bootstrap(public), epsilon=1e6, **FAST, options=SamplerOptions(seed=0))
    pe.fit(Xtr, ytr)
    assert pe.estimate_.sensitivity < 1.0
    # the released function of a binary logistic model is the exact minimiser of scikit-learn's objective
    # (raydp.sklearn.fast): scikit-learn's own fit to a tight tol is the non-private model it stands for
    plain = LogisticRegression(C=0.5, tol=1e-10, max_iter=10_000).fit(Xtr, ytr)
    assert np.max(np.abs(linear_vector(pe.estimator_) - linear_vector(plain))) < 1e-3
    assert plain.score(Xte, yte) > 0.9 and pe.score(Xte, yte) >= plain.score(Xte, yte) - 0.03


@pytest.mark.slow
def test_one_line_from_a_pipeline_and_nothing_private_left_in_the_model(cancer):
    public, X, y = cancer
    oracle = oracles.bootstrap(public)
    pipe = make_pipeline(StandardScaler(), LogisticRegression(C=0.5))
    pe = PrivateEstimator(pipe, oracle=oracle, epsilon=2.0, delta=1e-5, public_steps=None, **FAST,
                          options=SamplerOptions(seed=1)).fit(X, y)  # every step private: the behaviour before issue 21
    assert pe.released_params_ == ["logisticregression.coef_", "logisticregression.intercept_",
                                   "standardscaler.mean_", "standardscaler.scale_"]
    assert pe.estimate_.norm == "l2" and pe.release_.mechanism == {
        "name": "gaussian", "params": {"epsilon": 2.0, "delta": 1e-5, "calibration": "analytic"}}
    model = pe.estimator_
    values = np.concatenate([np.ravel(model[1].coef_), np.ravel(model[1].intercept_), model[0].mean_, model[0].scale_])
    np.testing.assert_array_equal(values, pe.release_.value)
    assert pe.predict(X).shape == (len(X),)
    # every fitted float attribute that was not released is the public skeleton's, never the private fit's
    skeleton = clone(pipe).set_params(logisticregression__random_state=0)
    public_rows = oracle.sample(np.random.default_rng(_PUBLIC_SEED), len(X))
    skeleton.fit(public_rows[:, :-1], public_rows[:, -1].astype(int))
    private = clone(pipe).fit(X, y)
    unreleased = set(fitted_float_params(model)) - set(pe.released_params_)
    assert "standardscaler.var_" in unreleased
    for path in unreleased:
        step, attr = path.split(".")
        np.testing.assert_array_equal(getattr(model.named_steps[step], attr), getattr(skeleton.named_steps[step], attr))
    assert not np.array_equal(model[0].var_, private[0].var_)
    assert model[0].n_samples_seen_ == len(X) and model[1].n_iter_ == skeleton[1].n_iter_


# ----------------------------------------------------------------------------- sklearn conventions


def test_clone_get_set_params_and_pickle(cancer, tmp_path):
    public, X, y = cancer
    pe = PrivateEstimator(LogisticRegression(C=0.5), oracle=oracles.bootstrap(public), epsilon=1.0, **FAST, options=SamplerOptions(seed=2))
    params = pe.get_params()
    assert params["estimator__C"] == 0.5 and params["epsilon"] == 1.0 and params["options"].seed == 2
    twin = clone(pe)
    assert twin is not pe and twin.get_params()["estimator__C"] == 0.5
    assert not hasattr(twin, "estimate_")
    twin.set_params(estimator__C=0.25, epsilon=3.0)
    assert twin.estimator.C == 0.25 and pe.estimator.C == 0.5  # the clone's estimator is its own
    twin.fit(X, y)
    assert twin.release_.epsilon == 3.0 and twin.estimator_.C == 0.25
    assert twin.target_.identity()["params"]["estimator"]["C"] == 0.25
    # a fitted estimator pickles with its released model; the copy predicts the same
    copy = pickle.loads(pickle.dumps(twin))
    np.testing.assert_array_equal(copy.predict(X), twin.predict(X))
    np.testing.assert_array_equal(copy.release_.value, twin.release_.value)
    assert copy.estimate_.sensitivity == twin.estimate_.sensitivity
    # the user's estimator is never fitted or modified
    assert not hasattr(pe.estimator, "coef_") and pe.estimator.random_state is None


SKLEARN_CHECKS = [
    # the checks about the estimator API; the others draw their own random data (widths, label sets) that
    # a fixed public oracle cannot describe, which PrivateEstimator refuses by design
    "check_no_attributes_set_in_init", "check_estimator_repr", "check_get_params_invariance", "check_set_params",
    "check_do_not_raise_errors_in_init_or_set_params", "check_estimators_unfitted", "check_fit_check_is_fitted",
    "check_n_features_in", "check_requires_y_none", "check_fit1d", "check_valid_tag_types", "check_mixin_order",
    "check_estimator_sparse_tag", "check_estimator_sparse_array", "check_estimator_sparse_matrix",
    "check_supervised_y_no_nan", "check_non_transformer_estimators_n_iter", "check_decision_proba_consistency",
    "check_parameters_default_constructible", "check_classifiers_one_label_sample_weights",
]


@pytest.mark.parametrize("check", SKLEARN_CHECKS)
def test_sklearn_estimator_checks(check):
    import warnings

    from sklearn.utils import estimator_checks

    rng = np.random.default_rng(0)
    public = np.column_stack([rng.normal(size=(300, 2)), rng.integers(0, 2, 300)])
    pe = PrivateEstimator(LogisticRegression(), oracle=oracles.bootstrap(public), epsilon=1.0, gamma=0.3, time_budget=None,
                          options=SamplerOptions(seed=0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        getattr(estimator_checks, check)("PrivateEstimator", pe)


def test_predictions_check_their_input(cancer):
    public, X, y = cancer
    pe = PrivateEstimator(Ridge(), oracle=oracles.bootstrap(public), epsilon=1.0, **FAST, options=SamplerOptions(seed=0)).fit(X, y)
    assert pe.n_features_in_ == X.shape[1] and not hasattr(pe, "feature_names_in_")
    with pytest.raises(InvalidArgumentError, match="X has 29 features, the model was fitted with 30"):
        pe.predict(X[:, 1:])
    assert pe.predict(X[:1]).shape == (1,)   # one row is enough to predict
    with pytest.raises(InvalidArgumentError, match="X must be numeric"):
        pe.predict(np.full(X.shape, "a"))
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        clone(pe).predict(X)


def test_feature_names_of_a_dataframe(cancer):
    pd = pytest.importorskip("pandas")
    public, X, y = cancer
    cols = [f"f{i}" for i in range(X.shape[1])]
    pe = PrivateEstimator(Ridge(), oracle=oracles.bootstrap(public), epsilon=1.0, **FAST, options=SamplerOptions(seed=0))
    pe.fit(pd.DataFrame(X, columns=cols), y)
    assert list(pe.feature_names_in_) == cols
    np.testing.assert_array_equal(pe.predict(pd.DataFrame(X, columns=cols)), pe.predict(X))
    with pytest.raises(InvalidArgumentError, match="columns differ"):
        pe.predict(pd.DataFrame(X[:, ::-1], columns=cols[::-1]))


# ----------------------------------------------------------------------------- store, estimate, ledger, mechanisms


def test_store_reuses_a_stored_sensitivity_and_refuses_other_parameters(cancer, tmp_path):
    public, X, y = cancer
    oracle = oracles.bootstrap(public)
    store = tmp_path / "delta"
    first = PrivateEstimator(LogisticRegression(C=0.5), oracle=oracle, epsilon=1.0, **FAST, options=SamplerOptions(store=str(store))).fit(X, y)
    shards = {p.name: p.stat().st_mtime_ns for p in store.rglob("*.parquet")}
    assert shards and (store / "meta.json").is_file()
    # seed=None again: the stored run's seed is reused, no pair is evaluated again
    again = PrivateEstimator(LogisticRegression(C=0.5), oracle=oracle, epsilon=0.5, **FAST, options=SamplerOptions(store=str(store))).fit(X, y)
    assert again.estimate_.seed == first.estimate_.seed
    assert again.estimate_.sensitivity == first.estimate_.sensitivity
    assert {p.name: p.stat().st_mtime_ns for p in store.rglob("*.parquet")} == shards
    # the same store for other estimator parameters, or another n, is refused
    with pytest.raises(StoreError, match="target"):
        PrivateEstimator(LogisticRegression(C=0.25), oracle=oracle, epsilon=1.0, **FAST, options=SamplerOptions(store=str(store))).fit(X, y)
    with pytest.raises(StoreError, match="n: stored 285"):
        PrivateEstimator(LogisticRegression(C=0.5), oracle=oracle, epsilon=1.0, **FAST, options=SamplerOptions(store=str(store))).fit(X[:200],
                                                                                                              y[:200])


def test_estimate_is_reused_in_memory_and_checked(cancer):
    public, X, y = cancer
    oracle = oracles.bootstrap(public)
    first = PrivateEstimator(LogisticRegression(C=0.5), oracle=oracle, epsilon=1.0, **FAST, options=SamplerOptions(seed=5)).fit(X, y)
    reuse = PrivateEstimator(LogisticRegression(C=0.5), oracle=oracle, epsilon=3.0, estimate=first.estimate_, **FAST)
    assert reuse.fit(X, y).estimate_ is first.estimate_ and reuse.release_.epsilon == 3.0
    with pytest.raises(EstimateMismatchError, match="target"):   # other estimator parameters
        PrivateEstimator(LogisticRegression(C=1.0), oracle=oracle, epsilon=1.0, estimate=first.estimate_,
                         **FAST).fit(X, y)
    with pytest.raises(EstimateMismatchError, match="n=285 records, the data has n=100"):
        PrivateEstimator(LogisticRegression(C=0.5), oracle=oracle, epsilon=1.0, estimate=first.estimate_,
                         **FAST).fit(X[:100], y[:100])
    with pytest.raises(EstimateMismatchError, match="oracle"):
        PrivateEstimator(LogisticRegression(C=0.5), oracle=oracles.bootstrap(public[:200]), epsilon=1.0,
                         estimate=first.estimate_, **FAST).fit(X, y)
    with pytest.raises(EstimateMismatchError, match="plan"):
        PrivateEstimator(LogisticRegression(C=0.5), oracle=oracle, epsilon=1.0, estimate=first.estimate_,
                         gamma=0.2).fit(X, y)
    with pytest.raises(EstimateMismatchError, match="l1"):   # Laplace Δ̂ for a Gaussian release
        PrivateEstimator(LogisticRegression(C=0.5), oracle=oracle, epsilon=1.0, delta=1e-6, estimate=first.estimate_,
                         mechanism="gaussian", **FAST).fit(X, y)
    # with the mechanism left to choose, the estimate's norm chooses: a Laplace release at (ε, δ)
    auto = PrivateEstimator(LogisticRegression(C=0.5), oracle=oracle, epsilon=1.0, delta=1e-6,
                            estimate=first.estimate_, **FAST).fit(X, y)
    assert auto.release_.mechanism["name"] == "laplace" and auto.release_.delta == 0.0


def test_ledger_is_charged_and_refuses_when_spent(cancer, tmp_path):
    public, X, y = cancer
    path = tmp_path / "ledger.json"
    ledger = raydp.Ledger.create(str(path), epsilon_total=1.0)
    oracle = oracles.bootstrap(public)
    pe = PrivateEstimator(LogisticRegression(C=0.5), oracle=oracle, epsilon=0.6, ledger=ledger, ledger_label="q1", **FAST, options=SamplerOptions(seed=1)).fit(X, y)
    assert ledger.spent() == (0.6, 0.0)
    assert pe.release_.ledger["composed"]["epsilon"] == 0.6 and pe.release_.ledger["composed"]["gamma"] == 0.3
    entry = ledger.entries()[0]
    assert entry["label"] == "q1" and entry["sensitivity"] == pe.estimate_.sensitivity
    with pytest.raises(BudgetError, match="exceeded"):
        PrivateEstimator(LogisticRegression(C=0.5), oracle=oracle, epsilon=0.6, estimate=pe.estimate_,
                         ledger=str(path), **FAST).fit(X, y)
    assert ledger.spent() == (0.6, 0.0) and len(ledger.entries()) == 1
    assert "coef" not in path.read_text()  # no released value in the ledger


def test_with_a_ledger_value_checks_are_charged_not_free_probes(cancer, tmp_path):
    """NaN in X or a label the oracle never draws: without a ledger a helpful error before anything is spent;
    with a ledger the check would answer a question about the private values for free, so the fit fails inside
    the charged release instead — counted, and the same words whatever the reason."""
    public, X, y = cancer
    oracle = oracles.bootstrap(public)
    ledger = raydp.Ledger.create(str(tmp_path / "l.json"), epsilon_total=2.0)
    est = PrivateEstimator(LogisticRegression(C=0.5), oracle=oracle, epsilon=0.5, **FAST, options=SamplerOptions(seed=1)).fit(X, y).estimate_
    nan = X.copy()
    nan[0, 0] = np.nan
    messages = set()
    for bad_X, bad_y in ((nan, y), (X, np.where(y > 0, 7.0, 0.0))):
        with pytest.raises(raydp.RaydpError) as failed:
            PrivateEstimator(LogisticRegression(C=0.5), oracle=oracle, epsilon=0.5, estimate=est, ledger=ledger,
                             **FAST).fit(bad_X, bad_y)
        messages.add((type(failed.value), str(failed.value).split(" (ledger entry")[0]))
    assert len(messages) == 1 and "withheld" in next(iter(messages))[1]
    assert ledger.spent() == (1.0, 0.0) and [e["status"] for e in ledger.entries()] == ["failed", "failed"]


def test_mechanism_choice(cancer):
    public, X, y = cancer
    oracle = oracles.bootstrap(public)
    make = lambda **kw: PrivateEstimator(Ridge(), oracle=oracle, **FAST, **kw, options=SamplerOptions(seed=0))  # noqa: E731
    assert make(epsilon=2.0).fit(X, y).release_.mechanism["name"] == "laplace"
    assert make(epsilon=2.0, delta=1e-5, mechanism="gaussian").fit(X, y).estimate_.norm == "l2"  # analytic: ε ≥ 1
    # with δ > 0 and the mechanism left to choose, both are sampled and previewed; the better one releases
    auto = make(epsilon=2.0, delta=1e-5).fit(X, y)
    previews = auto.mechanism_choice_["previews"]
    assert set(previews) == {"laplace", "gaussian"}
    assert auto.release_.mechanism["name"] == max(previews, key=lambda name: previews[name]["mean"])
    assert auto.estimate_.norm == {"laplace": "l1", "gaussian": "l2"}[auto.release_.mechanism["name"]]
    assert f"{auto.release_.mechanism['name']} chosen" in auto.statement()
    # chosen on public pilot pairs, before any Δ̂ is sampled: one sampling, of the chosen mechanism's Δ̂, the same
    # bit for bit as that mechanism asked for by name (the pilot's draws are its own, the sampler's are untouched)
    pilot = auto.mechanism_choice_["pilot"]
    # no budget: a small fixed pilot, never more pairs than the sample's m (24 at γ = 0.3)
    assert pilot["pairs"] == min(PILOT_PAIRS_UNBUDGETED, 24) and pilot["failed"] == 0
    named = make(epsilon=2.0, delta=1e-5, mechanism=auto.release_.mechanism["name"]).fit(X, y)
    assert named.estimate_.sensitivity == auto.estimate_.sensitivity and named.estimate_.plan == auto.estimate_.plan
    own = make(epsilon=0.5, delta=1e-5, mechanism=raydp.Gaussian(0.5, 1e-5, calibration="classic")).fit(X, y)
    assert own.release_.mechanism["params"]["calibration"] == "classic"
    with pytest.raises(InvalidArgumentError, match="make them agree"):
        make(epsilon=1.0, mechanism=raydp.Laplace(0.5)).fit(X, y)
    with pytest.raises(InvalidArgumentError, match="every coordinate"):
        make(epsilon=1.0, mechanism=raydp.Exponential(1.0, responses=[0, 1])).fit(X, y)
    with pytest.raises(raydp.MechanismError, match="epsilon"):
        make(epsilon=-1.0).fit(X, y)
    with pytest.raises(InvalidArgumentError, match="delta"):
        make(epsilon=1.0, delta=1.5).fit(X, y)


def test_auto_samples_one_sensitivity_and_the_pilot_spends_part_of_the_budget(cancer, monkeypatch):
    import raydp.sklearn.estimator as est_mod

    public, X, y = cancer
    sampled = []
    real = est_mod.estimate_sensitivity

    def counting(*args, **kwargs):
        sampled.append((kwargs["mechanism"].name, kwargs["options"].time_budget))
        return real(*args, **kwargs)

    monkeypatch.setattr(est_mod, "estimate_sensitivity", counting)
    pe = PrivateEstimator(Ridge(), oracle=oracles.bootstrap(public), epsilon=2.0, delta=1e-5, gamma=0.3,
                          time_budget=2.0, options=SamplerOptions(seed=0, backend="local")).fit(X, y)
    choice = pe.mechanism_choice_
    assert [name for name, _ in sampled] == [choice["mechanism"]]  # one Δ̂, of the chosen mechanism only
    # what the fit's clock had left after the pilot, less the release still to come, went to that Δ̂
    budget = sampled[0][1]
    assert 0 < budget < 2.0 - choice["pilot"]["seconds"]
    assert pe.estimate_.sizing["budget_seconds"] == budget and 20 <= choice["pilot"]["pairs"] <= 200
    assert set(choice["previews"]) == {"gaussian", "laplace"} and "pilot pairs" in choice["reason"]


def test_auto_with_a_store_keeps_the_chosen_mechanisms_sample_in_its_own_folder(cancer, tmp_path):
    public, X, y = cancer
    oracle = oracles.bootstrap(public)
    make = lambda: PrivateEstimator(Ridge(), oracle=oracle, epsilon=2.0, delta=1e-5, **FAST,  # noqa: E731
                                    options=SamplerOptions(seed=0, store=str(tmp_path / "s")))
    first = make().fit(X, y)
    chosen = first.mechanism_choice_["mechanism"]
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == [chosen]  # only the chosen one was sampled
    again = make().fit(X, y)  # the pilot chooses the same (public, seeded) and the stored sample is reused
    assert again.mechanism_choice_["mechanism"] == chosen and again.estimate_.sensitivity == first.estimate_.sensitivity
    assert raydp.load_estimate(str(tmp_path / "s" / chosen)).sensitivity == first.estimate_.sensitivity


def test_a_risky_release_warns_and_the_interval_stays_in_the_metric_range():
    from raydp.sklearn.utility import UtilityPreview

    def preview(scores, trivial, metric="accuracy"):
        return UtilityPreview(n=100, sensitivity=1.0, mechanism="laplace", metric=metric, trivial=trivial,
                              nonprivate=(0.95, 0.01), repeats=len(scores),
                              rows=[dict(epsilon=1.0, mean=float(np.mean(scores)), sd=float(np.std(scores, ddof=1)),
                                         scores=list(scores))])

    wide = preview(np.linspace(0.55, 0.99, 20), trivial=0.6)
    assert not wide.useless(1.0) and wide.risky(1.0)  # useful on average, but 9 in 10 reach below trivial
    low, high = wide.interval(1.0)
    assert 0.0 <= low < 0.6 and high == 1.0  # widened past 1, stopped at accuracy's top
    assert wide.interval(1.0, widen=1.0)[1] < 1.0
    narrow = preview(np.linspace(0.85, 0.95, 20), trivial=0.6)
    assert not narrow.useless(1.0) and not narrow.risky(1.0)
    r2 = preview(np.linspace(-3.0, 0.9, 20), trivial=0.0, metric="R²")
    assert r2.interval(1.0)[0] < -3.0 and r2.interval(1.0)[1] == 1.0  # R² has no floor


# ----------------------------------------------------------------------------- bad input


def test_bad_input_names_what_to_fix(cancer):
    public, X, y = cancer
    oracle = oracles.bootstrap(public)

    def fit(estimator, X=X, y=y, oracle=oracle, **kw):
        return PrivateEstimator(estimator, oracle=oracle, epsilon=1.0, **FAST, **kw, options=SamplerOptions(seed=0)).fit(X, y)

    with pytest.raises(InvalidArgumentError, match="estimator must be a scikit-learn estimator with a fit"):
        fit(object())
    with pytest.raises(InvalidArgumentError, match=r"an instance such as LogisticRegression\(\)"):
        fit(LogisticRegression)
    # oracle records whose width does not match X's (+1 for the label)
    with pytest.raises(OracleError, match="draws 30 columns, but X has 30 features.*31 columns"):
        fit(LogisticRegression(), oracle=oracles.bootstrap(public[:, :-1]))
    with pytest.raises(OracleError, match="draws 31 columns, but X has 29 features"):
        fit(LogisticRegression(), X=X[:, 1:])
    with pytest.raises(OracleError, match="rows of X: 30 columns"):
        fit(KMeans(2, n_init=1), y=None)   # unsupervised: the oracle must hold rows of X
    with pytest.raises(InvalidArgumentError, match="KMeans is unsupervised: call fit\\(X\\) without y"):
        fit(KMeans(2, n_init=1), oracle=oracles.bootstrap(public[:, :-1]))
    with pytest.raises(InvalidArgumentError, match="requires y to be passed"):
        fit(LogisticRegression(), y=None)
    # non-numeric X: the message names the fix and quotes no data
    secret = X.astype(object)
    secret[3, 4] = "SECRET-7731"
    with pytest.raises(InvalidArgumentError, match="X must be numeric") as info:
        fit(LogisticRegression(), X=secret)
    assert "SECRET" not in str(info.value)
    with pytest.raises(InvalidArgumentError, match="X must be numeric"):
        fit(LogisticRegression(), X=np.full(X.shape, "1.5"))   # numeric-looking strings are not numbers
    with pytest.raises(InvalidArgumentError, match="y must be numeric"):
        fit(LogisticRegression(), y=np.where(y > 0, "yes", "no"))
    nan = X.copy()
    nan[0, 0] = np.nan
    with pytest.raises(InvalidArgumentError, match="NaN"):
        fit(LogisticRegression(), X=nan)
    with pytest.raises(InvalidArgumentError, match="sparse"):
        import scipy.sparse as sp

        fit(LogisticRegression(), X=sp.csr_matrix(X))
    with pytest.raises(InvalidArgumentError, match="2-D"):
        fit(LogisticRegression(), X=X[:, 0])
    with pytest.raises(InvalidArgumentError, match="y has 10 entries but X has 285 rows"):
        fit(LogisticRegression(), y=y[:10])
    with pytest.raises(InvalidArgumentError, match="labels the oracle never draws"):
        fit(LogisticRegression(), y=np.where(y > 0, 7.0, 0.0))
    # estimators whose parameters raydp cannot release, each with the reason
    with pytest.raises(InvalidArgumentError, match="GaussianMixture is not supported: .*permutation"):
        fit(GaussianMixture(2), y=None, oracle=oracles.bootstrap(public[:, :-1]))
    with pytest.raises(InvalidArgumentError, match="SVC is not supported: .*training records"):
        fit(SVC())
    with pytest.raises(InvalidArgumentError, match="no fitted float parameter that its predictions use"):
        fit(DecisionTreeClassifier())
    with pytest.raises(InvalidArgumentError, match="params \\['coef'\\] are not fitted float parameters.*coef_"):
        fit(LogisticRegression(), params=["coef"])
    with pytest.raises(InvalidArgumentError, match="random generator object"):
        fit(LogisticRegression(random_state=np.random.RandomState(0)))


def test_smaller_refusals_are_one_line_and_auto_is_the_default(cancer):
    """Issue 19, item 5: a params callable that raises, fit options such as sample_weight, the default backend."""
    public, X, y = cancer
    oracle = oracles.bootstrap(public)

    def broken(model):
        raise KeyError("no such step")

    with pytest.raises(InvalidArgumentError, match="params: the callable raised KeyError on the model fitted on "
                                                   "public records: 'no such step'"):
        PrivateEstimator(LogisticRegression(), oracle=oracle, epsilon=1.0, params=broken, **FAST, options=SamplerOptions(seed=0)).fit(X, y)
    with pytest.raises(InvalidArgumentError, match=r"fit\(\) does not take sample_weight: .*carry no weights"):
        PrivateEstimator(LogisticRegression(), oracle=oracle, epsilon=1.0, **FAST, options=SamplerOptions(seed=0)).fit(
            X, y, sample_weight=np.ones(len(y)))
    pe = PrivateEstimator(LogisticRegression(), oracle=oracle, epsilon=1.0, **FAST)
    assert pe.options is None and PrivateEstimator.__init__.__kwdefaults__["options"] is None
    assert pe._options().backend.name == "auto"  # None: the default options, the same as everywhere
    chosen = pe.fit(X, y).estimate_.backend  # auto's reason ("local" alone would mean it was not asked)
    assert chosen.startswith("local (auto:") or chosen == "ray (Ray is already initialised in this process)", chosen


@pytest.mark.slow
def test_params_override_and_failing_pairs(cancer):
    public, X, y = cancer
    oracle = oracles.bootstrap(public)
    pe = PrivateEstimator(LogisticRegression(), oracle=oracle, epsilon=1.0, params=["coef_"], **FAST, options=SamplerOptions(seed=0))
    pe.fit(X, y)
    assert pe.released_params_ == ["coef_"] and pe.estimate_.output_dim == X.shape[1]
    assert pe.estimator_.intercept_ is not None   # the public skeleton's intercept
    by_callable = PrivateEstimator(LogisticRegression(), oracle=oracle, epsilon=1.0, **FAST, params=lambda model: ["intercept_"], options=SamplerOptions(seed=0)).fit(X, y)
    assert by_callable.released_params_ == ["intercept_"]
    # a fit that fails on a pair (here: databases of one class only) is a counted failure, G = +∞
    mixed = np.vstack([public[public[:, -1] == 1][:45], public[public[:, -1] == 0][:5]])   # 10% of class 0
    target = EstimatorTarget(LogisticRegression(random_state=0), n_features=30, supervised=True, integer_labels=True,
                             params=["coef_"], shapes=[(1, 30)])
    est = raydp.estimate_sensitivity(target, oracles.bootstrap(mixed), 20, gamma=0.3, seed=0, progress=False)
    # a 20-record draw misses class 0 with probability 0.9^20 ≈ 0.12: some of the 48 databases do (fixed seed)
    assert 0 < est.failures < est.plan.m and est.sensitivity == math.inf


# ----------------------------------------------------------------------------- unidentified parameters


def test_kmeans_centres_and_pca_axes_are_canonicalised():
    """Label switching and sign flips would make Δ̂ the size of the parameters; aligned to the public fit they don't."""
    rng = np.random.default_rng(0)
    centres = np.array([[0.0, 0.0], [4.0, 0.0], [0.0, 4.0]])
    public = centres[rng.integers(0, 3, 600)] + 0.3 * rng.standard_normal((600, 2))
    oracle = oracles.bootstrap(public)
    X = centres[rng.integers(0, 3, 150)] + 0.3 * rng.standard_normal((150, 2))
    km = PrivateEstimator(KMeans(3, n_init=1), oracle=oracle, epsilon=10.0, **FAST, options=SamplerOptions(seed=0)).fit(X)
    assert km.released_params_ == ["cluster_centers_"] and km.target_.kinds == {"cluster_centers_": "match-rows"}
    raw = EstimatorTarget(km.target_.estimator, n_features=2, supervised=False, integer_labels=False,
                          params=["cluster_centers_"], shapes=[(3, 2)])   # the same fit, not aligned
    est_raw = raydp.estimate_sensitivity(raw, oracle, 150, gamma=0.3, seed=0, progress=False)
    assert km.estimate_.sensitivity < 1.0 < 4.0 < est_raw.sensitivity   # centres 4 apart swap without alignment
    assert km.predict(X).shape == (150,) and set(km.predict(centres)) == {0, 1, 2}

    # principal axes along (1, 1, 0)/√2 and (1, -1, 0)/√2: equal-magnitude entries, so scikit-learn's own sign
    # rule (largest |entry| positive) picks the sign by a coin flip of the sampling noise
    rotate = np.array([[1.0, 1.0, 0.0], [1.0, -1.0, 0.0], [0.0, 0.0, math.sqrt(2)]]) / math.sqrt(2)
    ellipse = (rng.standard_normal((600, 3)) * np.array([3.0, 1.0, 0.2])) @ rotate
    pca = PrivateEstimator(PCA(2), oracle=oracles.bootstrap(ellipse), epsilon=10.0, **FAST, options=SamplerOptions(seed=0)).fit(ellipse[:100])
    assert pca.target_.kinds == {"components_": "match-signs"} and "components_" in pca.released_params_
    raw = EstimatorTarget(pca.target_.estimator, n_features=3, supervised=False, integer_labels=False,
                          params=pca.released_params_, shapes=pca.target_.shapes)
    est_raw = raydp.estimate_sensitivity(raw, oracles.bootstrap(ellipse), 100, gamma=0.3, seed=0, progress=False)
    assert pca.estimate_.sensitivity < 1.0 < 2.0 < est_raw.sensitivity   # a flipped unit axis moves by 2 in ℓ2, 2√2 in ℓ1
    assert pca.transform(ellipse[:5]).shape == (5, 2)


# ----------------------------------------------------------------------------- a proven bound, on real data


@pytest.mark.parametrize("lam", [0.1, 0.01])
@pytest.mark.slow
def test_sampled_sensitivity_is_below_chaudhuri_bound(lam):
    """L2-regularised logistic regression without intercept on rows with ‖x‖ ≤ 1: ℓ2 sensitivity ≤ 2/(nλ)
    (Chaudhuri, Monteleoni & Sarwate 2011, Cor. 8) for min (1/n)Σ log(1 + exp(-y w·x)) + (λ/2)‖w‖².
    scikit-learn minimises C·Σ loss + ½‖w‖² (the penalty is scaled by 1/(C·n) in
    sklearn/linear_model/_logistic.py), the same minimiser with C = 1/(nλ). Breast cancer, rows scaled
    onto the unit sphere, n = 200, fitted to tol 1e-10. The bound is global, so EVERY sampled G must
    lie below it (with k = m, Δ̂ is the largest of the 61 G). Measured here (seed 1): Δ̂ = 0.0271 vs 0.1
    (λ = 0.1, 3.7x below) and 0.160 vs 1 (λ = 0.01, 6.3x below); with m = 285 pairs: 0.0339 (3.0x) and
    0.254 (3.9x)."""
    X, y = datasets.load_breast_cancer(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(X))
    X, y = X[order], y[order]
    half = len(X) // 2
    Z = (X - X[:half].mean(axis=0)) / X[:half].std(axis=0)
    Z /= np.linalg.norm(Z, axis=1, keepdims=True) * (1 + 1e-12)   # every row: ‖x‖ < 1
    n = 200
    model = LogisticRegression(C=1 / (n * lam), fit_intercept=False, tol=1e-10, max_iter=10_000)
    pe = PrivateEstimator(model, oracle=oracles.bootstrap(np.column_stack([Z[:half], y[:half]])), epsilon=1.0, delta=1e-5,
                          gamma=0.2, time_budget=None, mechanism="gaussian", options=SamplerOptions(seed=1))
    pe.fit(Z[half:half + n], y[half:half + n])
    est = pe.estimate_
    bound = 2 / (n * lam)
    assert est.norm == "l2" and est.plan.k == est.plan.m == 61 and est.failures == 0
    assert pe.released_params_ == ["coef_"]   # no intercept to release
    ratio = bound / est.sensitivity
    print(f"λ={lam}: Δ̂ = {est.sensitivity:.4g}, bound 2/(nλ) = {bound:g}, {ratio:.2f}x below")
    assert est.sensitivity <= bound
    assert 2.0 < ratio < 10.0   # well below, and not trivially (the bound is tight within a small factor)


# ----------------------------------------------------------------------------- the job


@pytest.mark.subprocess
def test_sklearn_utility_job_tiny(tmp_path):
    out = tmp_path / "out"
    code, stdout, err = run_job("sklearn_utility.py", "--tasks", "breast_cancer/logistic", "diabetes/ridge",
                                "--epsilons", 1, 100, "--repeats", 2, "--gamma", 0.3, "--backend", "local",
                                "--diffprivlib-python", "none", "--out", out, "--quiet", cwd=tmp_path, timeout=300)
    assert code == 0, err
    for suffix in (".parquet", ".md", ".png"):
        assert (out / f"sklearn_utility{suffix}").is_file()
    assert (out / "sklearn_utility.png").read_bytes()[:8] == PNG_MAGIC
    rows = pq.read_table(out / "sklearn_utility.parquet").to_pylist()
    methods = {(r["task"], r["method"]) for r in rows}
    assert methods == {("breast_cancer/logistic", m) for m in
                       ("non_private", "raydp_laplace", "raydp_gaussian", "global_laplace", "global_gaussian")} | {
                      ("diabetes/ridge", m) for m in ("non_private", "raydp_laplace", "raydp_gaussian")}
    score = {(r["task"], r["method"], r["epsilon"]): r["score_mean"] for r in rows}
    for r in rows:
        assert r["repeats"] == 2 and math.isfinite(r["score_mean"]) and r["notion"]
        assert (r["gamma"] == 0.3) == r["method"].startswith("raydp")
    # sane: the non-private model is good, raydp at ε = 100 is close to it, and far better than the global bound
    assert score[("breast_cancer/logistic", "non_private", 1.0)] > 0.9
    assert score[("diabetes/ridge", "non_private", 1.0)] > 0.3
    assert score[("breast_cancer/logistic", "raydp_gaussian", 100.0)] > score[("breast_cancer/logistic", "non_private", 1.0)] - 0.1
    sens = {(r["task"], r["method"]): r["sensitivity"] for r in rows}
    assert sens[("breast_cancer/logistic", "raydp_gaussian")] < sens[("breast_cancer/logistic", "global_gaussian")] == 1.0
    md = (out / "sklearn_utility.md").read_text()
    assert "raydp_laplace [(ε, 0, γ)-random DP]" in md and "global_gaussian [(ε, δ)-DP]" in md
    assert "diffprivlib column left out (--diffprivlib-python none)" in md and md in stdout
    # a re-run reuses the stored samples
    code, stdout2, err = run_job("sklearn_utility.py", "--tasks", "breast_cancer/logistic", "--epsilons", 1,
                                 "--repeats", 2, "--gamma", 0.3, "--backend", "local", "--diffprivlib-python", "none",
                                 "--no-plot", "--out", out, "--quiet", cwd=tmp_path)
    assert code == 0, err
    again = pq.read_table(out / "sklearn_utility.parquet").to_pylist()
    assert {r["sensitivity"] for r in again if r["method"] == "raydp_laplace"} == {
        sens[("breast_cancer/logistic", "raydp_laplace")]}


DPL = JOBS / ".venv-diffprivlib" / "bin" / "python"


@pytest.mark.skipif(not DPL.exists(), reason="no diffprivlib environment (see README: Your own scikit-learn model)")
@pytest.mark.subprocess
def test_diffprivlib_runner_in_its_own_environment(tmp_path):
    out = tmp_path / "out"
    code, stdout, err = run_job("sklearn_utility.py", "--tasks", "breast_cancer/logistic", "--epsilons", 1, 100,
                                "--repeats", 2, "--gamma", 0.3, "--backend", "local", "--no-plot", "--out", out,
                                "--quiet", cwd=tmp_path, timeout=300)
    assert code == 0, err
    rows = [r for r in pq.read_table(out / "sklearn_utility.parquet").to_pylist() if r["method"] == "diffprivlib"]
    assert [r["epsilon"] for r in rows] == [1.0, 100.0] and all(r["notion"] == "ε-DP" for r in rows)
    assert rows[1]["score_mean"] > 0.85   # ε = 100: diffprivlib's objective perturbation is nearly the plain fit
    assert "diffprivlib environment: diffprivlib 0.6.6, scikit-learn 1.7.2" in stdout


@pytest.mark.subprocess
def test_sklearn_utility_one_liner_tiny(tmp_path):
    """``--one-liner`` at a tiny plan (γ = 0.3, a 5 s budget: a cap on the whole fit, which tune=True on wine needs),
    two sets, two splits: every line of the table with its
    numbers, the old defaults at the fewest pairs, the raw regression line judged useless and warned (in process, no
    threads to lose the warning), refused before any charge, beaten by the search; the calibration counts every
    release, Δ̂'s spread has both variants, and one fit timed in a fresh process (on diabetes: Ridge's pairs are cheap,
    so a loaded machine's start-up does not eat the 5 s cap of a fit in a fresh process, as wine's can)."""
    import json

    out = tmp_path / "out"
    code, stdout, err = run_job("sklearn_utility.py", "--one-liner", "--sets", "wine", "diabetes", "--repeats", 2,
                                "--gamma", 0.3, "--time-budget", 5, "--releases", 1, "--spread-seeds", 2,
                                "--wall-time-repeats", 1, "--wall-time-where", "local", "--wall-time-set", "diabetes",
                                "--backend", "local", "--diffprivlib-python", "none", "--out", out, "--quiet",
                                cwd=tmp_path, timeout=300)
    assert code == 0, err
    report = json.loads((out / "sklearn_one_liner.json").read_text())
    md = (out / "sklearn_one_liner.md").read_text()
    assert "| wine, accuracy (62) |" in md and "| diabetes, R² (155) |" in md and md in stdout
    fits = {(f["data"], f["split"], f["line"]): f for f in report["fits"]}
    assert len(fits) == len(report["fits"]) == 2 * 2 * 4
    for f in fits.values():
        assert len(f["more_releases"]) == 1 and math.isfinite(f["score"]) and len(f["preview_scores"]) >= 2
        assert f["interval"][0] <= f["preview"] + 1e-9 and f["preview"] - 1e-9 <= f["interval"][1]
        if f["line"] == "before":   # the old defaults: the fewest pairs, Gaussian
            assert (f["m"], f["k"], f["mechanism"], f["sizing"]) == (24, 24, "gaussian", None)
        if f["line"] == "after":    # both mechanisms previewed on the pilot's pairs; what the fit had left sized m
            assert set(f["previews_by_mechanism"]) == {"gaussian", "laplace"} and f["pilot"]["pairs"] >= 20
            assert 0 < f["sizing"]["budget_seconds"] < 5.0 - f["pilot"]["seconds"]
        if f["line"] == "tuned":    # the README's line: the model and the mechanism chosen on pilot pairs, then its Δ̂
            key = "ridge__alpha" if f["data"] == "diabetes" else "logisticregression__C"
            assert set(f["best_params"]) == {key, "publicclip"} and f["pilot"]["pairs"] >= 20
            assert set(f["previews_by_mechanism"]) == {"gaussian", "laplace"}
            assert 0 < f["sizing"]["budget_seconds"] < 5.0
        # a release the preview calls useless or risky has warned (in process, nothing to lose the warning)
        assert f["warned"] or not (f["useless"] or f["risky"]) or f["line"] == "search"
    for r in range(2):              # raw diabetes, Ridge(alpha=1): Δ̂ drowns the release, and the fit says so
        before, search = fits[("diabetes", r, "before")], fits[("diabetes", r, "search")]
        assert before["useless"] and before["warned"] and before["suggestion"] > before["preview"]
        # the search's one release against the old line's (seeded) preview: both releases are OpenDP noise and
        # unseeded; release against release failed about once in 200 runs (10^5 simulated draws of each), while
        # the search's release falls below its 0.1% quantile (R² -0.5) far above the old line's preview (about -1.9)
        assert search["score"] > before["preview"]
    assert [(c["data"], c["refused"], c["entries"], c["spent"]) for c in report["refuse"]] == [
        ("diabetes", True, 0, [0.0, 0.0])]
    releases = report["calibration"]["all"][0]
    assert releases["releases"] == 2 * 2 * 4 * 2 and 0 <= releases["inside"] <= releases["releases"]
    assert sorted((s["data"], s["before"]["m"]) for s in report["spread"]) == [("diabetes", 24)] * 2 + [("wine", 24)] * 2
    assert all(s["after_l2"]["mechanism"] == "gaussian" and s["after"]["pilot"] and s["after"]["tuned"]
               for s in report["spread"])
    assert [(w["where"], w["variant"], w["runs"]) for w in report["wall_time"]["summary"]] == [
        ("local", "before", 1), ("local", "after", 1), ("local", "tuned", 1)]
    assert all(run["m"] >= 24 and run["fit_seconds"] > 0 for run in report["wall_time"]["runs"])
    assert {g["goal"] for g in report["goals"]} >= {"never below the trivial predictor without a warning",
                                                    'on_useless="refuse" refuses before any charge'}
