"""``raydp serve`` killed (SIGKILL) in the middle of a release and started again on its directory, then its
audit log tampered with the way someone who can write the database file would: a real server process, its
real SQLite file.

The release's target sleeps 30 s on the private data (``serve_targets.sleepy_mean``, allow-listed here), so
the kill lands while the private evaluation runs: the job's progress says so before the kill.
"""

from __future__ import annotations

import shutil
import signal
import sqlite3
import time
import uuid

import numpy as np
import pytest
import serve_targets as st
import serve_util as su

from raydp.client import Client

pytestmark = [pytest.mark.subprocess, pytest.mark.slow]

TRIGGERS = ["CREATE TRIGGER IF NOT EXISTS audit_no_update BEFORE UPDATE ON audit "
            "BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END",
            "CREATE TRIGGER IF NOT EXISTS audit_no_delete BEFORE DELETE ON audit "
            "BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END"]


@pytest.fixture(scope="module")
def crashed():
    root = su.state_root("raydp-crash-")
    np.save(root / "slow.npy", st.private_mean_data(1.0, 100, seed=3))
    state = root / "state"
    first = su.start(state, "--backend", "local", "--respond-after", "60")
    second = None
    try:
        admin = Client(first.url, first.token)
        admin.add_dataset("slow", str(root / "slow.npy"), n=100, epsilon_total=5, oracle="normal",
                          oracle_args={"mean": 0.0, "sd": 1.0})
        token = admin.add_analyst("ann")
        admin.set_cap("ann", "slow", epsilon=5)
        admin.allow_target("serve_targets:sleepy_mean", {"scale": 30.0})
        admin.precompute("slow", "serve_targets:sleepy_mean", args={"scale": 30.0}, gamma=0.2, seed=0)
        status, job, _ = first.call("POST", "/v1/releases", token=token, body={
            "request_id": uuid.uuid4().hex, "dataset": "slow", "target": {"name": "serve_targets:sleepy_mean"},
            "epsilon": 0.7, "gamma": 0.2, "wait": 0})
        assert status == 202, job
        ann = Client(first.url, token)
        end = time.monotonic() + 60
        while ann.job(job["job"])["progress"] != "evaluating on the private data":
            assert time.monotonic() < end, ann.job(job["job"])
            time.sleep(0.05)
        time.sleep(0.3)
        below = su.descendants(first.proc.pid)  # the sandboxes (bubblewrap, the template, the evaluation)
        assert below
        first.proc.send_signal(signal.SIGKILL)  # the server alone: what it started must die with it
        first.proc.wait(timeout=15)
        end = time.monotonic() + 10
        while su.alive(below) and time.monotonic() < end:
            time.sleep(0.1)
        left = su.alive(below)
        second = su.start(state, "--backend", "local", "--respond-after", "60")
        assert second.token is None  # printed once, at the first start
        second.token = first.token
        yield {"first": first, "second": second, "job": job["job"], "token": token, "root": root, "left": left}
    finally:
        first.stop(signal.SIGKILL)
        if second is not None:
            second.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_a_release_killed_mid_evaluation_stays_counted_and_fails(crashed):
    assert not crashed["left"], "processes of the killed server outlived it"
    second = crashed["second"]
    assert any(line.startswith("recovered  1 job") for line in second.lines), second.lines
    ann = Client(second.url, crashed["token"])
    job = ann.job(crashed["job"])
    assert job["status"] == "failed" and "reservation stays counted" in job["error"]
    mine = next(d for d in ann.datasets() if d["name"] == "slow")
    assert mine["dataset"]["spent"]["epsilon"] == 0.7 and mine["analyst"]["remaining"]["epsilon"] == 4.3
    with sqlite3.connect(second.dir / "raydp.db") as c:
        assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert Client(second.url, second.token).verify()["ok"]


def _verify(server, *flags, cli: bool = False) -> tuple[int, str]:
    """``raydp admin audit verify`` (``cli``: the command itself; else the same call through the client)."""
    if cli:
        p = su.cli("admin", "audit", "verify", *flags, token=server.token, url=server.url)
        return p.returncode, p.stdout + p.stderr
    doc = Client(server.url, server.token).verify(flags[1] if flags else None)
    return (0 if doc["ok"] else 1), f"head {doc['rows']}:{doc['head']} " + "\n".join(doc["problems"])


def _tamper(path, *statements) -> None:
    with sqlite3.connect(path, timeout=30) as c:
        c.execute("DROP TRIGGER IF EXISTS audit_no_update")
        c.execute("DROP TRIGGER IF EXISTS audit_no_delete")
        for sql, args in statements:
            c.execute(sql, args)
        for t in TRIGGERS:
            c.execute(t)


