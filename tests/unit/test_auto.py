"""backend="auto" (the default): in process for a small run, Ray for a large one or when a cluster is at
hand — and the same Δ̂ and G sample bit for bit whatever it chooses (issue 12)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import raydp
from raydp import oracles, targets
from raydp.engine.backends import AutoBackend, default_local_seconds
from paths import CHILDREN

KW = dict(n=100, gamma=0.05, seed=0, keep_sample=True, progress=False)

def _child(backend: str | None = None, **env) -> dict:
    environ = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    environ.update(env)
    argv = [sys.executable, str(CHILDREN / "first_run.py")] + ([] if backend is None else [backend])
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=environ)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def reference():
    est = raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), backend="local", **KW)
    return est.sensitivity.hex(), hashlib.sha256(est.sample.tobytes()).hexdigest()


@pytest.mark.subprocess
def test_a_small_run_stays_in_process_without_starting_ray(reference):
    out = _child()  # the default backend
    assert out["backend"].startswith("local (auto") and not out["ray_started"]
    assert (out["delta"], out["sample"]) == reference


@pytest.mark.ray
@pytest.mark.subprocess
def test_a_large_run_goes_to_ray_and_gives_the_same_sample(reference):
    # "large" relative to the threshold: 0 s makes every run worth Ray once its first blocks are timed
    out = _child("raydp.AutoBackend(local_seconds=0.0, ray=raydp.RayBackend(num_cpus=2))")
    assert out["backend"].startswith("ray (auto") and out["ray_started"]
    assert (out["delta"], out["sample"]) == reference


def test_a_cluster_address_means_ray():
    auto = AutoBackend(ray=raydp.RayBackend(address="127.0.0.1:1"))
    assert auto.cluster_reason() == "address 127.0.0.1:1"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_ADDRESS", "127.0.0.1:6379")
        assert "RAY_ADDRESS" in AutoBackend().cluster_reason()
    assert AutoBackend(ray=raydp.RayBackend(task_timeout=5)).cluster_reason() == "task_timeout needs Ray"


@pytest.mark.ray
def test_ray_already_running_means_ray(ray_session, reference):
    est = raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), **KW)
    assert est.backend == "ray (Ray is already initialised in this process)"
    assert (est.sensitivity.hex(), hashlib.sha256(est.sample.tobytes()).hexdigest()) == reference


def test_the_threshold_is_the_time_ray_would_save():
    assert default_local_seconds(1) == float("inf")  # one core: Ray cannot pay off
    assert default_local_seconds(2) == pytest.approx(14.0)
    assert default_local_seconds(8) == pytest.approx(8.0)


def test_a_resumed_complete_store_needs_no_backend(tmp_path):
    uri = str(tmp_path / "s")
    first = raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), store=uri, **KW)
    again = raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), store=uri, resume=True, **KW)
    assert again.backend == "local (nothing left to run)" and np.array_equal(again.sample, first.sample)
