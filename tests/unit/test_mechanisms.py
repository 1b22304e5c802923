"""Tests of raydp.mechanisms and raydp.noise.

OpenDP noise cannot be seeded, so the statistical tests are hypothesis tests with a stated false-alarm
rate: each one fails on a correct implementation with probability at most ALPHA (per test), written next
to it. With about eight such tests the whole file false-alarms with probability below 1e-3.
"""

from __future__ import annotations

import doctest
import json
import math
import pickle

import numpy as np
import pytest
from scipy import stats

import raydp.mechanisms as mechanisms
import raydp.noise as noise
from raydp.errors import MechanismError, TargetError
from raydp.identity import fingerprint
from raydp.mechanisms import (
    Bernstein,
    BernsteinRelease,
    Exponential,
    Gaussian,
    Laplace,
    analytic_gaussian_sigma,
    bernstein_approximation,
)

ALPHA = 1e-4  # false-alarm rate of each statistical test below


# --------------------------------------------------------------------------------------------------
# Laplace


def test_laplace_noise_matches_laplace_distribution():
    # ALPHA = 1e-4: KS test of 20k draws against Laplace(0, b)
    mech = Laplace(epsilon=0.5)
    b = mech.noise_scale(1.0)
    assert b == 2.0
    draws = mech.release(np.zeros(20_000), sensitivity=1.0)
    assert stats.kstest(draws, stats.laplace(loc=0.0, scale=b).cdf).pvalue > ALPHA
    # mean |noise| = b; sd of |noise| is b, so 5 standard errors is a < 1e-6 false alarm
    assert abs(np.mean(np.abs(draws)) - b) < 5 * b / math.sqrt(draws.size)


def test_laplace_release_keeps_shape_and_zero_sensitivity_is_exact():
    mech = Laplace(1.0)
    value = np.arange(6.0).reshape(2, 3)
    assert mech.release(value, 1.0).shape == (2, 3)
    assert mech.release(3.0, 1.0).shape == ()
    np.testing.assert_array_equal(mech.release(value, 0.0), value)
    assert mech.variance(1.0) == 2.0
    assert mech.privacy() == (1.0, 0.0)


# --------------------------------------------------------------------------------------------------
# Gaussian


def test_gaussian_classic_sigma_and_noise():
    # ALPHA = 1e-4: KS test of 10k draws against Normal(0, σ)
    eps, delta = 0.5, 1e-5
    mech = Gaussian(eps, delta, calibration="classic")
    sigma = mech.noise_scale(2.0)
    assert sigma == pytest.approx(2.0 * math.sqrt(2 * math.log(1.25 / delta)) / eps, rel=1e-12)
    draws = mech.release(np.zeros(10_000), sensitivity=2.0)
    assert stats.kstest(draws, stats.norm(0.0, sigma).cdf).pvalue > ALPHA
    assert mech.privacy() == (eps, delta)


def test_gaussian_analytic_noise():
    # ALPHA = 1e-4: KS test of 10k draws against Normal(0, σ)
    mech = Gaussian(3.0, 1e-6, calibration="analytic")
    sigma = mech.noise_scale(1.5)
    assert sigma == pytest.approx(analytic_gaussian_sigma(3.0, 1e-6, 1.5))
    draws = mech.release(np.zeros((100, 100)), sensitivity=1.5).ravel()
    assert stats.kstest(draws, stats.norm(0.0, sigma).cdf).pvalue > ALPHA


def _bw_lhs(sigma, eps, sens=1.0):
    """Balle & Wang (2018) Thm 8 left-hand side, computed plainly (independent of the library's log form)."""
    a = sens / (2 * sigma)
    b = eps * sigma / sens
    return stats.norm.cdf(a - b) - math.exp(eps) * stats.norm.cdf(-a - b)


@pytest.mark.parametrize("eps", [0.01, 0.1, 0.5, 0.9, 0.999, 1.0, 2.0, 5.0])
@pytest.mark.parametrize("delta", [1e-10, 1e-6, 1e-3, 0.1, 0.5])
def test_analytic_sigma_solves_balle_wang_tightly(eps, delta):
    sens = 0.7
    sigma = analytic_gaussian_sigma(eps, delta, sens)
    lhs = _bw_lhs(sigma, eps, sens)
    assert lhs <= delta * (1 + 1e-9)                      # valid ...
    assert lhs == pytest.approx(delta, rel=1e-6)          # ... and tight
    assert _bw_lhs(sigma * (1 - 1e-5), eps, sens) > delta  # a smaller σ breaks the condition
    if eps < 1:
        classic = sens * math.sqrt(2 * math.log(1.25 / delta)) / eps
        assert sigma <= classic
        assert Gaussian(eps, delta, "analytic").noise_scale(sens) <= Gaussian(eps, delta, "classic").noise_scale(sens)


