"""Precompute Δ̂ for any target and oracle into a Δ store (offline, amortised; reusable by releases).

Δ̂ depends on the target, the oracle, n and the plan, never on the private data: compute it once
here, keep its G sample in a store, and let later releases load it (``raydp release --estimate
URI``, ``raydp.load_estimate(URI, gamma=...)``).

    python jobs/precompute_delta.py                       # example: mean of Exp(1), n=1000, γ=0.05
    python jobs/precompute_delta.py --target raydp.targets:svm --target-args '{"C": 3}' \\
        --oracle raydp.oracles:svm_two_class --oracle-args '{"dim": 8}' --n 1000 --m 1500 \\
        --store out/svm-d8
    ray job submit --working-dir . -- python jobs/precompute_delta.py --gamma 0.01 --store s3://...

At full size on a local multi-node cluster, crashing the head node halfway and resuming::

    python jobs/precompute_delta.py --full-size-demo            # m = 5 486 187 (γ = 0.001), ≈ 3 min
    python jobs/precompute_delta.py --local-cluster 3 --restart-head-midway --gamma 0.001 --n 1000 \
        --rederive 0.002 0.005 0.01 --store /tmp/delta-0.001 --report out/precompute.json

``--local-cluster W`` starts :class:`raydp.local_cluster.LocalCluster` (head + W worker nodes on
127.0.0.1, free ports, token auth) and runs the sampler in a driver process of its own joined to it.
``--restart-head-midway`` SIGKILLs the head node's processes (GCS, raylet, dashboard — and, Ray
having no GCS fault tolerance without Redis, the cluster with it) once the store holds half the
pairs; the driver fails, the rest of the cluster is stopped, a new cluster comes up on the same
ports and a new driver resumes from the store (``resume=True``: verified shards are kept, only
missing blocks run). ``--rederive G ...`` then re-reads the store with ``load_estimate(store,
gamma=G)``. ``--report`` writes wall times, store size on disk and every driver's peak RSS.

``--target``/``--oracle`` take ``MODULE:ATTR``; with ``--target-args``/``--oracle-args`` (JSON) the
attribute is called with them to build the object (raydp's own factories are always called). A
user module must be importable by the job (and by the Ray workers: ship it with ``--working-dir``).
The plan is any of ``--gamma`` | ``--m`` | ``--m --gamma`` | ``--m --k`` (Table 1). The store
(``--store``, default ``OUT/precompute-<target>``) must be new unless ``--resume`` is given, which
finishes an interrupted run or extends it to a larger m.
"""

from __future__ import annotations

import argparse
import os
import sys

import _common
import _report

from raydp.cli import MECHANISMS

EXAMPLE = dict(target="raydp.targets:mean", oracle="raydp.oracles:exponential", oracle_args='{"rate": 1.0}',
               n=1000, gamma=0.05)


def make_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="precompute_delta.py",
        description="Estimate a target's sensitivity from an oracle and store it (G sample + Δ̂). "
                    "Without flags: the mean of n=1000 Exp(1) records at gamma=0.05.")
    ap.add_argument("--target", help=f"MODULE:ATTR of the target (default: {EXAMPLE['target']})")
    ap.add_argument("--target-args", help="JSON kwargs; calls ATTR(**kwargs) to build the target")
    ap.add_argument("--oracle", help=f"MODULE:ATTR of the oracle (default: {EXAMPLE['oracle']})")
    ap.add_argument("--oracle-args", help="JSON kwargs; calls ATTR(**kwargs) to build the oracle "
                                          f"(default with the default oracle: {EXAMPLE['oracle_args']})")
    ap.add_argument("--n", type=int, default=EXAMPLE["n"], help=f"database size (default: {EXAMPLE['n']})")
    ap.add_argument("--gamma", type=float, help="privacy confidence γ (default 0.05 when no --m is given)")
    ap.add_argument("--m", type=int, help="number of neighbouring pairs")
    ap.add_argument("--k", type=int, help="order statistic (needs --m)")
    ap.add_argument("--mechanism", choices=MECHANISMS, default="laplace",
                    help="fixes the norm G is measured in (default: laplace, ℓ1)")
    ap.add_argument("--mechanism-args", help="JSON kwargs of the mechanism (responses, lattice, ...)")
    ap.add_argument("--plot", metavar="FILE.png", help="also write the empirical CDF of G (needs matplotlib)")
    ap.add_argument("--json", action="store_true", help="print the summary as one JSON line")
    g = ap.add_argument_group("local multi-node cluster (full-size runs)")
    g.add_argument("--local-cluster", type=int, metavar="WORKERS",
                   help="start a head + WORKERS worker nodes on 127.0.0.1 and run the sampler there")
    g.add_argument("--cpus-per-node", type=int, default=1, help="CPUs of each local node (default 1)")
    g.add_argument("--restart-head-midway", action="store_true",
                   help="kill the head node when half the pairs are stored, restart the cluster, resume")
    g.add_argument("--rederive", type=float, nargs="+", metavar="GAMMA",
                   help="after the run, load_estimate(store, gamma=GAMMA) for each")
    g.add_argument("--report", metavar="FILE.json", help="write the run's figures (walls, store size, RSS) here")
    g.add_argument("--full-size-demo", action="store_true",
                   help="m = 5 486 187 pairs (γ = 0.001) of the mean of n = 1000 Exp(1) records on a local "
                        "head + 3 workers, head killed midway and resumed, Δ̂ re-derived for γ = 0.002, 0.005, "
                        "0.01 (store in OUT/precompute-full, report in OUT/precompute_full.json)")
    _common.add_common_flags(ap, out_default="out", store=True)  # --store default: OUT/precompute-<target>
    return ap


