"""Theorem 15 / Table 1: the reference values of docs/method.md and the validation errors."""

import math

import pytest
from hypothesis import given, settings, strategies as st

import raydp
from raydp.errors import PlanError
from raydp.plan import MIN_M, gamma_lo, min_gamma


@pytest.mark.parametrize(
    "kwargs, m, k, gamma, rho, mode",
    [
        ({"gamma": 0.05}, 1305, 1305, 0.05, 0.0041829, "m"),
        ({"gamma": 0.1}, 285, 285, 0.1, 0.0097446, "m"),
        ({"m": 1000}, 1000, 1000, 0.0564677, 0.0048426, "gamma"),
        ({"m": 2000, "gamma": 0.05}, 2000, 1983, 0.05, 0.0033080, "k"),
    ],
)
def test_table1_reference_values(kwargs, m, k, gamma, rho, mode):
    p = raydp.make_plan(**kwargs)
    assert (p.m, p.k, p.mode) == (m, k, mode)
    assert round(p.gamma, 7) == gamma
    assert round(p.rho, 7) == rho
    assert p.satisfies_theorem15()


def test_cost_grows_like_the_paper_says():
    assert abs(raydp.make_plan(gamma=0.01).m - 42_000) / 42_000 < 0.02
    assert abs(raydp.make_plan(gamma=0.001).m - 5.5e6) / 5.5e6 < 0.02


def test_manual_mode_reports_the_gamma_the_pair_certifies():
    p = raydp.make_plan(m=2000, k=1983)
    assert p.mode == "manual"
    # γ = 1 − k/m + γ_lo(m, ρ*), which is ≤ 0.05 because k=1983 was the minimal k for γ=0.05
    assert p.gamma == pytest.approx(1 - 1983 / 2000 + gamma_lo(2000, p.rho))
    assert p.gamma <= 0.05 and p.satisfies_theorem15()
    # k = m gives the smallest γ that m allows, the same as mode "gamma"
    assert raydp.make_plan(m=1000, k=1000).gamma == pytest.approx(raydp.make_plan(m=1000).gamma)


def test_lower_branch_matters():
    # the principal branch of W gives a different, wrong ρ
    from scipy.special import lambertw

    wrong = math.exp(lambertw(-0.05 / (2 * math.sqrt(math.e)), k=0).real + 0.5)
    assert abs(wrong - raydp.make_plan(gamma=0.05).rho) > 0.1


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"gamma": 1.5}, "real number in (0, 1)"),
        ({"gamma": 0.0}, "real number in (0, 1)"),
        ({"gamma": float("nan")}, "real number in (0, 1)"),
        ({"gamma": "0.1"}, "must be a real number"),
        ({"m": 0}, "positive integer"),
        ({"m": 10.5}, "positive integer"),
        ({"m": -3, "gamma": 0.1}, "positive integer"),
        ({"m": 100, "k": 0}, "positive integer"),
        ({"m": 100, "k": 101}, "at most m"),
        ({"m": 1000, "gamma": 0.05}, "use gamma >= 0.0564678"),  # rounded up: 0.0564677 is refused
        ({"m": 1}, f"use m >= {MIN_M}"),
        ({"k": 5}, "k needs m"),
        ({"gamma": 0.1, "m": 100, "k": 5}, "at most two"),
        ({}, "give gamma"),
    ],
)
def test_validation_errors(kwargs, fragment):
    with pytest.raises(PlanError) as info:
        raydp.make_plan(**kwargs)
    assert fragment in str(info.value)
    assert isinstance(info.value, ValueError)


def test_gamma_below_gamma_lo_message_states_smallest_admissible():
    with pytest.raises(PlanError) as info:
        raydp.make_plan(m=2000, gamma=0.01)
    smallest = min_gamma(2000)
    stated = float(str(info.value).split("use gamma >= ")[1].split()[0])
    assert smallest <= stated < smallest * (1 + 1e-5)  # the smallest admissible γ, rounded up
    raydp.make_plan(m=2000, gamma=stated)  # and the stated value is indeed admissible


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=1e-4, max_value=0.999, allow_nan=False))
def test_gamma_mode_always_satisfies_theorem15(g):
    p = raydp.make_plan(gamma=g)
    assert p.satisfies_theorem15() and p.k <= p.m and p.gamma == g
    # minimal: one pair fewer breaks the m inequality
    assert p.m - 1 < math.log(1 / p.rho) / (2 * (g - p.rho) ** 2)


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=MIN_M, max_value=10**9), st.floats(min_value=1e-6, max_value=0.999))
def test_k_mode_satisfies_theorem15_or_refuses(m, g):
    try:
        p = raydp.make_plan(m=m, gamma=g)
    except PlanError as exc:
        assert g < min_gamma(m) and "use gamma >=" in str(exc)
        return
    assert p.satisfies_theorem15() and 1 <= p.k <= p.m
    if p.k > 1:  # minimal k: k − 1 breaks the k inequality
        assert p.k - 1 < p.m * (1 - g + gamma_lo(m, p.rho)) * (1 + 1e-12)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=1, max_value=10**7), st.integers(min_value=1, max_value=10**7))
def test_manual_mode_never_claims_more_than_theorem15(m, k):
    try:
        p = raydp.make_plan(m=m, k=k)
    except PlanError:
        return
    assert 0 < p.gamma < 1 and p.satisfies_theorem15()
