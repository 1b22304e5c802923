"""Tests of raydp.oracles and raydp.targets (shapes, reproducibility, statistics, validation, pickling)."""

from __future__ import annotations

import json
import math
import pickle

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest
from scipy import stats

from raydp import oracles, targets
from raydp.errors import OracleError, TargetError

# Two-sided normal quantile at alpha = 1e-6: a correct implementation fails a CLT check with
# probability ~1e-6 (and never, with the fixed seeds used here).
Z = float(stats.norm.ppf(1 - 1e-6 / 2))  # ≈ 4.89


def rng(seed=0):
    return np.random.default_rng(seed)


def fig5_data(dim, n, seed):
    return oracles.svm_two_class(dim).sample(rng(seed), n)


def all_oracles(tmp_path=None):
    out = [
        oracles.exponential(2.0),
        oracles.normal(1.0, 2.0),
        oracles.normal(0.0, 1.0, dim=3),
        oracles.normal([0.0, 1.0], [1.0, 2.0], dim=2),
        oracles.uniform(-1.0, 2.0),
        oracles.uniform(0.0, 1.0, dim=4),
        oracles.gaussian_mixture([0.4, 0.6], [0.5, 0.75], [0.02, 0.005]),
        oracles.svm_two_class(5),
        oracles.bootstrap(np.arange(12.0).reshape(6, 2)),
        oracles.bootstrap(np.arange(5)),
    ]
    return out


ALL_TARGETS = [
    targets.mean(),
    targets.median(),
    targets.quantile(0.3),
    targets.svm(),
    targets.kde(0.1),
]


# ----------------------------------------------------------------------------- oracle shapes & rng


@pytest.mark.parametrize(
    "oracle, record_shape",
    [
        (oracles.exponential(1.5), ()),
        (oracles.normal(0.0, 1.0), ()),
        (oracles.normal(0.0, 1.0, dim=3), (3,)),
        (oracles.uniform(0.0, 1.0), ()),
        (oracles.uniform(0.0, 1.0, dim=2), (2,)),
        (oracles.gaussian_mixture([0.5, 0.5], [0.0, 1.0], [1.0, 1.0]), ()),
        (oracles.svm_two_class(8), (9,)),
        (oracles.bootstrap(np.ones((4, 3))), (3,)),
        (oracles.bootstrap(np.ones((4, 1))), ()),
        (oracles.bootstrap(np.ones(4)), ()),
    ],
)
def test_oracle_shapes_and_dtype(oracle, record_shape):
    for size in (0, 1, 17):
        x = oracle.sample(rng(), size)
        assert isinstance(x, np.ndarray)
        assert x.shape == (size, *record_shape)
        assert x.dtype == np.float64
        assert oracles.check_records(x, size) is not None


@pytest.mark.parametrize("oracle", all_oracles(), ids=repr)
def test_oracle_reproducible_and_only_uses_rng(oracle):
    np.random.seed(1)
    a = oracle.sample(rng(42), 50)
    np.random.seed(2)  # global numpy state must not matter
    b = oracle.sample(rng(42), 50)
    np.testing.assert_array_equal(a, b)
    c = oracle.sample(rng(43), 50)
    assert not np.array_equal(a, c)
    # a generator advances: two consecutive draws differ
    g = rng(42)
    assert not np.array_equal(oracle.sample(g, 50), oracle.sample(g, 50))


@pytest.mark.parametrize("oracle", all_oracles(), ids=repr)
def test_oracle_pickle_round_trip(oracle):
    clone = pickle.loads(pickle.dumps(oracle))
    np.testing.assert_array_equal(clone.sample(rng(7), 20), oracle.sample(rng(7), 20))
    assert clone.identity() == oracle.identity()
    json.dumps(oracle.identity())  # JSON-able


# ----------------------------------------------------------------------------- oracle statistics


