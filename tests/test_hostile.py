"""Hostile and careless use (issue 15): each numbered finding, probed the way a user hits it.

1–3   a store that cannot be fooled into a too-small Δ̂ (foreign shards, racing creators, tampering)
4–6   a ledger that cannot be spent around (charge before the private data, links, recreation, locks)
7     nothing private in any message (parse errors, SystemExit, warnings, credentials)
8–9   filesystem errors are one line with exit 2, nothing half-written is read, concurrent resumers
10–13 plans that cannot fit, interrupted extensions, unseeded resumes, user files, complex numbers
14–16 plan arithmetic: exact ceilings and checks, γ never understated, the k hint
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import time
import warnings
from decimal import Decimal, getcontext
from pathlib import Path

import numpy as np
import pytest

import raydp
from raydp import oracles, targets
from raydp.cli import main
from raydp.engine.blocks import BlockResult
from raydp.errors import BudgetError, OracleError, PlanError, StoreError, TargetError
from raydp.ledger import Ledger
from raydp.store import Store

MARK = 7777.123456789  # a "private" value that must never appear in any output
MARK_TEXT = "7777.12"
KW = dict(n=30, m=2000, seed=17, block_size=25, progress=False)


def _est(oracle=None, **kw):
    args = dict(KW)
    args.update(kw)
    return raydp.estimate_sensitivity(targets.mean(), oracle or oracles.exponential(1.0), **args)


def _cli(argv, capsys):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _one_line_exit_2(code, out, err):
    assert code == 2, out + err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and err.startswith("raydp: error: "), err


EST_ARGS = ["estimate", "--target", "raydp.targets:mean", "--oracle", "raydp.oracles:exponential",
            "--oracle-args", '{"rate": 1.0}',
            "--n", "30", "--m", "2000", "--seed", "17", "--block-size", "25", "--quiet"]


# ================================================================= 1. foreign shards, no meta.json

def test_1_reset_store_with_shards_is_refused_not_adopted(tmp_path, capsys):
    uri = tmp_path / "s"
    assert _cli([*EST_ARGS, "--oracle-args", '{"rate": 1.0}', "--store", uri], capsys)[0] == 0
    os.unlink(uri / "meta.json")
    os.unlink(uri / "result.json")  # a user "resetting" the store; the shards stay
    code, out, err = _cli([*EST_ARGS, "--oracle-args", '{"rate": 10.0}', "--store", uri], capsys)
    _one_line_exit_2(code, out, err)
    assert "not a raydp store" in err or "no meta.json" in err
    code, out, err = _cli([*EST_ARGS, "--oracle-args", '{"rate": 10.0}', "--store", uri, "--resume"], capsys)
    _one_line_exit_2(code, out, err)
    assert not (uri / "meta.json").exists()


def test_1_a_shard_of_another_run_is_refused(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _est(store=str(a))
    _est(oracles.exponential(10.0), store=str(b))
    for p in (b / "shards").glob("shard-*.parquet"):  # move b's shards into a, as a careless copy would
        shutil.copy(p, a / "shards" / p.name.replace("shard-", "shard-9"))
    with pytest.raises(StoreError, match="another run"):
        raydp.load_estimate(str(a))
    with pytest.raises(StoreError, match="another run"):
        _est(store=str(a), resume=True)


# ================================================================= 2. two creators at once

def _create(uri, rate, barrier, out):
    barrier.wait()
    try:
        _est(oracles.exponential(rate), store=uri, m=400)
        out.put("ok")
    except StoreError as exc:
        out.put("refused: " + str(exc))


def _race(uri, trials_dir, n_trials):
    ctx = multiprocessing.get_context("fork")
    outcomes = []
    for t in range(n_trials):
        u = uri(t)
        barrier, out = ctx.Barrier(2), ctx.Queue()
        procs = [ctx.Process(target=_create, args=(u, rate, barrier, out)) for rate in (1.0, 10.0)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
        outcomes.append(sorted(out.get(timeout=5)[:7] for _ in procs))
        est = raydp.load_estimate(u)  # exactly one run's sample, never a mixture
        clean = _est(oracles.exponential(est.oracle["params"]["rate"]), m=400)
        assert est.sensitivity == clean.sensitivity
    return outcomes


def test_2_two_local_creators_exactly_one_proceeds(tmp_path):
    outcomes = _race(lambda t: str(tmp_path / f"s{t}"), tmp_path, 6)
    assert all(o == ["ok", "refused"] for o in outcomes), outcomes


def test_2_two_s3_creators_exactly_one_proceeds(s3_server):
    def uri(t):
        return (f"s3://raydp/race{t}?endpoint_override=127.0.0.1:{s3_server}&scheme=http&region=us-east-1")

    outcomes = _race(uri, None, 3)
    assert all(o == ["ok", "refused"] for o in outcomes), outcomes


# ================================================================= 3. load_estimate trusts nothing

def test_3_provenance_must_match_identity(tmp_path):
    uri = tmp_path / "s"
    _est(store=str(uri))
    meta = json.loads((uri / "meta.json").read_text())
    meta["provenance"]["oracle"]["params"]["rate"] = 10.0  # identity still says rate 1
    (uri / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(StoreError, match="provenance"):
        raydp.load_estimate(str(uri))


@pytest.mark.parametrize("bad", [-2e-6, float("nan"), -float("inf")])
def test_3_negative_or_nan_g_is_refused(tmp_path, bad):
    uri = str(tmp_path / "s")
    _est(store=uri)
    st = Store(uri)
    st.load()
    shards = sorted((tmp_path / "s" / "shards").glob("shard-*.parquet"))
    blocks, g = _shard_block0(st, shards)
    shards[0].unlink()
    g = g.copy()
    g[3] = bad
    st.write_shard([BlockResult(index=0, start=0, g=g, failures=0)] + blocks[1:])
    with pytest.raises(StoreError, match="G"):
        raydp.load_estimate(uri)


def _shard_block0(st, shards):
    meta, blocks, pairs, g = st.read_shard(shards[0].name)
    out = []
    for b in sorted(set(blocks.tolist())):
        sel = blocks == b
        info = meta[str(b)]
        out.append(BlockResult(index=b, start=int(pairs[sel][0]), g=g[sel], failures=info["failures"],
                               failure_kinds=info["kinds"]))
    return out, out[0].g


def test_3_failure_counts_are_covered_by_the_shard_hash(tmp_path):
    import pyarrow.parquet as pq

    uri = tmp_path / "s"
    _est(store=str(uri))
    shard = sorted((uri / "shards").glob("shard-*.parquet"))[0]
    table = pq.read_table(shard)
    meta = json.loads(table.schema.metadata[b"raydp"])
    first = next(iter(meta["blocks"]))
    meta["blocks"][first]["failures"] = 3  # edit the counts, keep the data and its digest
    meta["blocks"][first]["kinds"] = {"target raised": 3}
    pq.write_table(table.replace_schema_metadata({"raydp": json.dumps(meta)}), shard)
    with pytest.raises(StoreError):
        raydp.load_estimate(str(uri))


def test_3_duplicate_shards_must_agree(tmp_path):
    uri = str(tmp_path / "s")
    _est(store=uri)
    st = Store(uri)
    st.load()
    shards = sorted((tmp_path / "s" / "shards").glob("shard-*.parquet"))
    blocks, g = _shard_block0(st, shards)
    g = g * 0.5  # a second "valid" shard for block 0 with smaller G
    st.write_shard([BlockResult(index=0, start=0, g=g, failures=0)])
    with pytest.raises(StoreError, match="disagree"):
        raydp.load_estimate(uri)
    with pytest.raises(StoreError, match="disagree"):
        _est(store=uri, resume=True)


# ================================================================= 4. no free probes of the private data

class RaisesAboveMark:
    """A target whose failure depends on the private data (it raises when max(data) > threshold)."""

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


def test_4_target_on_private_data_is_charged_first_and_refusal_is_identical(tmp_path):
    est = _est(n=50, m=400, block_size=None)
    ledger = Ledger.create(tmp_path / "l.json", epsilon_total=1.0)
    low = np.full(50, 0.5)
    high = np.full(50, 5.0)
    # a failing release is charged and counted
    target = RaisesAboveMark(1.0)
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
        t = RaisesAboveMark(1.0)
        with pytest.raises(BudgetError) as refused:
            raydp.sample_then_respond(data, t, raydp.Laplace(0.5), estimate=est, ledger=ledger)
        assert t.calls == 0
        messages.add((type(refused.value), str(refused.value)))
    assert len(messages) == 1


class WrongSizeAboveMark(RaisesAboveMark):
    def __call__(self, db):
        db = np.asarray(db, dtype=float)
        return np.array([db.mean(), 0.0]) if db.max() > self.threshold else float(db.mean())


def test_4_wrong_size_on_private_data_is_charged_and_uniform(tmp_path):
    est = _est(n=50, m=400, block_size=None)
    ledger = Ledger.create(tmp_path / "l.json", epsilon_total=2.0)
    errs = []
    for target, data in ((RaisesAboveMark(1.0), np.full(50, 5.0)), (WrongSizeAboveMark(1.0), np.full(50, 5.0))):
        with pytest.raises(raydp.errors.RaydpError) as exc:
            raydp.sample_then_respond(data, target, raydp.Laplace(0.5), estimate=est, ledger=ledger)
        errs.append((type(exc.value), str(exc.value).split(" (ledger entry")[0]))
    assert errs[0] == errs[1]  # raise or misfit: one answer
    assert [e["status"] for e in ledger.entries()] == ["failed", "failed"] and ledger.spent()[0] == 1.0


# ================================================================= 5. links

def test_5_symlinked_ledger_is_one_budget(tmp_path, capsys):
    real = tmp_path / "real.json"
    Ledger.create(real, epsilon_total=1.0)
    link = tmp_path / "link.json"
    link.symlink_to(real)
    a = Ledger(link)
    a.reserve(0.6, 0.0, 0.1, mechanism="laplace", sensitivity=1.0).commit()
    with pytest.raises(BudgetError, match="exceeded"):
        Ledger(real).reserve(0.6, 0.0, 0.1, mechanism="laplace", sensitivity=1.0)
    assert link.is_symlink() and Ledger(real).spent() == (0.6, 0.0)


def test_5_hard_linked_ledger_is_refused(tmp_path):
    real = tmp_path / "real.json"
    Ledger.create(real, epsilon_total=1.0)
    os.link(real, tmp_path / "hard.json")
    for p in (real, tmp_path / "hard.json"):
        with pytest.raises(BudgetError, match="hard link"):
            Ledger(p).reserve(0.6, 0.0, 0.1, mechanism="laplace", sensitivity=1.0)


# ================================================================= 6. never recreated, locks, modes

def _release_argv(store, data, ledger, *extra):
    return ["release", "--store", store, "--data", data, "--target", "raydp.targets:mean", "--epsilon", "0.6",
            "--ledger", ledger, *extra]


@pytest.fixture
def small_store(tmp_path):
    store = tmp_path / "est"
    raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), 50, gamma=0.1, seed=1, store=str(store),
                               progress=False)
    data = tmp_path / "data.npy"
    np.save(data, np.random.default_rng(0).exponential(1.0, 50))
    return store, data


def test_6_missing_ledger_is_never_created_by_a_release(tmp_path, small_store, capsys):
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


_HOLD_LOCK = r"""
import sys, time
from raydp.ledger import Ledger
led = Ledger(sys.argv[1])
with led._locked():
    doc = led._read()
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
    doc["entries"].append({"id": 99, "time": "t", "status": "released", "epsilon": 0.6, "delta": 0.0,
                           "gamma": 0.1, "mechanism": "laplace", "sensitivity": 1.0, "estimate": None,
                           "sample": None, "label": "held"})
    led._write(doc)
