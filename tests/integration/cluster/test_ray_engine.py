"""The Ray backend on a real (embedded, loopback-only) Ray: it must match the local backend bit for
bit whatever the grouping, concurrency and task size, surface target errors with their type,
survive a killed worker through Ray's task retries, and refuse to finish when blocks are lost.

One Ray session is shared by the whole module (``ray.init`` costs seconds).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import raydp  # noqa: E402
from raydp import oracles, targets  # noqa: E402
from raydp.engine.ray import ensure_ray  # noqa: E402
from raydp.errors import EngineError, TargetError  # noqa: E402
from paths import CHILDREN  # noqa: E402

# The target classes below live in this test module, which Ray workers cannot import (tests/ is
# not on their sys.path): ship them by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

N, M, GAMMA, SEED, BLOCK = 50, 3000, 0.05, 20240607, 16  # 188 blocks


pytestmark = pytest.mark.usefixtures("ray_session")  # one loopback Ray for the module (conftest.py)


# ----------------------------------------------------------------------------- targets


class MeanPerDatabase:
    """Mean, evaluated one database at a time (no ``batch``): the base of the targets below."""

    def __call__(self, database):
        return np.mean(np.asarray(database, dtype=np.float64), axis=0)

    def identity(self):
        return {"name": type(self).__name__, "params": {}}


class FailsOnLargeLast(MeanPerDatabase):
    """Raises when the database's last record is large: D and D′ differ there, so some pairs fail
    on one side only and some on both."""

    def __call__(self, database):
        db = np.asarray(database, dtype=np.float64)
        if db[-1] > 2.5:
            raise ValueError("record too large")
        return super().__call__(db)


class KillOnce(MeanPerDatabase):
    """SIGKILLs the Ray worker evaluating it, exactly once per marker file (atomic O_EXCL create).

    Never kills the driver (the sampler probes the target there, and the local reference runs
    there)."""

    def __init__(self, marker: str, driver_pid: int):
        self.marker = marker
        self.driver_pid = driver_pid

    def __call__(self, database):
        if os.getpid() != self.driver_pid:
            try:
                fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                pass
            else:
                os.write(fd, str(os.getpid()).encode())
                os.close(fd)
                os.kill(os.getpid(), signal.SIGKILL)
        return super().__call__(database)


class PidLog(MeanPerDatabase):
    """Appends the pid of every non-driver process that evaluates it to a log file."""

    def __init__(self, log: str, driver_pid: int):
        self.log = log
        self.driver_pid = driver_pid

    def __call__(self, database):
        if os.getpid() != self.driver_pid:
            fd = os.open(self.log, os.O_CREAT | os.O_APPEND | os.O_WRONLY)
            os.write(fd, f"{os.getpid()}\n".encode())
            os.close(fd)
        return super().__call__(database)


# ----------------------------------------------------------------------------- helpers


def _estimate(target=None, backend="local", *, n=N, m=M, gamma=GAMMA, seed=SEED, block_size=BLOCK,
              oracle=None, keep_sample=True, **options):
    return raydp.estimate_sensitivity(
        targets.mean() if target is None else target,
        oracles.exponential(1.0) if oracle is None else oracle,
        n, m=m, gamma=gamma, seed=seed, block_size=block_size, backend=backend,
        keep_sample=keep_sample, progress=False, **options,
    )


def _same(a, b):
    assert a.sensitivity == b.sensitivity
    assert a.plan == b.plan and a.failures == b.failures and a.failure_kinds == b.failure_kinds
    assert np.array_equal(a.top, b.top)
    if a.sample is not None or b.sample is not None:
        assert np.array_equal(a.sample, b.sample)  # bit for bit, +inf included


@pytest.fixture(scope="module")
def local_mean():
    est = _estimate()
    assert est.sample.shape == (M,) and np.isfinite(est.sample).all() and est.failures == 0
    return est


# ----------------------------------------------------------------------------- 1. equality


@pytest.mark.parametrize(
    "group_size, max_in_flight, cpus_per_task",
    [
        (1, None, 1),
        (7, None, 1),
        (None, None, 1),
        (1, 1, 1),
        (7, 3, 1),
        (None, None, 2),  # 2 cluster CPUs / 2 per task = one slot
        (7, 3, 2),        # more in flight than slots: tasks queue in Ray
    ],
)
def test_ray_equals_local_bit_for_bit(local_mean, group_size, max_in_flight, cpus_per_task):
    est = _estimate(backend="ray", group_size=group_size, max_in_flight=max_in_flight, cpus_per_task=cpus_per_task)
    _same(est, local_mean)
    assert est.provenance() == local_mean.provenance()


def test_svm_ray_equals_local():
    pytest.importorskip("sklearn")
    kw = dict(target=targets.svm(), oracle=oracles.svm_two_class(2), n=100, m=40, gamma=None,
              block_size=4, seed=3)
    local = _estimate(**kw)
    remote = _estimate(backend="ray", group_size=2, **kw)
    assert np.isfinite(local.sensitivity) and local.sample.shape == (40,)
    _same(remote, local)


# ----------------------------------------------------------------------------- 2. compact


def test_compact_ray_equals_local(local_mean):
    est = _estimate(backend="ray", keep_sample=False)  # compact=m-k+1 per task
    assert est.sample is None
    local = _estimate(keep_sample=False)
    _same(est, local)
    assert est.sensitivity == local_mean.sensitivity
    assert np.array_equal(est.top, local_mean.top)
    # compacted tasks together with a larger group size
    est2 = _estimate(backend="ray", keep_sample=False, group_size=10)
    _same(est2, local)


# ----------------------------------------------------------------------------- 3. target errors


def test_target_failures_counted_identically():
    kw = dict(target=FailsOnLargeLast(), m=600, gamma=0.2, seed=5)
    local = _estimate(**kw)
    remote = _estimate(backend="ray", group_size=3, **kw)
    assert 0 < local.failures < local.plan.m
    assert local.failure_kinds == {"target raised": local.failures}
    inf_at = np.flatnonzero(np.isposinf(local.sample))
    assert inf_at.size == local.failures
    assert np.array_equal(np.flatnonzero(np.isposinf(remote.sample)), inf_at)
    _same(remote, local)


def test_strict_raises_target_error_through_ray():
    kw = dict(target=FailsOnLargeLast(), m=600, gamma=0.2, seed=5, strict=True)
    with pytest.raises(TargetError, match="strict mode") as local:
        _estimate(**kw)
    with pytest.raises(TargetError, match="strict mode") as remote:
        _estimate(backend="ray", max_in_flight=1, **kw)
    assert not isinstance(remote.value, ray.exceptions.RayTaskError)  # the worker's error itself
    assert type(remote.value) is TargetError
    assert str(remote.value) == str(local.value)  # same first failing pair: blocks go in order
    assert isinstance(remote.value, raydp.errors.RaydpError)


# ----------------------------------------------------------------------------- 4-5. worker faults


def test_killed_worker_is_retried_and_result_unchanged(tmp_path, local_mean):
    marker = tmp_path / "killed"
    target = KillOnce(str(marker), os.getpid())
    clean = _estimate(target)  # in the driver: never kills
    assert not marker.exists()
    # MeanPerDatabase evaluates pair by pair; it agrees with the batched mean to rounding only
    np.testing.assert_allclose(clean.sample, local_mean.sample, rtol=1e-12, atol=1e-15)

    est = _estimate(target, backend="ray")  # default max_retries=3
    assert marker.exists(), "no worker was killed"
    assert int(marker.read_text()) != os.getpid()
    _same(est, clean)


def test_task_lost_for_good_raises_engine_error(tmp_path):
    marker = tmp_path / "killed"
    target = KillOnce(str(marker), os.getpid())
    with pytest.raises(EngineError, match="lost") as err:
        _estimate(target, backend="ray", m=600, gamma=0.2, max_retries=0)
    assert marker.exists()
    assert "fewer than m pairs" in str(err.value)
    # the session survives: the next run (no kill: marker exists) is complete
    est = _estimate(target, backend="ray", m=600, gamma=0.2, max_retries=0)
    _same(est, _estimate(target, m=600, gamma=0.2))


# ----------------------------------------------------------------------------- 6. connecting


def test_auto_uses_the_running_ray(tmp_path, monkeypatch):
    def no_init(*args, **kwargs):
        raise AssertionError("ray.init called although Ray is initialised")

    gcs = ray.get_runtime_context().gcs_address
    log = tmp_path / "pids"
    target = PidLog(str(log), os.getpid())
    local = _estimate(target, m=300, gamma=0.2)
    assert not log.exists()
    monkeypatch.setattr(ray, "init", no_init)
    est = _estimate(target, backend="auto", m=300, gamma=0.2)
    ensure_ray(address=gcs)  # already connected: a no-op
    monkeypatch.undo()
    assert ray.get_runtime_context().gcs_address == gcs
    pids = {int(p) for p in log.read_text().split()}
    assert pids and os.getpid() not in pids  # evaluated in Ray workers
    _same(est, local)


def test_second_driver_connects_by_address(local_mean):
    """A separate process joins this module's cluster through ``address=`` (as ``ray job``
    drivers do) and reproduces the local result; it must not start a Ray of its own.

    The module's cluster is loopback-only, and Ray rewrites a loopback ``address=`` to the host's
    routable IP unless ENABLE_RAY_CLUSTER is off, so the second driver turns it off too (a cluster
    from cluster/local.sh advertises the routable IP and needs no such thing)."""
    gcs = ray.get_runtime_context().gcs_address
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    run = json.dumps(dict(n=N, m=M, gamma=GAMMA, seed=SEED, block_size=BLOCK))
    proc = subprocess.run([sys.executable, str(CHILDREN / "second_driver.py"), gcs, run], capture_output=True, text=True,
                          timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["gcs"] == gcs
    assert out["delta"] == local_mean.sensitivity.hex()
    assert out["sample"] == hashlib.sha256(local_mean.sample.tobytes()).hexdigest()


def test_task_bigger_than_any_node_fails_fast():
    with pytest.raises(EngineError, match="largest node has 2 CPUs"):
        _estimate(backend="ray", m=200, gamma=None, cpus_per_task=3)


def test_a_search_on_ray_leaves_the_warning_filters_as_it_found_them():
    """``PrivateSearchCV`` previews its candidates in threads when a cluster is at hand. Each used to silence
    warnings with its own ``catch_warnings`` — not thread-safe: threads leaving out of order left the process's
    filters at "ignore" for good, and every later ``UtilityWarning`` (a useless release) went unseen."""
    import warnings

    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from raydp.sklearn import PrivateSearchCV, UtilityWarning

    rng = np.random.default_rng(5)
    X = rng.normal(0, 1, (400, 3)) * np.array([1.0, 10.0, 1000.0])
    y = (X[:, 0] + X[:, 1] / 10 + rng.normal(0, 0.5, 400) > 0).astype(float)
    oracle = oracles.bootstrap(np.column_stack([X[:200], y[:200]]))
    grid = {"logisticregression__C": [0.01, 0.03, 0.1, 0.3, 1.0, 3.0]}
    before = list(warnings.filters)
    for seed in range(3):  # a race: several chances to leave the threads out of order
        PrivateSearchCV(make_pipeline(StandardScaler(), LogisticRegression()), grid, oracle=oracle, epsilon=1.0,
                        gamma=0.3, time_budget=None, repeats=3,
                        options=raydp.SamplerOptions(seed=seed, backend="ray", progress=False)).search(200)
        assert warnings.filters == before
    with warnings.catch_warnings(record=True) as caught:
        warnings.warn("seen", UtilityWarning)
    assert [str(w.message) for w in caught] == ["seen"]
