"""A stored Δ̂ released with ``raydp release --store`` after the user's own code changed.

Before: a target ``mytarget:f`` calling ``helper.h`` from the user's module ``helper.py`` was stored with
``raydp estimate --store``; ``helper.py`` was then edited to return 1000x as much, and ``raydp release``
exited 0 with Δ̂ 0.0343 where the edited target needs 34.3 (the fingerprint named other modules by
their import name only). Now the user's modules are fingerprinted by their source, and what no
fingerprint sees (a file the target reads) is caught by replaying the witness pairs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

EST = ["estimate", "--target", "mytarget:f", "--oracle", "raydp.oracles:exponential", "--oracle-args",
       '{"rate": 1.0}', "--n", "100", "--gamma", "0.1", "--seed", "3", "--backend", "local", "--quiet"]


def _raydp(args, cwd):
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = os.pathsep.join([str(cwd)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return subprocess.run([sys.executable, "-m", "raydp.cli", *args], capture_output=True, text=True, cwd=str(cwd),
                          env=env, timeout=300)


@pytest.fixture()
def project(tmp_path):
    (tmp_path / "helper.py").write_text("def h(x):\n    return 1.0 * x\n")
    (tmp_path / "mytarget.py").write_text(textwrap.dedent("""
        import numpy as np
        import helper

        def f(d):
            scale = float(open("scale.txt").read())
            return np.array([scale * helper.h(float(np.mean(d)))])
    """))
    (tmp_path / "scale.txt").write_text("1")
    np.save(tmp_path / "private.npy", np.random.default_rng(0).exponential(1.0, 100))
    r = _raydp([*EST, "--store", "store", "--json"], tmp_path)
    assert r.returncode == 0, r.stderr
    return tmp_path, json.loads(r.stdout)["sensitivity"]


def _release(cwd, *extra):
    return _raydp(["release", "--store", "store", "--data", "private.npy", "--target", "mytarget:f",
                   "--gamma", "0.1", "--epsilon", "1", "--json", *extra], cwd)


def test_the_unchanged_target_is_released_after_its_witnesses_replayed(project):
    cwd, sensitivity = project
    r = _release(cwd)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["sensitivity"] == sensitivity and out["replay"]["pairs"] >= 1
    assert out["replay"]["exact"] == out["replay"]["pairs"] and out["replay"]["skipped"] is None


def test_a_helper_module_edited_after_the_store_is_refused(project):
    cwd, _ = project
    (cwd / "helper.py").write_text("def h(x):\n    return 1000.0 * x\n")
    r = _release(cwd)
    assert r.returncode == 2 and r.stdout == "", (r.stdout, r.stderr)
    assert "computed for target mytarget:f with other code" in r.stderr and len(r.stderr.splitlines()) == 1


def test_a_file_the_target_reads_changed_is_caught_by_replay(project):
    """Nothing static changed (same code, same modules): only the witness pairs show it."""
    cwd, _ = project
    (cwd / "scale.txt").write_text("1000")
    r = _release(cwd)
    assert r.returncode == 2 and "computes something else" in r.stderr, r.stderr
    assert len(r.stderr.splitlines()) == 1
    # replay off: released, and the statement says it was not checked
    r = _raydp(["release", "--store", "store", "--data", "private.npy", "--target", "mytarget:f", "--gamma", "0.1",
                "--epsilon", "1", "--no-replay"], cwd)
    assert r.returncode == 0 and "without replaying its witness pairs (replay=False)" in r.stdout, r.stderr


def test_a_store_whose_plan_gives_another_gamma_is_refused(project):
    cwd, _ = project
    r = _raydp(["release", "--store", "store", "--data", "private.npy", "--target", "mytarget:f", "--gamma", "0.3",
                "--epsilon", "1"], cwd)
    assert r.returncode == 2 and "gives gamma=0.1, not the gamma=0.3" in r.stderr, r.stderr
