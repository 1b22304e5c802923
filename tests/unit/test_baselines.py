"""raydp.baselines: exact sensitivities against brute force, PTR's ⊥, the selection mechanisms'
frequencies against their formulas, sample-and-aggregate (local and one small Ray run), and a tiny
run of jobs/compare_baselines.py.

Randomness: data come from numpy with fixed seeds. Privacy noise comes from OpenDP and cannot be
seeded, so every statistical assertion below states its false-alarm probability (the chance the
test fails although the code is right); each is at most 1e-4.
"""

from __future__ import annotations

import itertools
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from scipy import integrate, stats

import raydp
from raydp import baselines as B
from raydp import oracles
from raydp.errors import InvalidArgumentError, MechanismError, TargetError

from paths import REPO as ROOT
ALPHA = 1e-4  # false-alarm probability of each statistical test


def _small_case(seed: int, max_n: int = 5):
    """A small database on a small integer domain containing the bounds."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, max_n + 1))
    g = int(rng.integers(2, 6 if n >= 4 else 7))
    dom = np.sort(rng.choice(np.arange(0, 12), size=g, replace=False)).astype(float)
    x = rng.choice(dom, size=n)
    return x, dom, float(dom[0]), float(dom[-1])


# ----------------------------------------------------------------------------- local / smooth sensitivity


@pytest.mark.parametrize("seed", range(40))
def test_local_sensitivity_median_closed_form_equals_bruteforce(seed):
    x, dom, lo, hi = _small_case(seed, max_n=7)
    assert B.local_sensitivity_median(x, lo, hi) == pytest.approx(B.local_sensitivity_bruteforce(B.lower_median, x, dom),
                                                                  abs=1e-12)


@pytest.mark.parametrize("seed", range(16))
def test_smooth_sensitivity_median_equals_bruteforce_maximisation(seed):
    x, dom, lo, hi = _small_case(100 + seed)
    beta = [0.05, 0.3, 1.0, 3.0][seed % 4]
    exact = B.smooth_sensitivity_median(x, beta, lo, hi)
    brute = B.smooth_sensitivity_bruteforce(B.lower_median, x, beta, dom)
    assert exact == pytest.approx(brute, abs=1e-12)


def test_smooth_sensitivity_median_worked_examples():
    # even n (lower median) with a gap: A^(k) by hand
    x = np.array([0.1, 0.4, 0.5, 0.6, 0.9])
    assert B.median_a_k(x, 0, 0.0, 1.0) == pytest.approx(0.1)
    assert B.median_a_k(x, 1, 0.0, 1.0) == pytest.approx(0.4)
    assert B.median_a_k(x, 2, 0.0, 1.0) == pytest.approx(0.5)
    assert B.median_a_k(x, 50, 0.0, 1.0) == pytest.approx(1.0)
    assert B.smooth_sensitivity_median(x, 1.0, 0.0, 1.0) == pytest.approx(0.4 * math.exp(-1))
    # the lecture's example (seed 003): n = 10 points spaced 1 apart, Λ = 1000, β = 2 -> S* = 1
    assert B.smooth_sensitivity_median(np.arange(1.0, 11.0), 2.0, 0.0, 1000.0) == pytest.approx(1.0)
    # half at L, half at U: the median's worst case
    assert B.local_sensitivity_median([0.0] * 5 + [1.0] * 5, 0.0, 1.0) == 1.0


@pytest.mark.parametrize("seed", range(6))
def test_smooth_sensitivity_mean_equals_bruteforce(seed):
    x, dom, lo, hi = _small_case(200 + seed, max_n=4)
    for beta in (0.2, 2.0):
        assert B.smooth_sensitivity_mean(x, beta, lo, hi) == pytest.approx(
            B.smooth_sensitivity_bruteforce(np.mean, x, beta, dom), abs=1e-12)


def test_smooth_sensitivity_is_a_smooth_upper_bound_on_continuous_data():
    rng = np.random.default_rng(5)
    lo, hi, beta = -3.0, 3.0, 0.2
    for _ in range(30):
        x = np.clip(rng.normal(size=41), lo, hi)
        s = B.smooth_sensitivity_median(x, beta, lo, hi)
        assert s >= B.local_sensitivity_median(x, lo, hi) - 1e-12
        y = x.copy()
        y[rng.integers(41)] = rng.uniform(lo, hi)  # a neighbour
        assert s <= math.exp(beta) * B.smooth_sensitivity_median(y, beta, lo, hi) + 1e-12


# ----------------------------------------------------------------------------- propose-test-release


def _ls_brute_all(dbs: np.ndarray, dom: np.ndarray) -> np.ndarray:
    f = lambda a: np.array([B.lower_median(r) for r in a])
    fy = f(dbs)
    ls = np.zeros(len(dbs))
    for i in range(dbs.shape[1]):
        for v in dom:
            nb = dbs.copy()
            nb[:, i] = v
            ls = np.maximum(ls, np.abs(f(nb) - fy))
    return ls


@pytest.mark.parametrize("seed", range(6))
def test_ptr_distance_to_unsafe_equals_bruteforce(seed):
    x, dom, lo, hi = _small_case(300 + seed, max_n=5)
    dbs = np.array(list(itertools.product(dom, repeat=x.size)))
    ls = _ls_brute_all(dbs, dom)
    dist = np.sum(dbs != x[None, :], axis=1)
    for bound in np.unique(np.concatenate([[0.0], np.diff(dom), [hi - lo - 0.5]])):
        unsafe = ls > bound
        want = int(dist[unsafe].min()) if unsafe.any() else math.inf
        assert B.ptr_distance_to_unsafe(x, bound, lo, hi) == want
    assert B.ptr_distance_to_unsafe(x, hi - lo, lo, hi) == math.inf


def test_ptr_returns_bottom_on_a_dataset_built_to_be_unsafe():
    # half the records at L, half at U: LS = U − L > bound, distance 0. A release happens only if
    # Lap(2/ε) > T = ln(1/δ)/(ε/2) + 1, probability ½·δ·e^{−ε/2} < 5e-7 per trial:
    # false alarm over 200 trials < 1e-4.
    x = np.array([0.0] * 10 + [1.0] * 10)
    assert B.ptr_distance_to_unsafe(x, 0.5, 0.0, 1.0) == 0
    releases = [B.ptr_median(x, 1.0, 1e-6, 0.5, 0.0, 1.0) for _ in range(200)]
    assert all(r.refused and r.value is None for r in releases)
    assert releases[0].notion == "(ε, δ)-DP" and releases[0].info["distance"] == 0


def test_ptr_answers_on_a_safe_dataset():
    # 400 identical records at the centre: A^(k) = 0 until k ≈ 200, far above T ≈ 28.6, so ⊥ has
    # probability ½·exp(−0.5·(199 − 28.6)) < 1e-36 per trial.
    x = np.zeros(400)
    k = B.ptr_distance_to_unsafe(x, 0.5, -1.0, 1.0)
    assert k >= 199
    r = B.ptr_median(x, 1.0, 1e-6, 0.5, -1.0, 1.0)
    assert not r.refused and -1.0 <= r.value <= 1.0 and r.scale == pytest.approx(1.0)


def test_propose_bound_uses_the_public_model_only():
    rng = np.random.default_rng(0)
    b = B.propose_bound(oracles.normal(0, 1), 2000, 1.0, 1e-6, -10.0, 10.0, rng=rng)
    assert 0 < b < 1.0
    # too few records for the threshold: the proposal falls back to the whole range
    assert B.propose_bound(oracles.normal(0, 1), 20, 0.1, 1e-6, -10.0, 10.0, rng=rng) == 20.0


# ----------------------------------------------------------------------------- selection mechanisms


def _len_bruteforce(x: np.ndarray, t: float, dom: np.ndarray) -> int:
    """Fewest records to change so the lower median equals t (changed records range over dom)."""
    n = x.size
    for k in range(n + 1):
        for idx in itertools.combinations(range(n), k):
            for vals in itertools.product(dom, repeat=k):
                y = x.copy()
                y[list(idx)] = vals
                if B.lower_median(y) == t:
                    return k
    raise AssertionError("unreachable")


@pytest.mark.parametrize("seed", range(8))
def test_inverse_sensitivity_lengths_equal_bruteforce(seed):
    rng = np.random.default_rng(400 + seed)
    n = int(rng.integers(1, 6))
    grid = np.arange(0.0, 6.0)
    x = rng.choice(grid, size=n)
    lens = B.inverse_sensitivity_lengths(x, grid)
    assert [int(v) for v in lens] == [_len_bruteforce(x, t, grid) for t in grid]


def _chi2_pvalue(draws: np.ndarray, probs: np.ndarray) -> float:
    counts = np.bincount(draws, minlength=probs.size).astype(float)
    expected = probs * draws.size
    # pool cells expected below 5 into one
    small = expected < 5
    if small.any():
        counts = np.append(counts[~small], counts[small].sum())
        expected = np.append(expected[~small], expected[small].sum())
        if expected[-1] == 0:
            counts, expected = counts[:-1], expected[:-1]
    return float(stats.chisquare(counts, expected).pvalue)


def _grid_index(grid, values):
    return np.searchsorted(grid, values)


def test_inverse_sensitivity_selection_frequencies_match_formula():
    grid = np.linspace(0.0, 1.0, 11)
    x = np.array([0.12, 0.31, 0.33, 0.48, 0.52, 0.77, 0.9])
    eps = 1.5
    lens = B.inverse_sensitivity_lengths(x, grid)
    want = np.exp(-eps * lens / 2) / np.exp(-eps * lens / 2).sum()
    probs = B.inverse_sensitivity_probabilities(x, eps, grid)
    np.testing.assert_allclose(probs, want, rtol=1e-12)
    draws = np.array([B.inverse_sensitivity_median(x, eps, 0.0, 1.0, grid=grid).value for _ in range(4000)])
    assert _chi2_pvalue(_grid_index(grid, draws), probs) > ALPHA  # false alarm 1e-4


def test_exponential_quantile_selection_frequencies_match_formula():
    grid = np.linspace(-1.0, 1.0, 9)
    x = np.array([-0.8, -0.3, -0.2, 0.05, 0.1, 0.4, 0.45, 0.7])
    eps, q = 1.0, 0.25
    u = -np.abs(np.array([(x <= t).sum() for t in grid]) - q * x.size)
    np.testing.assert_allclose(B.quantile_utility(x, q, grid), u)
    want = np.exp(eps * u / 2) / np.exp(eps * u / 2).sum()
    probs = B.exponential_quantile_probabilities(x, q, eps, grid)
    np.testing.assert_allclose(probs, want, rtol=1e-12)
    draws = np.array([B.exponential_quantile(x, q, eps, -1.0, 1.0, grid=grid).value for _ in range(4000)])
    assert _chi2_pvalue(_grid_index(grid, draws), probs) > ALPHA  # false alarm 1e-4


def test_selection_is_computed_in_log_space():
    # n = 200 000 records and ε = 50: weights exp(−ε·len/2) underflow to 0 for almost every grid
    # point, but the log-space probabilities stay finite and the sampler still answers.
    x = np.full(200_000, 0.5)
    grid = np.linspace(0.0, 1.0, 101)
    p = B.inverse_sensitivity_probabilities(x, 50.0, grid)
    assert np.all(np.isfinite(p)) and p[50] == pytest.approx(1.0)
    assert B.inverse_sensitivity_median(x, 50.0, 0.0, 1.0, grid=grid).value == pytest.approx(0.5)


# ----------------------------------------------------------------------------- smooth-sensitivity noise


def test_admissible_parameters_follow_nrs():
    assert B.admissible_parameters(1.0) == (1.0 / 16, 0.25)  # γ = 4: (ε/4γ, ε/γ)
    assert B.admissible_parameters(0.5, exponent=2.0) == (0.5 / 8, 0.25)
    a, b = B.admissible_parameters(1.0, delta=1e-6)
    assert a == 0.5 and b == pytest.approx(1.0 / (2 * math.log(2e6)))


def test_admissible_noise_has_the_cauchy_like_density():
    # Kolmogorov–Smirnov against the CDF of h(z) ∝ 1/(1 + z^4): false alarm 1e-4.
    z = B.admissible_noise(3000, exponent=4.0)
    norm = math.pi / math.sqrt(2)  # ∫ 1/(1+z^4) dz over ℝ
    xs = np.linspace(-60, 60, 6001)
    dens = 1.0 / (1.0 + xs**4) / norm
    cdf_grid = np.concatenate([[0.0], np.cumsum((dens[1:] + dens[:-1]) / 2 * np.diff(xs))])
    tail = integrate.quad(lambda t: 1.0 / (1.0 + t**4) / norm, -np.inf, -60)[0]
    cdf = lambda v: np.clip(np.interp(v, xs, cdf_grid + tail, left=0.0, right=1.0), 0, 1)
    assert stats.kstest(z, cdf).pvalue > ALPHA


def test_smooth_median_release_notions_and_range():
    rng = np.random.default_rng(3)
    x = np.clip(rng.normal(size=501), -5, 5)
    r = B.smooth_median_release(x, 1.0, -5.0, 5.0)
    assert r.notion == "ε-DP" and r.delta == 0.0 and -5 <= r.value <= 5
    assert r.scale == pytest.approx(B.smooth_sensitivity_median(x, 0.25, -5, 5) * 16)
    r2 = B.smooth_median_release(x, 1.0, -5.0, 5.0, delta=1e-6)
    assert r2.notion == "(ε, δ)-DP" and r2.delta == 1e-6
    # |Z| > 100 has probability 2/(3·100³·π/√2) < 3.1e-7 under h(z) ∝ 1/(1 + z⁴):
    # 50 draws, false alarm < 1.6e-5
    for _ in range(50):
        v = B.smooth_median_release(x, 1.0, -5.0, 5.0, clip=False).value
        assert abs(v - B.lower_median(x)) <= 100 * r.scale


# ----------------------------------------------------------------------------- sample-and-aggregate


def test_block_values_partition_and_local_backend():
    x = np.arange(20.0)
    z = B.block_values(x, np.mean, 4, backend="local")
    np.testing.assert_allclose(z, [np.mean(x[j::4]) for j in range(4)])
    with pytest.raises(InvalidArgumentError, match="exceeds the number of records"):
        B.block_values(x, np.mean, 21, backend="local")
    with pytest.raises(InvalidArgumentError, match="backend"):
        B.block_values(x, np.mean, 2, backend="spark")
    with pytest.raises(TargetError, match="block 0"):
        B.block_values(x, lambda b: float("nan"), 2, backend="local")


def test_sample_and_aggregate_is_accurate_with_a_large_budget():
    # ε = 200: quartiles within a few ranks, Laplace scale (b − a)/(k·100) ≈ 1e-4. The tolerance
    # 0.05 is > 100 noise scales and covers the rank error: false alarm far below 1e-4.
    rng = np.random.default_rng(11)
    x = np.clip(rng.normal(1.0, 1.0, size=5000), -10, 10)
    r = B.sample_and_aggregate(x, np.mean, 200.0, -10.0, 10.0, blocks=500, backend="local")
    assert r.notion == "ε-DP" and abs(r.value - x.mean()) < 0.05
    a, b = r.info["interval"]
    assert a < 1.0 < b


@pytest.mark.ray
def test_sample_and_aggregate_blocks_as_ray_tasks_match_local(ray_session):
    rng = np.random.default_rng(12)
    x = rng.normal(size=600)
    local = B.block_values(x, np.median, 60, backend="local")
    remote = B.block_values(x, np.median, 60, backend="ray", tasks=3)
    np.testing.assert_array_equal(local, remote)
    r = B.sample_and_aggregate(np.clip(x, -5, 5), np.median, 1.0, -5.0, 5.0, blocks=60, backend="ray")
    assert r.info["backend"] == "ray" and -5 <= r.value <= 5


# ----------------------------------------------------------------------------- validation and targets


def test_invalid_arguments_are_refused_with_clear_messages():
    x = np.array([0.1, 0.5, 0.9])
    with pytest.raises(InvalidArgumentError, match="public range"):
        B.smooth_sensitivity_median([0.1, 2.0], 1.0, 0.0, 1.0)
    with pytest.raises(InvalidArgumentError, match="beta"):
        B.smooth_sensitivity_median(x, 0.0, 0.0, 1.0)
    with pytest.raises(InvalidArgumentError, match="lower < upper"):
        B.smooth_sensitivity_median(x, 1.0, 1.0, 1.0)
    with pytest.raises(InvalidArgumentError, match="NaN"):
        B.local_sensitivity_median([0.1, np.nan], 0.0, 1.0)
    with pytest.raises(MechanismError, match="epsilon"):
        B.global_median_release(x, -1.0, 0.0, 1.0)
    with pytest.raises(MechanismError, match="delta"):
        B.ptr_median(x, 1.0, 0.0, 0.1, 0.0, 1.0)
    with pytest.raises(InvalidArgumentError, match="bound"):
        B.ptr_median(x, 1.0, 1e-6, -0.1, 0.0, 1.0)
    with pytest.raises(InvalidArgumentError, match="exponent"):
        B.smooth_median_release(x, 1.0, 0.0, 1.0, exponent=1.5)
    with pytest.raises(InvalidArgumentError, match="increasing"):
        B.inverse_sensitivity_median(x, 1.0, 0.0, 1.0, grid=[0.5, 0.2, 0.9])
    with pytest.raises(InvalidArgumentError, match="outside the public range"):
        B.exponential_quantile(x, 0.5, 1.0, 0.0, 1.0, grid=[0.0, 2.0])
    with pytest.raises(InvalidArgumentError, match="q must"):
        B.exponential_quantile(x, 1.5, 1.0, 0.0, 1.0)
    with pytest.raises(InvalidArgumentError, match="too large"):
        B.smooth_sensitivity_bruteforce(B.lower_median, np.zeros(12), 1.0, np.arange(10.0))
    with pytest.raises(InvalidArgumentError, match="1-D"):
        B.lower_median(np.zeros((2, 2)))


def test_global_releases_and_the_median_target():
    x = np.array([0.0, 0.2, 0.4, 0.6, 1.0, 1.0])
    assert B.lower_median(x) == 0.4 and B.median_target()(x) == 0.4
    np.testing.assert_array_equal(B.median_target().batch(np.stack([x, x[::-1]])), [0.4, 0.4])
    r = B.global_mean_release(x, 2.0, 0.0, 1.0)
    assert r.notion == "ε-DP" and r.scale == pytest.approx(1.0 / 6 / 2.0) and 0.0 <= r.value <= 1.0
    assert B.global_median_release(x, 1.0, 0.0, 1.0).info["global_sensitivity"] == 1.0
    est = raydp.estimate_sensitivity(B.median_target(), B.clipped(B.student_t(2.0), -10, 10), 101,
                                     gamma=0.1, seed=3, progress=False)
    assert 0 < est.sensitivity < 20
    rel = raydp.sample_then_respond(np.zeros(101), B.median_target(), raydp.Laplace(1.0), estimate=est)
    assert rel.gamma == 0.1


# ----------------------------------------------------------------------------- the job


@pytest.mark.subprocess
def test_compare_baselines_job_tiny_run(tmp_path):
    import pyarrow.parquet as pq

    out = tmp_path / "cb"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.run([sys.executable, str(ROOT / "jobs" / "compare_baselines.py"), "--backend", "local",
                           "--n", "60", "--eps", "0.5", "2", "--repeats", "2", "--dists", "normal", "bimodal",
                           "--grid-size", "401", "--out", str(out), "--quiet"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    for suffix in (".parquet", ".md", ".png"):
        assert (out / f"compare_baselines{suffix}").is_file()
    assert (out / "compare_baselines.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = pq.read_table(out / "compare_baselines.parquet").to_pylist()
    # median: 8 methods, mean: 5 methods; × 2 distributions × 1 n × 2 ε
    assert len(rows) == (8 + 5) * 2 * 2
    notions = {r["method"]: r["notion"] for r in rows}
    assert notions == {"global": "ε-DP", "sampled": "(ε, 0, γ)-RDP", "smooth_cauchy": "ε-DP",
                       "smooth_laplace": "(ε, δ)-DP", "ptr": "(ε, δ)-DP", "sample_aggregate": "ε-DP",
                       "exponential": "ε-DP", "inverse_sensitivity": "ε-DP"}
    for r in rows:
        assert r["repeats"] == 2 and 0.0 <= r["refused_rate"] <= 1.0
        if r["answered"]:
            assert 0.0 <= r["mae"] <= 20.0  # releases are clamped to [−10, 10]
    md = (out / "compare_baselines.md").read_text()
    assert "Sampled Δ̂ [(ε, 0, γ)-RDP]" in md and "PTR [(ε, δ)-DP]" in md and "Global Δ [ε-DP]" in md
    bad = subprocess.run([sys.executable, str(ROOT / "jobs" / "compare_baselines.py"), "--backend", "local",
                          "--n", "1", "--out", str(out)], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=60, check=False)
    assert bad.returncode == 2 and "--n values must be >= 2" in bad.stderr
