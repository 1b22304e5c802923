"""The guarantee, tested: Theorem 15's coverage on a target with an exact law, and a privacy audit.

Two kinds of randomness, two kinds of error statement:

* oracle draws are numpy, seeded: those tests are deterministic, and the docstring states the
  probability that the fixed seeds would have made a *correct* implementation fail (their
  false-alarm rate) — and, for power checks, the probability that a wrong one would have passed;
* mechanism noise comes from OpenDP and cannot be seeded: each audit's verdict is wrong for a
  correct mechanism with probability at most ALPHA (all its bounds hold simultaneously with
  probability ≥ 1 − ALPHA), stated per test. Power statements (a mis-scaled mechanism is flagged) come
  with the miss probability of a normal approximation, from the spread of 8–12 pilot audits.

Reference law (derivation in :mod:`raydp.testing.coverage`): for the median of n = 2r + 1 iid U(0, 1) records,
G = |median(D) − median(D′)| has Φ(t) = 1 − (r + 1)/n · (1 − t)^(n+1) on [0, 1]: an atom r/n at 0 and
G | G > 0 ~ Beta(1, n + 1).
"""

from __future__ import annotations

import functools
import json
import math

import numpy as np
import pytest
from scipy import stats

import raydp
from raydp import testing as A
from raydp import oracles, targets
from raydp.errors import InvalidArgumentError, MechanismError
from raydp.testing import coverage, privacy

ALPHA = 1e-5  # per audit: P(a correct mechanism is not passed)
N_MED = 21


def _g_numpy(rng, pairs, n):
    """G for ``pairs`` neighbouring databases, by the definition (numpy median; D′ replaces x_n)."""
    x = rng.uniform(size=(pairs, n + 1))
    return np.abs(np.median(x[:, :n], axis=1) - np.median(x[:, np.r_[0 : n - 1, n]], axis=1))


def _law_tests(g, n, alpha):
    """p-values of the two halves of the law: #zeros ~ Binomial(len, r/n); positives ~ Beta(1, n + 1)."""
    r = (n - 1) // 2
    zeros = int(np.sum(g == 0))
    p_atom = stats.binomtest(zeros, g.size, r / n).pvalue
    p_cont = stats.kstest(g[g > 0], stats.beta(1, n + 1).cdf).pvalue
    return p_atom, p_cont


# ================================================================================================
# (a) the law of G for the median of uniforms


@pytest.mark.parametrize("n", [3, 11, 21])
def test_median_law_closed_form_equals_the_double_integral(n):
    """Deterministic: the closed form and scipy's dblquad over the (S_(r), S_(r+1)) density agree to 1e-8."""
    r = (n - 1) // 2
    for t in [0.0, 1e-4, 0.003, 0.02, 0.05, 0.1, 0.2, 0.4, 0.7, 0.99]:
        closed = float(A.median_of_uniforms_cdf(t, n))
        assert A.median_of_uniforms_cdf_integral(t, n) == pytest.approx(closed, abs=1e-8)
    assert float(A.median_of_uniforms_cdf(0.0, n)) == pytest.approx(r / n, abs=1e-15)  # the atom
    assert float(A.median_of_uniforms_cdf(1.0, n)) == 1.0
    assert float(A.median_of_uniforms_cdf(-0.1, n)) == 0.0
    for gamma in (0.01, 0.05, 0.1):
        q = A.median_of_uniforms_quantile(gamma, n)
        assert float(A.median_of_uniforms_cdf(q, n)) == pytest.approx(1 - gamma, abs=1e-12)
    with pytest.raises(InvalidArgumentError):
        A.median_of_uniforms_cdf(0.1, 20)  # even n: numpy averages the middle two, another law


@pytest.mark.parametrize("n", [11, 21])
def test_median_law_matches_monte_carlo(n):
    """False-alarm ≤ 1e-4 per n (seeded): binomial test of the atom and KS of the positive part, 5e-5 each.

    Also checks the identity the derivation rests on, median(D) = clip(x_n, S_(r), S_(r+1)), exactly;
    and that the test has power: the KS rejects a plausible slip of the derivation, (1 − t)^n in
    place of (1 − t)^(n+1) (Beta(1, n)). With ≥ 180 000 positive G the KS critical value at 1e-4 is
    c ≤ 0.0052, the two laws are 0.0167 (n = 21) or 0.0279 (n = 11) apart in sup norm, so by DKW a
    miss has probability ≤ 2·exp(−2·180000·(0.0167 − 0.0052)²) < 1e-20.
    """
    rng = np.random.default_rng(20170606 + n)
    g = _g_numpy(rng, 400_000, n)
    p_atom, p_cont = _law_tests(g, n, 1e-4)
    assert p_atom > 5e-5 and p_cont > 5e-5, (p_atom, p_cont)
    # the wrong law is rejected
    pos = g[g > 0]
    assert pos.size >= 180_000
    assert stats.kstest(pos, stats.beta(1, n).cdf).pvalue < 1e-4

    # the clip identity, on fresh draws
    r = (n - 1) // 2
    x = rng.uniform(size=(1000, n + 1))
    s = np.sort(x[:, : n - 1], axis=1)
    assert np.array_equal(np.median(x[:, :n], axis=1), np.clip(x[:, n - 1], s[:, r - 1], s[:, r]))


