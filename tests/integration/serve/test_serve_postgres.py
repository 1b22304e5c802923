"""``raydp serve --db postgresql://...``: several real server processes on one real PostgreSQL (Debian's
``postgresql``, started here as the ``postgres`` user on 127.0.0.1 and a free port; ``tests/support/pg_util.py``).

- the race: two servers started at once on an empty database (one curator, one genesis row), 50 concurrent
  analysts' releases spread over both against a budget that fits exactly 10: 10 released, 40 refused, and the
  audit log intact with reservations summing to exactly ε = 1.0;
- a server killed (SIGKILL) in the middle of a private evaluation: the other keeps serving, and fails the dead
  server's job once its lease ran out, its reservation still counted;
- the append-only triggers (PostgreSQL trigger functions) refuse UPDATE, DELETE and TRUNCATE of the audit rows;
  rows tampered with behind them are found by verify;
- a password in the URL is never printed.
"""

from __future__ import annotations

import json
import shutil
import signal
import threading
import time
import uuid
from fractions import Fraction

import numpy as np
import pg_util
import psycopg
import pytest
import serve_targets as st
import serve_util as su

from raydp.client import Client
from raydp.errors import BudgetError
from raydp.serve import db as dbm

pytestmark = [pytest.mark.subprocess, pytest.mark.slow]

SECRET = "pw-n0t-pr1nted"


@pytest.fixture(scope="module")
def pg():
    try:
        cluster = pg_util.start(fsync=False)
    except RuntimeError as exc:
        pytest.fail(str(exc))
    try:
        yield cluster
    finally:
        cluster.stop()
    assert not cluster.root.exists()