"""


def test_6_deleting_the_lock_file_cannot_let_two_spends_in(tmp_path):
    path = tmp_path / "l.json"
    Ledger.create(path, epsilon_total=1.0)
    holder = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK, str(path), "2.0"], stdout=subprocess.PIPE,
                              text=True)
    assert holder.stdout.readline().strip() == "locked"
    for p in tmp_path.glob("*.lock"):
        p.unlink()  # a careless clean-up during the spend
    with pytest.raises(BudgetError, match="exceeded"):  # must wait for the holder, then see its 0.6
        Ledger(path).reserve(0.6, 0.0, 0.1, mechanism="laplace", sensitivity=1.0)
    assert holder.wait(30) == 0
    assert Ledger(path).spent() == (0.6, 0.0)


def test_6_read_only_ledger_is_not_written(tmp_path):
    path = tmp_path / "l.json"
    Ledger.create(path, epsilon_total=1.0)
    os.chmod(path, 0o444)
    before = path.read_bytes()
    with pytest.raises(BudgetError, match="read-only"):
        Ledger(path).reserve(0.1, 0.0, 0.1, mechanism="laplace", sensitivity=1.0)
    assert path.read_bytes() == before


def test_6_owner_and_mode_survive_a_spend(tmp_path):
    path = tmp_path / "l.json"
    Ledger.create(path, epsilon_total=1.0)
    os.chmod(path, 0o640)
    if os.geteuid() == 0:
        os.chown(path, 4321, 4322)
    before = os.stat(path)
    Ledger(path).reserve(0.1, 0.0, 0.1, mechanism="laplace", sensitivity=1.0).commit()
    after = os.stat(path)
    assert (after.st_mode, after.st_uid, after.st_gid) == (before.st_mode, before.st_uid, before.st_gid)


# ================================================================= 7. nothing private in output

class SystemExitWithData:
    def __call__(self, db):
        raise SystemExit(f"data: {np.asarray(db, dtype=float).max()}")

    def identity(self):
        return {"name": "mean", "params": {}}


class ChattyMean:
    def __call__(self, db):
        db = np.asarray(db, dtype=float)
        warnings.warn(f"max is {db.max()}")
        print(f"max is {db.max()}")
        print(f"max is {db.max()}", file=sys.stderr)
        return float(db.mean())

    def identity(self):
        return {"name": "mean", "params": {}}


def _private_data(tmp_path):
    data = np.random.default_rng(0).exponential(1.0, 50)
    data[7] = MARK
    path = tmp_path / "private.npy"
    np.save(path, data)
    return path


def test_7_malformed_private_csv_row_is_not_echoed(tmp_path, small_store, capsys):
    store, _ = small_store
    rows = ["x"] + [f"{v}" for v in np.random.default_rng(0).exponential(1.0, 49)] + [f"{MARK},{MARK}"]
    csv = tmp_path / "private.csv"
    csv.write_text("\n".join(rows) + "\n")
    code, out, err = _cli(["release", "--store", store, "--data", csv, "--target", "raydp.targets:mean",
                           "--epsilon", "0.5"], capsys)
    _one_line_exit_2(code, out, err)
    assert MARK_TEXT not in out + err


@pytest.mark.parametrize("target", ["SystemExitWithData", "ChattyMean"])
def test_7_target_exits_warnings_and_prints_do_not_leak(tmp_path, small_store, capfd, target):
    store, _ = small_store
    data = _private_data(tmp_path)
    code = main(["release", "--store", str(store), "--data", str(data), "--target", f"test_hostile:{target}",
                 "--target-args", "{}",
                 "--epsilon", "0.5"])
    out, err = capfd.readouterr()
    assert MARK_TEXT not in out + err
    assert code == (2 if target == "SystemExitWithData" else 0), err


def test_7_s3_secret_in_uri_is_never_echoed(s3_server, capsys):
    secret = "TOPSECRETKEY123"
    base = f"endpoint_override=127.0.0.1:{s3_server}&scheme=http&region=us-east-1"
    uri = f"s3://testing:{secret}@raydp/creds?{base}"
    code, out, err = _cli([*EST_ARGS, "--store", uri], capsys)
    assert code == 0, err
    assert secret not in out + err
    code, out, err = _cli([*EST_ARGS, "--store", uri], capsys)  # already holds a run: an error naming the store
    _one_line_exit_2(code, out, err)
    assert secret not in out + err and "raydp/creds" in err
    code, out, err = _cli([*EST_ARGS, "--store", f"s3://raydp/x?{base}&secret_key={secret}&access_key=testing"],
                          capsys)
    assert secret not in out + err


# ================================================================= 8. filesystem errors: one line, exit 2

@pytest.fixture
def tiny_fs(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96k", "tmpfs", str(mnt)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_8_disk_full_is_one_line_and_leaves_nothing_readable(tiny_fs, capsys):
    store = tiny_fs / "s"
    code, out, err = _cli([*EST_ARGS, "--m", "60000", "--store", store], capsys)
    _one_line_exit_2(code, out, err)
    assert "store" in err
    assert not list((store / "shards").glob(".*.tmp")) if (store / "shards").exists() else True
    with pytest.raises(StoreError):
        raydp.load_estimate(str(store))


_SLOW_RUN = r"""
import sys, time
import numpy as np
from raydp.cli import main

