"""The privacy budget ledger: exact sums, refusal before noise, durability, locking, γ composition."""

import contextlib
import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import raydp
from raydp import ledger as ledger_mod
from raydp import oracles, targets
from raydp.cli import main
from raydp.errors import BudgetError, InvalidArgumentError, InvalidTypeError
from raydp.ledger import Ledger

N = 200


@pytest.fixture(scope="module")
def est():
    return raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), N, gamma=0.1, seed=3,
                                      keep_sample=True, progress=False)


@pytest.fixture
def data():
    return np.random.default_rng(1).exponential(1.0, N)


class RecordingLaplace(raydp.Laplace):
    """A Laplace mechanism that records each call to release() (where the noise is drawn) in a file:
    the release runs in a sealed process of its own, so the record must cross a process boundary.
    With ``ledger``, each record is the ledger file's entries as they were on disk at that moment."""

    def __init__(self, epsilon, log, ledger=None):
        super().__init__(epsilon)
        self.log, self.ledger = str(log), None if ledger is None else str(ledger)

    def release(self, value, sensitivity):
        seen = None if self.ledger is None else json.loads(open(self.ledger).read())["entries"]
        with open(self.log, "a") as f:
            f.write(json.dumps(seen) + "\n")
        return super().release(value, sensitivity)

    def records(self) -> list:
        try:
            with open(self.log) as f:
                return [json.loads(line) for line in f]
        except FileNotFoundError:
            return []


class CrashingLaplace(raydp.Laplace):
    """A Laplace mechanism whose noise sampler crashes with a message."""

    def release(self, value, sensitivity):
        raise RuntimeError("noise sampler crashed")


def charge(led, eps, delta=0.0, gamma=0.1, **kw):
    kw.setdefault("mechanism", "laplace")
    kw.setdefault("sensitivity", 1.0)
    res = led.reserve(eps, delta, gamma, **kw)
    res.commit()
    return res


# ---- sums and totals ----------------------------------------------------------------------------

def test_spends_are_summed_exactly(tmp_path):
    led = Ledger.create(tmp_path / "l.json", epsilon_total=0.3, delta_total=3e-6)
    charge(led, 0.1, 1e-6)
    charge(led, 0.2, 2e-6)  # 0.1 + 0.2 != 0.3 in floats; the ledger adds the decimals exactly
    assert led.spent() == (0.3, 3e-6) and led.remaining() == (0.0, 0.0)
    with pytest.raises(BudgetError, match=r"spent 0\.3 \+ requested 1e-15 > total 0\.3"):
        charge(led, 1e-15)
    again = Ledger(tmp_path / "l.json")  # reopening reads the stored totals
    assert again.spent() == (0.3, 3e-6)
    with pytest.raises(BudgetError, match=r"δ: spent 3e-06 \+ requested 1e-12 > total 3e-06"):
        again.reserve(0.0001, 1e-12, 0.1, mechanism="gaussian", sensitivity=1.0)
    assert len(led.entries()) == 2

    ten = Ledger.create(tmp_path / "ten.json", epsilon_total=1.0)  # delta_total defaults to 0
    for _ in range(10):
        charge(ten, 0.1)
    assert ten.spent() == (1.0, 0.0)
    with pytest.raises(BudgetError, match="total 1"):
        charge(ten, 0.1)
    with pytest.raises(BudgetError, match="δ: spent 0 \\+ requested 1e-09 > total 0"):
        Ledger.create(tmp_path / "pure.json", epsilon_total=5.0).reserve(0.1, 1e-9, 0.1, mechanism="gaussian",
                                                                  sensitivity=1.0)


def test_totals_are_validated_fixed_and_checked_on_reopen(tmp_path):
    for bad in ({"epsilon_total": 0.0}, {"epsilon_total": -1.0}, {"epsilon_total": float("inf")},
                {"epsilon_total": float("nan")}, {"epsilon_total": 1.0, "delta_total": 1.0},
                {"epsilon_total": 1.0, "delta_total": -1e-9}, {"epsilon_total": 1.0, "delta_total": float("nan")}):
        with pytest.raises(InvalidArgumentError):
            Ledger.create(tmp_path / "bad.json", **bad)
    with pytest.raises(InvalidTypeError):
        Ledger.create(tmp_path / "bad.json", epsilon_total="1")
    assert not (tmp_path / "bad.json").exists()
    with pytest.raises(BudgetError, match="no ledger at"):
        Ledger(tmp_path / "missing.json")
    with pytest.raises(BudgetError, match="no ledger at"):
        Ledger(tmp_path / "missing.json", delta_total=1e-6)
    with pytest.raises(BudgetError, match="never created implicitly"):  # totals do not create one either
        Ledger(tmp_path / "missing.json", epsilon_total=1.0)
    assert not (tmp_path / "missing.json").exists()

    Ledger.create(tmp_path / "l.json", epsilon_total=2.0, delta_total=1e-6)
    with pytest.raises(BudgetError, match="already exists"):
        Ledger.create(tmp_path / "l.json", epsilon_total=2.0, delta_total=1e-6)
    assert (Ledger(tmp_path / "l.json").epsilon_total, Ledger(tmp_path / "l.json").delta_total) == (2.0, 1e-6)
    assert Ledger(f"file://{tmp_path}/l.json", epsilon_total=2.0).delta_total == 1e-6
    with pytest.raises(BudgetError, match=r"other totals \(epsilon_total stored 2\.0, given 3\.0\)"):
        Ledger(tmp_path / "l.json", epsilon_total=3.0)
    with pytest.raises(BudgetError, match="delta_total stored 1e-06, given 0.0"):
        Ledger(tmp_path / "l.json", epsilon_total=2.0, delta_total=0.0)
    with pytest.raises(InvalidArgumentError, match="local file"):
        Ledger.create("s3://bucket/ledger.json", epsilon_total=1.0)