def test_exponential_mean_and_sd():
    rate, n = 2.5, 200_000
    x = oracles.exponential(rate).sample(rng(1), n)
    assert np.all(x >= 0)
    # Exp(rate): mean 1/rate, sd 1/rate, so the sample mean has sd 1/(rate·sqrt(n)).
    assert abs(x.mean() - 1 / rate) < Z / (rate * math.sqrt(n))
    # sample sd: var of (x - mu)^2 is (mu4 - sigma^4) = 8/rate^4, so sd(s^2) ≈ sqrt(8/n)/rate^2
    assert abs(x.var() - 1 / rate**2) < Z * math.sqrt(8 / n) / rate**2


def test_normal_and_uniform_moments():
    n = 100_000
    x = oracles.normal(3.0, 0.5, dim=2).sample(rng(2), n)
    assert np.all(np.abs(x.mean(axis=0) - 3.0) < Z * 0.5 / math.sqrt(n))
    assert np.all(np.abs(x.std(axis=0) - 0.5) < Z * 0.5 / math.sqrt(2 * n) * 1.01)
    u = oracles.uniform(-1.0, 3.0).sample(rng(3), n)
    assert u.min() >= -1.0 and u.max() < 3.0
    assert abs(u.mean() - 1.0) < Z * (4 / math.sqrt(12)) / math.sqrt(n)


def test_gaussian_mixture_moments_and_scale():
    w, mu, s = [0.4, 0.6], [0.5, 0.75], [0.02, 0.005]
    n = 200_000
    x = oracles.gaussian_mixture(w, mu, s).sample(rng(4), n)
    m = 0.4 * 0.5 + 0.6 * 0.75
    var = sum(wi * (si**2 + mi**2) for wi, mi, si in zip(w, mu, s)) - m**2
    assert abs(x.mean() - m) < Z * math.sqrt(var / n)
    # component fraction: share of points nearer 0.5 than 0.75 is the first weight
    k = int(np.sum(x < 0.625))
    assert stats.binomtest(k, n, 0.4).pvalue > 1e-6
    # "var" scale takes the numbers as variances
    gv = oracles.gaussian_mixture(w, mu, s, scale="var")
    np.testing.assert_allclose(gv.sds, np.sqrt(s))
    xv = gv.sample(rng(4), n)
    var_v = sum(wi * (si + mi**2) for wi, mi, si in zip(w, mu, s)) - m**2  # s are variances here
    # sample variance within a generous CLT bound (4th moment bounded by that of the widest part)
    assert abs(xv.var() - var_v) < Z * math.sqrt(3 * (var_v + 0.25**2) ** 2 / n)
    assert xv.var() > 1.5 * var  # clearly not the "sd" reading
    # identity is canonical (sds), so the same distribution written both ways has one identity
    assert oracles.gaussian_mixture(w, mu, [0.0004, 0.000025], scale="var").identity()["params"]["sds"] == pytest.approx(
        [0.02, 0.005]
    )
    # pdf integrates to 1
    grid = np.linspace(-1, 2, 300_001)
    assert np.trapezoid(oracles.gaussian_mixture(w, mu, s).pdf(grid), grid) == pytest.approx(1.0, abs=1e-6)


def test_svm_two_class_balance_and_class_means():
    dim, n = 4, 100_000
    x = oracles.svm_two_class(dim).sample(rng(5), n)
    y, X = x[:, 0], x[:, 1:]
    assert set(np.unique(y).tolist()) == {-1.0, 1.0}
    k = int(np.sum(y > 0))
    assert stats.binomtest(k, n, 0.5).pvalue > 1e-6
    for label, centre in ((1.0, 0.2), (-1.0, 0.8)):
        Xc = X[y == label]
        se = 0.1 / math.sqrt(len(Xc))
        assert np.all(np.abs(Xc.mean(axis=0) - centre) < Z * se)
        # variance 0.01 → sd 0.1
        assert np.all(np.abs(Xc.std(axis=0) - 0.1) < Z * 0.1 / math.sqrt(2 * len(Xc)) * 1.01)


# ----------------------------------------------------------------------------- bootstrap


def _table():
    return pa.table({"a": pa.array([1, 2, 3, 4], pa.int64()), "b": pa.array([0.5, 1.5, 2.5, 3.5])})