class SlowMean:
    def __call__(self, db):
        time.sleep(0.002)
        return float(np.mean(db))
    def identity(self):
        return {"name": "slow_mean", "params": {}}

sys.modules["slowmod"] = sys.modules[__name__]
sys.exit(main(["estimate", "--target", "slowmod:SlowMean", "--target-args", "{}", "--oracle", "raydp.oracles:exponential",
               "--oracle-args", '{"rate": 1.0}', "--n", "10", "--m", "4000", "--seed", "1", "--block-size", "20", "--quiet",
               "--backend", "local",  # the target lives in this script: Ray workers could not import it
               "--store", sys.argv[1]]))
"""


def _run_until_first_shard(store: str, shard_dir: Path | None):
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_RUN, store], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.time() + 60
    while shard_dir is not None and time.time() < deadline and not list(shard_dir.glob("shard-*.parquet")):
        time.sleep(0.05)
    return proc


def test_8_filesystem_remounted_read_only_mid_run(tiny_fs):
    subprocess.run(["mount", "-o", "remount,size=4m", str(tiny_fs)], check=True)
    store = tiny_fs / "s"
    proc = _run_until_first_shard(str(store), store / "shards")
    subprocess.run(["mount", "-o", "remount,ro", str(tiny_fs)], check=True)
    out, err = proc.communicate(timeout=120)
    subprocess.run(["mount", "-o", "remount,rw", str(tiny_fs)], check=True)
    assert proc.returncode == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "Read-only file system" in err and "store" in err, err


def test_8_s3_endpoint_gone_mid_run(tmp_path):
    pytest.importorskip("moto")
    from conftest import start_moto

    port, server = start_moto()
    uri = f"s3://raydp/gone?endpoint_override=127.0.0.1:{port}&scheme=http&region=us-east-1"
    try:
        proc = _run_until_first_shard(uri, None)
        time.sleep(7)  # past the first shard flush (every 5 s)
    finally:
        server.kill()
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "store" in err, err


@pytest.mark.parametrize("where", ["proc", "long", "bucket", "shards-file"])
def test_8_bad_store_locations_are_one_line(tmp_path, capsys, where, request):
    if where == "proc":
        store = "/proc/x/raydp"
    elif where == "long":
        store = str(tmp_path / ("d" * 300) / "s")
    elif where == "bucket":
        port = request.getfixturevalue("s3_server")
        store = f"s3://no-such-bucket/x?endpoint_override=127.0.0.1:{port}&scheme=http&region=us-east-1"
    else:
        (tmp_path / "s").mkdir()
        (tmp_path / "s" / "shards").write_text("in the way")
        store = str(tmp_path / "s")
    code, out, err = _cli([*EST_ARGS, "--store", store], capsys)
    _one_line_exit_2(code, out, err)
    if where == "shards-file":
        assert not (tmp_path / "s" / "meta.json").exists()


def test_8_meta_json_list_and_huge_ledger_total_are_one_line(tmp_path, capsys):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "meta.json").write_text("[1, 2, 3]")
    _one_line_exit_2(*_cli(["show", tmp_path / "s"], capsys))
    ledger = tmp_path / "l.json"
    Ledger.create(ledger, epsilon_total=1.0)
    doc = json.loads(ledger.read_text())
    doc["epsilon_total"] = 10 ** 400
    ledger.write_text(json.dumps(doc))
    code, out, err = _cli(["ledger", "show", ledger], capsys)
    _one_line_exit_2(code, out, err)
    assert "corrupt" in err


def test_8_torn_tmp_shards_are_cleaned(tmp_path):
    uri = tmp_path / "s"
    _est(store=str(uri))
    torn = uri / "shards" / ".shard-0000000000-abc.parquet.tmp"
    torn.write_bytes(b"PAR1 torn")
    old = time.time() - 3600
    os.utime(torn, (old, old))
    _est(store=str(uri), resume=True)
    assert not torn.exists()


# ================================================================= 9. two resumers, torn shards

_RESUME = r"""
import sys, raydp
from raydp import oracles, targets
est = raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), n=30, m=2000, seed=17, block_size=25,
                                 store=sys.argv[1], resume=True, progress=False, flush_rows=25)