def test_requests_are_validated(tmp_path):
    led = Ledger.create(tmp_path / "l.json", epsilon_total=1.0, delta_total=0.5)
    for eps, delta, gamma in ((0.0, 0.0, 0.1), (float("nan"), 0.0, 0.1), (0.1, 1.0, 0.1), (0.1, -1e-9, 0.1),
                              (0.1, 0.0, 1.0), (0.1, 0.0, -0.1)):
        with pytest.raises(InvalidArgumentError):
            led.reserve(eps, delta, gamma, mechanism="laplace", sensitivity=1.0)
    with pytest.raises(InvalidTypeError):
        led.reserve(True, 0.0, 0.1, mechanism="laplace", sensitivity=1.0)
    assert led.entries() == []


# ---- releases -----------------------------------------------------------------------------------

def test_over_budget_release_is_refused_before_any_noise(tmp_path, est, data):
    path = tmp_path / "l.json"
    led = Ledger.create(path, epsilon_total=1.0)
    mech = RecordingLaplace(0.6, tmp_path / "calls")
    r = raydp.sample_then_respond(data, targets.mean(), mech, estimate=est, ledger=led)
    assert len(mech.records()) == 1 and r.ledger["entry"] == 1 and led.spent() == (0.6, 0.0)
    before = path.read_bytes()
    with pytest.raises(BudgetError, match=r"ε: spent 0\.6 \+ requested 0\.6 > total 1\b.*nothing was released"):
        raydp.sample_then_respond(data, targets.mean(), mech, estimate=est, ledger=led)
    assert len(mech.records()) == 1  # release() was never reached: no noise drawn
    assert path.read_bytes() == before
    # a path works too, and a release that fits still goes through
    r = raydp.sample_then_respond(data, targets.mean(), RecordingLaplace(0.4, tmp_path / "calls2"), estimate=est,
                                  ledger=str(path))
    assert r.ledger["composed"]["epsilon"] == 1.0 and led.remaining() == (0.0, 0.0)


def test_charge_is_on_disk_before_release_draws_noise(tmp_path, est, data):
    path = tmp_path / "l.json"
    led = Ledger.create(path, epsilon_total=1.0)
    mech = RecordingLaplace(0.25, tmp_path / "calls", ledger=path)
    raydp.sample_then_respond(data, targets.mean(), mech, estimate=est, ledger=led, ledger_label="q1")
    seen = mech.records()
    assert len(seen) == 1 and len(seen[0]) == 1
    entry = seen[0][0]
    assert (entry["status"], entry["epsilon"], entry["delta"], entry["gamma"]) == ("reserved", 0.25, 0.0, 0.1)
    assert entry["sensitivity"] == est.sensitivity and entry["label"] == "q1"
    assert led.entries()[0]["status"] == "released"


def test_a_failed_release_stays_counted_and_cancel_is_explicit(tmp_path, est, data):
    led = Ledger.create(tmp_path / "l.json", epsilon_total=1.0)

    # without a ledger the mechanism's own message is withheld (it may quote the private answer), its type named
    with pytest.raises(raydp.MechanismError, match="raised RuntimeError") as info:
        raydp.sample_then_respond(data, targets.mean(), CrashingLaplace(0.5), estimate=est)
    assert "crashed" not in str(info.value)
    # with a ledger nothing about why comes back (it could depend on the data): one answer, counted
    with pytest.raises(raydp.TargetError, match="release failed on the private data; why is withheld") as info:
        raydp.sample_then_respond(data, targets.mean(), CrashingLaplace(0.5), estimate=est, ledger=led)
    assert "crashed" not in str(info.value) and "RuntimeError" not in str(info.value)
    assert [e["status"] for e in led.entries()] == ["failed"] and led.spent() == (0.5, 0.0)
    # a caller that knows no noise was drawn may give the budget back, once
    res = led.reserve(0.5, 0.0, 0.1, mechanism="laplace", sensitivity=1.0)
    assert led.spent() == (1.0, 0.0)
    res.cancel()
    assert led.spent() == (0.5, 0.0) and [e["status"] for e in led.entries()] == ["failed", "cancelled"]
    with pytest.raises(BudgetError, match="already cancelled"):
        res.commit()


