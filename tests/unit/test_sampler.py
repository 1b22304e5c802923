"""The sensitivity sampler: reproducibility by (seed, block), failures, Example 6 statistically."""

import math

import numpy as np
import pytest
from scipy import stats

import raydp
from raydp import oracles, targets
from raydp.engine import LocalBackend
from raydp.engine.blocks import PairJob, default_block_size, probe_output_dim
from raydp.errors import InvalidArgumentError, InvalidTypeError, OracleError, TargetError
from raydp.engine.reduce import TopK, kth_smallest


def _job(m=103, n=20, block_size=10, seed=11, target=None, strict=False):
    mech = raydp.Laplace(1.0)
    target = target or targets.mean()
    oracle = oracles.exponential(1.0)
    dim = probe_output_dim(target, oracle, mech, n, seed)
    return PairJob(target=target, oracle=oracle, mechanism=mech, n=n, m=m, seed=seed,
                   block_size=block_size, out_dim=dim, strict=strict)


def run_blocks(job, blocks, **options):
    return LocalBackend(**options).run(job, blocks)


def _sample(results, m):
    g = np.full(m, np.nan)
    for r in results:
        g[r.start : r.start + r.g.size] = r.g
    return g


@pytest.mark.parametrize("group_size, shuffle", [(1, None), (3, None), (1, 5), (4, 99), (100, None)])
def test_grouping_and_order_never_change_the_sample(group_size, shuffle):
    job = _job()
    blocks = job.layout.blocks()
    reference = _sample(run_blocks(job, blocks), job.m)
    got = _sample(run_blocks(job, blocks, group_size=group_size, shuffle_seed=shuffle), job.m)
    assert np.isfinite(reference).all()
    assert np.array_equal(reference, got)  # bit for bit


def test_pair_g_depends_only_on_seed_block_size_and_index():
    # the first 103 pairs of an m=250 run equal the m=103 run: runs can be extended
    short = _sample(run_blocks(_job(m=103), range(11)), 103)
    long = _sample(run_blocks(_job(m=250), range(25)), 250)
    assert np.array_equal(short, long[:103])
    # a different block size is a different run
    other = _sample(run_blocks(_job(m=103, block_size=7), range(15)), 103)
    assert not np.array_equal(short, other)


def test_block_g_matches_the_definition():
    job = _job(m=10, n=5, block_size=10)
    (res,) = list(run_blocks(job, [0]))
    records, _ = job.draw(0)
    for j in range(10):
        d = records[j, :5]
        dp = np.concatenate([records[j, :4], records[j, 5:6]])
        assert res.g[j] == pytest.approx(abs(d.mean() - dp.mean()), rel=1e-12)


def test_estimate_is_reproducible_and_seed_sensitive():
    kw = dict(n=50, gamma=0.1, progress=False, keep_sample=True)
    a = raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), seed=3, **kw)
    b = raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), seed=3, **kw)
    c = raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), seed=4, **kw)
    assert a.sensitivity == b.sensitivity and np.array_equal(a.sample, b.sample)
    assert not np.array_equal(a.sample, c.sample)
    assert a.sensitivity == kth_smallest(a.sample, a.plan.k)
    assert a.block_size == default_block_size(50, a.plan.m, batched=True)


def test_seed_none_is_recorded_and_replays():
    a = raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), 30, m=200, progress=False)
    b = raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), 30, m=200, seed=a.seed,
                                   progress=False)
    assert a.sensitivity == b.sensitivity


def test_batched_and_pairwise_targets_agree():
    plain = lambda db: float(np.mean(db))  # noqa: E731 — no .batch: pair-by-pair path
    kw = dict(n=40, m=300, seed=8, block_size=16, progress=False, keep_sample=True)
    a = raydp.estimate_sensitivity(targets.mean(), oracles.exponential(2.0), **kw)
    b = raydp.estimate_sensitivity(plain, oracles.exponential(2.0), **kw)
    np.testing.assert_allclose(a.sample, b.sample, rtol=1e-9, atol=1e-15)


class Flaky:
    """Raises on databases whose first record is large, returns NaN on some others."""

    def __call__(self, db):
        if db[0] > 2.5:
            raise RuntimeError("solver diverged")
        if db[1] > 3.0:
            return float("nan")
        return float(np.mean(db))


def test_failed_pairs_count_as_infinity_never_dropped():
    est = raydp.estimate_sensitivity(Flaky(), oracles.exponential(1.0), 10, m=2000, seed=1,
                                     progress=False, keep_sample=True)
    # P(first record > 2.5) = e^-2.5 ≈ 8%: many pairs fail and every one is +inf in the sample
    inf = np.isinf(est.sample)
    assert est.failures == inf.sum() > 50
    assert est.sample.size == 2000 and not np.isnan(est.sample).any()
    assert set(est.failure_kinds) <= {"target raised", "non-finite output"}
    assert est.failure_kinds["target raised"] > 0 and est.failure_kinds["non-finite output"] > 0
    # more failures than m − k + 1 → Δ̂ is +inf, and a release is refused
    assert math.isinf(est.sensitivity)
    with pytest.raises(raydp.MechanismError, match="pairs failed"):
        raydp.sample_then_respond(np.ones(10), Flaky(), raydp.Laplace(1.0), estimate=est)


def test_strict_mode_raises_on_first_failure():
    with pytest.raises(TargetError, match="strict"):
        raydp.estimate_sensitivity(Flaky(), oracles.exponential(1.0), 10, m=500, seed=1, strict=True,
                                   progress=False)


