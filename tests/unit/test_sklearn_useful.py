"""Private models useful by default (issue 21): public preprocessing, a utility preview from public data,
the warning (or refusal) before a useless release, and model selection on public data.

Data: three well-separated classes whose third feature is in the thousands (like a body mass in grams),
as in the issue's penguins; the oracle is a bootstrap of public rows. Fixed seeds throughout.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.decomposition import PCA
from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import raydp
from raydp import SamplerOptions, oracles
from raydp.errors import InvalidArgumentError, UtilityError
from raydp.identity import describe
from raydp.sklearn import PrivateEstimator, PrivateSearchCV, UtilityWarning

PLAN = dict(gamma=0.3, time_budget=None)  # m = k = 24 pairs (the fewest): fast, and enough for the comparisons below
OPT = SamplerOptions(seed=3, progress=False, backend="local")


def penguins_like(size: int, seed: int):
    """Three classes, four features on very different scales (the third in grams)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, size)
    centres = np.array([[38.0, 18.0, 3700.0, 190.0], [48.0, 18.0, 3700.0, 196.0], [47.0, 15.0, 5100.0, 217.0]])
    spread = np.array([2.5, 1.0, 450.0, 6.0])
    return centres[y] + rng.normal(0, 1, (size, 4)) * spread, y


@pytest.fixture(scope="module")
def data():
    Xp, yp = penguins_like(600, 1)
    X, y = penguins_like(300, 2)
    Xt, yt = penguins_like(1000, 3)
    return oracles.bootstrap(np.column_stack([Xp, yp])), X, y, Xt, yt


def one_liner(oracle, **kw):
    kw = {"epsilon": 1.0, **PLAN, "options": OPT, **kw}
    return PrivateEstimator(make_pipeline(StandardScaler(), LogisticRegression(C=0.1)), oracle=oracle, **kw)


@pytest.mark.slow
def test_public_preprocessing_is_the_default_and_only_the_model_is_released(data):
    oracle, X, y, Xt, yt = data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UtilityWarning)
        before = one_liner(oracle, public_steps=None).fit(X, y)  # the behaviour before issue 21
    after = one_liner(oracle).fit(X, y)
    assert after.public_steps_ == ["standardscaler"] and before.public_steps_ == []
    assert after.released_params_ == ["logisticregression.coef_", "logisticregression.intercept_"]
    assert "standardscaler.mean_" in before.released_params_
    # the scaler's statistics are the public records', frozen: not the private data's, not noised
    scaler = after.estimator_.named_steps["standardscaler"].estimator
    assert abs(scaler.mean_[2] - 4100) < 300 and not np.allclose(scaler.mean_, X.mean(axis=0))
    # Δ̂ falls by orders of magnitude (a mean in grams was released), and the model becomes useful
    assert after.estimate_.sensitivity < before.estimate_.sensitivity / 20
    # the release before is noise: judged by its (seeded) preview, since a single noisy release lands
    # anywhere (>= 0.6 in 11% of 200 tries); the release after is judged as released: its preview says
    # 0.977 ± 0.013, so 0.85 is ~10 sd below (200 of 200 tries scored >= 0.90)
    assert before.utility_.expected(1.0) < 0.6 < 0.85 < after.score(Xt, yt)
    assert "fitted on public oracle records and not released (no privacy cost): standardscaler" in after.statement()
    assert after.statement().startswith(after.release_.statement())


@pytest.mark.slow
def test_a_public_fit_is_part_of_the_run_identity(data):
    """A Δ̂ sampled with one public fit of the scaler is never reused with another: the frozen statistics
    are in the target's identity (a digest of the fitted attributes)."""
    oracle, X, y, *_ = data
    a = one_liner(oracle).fit(X, y)
    other = oracles.bootstrap(np.column_stack(penguins_like(600, 9)))
    b = one_liner(other).fit(X, y)
    ta, tb = describe(a.target_), describe(b.target_)
    assert ta != tb and ta["params"]["estimator"]["standardscaler"]["frozen"].endswith("StandardScaler")
    assert a.target_.identity() == one_liner(oracle).fit(X, y).target_.identity()  # and reproducible