def test_ledger_holds_no_released_value_or_private_data(tmp_path, est):
    path = tmp_path / "l.json"
    data = np.full(N, 123.456789)
    r = raydp.sample_then_respond(data, targets.mean(), raydp.Laplace(0.5), estimate=est, ledger=Ledger.create(path, 1.0))
    text = path.read_text()
    assert repr(float(r.value)) not in text and "123.456789" not in text
    assert set(json.loads(text)["entries"][0]) == {"id", "time", "status", "epsilon", "delta", "gamma", "mechanism",
                                                   "sensitivity", "estimate", "sample", "label", "calibration", "finished"}


# ---- γ across releases --------------------------------------------------------------------------

def test_gamma_is_shared_per_estimate_and_summed_across_samples(tmp_path, est, data):
    led = Ledger.create(tmp_path / "l.json", epsilon_total=10.0)

    def release(e):
        return raydp.sample_then_respond(data, targets.mean(), raydp.Laplace(0.5), estimate=e, ledger=led)

    release(est)
    r = release(est)  # the same Δ̂: one sampling event, γ does not add up
    assert r.ledger["composed"] == {"epsilon": 1.0, "delta": 0.0, "gamma": 0.1, "releases": 2, "estimates": 1,
                                    "samples": 1}
    looser = est.for_gamma(0.2)  # another Δ̂ from the same G sample: the group counts max γ
    assert looser.sensitivity <= est.sensitivity
    r = release(looser)
    assert r.ledger["composed"]["gamma"] == 0.2 and r.ledger["composed"]["estimates"] == 2
    assert r.ledger["composed"]["samples"] == 1
    other = raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), N, gamma=0.05, seed=4,
                                       progress=False)  # an independent sample: union bound, γ adds
    r = release(other)
    assert r.ledger["composed"]["gamma"] == pytest.approx(0.25, abs=1e-15)
    assert (r.ledger["composed"]["samples"], r.ledger["composed"]["estimates"]) == (2, 3)
    g = led.guarantee()
    assert (g.epsilon, g.delta, g.gamma, g.releases) == (2.0, 0.0, r.ledger["composed"]["gamma"], 4)
    # entries without provenance are their own events
    charge(led, 0.1, gamma=0.01)
    assert led.guarantee().gamma == pytest.approx(0.26, abs=1e-15)


# ---- concurrency --------------------------------------------------------------------------------

def _race_worker(path, barrier, use_lock):
    # widen the read-check-write window so that a missing lock would be caught
    orig_write = ledger_mod.Ledger._write

    def slow_write(self, doc):
        time.sleep(0.05)
        orig_write(self, doc)

    ledger_mod.Ledger._write = slow_write
    if not use_lock:
        ledger_mod.Ledger._locked = lambda self: contextlib.nullcontext()
    led = ledger_mod.Ledger(path)
    barrier.wait()
    try:
        led.reserve(0.3, 0.0, 0.1, mechanism="laplace", sensitivity=1.0).commit()
    except BudgetError:
        os._exit(3)
    os._exit(0)


