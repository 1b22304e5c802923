"""A ledger cannot be spent around (issue 15, items 4–6): the charge comes before the private data,
links, recreation, locks, modes.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import raydp
from raydp.errors import BudgetError, TargetError
from raydp.ledger import Ledger

from cli_util import assert_one_line_exit_2 as _one_line_exit_2
from cli_util import run_cli as _cli
from paths import CHILDREN
from runs import mean_run as _est


class RaisesAboveMark:
    """A target whose failure depends on the private data (it raises when max(data) > threshold). With a
    threshold far above what the oracle (Exp(1), 51 records) ever draws, it computes the mean on every
    oracle database: its witness pairs replay as the mean's did."""

    def __init__(self, threshold):
        self.threshold = threshold
        self.calls = 0

    def __call__(self, db):
        self.calls += 1
        db = np.asarray(db, dtype=float)
        if db.max() > self.threshold:
            raise ValueError("too big")
        return float(db.mean())

    def identity(self):
        return {"name": "mean", "params": {}}


def test_target_on_private_data_is_charged_first_and_refusal_is_identical(tmp_path):
    est = _est(n=50, m=400, block_size=None)
    ledger = Ledger.create(tmp_path / "l.json", epsilon_total=1.0)
    low = np.full(50, 0.5)
    high = np.full(50, 500.0)
    # a failing release is charged and counted
    target = RaisesAboveMark(100.0)
    with pytest.raises(TargetError) as failed:
        raydp.sample_then_respond(high, target, raydp.Laplace(0.5), estimate=est, ledger=ledger)
    assert ledger.spent() == (0.5, 0.0) and ledger.entries()[-1]["status"] == "failed"
    # the failure says nothing about why (the same words whether it raised or misfit)
    assert "withheld" in str(failed.value)
    raydp.sample_then_respond(low, target, raydp.Laplace(0.5), estimate=est, ledger=ledger)
    assert ledger.spent() == (1.0, 0.0)
    # spent: the same refusal, whatever the data, and the target never sees it
    messages = set()
    for data in (low, high):
        t = RaisesAboveMark(100.0)
        with pytest.raises(BudgetError) as refused:
            raydp.sample_then_respond(data, t, raydp.Laplace(0.5), estimate=est, ledger=ledger)
        assert t.calls == 0
        messages.add((type(refused.value), str(refused.value)))
    assert len(messages) == 1


class WrongSizeAboveMark(RaisesAboveMark):
    def __call__(self, db):
        db = np.asarray(db, dtype=float)
        return np.array([db.mean(), 0.0]) if db.max() > self.threshold else float(db.mean())


def test_wrong_size_on_private_data_is_charged_and_uniform(tmp_path):
    est = _est(n=50, m=400, block_size=None)
    ledger = Ledger.create(tmp_path / "l.json", epsilon_total=2.0)
    errs = []
    for target, data in ((RaisesAboveMark(100.0), np.full(50, 500.0)), (WrongSizeAboveMark(100.0), np.full(50, 500.0))):
        with pytest.raises(raydp.errors.RaydpError) as exc:
            raydp.sample_then_respond(data, target, raydp.Laplace(0.5), estimate=est, ledger=ledger)
        errs.append((type(exc.value), str(exc.value).split(" (ledger entry")[0]))
    assert errs[0] == errs[1]  # raise or misfit: one answer
    assert [e["status"] for e in ledger.entries()] == ["failed", "failed"] and ledger.spent()[0] == 1.0


def test_symlinked_ledger_is_one_budget(tmp_path, capsys):
    real = tmp_path / "real.json"
    Ledger.create(real, epsilon_total=1.0)
    link = tmp_path / "link.json"
    link.symlink_to(real)
    a = Ledger(link)
    a.reserve(0.6, 0.0, 0.1, mechanism="laplace", sensitivity=1.0).commit()
    with pytest.raises(BudgetError, match="exceeded"):
        Ledger(real).reserve(0.6, 0.0, 0.1, mechanism="laplace", sensitivity=1.0)
    assert link.is_symlink() and Ledger(real).spent() == (0.6, 0.0)