def test_median_law_matches_the_samplers_own_pairs():
    """False-alarm ≤ 1e-4 (seeded): the sampler's G (its own neighbour construction) follows Φ.

    Binomial test of the atom and KS of the positive part against Beta(1, 22), 5e-5 each, on the
    m = 100 000 G values of one kept sample.
    """
    est = raydp.estimate_sensitivity(targets.median(), oracles.uniform(), N_MED, m=100_000, seed=6,
                                     progress=False, keep_sample=True, backend="local")
    p_atom, p_cont = _law_tests(est.sample, N_MED, 1e-4)
    assert p_atom > 5e-5 and p_cont > 5e-5, (p_atom, p_cont)


# ================================================================================================
# (a) coverage of the sampler: P(Φ(Δ̂) < 1 − γ) ≤ ρ per run

RUNS = 1000
PLANS = [{"gamma": 0.1}, {"m": 2000, "gamma": 0.05}, {"m": 1000}]


@functools.cache
def _coverage(key):
    kwargs = dict(key)
    return A.sampler_coverage(targets.median(), oracles.uniform(), N_MED,
                              functools.partial(A.median_of_uniforms_cdf, n=N_MED), runs=RUNS,
                              seed=1000 * len(key) + int(kwargs.get("m", 0)), alpha=1e-6,
                              quantile=functools.partial(A.median_of_uniforms_quantile, n=N_MED), **kwargs)


@pytest.mark.parametrize("kwargs", PLANS, ids=["gamma=0.1", "m=2000,gamma=0.05", "m=1000"])
def test_coverage_of_the_median_sampler(kwargs):
    """False-alarm ≤ 1e-6 + 1e-4 (seeded runs): the binomial test against Binomial(RUNS, ρ) at 1e-6,
    and a KS test (1e-4) of the RUNS values of Δ̂ against their exact law P(Δ̂ ≤ t) = P(Bin(m, Φ(t)) ≥ k).

    Each run's failure event is Φ(Δ̂) < 1 − γ; Theorem 15 bounds its probability by ρ, and for a
    continuous Φ at the (1 − γ)-quantile the exact value is P(Bin(m, 1 − γ) ≥ k) (checked ≤ ρ here).
    """
    res = _coverage(tuple(sorted(kwargs.items())))
    p = raydp.make_plan(**kwargs)
    assert (res.m, res.k, res.rho, res.runs) == (p.m, p.k, p.rho, RUNS)
    assert res.exact_failure_prob <= res.rho  # Theorem 15, here with room to spare
    assert res.failures <= res.limit and res.passes, res
    assert res.p_value >= 1e-6
    assert res.law_pvalue > 1e-4, res.law_pvalue
    # Δ̂ estimates the exact Δ*(γ) from above (k/m ≥ 1 − γ): the mean sits above Δ*
    assert res.sensitivity_mean > res.delta_star > 0


@pytest.mark.parametrize("kwargs", PLANS, ids=["gamma=0.1", "m=2000,gamma=0.05", "m=1000"])
def test_coverage_test_flags_wrong_samplers(kwargs):
    """Power, from the same seeded runs: wrong order statistics of the same G samples are flagged.

    * "naive" (k = ⌈m(1 − γ)⌉, the plug-in quantile without the DKW margin) and "median"
      (k = ⌈m/2⌉) by the binomial test itself: the exact miss probability P(Bin(RUNS, p) ≤ limit), p
      the exact per-run failure probability (about 0.5 and 1), is asserted < 1e-6 before the flag is;
    * "off_by_one" (G_(k−1)) is invisible to the coverage test (its failure rate is also ≪ ρ: the
      theorem has slack) but not to the law test when k = m: the KS distance between the laws of
      G_(m) and G_(m−1) is D ≈ 0.37, so by DKW a miss has probability ≤ 2·exp(−2·RUNS·(D − c)²)
      (c the KS critical value at 1e-4), asserted < 1e-6.
    """
    res = _coverage(tuple(sorted(kwargs.items())))
    wrong = {w.name: w for w in res.wrong}
    for name in ("naive", "median"):
        w = wrong[name]
        assert w.exact_failure_prob > 0.4 and 1 - w.power < 1e-6
        assert w.flagged and w.p_value < 1e-6 and w.failures > res.limit, w
    ob = wrong["off_by_one"]
    assert ob.k == res.k - 1 and not ob.flagged  # hidden by the slack of Theorem 15 ...
    if res.k == res.m:  # ... but its law differs
        x = np.linspace(0.9, 1.0, 100_001)
        D = np.max(np.abs(stats.beta.cdf(x, res.k, res.m - res.k + 1) - stats.beta.cdf(x, res.k - 1, res.m - res.k + 2)))
        c = math.sqrt(math.log(2 / 1e-4) / (2 * RUNS))
        assert 2 * math.exp(-2 * RUNS * (D - c) ** 2) < 1e-6
        assert ob.law_pvalue < 1e-4, ob