def main(argv: list[str] | None = None) -> int:
    from raydp import estimate_sensitivity
    from raydp.cli import build, build_mechanism

    a = make_parser().parse_args(argv)
    if a.full_size_demo:
        a.local_cluster = 3 if a.local_cluster is None else a.local_cluster
        a.restart_head_midway, a.gamma = True, 0.001 if a.gamma is None else a.gamma
        a.rederive = a.rederive or [0.002, 0.005, 0.01]
        a.store = a.store or os.path.join(a.out, "precompute-full")
        a.report = a.report or os.path.join(a.out, "precompute_full.json")
    if a.local_cluster is not None:
        return on_local_cluster(a, argv)
    target_spec = a.target or EXAMPLE["target"]
    oracle_spec = a.oracle or EXAMPLE["oracle"]
    oracle_args = a.oracle_args
    if a.oracle is None and oracle_args is None:
        oracle_args = EXAMPLE["oracle_args"]
    gamma = a.gamma if (a.gamma is not None or a.m is not None) else EXAMPLE["gamma"]

    target = build(target_spec, a.target_args, "--target", ("raydp.targets",))
    oracle = build(oracle_spec, oracle_args, "--oracle", ("raydp.oracles",))
    mech = build_mechanism(a.mechanism, a.mechanism_args)
    store = a.store or os.path.join(a.out, "precompute-" + target_spec.split(":", 1)[1].split(".")[-1])
    _common.say(a, f"sampling {target_spec} on {oracle_spec}, n={a.n}, {_common.where(a)} -> {store}")
    est = estimate_sensitivity(target, oracle, a.n, mechanism=mech, gamma=gamma, m=a.m, k=a.k,
                               options=_common.options(a, store=store))
    _common.print_summary(est, uri=store, as_json=a.json)
    if a.plot:
        from raydp import load_estimate
        from raydp.plots import plot_cdf

        plot_cdf(load_estimate(store), a.plot)
        if not a.json:
            print(f"plot         {a.plot}")
    return 0


# ----------------------------------------------------------------------------- local cluster mode
_CLUSTER_ONLY = ("--local-cluster", "--cpus-per-node", "--restart-head-midway", "--rederive", "--report",
                 "--full-size-demo", "--store", "--resume", "--backend", "--address", "--num-cpus")


def _driver_args(argv: list[str]) -> list[str]:
    """The command line of the driver process: the caller's flags less the cluster-mode ones."""
    out, skip = [], False
    for arg in argv:
        if skip:
            if arg.startswith("--"):
                skip = False
            else:
                continue
        name = arg.split("=", 1)[0]
        if name in _CLUSTER_ONLY:
            skip = "=" not in arg and name not in ("--restart-head-midway", "--full-size-demo", "--resume")
            continue
        out.append(arg)
    return out


def _store_rows(store: str) -> int:
    """Rows in the store's shards so far (from the Parquet footers; a shard being written is skipped)."""
    import pyarrow.parquet as pq

    shards = os.path.join(store, "shards")
    rows = 0
    for name in os.listdir(shards) if os.path.isdir(shards) else []:
        if name.startswith("shard-") and name.endswith(".parquet"):
            try:
                rows += pq.ParquetFile(os.path.join(shards, name)).metadata.num_rows
            except Exception:
                pass
    return rows


