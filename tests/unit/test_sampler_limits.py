"""Runs that must stop cleanly or resume as the same run (issue 15, items 10–13): a plan that cannot
fit in memory, an interrupted extension, an unseeded resume, a user's directory, complex numbers.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest

import raydp
from raydp import oracles, targets
from raydp.errors import OracleError, TargetError

from cli_util import assert_one_line_exit_2 as _one_line_exit_2
from cli_util import run_cli as _cli
from paths import CHILDREN
from runs import EST_ARGS
from runs import mean_run as _est


def test_a_plan_that_cannot_fit_is_refused_before_anything_is_written(tmp_path, capsys):
    store = tmp_path / "s"
    code, out, err = _cli(["estimate", "--target", "raydp.targets:mean", "--oracle", "raydp.oracles:exponential",
                           "--oracle-args", '{"rate": 1.0}', "--n", "10", "--gamma", "1e-7", "--store", store, "--quiet"], capsys)
    _one_line_exit_2(code, out, err)
    assert "cannot fit" in err or "too large" in err
    assert not store.exists()


@pytest.mark.subprocess
def test_an_interrupted_extension_keeps_the_smaller_estimate(tmp_path):
    uri = tmp_path / "s"
    first = _est(store=str(uri))
    stored = len(list((uri / "shards").glob("shard-*.parquet")))
    proc = subprocess.Popen([sys.executable, str(CHILDREN / "interrupted_extension.py"), str(uri)], stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and len(list((uri / "shards").glob("shard-*.parquet"))) < stored + 10:
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    again = raydp.load_estimate(str(uri))
    assert again.plan.m == 2000 and again.sensitivity == first.sensitivity
    extended = _est(store=str(uri), m=4000, resume=True)
    assert extended.plan.m == 4000 and raydp.load_estimate(str(uri)).plan.m == 4000


def test_an_unseeded_run_resumes_with_the_same_command(tmp_path, capsys):
    store = tmp_path / "s"
    argv = ["estimate", "--target", "raydp.targets:mean", "--oracle", "raydp.oracles:exponential",
            "--oracle-args", '{"rate": 1.0}', "--n", "30", "--quiet", "--json", "--store", store]
    code, out, err = _cli([*argv, "--m", "1000"], capsys)
    assert code == 0, err
    seed = json.loads(out)["seed"]
    code, out, err = _cli([*argv, "--m", "3000", "--resume"], capsys)
    assert code == 0, err
    assert json.loads(out)["seed"] == seed


def test_a_users_directory_is_never_overwritten(tmp_path, capsys):
    out_dir = tmp_path / "results"
    out_dir.mkdir()
    (out_dir / "result.json").write_text('{"mine": true}')
    code, out, err = _cli([*EST_ARGS, "--store", out_dir], capsys)
    _one_line_exit_2(code, out, err)
    assert (out_dir / "result.json").read_text() == '{"mine": true}' and not (out_dir / "meta.json").exists()


class ComplexTarget:
    def __call__(self, db):
        return 0.512j + 0 * float(np.mean(db))

    def identity(self):
        return {"name": "complex", "params": {}}


class ComplexInBlocks:
    """Real records for the probe (n records), complex ones for a block's draw."""

    def __init__(self, n):
        self.n = n

    def sample(self, rng, size):
        x = rng.exponential(1.0, size)
        return x if size == self.n else x.astype(complex) * 1j

    def identity(self):
        return {"name": "complex_in_blocks", "params": {"n": self.n}}


def test_complex_outputs_and_records_are_refused():
    with pytest.raises(TargetError, match="complex"):
        raydp.estimate_sensitivity(ComplexTarget(), oracles.exponential(1.0), 20, m=100, seed=1, progress=False)

    class ComplexBatch(targets.Mean):  # a batch form that returns complex: it must not be trusted
        def batch(self, dbs):
            return np.asarray(np.mean(dbs, axis=1)) * (1 + 0.5j)

    class PerPairMean:
        def __call__(self, db):
            return targets.mean()(db)

        def identity(self):
            return {"name": "mean", "params": {}}

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ComplexWarning may be swallowed into a result
        got = raydp.estimate_sensitivity(ComplexBatch(), oracles.exponential(1.0), 20, m=100, seed=1,
                                         block_size=10, progress=False, keep_sample=True)
    ref = raydp.estimate_sensitivity(PerPairMean(), oracles.exponential(1.0), 20, m=100, seed=1, block_size=10,
                                     progress=False, keep_sample=True)
    assert np.array_equal(got.sample, ref.sample)

    class ComplexSometimes:
        def __call__(self, db):
            db = np.asarray(db, dtype=float)
            return db.mean() * (1j if db[0] > 2.0 else 1.0)

        def identity(self):
            return {"name": "complex_sometimes", "params": {}}

    oracle = oracles.exponential(1.0)
    with pytest.raises(TargetError, match="complex"):
        raydp.estimate_sensitivity(ComplexSometimes(), oracle, 20, m=300, seed=3, progress=False, strict=True)
    lax = raydp.estimate_sensitivity(ComplexSometimes(), oracle, 20, m=300, gamma=0.3, seed=3, progress=False)
    assert lax.failures > 0  # counted as failed pairs (G = +inf), never as a real part
    with pytest.raises(OracleError, match="complex"):
        raydp.estimate_sensitivity(targets.mean(), ComplexInBlocks(20), 20, m=100, seed=1, progress=False)