def test_hard_linked_ledger_is_refused(tmp_path):
    real = tmp_path / "real.json"
    Ledger.create(real, epsilon_total=1.0)
    os.link(real, tmp_path / "hard.json")
    for p in (real, tmp_path / "hard.json"):
        with pytest.raises(BudgetError, match="hard link"):
            Ledger(p).reserve(0.6, 0.0, 0.1, mechanism="laplace", sensitivity=1.0)


def _release_argv(store, data, ledger, *extra):
    return ["release", "--store", store, "--data", data, "--target", "raydp.targets:mean", "--epsilon", "0.6",
            "--gamma", "0.1", "--ledger", ledger, *extra]


def test_missing_ledger_is_never_created_by_a_release(tmp_path, small_store, capsys):
    store, data = small_store
    ledger = tmp_path / "ledger.json"
    code, out, err = _cli(_release_argv(store, data, ledger, "--epsilon-total", "1"), capsys)
    _one_line_exit_2(code, out, err)
    assert "raydp ledger create" in err and not ledger.exists()
    assert _cli(["ledger", "create", ledger, "--epsilon-total", "1"], capsys)[0] == 0
    code, out, err = _cli(["ledger", "create", ledger, "--epsilon-total", "1"], capsys)
    _one_line_exit_2(code, out, err)
    assert "already exists" in err
    assert _cli(_release_argv(store, data, ledger, "--epsilon-total", "1"), capsys)[0] == 0
    ledger.unlink()  # deleted after a spend: the next release must not start a fresh budget
    code, out, err = _cli(_release_argv(store, data, ledger, "--epsilon-total", "1"), capsys)
    _one_line_exit_2(code, out, err)
    assert not ledger.exists()
    with pytest.raises(BudgetError, match="no ledger"):
        Ledger(ledger, epsilon_total=1.0)


@pytest.mark.subprocess
def test_deleting_the_lock_file_cannot_let_two_spends_in(tmp_path):
    path = tmp_path / "l.json"
    Ledger.create(path, epsilon_total=1.0)
    holder = subprocess.Popen([sys.executable, str(CHILDREN / "hold_ledger_lock.py"), str(path), "2.0"], stdout=subprocess.PIPE,
                              text=True)
    assert holder.stdout.readline().strip() == "locked"
    for p in tmp_path.glob("*.lock"):
        p.unlink()  # a careless clean-up during the spend
    with pytest.raises(BudgetError, match="exceeded"):  # must wait for the holder, then see its 0.6
        Ledger(path).reserve(0.6, 0.0, 0.1, mechanism="laplace", sensitivity=1.0)
    assert holder.wait(30) == 0
    assert Ledger(path).spent() == (0.6, 0.0)


def test_read_only_ledger_is_not_written(tmp_path):
    path = tmp_path / "l.json"
    Ledger.create(path, epsilon_total=1.0)
    os.chmod(path, 0o444)
    before = path.read_bytes()
    with pytest.raises(BudgetError, match="read-only"):
        Ledger(path).reserve(0.1, 0.0, 0.1, mechanism="laplace", sensitivity=1.0)
    assert path.read_bytes() == before


def test_owner_and_mode_survive_a_spend(tmp_path):
    path = tmp_path / "l.json"
    Ledger.create(path, epsilon_total=1.0)
    os.chmod(path, 0o640)
    if os.geteuid() == 0:
        os.chown(path, 4321, 4322)
    before = os.stat(path)
    Ledger(path).reserve(0.1, 0.0, 0.1, mechanism="laplace", sensitivity=1.0).commit()
    after = os.stat(path)
    assert (after.st_mode, after.st_uid, after.st_gid) == (before.st_mode, before.st_uid, before.st_gid)