def test_exact_failure_probability_is_the_binomial_tail():
    """Deterministic: the exact per-run failure probability and the rejection limit."""
    assert A.exact_failure_probability(10, 10, 0.1) == pytest.approx(0.9**10, rel=1e-12)
    assert A.exact_failure_probability(10, 1, 0.1) == pytest.approx(1 - 0.1**10, rel=1e-12)
    lim = coverage._reject_limit(200, 0.01, 1e-6)
    assert coverage._binom_pvalue(lim, 200, 0.01) >= 1e-6 > coverage._binom_pvalue(lim + 1, 200, 0.01)
    with pytest.raises(InvalidArgumentError):
        A.sampler_coverage(targets.median(), oracles.uniform(), 5, lambda t: t, runs=0, gamma=0.1)
    with pytest.raises(InvalidArgumentError):
        A.sampler_coverage(targets.median(), oracles.uniform(), 5, lambda t: t, runs=2, wrong=("nope",), gamma=0.1)


# ================================================================================================
# (b) the mechanism audit


def _check_correct(res, exact):
    assert res.passes, res
    assert res.epsilon_lower <= res.epsilon and res.delta_lower <= res.delta
    # the same event (all bounds hold) also gives the exact reference values as upper limits
    if exact["epsilon"] is not None:
        assert res.epsilon_lower <= exact["epsilon"] + 1e-12, (res, exact)
    if exact["delta"] is not None:
        assert res.delta_lower <= exact["delta"] + 1e-12, (res, exact)


def test_audit_laplace_passes_and_half_scale_is_flagged():
    """ALPHA = 1e-5 false alarm (correct Laplace not passed, or its ε̂ above the exact ε = 1).

    Power: with half the noise (true ε = 2, δ(1) = 0.39) 12 pilot audits at N = 40 000 gave
    ε̂ = 1.85 ± 0.025 and δ̂ = 0.356 ± 0.005; a miss (ε̂ ≤ 1 and δ̂ ≤ 0) is > 30 sd away. The
    tightness check ε̂ ≥ 0.75 for the correct one is > 7 sd away (pilot ε̂ ≈ 0.93 ± 0.025).
    """
    mech = raydp.Laplace(1.0)
    res = A.audit(mech, 0.0, 1.0, 1.0, samples=40_000, alpha=ALPHA)
    _check_correct(res, A.exact_privacy(mech, 0.0, 1.0, 1.0))
    assert res.epsilon_lower >= 0.75, res  # not vacuous: the bound is close to the exact ε = 1
    bad = A.Miscalibrated(mech, 0.5)
    assert A.exact_privacy(bad, 0.0, 1.0, 1.0)["epsilon"] == pytest.approx(2.0)
    res = A.audit(bad, 0.0, 1.0, 1.0, samples=40_000, alpha=ALPHA)
    assert not res.passes and res.epsilon_lower > 1.5 and res.delta_lower > 0.2, res


def test_audit_laplace_vector_output():
    """ALPHA = 1e-5 false alarm: a 2×2 output whose pair differs in two cells (ℓ1 distance Δ).

    The projection on the difference is post-processing, so the verdict stays valid (it is just
    not tight: the projected ratio is below e^ε).
    """
    mech = raydp.Laplace(0.5)
    x, xp = np.zeros((2, 2)), np.array([[0.5, 0.0], [0.0, -0.5]])
    res = A.audit(mech, x, xp, 1.0, samples=5_000, alpha=ALPHA)
    assert res.passes, res
    assert res.epsilon_lower <= 0.5