def test_audit_verify_finds_an_edited_an_inserted_and_a_deleted_row(crashed):
    server = crashed["second"]
    db = server.dir / "raydp.db"
    code, out = _verify(server, cli=True)
    assert code == 0 and "audit log intact" in out, out
    head = out.split("head ")[1].split()[0]
    with sqlite3.connect(db) as c:
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            c.execute("UPDATE audit SET outcome = 'x' WHERE seq = 1")
        cols = [r[1] for r in c.execute("PRAGMA table_info(audit)")]
        rows = {r[0]: r for r in c.execute("SELECT * FROM audit ORDER BY seq")}
        reserve = next(r for r in rows.values() if r[cols.index("action")] == "reserve")
    n, seq = len(rows), reserve[0]
    put_back = ("INSERT INTO audit VALUES (" + ",".join("?" * len(cols)) + ")", rows[seq])
    ann = Client(server.url, crashed["token"])
    spent = lambda: next(d for d in ann.datasets() if d["name"] == "slow")["dataset"]["spent"]["epsilon"]  # noqa: E731

    # edited: the reservation's ε lowered — the budget shown follows the audit row, and verify finds the edit
    _tamper(db, ("UPDATE audit SET epsilon = '0.1' WHERE seq = ?", (seq,)))
    assert spent() == 0.1
    code, out = _verify(server, cli=True)
    assert code == 1 and f"row {seq} was edited" in out, out
    _tamper(db, ("UPDATE audit SET epsilon = ? WHERE seq = ?", (reserve[cols.index("epsilon")], seq)))
    assert _verify(server)[0] == 0 and spent() == 0.7

    # deleted (a middle row): the next row no longer follows
    _tamper(db, ("DELETE FROM audit WHERE seq = ?", (seq,)))
    code, out = _verify(server, cli=True)
    assert code == 1 and f"row {seq + 1} does not follow" in out and spent() == 0, out
    _tamper(db, put_back)
    assert _verify(server)[0] == 0

    # inserted: rows renumbered to make room for a forged one at seq, or one appended without the head
    forged = list(rows[seq])
    forged[cols.index("epsilon")] = "0.01"
    _tamper(db, ("UPDATE audit SET seq = seq + 1000 WHERE seq >= ?", (seq,)),
            ("UPDATE audit SET seq = seq - 999 WHERE seq >= ?", (seq + 1000,)),
            ("INSERT INTO audit VALUES (" + ",".join("?" * len(cols)) + ")", tuple(forged)))
    code, out = _verify(server, cli=True)
    assert code == 1 and ("was edited" in out or "does not follow" in out) and "head records" in out, out
    _tamper(db, ("DELETE FROM audit WHERE seq >= ?", (seq,)),
            *[("INSERT INTO audit VALUES (" + ",".join("?" * len(cols)) + ")", rows[s]) for s in range(seq, n + 1)])
    assert _verify(server)[0] == 0
    last = list(rows[n])
    last[0] = n + 1
    _tamper(db, ("INSERT INTO audit VALUES (" + ",".join("?" * len(cols)) + ")", tuple(last)))
    code, out = _verify(server)
    assert code == 1 and f"row {n + 1} does not follow" in out and "appended without the head" in out, out
    _tamper(db, ("DELETE FROM audit WHERE seq = ?", (n + 1,)))

    # the last row deleted: the chain alone is consistent; the head (count and hash) is not
    _tamper(db, ("DELETE FROM audit WHERE seq = ?", (n,)))
    code, out = _verify(server, cli=True)
    assert code == 1 and "the last rows were deleted" in out, out
    _tamper(db, ("INSERT INTO audit VALUES (" + ",".join("?" * len(cols)) + ")", rows[n]))
    code, out = _verify(server, "--expect", head)
    assert code == 0, out

    # a rewritten history with a matching head: only a head kept elsewhere shows it
    from raydp.serve.db import GENESIS, row_hash

    prev = GENESIS
    rewritten = []
    for s in range(1, n + 1):
        r = dict(zip(cols, rows[s]))
        if s == seq:
            r["epsilon"] = "0.01"
        r["prev"] = prev
        r["hash"] = prev = row_hash(prev, r)
        rewritten.append(tuple(r[c] for c in cols))
    _tamper(db, ("DELETE FROM audit", ()), *[("INSERT INTO audit VALUES (" + ",".join("?" * len(cols)) + ")", r)
                                             for r in rewritten],
            ("UPDATE audit_head SET hash = ? WHERE id = 1", (prev,)))
    assert _verify(server)[0] == 0  # consistent on its own: what an owner of the file can do
    code, out = _verify(server, "--expect", head)
    assert code == 1 and f"row {n} is not the one recorded earlier" in out, out