@pytest.mark.slow
def test_public_steps_can_be_chosen_or_refused(data):
    oracle, X, y, *_ = data
    pipe = make_pipeline(StandardScaler(), PCA(n_components=2), LogisticRegression(C=0.1))
    chosen = PrivateEstimator(pipe, oracle=oracle, epsilon=1.0, public_steps=["standardscaler", "pca"], **PLAN,
                              options=OPT).fit(X, y)
    assert chosen.public_steps_ == ["standardscaler", "pca"]
    assert chosen.released_params_ == ["logisticregression.coef_", "logisticregression.intercept_"]
    auto = PrivateEstimator(pipe, oracle=oracle, epsilon=1.0, **PLAN, options=OPT).fit(X, y)
    assert auto.public_steps_ == ["standardscaler"]  # a PCA is public only when named
    assert any(p.startswith("pca.") for p in auto.released_params_)
    for bad, match in [(["nope"], "no step named 'nope'"), (["logisticregression"], "last step"),
                       (["pca"], "leading steps"), ("all", "public_steps must be"), ([1], "public_steps must be")]:
        with pytest.raises(InvalidArgumentError, match=match):
            PrivateEstimator(pipe, oracle=oracle, epsilon=1.0, public_steps=bad, **PLAN, options=OPT).fit(X, y)
    with pytest.raises(InvalidArgumentError, match="not a Pipeline"):
        PrivateEstimator(LogisticRegression(), oracle=oracle, epsilon=1.0, public_steps=["x"], **PLAN,
                         options=OPT).fit(X, y)


def test_preview_reads_no_private_record_and_fit_reuses_its_sensitivity(data):
    oracle, X, y, Xt, yt = data
    pe = one_liner(oracle)
    preview = pe.preview(len(X), epsilons=[0.01, 1.0, 100.0], repeats=5)
    assert [r["epsilon"] for r in preview.rows] == [0.01, 1.0, 100.0] and preview.repeats == 5
    assert "no private record read, no privacy spent" in str(preview) and "| 100 |" in preview.table()
    # at ε = 100 the release is the fit; at ε = 0.01 it is noise: the preview must show both
    assert abs(preview.expected(100.0) - preview.nonprivate[0]) < 0.05
    assert preview.expected(0.01) < preview.expected(1.0) <= preview.nonprivate[0] + 0.02
    assert 0.25 < preview.trivial < 0.45  # the majority class of three
    pe.fit(X, y)
    assert pe.estimate_ is pe.preview_estimate_  # no second sampling: the Δ̂ was made from public data
    # the preview predicted the realised score on fresh data within its spread (3 sd, or 0.15: the release's noise is
    # unseeded, and with 0.1 it fell outside about twice in 10^4 simulated releases; with 0.15, 2 in 10^5)
    row = preview.rows[1]
    assert abs(pe.score(Xt, yt) - row["mean"]) <= max(3 * row["sd"], 0.15)


@pytest.mark.slow
def test_fit_warns_before_a_useless_release_and_strict_refuses_it_uncharged(data, tmp_path):
    oracle, X, y, *_ = data
    with pytest.warns(UtilityWarning, match="not clearly better than a trivial predictor"):
        pe = one_liner(oracle, public_steps=None, epsilon=0.05).fit(X, y)
    assert pe.utility_.useless(0.05)
    ledger = raydp.Ledger.create(str(tmp_path / "l.json"), epsilon_total=1.0)
    with pytest.raises(UtilityError, match="on_useless=\"refuse\": nothing was released or charged"):
        one_liner(oracle, public_steps=None, epsilon=0.05, on_useless="refuse", ledger=ledger).fit(X, y)
    assert ledger.spent() == (0.0, 0.0) and ledger.entries() == []
    with warnings.catch_warnings():
        warnings.simplefilter("error", UtilityWarning)
        useful = one_liner(oracle).fit(X, y)  # the default one-liner: no warning
    assert not useful.utility_.useless(1.0)


@pytest.mark.slow
def test_search_chooses_on_public_data_and_releases_once(data, tmp_path):
    oracle, X, y, Xt, yt = data
    ledger = raydp.Ledger.create(str(tmp_path / "l.json"), epsilon_total=2.0)
    search = PrivateSearchCV(make_pipeline(StandardScaler(), LogisticRegression()),
                             {"logisticregression__C": [0.01, 0.1, 10.0], "public_steps": ["auto", None]},
                             oracle=oracle, epsilon=1.0, **PLAN, options=OPT, ledger=ledger, repeats=3)
    search.fit(X, y)
    r = search.cv_results_
    assert len(r["params"]) == 6 and sorted(r["rank_test_score"]) == list(range(1, 7))
    assert search.best_params_["public_steps"] == "auto"
    assert search.best_score_ == max(r["mean_test_score"])
    # one release, one charge, reusing the Δ̂ its preview sampled
    assert len(ledger.entries()) == 1 and ledger.spent() == (1.0, 0.0)
    best = search.best_estimator_
    assert best.estimate_.sensitivity == r["sensitivity"][search.best_index_]
    # one noisy release (unseeded OpenDP noise) of the chosen candidate (C=10): mean 0.953, sd 0.038, but a heavy
    # left tail — of 400 000 simulated releases 0.2% scored at most 0.7, the 10^-4 quantile is 0.622 — so the
    # bound is 0.55 (fails well below once in 10^4 runs), still far above the trivial predictor's ~0.33
    assert search.score(Xt, yt) > 0.55
    assert "| 1 |" in search.table()