print(est.sensitivity.hex())
"""


def test_9_two_resumers_of_a_store_with_torn_shards(tmp_path):
    uri = tmp_path / "s"
    clean = _est(store=str(uri), flush_rows=100)
    for p in sorted((uri / "shards").glob("shard-*.parquet"))[::3]:
        p.write_bytes(p.read_bytes()[:100])  # torn
    procs = [subprocess.Popen([sys.executable, "-c", _RESUME, str(uri)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-2000:]
        assert float.fromhex(out.strip()) == clean.sensitivity
    assert raydp.load_estimate(str(uri)).sensitivity == clean.sensitivity


# ================================================================= 10–13

def test_10_a_plan_that_cannot_fit_is_refused_before_anything_is_written(tmp_path, capsys):
    store = tmp_path / "s"
    code, out, err = _cli(["estimate", "--target", "raydp.targets:mean", "--oracle", "raydp.oracles:exponential",
                           "--oracle-args", '{"rate": 1.0}', "--n", "10", "--gamma", "1e-7", "--store", store, "--quiet"], capsys)
    _one_line_exit_2(code, out, err)
    assert "cannot fit" in err or "too large" in err
    assert not store.exists()


_EXTEND = r"""
import sys, time, raydp
import numpy as np
from raydp import oracles

