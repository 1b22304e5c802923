"""A reused Δ̂ is checked by behaviour: its witness pairs are replayed with the target as it is now.

Every case below was accepted before witnesses were kept and replayed, with a Δ̂ 1000x too small: the
target had changed in a way its name and content fingerprint did not see (state outside the walk, a
module edited on disk, a library changed in place, a class edited or redefined). Each test shows the
reuse refused now, and the same reuse with the unchanged target accepted.
"""

from __future__ import annotations

import functools
import os
import sys
import textwrap

import numpy as np
import pytest

import raydp
from raydp import SamplerOptions, oracles, targets
from raydp.engine.witness import RTOL, SEEDED, Witnesses, compare, seeded_pairs
from raydp.errors import EstimateMismatchError, StoreError

N = 200
DATA = np.random.default_rng(0).exponential(1.0, N)


def _estimate(target, **kw):
    kw.setdefault("gamma", 0.1)
    return raydp.estimate_sensitivity(target, oracles.exponential(1.0), N, seed=1, progress=False, **kw)


def _release(target, est, **kw):
    return raydp.sample_then_respond(DATA, target, raydp.Laplace(1.0), estimate=est, **kw)


# ----------------------------------------------------------------------------- what an estimate carries


def test_an_estimate_carries_its_witnesses_with_their_records():
    est = _estimate(targets.mean())
    w = est.witnesses
    assert w.roles[0] == "delta" and w.g[0] == est.sensitivity  # the pair that set Δ̂ comes first
    assert set(w.pairs[1:]) <= set(seeded_pairs(est.seed, est.plan.m)) and len(w) <= 2 + SEEDED
    assert w.records.shape == (len(w), N + 1)
    # the witnesses are the same whatever runs the pairs, and whatever is kept of the sample
    full = _estimate(targets.mean(), keep_sample=True, backend=raydp.LocalBackend(shuffle_seed=3))
    assert full.witnesses.pairs == w.pairs and full.witnesses.g == w.g
    assert all(full.sample[p] == g for p, g in zip(w.pairs, w.g))
    np.testing.assert_array_equal(full.witnesses.records, w.records)


def test_the_same_target_replays_bit_for_bit_and_the_statement_says_so():
    est = _estimate(targets.mean())
    r = _release(targets.mean(), est)
    # r = 30 pairs drawn at random from all m (a cheap run affords no more than the floor), and the Δ̂ pair
    assert r.replay.ok and r.replay.fresh and r.replay.drawn == 30 and r.replay.m == est.plan.m
    assert r.replay.pairs in (30, 31) and r.replay.exact == r.replay.pairs
    delta = "the pair that set Δ̂ among them" if r.replay.pairs == 30 else "and the pair that set Δ̂"
    assert (f"Δ̂ reused after {r.replay.pairs} of its pairs gave the same G with this target, bit for bit: 30 drawn "
            f"at random at this release from all {est.plan.m} pairs of its run, {delta}") in r.statement()
    assert "caught with probability ≥ 0.957" in r.statement()


def test_replay_off_is_reported_in_the_statement():
    est = _estimate(targets.mean())
    r = _release(targets.mean(), est, replay=False)
    assert r.replay.skipped == "replay=False"
    assert "without replaying its witness pairs (replay=False)" in r.statement()


def test_compare_allows_last_bit_differences_and_nothing_more():
    w = Witnesses(pairs=(0, 1), g=(2.0, 0.5), roles=("delta", "seeded"))
    assert compare(w, np.array([2.0, 0.5])).exact == 2
    near = compare(w, np.array([2.0 * (1 + RTOL / 10), 0.5]))
    assert near.mismatch is None and near.exact == 1 and 0 < near.max_rel < RTOL
    assert compare(w, np.array([2.0 * (1 + 100 * RTOL), 0.5])).mismatch is not None
    assert compare(w, np.array([2000.0, 500.0])).mismatch.count("G was") == 2
    assert "the pair that set Δ̂" in compare(w, np.array([2000.0, 0.5])).mismatch