def test_analytic_sigma_extreme_parameters_are_finite_and_monotone():
    # large ε would overflow e^ε in a naive implementation
    s = [analytic_gaussian_sigma(e, 1e-8) for e in (1e-4, 1.0, 50.0, 1000.0)]
    assert all(math.isfinite(x) and x > 0 for x in s)
    assert s == sorted(s, reverse=True)
    assert analytic_gaussian_sigma(1.0, 1e-5, 0.0) == 0.0


# --------------------------------------------------------------------------------------------------
# Exponential


@pytest.mark.slow
def test_exponential_selection_frequencies():
    # ALPHA = 1e-4: chi-square goodness of fit of 20k selections to exp(ε s / 2Δ)
    eps, sens = 1.0, 0.5
    responses = ["a", "b", "c", "d"]
    scores = np.array([0.0, 0.3, 1.0, 1.6])
    mech = Exponential(eps, responses)
    assert mech.noise_scale(sens) == 2 * sens / eps
    expected = np.exp(eps * scores / (2 * sens))
    expected /= expected.sum()
    np.testing.assert_allclose(mech.probabilities(scores, sens), expected)
    n = 20_000
    picks = [mech.release(scores, sens) for _ in range(n)]
    counts = np.array([picks.count(r) for r in responses])
    assert stats.chisquare(counts, expected * n).pvalue > ALPHA


def test_exponential_huge_scores_do_not_underflow():
    # ALPHA = 1e-4: two-sided binomial test on 4k draws; P(index 0) ≈ e^{-500000}, i.e. never
    mech = Exponential(1.0, [10, 20, 30])
    scores = [0.0, 1e6, 1e6 + 1]
    p = mech.probabilities(scores, 1.0)
    assert np.all(np.isfinite(p)) and p[0] == 0.0
    n = 4000
    picks = [mech.release(scores, 1.0) for _ in range(n)]
    assert 10 not in picks
    top = picks.count(30)
    p_top = math.exp(0.5) / (1 + math.exp(0.5))
    assert stats.binomtest(top, n, p_top).pvalue > ALPHA


def test_exponential_callable_scores_and_zero_sensitivity():
    mech = Exponential(2.0, [1, 2, 3, 4])
    score = lambda r: -abs(r - 3)  # noqa: E731
    np.testing.assert_array_equal(mech.embed(score), [-2.0, -1.0, 0.0, -1.0])
    assert mech.release(score, 0.0) == 3
    assert all(mech.release([5.0, 1.0, 0.0, 2.0], 0.0) == 1 for _ in range(20))
    assert mech.release(score, 1.0) in (1, 2, 3, 4)


def test_exponential_accepts_unhashable_and_array_responses():
    mech = Exponential(1.0, [[0, 1], [1, 0]])
    assert mech.release([0.0, 10.0], 0.0) == [1, 0]
    mech = Exponential(1.0, np.array([0.25, 0.5, 0.75]))
    assert mech.responses == (0.25, 0.5, 0.75)
    json.dumps(mech.identity())


# --------------------------------------------------------------------------------------------------
# Bernstein


def _smooth_1d(y):
    return np.sin(2 * np.pi * y[:, 0]) + y[:, 0] ** 2


def _smooth_2d(y):
    return np.exp(-((y[:, 0] - 0.5) ** 2) - 2 * (y[:, 1] - 0.3) ** 2) + y[:, 0] * y[:, 1]


def _sup_error(F, K, dims, order, grid):
    return np.max(np.abs(bernstein_approximation(F, K, dims, order)(grid) - F(grid)))


