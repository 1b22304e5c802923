"""Scale past one machine: a wide cluster simulated on this one, a cost model, a projection to 1 000 cores.

This machine has 2 cores, but a Ray node can declare more CPUs than it has, and a target that
*waits* (``time.sleep``) instead of computing costs no CPU. So a few loopback nodes declaring many
CPUs each (8 → 64 logical slots) measure the engine's own overheads — the driver, the scheduler,
the reducer, the store — at a width the hardware could not give. Everything is the real thing:
:class:`raydp.local_cluster.LocalCluster` nodes (separate raylets and object stores, token auth, on
127.0.0.1), ``raydp.estimate_sensitivity(..., backend=raydp.RayBackend(address=...), store=...)``.

    python jobs/scale_sim.py                        # ≈ 25 min: widths 8 16 32 64, pairs of 10 ms, 100 ms, 1 s
    python jobs/scale_sim.py --quick --out /tmp/s   # one 4-slot cluster, tiny runs: the plumbing in ~1 min
    python jobs/scale_sim.py --project-only         # model + projection again from jobs/results/scale_sim.json
    python jobs/scale_sim.py --wide-case --repeats 3  # expensive targets (64 slots, m = 1305, 100 ms): ≈ 4 min

Per width it starts one cluster (``--nodes`` nodes of width/nodes CPUs), one driver process (so its
CPU time and peak RSS are its own), warms every slot's worker up, then runs, ``--repeats`` times in
turn:

- ``default``: what a user gets — the default block size and grouping — for each pair cost, m sized
  so that the ideal run lasts ``--seconds`` (16 pairs per slot for 1 s pairs);
- ``1pair``: one pair per block and per task (the per-task cost regime);
- ``g8`` / ``g32``: one pair per block, 8 or 32 blocks per task (the per-result regime);
- ``null``: one zero-cost pair per slot (the fixed cost of a run with warm workers);
- ``inflight``: as ``1pair`` at 10 ms, with 2 000 tasks in flight (a 1 000-slot driver's bookkeeping).

For each run: pairs/s against the ideal slots/t_pair, efficiency, driver CPU (all its threads) per
task and per block result, CPU of the raylets, GCS and workers, the host's CPU, where the driver's
wall time went (:class:`raydp.engine.ray.DriverStats`), slot time lost in the tail, bytes returned
per task and the object store's counters, and the driver's peak RSS. Then a least-squares fit of
driver CPU = c_task·tasks + c_result·results + c_idle·wall gives the model's costs (see
:func:`predict`), the model is checked against every simulated run, and the paper's SVM
(n = 1000, d = 8; per-pair cost measured here with ``raydp.targets.svm``) is projected to 100 and
1 000 cores at γ = 0.05, 0.01, 0.001. Results: ``scale_sim.{json,md,png}`` in ``--out``.

Memory: each slot is a Ray worker process (≈ 100 MB RSS once it has imported raydp, numpy, pyarrow,
scipy and sklearn); 64 slots are ≈ 6-7 GB. The nodes get RAY_worker_maximum_startup_concurrency=2
(not one start-up per declared CPU at once on 2 real cores), RAY_worker_register_timeout_seconds=600
(a start-up may queue for minutes), a 100 MB object store each (the job and results are tiny) and
RAY_memory_monitor_refresh_ms=0 (the OOM killer would act on the whole shared VM's memory).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict

import numpy as np

import _report
from raydp.engine.costmodel import Costs, fit_costs, fit_host, layout, predict, recommended_block_size, tail_loss

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

NODE_ENV = {
    "RAY_worker_maximum_startup_concurrency": "2",
    "RAY_worker_register_timeout_seconds": "600",
    "RAY_memory_monitor_refresh_ms": "0",
}
OBJECT_STORE_BYTES = 100_000_000
SIM_N = 10  # records per database of the waiting target (drawn, as always, but cheap)
SVM = dict(n=1000, dim=8, C=3.0)
GAMMAS = (0.05, 0.01, 0.001)
PROJECT_CORES = (100, 1000)


# ----------------------------------------------------------------------------- the waiting target
class Sleeper:
    """A target that waits ``seconds`` per pair and uses no CPU while it does; G is the |Δ| of the means."""

    def __init__(self, seconds: float):
        self.seconds = float(seconds)

    def __call__(self, database):
        return np.mean(np.asarray(database, dtype=np.float64), axis=0)

    def pair(self, d, d_prime):
        if self.seconds > 0:
            time.sleep(self.seconds)
        return self(d), self(d_prime)

    def identity(self) -> dict:
        return {"name": "sleeper", "params": {"seconds": self.seconds}}


class SleepyEval(Sleeper):
    """A target that waits ``seconds`` per *evaluation* (two per pair) and has no ``pair`` method:
    the expensive-target case (100 ms per evaluation, m = 1305 on 64 slots)."""

    pair = None

    def __call__(self, database):
        time.sleep(self.seconds)
        return np.mean(np.asarray(database, dtype=np.float64), axis=0)

    def identity(self) -> dict:
        return {"name": "sleepy-eval", "params": {"seconds": self.seconds}}


class HeavySetup(SleepyEval):
    """:class:`SleepyEval` with a ``setup()`` of ``setup_seconds`` (loading a model, compiling) that
    leaves a file named by its process id in ``setup_dir``: a run counts its set-ups per worker."""

    def __init__(self, seconds: float, setup_seconds: float, setup_dir: str):
        super().__init__(seconds)
        self.setup_seconds, self.setup_dir = float(setup_seconds), setup_dir

    def setup(self):
        time.sleep(self.setup_seconds)
        with open(os.path.join(self.setup_dir, f"setup-{os.getpid()}-{time.monotonic_ns()}"), "w"):
            pass

    def identity(self) -> dict:
        return {"name": "heavy-setup", "params": {"seconds": self.seconds, "setup_seconds": self.setup_seconds}}


# ----------------------------------------------------------------------------- /proc helpers
def _stat(pid: int) -> tuple[str, float] | None:
    """(comm, CPU seconds) of a process, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            s = f.read().decode(errors="replace")
    except OSError:
        return None
    comm = s[s.index("(") + 1:s.rindex(")")]
    rest = s[s.rindex(")") + 2:].split()
    return comm, (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


def _cmd0(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")[0].decode(errors="replace")
    except OSError:
        return ""


def _kind(pid: int, comm: str) -> str:
    if comm == "raylet":
        return "raylet"
    if comm == "gcs_server":
        return "gcs"
    if _cmd0(pid).startswith("ray::") and "Agent" not in _cmd0(pid):
        return "workers"
    return "other"


def cluster_cpu(sids: list[int]) -> dict:
    """CPU seconds so far of the cluster's processes, by kind, keyed by pid."""
    from raydp.local_cluster import session_pids

    out = {}
    for pid in session_pids(sids, descendants=True):
        st = _stat(pid)
        if st is not None and pid != os.getpid():
            out[pid] = (_kind(pid, st[0]), st[1])
    return out


def cpu_delta(before: dict, after: dict) -> dict:
    kinds = {"raylet": 0.0, "gcs": 0.0, "workers": 0.0, "other": 0.0}
    for pid, (kind, t) in after.items():
        kinds[kind] += t - (before[pid][1] if pid in before else 0.0)
    return kinds


def host_cpu() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine (every user of this shared VM)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v) - idle, sum(v)


def vm_hwm_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) / 1024


