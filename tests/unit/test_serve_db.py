"""The service's database module alone (``raydp.serve.db``), in process on an SQLite file: exact budgets from
the audit rows, the composed γ, request ids, the hash chain and its verification, recovery after a stop, tokens.
Threads race for a budget here too (no process: the unit tier)."""

from __future__ import annotations

import sqlite3
import threading
import time
from fractions import Fraction

import pytest

sa = pytest.importorskip("sqlalchemy")

from raydp.errors import BudgetError  # noqa: E402
from raydp.ledger import Guarantee, _compose  # noqa: E402
from raydp.serve import db as dbm  # noqa: E402


@pytest.fixture
def db(tmp_path):
    d = dbm.Database(f"sqlite:///{tmp_path / 'raydp.db'}")
    d.token = d.init()
    d.path = tmp_path / "raydp.db"
    return d


def _setup(db, total=1.0, cap=100.0, delta_total=0.0, cap_delta=0.0):
    did = db.add_dataset("curator", "ds", "/x.npy", {"name": "exponential", "args": {"rate": 1}}, 100, total, delta_total)
    token = db.add_analyst("curator", "ann")
    db.set_cap("curator", "ann", "ds", cap, cap_delta)
    return did, db.principal(token), token


def _reserve(db, who, did, eps, *, delta=0.0, gamma=0.05, sample="s1", request_id=None):
    row, _ = db.create_job(who, "release", request_id, {"eps": eps, "id": request_id or dbm.new_id()}, did, {})
    return row["id"], db.reserve(row["id"], who, did, epsilon=eps, delta=delta, gamma=gamma, sensitivity=0.01,
                                 sample=sample, estimate="e-" + sample, target="t", detail={})


def test_tokens_are_stored_hashed_and_the_first_start_alone_makes_one(db):
    assert db.token and db.init() is None  # a second start makes none
    assert db.principal(db.token) == dbm.Principal(id=1, name="curator", role="admin")
    _, who, token = _setup(db)
    assert who.role == "analyst" and db.principal(token + "x") is None and db.principal("") is None
    db.revoke("curator", "ann")
    assert db.principal(token) is None
    raw = b"".join(p.read_bytes() for p in db.path.parent.glob("raydp.db*"))
    assert token.encode() not in raw and db.token.encode() not in raw
    assert dbm.token_hash(token).encode() in raw
    assert len(dbm.new_token()) == 43 and len({dbm.new_token() for _ in range(100)}) == 100


def test_exact_sums_fit_a_total_exactly_and_refuse_anything_more(db):
    did, who, _ = _setup(db, total=0.3)
    _reserve(db, who, did, 0.1)
    _reserve(db, who, did, 0.2)  # 0.1 + 0.2 == 0.3 exactly (in floats 0.30000000000000004 > 0.3)
    with pytest.raises(BudgetError, match="data set's total"):
        _reserve(db, who, did, 1e-15)
    b = db.budget(did, who.id)
    assert b["dataset"]["spent"]["epsilon"] == 0.3 and b["dataset"]["remaining"]["epsilon"] == 0.0
    rows = db.audit_rows()
    assert [r["action"] for r in rows].count("reserve") == 2 and [r["action"] for r in rows].count("refuse") == 1
    refused = [r for r in rows if r["action"] == "refuse"][0]
    assert db.job(refused["job"])["status"] == "refused"


def test_the_analyst_cap_binds_and_delta_is_counted_too(db):
    did, who, _ = _setup(db, total=10, cap=0.25, delta_total=1e-5, cap_delta=1e-6)
    _reserve(db, who, did, 0.125, delta=5e-7)
    _reserve(db, who, did, 0.125, delta=5e-7)
    with pytest.raises(BudgetError, match="your cap"):
        _reserve(db, who, did, 0.001)
    db.set_cap("curator", "ann", "ds", 1.0, 1e-6)
    with pytest.raises(BudgetError, match="your cap"):  # ε fits now, δ does not
        _reserve(db, who, did, 0.001, delta=1e-9)