def _race(path, use_lock, procs=8):
    ctx = multiprocessing.get_context("fork")  # children share the parent's imports: cheap to start
    barrier = ctx.Barrier(procs)
    workers = [ctx.Process(target=_race_worker, args=(str(path), barrier, use_lock)) for _ in range(procs)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    codes = [w.exitcode for w in workers]
    assert set(codes) <= {0, 3}, codes
    return codes.count(0)


@pytest.mark.subprocess
def test_racing_processes_cannot_overspend(tmp_path):
    path = tmp_path / "l.json"
    Ledger.create(path, epsilon_total=1.0)
    assert _race(path, use_lock=True) == 3
    led = Ledger(path)
    assert led.spent() == (0.9, 0.0) and [e["status"] for e in led.entries()] == ["released"] * 3
    assert sorted(e["id"] for e in led.entries()) == [1, 2, 3]
    # the same race without the lock over-spends: the test above can fail
    unlocked = tmp_path / "unlocked.json"
    Ledger.create(unlocked, epsilon_total=1.0)
    assert _race(unlocked, use_lock=False) > 3


# ---- damage ---------------------------------------------------------------------------------------

HEAD = b'{"kind": "raydp-privacy-ledger", "format": 1, "epsilon_total": 1.0, "delta_total": 0.0, "entries": '
ENTRY = b'{"id": 1, "time": "t", "status": "released", "mechanism": "laplace", "sensitivity": 1.0, "delta": 0.0, '


@pytest.mark.parametrize("content, why", [
    (b"{not json", "Expecting"), (b"", "Expecting value"), (b'{"kind": "something else"}', "not a raydp"),
    (b"[]", "not a raydp"), (HEAD + b"[" + ENTRY + b'"gamma": 0.1, "epsilon": -5.0}]}', "epsilon must be a finite real number > 0"),
    (HEAD + b"[" + ENTRY + b'"gamma": 0.1}]}', "epsilon"),  # a missing field
    (HEAD + b"[" + ENTRY + b'"gamma": 0.1, "epsilon": 0.5}, ' + ENTRY + b'"gamma": 0.1, "epsilon": 0.5}]}',
     "repeated entry id"),
    (HEAD.replace(b"1.0", b"NaN") + b"[]}", "non-finite"),
])
def test_a_corrupt_ledger_is_an_error_never_a_reset(tmp_path, content, why):
    path = tmp_path / "l.json"
    path.write_bytes(content)
    with pytest.raises(BudgetError, match=f"is corrupt.*{why}.*never reset"):
        Ledger(path, epsilon_total=1.0)
    with pytest.raises(BudgetError, match="is corrupt"):
        Ledger(path)
    assert path.read_bytes() == content


def test_damage_after_opening_refuses_and_never_recreates(tmp_path, est, data):
    path = tmp_path / "l.json"
    led = Ledger.create(path, epsilon_total=1.0)
    charge(led, 0.5)
    path.write_text(path.read_text()[:-20])  # torn by something other than raydp
    mech = RecordingLaplace(0.1, tmp_path / "calls")
    with pytest.raises(BudgetError, match="is corrupt"):
        raydp.sample_then_respond(data, targets.mean(), mech, estimate=est, ledger=led)
    path.unlink()
    with pytest.raises(BudgetError, match="disappeared"):
        raydp.sample_then_respond(data, targets.mean(), mech, estimate=est, ledger=led)
    assert mech.records() == [] and not path.exists()


# ---- command line ---------------------------------------------------------------------------------

@pytest.mark.subprocess
def test_cli_release_with_ledger_and_show(tmp_path, capsys):
    store, ledger, data = str(tmp_path / "est"), str(tmp_path / "ledger.json"), str(tmp_path / "private.npy")
    assert main(["estimate", "--target", "raydp.targets:mean", "--oracle", "raydp.oracles:exponential",
                 "--oracle-args", '{"rate": 1.0}', "--n", "200", "--gamma", "0.1", "--seed", "5",
                 "--store", store, "--quiet"]) == 0
    np.save(data, np.random.default_rng(0).exponential(1.0, 200))
    assert main(["ledger", "create", ledger, "--epsilon-total", "1"]) == 0
    release = ["release", "--store", store, "--data", data, "--target", "raydp.targets:mean",
               "--epsilon", "0.6", "--gamma", "0.1", "--ledger", ledger, "--epsilon-total", "1"]
    capsys.readouterr()
    assert main(release + ["--json", "--ledger-label", "first"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ledger"]["entry"] == 1 and out["ledger"]["composed"]["epsilon"] == 0.6
    before = Path(ledger).read_bytes()
    proc = subprocess.run([sys.executable, "-m", "raydp.cli", *release], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == (f"raydp: error: privacy budget exceeded in ledger {ledger!r} "
                                   "(ε: spent 0.6 + requested 0.6 > total 1); nothing was released")
    assert Path(ledger).read_bytes() == before

    assert main(["ledger", "show", ledger]) == 0
    text = capsys.readouterr().out
    assert "spent      epsilon=0.6 delta=0   remaining epsilon=0.4 delta=0" in text
    assert "(0.6, 0, 0.1)-random differential privacy over 1 release(s)" in text
    row = [line for line in text.splitlines() if line.startswith("1 ")]
    assert len(row) == 1 and row[0].split()[2:6] == ["released", "0.6", "0", "0.1"] and row[0].endswith("first")
    assert main(["ledger", "show", f"file://{ledger}", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["spent"] == {"epsilon": 0.6, "delta": 0.0} and len(shown["entries"]) == 1

    for args, fragment in (
        (["ledger", "show", str(tmp_path / "nope.json")], "no ledger at"),
        (release[:-4] + ["--epsilon-total", "1"], "need --ledger"),
        (release[:-1] + ["2"], "other totals"),
    ):
        assert main(args) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and fragment in err, err