def test_bernstein_error_falls_with_lattice_and_order():
    g1 = np.linspace(0, 1, 1001)[:, None]
    errs = [_sup_error(_smooth_1d, K, 1, 1, g1) for K in (5, 10, 20, 40)]
    assert all(a > b for a, b in zip(errs, errs[1:])), errs
    assert errs[-1] < errs[0] / 4  # plain Bernstein converges like 1/K
    for K in (10, 20, 40):
        assert _sup_error(_smooth_1d, K, 1, 3, g1) < _sup_error(_smooth_1d, K, 1, 1, g1) / 3

    ax = np.linspace(0, 1, 41)
    g2 = np.stack([a.ravel() for a in np.meshgrid(ax, ax, indexing="ij")], axis=1)
    errs2 = [_sup_error(_smooth_2d, K, 2, 1, g2) for K in (5, 10, 20, 40)]
    assert all(a > b for a, b in zip(errs2, errs2[1:])), errs2
    assert _sup_error(_smooth_2d, 20, 2, 3, g2) < errs2[2] / 3


def _naive_bernstein(values, K, dims, order, y):
    """Direct formulas: A = ⊗ A1, c = Σ (−1)^{i+1} C(h,i) A^{i−1} F_L, Σ_ν c_ν Π_j C(K,ν_j) y^ν (1−y)^{K−ν}."""
    A1 = np.array([[math.comb(K, v) * (i / K) ** v * (1 - i / K) ** (K - v) for v in range(K + 1)]
                   for i in range(K + 1)])
    A = A1
    for _ in range(dims - 1):
        A = np.kron(A, A1)
    c = sum((-1) ** (i + 1) * math.comb(order, i) * np.linalg.matrix_power(A, i - 1) @ values
            for i in range(1, order + 1))
    nus = np.stack([a.ravel() for a in np.meshgrid(*[np.arange(K + 1)] * dims, indexing="ij")], axis=1)
    out = np.zeros(len(y))
    for q, point in enumerate(y):
        for idx, nu in enumerate(nus):
            w = 1.0
            for j in range(dims):
                w *= math.comb(K, nu[j]) * point[j] ** nu[j] * (1 - point[j]) ** (K - nu[j])
            out[q] += c[idx] * w
    return out


@pytest.mark.parametrize("dims,order", [(1, 1), (2, 1), (2, 3), (3, 2)])
def test_bernstein_matches_direct_formula(dims, order):
    K = 4
    rng = np.random.default_rng(7)
    values = rng.normal(size=(K + 1) ** dims)
    y = rng.uniform(size=(9, dims))
    got = bernstein_approximation(values, K, dims, order)(y)
    np.testing.assert_allclose(got, _naive_bernstein(values, K, dims, order, y), rtol=1e-10, atol=1e-12)


def test_bernstein_reproduces_linear_functions_and_interpolates_corners():
    poly = bernstein_approximation(lambda y: 1 + 2 * y[:, 0] - 3 * y[:, 1], 6, 2)
    y = np.random.default_rng(1).uniform(size=(50, 2))
    np.testing.assert_allclose(poly(y), 1 + 2 * y[:, 0] - 3 * y[:, 1], atol=1e-12)
    assert poly([1.0, 0.0]) == pytest.approx(3.0)


def test_bernstein_lattice_points_and_embed():
    mech = Bernstein(1.0, lattice=2, dims=2)
    pts = mech.lattice_points()
    assert pts.shape == (9, 2)
    np.testing.assert_array_equal(pts[:4], [[0, 0], [0, 0.5], [0, 1], [0.5, 0]])
    F = lambda y: y[:, 0] + 10 * y[:, 1]  # noqa: E731
    np.testing.assert_array_equal(mech.embed(F), F(pts))
    np.testing.assert_array_equal(mech.embed(F(pts).reshape(3, 3)), F(pts))
    with pytest.raises(TargetError):
        mech.embed(np.zeros(8))
    with pytest.raises(TargetError):
        mech.embed(lambda y: np.zeros(3))


def test_bernstein_noise_scale_and_distribution():
    # ALPHA = 1e-4: KS test of 40 releases x 441 lattice points against Laplace(0, Δ(K+1)^ℓ/ε)
    eps, sens, K = 2.0, 0.01, 20
    mech = Bernstein(eps, lattice=K, dims=2, order=2)
    scale = mech.noise_scale(sens)
    assert scale == pytest.approx(sens * (K + 1) ** 2 / eps)
    zero = np.zeros((K + 1) ** 2)
    rels = [mech.release(zero, sens) for _ in range(40)]
    assert all(isinstance(r, BernsteinRelease) and r.noise_scale == scale for r in rels)
    draws = np.concatenate([r.lattice_values for r in rels])
    assert stats.kstest(draws, stats.laplace(0.0, scale).cdf).pvalue > ALPHA
    # the released polynomial is the noiseless operator applied to the noisy lattice values
    r = rels[0]
    y = np.random.default_rng(3).uniform(size=(5, 2))
    np.testing.assert_allclose(r(y), bernstein_approximation(r.lattice_values, K, 2, 2)(y))


