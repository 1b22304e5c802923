"""Releases per second through ``raydp serve`` against ``sample_then_respond`` in process.

The same target (the built-in mean of n = 1000 Exp(1) records), the same stored Δ̂ (precomputed by the service,
γ = 0.05, and read from the service's store for the in-process runs), the Laplace mechanism at ε = 0.01, with
1, 8 and 32 concurrent clients (threads; over HTTP for the service, one ``raydp.client.Client`` each, a new
connection per request as the client makes them). Every release replays Δ̂'s pairs in the sandbox before the
private evaluation, as by default; the service also records each request, reservation and settlement in its
database (SQLite, ``synchronous=FULL``) and its hash-chained audit log.

With ``--postgres`` the same releases go, in the same run, through ``raydp serve --db postgresql://...``: first
one server on the PostgreSQL database, then two servers on it with the requests spread round-robin over both
(the budget, the request ids and the audit chain shared; every write serialised by the database). ``auto``
starts a throwaway PostgreSQL from Debian's ``postgresql`` package (``tests/support/pg_util.py``: as the
``postgres`` user, on 127.0.0.1, fsync on as in a real deployment, removed at the end); a URL names an empty
database to use instead. Both servers run on this machine: they share its cores with the clients.

The service runs with ``--respond-after 0``: the deadline that hides a target's time (2 s by default) would
make every release take at least that long and measure the deadline, not the service. One process keeps two
sandboxes (``raydp.seal.POOL_SIZE``), so at most two private evaluations run at once, in the service as in
process.

    python jobs/serve_throughput.py                        # 120 releases per point, ~1 min
    python jobs/serve_throughput.py --postgres auto        # and on PostgreSQL, one and two servers, ~3 min
    python jobs/serve_throughput.py --releases 40 --clients 1,8 --out /tmp/st
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _report  # noqa: E402

import raydp  # noqa: E402
from raydp import targets  # noqa: E402
from raydp.client import Client  # noqa: E402

N = 1000
EPSILON = 0.01


def _start(state: str, log: str, *flags: str, first: bool = True) -> tuple[subprocess.Popen, str, str | None]:
    """``raydp serve`` on a free port, respond-after off; (process, url, admin token: printed by the first server
    of a database only)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "RAYDP_"))}
    err = open(log, "wb")
    proc = subprocess.Popen([sys.executable, "-m", "raydp.cli", "serve", state, "--port", "0", "--backend", "local",
                             "--respond-after", "0", *flags], stdout=subprocess.PIPE, stderr=err,
                            stdin=subprocess.DEVNULL, text=True, env=env, start_new_session=True)
    err.close()
    token = url = None
    for line in proc.stdout:
        if line.startswith("admin token "):
            token = line.split()[2]
        if line.startswith("url "):
            url = line.split()[1]
            break
    if url is None or (token is None and first):
        proc.kill()
        raise SystemExit(f"raydp serve did not start: {open(log).read()[-2000:]}")
    return proc, url, token