def test_audit_gaussian_classic_and_analytic():
    """ALPHA = 1e-5 false alarm per correct audit (two of them: 2e-5 for the test).

    Exact references: classic (0.9, 1e-3) is really (0.559, 1e-3)-DP on this pair, analytic
    (1, 1e-2) exactly (1, 1e-2)-DP; ε̂ must stay below them. Power: analytic with half σ has
    δ(1) = 0.150; 8 pilot audits at N = 15 000 gave δ̂ = 0.101 ± 0.010 against δ = 0.01 (9 sd). The
    classic "σ = Δ/ε" bug (the factor √(2 log(1.25/δ)) forgotten) gave δ̂ = 0.062 ± 0.005 against
    δ = 0.001 (12 sd). Miss probabilities < 1e-6 by the normal approximation.
    """
    classic = raydp.Gaussian(0.9, 1e-3, calibration="classic")
    analytic = raydp.Gaussian(1.0, 1e-2, calibration="analytic")
    for mech in (classic, analytic):
        res = A.audit(mech, 0.0, 1.0, 1.0, samples=10_000, alpha=ALPHA)
        _check_correct(res, A.exact_privacy(mech, 0.0, 1.0, 1.0))
    half = A.Miscalibrated(analytic, 0.5)
    assert A.exact_privacy(half, 0.0, 1.0, 1.0)["delta"] == pytest.approx(0.1503, abs=1e-3)
    res = A.audit(half, 0.0, 1.0, 1.0, samples=15_000, alpha=ALPHA)
    assert not res.passes and res.delta_lower > 0.01, res
    bug = A.Miscalibrated(classic, 1.0 / math.sqrt(2 * math.log(1.25 / 1e-3)))
    assert bug.noise_scale(1.0) == pytest.approx(1.0 / 0.9)
    res = A.audit(bug, 0.0, 1.0, 1.0, samples=15_000, alpha=ALPHA)
    assert not res.passes and res.delta_lower > 0.001, res


def test_audit_exponential():
    """ALPHA = 1e-5 false alarm (the exact ε on this pair is 0.897; ε̂ must stay below it).

    Scores s = (1, 0, …, 0) and s′ = (0, 1, …, 1) over 10 responses: ℓ∞ distance Δ = 1, the pair
    that pushes the exponential mechanism towards its ε. Power: with Δ/2 used in release (true
    ε = 1.78, δ(1) = 0.125) 12 pilot audits at N = 10 000 gave ε̂ = 1.40 ± 0.06 and
    δ̂ = 0.069 ± 0.009: a miss is ≥ 6.9 sd away on both (< 1e-6, normal approximation, both needed).
    """
    mech = raydp.Exponential(1.0, [f"r{i}" for i in range(10)])
    s, sp = np.array([1.0] + [0.0] * 9), np.array([0.0] + [1.0] * 9)
    exact = A.exact_privacy(mech, s, sp, 1.0)
    p, q = mech.probabilities(s, 1.0), mech.probabilities(sp, 1.0)
    assert exact["epsilon"] == pytest.approx(np.max(np.abs(np.log(p / q))), rel=1e-9)
    res = A.audit(mech, s, sp, 1.0, samples=10_000, alpha=ALPHA)
    assert res.bins == 10
    _check_correct(res, exact)
    res = A.audit(A.Miscalibrated(mech, 0.5), s, sp, 1.0, samples=10_000, alpha=ALPHA)
    assert not res.passes and res.epsilon_lower > 1.0, res


def test_audit_bernstein():
    """ALPHA = 1e-5 false alarm. K = 1, ℓ = 1: two lattice values, both moved by Δ (ℓ∞ distance Δ).

    With the statistic "largest noisy lattice value", the set {max ≤ 0} has likelihood ratio
    exactly e^ε, so the audit is tight. Power: with half the noise (the (K+1)^ℓ factor forgotten:
    true ε = 2) 12 pilot audits at N = 5 000 gave ε̂ = 1.42 ± 0.09, δ̂ = 0.130 ± 0.018
    (4.6 and 7.3 sd from a miss; both needed: < 1e-6, normal approximation).
    """
    mech = raydp.Bernstein(1.0, lattice=1, dims=1)
    stat = lambda rel: np.max(rel.lattice_values)  # noqa: E731
    F, Fp = np.zeros(2), np.ones(2)
    assert A.exact_privacy(mech, F, Fp, 1.0)["epsilon"] == pytest.approx(1.0)
    res = A.audit(mech, F, Fp, 1.0, samples=5_000, alpha=ALPHA, statistic=stat)
    _check_correct(res, A.exact_privacy(mech, F, Fp, 1.0))
    res = A.audit(A.Miscalibrated(mech, 0.5), F, Fp, 1.0, samples=5_000, alpha=ALPHA, statistic=stat)
    assert not res.passes and res.epsilon_lower > 1.0, res