def test_wrong_shape_counts_as_failure():
    def changing(db):
        return np.zeros(3) if db[0] > 2.0 else np.zeros(2) + db.mean()

    est = raydp.estimate_sensitivity(changing, oracles.exponential(1.0), 10, m=300, seed=2,
                                     progress=False)
    assert est.output_dim in (2, 3) and est.failure_kinds.get("wrong output shape", 0) > 0


def test_topk_merge_in_any_tree_equals_full_sort():
    rng = np.random.default_rng(0)
    chunks = [rng.exponential(size=rng.integers(1, 50)) for _ in range(40)]
    full = np.concatenate(chunks)
    for keep in (1, 7, 60):
        flat = TopK(keep)
        for c in chunks:
            flat.add(c)
        halves = [TopK(keep), TopK(keep)]
        for i, c in enumerate(chunks):
            halves[i % 2].add(c)
        tree = halves[0].merge(halves[1])
        k = full.size - keep + 1
        assert flat.order_statistic() == tree.order_statistic() == kth_smallest(full, k)


@pytest.mark.parametrize("bad, kw, error", [
    ("n", dict(n=0), InvalidArgumentError), ("n", dict(n=2.5), InvalidTypeError),
    ("seed", dict(seed=-1), InvalidArgumentError), ("block_size", dict(block_size=0), InvalidArgumentError),
    ("backend", dict(backend="spark"), InvalidArgumentError),
])
def test_estimate_validates_arguments(bad, kw, error):
    args = dict(n=10, m=100, progress=False)
    args.update(kw)
    with pytest.raises(error, match=bad):
        raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), **args)


def test_for_gamma_rederives_from_the_sample():
    est = raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), 20, m=3000, seed=5,
                                     progress=False, keep_sample=True)
    other = est.for_gamma(0.1)
    assert other.plan.mode == "k" and other.plan.m == 3000
    assert other.sensitivity == kth_smallest(est.sample, other.plan.k)
    assert other.sensitivity <= est.sensitivity


# ---- Example 6 as a statistical test ------------------------------------------------------
#
# f = mean of n iid Exp(λ): G = |x_n − x_{n+1}|/n ~ Exp(nλ) exactly, so Φ(x) = 1 − exp(−nλx) and
# Δ*(γ) = log(1/γ)/(λn). Theorem 15's proof (DKW with Massart's constant) gives, for each run,
#   P(Φ(Δ̂) < 1 − γ) ≤ ρ.
# So across R independent seeded runs the count of "too small" Δ̂ is stochastically below
# Binomial(R, ρ). We reject if the count exceeds the Binomial(R, ρ) upper 1e-6 quantile
# (false-alarm rate ≤ 1e-6 for a correct sampler). Upper side: Δ̂ = G_(k) with k ≤ m, and
# G_(k) ≤ G_(m) = max of m Exp(nλ), whose 1 − 1e-6 quantile is log(m/1e-6)/(nλ) (union bound).
# Every Δ̂ must sit below it: a per-run false-alarm of 1e-6, 1e-6·R overall.

N, LAM = 100, 1.0


def _delta_star(gamma):
    return math.log(1 / gamma) / (LAM * N)


@pytest.mark.parametrize("kwargs", [{"gamma": 0.05}, {"m": 2000, "gamma": 0.05}, {"m": 1000}])
def test_example6_coverage_and_tightness(kwargs):
    runs = 200
    p = raydp.make_plan(**kwargs)
    too_small = 0
    upper = math.log(p.m / 1e-6) / (LAM * N)
    for seed in range(runs):
        est = raydp.estimate_sensitivity(targets.mean(), oracles.exponential(LAM), N, seed=seed,
                                         progress=False, **kwargs)
        cdf = 1 - math.exp(-N * LAM * est.sensitivity)
        too_small += cdf < 1 - p.gamma
        assert est.sensitivity < upper
    limit = stats.binom.ppf(1 - 1e-6, runs, p.rho)
    assert too_small <= limit, (too_small, limit)


def test_example6_mean_estimate_is_close_to_delta_star():
    est = [raydp.estimate_sensitivity(targets.mean(), oracles.exponential(LAM), N, m=8000, gamma=0.05,
                                      seed=s, progress=False).sensitivity for s in range(20)]
    # Δ̂ with m=8000 (opt. k) estimates the (1 − γ + γ_lo)-quantile: above Δ* but close (Figure 4)
    ratio = np.mean(est) / _delta_star(0.05)
    assert 1.0 < ratio < 1.4, ratio


class _OracleFailsOnBlocks:
    """Draws fine for the probe (n records) and raises, quoting a record, for a block's draw."""

    def sample(self, rng, size):
        if size > 30:
            raise RuntimeError("record 31337.4242 is malformed")
        return rng.exponential(1.0, size)

    def identity(self):
        return {"name": "fails_on_blocks", "params": {}}


def test_oracle_failing_mid_run_stops_the_run_without_quoting_records():
    with pytest.raises(OracleError, match="drawing block") as info:
        raydp.estimate_sensitivity(targets.mean(), _OracleFailsOnBlocks(), 30, m=200, seed=1, progress=False)
    assert "31337" not in str(info.value)


def test_target_returning_nan_on_the_probe_is_refused():
    with pytest.raises(TargetError, match="non-finite"):
        raydp.estimate_sensitivity(lambda db: float("nan"), oracles.exponential(1.0), 30, m=200, seed=1,
                                   progress=False)