class Mean:
    calls = 0
    def __call__(self, db):
        Mean.calls += 1
        if Mean.calls > 800:
            time.sleep(5)  # the extension is killed while it sleeps here
        return float(np.mean(db))
    def identity(self):
        return {"name": "mean", "params": {}}

raydp.estimate_sensitivity(Mean(), oracles.exponential(1.0), n=30, m=4000, seed=17, block_size=25,
                           store=sys.argv[1], resume=True, progress=False, flush_rows=25)
"""


def test_11_an_interrupted_extension_keeps_the_smaller_estimate(tmp_path):
    uri = tmp_path / "s"
    first = _est(store=str(uri))
    stored = len(list((uri / "shards").glob("shard-*.parquet")))
    proc = subprocess.Popen([sys.executable, "-c", _EXTEND, str(uri)], stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and len(list((uri / "shards").glob("shard-*.parquet"))) < stored + 10:
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    again = raydp.load_estimate(str(uri))
    assert again.plan.m == 2000 and again.sensitivity == first.sensitivity
    extended = _est(store=str(uri), m=4000, resume=True)
    assert extended.plan.m == 4000 and raydp.load_estimate(str(uri)).plan.m == 4000


def test_12_an_unseeded_run_resumes_with_the_same_command(tmp_path, capsys):
    store = tmp_path / "s"
    argv = ["estimate", "--target", "raydp.targets:mean", "--oracle", "raydp.oracles:exponential",
            "--oracle-args", '{"rate": 1.0}', "--n", "30", "--quiet", "--json", "--store", store]
    code, out, err = _cli([*argv, "--m", "1000"], capsys)
    assert code == 0, err
    seed = json.loads(out)["seed"]
    code, out, err = _cli([*argv, "--m", "3000", "--resume"], capsys)
    assert code == 0, err
    assert json.loads(out)["seed"] == seed


def test_12_a_users_directory_is_never_overwritten(tmp_path, capsys):
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


def test_13_complex_outputs_and_records_are_refused():
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


# ================================================================= 14–16 plan arithmetic

def _bounds(m, k, gamma, rho):
    getcontext().prec = 60
    m, k, g, r = Decimal(m), Decimal(k), Decimal(gamma), Decimal(rho)
    m_min = (Decimal(1) / r).ln() / (2 * (g - r) ** 2)
    k_min = m * (1 - g + r + ((Decimal(1) / r).ln() / (2 * m)).sqrt())
    return m_min, k_min


@pytest.mark.parametrize("kw", [dict(m=874106907987335, gamma=0.3), dict(m=2 ** 50, gamma=0.01),
                                dict(m=2 ** 53, gamma=0.2), dict(gamma=3.5e-8), dict(m=2 ** 52 + 1)])
def test_14_plans_meet_theorem15_exactly(kw):
    p = raydp.plan(**kw)
    m_min, k_min = _bounds(p.m, p.k, p.gamma, p.rho)
    assert Decimal(p.m) >= m_min and Decimal(p.k) >= k_min, (p, m_min, k_min)
    assert p.satisfies_theorem15()


def test_14_satisfies_theorem15_has_no_tolerance():
    p = raydp.plan(m=2 ** 50, gamma=0.01)
    short = raydp.Plan(m=p.m, k=p.k - 1000, gamma=p.gamma, rho=p.rho, mode="k")
    assert not short.satisfies_theorem15()
    _, k_min = _bounds(p.m, p.k, p.gamma, p.rho)
    just = raydp.Plan(m=p.m, k=int(k_min.to_integral_value(rounding="ROUND_CEILING")) - 1, gamma=p.gamma, rho=p.rho,
                      mode="k")
    assert not just.satisfies_theorem15()


def test_15_statements_never_understate_gamma(tmp_path):
    p = raydp.plan(m=1000)
    est = _est(n=50, m=1000, gamma=None, block_size=None)
    r = raydp.sample_then_respond(np.ones(50), targets.mean(), raydp.Laplace(1.0), estimate=est)
    text = r.statement()
    shown = float(text.split(", ")[2].split(")")[0])
    assert shown >= p.gamma and shown - p.gamma < 1e-6
    assert "sampler" in text
    ledger = Ledger.create(tmp_path / "l.json", epsilon_total=2.0)
    raydp.sample_then_respond(np.ones(50), targets.mean(), raydp.Laplace(1.0), estimate=est, ledger=ledger)
    g = ledger.guarantee().statement()
    assert float(g.split(", ")[2].split(")")[0]) >= p.gamma


def test_16_the_k_hint_is_the_smallest_valid_k():
    with pytest.raises(PlanError, match=r"use k >= 11\b"):
        raydp.plan(m=50, k=10)
    assert raydp.plan(m=50, k=11).gamma < 1
    for m in (40, 50, 77, 300, 1000):
        try:
            raydp.plan(m=m, k=1)
        except PlanError as exc:
            hint = int(str(exc).split("use k >= ")[1].split()[0].rstrip(";,."))
            assert raydp.plan(m=m, k=hint).gamma < 1
            with pytest.raises(PlanError):
                raydp.plan(m=m, k=hint - 1)