def test_bernstein_release_zero_sensitivity_call_forms_and_pickle():
    mech = Bernstein(1.0, lattice=8, dims=1, order=2)
    poly = mech.release(lambda y: y[:, 0] ** 2, 0.0)
    exact = bernstein_approximation(lambda y: y[:, 0] ** 2, 8, 1, 2)
    q = np.linspace(0, 1, 7)
    np.testing.assert_array_equal(poly(q), exact(q))
    np.testing.assert_array_equal(poly(q[:, None]), exact(q))
    assert isinstance(poly(0.5), float)
    clone = pickle.loads(pickle.dumps(poly))
    np.testing.assert_array_equal(clone(q), poly(q))
    with pytest.raises(MechanismError):
        poly(np.array([1.5]))
    with pytest.raises(MechanismError):
        poly(np.zeros((3, 2)))


# --------------------------------------------------------------------------------------------------
# validation


@pytest.mark.parametrize("make", [
    lambda: Laplace(0.0),
    lambda: Laplace(-1.0),
    lambda: Laplace(float("nan")),
    lambda: Laplace(float("inf")),
    lambda: Laplace("1"),
    lambda: Laplace(True),
    lambda: Gaussian(0.5, 0.0),
    lambda: Gaussian(0.5, 1.0),
    lambda: Gaussian(0.5, -0.1),
    lambda: Gaussian(0.5, float("nan")),
    lambda: Gaussian(1.0, 1e-5, "classic"),           # classic needs ε < 1
    lambda: Gaussian(3.0, 1e-5, calibration="classic"),
    lambda: Gaussian(0.5, 1e-5, calibration="exact"),
    lambda: Gaussian(0.0, 1e-5, calibration="analytic"),
    lambda: Exponential(1.0, []),
    lambda: Exponential(1.0, ["a", "b", "a"]),
    lambda: Exponential(1.0, [[1], [1]]),
    lambda: Exponential(1.0, "abc"),
    lambda: Exponential(1.0, {1, 2}),
    lambda: Exponential(1.0, 5),
    lambda: Exponential(0.0, [1, 2]),
    lambda: Bernstein(1.0, lattice=0, dims=1),
    lambda: Bernstein(1.0, lattice=3, dims=0),
    lambda: Bernstein(1.0, lattice=3, dims=1, order=0),
    lambda: Bernstein(1.0, lattice=2.5, dims=1),
    lambda: Bernstein(1.0, lattice=True, dims=1),
    lambda: Bernstein(1.0, lattice=100, dims=5),      # 101^5 lattice points
    lambda: Bernstein(-1.0, lattice=3, dims=1),
    lambda: bernstein_approximation(np.zeros(4), 0, 1),
])
def test_bad_parameters_raise_mechanism_error(make):
    with pytest.raises(MechanismError):
        make()


def test_gaussian_classic_error_suggests_analytic():
    with pytest.raises(MechanismError, match="analytic"):
        Gaussian(1.5, 1e-5, calibration="classic")


def test_gaussian_defaults_to_the_analytic_calibration():
    mech = Gaussian(2.0, 1e-6)  # refused before: the classic default allowed only ε < 1
    assert mech.calibration == "analytic"
    assert mech.noise_scale(1.0) < Gaussian(0.9, 1e-6, calibration="classic").noise_scale(1.0)
    assert Gaussian(0.5, 1e-5).noise_scale(1.0) < Gaussian(0.5, 1e-5, calibration="classic").noise_scale(1.0)


ALL_MECHS = [
    (Laplace(1.0), np.zeros(3)),
    (Gaussian(0.5, 1e-5, calibration="classic"), np.zeros(3)),
    (Gaussian(2.0, 1e-5, "analytic"), np.zeros(3)),
    (Exponential(1.0, ["x", "y", "z"]), np.zeros(3)),
    (Bernstein(1.0, 2, 1), np.zeros(3)),
]


