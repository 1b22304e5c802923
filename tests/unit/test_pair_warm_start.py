"""SVM.pair (amortised pair evaluation): same outputs as two cold libsvm fits, same Δ̂.

Run as a script for the speed-up benchmark (not part of the test run):

    python tests/test_pair_warm_start.py --pairs 30        # n = 1000, d = 2 and 8, Figure-5 data
"""

import argparse
import time

import numpy as np
import pytest

import raydp
from raydp import oracles, targets
from raydp.testing.cold import Cold

pytest.importorskip("sklearn")

# libsvm stops at tol = 1e-7 (KKT), which leaves ‖·‖₁ errors up to ~1e-6 at n = 1000 (raydp/targets/svm.py);
# the active-set answers are exact, so this is the bound on |pair − cold| and on |G_pair − G_cold|.
TOL = 5e-6


def neighbours(d, n, seed):
    rec = oracles.svm_two_class(d).sample(np.random.default_rng(seed), n + 1)
    return rec[:n], np.concatenate([rec[: n - 1], rec[n:]])


@pytest.mark.parametrize("d,n", [(2, 1000), (8, 1000), (2, 200), (5, 300), (16, 200)])
def test_pair_equals_cold_fits(d, n):
    t = targets.svm(C=3)
    for seed in range(6):
        D, Dp = neighbours(d, n, seed)
        a, b = t(D), t(Dp)
        pa, pb = t.pair(D, Dp)
        assert pa.shape == pb.shape == (d + 1,) and pa.dtype == pb.dtype == np.float64
        assert np.abs(pa - a).sum() < TOL and np.abs(pb - b).sum() < TOL
        assert abs(np.abs(pa - pb).sum() - np.abs(a - b).sum()) < TOL


@pytest.mark.parametrize("C", [0.3, 30.0])
def test_pair_equals_cold_fits_other_C(C):
    t = targets.svm(C=C)
    for seed in range(4):
        D, Dp = neighbours(2, 500, 100 + seed)
        a, b = t(D), t(Dp)
        pa, pb = t.pair(D, Dp)
        assert np.abs(pa - a).sum() < TOL and np.abs(pb - b).sum() < TOL


def test_pair_solution_is_optimal_and_deterministic():
    """The pair answer minimises the consistent objective at least as well as libsvm does."""
    C, n = 3.0, 400
    D, Dp = neighbours(2, n, 7)
    t = targets.svm(C=C)

    def obj(db, wb):
        y, X = db[:, 0], db[:, 1:]
        return C / n * np.maximum(0, 1 - y * (X @ wb[:-1] + wb[-1])).sum() + 0.5 * wb[:-1] @ wb[:-1]

    pa, pb = t.pair(D, Dp)
    assert obj(D, pa) <= obj(D, t(D)) + 1e-12 and obj(Dp, pb) <= obj(Dp, t(Dp)) + 1e-12
    qa, qb = t.pair(D, Dp)
    assert np.array_equal(pa, qa) and np.array_equal(pb, qb)  # G is a function of the pair


def test_pair_raises_like_call_and_honours_max_iter():
    from raydp.errors import TargetError

    D, Dp = neighbours(2, 50, 1)
    one_class = Dp.copy()
    one_class[:, 0] = 1.0
    with pytest.raises(TargetError, match="single class"):
        targets.svm().pair(D, one_class)
    bad = Dp.copy()
    bad[0, 0] = 0.0
    with pytest.raises(TargetError, match=r"\+1 or -1"):
        targets.svm().pair(D, bad)
    # a lowered max_iter means libsvm for both databases, exactly as __call__
    t = targets.svm(max_iter=50_000)
    pa, pb = t.pair(D, Dp)
    assert np.array_equal(pa, t(D)) and np.array_equal(pb, t(Dp))


def test_pair_identity_unchanged():
    assert targets.svm(C=3).identity() == {"name": "svm", "params": {"C": 3.0, "tol": 1e-7, "max_iter": 10_000_000}}


class CountingSVM(targets.SVM):
    pairs = 0

    def pair(self, database, database_prime):
        CountingSVM.pairs += 1
        return super().pair(database, database_prime)


def test_estimate_same_with_and_without_pair_path():
    t = CountingSVM(C=3)
    kw = dict(oracle=oracles.svm_two_class(2), n=300, m=60, seed=4, keep_sample=True, progress=False)
    with_pair = raydp.estimate_sensitivity(t, **kw)
    cold = raydp.estimate_sensitivity(Cold(t), **kw)
    assert with_pair.failures == cold.failures == 0
    assert np.all(np.abs(with_pair.sample - cold.sample) < TOL)
    assert abs(with_pair.sensitivity - cold.sensitivity) < TOL
    assert with_pair.target == cold.target  # same identity: stores and estimates are interchangeable
    assert CountingSVM.pairs == 60  # the engine really took the pair path, once per pair


def _bench(pairs: int) -> None:
    t = targets.svm(C=3)
    for d in (2, 8):
        tc, tp, err, gerr = [], [], [], []
        for seed in range(pairs):
            D, Dp = neighbours(d, 1000, 2017 + seed)
            t0 = time.perf_counter()
            a, b = t(D), t(Dp)
            tc.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            pa, pb = t.pair(D, Dp)
            tp.append(time.perf_counter() - t0)
            err.append(max(np.abs(pa - a).max(), np.abs(pb - b).max()))
            gerr.append(abs(np.abs(a - b).sum() - np.abs(pa - pb).sum()))
        tc, tp = np.array(tc), np.array(tp)
        print(f"d={d}, n=1000, {pairs} pairs: two cold fits {1e3 * np.median(tc):.2f} ms, pair() "
              f"{1e3 * np.median(tp):.2f} ms (medians); median speed-up {np.median(tc / tp):.1f}x; "
              f"max |pair - cold| {max(err):.1e}, max |G_pair - G_cold| {max(gerr):.1e}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="benchmark SVM.pair against two cold libsvm fits")
    ap.add_argument("--pairs", type=int, default=30)
    _bench(ap.parse_args().pairs)