def _expected():
    return np.array([[1, 0.5], [2, 1.5], [3, 2.5], [4, 3.5]], dtype=np.float64)


def test_bootstrap_from_parquet_csv_table_numpy(tmp_path):
    pq_path = tmp_path / "public.parquet"
    pq.write_table(_table(), pq_path)
    csv_path = tmp_path / "public.csv"
    pcsv.write_csv(_table(), csv_path)
    sources = [str(pq_path), pq_path, str(csv_path), _table(), _expected()]
    ids = []
    for src in sources:
        o = oracles.bootstrap(src)
        np.testing.assert_array_equal(o.data, _expected())
        x = o.sample(rng(9), 1000)
        assert x.shape == (1000, 2) and x.dtype == np.float64
        # every sampled row is a data row, and resampling uses all rows (with replacement)
        rows = {tuple(r) for r in x}
        assert rows == {tuple(r) for r in _expected()}
        ids.append(o.identity())
    # same content → same hash whatever the source; path recorded when there is one
    assert len({i["params"]["sha256"] for i in ids}) == 1
    assert ids[0]["params"]["path"] == str(pq_path)
    assert ids[2]["params"]["path"] == str(csv_path)
    assert ids[3]["params"]["path"] is None
    assert ids[0]["params"]["columns"] == ["a", "b"]
    # the same rng gives the same rows for every source
    np.testing.assert_array_equal(oracles.bootstrap(str(pq_path)).sample(rng(1), 30), oracles.bootstrap(_expected()).sample(rng(1), 30))


def test_bootstrap_one_column_gives_scalar_records_and_hash_tracks_content(tmp_path):
    p = tmp_path / "one.csv"
    p.write_text("x\n1\n2\n3\n")
    o = oracles.bootstrap(p)
    assert o.sample(rng(), 5).shape == (5,)
    h1 = o.identity()["params"]["sha256"]
    assert len(h1) == 16
    p.write_text("x\n1\n2\n4\n")
    assert oracles.bootstrap(p).identity()["params"]["sha256"] != h1


def test_bootstrap_parquet_detected_by_magic_bytes(tmp_path):
    p = tmp_path / "public.data"
    pq.write_table(_table(), p)
    np.testing.assert_array_equal(oracles.bootstrap(p).data, _expected())


def test_bootstrap_errors(tmp_path):
    bad = pa.table({"a": [1.0, 2.0], "name": ["x", "y"]})
    with pytest.raises(OracleError, match="non-numeric columns: name"):
        oracles.bootstrap(bad)
    csv_path = tmp_path / "bad.csv"
    csv_path.write_text("a,name\n1,x\n2,y\n")
    with pytest.raises(OracleError, match="non-numeric"):
        oracles.bootstrap(csv_path)
    with pytest.raises(OracleError, match="missing values"):
        oracles.bootstrap(pa.table({"a": pa.array([1.0, None])}))
    with pytest.raises(OracleError, match="does not exist"):
        oracles.bootstrap(tmp_path / "nope.parquet")
    txt = tmp_path / "data.txt"
    txt.write_text("1,2\n")
    with pytest.raises(OracleError, match="Parquet"):
        oracles.bootstrap(txt)
    with pytest.raises(OracleError, match="dtype"):
        oracles.bootstrap(np.array(["a", "b"]))
    with pytest.raises(OracleError, match="1-D or 2-D"):
        oracles.bootstrap(np.ones((2, 2, 2)))
    with pytest.raises(OracleError, match="at least one row"):
        oracles.bootstrap(np.ones((0, 2)))
    with pytest.raises(OracleError, match="NaN or infinite"):
        oracles.bootstrap(np.array([1.0, np.nan]))
    with pytest.raises(OracleError, match="must be a Parquet/CSV"):
        oracles.bootstrap([1, 2, 3])


def test_bootstrap_data_is_frozen_and_sample_is_a_copy():
    src = np.arange(4.0)
    o = oracles.bootstrap(src)
    src[0] = 100.0  # the oracle took a copy
    assert o.data[0] == 0.0
    x = o.sample(rng(), 3)
    x[:] = -1
    assert np.all(o.data >= 0)
    with pytest.raises(ValueError):
        o.data[0] = 5.0