@pytest.fixture(scope="module")
def root():
    path = su.state_root("raydp-pg-serve-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _start_both(url: str, a_dir, b_dir, *flags, b_url: str | None = None):
    """Two servers on one database, started at the same moment (their init() race on an empty database)."""
    out, errors = {}, []

    def go(name, directory, db_url):
        try:
            out[name] = su.start(directory, "--db", db_url, "--backend", "local", *flags)
        except Exception as exc:  # noqa: BLE001 - raised below, after both tries
            errors.append(exc)

    threads = [threading.Thread(target=go, args=("a", a_dir, url)),
               threading.Thread(target=go, args=("b", b_dir, b_url or url))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        for s in out.values():
            s.stop()
        raise errors[0]
    return out["a"], out["b"]


# ---------------------------------------------------------------------------------------------- the race


@pytest.fixture(scope="module")
def race(pg, root):
    url = pg.new_database("race")
    host_port = url.split("@", 1)[1]
    a, b = _start_both(url, root / "a", root / "b", "--respond-after", "0",
                       b_url=f"postgresql://postgres:{SECRET}@{host_port}")  # trust auth: the password is unused
    try:
        yield {"a": a, "b": b, "url": url}
    finally:
        a.stop()
        b.stop()


def test_two_servers_started_at_once_make_one_curator_and_one_genesis(race, pg):
    a, b = race["a"], race["b"]
    assert [a.token is not None, b.token is not None].count(True) == 1, (a.lines, b.lines)
    token = a.token or b.token
    a.token = b.token = token
    assert pg.sql("SELECT count(*) FROM principals WHERE role = 'admin'", "race")[0][0] == 1
    assert pg.sql("SELECT count(*) FROM audit_head", "race")[0][0] == 1
    rows = Client(b.url, token).audit()
    assert [r["action"] for r in rows] == ["create curator"]
    assert pg.sql("SELECT count(*) FROM servers", "race")[0][0] == 2
    for s in (a, b):
        line = next(x for x in s.lines if x.startswith("database   "))
        assert "postgresql+psycopg://postgres" in line and "shared: server" in line, line
    b_line = next(x for x in b.lines if x.startswith("database   "))
    assert "***" in b_line
    for s in (a, b):
        assert SECRET not in "\n".join(s.lines) + s.stderr()


def test_fifty_analysts_on_two_servers_spend_exactly_the_budget(race, root):
    a, b = race["a"], race["b"]
    token = a.token or b.token
    np.save(root / "exp.npy", np.random.default_rng(1).exponential(1.0, 1000))
    admin = Client(a.url, token)
    admin.add_dataset("exp", str(root / "exp.npy"), n=1000, epsilon_total=1.0, oracle="exponential",
                      oracle_args={"rate": 1.0})
    admin.allow_target("raydp.targets:mean")
    admin.precompute("exp", "raydp.targets:mean", gamma=0.05, seed=0)
    analysts = []
    for i in range(5):
        analysts.append(admin.add_analyst(f"ann{i}"))
        Client(b.url, token).set_cap(f"ann{i}", "exp", epsilon=1.0)  # written through either server
    results, lock = [], threading.Lock()
    go = threading.Barrier(50)

    def one(i):
        server = (a, b)[i % 2]
        c = Client(server.url, analysts[i % 5], timeout=120)
        go.wait()
        try:
            job = c.release("exp", "raydp.targets:mean", epsilon=0.1, gamma=0.05, request_id=uuid.uuid4().hex,
                            wait=120)
            out = ("released", server, job["job"], analysts[i % 5])
        except BudgetError as exc:
            out = ("refused", server, str(exc), analysts[i % 5])
        with lock:
            results.append(out)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    kinds = [r[0] for r in results]
    assert kinds.count("released") == 10 and kinds.count("refused") == 40, results
    assert all("privacy budget exceeded" in r[2] for r in results if r[0] == "refused")
    doc = admin.verify()
    assert doc["ok"], doc["problems"]
    rows = admin.audit(limit=10000)
    reserves = [r for r in rows if r["action"] == "reserve"]
    assert len(reserves) == 10 and sum(Fraction(r["epsilon"]) for r in reserves) == 1
    assert len([r for r in rows if r["action"] == "refuse"]) == 40
    for server in (a, b):  # both servers show the same budget, spent exactly
        spent = Client(server.url, token).overview()["datasets"][0]["dataset"]
        assert spent["spent"]["epsilon"] == 1.0 and spent["remaining"]["epsilon"] == 0.0
    # a job is polled on either server: the one that ran it and the other show the same answer
    for _, server, job_id, tok in [r for r in results if r[0] == "released"][:4]:
        other = b if server is a else a
        here, there = Client(server.url, tok).job(job_id), Client(other.url, tok).job(job_id)
        assert here["status"] == there["status"] == "released" and here["result"] == there["result"]


def test_a_wrong_database_is_one_line_without_its_password(pg, root):
    p = su.cli("serve", str(root / "c"), "--port", "0", "--db",
               f"postgresql://postgres:{SECRET}@127.0.0.1:{pg.port}/no_such_database")
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert p.stderr.startswith("raydp: error: --db postgresql+psycopg://postgres:***@127.0.0.1:"), p.stderr
    assert "no_such_database" in p.stderr and SECRET not in p.stdout + p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    p = su.cli("serve", str(root / "c"), "--port", "0", "--db", "mysql://x@127.0.0.1/y")
    assert p.returncode == 2 and "--db takes a PostgreSQL URL" in p.stderr, p.stderr


# ---------------------------------------------------------------------------------------------- a server killed


@pytest.fixture(scope="module")
def killed(pg, root):
    url = pg.new_database("kill")
    np.save(root / "slow.npy", st.private_mean_data(1.0, 100, seed=3))
    np.save(root / "fast.npy", np.random.default_rng(2).exponential(1.0, 1000))
    a = su.start(root / "ka", "--db", url, "--backend", "local", "--respond-after", "60", "--lease", "3")
    b = None
    try:
        b = su.start(root / "kb", "--db", url, "--backend", "local", "--respond-after", "0", "--lease", "3")
        token = a.token
        assert token is not None and b.token is None
        b.token = token
        admin = Client(a.url, token)
        admin.add_dataset("slow", str(root / "slow.npy"), n=100, epsilon_total=5, oracle="normal",
                          oracle_args={"mean": 0.0, "sd": 1.0})
        admin.add_dataset("fast", str(root / "fast.npy"), n=1000, epsilon_total=5, oracle="exponential",
                          oracle_args={"rate": 1.0})
        ann = admin.add_analyst("ann")
        admin.set_cap("ann", "slow", epsilon=5)
        admin.set_cap("ann", "fast", epsilon=5)
        admin.allow_target("serve_targets:sleepy_mean", {"scale": 30.0})
        admin.allow_target("raydp.targets:mean")
        admin.precompute("slow", "serve_targets:sleepy_mean", args={"scale": 30.0}, gamma=0.2, seed=0)
        Client(b.url, token).precompute("fast", "raydp.targets:mean", gamma=0.05, seed=0)
        status, job, _ = a.call("POST", "/v1/releases", token=ann, body={
            "request_id": uuid.uuid4().hex, "dataset": "slow", "target": {"name": "serve_targets:sleepy_mean"},
            "epsilon": 0.7, "gamma": 0.2, "wait": 0})
        assert status == 202, job
        on_a, on_b = Client(a.url, ann), Client(b.url, ann)
        end = time.monotonic() + 60
        while on_a.job(job["job"])["progress"] != "evaluating on the private data":
            assert time.monotonic() < end, on_a.job(job["job"])
            time.sleep(0.05)
        seen_on_b = on_b.job(job["job"])  # the other server: the status, without the live progress line
        a.stop(signal.SIGKILL)  # the server and everything it started
        killed_at = time.monotonic()
        meanwhile = on_b.release("fast", "raydp.targets:mean", epsilon=0.1, gamma=0.05, request_id=uuid.uuid4().hex)
        served_at = time.monotonic()
        end = time.monotonic() + 60
        while (after := on_b.job(job["job"]))["status"] not in dbm.FINAL:
            assert time.monotonic() < end, after
            time.sleep(0.2)
        failed_at = time.monotonic()
        yield {"a": a, "b": b, "token": token, "ann": ann, "job": job["job"], "seen_on_b": seen_on_b,
               "meanwhile": meanwhile, "after": after, "url": url, "served": served_at - killed_at,
               "failed": failed_at - killed_at}
    finally:
        a.stop(signal.SIGKILL)
        if b is not None:
            b.stop()


def test_a_killed_servers_job_is_failed_by_the_other_and_stays_counted(killed, pg):
    seen = killed["seen_on_b"]
    assert seen["status"] == "running" and seen["progress"] == "reserved", seen  # no live line on the other server
    assert killed["meanwhile"]["status"] == "released"  # the other server served while the first was dead
    after = killed["after"]
    assert after["status"] == "failed" and "reservation stays counted" in after["error"], after
    # by the survivor, once the dead server's lease (3 s, renewed every 1 s) ran out: not at once, not at a restart
    assert 1.9 < killed["failed"] < 20, killed["failed"]
    print(f"\nkilled server's job failed by the survivor {killed['failed']:.1f} s after the kill (lease 3 s); "
          f"a release on the survivor took {killed['served']:.2f} s meanwhile")
    ann = Client(killed["b"].url, killed["ann"])
    budgets = {d["name"]: d for d in ann.datasets()}
    assert budgets["slow"]["dataset"]["spent"]["epsilon"] == 0.7  # nothing under-counted
    assert budgets["fast"]["dataset"]["spent"]["epsilon"] == 0.1
    admin = Client(killed["b"].url, killed["token"])
    assert admin.verify()["ok"]
    settle = [r for r in admin.audit(limit=10000) if r["job"] == killed["job"] and r["action"] == "settle"]
    assert len(settle) == 1 and settle[0]["outcome"] == "failed" and settle[0]["actor"] == "raydp serve"
    assert json.loads(settle[0]["detail"])["why"] == "its server stopped"
    assert pg.sql("SELECT count(*) FROM servers", "kill")[0][0] == 1  # the dead server's row is gone
    assert dbm.Database(killed["url"]).integrity() == "ok"


# ---------------------------------------------------------------------------------------------- the triggers


def _tamper(pg, *statements) -> None:
    """Behind the triggers' back: what an owner of the database can do (ALTER TABLE ... DISABLE TRIGGER)."""
    with psycopg.connect(host="127.0.0.1", port=pg.port, user="postgres", dbname="kill") as c:
        c.execute("ALTER TABLE audit DISABLE TRIGGER USER")
        for sql, args in statements:
            c.execute(sql, args)
        c.execute("ALTER TABLE audit ENABLE TRIGGER USER")


def test_the_triggers_refuse_changes_and_verify_finds_rows_tampered_with_behind_them(killed, pg):
    for sql in ("UPDATE audit SET outcome = 'x' WHERE seq = 1", "DELETE FROM audit WHERE seq = 1", "TRUNCATE audit"):
        with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
            pg.sql(sql, "kill")
    admin = Client(killed["b"].url, killed["token"])
    ann = Client(killed["b"].url, killed["ann"])
    spent = lambda: {d["name"]: d for d in ann.datasets()}["slow"]["dataset"]["spent"]["epsilon"]  # noqa: E731
    seq = next(r["seq"] for r in admin.audit(limit=10000) if r["action"] == "reserve" and r["job"] == killed["job"])
    n = admin.verify()["rows"]

    with psycopg.connect(host="127.0.0.1", port=pg.port, user="postgres", dbname="kill") as c:
        c.execute("ALTER TABLE audit DISABLE TRIGGER audit_no_update")
    assert dbm.Database(killed["url"]).integrity() == "the trigger audit_no_update is disabled"
    with psycopg.connect(host="127.0.0.1", port=pg.port, user="postgres", dbname="kill") as c:
        c.execute("ALTER TABLE audit ENABLE TRIGGER audit_no_update")

    # edited: the budget shown follows the row; verify finds the edit; put back, intact again
    _tamper(pg, ("UPDATE audit SET epsilon = '0.1' WHERE seq = %s", (seq,)))
    assert spent() == 0.1
    doc = admin.verify()
    assert not doc["ok"] and any(f"row {seq} was edited" in p for p in doc["problems"]), doc
    _tamper(pg, ("UPDATE audit SET epsilon = '0.7' WHERE seq = %s", (seq,)))
    assert admin.verify()["ok"] and spent() == 0.7

    # deleted (a middle row): the next row no longer follows; the last row deleted: the head says so
    row = pg.sql("SELECT * FROM audit WHERE seq = %s", "kill", (seq,))[0]
    last = pg.sql("SELECT * FROM audit WHERE seq = %s", "kill", (n,))[0]
    put = "INSERT INTO audit VALUES (" + ",".join(["%s"] * len(row)) + ")"
    _tamper(pg, ("DELETE FROM audit WHERE seq = %s", (seq,)))
    doc = admin.verify()
    assert not doc["ok"] and any(f"row {seq + 1} does not follow" in p for p in doc["problems"]), doc
    assert spent() == 0
    _tamper(pg, (put, row), ("DELETE FROM audit WHERE seq = %s", (n,)))
    doc = admin.verify()
    assert not doc["ok"] and any("the last rows were deleted" in p for p in doc["problems"]), doc
    _tamper(pg, (put, last))
    assert admin.verify()["ok"] and spent() == 0.7