def _du(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def on_local_cluster(a, argv: list[str] | None) -> int:
    """The run on a local multi-node cluster, optionally crashing the head halfway and resuming."""
    import json
    import shutil
    import signal
    import time

    import raydp
    from raydp.local_cluster import LocalCluster

    argv = list(sys.argv[1:] if argv is None else argv)
    store = a.store or os.path.join(a.out, "precompute-" + (a.target or EXAMPLE["target"]).split(":", 1)[1])
    store = os.path.abspath(store)
    if os.path.exists(store) and not a.resume:
        raise ValueError(f"store {store} exists; remove it or pass --resume")
    m = raydp.make_plan(gamma=a.gamma, m=a.m, k=a.k).m if (a.gamma or a.m) else raydp.make_plan(gamma=EXAMPLE["gamma"]).m
    base = [sys.executable, os.path.abspath(__file__), *_driver_args(argv), "--store", store, "--json", "--quiet"]
    if a.full_size_demo:
        base += ["--gamma", str(a.gamma)]
    report: dict = dict(_report.start("precompute_delta", argv), m=m, store=store, workers=a.local_cluster,
                        cpus_per_node=a.cpus_per_node, phases=[])
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    extra = {"PYTHONPATH": os.pathsep.join([repo, os.path.dirname(os.path.abspath(__file__))])}
    cluster = LocalCluster(workers=a.local_cluster, cpus_per_node=a.cpus_per_node, extra_env=extra)

    def driver(resume: bool, kill_at: int | None):
        """Run one driver; with ``kill_at`` (rows), SIGKILL the head node once the store holds that many."""
        killed: dict = {}
        t0 = time.perf_counter()

        def poll(_popen):
            if kill_at is not None and not killed and _store_rows(store) >= kill_at:
                head = next(nd for nd in cluster.nodes() if nd.name == "head")
                killed.update(rows_stored=_store_rows(store), at_s=time.perf_counter() - t0)
                os.killpg(head.pgid, signal.SIGKILL)  # the head node crashes: GCS, raylet, dashboard ...
                _popen.kill()  # ... and the driver, which `ray job submit` runs on the head node

        done = _run_measured(base + (["--resume"] if resume else []),
                             env=dict(cluster.env, PYTHONPATH=extra["PYTHONPATH"]), on_poll=poll)
        return done, done.stdout, done.stderr, time.perf_counter() - t0, killed or None

    t_all = time.perf_counter()
    try:
        t0 = time.perf_counter()
        cluster.up()
        report["cluster_up_s"] = time.perf_counter() - t0
        kill_at = m // 2 if a.restart_head_midway else None
        p, out, err, wall, killed = driver(a.resume, kill_at)
        report["phases"].append(dict(phase="first half" if killed else "run", wall_s=wall, exit=p.returncode,
                                     killed=killed, peak_rss_mb=p.peak_rss_mb, rows_stored=_store_rows(store),
                                     stderr_tail=err.strip().splitlines()[-1:] if p.returncode else []))
        if killed:
            t0 = time.perf_counter()
            cluster.down()
            cluster.up()
            report["restart_s"] = time.perf_counter() - t0
            p, out, err, wall, _ = driver(True, None)
            report["phases"].append(dict(phase="resumed", wall_s=wall, exit=p.returncode, peak_rss_mb=p.peak_rss_mb,
                                         rows_stored=_store_rows(store),
                                         stderr_tail=err.strip().splitlines()[-1:] if p.returncode else []))
        if p.returncode != 0:
            print(err, file=sys.stderr)
            raise RuntimeError(f"the driver failed (exit {p.returncode})")
        report["estimate"] = json.loads(out.strip().splitlines()[-1])
    finally:
        cluster.down()
        shutil.rmtree(cluster.state_dir, ignore_errors=True)
    report["total_wall_s"] = time.perf_counter() - t_all
    report["store_bytes"] = _du(store)
    report["store_shards"] = len(os.listdir(os.path.join(store, "shards")))
    if a.rederive:
        code = ("import json, sys, time, raydp\n"
                "t0 = time.perf_counter(); out = {}\n"
                "for g in [None] + [float(x) for x in sys.argv[2:]]:\n"
                "    e = raydp.load_estimate(sys.argv[1], gamma=g)\n"
                "    out[str(g)] = dict(gamma=e.plan.gamma, m=e.plan.m, k=e.plan.k, sensitivity=e.sensitivity,\n"
                "                       failures=e.failures)\n"
                "out['seconds'] = time.perf_counter() - t0\n"
                "print(json.dumps(out))\n")
        t0 = time.perf_counter()
        p = _run_measured([sys.executable, "-c", code, store, *map(str, a.rederive)])
        if p.returncode != 0:
            raise RuntimeError(f"load_estimate failed: {p.stderr.strip().splitlines()[-1:]}")
        report["rederived"] = json.loads(p.stdout.strip().splitlines()[-1])
        report["rederive_wall_s"] = time.perf_counter() - t0
        report["rederive_peak_rss_mb"] = p.peak_rss_mb
    if a.report:
        os.makedirs(os.path.dirname(os.path.abspath(a.report)), exist_ok=True)
        with open(a.report, "w") as f:
            json.dump(report, f, indent=1)
    print(json.dumps({k: v for k, v in report.items() if k != "phases"}, indent=1))
    for ph in report["phases"]:
        print(json.dumps(ph))
    return 0


class _Done:
    """A finished child process: return code, output and its peak RSS (``ru_maxrss`` from wait4)."""

    def __init__(self, returncode: int, stdout: str, stderr: str, peak_rss_mb: float):
        self.returncode, self.stdout, self.stderr, self.peak_rss_mb = returncode, stdout, stderr, peak_rss_mb


def _run_measured(cmd: list[str], env=None, on_poll=None) -> _Done:
    """Run ``cmd``; call ``on_poll(popen)`` every 0.2 s while it runs; reap it with wait4 for its peak RSS."""
    import subprocess
    import tempfile
    import time

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(cmd, env=env, stdout=out, stderr=err, text=True)
        while True:
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if on_poll is not None:
                on_poll(p)
            time.sleep(0.2)
        out.seek(0)
        err.seek(0)
        code = os.waitstatus_to_exitcode(status)
        return _Done(code, out.read(), err.read(), usage.ru_maxrss / 1024)


if __name__ == "__main__":
    sys.exit(_common.run_main(main))