@pytest.mark.parametrize("mech,value", ALL_MECHS, ids=lambda x: getattr(x, "name", ""))
@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), -float("inf"), "1", None])
def test_bad_sensitivity_raises_mechanism_error(mech, value, bad):
    with pytest.raises(MechanismError):
        mech.noise_scale(bad)
    with pytest.raises(MechanismError):
        mech.release(value, bad)


@pytest.mark.parametrize("mech,value", ALL_MECHS, ids=lambda x: getattr(x, "name", ""))
def test_non_finite_target_output_is_refused(mech, value):
    bad = value.copy()
    bad[1] = np.nan
    with pytest.raises(TargetError):
        mech.release(bad, 1.0)


def test_wrong_target_output_shape_is_a_target_error():
    with pytest.raises(TargetError):
        Exponential(1.0, ["a", "b"]).embed([1.0, 2.0, 3.0])
    with pytest.raises(TargetError):
        Exponential(1.0, ["a", "b"]).embed(lambda r: [1.0, 2.0])
    with pytest.raises(TargetError):
        Laplace(1.0).embed({"a": 1})


def test_noise_module_validation():
    with pytest.raises(MechanismError):
        noise.laplace(np.zeros(2), -1.0)
    with pytest.raises(MechanismError):
        noise.gaussian(np.zeros(2), float("nan"))
    with pytest.raises(MechanismError):
        noise.laplace(np.array([np.nan]), 1.0)
    with pytest.raises(MechanismError):
        noise.noisy_max_index([], 1.0)
    with pytest.raises(MechanismError):
        noise.laplace(np.zeros((2, 2)), 1.0)
    assert noise.noisy_max_index([3.0], 5.0) == 0
    np.testing.assert_array_equal(noise.gaussian(np.array([1.0, -2.0]), 0.0), [1.0, -2.0])


# --------------------------------------------------------------------------------------------------
# embedding, norms, identity


def test_embed_shapes():
    assert Laplace(1.0).embed(np.ones((2, 3))).shape == (6,)
    assert Laplace(1.0).embed(2.5).shape == (1,)
    assert Gaussian(0.5, 1e-3).embed([[1, 2], [3, 4]]).dtype == np.float64
    assert Exponential(1.0, list("abcd")).embed(np.ones((2, 2))).shape == (4,)
    assert Bernstein(1.0, 3, 2).embed(lambda y: y.sum(axis=1)).shape == (16,)


@pytest.mark.parametrize("mech,order", [
    (Laplace(1.0), 1),
    (Gaussian(0.5, 1e-5), 2),
    (Exponential(1.0, list(range(7))), np.inf),
    (Bernstein(1.0, 6, 1), np.inf),
])
def test_distances_equal_numpy_norms(mech, order):
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(50, 7)), rng.normal(size=(50, 7))
    np.testing.assert_allclose(mech.distance(a, b), np.linalg.norm(a - b, ord=order, axis=1), rtol=1e-12)
    assert mech.distance(a, b).shape == (50,)
    a[3, 2] = np.nan
    b[4, 1] = np.inf
    d = mech.distance(a, b)
    assert np.isnan(d[3]) and d[4] == np.inf


def test_norms_and_names():
    assert [(m.name, m.norm) for m, _ in ALL_MECHS] == [
        ("laplace", "l1"), ("gaussian", "l2"), ("gaussian", "l2"), ("exponential", "linf"), ("bernstein", "linf")]


def test_identity_is_jsonable_and_stable_and_pickles():
    for mech, _ in ALL_MECHS:
        ident = mech.identity()
        assert ident["name"] == mech.name and ident["params"]["epsilon"] == mech.epsilon
        json.dumps(ident)
        clone = pickle.loads(pickle.dumps(mech))
        assert fingerprint(clone) == fingerprint(mech)
        assert clone.noise_scale(1.0) == mech.noise_scale(1.0)
    assert fingerprint(Gaussian(2.0, 1e-5, "analytic")) != fingerprint(Gaussian(2.0, 1e-6, "analytic"))
    assert Bernstein(1.0, 4, 2, 3).identity()["params"] == {"epsilon": 1.0, "lattice": 4, "dims": 2, "order": 3}


def test_docstring_examples_run():
    for module in (mechanisms, mechanisms.base, mechanisms.laplace, mechanisms.gaussian,
                   mechanisms.exponential, mechanisms.bernstein, noise):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        assert result.failed == 0, module.__name__
