"""A Δ̂ is matched to its target by content, not by name (issue 19, item 1).

Before: a lambda, a ``functools.partial`` or a callable object was described by its qualified name
only, so a Δ̂ sampled for ``lambda d: d.mean()`` was accepted for ``lambda d: 1000 * d.mean()``
(measured: Δ̂ 0.0406 used where 40.6 was due). Every test below fails on that code.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import raydp
from raydp import SamplerOptions, oracles, targets
from raydp.errors import EstimateMismatchError, StoreError, TargetError
from raydp.fingerprint import content_digest
from raydp.identity import describe

N = 200
DATA = np.random.default_rng(0).exponential(1.0, N)  # the private data


def _estimate(target, **kw):
    kw.setdefault("gamma", 0.1)
    return raydp.estimate_sensitivity(target, oracles.exponential(1.0), N, seed=1, progress=False, **kw)


def _release(target, est):
    return raydp.sample_then_respond(DATA, target, raydp.Laplace(1.0), estimate=est)


# ----------------------------------------------------------------------------- the three cases


def test_an_estimate_for_one_lambda_is_refused_for_another():
    est = _estimate(lambda d: np.array([d.mean()]))
    big = lambda d: np.array([1000 * d.mean()])  # noqa: E731 - the point is a second lambda
    assert _estimate(big).sensitivity == pytest.approx(1000 * est.sensitivity)  # what was at stake
    with pytest.raises(EstimateMismatchError, match="other code, constants, arguments or state"):
        _release(big, est)
    same = lambda d: np.array([d.mean()])  # noqa: E731 - the same code: the same function
    assert _release(same, est).sensitivity == est.sensitivity


def stat(d, scale=1.0):
    return np.array([scale * np.mean(d)])


def test_a_store_made_for_one_partial_is_refused_for_another(tmp_path):
    uri = str(tmp_path / "s")
    _estimate(functools.partial(stat, scale=1), gamma=None, m=300, store=uri)
    with pytest.raises(StoreError, match="holds a different run .*functools:partial with other code"):
        _estimate(functools.partial(stat, scale=1000), gamma=None, m=600, store=uri, resume=True)
    stored = raydp.load_estimate(uri)
    with pytest.raises(EstimateMismatchError, match="functools:partial"):
        _release(functools.partial(stat, scale=1000), stored)
    assert _release(functools.partial(stat, scale=1), stored).sensitivity == stored.sensitivity
    resumed = _estimate(functools.partial(stat, scale=1), gamma=None, m=600, store=uri, resume=True)
    assert resumed.plan.m == 600


def test_private_estimator_refuses_an_estimate_made_for_another_transform():
    from sklearn.compose import TransformedTargetRegressor
    from sklearn.linear_model import Ridge

    from raydp.sklearn import PrivateEstimator

    rng = np.random.default_rng(0)

    def rows(k):
        X = rng.normal(size=(k, 2))
        return np.column_stack([X, X @ [1.0, -1.0] + 0.1 * rng.normal(size=k)])

    public, private = rows(400), rows(100)

    def model(func, inverse, estimate=None):
        est = TransformedTargetRegressor(Ridge(), func=func, inverse_func=inverse, check_inverse=False)
        return PrivateEstimator(est, oracle=oracles.bootstrap(public), epsilon=1.0, gamma=0.25, m=60, estimate=estimate, options=SamplerOptions(seed=0, backend="local"))

    first = model(lambda y: y, lambda y: y).fit(private[:, :2], private[:, 2])
    with pytest.raises(EstimateMismatchError, match=r"estimator\.func\.content"):
        model(lambda y: 1000 * y, lambda y: y / 1000, first.estimate_).fit(private[:, :2], private[:, 2])
    again = model(lambda y: y, lambda y: y, first.estimate_).fit(private[:, :2], private[:, 2])
    assert again.estimate_ is first.estimate_


# ----------------------------------------------------------------------------- what the content covers

SCALE = 1.0


def test_a_global_the_code_reads_is_part_of_it():
    global SCALE
    f = lambda d: np.array([SCALE * d.mean()])  # noqa: E731
    est = _estimate(f)
    SCALE = 1000.0
    try:
        with pytest.raises(EstimateMismatchError):
            _release(f, est)  # the very same function object, now computing something else
    finally:
        SCALE = 1.0
    assert _release(f, est).sensitivity == est.sensitivity


class Scaled:
    def __init__(self, scale):
        self.scale = scale

    def __call__(self, d):
        return np.array([self.scale * np.mean(d)])


def _scaled_closure(scale):
    return lambda d: np.array([scale * np.mean(d)])


@pytest.mark.parametrize("make", [Scaled, _scaled_closure, lambda s: functools.partial(stat, scale=s),
                                  lambda s: (lambda d, k=s: np.array([k * np.mean(d)]))],
                         ids=["callable object", "closure cell", "partial", "default argument"])
def test_state_arguments_closures_and_defaults_count(make):
    assert content_digest(make(1.0)) == content_digest(make(1.0))
    assert content_digest(make(1.0)) != content_digest(make(1000.0))
    est = _estimate(make(1.0))
    with pytest.raises(EstimateMismatchError):
        _release(make(1000.0), est)
    assert _release(make(1.0), est).sensitivity == est.sensitivity


def test_moving_a_function_in_its_file_changes_nothing():
    src = "import numpy as np\ndef f(d):\n    return np.array([d.mean()])\n"
    a, b = {}, {}
    exec(compile(src, "one.py", "exec"), a)
    exec(compile("\n" * 40 + src, "other.py", "exec"), b)
    assert content_digest(a["f"]) == content_digest(b["f"])
    c = {}
    exec(compile(src.replace("d.mean()", "d.sum()"), "one.py", "exec"), c)
    assert content_digest(a["f"]) != content_digest(c["f"])


def test_library_functions_are_named_not_hashed_and_builtins_keep_their_identity():
    assert content_digest(np.mean) == content_digest(np.mean) is not None
    assert content_digest(np.mean) != content_digest(np.median)
    # built-in targets and oracles describe themselves: stores and estimates made before keep working
    assert describe(targets.mean()) == {"name": "mean", "params": {}}
    assert describe(oracles.exponential(2.0)) == {"name": "exponential", "params": {"rate": 2.0}}


HELPER = """
import functools, json, sys
import numpy as np
from raydp.identity import describe
sys.path.insert(0, {tests!r})
import test_fingerprint as t
print(json.dumps([describe(t.stat), describe(functools.partial(t.stat, scale=3)), describe(t.Scaled({{"b", "a", "c"}}))]))
"""


@pytest.mark.subprocess
def test_the_description_is_the_same_in_every_process():
    """What a store or a ledger records must be recomputable elsewhere: two fresh interpreters with
    different hash seeds (set order) give the same descriptions, and they equal this process's."""
    outs = []
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        r = subprocess.run([sys.executable, "-c", HELPER.format(tests=str(Path(__file__).parent))],
                           capture_output=True, text=True, env=env, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        outs.append(r.stdout.strip())
    assert outs[0] == outs[1]
    assert '"content": null' not in outs[0]


# ----------------------------------------------------------------------------- what cannot be read


class Locked:
    """A target holding a lock: its content cannot be read (a lock does not pickle), so it is not
    statically verifiable. It pickles without the lock (a fresh one on the other side), so it can be
    sent to the sealed process that evaluates it on the private data."""

    def __init__(self):
        self.lock = threading.Lock()

    def __call__(self, d):
        with self.lock:
            return np.array([np.mean(d)])

    def __getstate__(self):
        return {}

    def __setstate__(self, state):
        self.lock = threading.Lock()


class Unpicklable(Locked):
    def __getstate__(self):
        return {"lock": self.lock}


def test_a_target_without_a_fingerprint_is_reused_only_after_its_witnesses_were_replayed(tmp_path):
    r = raydp.sample_then_respond(DATA, Locked(), raydp.Laplace(1.0), oracle=oracles.exponential(1.0),
                                  gamma=0.1, seed=1)
    assert np.isfinite(r.sensitivity)
    est = _estimate(Locked())
    assert "unfingerprintable" in est.target
    assert _release(Locked(), est).replay.pairs >= 1  # replay decided, and accepted: the same function
    with pytest.raises(EstimateMismatchError, match=r"not statically verifiable .*replay is off"):
        raydp.sample_then_respond(DATA, Locked(), raydp.Laplace(1.0), estimate=est, replay=False)
    with pytest.raises(StoreError, match=r"not statically verifiable .*replay is off"):
        _estimate(Locked(), store=str(tmp_path / "s"), replay=False)
    assert not (tmp_path / "s").exists()


def test_a_target_that_cannot_be_pickled_is_refused_before_the_private_data_is_read():
    """The private evaluation runs in a sealed process; a target that cannot be sent there is refused
    in one line, and nothing reaches the data."""
    with pytest.raises(TargetError, match=r"cannot be sent to the sealed process .*picklable"):
        raydp.sample_then_respond(DATA, Unpicklable(), raydp.Laplace(1.0), oracle=oracles.exponential(1.0),
                                  gamma=0.1, seed=1)


class LockedWithIdentity(Locked):
    def identity(self):
        return {"name": "locked-mean", "params": {}}


def test_an_identity_method_makes_it_reusable():
    est = _estimate(LockedWithIdentity())
    assert _release(LockedWithIdentity(), est).sensitivity == est.sensitivity
