"""No release path draws noise from numpy: with numpy's generators made to raise, every
mechanism still releases (its noise comes from OpenDP's samplers).

Limit of the check: a release path that reused a Generator created *before* the patch would not be
caught; releases take no rng argument and the library keeps none, so there is none to reuse.
"""

import numpy as np
import pytest

import raydp
from raydp import oracles, targets


class NumpyRandomnessUsed(AssertionError):
    pass


@pytest.fixture
def numpy_random_forbidden(monkeypatch):
    def boom(*args, **kwargs):
        raise NumpyRandomnessUsed("numpy randomness used in a release path")

    for name in dir(np.random):
        obj = getattr(np.random, name)
        if callable(obj) and not name.startswith("_") and name not in ("SeedSequence", "BitGenerator"):
            monkeypatch.setattr(np.random, name, boom)
    yield boom


def _estimates():
    resp = [0.0, 0.5, 1.0]

    class Scores:
        def __call__(self, db):
            return -np.abs(np.median(db) - np.array(resp))

        def identity(self):
            return {"name": "scores", "params": {}}

    kw = dict(gamma=0.2, seed=0, progress=False)
    cases = []
    for mech in (raydp.Laplace(1.0), raydp.Gaussian(0.5, 1e-5), raydp.Gaussian(2.0, 1e-5, calibration="analytic")):
        est = raydp.estimate_sensitivity(targets.mean(), oracles.normal(0, 1, dim=2), 30, mechanism=mech, **kw)
        cases.append((targets.mean(), mech, est, np.random.default_rng(1).normal(size=(30, 2))))
    em = raydp.Exponential(1.0, resp)
    est = raydp.estimate_sensitivity(Scores(), oracles.uniform(0, 1), 31, mechanism=em, **kw)
    cases.append((Scores(), em, est, np.linspace(0, 1, 31)))
    bm = raydp.Bernstein(1.0, lattice=6, dims=1, order=2)
    est = raydp.estimate_sensitivity(targets.kde(0.1), oracles.uniform(0, 1), 40, mechanism=bm, **kw)
    cases.append((targets.kde(0.1), bm, est, np.linspace(0.05, 0.95, 40)))
    return cases


@pytest.fixture(scope="module")
def cases():
    return _estimates()


@pytest.mark.parametrize("i", range(5))
def test_release_uses_no_numpy_randomness(cases, i, numpy_random_forbidden):
    target, mech, est, data = cases[i]
    with pytest.raises(NumpyRandomnessUsed):
        np.random.normal()
    r = raydp.sample_then_respond(data, target, mech, estimate=est)
    assert r.epsilon == mech.epsilon and r.sensitivity == est.sensitivity