def reset_hwm() -> None:
    """Reset this process's peak RSS (Linux: "5" to /proc/self/clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def object_store_counters() -> dict:
    """Ray's object store summary (plasma use, objects consumed by tasks, spilled), best effort."""
    import re

    try:
        from ray._private.internal_api import memory_summary

        text = memory_summary(stats_only=True)
    except Exception as exc:  # a private API: report, do not fail
        return {"error": type(exc).__name__}
    out = {}
    for key, pat in (("plasma_mib", r"Plasma memory usage (\d+) MiB"), ("objects", r"MiB, (\d+) objects"),
                     ("consumed_mib", r"Objects consumed by Ray tasks: (\d+) MiB"),
                     ("spilled_mib", r"Spilled (\d+) MiB")):
        found = re.search(pat, text)
        out[key] = int(found.group(1)) if found else 0
    return out


def plan_runs(slots: int, pair_costs: list[float], seconds: float, quick: bool) -> list[dict]:
    runs = []
    for t in pair_costs:
        per_slot = 16 if t >= 1 else max(1, round(seconds / t))
        runs.append(dict(kind="default", t_pair=t, m=slots * per_slot))
    for t in pair_costs:
        per_slot = 16 if t >= 1 else max(1, round(seconds / t))
        runs.append(dict(kind="1pair", t_pair=t, m=min(200 if quick else 2000, slots * per_slot), block_size=1,
                         group_size=1))
    t_small = min(pair_costs)
    for g in (8, 32):
        runs.append(dict(kind=f"g{g}", t_pair=t_small, m=4 * slots * g, block_size=1, group_size=g))
    runs.append(dict(kind="null", t_pair=0.0, m=max(2, slots), block_size=1, group_size=1))
    runs.append(dict(kind="inflight", t_pair=t_small, m=200 if quick else 2000, block_size=1, group_size=1,
                     max_in_flight=2000))
    return runs


def result_bytes(block_size: int, group: int) -> int:
    """Pickled size of one task's return value (``group`` full block results of ``block_size`` G)."""
    from raydp.engine.blocks import BlockResult

    results = [BlockResult(i, i * block_size, np.random.default_rng(i).random(block_size), 0, {}, 0.1)
               for i in range(group)]
    return len(pickle.dumps(results, protocol=5))