# ----------------------------------------------------------------------------- oracle validation


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: oracles.exponential(0.0), r"rate must be > 0, got 0\.0"),
        (lambda: oracles.exponential(-1), "rate must be > 0"),
        (lambda: oracles.exponential(float("inf")), "rate must be finite"),
        (lambda: oracles.exponential("2"), "rate must be a finite real"),
        (lambda: oracles.exponential(True), "rate must be a finite real"),
        (lambda: oracles.normal(0.0, 0.0), "sd must be > 0"),
        (lambda: oracles.normal(float("nan"), 1.0), "mean must be finite"),
        (lambda: oracles.normal(0.0, 1.0, dim=0), "dim must be None"),
        (lambda: oracles.normal(0.0, 1.0, dim=2.5), "dim must be None"),
        (lambda: oracles.normal([0.0, 1.0], 1.0), "mean must be a scalar when dim is None"),
        (lambda: oracles.normal([0.0, 1.0], 1.0, dim=3), "length-3"),
        (lambda: oracles.uniform(1.0, 1.0), "low < high"),
        (lambda: oracles.uniform(2.0, 1.0, dim=2), "low < high"),
        (lambda: oracles.gaussian_mixture([0.5, 0.6], [0, 1], [1, 1]), "sum to 1"),
        (lambda: oracles.gaussian_mixture([0.5, 0.5], [0], [1, 1]), "same length"),
        (lambda: oracles.gaussian_mixture([0.5, 0.5], [0, 1], [1, 0]), "sds must be > 0"),
        (lambda: oracles.gaussian_mixture([1.5, -0.5], [0, 1], [1, 1]), "weights must be >= 0"),
        (lambda: oracles.gaussian_mixture([1.0], [0], [1], scale="std"), "scale must be 'sd'"),
        (lambda: oracles.gaussian_mixture([], [], []), "non-empty"),
        (lambda: oracles.svm_two_class(0), "dim must be a positive integer"),
        (lambda: oracles.svm_two_class(None), "dim must be a positive integer"),
        (lambda: oracles.as_oracle(object()), "callable sample"),
        (lambda: oracles.as_oracle(None), "callable sample"),
    ],
)
def test_oracle_validation(make, match):
    with pytest.raises(OracleError, match=match):
        make()


def test_oracle_errors_are_value_errors():
    with pytest.raises(ValueError):
        oracles.exponential(-1)


def test_gaussian_mixture_weights_within_tolerance_accepted():
    o = oracles.gaussian_mixture([0.3, 0.7 + 5e-10], [0, 1], [1, 1])
    assert o.weights.sum() == pytest.approx(1.0, abs=1e-15)


def test_sample_size_validated():
    with pytest.raises(OracleError, match="size"):
        oracles.exponential(1.0).sample(rng(), -1)


def test_as_oracle_returns_object_unchanged():
    class Mine:
        def sample(self, rng, size):
            return rng.random(size)

    m = Mine()
    assert oracles.as_oracle(m) is m


def test_check_records():
    x = np.zeros((5, 2))
    assert oracles.check_records(x, 5) is x
    assert oracles.check_records(np.arange(3), 3).dtype == np.float64
    with pytest.raises(OracleError, match="4 records .* when 5"):
        oracles.check_records(np.zeros((4, 2)), 5)
    with pytest.raises(OracleError, match="NaN or infinite"):
        oracles.check_records(np.array([1.0, np.inf]), 2)
    with pytest.raises(OracleError, match="NaN or infinite"):
        oracles.check_records(np.array([1.0, np.nan]), 2)
    with pytest.raises(OracleError, match="0-d"):
        oracles.check_records(np.array(1.0), 1)
    with pytest.raises(OracleError, match="numpy array"):
        oracles.check_records([1.0, 2.0], 2)
    with pytest.raises(OracleError, match="dtype"):
        oracles.check_records(np.array(["a", "b"]), 2)
    with pytest.raises(OracleError, match="dtype"):
        oracles.check_records(np.array([1 + 1j, 2]), 2)


