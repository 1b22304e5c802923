"""The private evaluation is sealed in a process of its own: nothing it does reaches the caller.

Each scenario of ``tests/children/sealed_leaks.py`` leaked a marker planted in the private data before
the target ran in a sealed process (checked against the code before that change: every one of them
showed the marker): a joblib/loky pool started by the public estimation printed from its workers, a
``GridSearchCV(..., n_jobs=2, verbose=3)`` inside ``PrivateEstimator`` printed the private CV scores, a log
record above CRITICAL and one passed to ``Logger.handle`` reached the user's FileHandler, a warning the
target re-enabled reached the caller's ``catch_warnings(record=True)`` list, a thread printed after the
release, an ``atexit`` hook printed at exit, and ``TargetError.__context__`` held the original exception
with its message. The child runs with stdout and stderr on pipes, as under a job runner.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from paths import CHILDREN, REPO

import raydp
from raydp import oracles, targets

MARKER = "61803.39"


@pytest.fixture(scope="module")
def leaks(tmp_path_factory):
    log = tmp_path_factory.mktemp("sealed") / "user.log"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = str(REPO)
    r = subprocess.run([sys.executable, str(CHILDREN / "sealed_leaks.py"), str(log)], capture_output=True,
                       text=True, timeout=600, env=env, cwd=str(REPO))
    return r, (log.read_text() if log.exists() else "")


def test_every_scenario_ran(leaks):
    r, _ = leaks
    assert r.returncode == 0, r.stderr[-3000:]
    for name in ("joblib", "logging", "thread", "atexit", "warning", "context", "gridsearch", "end"):
        assert f"OK {name}" in r.stdout, (name, r.stdout[-2000:], r.stderr[-2000:])


@pytest.mark.parametrize("scenario", ["joblib", "gridsearch", "thread", "atexit"])
def test_nothing_reaches_stdout_or_stderr(leaks, scenario):
    """A pool's workers started by the public estimation, GridSearchCV's verbose CV scores, a thread that
    prints after the release, an atexit hook: nothing of the private evaluation is printed."""
    r, _ = leaks
    out = r.stdout + r.stderr
    assert f"{MARKER}887-{scenario}" not in out, out[-2000:]


@pytest.mark.parametrize("scenario", ["logging-above-critical", "logging-handle"])
def test_nothing_reaches_the_users_log_file(leaks, scenario):
    r, log = leaks
    assert "OK logging" in r.stdout
    assert f"{MARKER}887-{scenario}" not in log, log[-2000:]


def test_no_marker_anywhere(leaks):
    r, log = leaks
    assert MARKER not in r.stdout + r.stderr + log


def test_no_warning_in_the_callers_record_list_and_no_exception_chain(leaks):
    r, _ = leaks
    assert "FLAG warning False" in r.stdout, r.stdout[-2000:]
    assert "FLAG context False" in r.stdout, r.stdout[-2000:]


# ---------------------------------------------------------------------------------- in this process


def test_a_failure_comes_back_as_its_kind_alone():
    """Not even the exception's type name comes back (a class can be named after the data:
    test_sandbox.py): the failure is a fixed kind, "the target failed on the private data"."""
    def boom(d):
        if np.max(d) > 1e6:
            raise KeyError(f"record {np.max(d)}")
        return np.array([float(np.mean(d))])

    est = raydp.estimate_sensitivity(boom, oracles.exponential(1.0), 30, m=40, seed=1, progress=False)
    data = np.full(30, 7777777.0)
    with pytest.raises(raydp.TargetError, match="the target failed on the private data") as info:
        raydp.sample_then_respond(data, boom, raydp.Laplace(1.0), estimate=est)
    assert info.value.__context__ is None and info.value.__cause__ is None
    assert "7777777" not in str(info.value) and "KeyError" not in str(info.value)


def test_whatever_the_target_leaves_running_dies_with_its_process(tmp_path):
    """A child process the target starts (and does not wait for) is killed with the sealed process."""
    flag = tmp_path / "still-running"

    def spawns(d):
        import subprocess as sp

        if np.max(d) > 1e6:
            sp.Popen([sys.executable, "-c", f"import time, pathlib; time.sleep(1.5); pathlib.Path({str(flag)!r}).touch()"])
        return np.array([float(np.mean(d))])

    est = raydp.estimate_sensitivity(spawns, oracles.exponential(1.0), 30, m=40, seed=1, progress=False)
    raydp.sample_then_respond(np.full(30, 7777777.0), spawns, raydp.Laplace(1.0), estimate=est)
    import time

    time.sleep(3.0)
    assert not flag.exists()


def test_the_released_value_is_the_mechanism_on_the_target_in_the_sealed_process():
    est = raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), 200, gamma=0.1, seed=1, progress=False)
    data = np.random.default_rng(0).exponential(1.0, 200)
    values = [float(raydp.sample_then_respond(data, targets.mean(), raydp.Laplace(1e6), estimate=est).value)
              for _ in range(3)]
    # at ε = 1e6 the noise scale is Δ̂/1e6: the value is the mean to within far less than Δ̂
    assert all(abs(v - data.mean()) < est.sensitivity * 1e-3 for v in values)