# ----------------------------------------------------------------------------- the cases


def test_state_the_fingerprint_cannot_see_is_caught_by_replay(tmp_path, monkeypatch):
    """A target reading a scale from a file: its code, constants and globals are the same after the file
    changed, so its fingerprint is too; its witness pairs are not."""
    # the sandbox's /tmp is its own: a directory on sys.path is shown to it, read-only
    monkeypatch.syspath_prepend(str(tmp_path))
    scale = tmp_path / "scale.txt"
    scale.write_text("1")

    def f(d):
        return np.array([float(open(str(scale)).read()) * np.mean(d)])

    est = _estimate(f)
    assert _release(f, est).replay.ok
    scale.write_text("1000")
    with pytest.raises(EstimateMismatchError, match=r"computes something else .*the pair that set Δ̂\): G was"):
        _release(f, est)


def test_a_function_attribute_counts():
    def f(d):
        return np.array([f.k * np.mean(d)])

    f.k = 1.0
    est = _estimate(f)
    f.k = 1000.0
    with pytest.raises(EstimateMismatchError):
        _release(f, est)
    f.k = 1.0
    assert _release(f, est).replay.ok


SCALE = 1.0


@functools.lru_cache(maxsize=None)
def _cached_scale():
    return SCALE


def test_an_lru_cache_wrapper_is_read_through():
    """``functools.lru_cache`` pickles by name: the wrapped function (and the global it reads) counts."""
    global SCALE
    target = lambda d: np.array([_cached_scale() * np.mean(d)])  # noqa: E731
    est = _estimate(target)
    SCALE = 1000.0
    _cached_scale.cache_clear()
    try:
        with pytest.raises(EstimateMismatchError):
            _release(target, est)
    finally:
        SCALE = 1.0
        _cached_scale.cache_clear()
    assert _release(target, est).replay.ok


def test_a_frompyfunc_ufunc_is_not_statically_verifiable():
    """Its Python function is out of reach (only its name was fingerprinted); it cannot be pickled either,
    so it cannot be sent to the sealed process: a release with it is refused before the data is read."""
    u = np.frompyfunc(lambda x: 2.0 * x, 1, 1)
    target = lambda d: np.array([float(np.mean(u(d).astype(float)))])  # noqa: E731
    est = _estimate(target)
    assert "frompyfunc" in est.target["unfingerprintable"]
    with pytest.raises(EstimateMismatchError, match="not statically verifiable .*replay is off"):
        _release(target, est, replay=False)
    with pytest.raises(raydp.TargetError, match="cannot be sent to the sealed process"):
        _release(target, est)


class HidesItsScale:
    """An object whose ``__getstate__`` leaves out the field that scales its output."""

    def __init__(self, scale):
        self.scale, self.name = scale, "mean"

    def __getstate__(self):
        return {"name": self.name}

    def __setstate__(self, state):
        self.__dict__.update(state, scale=1.0)

    def __call__(self, d):
        return np.array([self.scale * np.mean(d)])


def test_state_left_out_of_getstate_counts():
    est = _estimate(HidesItsScale(1.0))
    with pytest.raises(EstimateMismatchError, match="other code, constants, arguments or state"):
        _release(HidesItsScale(1000.0), est)


def test_a_masked_array_constants_mask_counts():
    m = np.ma.array([1.0, 1000.0], mask=[False, True])
    target = lambda d: np.array([float(np.ma.mean(m)) * np.mean(d)])  # noqa: E731
    est = _estimate(target)
    m.mask = [True, False]
    with pytest.raises(EstimateMismatchError):
        _release(target, est)


def _fake_library(root, version: str, body: str):
    pkg = root / "fakelib"
    pkg.mkdir(exist_ok=True)
    (pkg / "__init__.py").write_text(body)
    info = root / f"fakelib-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: fakelib\nVersion: {version}\n")
    (info / "top_level.txt").write_text("fakelib\n")


