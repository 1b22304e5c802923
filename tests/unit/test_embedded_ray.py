"""An embedded Ray never makes things worse (issue 36): ``auto`` does not start it where its own timing says it
will not pay — a loaded machine included —, a failed ``ray.init`` leaves none of its processes behind, and the
workers run at the caller's priority."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

import raydp
from raydp import oracles
from raydp.plan import make_plan
from raydp.engine import AutoBackend, RayBackend
from raydp.engine import backends
from raydp.engine.blocks import PairJob


def _loaded(monkeypatch, load: float) -> None:
    monkeypatch.setattr(backends.os, "getloadavg", lambda: (load, load, load))


def test_a_loaded_machine_has_fewer_idle_cores_and_a_slower_start():
    assert backends.free_cores(2, load=0.5) == 2.0 and backends.free_cores(2, load=2.0) == 1.0
    assert backends.default_local_seconds(2, load=0.0) == pytest.approx(14.0)
    assert backends.default_local_seconds(2, load=3.0) == float("inf")  # no idle core but this one: never pays
    assert backends.default_local_seconds(8, load=4.0) > backends.default_local_seconds(8, load=0.0)
    assert backends.ray_start_seconds(2, load=6.0) == pytest.approx(3 * backends.RAY_START_SECONDS)


def _sleepy_mean(records):
    time.sleep(0.005)
    return np.asarray(records, dtype=float).mean(axis=0)


@pytest.mark.parametrize("load,ray", [(0.0, True), (4.0, False)])
def test_auto_starts_ray_only_where_its_timing_says_it_pays(monkeypatch, load, ray):
    """~10 ms a pair, 2 000 pairs: ~20 s of work, worth an embedded Ray on two idle cores — not on two cores
    other processes keep busy (before: the same 14 s threshold whatever the load)."""
    _loaded(monkeypatch, load)
    monkeypatch.setattr(backends.os, "cpu_count", lambda: 2)
    job = PairJob(target=_sleepy_mean, oracle=oracles.normal(dim=1), mechanism=raydp.Laplace(1.0), n=10, m=2000,
                  seed=0, block_size=1, out_dim=1)
    done = []
    chosen, left, why = AutoBackend().choose(job, list(job.layout.blocks()), compact=None, consume=done.append)
    assert isinstance(chosen, RayBackend) is ray and done and len(left) == job.layout.count - len(done)
    assert why.startswith("ray (auto") if ray else why.startswith("local (auto")
    # the Ray backend was only chosen here, never started
    ray_module = __import__("sys").modules.get("ray")
    assert ray_module is None or not ray_module.is_initialized()


def test_a_budget_goes_to_an_embedded_ray_only_for_a_larger_plan(monkeypatch):
    from raydp.sampler import _budget_slots

    auto = AutoBackend(ray=RayBackend(num_cpus=2))
    gamma = make_plan(gamma=0.05).gamma
    _loaded(monkeypatch, 0.0)
    # 1 ms a pair, 60 s: 60 000 pairs in process already buy the largest plan (50 000): Ray buys nothing more
    assert _budget_slots(auto, 60.0, 1e-3, gamma)[2] == "in process"
    # 6 ms a pair, 60 s: 10 000 in process, 17 666 on two idle cores after Ray's start: not a larger plan either
    assert _budget_slots(auto, 60.0, 6e-3, gamma)[2] == "in process"
    # 2.5 ms a pair, 60 s: 24 000 in process (plan 20 000), 42 400 on Ray (still 20 000): in process
    assert _budget_slots(auto, 60.0, 2.5e-3, gamma)[2] == "in process"
    # 4.4 ms a pair, 60 s: 13 636 in process (plan 10 000), 24 090 on Ray (plan 20 000): worth starting Ray
    assert _budget_slots(auto, 60.0, 4.4e-3, gamma)[2] == "embedded ray"
    _loaded(monkeypatch, 4.0)  # the same on a machine whose cores are busy: in process
    assert _budget_slots(auto, 60.0, 4.4e-3, gamma)[2] == "in process"


@pytest.mark.ray
@pytest.mark.slow
def test_a_failed_embedded_start_leaves_no_process_behind_and_auto_carries_on_in_process(monkeypatch):
    """ray.init fails for real after it started its processes: the driver's job config names a working_dir
    that does not exist, which Ray checks only when the driver connects — after the GCS server, the monitor,
    the dashboard, the log monitor and the raylet are up (before: all of them were left running, and the run
    failed)."""
    import ray

    from raydp.engine.ray import _cmdline, _descendants

    assert not ray.is_initialized()
    before = _descendants(os.getpid())
    sessions = _sessions()
    kw = dict(n=20, m=300, k=300, seed=0, keep_sample=True, progress=False)
    reference = raydp.estimate_sensitivity(_mean, oracles.normal(dim=1), backend="local", **kw)
    monkeypatch.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", '{"runtime_env": {"working_dir": "/nonexistent/raydp-no-dir"}}')
    # local_seconds=0: auto wants Ray for any run; its start fails, and the run goes on in this process
    est = raydp.estimate_sensitivity(_mean, oracles.normal(dim=1),
                                     backend=AutoBackend(ray=RayBackend(num_cpus=1), local_seconds=0.0), **kw)
    assert est.backend.startswith("local (auto: the embedded Ray did not start: starting an embedded Ray failed")
    assert np.array_equal(est.sample, reference.sample) and est.sensitivity == reference.sensitivity
    assert not ray.is_initialized()
    new = [p for p in _descendants(os.getpid()) - before if _cmdline(p)]  # by parentage
    assert new == [], [(p, _cmdline(p)[:100]) for p in new]
    started = _sessions() - sessions
    assert started  # Ray did get as far as a session of its own
    for session in started:  # by the session's directory, wherever they were reparented
        left = [p for p in _all_pids() if session in _cmdline(p)]
        assert left == [], [(p, _cmdline(p)[:100]) for p in left]


def _mean(records):
    return np.asarray(records, dtype=float).mean(axis=0)


def _sessions() -> set[str]:
    out = set()
    for root in {os.environ.get("RAY_TMPDIR") or "/tmp", "/tmp"}:
        try:
            out |= {os.path.join(root, "ray", e) for e in os.listdir(os.path.join(root, "ray"))
                    if e.startswith("session_2")}
        except OSError:
            pass
    return out


def _all_pids() -> list[int]:
    return [int(e) for e in os.listdir("/proc") if e.isdigit()]


@pytest.mark.ray
@pytest.mark.slow
def test_an_embedded_rays_workers_run_at_the_callers_priority():
    """Ray adds worker_niceness (15 by default) to the niceness its workers inherit from this process: they
    got ~2% of a core each on a busy machine. An embedded Ray is one user's: raydp sets it to 0."""
    import ray

    assert not ray.is_initialized()
    try:
        RayBackend(num_cpus=1).connect()

        @ray.remote
        def niceness():
            return os.nice(0)

        assert ray.get(niceness.remote(), timeout=120) == os.nice(0)
    finally:
        ray.shutdown()