def test_cancelled_reservations_are_not_counted_failed_ones_are(db):
    did, who, _ = _setup(db, total=1.0)
    a, _ = _reserve(db, who, did, 0.5)
    b, _ = _reserve(db, who, did, 0.5)
    db.settle(a, "ann", "failed")
    db.settle(b, "ann", "cancelled")
    db.settle(b, "ann", "released")  # settled once: left alone
    assert db.job(b)["status"] == "cancelled"
    assert db.budget(did)["dataset"]["spent"]["epsilon"] == 0.5
    _reserve(db, who, did, 0.5)
    with pytest.raises(BudgetError):
        _reserve(db, who, did, 0.01)


def test_the_composed_gamma_is_the_ledgers_rule(db):
    did, who, _ = _setup(db, total=10)
    _reserve(db, who, did, 0.1, gamma=0.05, sample="A")
    _reserve(db, who, did, 0.1, gamma=0.1, sample="A")  # one G sample: max γ
    _, res = _reserve(db, who, did, 0.1, gamma=0.02, sample="B")  # another: added
    g = db.budget(did)["dataset"]["guarantee"]
    assert g["gamma"] == pytest.approx(0.12) and g["samples"] == 2 and g["releases"] == 3
    entries = [{"id": i, "status": "released", "epsilon": 0.1, "delta": 0.0, "gamma": gm, "sample": s,
                "estimate": "e-" + s} for i, (gm, s) in enumerate(((0.05, "A"), (0.1, "A"), (0.02, "B")))]
    assert Guarantee(**g) == _compose(entries) == res.guarantee


def test_a_request_id_gives_the_first_job_back_and_another_body_is_a_conflict(db):
    did, who, _ = _setup(db)
    first, created = db.create_job(who, "release", "r1", {"a": 1}, did, {})
    again, created2 = db.create_job(who, "release", "r1", {"a": 1}, did, {})
    assert created and not created2 and again["id"] == first["id"]
    with pytest.raises(dbm.Conflict):
        db.create_job(who, "release", "r1", {"a": 2}, did, {})
    other = db.principal(db.add_analyst("curator", "bo"))
    theirs, created3 = db.create_job(other, "release", "r1", {"a": 1}, did, {})  # ids are per analyst
    assert created3 and theirs["id"] != first["id"]
    outcomes = [r["outcome"] for r in db.audit_rows() if r["action"] == "retry"]
    assert outcomes == ["answered with the first job; nothing charged", "conflict: another body"]
    assert db.verify()["ok"]