def test_search_refuses_a_bad_grid(data):
    oracle, X, y, *_ = data
    for grid in ({"logisticregression__nope": [1]}, {}):
        with pytest.raises(InvalidArgumentError):
            PrivateSearchCV(make_pipeline(StandardScaler(), LogisticRegression()), grid, oracle=oracle, epsilon=1.0,
                            **PLAN, options=OPT).search(len(X))


def test_a_regressor_previews_against_the_mean(data):
    rng = np.random.default_rng(5)
    Xp = rng.normal(0, 1000, (500, 3))
    yp = Xp @ np.array([0.002, -0.001, 0.0005]) + rng.normal(0, 0.3, 500)
    pe = PrivateEstimator(make_pipeline(StandardScaler(), Ridge(alpha=10.0)),
                          oracle=oracles.bootstrap(np.column_stack([Xp, yp])), epsilon=2.0, **PLAN, options=OPT)
    preview = pe.preview(300, repeats=3)
    assert preview.metric == "R²" and abs(preview.trivial) < 0.1
    assert preview.nonprivate[0] > 0.8


def test_the_preview_interval_is_the_calibrated_one():
    """The stated interval is the central 80% of the previewed scores widened twice about its middle (the
    interval whose coverage of real releases was measured); ``widen=1`` gives the quantiles themselves."""
    from raydp.sklearn.utility import INTERVAL_CLAIM, UtilityPreview

    scores = [float(s) for s in np.linspace(0.0, 1.0, 21)]  # quantiles 0.1 and 0.9 are 0.1 and 0.9
    p = UtilityPreview(rows=[{"epsilon": 1.0, "mean": 0.5, "sd": 0.3, "scores": scores}], metric="score", n=100,
                       mechanism="laplace", sensitivity=1.0, nonprivate=(0.9, 0.0), trivial=0.5, repeats=21)
    assert p.interval(1.0, widen=1.0) == pytest.approx((0.1, 0.9))
    assert p.interval(1.0) == pytest.approx((-0.3, 1.3))  # middle 0.5, half-width 0.4 twice over
    assert f"{INTERVAL_CLAIM} releases measured in" in p.table() and "[-0.300, 1.300]" in p.table()
    # an accuracy lies in [0, 1]: the widened ends stop there
    acc = UtilityPreview(**{**p.__dict__, "metric": "accuracy"})
    assert acc.interval(1.0) == pytest.approx((0.0, 1.0)) and acc.interval(1.0, widen=1.0) == pytest.approx((0.1, 0.9))


def _raw_line(oracle, **kw):
    """The line on raw columns with scikit-learn's default C = 1: previews far below the tuned candidates here."""
    kw = {"epsilon": 1.0, **PLAN, "options": OPT, **kw}
    return PrivateEstimator(make_pipeline(StandardScaler(), LogisticRegression()), oracle=oracle, **kw)