# ----------------------------------------------------------------------------- statistic targets


@pytest.mark.parametrize("target", [targets.mean(), targets.median(), targets.quantile(0.0),
                                    targets.quantile(0.37), targets.quantile(1.0)], ids=repr)
@pytest.mark.parametrize("record_shape", [(), (3,)])
def test_batch_equals_per_database(target, record_shape):
    dbs = rng(11).normal(size=(6, 25, *record_shape))
    batched = target.batch(dbs)
    each = np.stack([np.asarray(target(db)) for db in dbs])
    assert batched.shape == (6, *record_shape)
    assert np.allclose(batched, each, rtol=1e-12, atol=1e-12)


def test_statistic_values():
    db = np.array([3.0, 1.0, 2.0, 10.0])
    assert targets.mean()(db) == pytest.approx(4.0)
    assert targets.median()(db) == pytest.approx(2.5)
    assert targets.quantile(0.5)(db) == pytest.approx(2.5)
    assert targets.quantile(1 / 3)(db) == pytest.approx(2.0)  # linear interpolation
    np.testing.assert_allclose(targets.mean()(np.array([[1.0, 2.0], [3.0, 6.0]])), [2.0, 4.0])


def test_statistic_errors():
    for q in (-0.1, 1.1, float("nan"), "0.5"):
        with pytest.raises(TargetError, match="q must"):
            targets.quantile(q)
    with pytest.raises(TargetError, match="no records"):
        targets.mean()(np.zeros((0,)))
    with pytest.raises(TargetError, match="records on axis 0"):
        targets.median()(np.float64(1.0))
    with pytest.raises(TargetError, match=r"\(B, n"):
        targets.mean().batch(np.zeros(3))


def test_as_target():
    f = np.sum
    assert targets.as_target(f) is f
    with pytest.raises(TargetError, match="callable"):
        targets.as_target(3)


# ----------------------------------------------------------------------------- SVM


def _accuracy(wb, data):
    y, X = data[:, 0], data[:, 1:]
    return float(np.mean(np.sign(X @ wb[:-1] + wb[-1]) == y))


def test_svm_figure5_d2_separates_training_data():
    data = fig5_data(2, 1000, seed=21)
    wb = targets.svm()(data)
    assert wb.shape == (3,) and wb.dtype == np.float64
    assert _accuracy(wb, data) == 1.0
    # +1 class sits at 0.2, -1 at 0.8: w points from the -1 centre to the +1 centre
    assert np.all(wb[:2] < 0) and wb[2] > 0
    # deterministic
    np.testing.assert_array_equal(targets.svm()(data), wb)


@pytest.mark.parametrize("d", [8, 64])
def test_svm_returns_d_plus_1(d):
    data = fig5_data(d, 300, seed=d)
    wb = targets.svm()(data)
    assert wb.shape == (d + 1,)
    assert _accuracy(wb, data) == 1.0


def test_svm_objective_is_consistent_formulation():
    """(w, b) minimises (C/n)·Σ hinge + ½‖w‖² with b free: perturbing w or b never lowers it."""
    data = fig5_data(3, 200, seed=5)
    y, X = data[:, 0], data[:, 1:]
    C, n = 3.0, len(y)

    def obj(w, b):
        return C / n * np.maximum(0, 1 - y * (X @ w + b)).sum() + 0.5 * w @ w

    wb = targets.svm(C=C)(data)
    base = obj(wb[:-1], wb[-1])
    g = rng(0)
    for _ in range(200):
        step = g.normal(size=4) * 10 ** g.uniform(-4, -1)
        assert obj(wb[:-1] + step[:-1], wb[-1] + step[-1]) >= base - 1e-9
    # compare with an independent solver of the same convex problem
    from scipy.optimize import minimize

    res = minimize(lambda v: obj(v[:-1], v[-1]), np.zeros(4), method="Powell",
                   options={"xtol": 1e-10, "ftol": 1e-14, "maxiter": 100_000})
    assert res.fun >= base - 1e-9
    assert abs(res.fun - base) < 1e-5