def test_audit_counts_on_exact_expected_counts():
    """Deterministic: fed the expected counts of a known pair, the estimator is close to exact and below it.

    Two discrete laws on 4 outcomes with max ratio 3 (ε = log 3) and δ(log 2) = 0.1 for the
    direction P over Q; counts are n·p exactly (no noise), so only the confidence correction remains.
    """
    P = np.array([0.3, 0.3, 0.2, 0.2])
    Q = np.array([0.1, 0.3, 0.3, 0.3])
    n = 10**6
    out = A.audit_counts(P * n, Q * n, P * n, Q * n, n, n, epsilon=math.log(2), delta=0.0, alpha=1e-5)
    assert math.log(3) - 0.04 < out["epsilon_lower"] < math.log(3)
    assert out["epsilon_point"] == pytest.approx(math.log(3))
    assert 0.1 - 0.01 < out["delta_lower"] < 0.1
    assert out["delta_point"] == pytest.approx(0.1)
    # a δ claim lowers the audited ε: (ε′, δ = 0.05) needs ε′ ≥ log((0.3 − 0.05)/0.1)
    out = A.audit_counts(P * n, Q * n, P * n, Q * n, n, n, epsilon=math.log(2), delta=0.05, alpha=1e-5)
    assert out["epsilon_point"] == pytest.approx(math.log(2.5))


def test_audit_argument_checks_and_result_fields():
    mech = raydp.Laplace(1.0)
    with pytest.raises(InvalidArgumentError, match="not a neighbouring pair"):
        A.audit(mech, 0.0, 2.0, 1.0, samples=200)  # distance 2 > Δ = 1
    with pytest.raises(InvalidArgumentError, match="equal"):
        A.audit(mech, 1.0, 1.0, 1.0, samples=200)
    with pytest.raises(InvalidArgumentError):
        A.audit(mech, 0.0, 1.0, 1.0, samples=10)
    with pytest.raises(InvalidArgumentError):
        A.audit(mech, 0.0, 1.0, 1.0, samples=200, alpha=0.0)
    with pytest.raises(MechanismError):
        A.audit(mech, 0.0, 1.0, 0.0, samples=200)
    with pytest.raises(InvalidArgumentError):
        A.Miscalibrated(mech, 0.0)
    bad = A.Miscalibrated(mech, 0.5)
    assert bad.norm == "l1" and bad.privacy() == (1.0, 0.0) and bad.noise_scale(1.0) == 0.5
    assert json.loads(json.dumps(bad.identity()))["params"]["factor"] == 0.5
    res = A.audit(mech, 0.0, 1.0, 1.0, samples=1_000, claim=(3.0, 0.0))
    assert res.epsilon == 3.0 and res.samples == 1_000
    assert set(json.loads(json.dumps(res.to_dict()))) >= {"epsilon_lower", "delta_lower", "passes", "alpha"}


# ================================================================================================
# (c) the job, tiny


@pytest.mark.subprocess
def test_audit_job_tiny(tmp_path, capsys):
    """The job end to end at tiny sizes (few runs, few samples); checks the files and the table.

    Verdicts at these sizes are not asserted (power is low); only the table's shape and the
    coverage rows, whose seeded runs are deterministic (false-alarm ≤ 1e-6 each).
    """
    from job_util import load_job

    job = load_job("audit")
    code = job.main(["--runs", "30", "--scale", "0.05", "--out", str(tmp_path), "--quiet"])
    assert code in (0, 1)
    md = (tmp_path / "audit.md").read_text()
    data = json.loads((tmp_path / "audit.json").read_text())
    assert "| mechanism |" in md and "| plan |" in md
    assert md in capsys.readouterr().out
    assert len(data["coverage"]) == 3 and all(c["passes"] for c in data["coverage"])
    names = [r["mechanism"] for r in data["audit"]]
    assert any("Laplace" in n for n in names) and any("Exponential" in n for n in names)
    assert all(0.0 <= r["eps_lower"] and r["verdict"] in ("pass", "FLAGGED") for r in data["audit"])


def test_audit_docstring_examples_run():
    """The module's doctests (one is an audit: false alarm ≤ 1e-5, ε̂ ≤ 1.5 holds whenever its bounds do)."""
    import doctest

    result = doctest.testmod(privacy, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 3 and result.failed == 0
    for module in (A, coverage):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.attempted >= 1 and result.failed == 0, module.__name__