def run_one(cfg: dict, address: str, sids: list[int], store_root: str, seed: int) -> dict:
    import raydp
    from raydp import oracles
    from raydp.engine import ray as ray_engine
    from raydp.engine.blocks import default_block_size

    backend = raydp.RayBackend(address=address, group_size=cfg.get("group_size"),
                               max_in_flight=cfg.get("max_in_flight"))
    slots = backend.slots()
    m = cfg["m"]
    bs = cfg.get("block_size") or default_block_size(SIM_N, m)
    store = os.path.join(store_root, f"{cfg['kind']}-{cfg['t_pair']}-{time.monotonic_ns()}")
    reset_hwm()
    c0, h0, os0 = cluster_cpu(sids), host_cpu(), object_store_counters()
    p0, w0 = time.process_time(), time.perf_counter()
    est = raydp.estimate_sensitivity(Sleeper(cfg["t_pair"]), oracles.exponential(1.0), SIM_N, m=m, k=m,
                                     seed=seed, block_size=bs, backend=backend, store=store, progress=False)
    wall = time.perf_counter() - w0
    cpu = time.process_time() - p0
    c1, h1, os1 = cluster_cpu(sids), host_cpu(), object_store_counters()
    stats = ray_engine.last_stats()
    store_bytes = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(store) for f in fs)
    blocks = -(-m // bs)
    tasks = stats.groups
    g = -(-blocks // tasks)
    ideal = slots / cfg["t_pair"] if cfg["t_pair"] > 0 else float("inf")
    row = dict(cfg, slots=slots, block_size=bs, blocks=blocks, tasks=tasks, group=g, results=blocks,
               wall_s=wall, imap_wall_s=stats.wall_s, pairs_per_s=m / wall, ideal_pairs_per_s=ideal,
               efficiency=(m * cfg["t_pair"]) / (slots * wall) if cfg["t_pair"] > 0 else None,
               driver_cpu_s=cpu, driver_cpu_per_task_ms=1e3 * cpu / tasks, driver_cpu_per_result_ms=1e3 * cpu / blocks,
               driver_share=cpu / wall, cluster_cpu_s=cpu_delta(c0, c1),
               host_busy=(h1[0] - h0[0]) / max(h1[1] - h0[1], 1), host_cores=os.cpu_count(),
               driver=stats.to_dict(), busy_s=stats.busy_s,
               tail_slot_s=tail_loss(stats.submitted, stats.done, slots, stats.wall_s),
               result_bytes_per_task=result_bytes(bs, g), job_bytes=len(pickle.dumps(
                   (Sleeper(cfg["t_pair"]), oracles.exponential(1.0)), protocol=5)),
               object_store_before=os0, object_store_after=os1, store_bytes=store_bytes,
               driver_peak_rss_mb=vm_hwm_mb(), delta=est.sensitivity, failures=est.failures)
    lost = slots * wall - m * cfg["t_pair"]
    row["lost_slot_s"] = lost
    row["fixed_s"] = wall - stats.wall_s
    return row


def measure_wait_cost(sizes=(100, 500, 2000, 8000), calls: int = 30) -> dict:
    """Driver CPU of one ``ray.wait(refs, num_returns=1, timeout=0)`` over N pending refs (tasks that
    wait on a never-set resource: they stay pending, using no slot)."""
    import ray

    @ray.remote(num_cpus=0, resources={"never": 1})
    def never():
        return 0

    refs = [never.remote() for _ in range(max(sizes))]
    out = {}
    try:
        for n in sizes:
            sub = refs[:n]
            t0 = time.process_time()
            for _ in range(calls):
                ray.wait(list(sub), num_returns=1, timeout=0)
            out[str(n)] = (time.process_time() - t0) / calls
    finally:
        for r in refs:
            ray.cancel(r, force=False)
    xs = np.array([int(k) for k in out]), np.array(list(out.values()))
    slope = float(np.polyfit(xs[0], xs[1], 1)[0])
    return {"seconds_by_n": out, "per_ref_s": slope}


def driver_main(config_path: str) -> int:
    """The driver process of one width: warm-up, idle baseline, the runs, the ray.wait microbenchmark."""
    import ray

    import raydp
    from raydp import oracles

    with open(config_path) as f:
        cfg = json.load(f)
    address, sids = cfg["address"], cfg["sids"]
    backend = raydp.RayBackend(address=address)
    t0 = time.perf_counter()
    backend.connect()
    slots = backend.slots()
    out = {"slots": slots, "connect_s": time.perf_counter() - t0, "runs": []}
    # Warm-up: one task per slot that waits long enough for every slot to get its own worker.
    # Repeated until one wave takes about one task's time (every slot had a worker ready).
    out["warmup_s"] = []
    for _ in range(6):
        t0 = time.perf_counter()
        raydp.estimate_sensitivity(Sleeper(2.0), oracles.exponential(1.0), SIM_N, m=slots, k=slots, seed=1,
                                   block_size=1, backend=raydp.RayBackend(address=address, group_size=1),
                                   progress=False)
        out["warmup_s"].append(time.perf_counter() - t0)
        if out["warmup_s"][-1] < 3.0:
            break
    workers = [pid for pid, (kind, _) in cluster_cpu(sids).items() if kind == "workers"]
    rss = []
    for pid in workers:
        try:
            with open(f"/proc/{pid}/status") as f:
                rss.append(next(int(x.split()[1]) for x in f if x.startswith("VmRSS")) / 1024)
        except (OSError, StopIteration):
            pass
    out["workers"] = len(workers)
    out["worker_rss_mb_median"] = statistics.median(rss) if rss else None
    out["worker_rss_mb_total"] = sum(rss)
    # Idle driver: what a connected driver costs per second doing nothing.
    p0 = time.process_time()
    time.sleep(2.0)
    out["driver_idle_cpu_per_s"] = (time.process_time() - p0) / 2.0
    runs = plan_runs(slots, cfg["pair_costs"], cfg["seconds"], cfg["quick"])
    with tempfile.TemporaryDirectory(prefix="scale-sim-") as store_root:
        for rep in range(cfg["repeats"]):
            order = runs if rep % 2 == 0 else list(reversed(runs))
            for run in order:
                row = run_one(run, address, sids, store_root, seed=rep)
                row["repeat"] = rep
                out["runs"].append(row)
                print(f"  {slots:3d} slots {row['kind']:8s} t={row['t_pair']:<5g} m={row['m']:<6d} "
                      f"tasks={row['tasks']:<5d} wall={row['wall_s']:6.2f}s eff={row['efficiency'] or 0:.3f} "
                      f"driver {row['driver_cpu_per_task_ms']:.2f} ms/task", file=sys.stderr, flush=True)
    out["wait_cost"] = measure_wait_cost((50, 200) if cfg["quick"] else (100, 500, 2000, 8000))
    with open(cfg["result"], "w") as f:
        json.dump(out, f, default=float)
    ray.shutdown()
    return 0


# ----------------------------------------------------------------------------- the orchestrator
def run_driver(cluster, env: dict, mode: str, cfg: dict, timeout: float, what: str) -> dict:
    """Run ``python scale_sim.py MODE CFG`` as the cluster's driver (a process of its own) and return
    the JSON it leaves at ``cfg["result"]``."""
    with tempfile.TemporaryDirectory(prefix="scale-sim-cfg-") as tmp:
        cfg = dict(cfg, result=os.path.join(tmp, "out.json"))
        path = os.path.join(tmp, "cfg.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        p = subprocess.run([sys.executable, os.path.abspath(__file__), mode, path],
                           env=dict(cluster.env, PYTHONPATH=env["PYTHONPATH"]), timeout=timeout)
        if p.returncode != 0:
            raise RuntimeError(f"{what} failed (exit {p.returncode})")
        with open(cfg["result"]) as f:
            return json.load(f)


def run_width(width: int, nodes: int, args) -> dict:
    from raydp.local_cluster import LocalCluster

    nodes = max(1, min(nodes, width))
    per_node = width // nodes
    env = dict(NODE_ENV, PYTHONPATH=os.pathsep.join([REPO, HERE]))
    kw = {}
    if args.port:
        kw = dict(port=args.port, dashboard_port=args.port + 1, client_port=args.port + 2)
    print(f"width {width}: {nodes} nodes x {per_node} CPUs ...", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    with LocalCluster(workers=nodes - 1, cpus_per_node=per_node, extra_env=env,
                      object_store_bytes=OBJECT_STORE_BYTES, **kw) as c:
        up = time.perf_counter() - t0
        sids = [nd.pgid for nd in c.nodes()]
        out = run_driver(c, env, "_driver", dict(address=c.address, sids=sids, pair_costs=args.pair_costs,
                                                 seconds=args.seconds, repeats=args.repeats, quick=args.quick),
                         args.timeout, f"driver for width {width}")
    out.update(width=width, nodes=nodes, cpus_per_node=per_node, cluster_up_s=up,
               cluster_total_s=time.perf_counter() - t0)
    return out


def measure_svm_pair(pairs_per_block: int, blocks: int, repeats: int) -> dict:
    """Seconds per pair of raydp's SVM target (n = 1000, d = 8, warm-started pair solver), in this process,
    over ``blocks`` default-sized blocks, ``repeats`` times: median, spread, and the per-block spread."""
    import raydp
    from raydp import oracles, targets
    from raydp.engine.blocks import PairJob

    job = PairJob(targets.svm(C=SVM["C"]), oracles.svm_two_class(SVM["dim"]), raydp.Laplace(1.0), SVM["n"],
                  pairs_per_block * blocks * repeats, 0, pairs_per_block, SVM["dim"] + 1)
    per_pair, block_times = [], []
    for r in range(repeats):
        t0 = time.process_time()
        res = job.run_blocks(range(r * blocks, (r + 1) * blocks))
        per_pair.append((time.process_time() - t0) / (pairs_per_block * blocks))
        block_times += [x.seconds for x in res]
    bt = np.array(block_times)
    # the spread of single pairs' times (what makes tasks of many pairs differ), one block's pairs
    records, _ = job.draw(0)
    d, d_prime = job.neighbours(records)
    pair_times = []
    for j in range(d.shape[0]):
        t0 = time.process_time()
        job.target.pair(d[j], d_prime[j])
        pair_times.append(time.process_time() - t0)
    pt = np.array(pair_times)
    return {"t_pair_s": statistics.median(per_pair), "t_pair_min_s": min(per_pair), "t_pair_max_s": max(per_pair),
            "cpu_seconds_measured": sum(per_pair) * pairs_per_block * blocks, "pairs_per_block": pairs_per_block,
            "block_cv": float(bt.std() / bt.mean()), "pair_cv_est": float(pt.std() / pt.mean()),
            "pairs_timed": int(pt.size)}


def derive_costs(widths: list[dict]) -> tuple[Costs, dict]:
    """The model's costs from the simulated runs."""
    runs = [r for w in widths for r in w["runs"] if r["kind"] != "inflight"]
    fit = fit_costs(runs)
    nulls = [r for r in runs if r["kind"] == "null"]
    fixed = statistics.median(r["wall_s"] for r in nulls) if nulls else 0.05
    # slot time per task beyond its pairs, from the one-pair-per-task runs that neither the driver nor
    # the pair cost hides: (S·wall − m·t − S·fixed − tail) / tasks, median
    slow = [r for r in runs if r["kind"] == "1pair" and r["t_pair"] >= 0.1 and r["driver_share"] < 0.25]
    o = statistics.median(max(0.0, (r["slots"] * r["wall_s"] - r["m"] * r["t_pair"] - r["slots"] * fixed
                                    - r["tail_slot_s"]) / r["tasks"]) for r in slow) if slow else 0.002
    waits = [w["wait_cost"]["per_ref_s"] for w in widths if "wait_cost" in w]
    kappa = max(0.0, statistics.median(waits)) if waits else 0.0
    costs = Costs(c_task=max(fit["c_task"], 1e-6), c_result=max(fit["c_result"], 0.0), c_inflight=kappa,
                  o_task=o, fixed=fixed)
    fit["host"] = fit_host(runs)
    return costs, fit


def check_model(costs: Costs, widths: list[dict], host_fit: dict | None = None) -> list[dict]:
    host = None if host_fit is None else (os.cpu_count() or 2, host_fit["h_task"], host_fit["h_pair"])
    rows = []
    for w in widths:
        for r in w["runs"]:
            if r["kind"] == "null" or not r["t_pair"]:
                continue
            p = predict(costs, r["m"], r["t_pair"], r["block_size"], r["slots"], r.get("group_size"),
                        r.get("max_in_flight"), host=host)
            rows.append(dict(width=w["width"], kind=r["kind"], t_pair=r["t_pair"], repeat=r["repeat"],
                             measured=r["efficiency"], predicted=p["efficiency"], bound=p["bound"]))
    return rows


def project(costs: Costs, svm: dict) -> list[dict]:
    import raydp
    from raydp.engine.blocks import default_block_size

    rows = []
    t = svm["t_pair_s"]
    cv_pair = svm["pair_cv_est"]
    for gamma in GAMMAS:
        m = raydp.make_plan(gamma=gamma).m
        bs_def = default_block_size(SVM["n"], m)
        for cores in PROJECT_CORES:
            best = recommended_block_size(costs, m, t, cores, SVM["n"], cv_pair)
            for which, bs in (("default", bs_def), ("best for the width", best)):
                blocks, g, tasks = layout(m, bs, cores, t_pair=t)
                p = predict(costs, m, t, bs, cores, cv_task=cv_pair / math.sqrt(g * bs))
                rows.append(dict(gamma=gamma, m=m, cores=cores, block_size=bs, which=which, blocks=blocks, group=g,
                                 tasks=tasks, task_s=p["tau_s"], wall_s=p["wall_s"], efficiency=p["efficiency"],
                                 bound=p["bound"], max_slots=p["max_slots"], core_hours=m * t / 3600))
    return rows


EXPENSIVE = (1.0, 60.0, 600.0)  # seconds per evaluation of the target (a pair is two)
EXPENSIVE_SLOTS = (8, 64, 1000)


def expensive_targets(costs: Costs, gammas=(0.05, 0.01)) -> list[dict]:
    """What a user with a 1 s, 60 s or 10 min target (per evaluation; a pair is two) should expect at
    8, 64 and 1 000 slots, at the default block size and grouping: wall time, efficiency, and the
    wall time that m pairs allow (⌈m / slots⌉ pair times, one pair per slot at a time)."""
    import raydp
    from raydp.engine.blocks import default_block_size

    rows = []
    for gamma in gammas:
        m = raydp.make_plan(gamma=gamma).m
        bs = default_block_size(100, m)  # n only caps records per block; 100 is typical here
        for t_eval in EXPENSIVE:
            t = 2 * t_eval
            for slots in EXPENSIVE_SLOTS:
                p = predict(costs, m, t, bs, slots)
                allowed = -(-m // slots) * t
                rows.append(dict(gamma=gamma, m=m, t_eval=t_eval, slots=slots, block_size=bs, tasks=p["tasks"],
                                 wall_s=p["wall_s"], efficiency=p["efficiency"], allowed_s=allowed,
                                 of_allowed=allowed / p["wall_s"], bound=p["bound"]))
    return rows


def _duration(s: float) -> str:
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    if s < 2 * 86400:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} d"


def expensive_markdown(rows: list[dict]) -> str:
    out = ["## Expensive targets: what to expect (model, default block size and grouping)\n",
           "Per evaluation of the target; a pair is two evaluations. *allowed* = ⌈m / slots⌉ pair times, the "
           "best any scheduler can do with m pairs; *of allowed* = allowed ÷ projected wall.\n"]
    out.append(_report.table(["γ", "m", "target", "slots", "tasks", "projected wall", "efficiency", "allowed",
                              "of allowed", "bound"],
                             [[r["gamma"], f"{r['m']:,}", _duration(r["t_eval"]), f"{r['slots']:,}", f"{r['tasks']:,}",
                               _duration(r["wall_s"]), f"{r['efficiency']:.2f}", _duration(r["allowed_s"]),
                               f"{r['of_allowed']:.2f}", r["bound"]] for r in rows]))
    return "\n".join(out) + "\n"


# Cloud price assumption (on-demand list prices, AWS us-west-2, Linux; check current pricing): the
# worker and head instance types of cluster/cluster.yaml, and how long a node is billed beyond the run.
CLOUD = dict(worker="c6i.8xlarge", worker_vcpus=32, worker_usd_h=1.36, head="m6i.xlarge", head_usd_h=0.192,
             boot_min=5.0, idle_min=5.0)


def cloud_costs(costs: Costs, svm: dict, gamma: float = 0.001, workers=(2, 4, 8, 16, 32)) -> list[dict]:
    """Wall time and on-demand cost of one SVM run at ``gamma`` on ``workers`` c6i.8xlarge nodes: each
    node billed for boot + run + idle timeout, the head for the same; vCPU = one slot at the per-pair
    cost measured here."""
    import raydp
    from raydp.engine.blocks import default_block_size

    m = raydp.make_plan(gamma=gamma).m
    bs = default_block_size(SVM["n"], m)
    rows = []
    for w in workers:
        slots = w * CLOUD["worker_vcpus"]
        blocks, g, _ = layout(m, bs, slots, t_pair=svm["t_pair_s"])
        p = predict(costs, m, svm["t_pair_s"], bs, slots, cv_task=svm["pair_cv_est"] / math.sqrt(g * bs))
        billed_h = (CLOUD["boot_min"] + CLOUD["idle_min"]) / 60 + p["wall_s"] / 3600
        usd = billed_h * (w * CLOUD["worker_usd_h"] + CLOUD["head_usd_h"])
        rows.append(dict(gamma=gamma, workers=w, slots=slots, wall_s=p["wall_s"], efficiency=p["efficiency"],
                         usd=usd, usd_compute_only=m * svm["t_pair_s"] / 3600 * CLOUD["worker_usd_h"] / CLOUD["worker_vcpus"]))
    return rows


def best_width(costs: Costs, svm: dict, gamma: float, target: float = 0.9) -> int:
    """The widest cluster (cores) with projected efficiency ≥ target at the default block size."""
    import raydp
    from raydp.engine.blocks import default_block_size

    m = raydp.make_plan(gamma=gamma).m
    bs = default_block_size(SVM["n"], m)
    best = 1
    for cores in sorted(set(int(x) for x in np.unique(np.round(np.logspace(0, 4, 400))))):
        if predict(costs, m, svm["t_pair_s"], bs, cores)["efficiency"] >= target:
            best = cores
    return best


# ----------------------------------------------------------------------------- report
def fmt_rate(x: float) -> str:
    return "∞" if not math.isfinite(x) else f"{x:,.0f}"


def med(rows, key):
    vals = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def spread(rows, key, fmt="{:.2f}"):
    return _report.spread_text([r.get(key) for r in rows], fmt)


def _run_groups(widths):
    """(width, kind, t_pair, runs) for every kind of run at every width, in order."""
    for w in widths:
        groups = {}
        for r in w["runs"]:
            groups.setdefault((r["kind"], r["t_pair"]), []).append(r)
        for (kind, t), rs in groups.items():
            yield w, kind, t, rs


def markdown(report: dict) -> str:
    widths = report["widths"]
    costs = report["model"]["costs"]
    svm = report["svm"]
    lines = [_report.header("Scale simulation", report)]
    lines.append("## Simulation: per width and pair cost (median [min–max] over repeats)\n")
    rows = []
    for w, kind, t, rs in _run_groups(widths):
        if kind == "null":
            continue
        rows.append([w["width"], kind, f"{t:g}", rs[0]["m"], rs[0]["block_size"], rs[0]["group"], rs[0]["tasks"],
                     fmt_rate(med(rs, "pairs_per_s")), fmt_rate(rs[0]["ideal_pairs_per_s"]),
                     spread(rs, "efficiency"),
                     spread(rs, "driver_cpu_per_task_ms"), spread(rs, "driver_cpu_per_result_ms", "{:.3f}"),
                     f"{med(rs, 'driver_share'):.2f}", f"{med(rs, 'host_busy'):.2f}",
                     f"{rs[0]['result_bytes_per_task']:,}", f"{med(rs, 'driver_peak_rss_mb'):.0f}"])
    lines.append(_report.table(["slots", "run", "t_pair s", "m", "block", "blocks/task", "tasks", "pairs/s", "ideal",
                        "efficiency", "driver CPU ms/task", "driver CPU ms/result", "driver cores",
                        "host busy", "bytes/task", "driver peak MB"], rows))
    lines.append("\n*run*: `default` = default block size and grouping; `1pair` = one pair per task; "
                 "`gN` = N one-pair blocks per task; `inflight` = `1pair` at 2 000 tasks in flight. "
                 "*driver cores* = driver CPU / wall; *host busy* = the 2-core VM's busy share (all its users).\n")
    lines.append("## Where the time goes (median run of each kind)\n")
    rows = []
    for w, kind, t, rs in _run_groups(widths):
        r = sorted(rs, key=lambda x: x["wall_s"])[len(rs) // 2]
        sw = r["slots"] * r["wall_s"]
        d = r["driver"]
        cc = r["cluster_cpu_s"]
        rows.append([w["width"], kind, f"{t:g}", f"{r['wall_s']:.2f}",
                     f"{r['m'] * r['t_pair'] / sw:.0%}", f"{r['tail_slot_s'] / sw:.0%}",
                     f"{max(0.0, sw - r['m'] * r['t_pair'] - r['tail_slot_s']) / sw:.0%}",
                     f"{r['fixed_s']:.2f}",
                     f"{d['wait_s'] / r['wall_s']:.0%}", f"{d['get_s'] / r['wall_s']:.0%}",
                     f"{d['submit_s'] / r['wall_s']:.0%}", f"{d['consumer_s'] / r['wall_s']:.0%}",
                     f"{r['driver_cpu_s']:.2f}", f"{cc['raylet']:.2f}", f"{cc['gcs']:.2f}", f"{cc['workers']:.2f}",
                     f"{r['host_busy']:.0%}"])
    lines.append(_report.table(["slots", "run", "t_pair", "wall s", "slot time in pairs", "tail", "other lost",
                        "fixed s", "driver: wait", "get", "submit", "reducer+store", "driver CPU s",
                        "raylets CPU s", "GCS CPU s", "workers CPU s", "host busy"], rows))
    lines.append("\n*tail* = slot time idle after the last submission; *other lost* = per-task overhead "
                 "(lease, push, fetch/deserialise, return) and scheduling gaps; driver columns are shares "
                 "of the driver's wall time inside the engine loop.\n")
    lines.append("## Memory and start-up\n")
    lines.append(_report.table(["slots", "nodes × CPUs", "cluster up s", "workers warm-up s", "worker processes",
                        "worker RSS MB (median)", "workers RSS total MB", "driver idle CPU/s",
                        "ray.wait µs per pending ref"],
                       [[w["width"], f"{w['nodes']} × {w['cpus_per_node']}", f"{w['cluster_up_s']:.0f}",
                         " + ".join(f"{x:.1f}" for x in w["warmup_s"]), w["workers"], f"{w['worker_rss_mb_median'] or 0:.0f}",
                         f"{w['worker_rss_mb_total']:.0f}", f"{w['driver_idle_cpu_per_s']:.3f}",
                         f"{1e6 * w['wait_cost']['per_ref_s']:.2f}"] for w in widths]))
    fit = report["model"]["fit"]
    lines.append("\n## Model\n")
    lines.append(f"Fitted over {report['model']['runs_fitted']} runs: driver CPU = c_run + c_task·tasks + "
                 f"c_result·results + c_idle·wall with c_run = {1e3 * fit['c_run']:.1f} ms, c_task = {1e3 * fit['c_task']:.3f} ms, "
                 f"c_result = {1e3 * fit['c_result']:.4f} ms, c_idle = {fit['c_idle']:.3f} s/s "
                 f"(R² = {fit['r2']:.3f}, median relative error {fit['rel_err_median']:.0%}); "
                 f"c_inflight = {1e6 * costs['c_inflight']:.2f} µs per pending ref per task (ray.wait); "
                 f"o_task = {1e3 * costs['o_task']:.1f} ms slot time per task; fixed = {costs['fixed']:.3f} s "
                 "per run (one zero-cost pair per slot, warm workers).\n")
    hf = fit.get("host")
    if hf:
        lines.append(f"Host CPU of all processes = h_run + h_task·tasks + h_pair·m: h_task = {1e3 * hf['h_task']:.2f} ms, "
                     f"h_pair = {1e3 * hf['h_pair']:.3f} ms (R² = {hf['r2']:.3f}); the check below adds this "
                     "2-core host's limit, (tasks·h_task + m·h_pair)/2, which the projection leaves out.\n")
    chk = report["model"]["check"]
    rows = []
    for r in chk:
        rows.append([r["width"], r["kind"], f"{r['t_pair']:g}", r["repeat"], f"{r['measured']:.2f}",
                     f"{r['predicted']:.2f}", r["bound"]])
    lines.append(_report.table(["slots", "run", "t_pair", "repeat", "measured eff.", "model eff.", "model bound"], rows))
    lines.append("\n## Projection: the paper's SVM (n = 1000, d = 8)\n")
    lines.append(f"Per-pair cost of `raydp.targets.svm` (warm-started pair solver) on this machine: "
                 f"{1e3 * svm['t_pair_s']:.2f} ms CPU [{1e3 * svm['t_pair_min_s']:.2f}–{1e3 * svm['t_pair_max_s']:.2f}], "
                 f"per-block CV {svm['block_cv']:.2f} ({svm['pairs_per_block']} pairs per block), single-pair CV "
                 f"{svm['pair_cv_est']:.2f} ({svm.get('pairs_timed', 0)} pairs timed one by one).\n")
    rows = []
    for r in report["projection"]:
        rows.append([r["gamma"], f"{r['m']:,}", f"{r['core_hours']:.2f}", r["cores"], r["which"], r["block_size"],
                     f"{r['blocks']:,}", f"{r['group']:.3g}", f"{r['tasks']:,}", f"{r['task_s']:.2f}",
                     f"{r['wall_s']:.1f}", f"{r['efficiency']:.2f}", r["bound"], f"{r['max_slots']:,.0f}"])
    lines.append(_report.table(["γ", "m", "core-hours", "cores", "block size", "pairs/block", "blocks", "blocks/task",
                        "tasks", "task s", "wall s", "efficiency", "bound", "max slots one driver keeps busy"], rows))
    lines.append("\nWidest cluster with projected efficiency ≥ 0.9 at the default block size: " + ", ".join(
        f"γ = {g}: {report['best_width'][str(g)]} cores" for g in GAMMAS) + ".\n")
    cl = report.get("cloud")
    if cl:
        a = cl["assumption"]
        lines.append(f"## Cloud: the SVM at γ = 0.001 on {a['worker']} workers ({a['worker_vcpus']} vCPUs = slots)\n")
        lines.append(f"Assumption: on-demand ${a['worker_usd_h']}/h per {a['worker']}, ${a['head_usd_h']}/h for the "
                     f"{a['head']} head (AWS us-west-2 list prices; check current ones), every node billed for "
                     f"{a['boot_min']:g} min boot + the run + {a['idle_min']:g} min idle timeout, one slot per vCPU at "
                     "the per-pair cost measured here.\n")
        lines.append(_report.table(["workers", "slots", "projected wall", "efficiency", "cost per run", "compute alone"],
                           [[r["workers"], r["slots"], f"{r['wall_s'] / 60:.1f} min", f"{r['efficiency']:.2f}",
                             f"${r['usd']:.2f}", f"${r['usd_compute_only']:.2f}"] for r in cl["rows"]]))
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- expensive targets
WIDE = dict(nodes=2, cpus_per_node=32, m=1305, t_eval=0.1, setup_s=2.0)


@contextlib.contextmanager
def _grouping(which: str | None):
    """``"1s-tasks"``: a time-capped grouping (at most 1 s of blocks and
    ⌈left/(4·slots)⌉ a task, one block per task until a block came back) for this run; None: the default."""
    from raydp.engine import ray as ray_engine

    if which is None:
        yield
        return
    assert which == "1s-tasks", which
    default = ray_engine.GuidedGroups

    class OneSecondTasks(default):
        def __init__(self, blocks, slots, per_slot=1, task_seconds=None, block_seconds=None):
            super().__init__(blocks, slots, per_slot=4, task_seconds=1.0, block_seconds=None)

    ray_engine.GuidedGroups = OneSecondTasks
    try:
        yield
    finally:
        ray_engine.GuidedGroups = default


@contextlib.contextmanager
def _last_wave(on: bool):
    """Backup copies for the last wave (the MapReduce rule, :data:`raydp.engine.ray.LAST_WAVE_FACTOR`)
    for this run: once nothing is left to hand out, a task past its expected time gets a copy on an idle
    slot."""
    from raydp.engine import ray as ray_engine

    saved = ray_engine.LAST_WAVE_FACTOR
    ray_engine.LAST_WAVE_FACTOR = 1.0 if on else saved
    try:
        yield
    finally:
        ray_engine.LAST_WAVE_FACTOR = saved


WIDE_KINDS = ("default", "no-backups", "last-wave", "1s-tasks", "m/256-blocks", "setup")


def wide_driver(config_path: str) -> int:
    """Driver of ``--wide-case``: warm every slot, then take turns: the default, the time-capped grouping
    (``1s-tasks``), coarse blocks (``m/256-blocks``: blocks of ⌈m/256⌉ = 6 pairs, one block per task) and a
    target with a 2 s ``setup()``."""
    import ray

    import raydp
    from raydp import oracles
    from raydp.engine import ray as ray_engine

    with open(config_path) as f:
        cfg = json.load(f)
    address, m, t = cfg["address"], WIDE["m"], WIDE["t_eval"]
    backend = raydp.RayBackend(address=address)
    backend.connect()
    slots = backend.slots()
    for _ in range(6):  # warm-up: every slot gets a worker that has imported raydp
        t0 = time.perf_counter()
        raydp.estimate_sensitivity(Sleeper(2.0), oracles.exponential(1.0), SIM_N, m=slots, k=slots, seed=1,
                                   block_size=1, backend=raydp.RayBackend(address=address, group_size=1),
                                   progress=False)
        if time.perf_counter() - t0 < 3.0:
            break
    runs = {"default": {}, "no-backups": dict(backup_tasks=False), "last-wave": dict(last_wave=True),
            "1s-tasks": dict(grouping="1s-tasks"), "m/256-blocks": dict(block_size=-(-m // 256), group=1), "setup": {}}
    runs = {kind: runs[kind] for kind in cfg.get("kinds") or WIDE_KINDS}
    out = {"slots": slots, "m": m, "t_eval": t, "runs": []}
    ideal = 2 * m * t / slots
    with tempfile.TemporaryDirectory(prefix="wide-setup-") as setup_root:
        for rep in range(cfg["repeats"]):
            for kind in (runs if rep % 2 == 0 else list(reversed(runs))):
                spec = runs[kind]
                target = SleepyEval(t)
                if kind == "setup":
                    setup_dir = os.path.join(setup_root, str(rep))
                    os.makedirs(setup_dir)
                    target = HeavySetup(t, WIDE["setup_s"], setup_dir)
                be = raydp.RayBackend(address=address, group_size=spec.get("group"),
                                      backup_tasks=spec.get("backup_tasks"))
                t0 = time.perf_counter()
                with _grouping(spec.get("grouping")), _last_wave(spec.get("last_wave", False)):
                    est = raydp.estimate_sensitivity(target, oracles.exponential(1.0), SIM_N, m=m, k=m, seed=rep,
                                                     block_size=spec.get("block_size"), backend=be, progress=False)
                wall = time.perf_counter() - t0
                stats = ray_engine.last_stats()
                done = sorted(stats.done)
                row = dict(kind=kind, repeat=rep, wall_s=wall, efficiency=ideal / wall, block_size=est.block_size,
                           tasks=stats.groups, engine_wall_s=stats.wall_s,
                           # where the time went: outside the engine (probe, plan, set-up), to the first
                           # result, to the last; blocks' own seconds against the slot time
                           outside_s=wall - stats.wall_s, first_done_s=done[0] if done else None,
                           last_done_s=done[-1] if done else None,
                           slot_busy=stats.busy_s / (slots * stats.wall_s) if stats.wall_s else None,
                           backups=stats.backups, backups_won=stats.backups_won, duplicates=stats.duplicates)
                if kind == "setup":
                    files = os.listdir(setup_dir)
                    pids = {f.split("-")[1] for f in files}
                    row.update(setups=len(files), setup_processes=len(pids),
                               # the driver sets up once too (before its probe): workers = the rest
                               setup_s_paid=len(files) * WIDE["setup_s"])
                out["runs"].append(row)
                print(f"  {kind:10s} rep {rep}: wall {wall:5.2f} s, efficiency {row['efficiency']:.3f}, "
                      f"block {row['block_size']}, tasks {row['tasks']}, backups {row['backups']} "
                      f"(won {row['backups_won']})"
                      + (f", set-ups {row['setups']} in {row['setup_processes']} processes" if kind == "setup" else ""),
                      file=sys.stderr, flush=True)
    with open(cfg["result"], "w") as f:
        json.dump(out, f)
    ray.shutdown()
    return 0


def wide_case(args) -> dict:
    """The expensive-target case on one 2 × 32-slot loopback cluster; returns the report."""
    from raydp.local_cluster import LocalCluster

    env = dict(NODE_ENV, PYTHONPATH=os.pathsep.join([REPO, HERE]))
    report = dict(_report.start("scale_sim", sys.argv[1:]), case=WIDE)
    with LocalCluster(workers=WIDE["nodes"] - 1, cpus_per_node=WIDE["cpus_per_node"], extra_env=env,
                      object_store_bytes=OBJECT_STORE_BYTES) as c:
        report.update(run_driver(c, env, "_wide_driver", dict(address=c.address, repeats=args.repeats,
                                                              kinds=args.wide_kinds),
                                 args.timeout, "wide-case driver"))
    rows, summary = [], {}
    for kind in [k for k in WIDE_KINDS if any(r["kind"] == k for r in report["runs"])]:
        effs = [r["efficiency"] for r in report["runs"] if r["kind"] == kind]
        r0 = next(r for r in report["runs"] if r["kind"] == kind)
        summary[kind] = dict(median=statistics.median(effs), min=min(effs), max=max(effs))
        extra = ""
        if kind == "setup":
            s = [r for r in report["runs"] if r["kind"] == kind]
            extra = ", ".join(f"{r['setups']} in {r['setup_processes']} processes" for r in s)
        copies = [r.get("backups", 0) for r in report["runs"] if r["kind"] == kind]
        won = [r.get("backups_won", 0) for r in report["runs"] if r["kind"] == kind]
        rows.append([kind, r0["block_size"], r0["tasks"], f"{summary[kind]['median']:.3f}",
                     f"{summary[kind]['min']:.3f}–{summary[kind]['max']:.3f}", len(effs),
                     " ".join(f"{c}/{w}" for c, w in zip(copies, won)), extra])
    report["summary"] = summary
    md = (f"# Expensive targets: {report['slots']} slots ({WIDE['nodes']} loopback nodes × {WIDE['cpus_per_node']} CPUs), "
          f"m = {WIDE['m']}, {1e3 * WIDE['t_eval']:.0f} ms per evaluation, warm workers\n\n"
          + _report.stamp(report) + "\n"
          "efficiency = (2·m·t / slots) / wall. All runs take turns in one driver. `default` has backup copies of "
          "late tasks on (two nodes); `no-backups` = the same with `backup_tasks=False` (no task is tracked, "
          "timed or copied); `last-wave` = the default plus copies for the last wave (once nothing is left to hand "
          "out, a task past its expected time gets a copy on an idle slot); backup copies = copies started / "
          "copies that finished first, per repeat. `1s-tasks` = a time-capped "
          "grouping (at most 1 s and ⌈left/(4·slots)⌉ blocks a task, one block per task until "
          "a block came back); `m/256-blocks` = coarse blocks (⌈m/256⌉ pairs each, one "
          "block per task); `setup` = the default with a 2 s `setup()` "
          "(set-ups counted: the driver's one plus one per worker process that ran a task).\n\n"
          + _report.table(["run", "block size", "tasks", "efficiency (median)", "range", "repeats", "backup copies",
                           "set-ups"], rows)
          + ("" if "default" not in summary else
             f"\n\nGoal: default ≥ 0.9 — {'met' if summary['default']['median'] >= 0.9 else 'NOT met'}.\n"))
    _report.write(args.out, "scale_sim_wide", report, md)
    print(md)
    return report


def plot(report: dict, path: str) -> None:
    from _plots import pyplot

    plt = pyplot()
    costs = Costs(**report["model"]["costs"])
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.6))
    colours = {}
    for w in report["widths"]:
        for r in w["runs"]:
            if r["kind"] not in ("default", "1pair") or not r["t_pair"]:
                continue
            key = (r["kind"], r["t_pair"])
            line = a.plot([r["slots"]], [r["efficiency"]], "o" if r["kind"] == "default" else "s",
                          color=colours.get(key), alpha=0.8,
                          label=None if key in colours else f"{r['kind']}, t_pair = {r['t_pair']:g} s")[0]
            colours.setdefault(key, line.get_color())
    hf = report["model"]["fit"].get("host")
    host = None if not hf else (report.get("host_cores") or os.cpu_count() or 2, hf["h_task"], hf["h_pair"])
    for (kind, t), colour in colours.items():
        pts = sorted((r["slots"], predict(costs, r["m"], t, r["block_size"], r["slots"], r.get("group_size"),
                                          r.get("max_in_flight"), host=host)["efficiency"])
                     for w in report["widths"] for r in w["runs"] if r["kind"] == kind and r["t_pair"] == t
                     and r["repeat"] == 0)
        a.plot([x for x, _ in pts], [y for _, y in pts], "x--", color=colour, lw=0.8, ms=7)
    a.set_xscale("log", base=2)
    a.set_xlabel("slots (simulated: loopback nodes declaring many CPUs)")
    a.set_ylabel("efficiency = pairs/s ÷ (slots / t_pair)")
    a.set_ylim(0, 1.05)
    a.axhline(0.9, color="grey", lw=0.5, ls=":")
    a.set_title("Simulation (dots, squares) and model (x, dashed; with this 2-core host's limit)", fontsize=9)
    a.legend(fontsize=7, loc="lower left")
    svm = report["svm"]
    import raydp
    from raydp.engine.blocks import default_block_size
    cores = np.unique(np.round(np.geomspace(1, 4000, 80)).astype(int))
    for gamma in GAMMAS:
        m = raydp.make_plan(gamma=gamma).m
        bs = default_block_size(SVM["n"], m)
        ys = [predict(costs, m, svm["t_pair_s"], bs, int(c))["efficiency"] for c in cores]
        b.plot(cores, ys, label=f"γ = {gamma} (m = {m:,}, block {bs})")
        ys = [predict(costs, m, svm["t_pair_s"], recommended_block_size(costs, m, svm["t_pair_s"], int(c), SVM["n"]),
                      int(c))["efficiency"] for c in cores[::4]]
        cores_b = cores[::4]
        b.plot(cores_b, ys, "--", color=b.lines[-1].get_color(), lw=1)
    b.set_xscale("log")
    b.set_ylim(0, 1.05)
    b.axhline(0.9, color="grey", lw=0.5, ls=":")
    for c in PROJECT_CORES:
        b.axvline(c, color="grey", lw=0.5, ls=":")
    b.set_xlabel("cores")
    b.set_ylabel("projected efficiency")
    b.set_title(f"SVM n=1000 d=8, {1e3 * svm['t_pair_s']:.1f} ms/pair: default block (—), "
                "block for the width (--)", fontsize=9)
    b.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def finish(report: dict, out: str) -> None:
    if "pairs_timed" not in report["svm"]:  # a report from before single pairs were timed
        report["svm"] = measure_svm_pair(65, 2, 3)
    costs, fit = derive_costs(report["widths"])
    report["model"] = {"costs": asdict(costs), "fit": fit,
                       "runs_fitted": sum(1 for w in report["widths"] for r in w["runs"] if r["kind"] != "inflight"),
                       "check": check_model(costs, report["widths"], fit["host"])}
    report["projection"] = project(costs, report["svm"])
    report["best_width"] = {str(g): best_width(costs, report["svm"], g) for g in GAMMAS}
    report["cloud"] = {"assumption": CLOUD, "rows": cloud_costs(costs, report["svm"])}
    report["expensive"] = expensive_targets(costs)
    md = markdown(report) + "\n" + expensive_markdown(report["expensive"])
    _report.write(out, "scale_sim", report, md)
    plot(report, os.path.join(out, "scale_sim.png"))
    print(md)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_driver"]:
        return driver_main(argv[1])
    if argv[:1] == ["_wide_driver"]:
        return wide_driver(argv[1])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--widths", type=int, nargs="+", default=[8, 16, 32, 64], help="slots in all (default 8 16 32 64)")
    ap.add_argument("--nodes", type=int, default=4, help="nodes per cluster, head included (default 4)")
    ap.add_argument("--pair-costs", type=float, nargs="+", default=[0.01, 0.1, 1.0], help="seconds per pair")
    ap.add_argument("--seconds", type=float, default=8.0, help="ideal length of a default run (default 8 s)")
    ap.add_argument("--repeats", type=int, default=2, help="repeats of every run, taken in turn (default 2)")
    ap.add_argument("--svm-blocks", type=int, default=4, help="blocks of 65 SVM pairs per repeat to time (default 4)")
    ap.add_argument("--port", type=int, help="GCS port (+1 dashboard, +2 client); default: free ports")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per width before giving up")
    ap.add_argument("--out", default=os.path.join(HERE, "results"), help="directory for scale_sim.{json,md,png}")
    ap.add_argument("--quick", action="store_true", help="one 4-slot cluster of 2 nodes, short runs: plumbing only")
    ap.add_argument("--project-only", action="store_true",
                    help="no cluster: redo the model, projection, table and plot from OUT/scale_sim.json")
    ap.add_argument("--wide-case", action="store_true",
                    help="only the expensive-target case: 64 slots, m = 1305, 100 ms per evaluation; default vs no backup "
                         "tasks vs last-wave copies vs earlier layouts vs a 2 s setup(), --repeats times (≈ 4 min): "
                         "scale_sim_wide.{json,md}")
    ap.add_argument("--wide-kinds", nargs="+", choices=WIDE_KINDS, default=list(WIDE_KINDS), metavar="KIND",
                    help=f"with --wide-case: the runs to take turns with (default: all of {' '.join(WIDE_KINDS)})")
    args = ap.parse_args(argv)
    if args.wide_case:
        wide_case(args)
        return 0
    if args.project_only:
        with open(os.path.join(args.out, "scale_sim.json")) as f:
            report = json.load(f)
        finish(report, args.out)
        return 0
    if args.quick:
        args.widths, args.nodes, args.pair_costs, args.seconds, args.repeats, args.svm_blocks = [4], 2, [0.01, 0.2], 1.0, 1, 1
    report = dict(_report.start("scale_sim", argv), node_env=NODE_ENV, object_store_bytes=OBJECT_STORE_BYTES)
    print("svm: timing raydp.targets.svm per pair ...", file=sys.stderr, flush=True)
    report["svm"] = measure_svm_pair(65, args.svm_blocks, 3 if not args.quick else 1)
    report["widths"] = [run_width(w, args.nodes, args) for w in args.widths]
    finish(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