@pytest.mark.slow
def test_tune_chooses_on_public_data_releases_the_chosen_model_once_and_says_so(data, tmp_path):
    oracle, X, y, Xt, yt = data
    ledger = raydp.Ledger.create(str(tmp_path / "l.json"), epsilon_total=2.0)
    pe = _raw_line(oracle, tune=True, ledger=ledger, delta=1e-5)
    preview = pe.preview(len(X), repeats=5)
    final, record = pe._tuned_for[1]
    assert pe.preview_estimate_ is final.preview_estimate_ and pe.preview_tuning_ is record
    pe.fit(X, y)
    assert pe.estimate_ is final.preview_estimate_  # the preview's choice and Δ̂ are the fit's: nothing sampled twice
    rows = record["candidates"]
    # the grid: C as given x {0.01, 0.1, 1}, without and with public clipping; the model as given is a candidate
    assert len(rows) == 6 and {r["params"]["logisticregression__C"] for r in rows} == {0.01, 0.1, 1.0}
    assert {type(r["params"]["publicclip"]).__name__ for r in rows} == {"str", "PublicClip"}
    best = max(rows, key=lambda r: r["mean"])
    assert pe.tuned_params_ == best["params"] and pe.tuning_["previewed"] == best["mean"]
    for r in rows:  # each candidate previewed with both mechanisms at stand-in Δ̂s from the same public pilot pairs
        assert set(r["previews"]) == {"laplace", "gaussian"} and r["pairs"] == raydp.make_plan(gamma=0.3).m  # no budget: the sample's m (24) when under 50
        assert r["mean"] == max(p["mean"] for p in r["previews"].values())
    assert pe.tuning_["as_given"] == next(r["mean"] for r in rows if r["params"]["logisticregression__C"] == 1.0
                                          and r["params"]["publicclip"] == "passthrough")
    assert pe.tuning_["previewed"] > pe.tuning_["as_given"] + 0.1  # raw C = 1 is far worse here than the choice
    # the released model is the chosen one, with the mechanism its pilot chose
    final_step = pe.estimator_.steps[-1][1]
    assert final_step.C == pe.tuned_params_["logisticregression__C"]
    assert pe.release_.mechanism["name"] == best["mechanism"] == pe.mechanism_choice_["mechanism"]
    assert preview.rows[0]["epsilon"] == 1.0
    assert len(ledger.entries()) == 1 and ledger.spent()[0] == 1.0
    text = pe.statement()
    assert "tune=True chose logisticregression__C=" in text and "among 6 candidates" in text
    assert "the model as given" in text and f"{best['mechanism']} chosen" in text
    # the user's estimator is untouched
    assert pe.estimator.steps[-1][1].C == 1.0 and not hasattr(pe.estimator.steps[-1][1], "coef_")
    # one noisy release (unseeded noise): a loose bound, far above the trivial predictor's ~0.33
    assert pe.score(Xt, yt) > 0.4


def test_tune_refuses_what_it_cannot_honour(data):
    oracle, X, y, *_ = data
    with pytest.raises(InvalidArgumentError, match="tune must be True or False"):
        _raw_line(oracle, tune="yes").fit(X, y)
    with pytest.raises(InvalidArgumentError, match="PCA has no score against labels"):
        PrivateEstimator(PCA(2), oracle=oracles.bootstrap(X), epsilon=1.0, **PLAN, options=OPT, tune=True).fit(X)
    with pytest.raises(InvalidArgumentError, match="nothing to tune in LinearRegression"):
        PrivateEstimator(LinearRegression(), oracle=oracle, epsilon=1.0, **PLAN, options=OPT, tune=True).fit(X, y)
    with pytest.raises(InvalidArgumentError, match="estimate= cannot be given"):  # before anything is sampled
        _raw_line(oracle, tune=True, estimate=object()).fit(X, y)


@pytest.mark.slow
def test_tune_refuses_a_useless_choice_uncharged_and_warns_without_a_search_to_suggest(data, tmp_path):
    oracle, X, y, *_ = data
    ledger = raydp.Ledger.create(str(tmp_path / "l.json"), epsilon_total=1.0)
    with pytest.raises(UtilityError, match='on_useless="refuse": nothing was released or charged'):
        _raw_line(oracle, public_steps=None, epsilon=0.01, on_useless="refuse", ledger=ledger, tune=True).fit(X, y)
    assert ledger.spent() == (0.0, 0.0) and ledger.entries() == []
    with pytest.warns(UtilityWarning, match="found nothing better") as seen:
        _raw_line(oracle, public_steps=None, epsilon=0.01, tune=True).fit(X, y)
    assert not any("PrivateSearchCV(" in str(w.message) for w in seen)  # the search was this fit's own


def test_an_unsupervised_model_with_delta_keeps_the_gaussian_on_the_whole_budget():
    """No score to preview a release of PCA by: nothing to choose between Laplace and the Gaussian, so the
    Gaussian is kept and sampled on the whole budget (each sampled on half of it and one thrown away before)."""
    X = np.random.default_rng(4).normal(0, 1, (400, 3)) * np.array([3.0, 1.0, 0.2])
    shares = []
    real = PrivateEstimator._estimate

    def recording(self, *args, share=1.0, **kwargs):
        shares.append(share)
        return real(self, *args, share=share, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(PrivateEstimator, "_estimate", recording)
        pe = PrivateEstimator(PCA(2), oracle=oracles.bootstrap(X[:200]), epsilon=1.0, delta=1e-5, gamma=0.3,
                              time_budget=1.0, options=OPT).fit(X[200:])
    assert pe.release_.mechanism["name"] == "gaussian" and pe.mechanism_choice_["previews"] == {}
    assert shares == [1.0]  # one Δ̂, on the whole of what the budget left for sampling, not half of it
    assert 0 < pe.estimate_.sizing["budget_seconds"] < 1.0
    assert "gaussian kept: an unsupervised model has no score to preview a release by" in pe.statement()