def test_an_installed_module_changed_in_place_is_caught_by_replay(tmp_path, monkeypatch):
    """A library is fingerprinted by its distribution's name and version, so an edit in site-packages that
    keeps the version is invisible to it; the sealed process imports the edited file, and replay sees it."""
    import raydp.fingerprint as fp

    site = tmp_path / "site"
    site.mkdir()
    _fake_library(site, "1.0", "def scale(x):\n    return 1.0 * x\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(fp, "_LIBRARY_ROOTS", fp._LIBRARY_ROOTS + (str(site) + os.sep,))
    fp._distributions.cache_clear()
    fp.library_version.cache_clear()
    import fakelib

    target = lambda d: np.array([fakelib.scale(np.mean(d))])  # noqa: E731
    est = _estimate(target)
    assert "fakelib==1.0" in fp.library_version("fakelib")
    assert _release(target, est).replay.ok
    (site / "fakelib" / "__init__.py").write_text("def scale(x):\n    return 1000.0 * x\n")
    with pytest.raises(EstimateMismatchError, match="computes something else"):
        _release(target, est)
    # an upgrade (a new version) is refused statically, before any replay
    _fake_library(site, "2.0", "def scale(x):\n    return 1.0 * x\n")
    for d in site.glob("fakelib-1.0.dist-info"):
        for f in d.iterdir():
            f.unlink()
        d.rmdir()
    fp._distributions.cache_clear()
    fp.library_version.cache_clear()
    with pytest.raises(EstimateMismatchError, match="other code, constants, arguments or state"):
        _release(target, est)
    fp._distributions.cache_clear()
    fp.library_version.cache_clear()
    sys.modules.pop("fakelib", None)


# ----------------------------------------------------------------------------- a user's estimator class


def _estimator_class(scale: float, name: str = "notebook_cell"):
    """A scikit-learn estimator class as a notebook cell defines it (module ``name``, not importable)."""
    src = textwrap.dedent(f"""
        import numpy as np
        from sklearn.base import BaseEstimator, RegressorMixin

        class ScaledRidge(RegressorMixin, BaseEstimator):
            SCALE = {scale!r}

            def __init__(self, alpha=1.0):
                self.alpha = alpha

            def fit(self, X, y):
                X, y = np.asarray(X, float), np.asarray(y, float)
                A = X.T @ X + self.alpha * np.eye(X.shape[1])
                self.coef_ = self.SCALE * np.linalg.solve(A, X.T @ y)
                self.intercept_ = 0.0
                self.n_features_in_ = X.shape[1]
                return self

            def predict(self, X):
                return np.asarray(X, float) @ self.coef_
    """)
    ns = {"__name__": name}
    exec(compile(src, f"<{name}>", "exec"), ns)
    return ns["ScaledRidge"]


def _rows(rng, k):
    X = rng.normal(size=(k, 2))
    return np.column_stack([X, X @ [1.0, -1.0] + 0.1 * rng.normal(size=k)])


def test_a_user_estimator_class_edited_or_redefined_after_estimation_is_refused():
    from raydp.sklearn import PrivateEstimator

    rng = np.random.default_rng(0)
    public, private = _rows(rng, 400), _rows(rng, 100)

    def model(cls, estimate=None):
        return PrivateEstimator(cls(), oracle=oracles.bootstrap(public), epsilon=1.0, m=40, gamma=0.3,
                                params=["coef_"], estimate=estimate,
                                options=SamplerOptions(seed=0, backend="local", progress=False))

    Cls = _estimator_class(1.0)
    first = model(Cls).fit(private[:, :2], private[:, 2])
    # a class attribute changed after the estimation: another target
    Cls.SCALE = 1000.0
    with pytest.raises(EstimateMismatchError, match=r"class"):
        model(Cls, first.estimate_).fit(private[:, :2], private[:, 2])
    # the class redefined under the same name with other code (a notebook cell run again, edited)
    with pytest.raises(EstimateMismatchError, match=r"class"):
        model(_estimator_class(1000.0), first.estimate_).fit(private[:, :2], private[:, 2])
    # redefined with the same code: the same target, and its witnesses replay
    again = model(_estimator_class(1.0), first.estimate_).fit(private[:, :2], private[:, 2])
    assert again.release_.replay.ok and again.release_.replay.reused


# ----------------------------------------------------------------------------- stores


def test_a_store_resumed_with_a_target_that_changed_is_refused(tmp_path):
    scale = tmp_path / "scale.txt"
    scale.write_text("1")

    def f(d):
        return np.array([float(open(str(scale)).read()) * np.mean(d)])

    uri = str(tmp_path / "s")
    _estimate(f, gamma=None, m=300, store=uri)
    scale.write_text("1000")
    with pytest.raises(StoreError, match="computes something else now"):
        _estimate(f, gamma=None, m=600, store=uri, resume=True)
    scale.write_text("1")
    resumed = _estimate(f, gamma=None, m=600, store=uri, resume=True)
    assert resumed.replay.ok and resumed.replay.pairs >= 1


def test_a_stored_estimate_carries_the_same_witnesses_and_replays(tmp_path):
    uri = str(tmp_path / "s")
    est = _estimate(targets.mean(), store=uri)
    loaded = raydp.load_estimate(uri)
    assert loaded.witnesses.pairs == est.witnesses.pairs and loaded.witnesses.g == est.witnesses.g
    np.testing.assert_array_equal(loaded.witnesses.records, est.witnesses.records)
    replayed = _release(targets.mean(), loaded, gamma=0.1).replay
    assert replayed.fresh and replayed.drawn == 30 and replayed.exact == replayed.pairs


def test_a_store_written_before_witnesses_were_kept_gets_them_from_its_shards(tmp_path):
    uri = str(tmp_path / "s")
    est = _estimate(targets.mean(), store=uri)
    os.remove(os.path.join(uri, "witnesses.npz"))  # as a store of an earlier raydp
    # a built-in oracle is rebuilt from its description: the records are drawn again, equal
    loaded = raydp.load_estimate(uri)
    assert loaded.witnesses.pairs == est.witnesses.pairs
    np.testing.assert_array_equal(loaded.witnesses.records, est.witnesses.records)
    assert _release(targets.mean(), loaded).replay.ok
    # another oracle is refused; a user's oracle is given explicitly
    with pytest.raises(StoreError, match="cannot be drawn from another oracle"):
        raydp.load_estimate(uri, oracle=oracles.exponential(2.0))
    given = raydp.load_estimate(uri, oracle=oracles.exponential(1.0))
    np.testing.assert_array_equal(given.witnesses.records, est.witnesses.records)


def test_a_store_of_a_users_oracle_without_witness_records_asks_for_the_oracle(tmp_path):
    public = np.random.default_rng(3).exponential(1.0, 500)
    uri = str(tmp_path / "s")
    raydp.estimate_sensitivity(targets.mean(), oracles.bootstrap(public), N, gamma=0.1, seed=1, progress=False,
                               store=uri)
    os.remove(os.path.join(uri, "witnesses.npz"))
    loaded = raydp.load_estimate(uri)
    assert loaded.witnesses.records is None
    with pytest.raises(EstimateMismatchError, match=r"load_estimate\(store, oracle=\.\.\.\)"):
        _release(targets.mean(), loaded)
    assert _release(targets.mean(), raydp.load_estimate(uri, oracle=oracles.bootstrap(public))).replay.ok
    assert _release(targets.mean(), loaded, replay=False).replay.skipped


def test_an_edited_witness_file_is_refused(tmp_path):
    uri = str(tmp_path / "s")
    _estimate(targets.mean(), store=uri)
    path = os.path.join(uri, "witnesses.npz")
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["g"] = arrays["g"] * 1000
    np.savez(path, **arrays)
    with pytest.raises(StoreError, match="witnesses.npz does not match the stored run"):
        raydp.load_estimate(uri)