def _run(clients: int, releases: int, one) -> dict:
    """``releases`` calls of ``one`` spread over ``clients`` threads: rate and latency percentiles."""
    latencies, lock = [], threading.Lock()

    def worker(count: int) -> None:
        for _ in range(count):
            t0 = time.perf_counter()
            one()
            dt = time.perf_counter() - t0
            with lock:
                latencies.append(dt)

    shares = [releases // clients + (1 if i < releases % clients else 0) for i in range(clients)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(worker, [s for s in shares if s]))
    wall = time.perf_counter() - t0
    lat = np.asarray(latencies)
    return {"clients": clients, "releases": len(lat), "seconds": wall, "per_second": len(lat) / wall,
            "p50": float(np.percentile(lat, 50)), "p99": float(np.percentile(lat, 99))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--releases", type=int, default=120, help="releases per point (default 120)")
    ap.add_argument("--clients", default="1,8,32", help="concurrent clients, comma-separated (default 1,8,32)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    ap.add_argument("--postgres", metavar="auto|URL",
                    help="also measure raydp serve --db on PostgreSQL, one server then two: 'auto' starts one from "
                         "Debian's postgresql package, or the URL of an empty database")
    a = ap.parse_args(argv)
    clients = [int(c) for c in a.clients.split(",")]
    report = _report.start("serve_throughput", argv)
    root = tempfile.mkdtemp(prefix="raydp-bench-serve-")
    proc = None
    cluster, pg_procs = None, []
    try:
        data = np.random.default_rng(1).exponential(1.0, N)
        np.save(os.path.join(root, "private.npy"), data)
        state = os.path.join(root, "state")
        proc, url, token = _start(state, os.path.join(root, "serve.log"))
        admin = Client(url, token)
        admin.add_dataset("bench", os.path.join(root, "private.npy"), n=N, epsilon_total=1e6, oracle="exponential",
                          oracle_args={"rate": 1.0})
        analyst = admin.add_analyst("bench")
        admin.set_cap("bench", "bench", epsilon=1e6)
        admin.allow_target("raydp.targets:mean")
        store = admin.precompute("bench", "raydp.targets:mean", gamma=0.05, seed=0)["result"]
        sandbox = raydp.seal.sandbox_status()
        est = raydp.load_estimate(os.path.join(state, "stores", _store_dir(state)), gamma=0.05)
        target, mech = targets.mean(), raydp.Laplace(EPSILON)
        local = threading.local()

        def served():
            c = getattr(local, "client", None) or Client(url, analyst)
            local.client = c
            job = c.release("bench", "raydp.targets:mean", epsilon=EPSILON, gamma=0.05, request_id=uuid.uuid4().hex)
            assert job["status"] == "released" and job["result"]["estimate"]["how"] == "precomputed"

        def in_process():
            r = raydp.sample_then_respond(data, target, mech, estimate=est)
            assert r.replay is not None and r.replay.pairs > 0

        for warm in (served, in_process):  # both sandboxes of each process started, the service's Δ̂ cached
            with ThreadPoolExecutor(2) as pool:
                list(pool.map(lambda _: warm(), range(4)))
        rows, figures = [], []
        for c in clients:
            s = _run(c, a.releases, served)
            p = _run(c, a.releases, in_process)
            figures.append({"clients": c, "service": s, "in_process": p})
            rows.append([c, f"{s['per_second']:.1f}", f"{s['p50'] * 1e3:.0f}", f"{s['p99'] * 1e3:.0f}",
                         f"{p['per_second']:.1f}", f"{p['p50'] * 1e3:.0f}", f"{p['p99'] * 1e3:.0f}",
                         f"{s['per_second'] / p['per_second']:.2f}"])
            print(f"{c:>3} clients: service {s['per_second']:.1f}/s (p50 {s['p50'] * 1e3:.0f} ms, p99 "
                  f"{s['p99'] * 1e3:.0f} ms), in process {p['per_second']:.1f}/s", flush=True)
        audit = admin.verify()
        spent = admin.overview()["datasets"][0]["dataset"]["spent"]["epsilon"]
        served_total = sum(f["service"]["releases"] for f in figures) + 4
        report.update(releases=a.releases, clients=clients, figures=figures, sandbox=list(sandbox),
                      delta_hat=store["sensitivity"], m=store["m"],
                      audit_rows=audit["rows"], audit_ok=audit["ok"], spent_epsilon=spent,
                      served_releases=served_total)
        pg_rows = []
        if a.postgres:
            proc.terminate()  # the SQLite server's sandboxes no longer take cores from the PostgreSQL runs
            proc.wait(timeout=20)
            proc = None
            if a.postgres == "auto":
                sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests",
                                                "support"))
                import pg_util

                cluster = pg_util.start(fsync=True)
                pg_url = cluster.new_database("bench")
            else:
                pg_url = a.postgres
            pg = _postgres(root, pg_url, clients, a.releases, pg_procs)
            pg_rows = [[f["clients"], *_cells(f["one"]), *_cells(f["two"])] for f in pg["figures"]]
            report.update(postgres=pg)
        md = _report.header("raydp serve: releases per second", report)
        md += (f"\nThe built-in mean of n = {N} records, Laplace at ε = {EPSILON}, one stored Δ̂ (γ = 0.05, m = "
               f"{store['m']}, Δ̂ = {store['sensitivity']:.4g}) for both. *service*: `raydp serve` (SQLite, every request "
               "audited), each client a thread making HTTP requests through `raydp.client.Client`; *in process*: "
               "`raydp.sample_then_respond` in threads of one process. Both replay Δ̂'s pairs in the sandbox "
               f"({'bubblewrap' if sandbox[0] else 'unavailable: ' + sandbox[1]}) before every release; the "
               "service runs with `--respond-after 0` (its default deadline of 2 s would set every latency). "
               f"{a.releases} releases per point; latencies in milliseconds.\n\n")
        md += _report.table(["clients", "service /s", "p50", "p99", "in process /s", "p50", "p99",
                             "service / in process"], rows)
        md += (f"\n\nAfterwards the audit log held {audit['rows']} rows and verified "
               f"{'intact' if audit['ok'] else 'BROKEN'}; the data set's spent ε was {spent:g} for "
               f"{served_total} releases of ε = {EPSILON} (exact sums).\n")
        if pg_rows:
            pg = report["postgres"]
            where = "started for the run on this machine (fsync on)" if a.postgres == "auto" else "given by URL"
            md += ("\n## On PostgreSQL: one server, two servers\n\n`raydp serve --db postgresql://...` on a "
                   f"PostgreSQL {pg['version']} {where}; the same data set, target, Δ̂ and clients as above. "
                   "*one server*: every client on one server; *two servers*: a second server started on the same "
                   "database and the requests sent to each in turn, as a round-robin load balancer does (one "
                   "budget, one audit chain). Both servers and the clients share this machine's cores.\n\n")
            md += _report.table(["clients", "one server /s", "p50", "p99", "two servers /s", "p50", "p99"], pg_rows)
            md += (f"\n\nAfterwards the shared audit log held {pg['audit_rows']} rows and verified "
                   f"{'intact' if pg['audit_ok'] else 'BROKEN'}; the data set's spent ε was {pg['spent_epsilon']:g} "
                   f"for {pg['served_releases']} releases of ε = {EPSILON} (exact sums).\n")
        _report.publish(a.out, "serve_throughput", report, md)
    finally:
        for p in [proc, *pg_procs]:
            if p is not None:
                p.terminate()
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    return 0