def test_svm_errors():
    data = fig5_data(2, 50, seed=1)
    one_class = data[data[:, 0] > 0]
    with pytest.raises(TargetError, match="single class"):
        targets.svm()(one_class)
    bad = data.copy()
    bad[0, 0] = 0.0
    with pytest.raises(TargetError, match=r"\+1 or -1"):
        targets.svm()(bad)
    with pytest.raises(TargetError, match=r"\(n, d \+ 1\)"):
        targets.svm()(data[:, :1])
    with pytest.raises(TargetError, match=r"\(n, d \+ 1\)"):
        targets.svm()(data[:, 0])
    nan = data.copy()
    nan[0, 1] = np.nan
    with pytest.raises(TargetError, match="NaN"):
        targets.svm()(nan)
    with pytest.raises(TargetError, match="C must"):
        targets.svm(C=0)
    with pytest.raises(TargetError, match="tol must"):
        targets.svm(tol=-1e-3)
    with pytest.raises(TargetError, match="max_iter"):
        targets.svm(max_iter=0)


def test_svm_max_iter_hit_raises():
    data = fig5_data(2, 400, seed=3)
    data[:, 1:] = rng(3).normal(0.5, 0.1, size=(400, 2))  # overlapping classes: many iterations
    with pytest.raises(TargetError, match="did not converge"):
        targets.svm(max_iter=2)(data)


# ----------------------------------------------------------------------------- KDE


def test_kde_integrates_to_one_and_matches_formula():
    data = oracles.gaussian_mixture([0.4, 0.6], [0.5, 0.75], [0.02, 0.005]).sample(rng(8), 5000)
    F = targets.kde(0.05)(data)
    assert isinstance(F, targets.KDEFunction)
    grid = np.linspace(-1.0, 2.0, 60_001)
    vals = F(grid)
    assert vals.shape == grid.shape and np.all(vals >= 0)
    assert np.trapezoid(vals, grid) == pytest.approx(1.0, abs=1e-6)
    # (p, 1) points and scalars
    pts = np.array([0.1, 0.5, 0.75])
    np.testing.assert_allclose(F(pts[:, None]), F(pts))
    assert isinstance(F(0.5), float) and F(0.5) == pytest.approx(F(pts)[1])
    # direct formula
    x = 0.6
    direct = np.mean(stats.norm.pdf((x - data) / 0.05)) / 0.05
    assert F(x) == pytest.approx(direct, rel=1e-12)
    # (n, 1) database gives the same function
    np.testing.assert_allclose(targets.kde(0.05)(data[:, None])(pts), F(pts))


def test_kde_errors():
    with pytest.raises(TargetError, match="bandwidth must be > 0"):
        targets.kde(0.0)
    with pytest.raises(TargetError, match="kernel must be one of"):
        targets.kde(0.1, kernel="tophat")
    with pytest.raises(TargetError, match="scalar records"):
        targets.kde(0.1)(np.zeros((5, 2)))
    with pytest.raises(TargetError, match="1-D"):
        targets.kde(0.1)(np.zeros(5))(np.zeros((3, 2)))


# ----------------------------------------------------------------------------- target pickling


@pytest.mark.parametrize("target", ALL_TARGETS, ids=repr)
def test_target_pickle_round_trip(target):
    clone = pickle.loads(pickle.dumps(target))
    assert clone.identity() == target.identity()
    json.dumps(target.identity())
    if isinstance(target, targets.SVM):
        db = fig5_data(3, 100, seed=2)
        np.testing.assert_array_equal(clone(db), target(db))
    elif isinstance(target, targets.KDE):
        db = rng(2).random(100)
        pts = np.linspace(0, 1, 11)
        F = pickle.loads(pickle.dumps(target(db)))  # the function value itself pickles too
        np.testing.assert_array_equal(clone(db)(pts), F(pts))
    else:
        db = rng(2).random((100, 2))
        np.testing.assert_array_equal(clone(db), target(db))