def test_threads_racing_for_a_budget_get_exactly_what_fits(db):
    did, who, _ = _setup(db, total=1.0)
    results, barrier = [], threading.Barrier(24)

    def one():
        barrier.wait()
        try:
            _reserve(db, who, did, 0.1)
            results.append("ok")
        except BudgetError:
            results.append("refused")

    threads = [threading.Thread(target=one) for _ in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count("ok") == 10 and results.count("refused") == 14
    eps = [Fraction(r["epsilon"]) for r in db.audit_rows() if r["action"] == "reserve"]
    assert len(eps) == 10 and sum(eps) == 1
    assert db.verify()["ok"]


def test_recovery_fails_open_jobs_and_keeps_reservations_counted(db):
    did, who, _ = _setup(db, total=1.0)
    reserved, _ = _reserve(db, who, did, 0.4)
    queued, _ = db.create_job(who, "release", "q", {"x": 1}, did, {})
    assert sorted(db.recover()) == sorted([reserved, queued["id"]])
    assert db.job(reserved)["status"] == "failed" and db.job(queued["id"])["status"] == "failed"
    assert db.budget(did)["dataset"]["spent"]["epsilon"] == 0.4
    assert db.recover() == [] and db.verify()["ok"]


def _tamper(path, *statements):
    with sqlite3.connect(path) as c:
        c.execute("DROP TRIGGER audit_no_update")
        c.execute("DROP TRIGGER audit_no_delete")
        for sql, args in statements:
            c.execute(sql, args)


def test_verify_finds_an_edited_an_inserted_and_a_deleted_row_and_a_deleted_last_row(tmp_path):
    def fresh(name):
        d = dbm.Database(f"sqlite:///{tmp_path / name}")
        d.init()
        did, who, _ = _setup(d)
        for _ in range(3):
            _reserve(d, who, did, 0.1)
        return d, tmp_path / name

    d, path = fresh("edit.db")
    ok = d.verify()
    assert ok["ok"] and ok["rows"] == len(d.audit_rows())
    with sqlite3.connect(path) as c, pytest.raises(sqlite3.DatabaseError, match="append-only"):
        c.execute("DELETE FROM audit WHERE seq = 2")
    _tamper(path, ("UPDATE audit SET epsilon = '0.01' WHERE seq = 6", ()))
    assert d.verify()["problems"] == ["row 6 was edited: its content does not match its hash"]

    d, path = fresh("delete.db")
    _tamper(path, ("DELETE FROM audit WHERE seq = 4", ()))
    problems = d.verify()["problems"]
    assert any("row 5 is number 4" in p for p in problems) and any("row 5 does not follow" in p for p in problems)

    d, path = fresh("insert.db")
    rows = d.audit_rows()
    n = len(rows)
    fake = {**rows[-1], "seq": n + 1, "prev": rows[-1]["hash"], "action": "reserve", "epsilon": "5"}
    fake["hash"] = dbm.row_hash(fake["prev"], fake)  # a well-formed row, appended without the head
    _tamper(path, ("INSERT INTO audit (" + ",".join(fake) + ") VALUES (" + ",".join("?" * len(fake)) + ")",
                   tuple(fake.values())))
    assert d.verify()["problems"] == [f"the head records {n} rows and the log has {n + 1}: rows were appended without "
                                      "the head"]

    d, path = fresh("last.db")
    head = d.verify()
    _tamper(path, (f"DELETE FROM audit WHERE seq = {head['rows']}", ()))
    assert d.verify()["problems"] == [f"the head records {head['rows']} rows and the log has {head['rows'] - 1}: "
                                      "the last rows were deleted"]
    expect = (head["rows"], head["head"])
    assert f"row {head['rows']}, whose hash was recorded, is not in the log" in d.verify(expect)["problems"]


def test_a_server_whose_lease_ran_out_has_its_jobs_failed_by_another_and_only_then(tmp_path):
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    first, second = dbm.Database(url), dbm.Database(url)
    first.init()
    second.init()
    first.register(1.0)
    second.register(60.0)
    did, who, _ = _setup(first, total=1.0)
    mine, _ = _reserve(first, who, did, 0.3)  # first's jobs: one reserved, one queued
    queued, _ = first.create_job(who, "release", "q", {"x": 1}, did, {})
    theirs, _ = _reserve(second, who, did, 0.2)
    assert first.job(mine)["server"] == first.instance and second.job(theirs)["server"] == second.instance
    assert second.reap() == [] and first.reap() == []  # both leases hold
    time.sleep(1.3)
    assert first.reap() == []  # its own jobs are never its to fail
    assert sorted(second.reap()) == sorted([mine, queued["id"]])  # first's lease ran out
    assert second.reap() == []  # failed once
    assert first.job(mine)["status"] == "failed" and first.job(theirs)["status"] == "running"
    assert "reservation stays counted" in first.job(mine)["error"]
    assert "nothing was charged" in first.job(queued["id"])["error"]
    assert first.budget(did)["dataset"]["spent"]["epsilon"] == 0.5  # the failed reservation still counts
    first.heartbeat()  # back after a stall: a row again, its failed jobs stay failed
    assert second.reap() == [] and first.job(mine)["status"] == "failed"
    # the stalled server goes on with its queued job: it cannot reserve for a job that ended, so it never
    # reaches the private data, and the job stays failed
    with pytest.raises(dbm.Conflict, match="already ended"):
        first.reserve(queued["id"], who, did, epsilon=0.1, delta=0.0, gamma=0.05, sensitivity=1.0, sample=None,
                      estimate=None, target="t", detail={})
    assert first.job(queued["id"])["status"] == "failed"
    assert first.budget(did)["dataset"]["spent"]["epsilon"] == 0.5
    assert first.verify()["ok"]


def test_a_schema_1_file_is_moved_on_at_start(tmp_path):
    path = tmp_path / "old.db"
    d = dbm.Database(f"sqlite:///{path}")
    d.init()
    with sqlite3.connect(path) as c:
        c.execute("ALTER TABLE jobs DROP COLUMN server")
        c.execute("UPDATE meta SET value = '1' WHERE key = 'schema'")
    again = dbm.Database(f"sqlite:///{path}")
    assert again.init() is None
    with sqlite3.connect(path) as c:
        assert "server" in [r[1] for r in c.execute("PRAGMA table_info(jobs)")]
        assert c.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()[0] == str(dbm.SCHEMA)