def _cells(s: dict) -> list[str]:
    return [f"{s['per_second']:.1f}", f"{s['p50'] * 1e3:.0f}", f"{s['p99'] * 1e3:.0f}"]


def _postgres(root: str, url: str, clients: list[int], releases: int, procs: list) -> dict:
    """The service's points on PostgreSQL at ``url`` (an empty database): one server, then two round-robin."""
    first, url1, token = _start(os.path.join(root, "pg1"), os.path.join(root, "pg1.log"), "--db", url)
    procs.append(first)
    admin = Client(url1, token)
    admin.add_dataset("bench", os.path.join(root, "private.npy"), n=N, epsilon_total=1e6, oracle="exponential",
                      oracle_args={"rate": 1.0})
    analyst = admin.add_analyst("bench")
    admin.set_cap("bench", "bench", epsilon=1e6)
    admin.allow_target("raydp.targets:mean")
    admin.precompute("bench", "raydp.targets:mean", gamma=0.05, seed=0)
    second, url2, _ = _start(os.path.join(root, "pg2"), os.path.join(root, "pg2.log"), "--db", url, first=False)
    procs.append(second)
    turn = iter(range(10**9))
    lock = threading.Lock()

    def served(urls):
        clients_of = {u: Client(u, analyst) for u in urls}  # Client is thread-safe: a connection per request

        def one():
            with lock:  # each request to the next server in turn, as a round-robin load balancer sends them
                c = clients_of[urls[next(turn) % len(urls)]]
            job = c.release("bench", "raydp.targets:mean", epsilon=EPSILON, gamma=0.05, request_id=uuid.uuid4().hex)
            assert job["status"] == "released" and job["result"]["estimate"]["how"] == "precomputed"
        return one

    for u in (url1, url2):  # each server's sandboxes started and its Δ̂ cached
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda _, u=u: served([u])(), range(4)))
    figures = []
    for c in clients:
        one = _run(c, releases, served([url1]))
        two = _run(c, releases, served([url1, url2]))
        figures.append({"clients": c, "one": one, "two": two})
        print(f"{c:>3} clients: PostgreSQL, one server {one['per_second']:.1f}/s (p50 {one['p50'] * 1e3:.0f} ms), "
              f"two servers {two['per_second']:.1f}/s (p50 {two['p50'] * 1e3:.0f} ms)", flush=True)
    audit = admin.verify()
    spent = admin.overview()["datasets"][0]["dataset"]["spent"]["epsilon"]
    from raydp.serve.db import Database

    with Database(url).engine.connect() as conn:
        version = conn.exec_driver_sql("SHOW server_version").scalar().split()[0]
    return {"figures": figures, "version": version, "audit_rows": audit["rows"], "audit_ok": audit["ok"],
            "spent_epsilon": spent, "served_releases": sum(f["one"]["releases"] + f["two"]["releases"]
                                                           for f in figures) + 8}


def _store_dir(state: str) -> str:
    """The one store the service made (it precomputed one Δ̂)."""
    stores = os.listdir(os.path.join(state, "stores"))
    if len(stores) != 1:
        raise SystemExit(f"expected one store, found {stores}")
    return stores[0]


if __name__ == "__main__":
    sys.exit(main())
