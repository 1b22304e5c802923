"""Benchmark: raydp against a serial loop, joblib and the machine's limit, side by side in one run.

Six sections; each prints a Markdown table and all of them go to ``--out`` as
``bench.json`` and ``bench.md`` (a run of some sections, ``--sections perpair``, writes
``bench_perpair.{json,md}`` instead, and leaves the full report alone):

0. **first** — time to first result, each a whole fresh process, repeats interleaved: a small run
   (mean of Exp(1), n = 100, γ = 0.05) with the default backend (``auto``: in process, Ray not
   started), and the README's main job ``python jobs/svm_sensitivity.py`` at its default size.
1. **cheap** — the mean of n Exp(1) records, n ∈ {10, 100, 1000}, at γ = 0.01 (m = 41 971) and at
   ``--m-big`` (10⁶) pairs, plus ``--m-huge`` (10⁷) pairs for n = 10, where 10⁶ pairs are only
   0.1 s of work (the serial loop is then timed on 10⁶ pairs). Pairs per second for
   (a) a serial per-pair Python loop, written the way the reference packages do it (one database at
       a time: ``f(D)``, ``f(D′)``, ``|·|``);
   (b) raydp in process (``backend="local"``);
   (c) raydp on Ray with every core of the machine;
   (d) the machine's limit on one core: a hand-written vectorised numpy loop over the same blocks,
       drawing the same records and computing the same means with no framework at all.
   Every row checks that (b), (c) and (d) return exactly the Δ̂ of the serial loop (same seed, same
   blocks, same arithmetic, bit for bit).
1b. **perpair** — a per-pair target (the mean evaluated one database at a time, no ``batch``), n = 100,
   m ∈ {1305, 41 971, 10⁶}: the expensive-target defaults (one pair per block up to m = 2048; guided grouping
   on Ray) against coarse blocks (~256 blocks, fixed grouping), in turn — what a cheap per-pair target
   pays for blocks that let an expensive one spread.
2. **svm** — the paper's SVM (n = 1000, d = 8): seconds for the serial loop, joblib with all cores,
   raydp on Ray with all cores, all three evaluating each pair with two cold libsvm fits; parallel
   efficiency = serial / (cores × raydp) and raydp / joblib. A last row runs raydp's default
   warm-started pair solver (``targets.svm().pair``) for comparison; it agrees with the cold fits to
   libsvm's tolerance, not bit for bit, so its Δ̂ is compared with a tolerance.
3. **scaling** — wall time and driver peak RSS (``VmHWM`` of a fresh driver process per m)
   for the cheap target (n = 10) streaming its G sample to a Parquet store, m over two or more
   orders of magnitude, for the in-process and the Ray backend; the fitted growth exponent
   (slope of log(value) on log(m)).
4. **overheads** — time to first result on an embedded local Ray (a fresh process: ``ray.init``,
   then the first block back), per-task overhead (tiny tasks on Ray against the same blocks in
   process), and the reduce time at the largest m (merging every block result into Δ̂).

Run (≈ 5 minutes on 2 cores)::

    python jobs/bench.py                      # everything, results in jobs/results/
    python jobs/bench.py --sections cheap     # one section
    python jobs/bench.py --quick --out /tmp/b # tiny sizes: checks the plumbing in seconds

Timings are the median of ``--repeats`` runs (after one warm-up below 10⁶ pairs); in the cheap
section (b), (c) and (d) take turns repeat after repeat, so a drift in the machine's speed hits all
three alike. The serial loop runs once. Ray is started before the timed runs; its start-up is
reported under overheads. On a shared 2-core VM single figures move by ±30% between runs: read the
ratios, and rerun before believing one. The machine, date and
command are recorded in the JSON and Markdown.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import _report

import raydp
from raydp import oracles, targets
from raydp.engine.blocks import BlockLayout, BlockResult, PairJob, block_rng, default_block_size

SECTIONS = ("first", "cheap", "perpair", "svm", "scaling", "overheads")


# ----------------------------------------------------------------------------- reference loops
def serial_block(target, oracle, n: int, seed: int, block_size: int, m: int, b: int) -> list[float]:
    """One block of the serial loop: draw the block's records, then per pair f(D), f(D′), ‖·‖₁.

    The records come from raydp's per-block generators (same seed, same blocks), so every G is the
    same number as raydp's.
    """
    p = min(block_size, m - b * block_size)
    recs = np.asarray(oracle.sample(block_rng(seed, b), block_size * (n + 1)))
    x = recs.reshape((block_size, n + 1) + recs.shape[1:])
    gs = []
    for j in range(p):
        row = x[j]
        a = np.ravel(np.asarray(target(row[:n]), dtype=np.float64))
        c = np.ravel(np.asarray(target(np.concatenate([row[: n - 1], row[n:]])), dtype=np.float64))
        gs.append(float(np.sum(np.abs(a - c))))
    return gs


def serial_loop(target, oracle, n: int, m: int, k: int, seed: int, block_size: int) -> float:
    """(a) One pair at a time, as the reference packages do: draw, f(D), f(D′), ‖·‖₁, sort."""
    gs = [g for b in BlockLayout(m, block_size).blocks() for g in serial_block(target, oracle, n, seed, block_size, m, b)]
    gs.sort()
    return gs[k - 1]


def limit_loop(n: int, m: int, k: int, seed: int, block_size: int) -> float:
    """(d) The one-core limit for the mean of Exp(1): the same draws and means, vectorised by hand.

    Only what the answer needs: per block one generator, one draw, the means of D (a view) and of
    D′ (written contiguous, so numpy sums each row in the same order as the serial loop does). D′
    goes into one buffer allocated once, as a careful hand-written loop would: a fresh D′ per block
    is fresh pages, whose faults cost 3-4x the copy at n = 1000 (the limit loop of the 2026-11-22
    README allocated it per block and so measured slower than the limit).
    """
    keep = m - k + 1
    top = np.empty(0)
    d_prime = np.empty((block_size, n))
    for b in BlockLayout(m, block_size).blocks():
        p = min(block_size, m - b * block_size)
        x = block_rng(seed, b).exponential(1.0, size=block_size * (n + 1))[: p * (n + 1)].reshape(p, n + 1)
        dp = d_prime[:p]
        dp[:, : n - 1] = x[:, : n - 1]
        dp[:, n - 1] = x[:, n]
        g = np.abs(x[:, :n].mean(axis=1) - dp.mean(axis=1))
        top = np.concatenate([top, g])
        if top.size > keep:
            top = np.partition(top, top.size - keep)[top.size - keep:]
    return float(top.min())


def draw_floor(n: int, m: int, seed: int, block_size: int) -> int:
    """(e) The true floor: draw every block's records and nothing else (no D′, no target, no reduce).

    Every runner must at least do this; returns the number of records drawn.
    """
    drawn = 0
    for b in BlockLayout(m, block_size).blocks():
        drawn += block_rng(seed, b).exponential(1.0, size=block_size * (n + 1)).size
    return drawn


def breakdown(n: int, m: int, k: int, seed: int, block_size: int, repeats: int = 3) -> dict:
    """Where an in-process run's time goes, phase by phase, over the same blocks and with the engine's
    own code (:class:`raydp.engine.blocks.PairJob`): seconds per run for the generators and draws,
    the D′ copy, the target and norm, compaction + reduce, and the per-run fixed cost (plan, probe,
    identity: an estimate of 10 pairs). Median of ``repeats``."""
    from raydp.engine.reduce import Reducer

    keep = m - k + 1
    job = PairJob(targets.mean(), oracles.exponential(1.0), raydp.Laplace(1.0), n, m, seed, block_size, 1)
    runs = []
    for _ in range(repeats):
        t = dict(draw=0.0, copy=0.0, target=0.0, reduce=0.0)
        reducer = Reducer(job.layout, keep, keep_sample=False)
        clock = time.perf_counter
        for b in job.layout.blocks():
            t0 = clock()
            records, start = job.draw(b)
            t1 = clock()
            d, d_prime = job.neighbours(records)
            t2 = clock()
            g = job._g_batched(d, d_prime, start, {})
            t3 = clock()
            del d, d_prime  # as in run_block: the scratch D′ is free again for the next block
            reducer.add(BlockResult(b, start, g, 0).compacted(keep))
            t4 = clock()
            t["draw"] += t1 - t0
            t["copy"] += t2 - t1
            t["target"] += t3 - t2
            t["reduce"] += t4 - t3
        t0 = clock()
        estimate(n, 10, 10, seed, "local")
        t["fixed"] = clock() - t0
        runs.append(t)
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


class ColdSVM:
    """The SVM target without its warm-started pair solver: two plain libsvm fits per pair."""

    def __init__(self, C: float = 3.0):
        self.svm = targets.svm(C=C)

    def __call__(self, database):
        return self.svm(database)

    def identity(self) -> dict:
        return {"name": "svm-cold", "params": self.svm.identity()["params"]}


def _svm_block(n: int, dim: int, seed: int, block_size: int, m: int, b: int, C: float) -> list[float]:
    """joblib's unit of work: the serial loop over one block (same draws as every other column)."""
    return serial_block(ColdSVM(C), oracles.svm_two_class(dim), n, seed, block_size, m, b)


# ----------------------------------------------------------------------------- helpers
def timed(fn, repeats: int = 1, warmup: bool = False):
    """(median seconds, result of the last run)."""
    if warmup:
        fn()
    times, result = [], None
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def estimate(n, m, k, seed, backend, block_size=None, target=None, oracle=None, **kw):
    return raydp.estimate_sensitivity(
        target or targets.mean(), oracle or oracles.exponential(1.0), n, m=m, k=k, seed=seed,
        block_size=block_size, backend=backend, progress=False, **kw)


def start_ray(cores: int) -> float:
    from raydp.engine.ray import ensure_ray

    t0 = time.perf_counter()
    ensure_ray(None, cores)
    return time.perf_counter() - t0


def slope(xs, ys) -> float:
    """Least-squares slope of log(y) on log(x): the growth exponent."""
    lx, ly = np.log(np.asarray(xs, float)), np.log(np.asarray(ys, float))
    return float(np.polyfit(lx, ly, 1)[0])


def say(args, msg: str) -> None:
    if not args.quiet:
        print(msg, file=sys.stderr, flush=True)


def rate(x: float) -> str:
    return f"{x:,.0f}"


# ----------------------------------------------------------------------------- sections
def cheap_row(args, n: int, m: int, k: int, bs: int) -> dict:
    """One row of the cheap section: (a)-(e) for one (n, m), the equality check, the per-repeat
    ratios (b)/(d) and (b)/(e) with their spread, and where the in-process run's time goes."""
    serial_m = m if args.serial_max is None else min(m, args.serial_max)
    if m > args.m_big:  # the extra Ray row: the serial loop is timed on a prefix of m_big pairs
        serial_m = min(serial_m, args.m_big)
    t_a, g_a = timed(lambda: serial_loop(targets.mean(), oracles.exponential(1.0), n, serial_m,
                                         serial_m if serial_m < m else k, args.seed, bs))
    # (e), (d), (b) and (c) take turns, repeat after repeat, so that a drift in the machine's speed
    # (this is a shared VM) hits all of them alike; each keeps its median, and the ratios are taken
    # within a repeat (neighbours in time) before their median and spread.
    runs = {"e": lambda: draw_floor(n, m, args.seed, bs),
            "d": lambda: limit_loop(n, m, k, args.seed, bs),
            "b": lambda: estimate(n, m, k, args.seed, "local"),
            "c": lambda: estimate(n, m, k, args.seed, "ray")}
    if args.no_ray:
        del runs["c"]
    if m < 10**6:
        for fn in runs.values():  # warm-up (caches, Ray workers); long runs need none
            fn()
    times = {key: [] for key in runs}
    out = {}
    for _ in range(args.repeats):
        for key, fn in runs.items():
            t0 = time.perf_counter()
            out[key] = fn()
            times[key].append(time.perf_counter() - t0)
    med = {key: statistics.median(v) for key, v in times.items()}
    g_d, est_b = out["d"], out["b"]
    est_c = out.get("c", est_b)
    if serial_m < m:  # serial timed on a prefix; its Δ̂ is checked against (b) on that prefix
        ref = estimate(n, serial_m, serial_m, args.seed, "local", block_size=bs).sensitivity
        serial_equal = ref == g_a
        g_ref = g_d
    else:
        serial_equal = True
        g_ref = g_a
    row = {
        "n": n, "m": m, "k": k, "block_size": bs, "blocks": BlockLayout(m, bs).count, "serial_pairs": serial_m,
        "repeats": args.repeats,
        "a_pairs_per_s": serial_m / t_a, "b_pairs_per_s": m / med["b"],
        "c_pairs_per_s": m / med["c"] if "c" in med else None,
        "d_pairs_per_s": m / med["d"], "e_pairs_per_s": m / med["e"],
        "delta": est_b.sensitivity,
        "equal": bool(serial_equal and est_b.sensitivity == g_ref and est_c.sensitivity == g_ref
                   and g_d == g_ref),
        "seconds": times,
    }
    row["b_over_a"] = row["b_pairs_per_s"] / row["a_pairs_per_s"]
    row["b_over_d"] = row["b_pairs_per_s"] / row["d_pairs_per_s"]
    row["b_over_e"] = row["b_pairs_per_s"] / row["e_pairs_per_s"]
    row["c_over_b"] = row["c_pairs_per_s"] / row["b_pairs_per_s"] if "c" in med else None
    row["b_over_d_spread"] = _report.spread([d / b for d, b in zip(times["d"], times["b"])])
    row["b_over_e_spread"] = _report.spread([e / b for e, b in zip(times["e"], times["b"])])
    row["breakdown_s"] = breakdown(n, m, k, args.seed, bs)
    return row


def section_cheap(args, cores: int) -> dict:
    m_small = raydp.make_plan(gamma=0.01)
    rows = []
    for n in args.ns:
        for m in [m_small.m, args.m_big] + ([args.m_huge] if n == min(args.ns) and args.m_huge else []):
            k = m_small.k if m == m_small.m else raydp.make_plan(m=m, gamma=0.01).k
            bs = default_block_size(n, m, batched=True)
            say(args, f"cheap: n={n} m={m} (block {bs}) ...")
            row = cheap_row(args, n, m, k, bs)
            rows.append(row)
            say(args, f"  (a) {rate(row['a_pairs_per_s'])}/s (b) {rate(row['b_pairs_per_s'])}/s "
                      f"(c) {rate(row['c_pairs_per_s'] or 0)}/s (d) {rate(row['d_pairs_per_s'])}/s "
                      f"(e) {rate(row['e_pairs_per_s'])}/s equal={row['equal']}")
    goals = []
    for r in rows:
        goals.append({"goal": f"n={r['n']} m={r['m']}: (b)/(d) >= 0.8", "value": r["b_over_d"], "ok": r["b_over_d"] >= 0.8})
        if r["n"] == 100 and r["m"] == m_small.m:
            goals.append({"goal": "n=100: (b)/(a) >= 10", "value": r["b_over_a"], "ok": r["b_over_a"] >= 10})
        if r["n"] == 10 and r["m"] == m_small.m:
            goals.append({"goal": "n=10: (b)/(a) >= 50", "value": r["b_over_a"], "ok": r["b_over_a"] >= 50})
        if r["m"] >= 10**6 and r["c_over_b"] is not None:
            goals.append({"goal": f"n={r['n']} m={r['m']}: (c)/(b) >= 0.8 x {cores} cores",
                              "value": r["c_over_b"], "ok": r["c_over_b"] >= 0.8 * cores})
        goals.append({"goal": f"n={r['n']} m={r['m']}: every Δ̂ equals the serial loop's", "value": r["equal"],
                          "ok": r["equal"]})

    def sp(d):
        return f"{d['median']:.2f} [{d['min']:.2f}–{d['max']:.2f}]"

    md = _report.table(
        ["n", "m", "block", "(a) serial pairs/s", "(b) raydp local", "(c) raydp Ray", "(d) numpy limit",
         "(e) draw only", "(b)/(a)", "(b)/(d) median [min–max]", "(b)/(e) median [min–max]", "(c)/(b)", "Δ̂ equal"],
        [[r["n"], r["m"], r["block_size"], rate(r["a_pairs_per_s"]), rate(r["b_pairs_per_s"]),
          rate(r["c_pairs_per_s"]) if r["c_pairs_per_s"] else "–", rate(r["d_pairs_per_s"]),
          rate(r["e_pairs_per_s"]), f"{r['b_over_a']:.1f}×", sp(r["b_over_d_spread"]), sp(r["b_over_e_spread"]),
          f"{r['c_over_b']:.2f}" if r["c_over_b"] else "–", "yes" if r["equal"] else "NO"] for r in rows])
    md += (f"\n\nRatios: per repeat ({args.repeats} interleaved repeats), then median [min–max]. "
           "Where an in-process run's time goes (ms per run, engine code phase by phase over the same "
           "blocks, median of 3; fixed = plan + probe + identity, an estimate of 10 pairs):\n\n")
    md += _report.table(["n", "m", "blocks", "draw", "D′ copy", "target + norm", "compact + reduce", "fixed per run",
                 "draw share"],
                [[r["n"], r["m"], r["blocks"]] + [f"{1e3 * r['breakdown_s'][key]:.1f}"
                                                  for key in ("draw", "copy", "target", "reduce", "fixed")]
                 + [f"{r['breakdown_s']['draw'] / sum(r['breakdown_s'].values()):.0%}"] for r in rows])
    return {"rows": rows, "goals": goals, "markdown": md}


class PerPairMean:
    """The mean of the records, evaluated one database at a time (no ``batch``): the cheapest per-pair
    target, where a block's fixed cost weighs most."""

    def __call__(self, database):
        return np.array([np.mean(database)])

    def identity(self) -> dict:
        return {"name": "per-pair-mean", "params": {}}


def old_block_size(n: int, m: int) -> int:
    """Coarse blocks for a per-pair target: about 256 blocks (⌈m / 256⌉, at most 65 536 records)."""
    return max(1, min(65536 // (n + 1), -(-m // 256)))


def old_group_size(blocks: int, slots: int, per_slot: int = 4) -> int:
    """A fixed Ray grouping: one block per task up to per_slot·slots blocks,
    else ⌈blocks / (per_slot · slots)⌉ (its wave-filling refinement left out)."""
    return 1 if blocks <= per_slot * slots else -(-blocks // (per_slot * slots))


def section_perpair(args, cores: int) -> dict:
    """Per-pair targets under the expensive-target defaults (one pair per block up to m = 2048, ~2048 blocks
    above; guided grouping on Ray) against coarse blocks (~256 blocks, fixed grouping), in turn.

    A cheap per-pair target pays the defaults' extra blocks (each ~40-90 µs of seeding and
    bookkeeping); an expensive one (the SVM) gains the parallelism they allow."""
    from raydp.engine.blocks import default_block_size

    n = 100
    ms = [1305, 41971, 10**6] if not args.quick else [1305, 20000]
    rows, goals = [], []
    backends = [("local", "local")] + ([] if args.no_ray else [("ray", "ray")])
    for m in ms:
        new_bs, old_bs = default_block_size(n, m), old_block_size(n, m)
        for label, backend in backends:
            if backend == "ray" and m > 50000:
                continue  # the per-task story is told at the smaller m; 10⁶ cheap pairs on 2 cores is in process
            ratios, t_new, t_old = [], [], []
            for rep in range(args.repeats + 1):  # the first pair of runs is a warm-up
                order = ("new", "old") if rep % 2 == 0 else ("old", "new")
                got = {}
                for which in order:
                    bs = new_bs if which == "new" else old_bs
                    be = backend
                    if backend == "ray" and which == "old":
                        be = raydp.RayBackend(group_size=old_group_size(-(-m // bs), cores))
                    elif backend == "ray":
                        be = raydp.RayBackend()
                    t0 = time.perf_counter()
                    est = estimate(n, m, m, args.seed, be, block_size=bs, target=PerPairMean())
                    got[which] = (time.perf_counter() - t0, est.sensitivity)
                if rep == 0:
                    continue
                t_new.append(got["new"][0])
                t_old.append(got["old"][0])
                ratios.append(got["new"][0] / got["old"][0])
            ratio = statistics.median(ratios)
            rows.append(dict(m=m, backend=label, new_block=new_bs, old_block=old_bs, new_s=statistics.median(t_new),
                             old_s=statistics.median(t_old), ratio=ratio, ratio_min=min(ratios), ratio_max=max(ratios),
                             extra_s=statistics.median(t_new) - statistics.median(t_old)))
            say(args, f"perpair m={m} {label}: default {statistics.median(t_new):.3f}s (block {new_bs}) vs coarse "
                      f"{statistics.median(t_old):.3f}s (block {old_bs}): ratio {ratio:.2f}")
    for r in rows:
        if r["old_s"] >= 2.0:  # runs long enough that a share is what a user feels
            goals.append({"goal": f"per-pair mean, m={r['m']} {r['backend']}: default/coarse time <= 1.10",
                          "value": r["ratio"], "ok": r["ratio"] <= 1.10})
        else:
            goals.append({"goal": f"per-pair mean, m={r['m']} {r['backend']}: default - coarse <= 0.25 s (a run under 2 s)",
                          "value": r["extra_s"], "ok": r["extra_s"] <= 0.25})
    md = _report.table(["m", "backend", "block default / coarse", "default s", "coarse s", "default/coarse (median)", "range",
                        "default − coarse s"],
                       [[f"{r['m']:,}", r["backend"], f"{r['new_block']} / {r['old_block']}", f"{r['new_s']:.3f}",
                         f"{r['old_s']:.3f}", f"{r['ratio']:.2f}", f"{r['ratio_min']:.2f}–{r['ratio_max']:.2f}",
                         f"{r['extra_s']:+.3f}"] for r in rows])
    md += ("\n\nThe cheapest per-pair target (the mean, one database at a time, n = 100), the defaults against "
           "coarse blocks (~256 blocks, fixed grouping) in turn, median of the repeats after a warm-up pair. A run under 2 s is judged by the seconds "
           "it loses, a longer one by the ratio.\n")
    return {"rows": rows, "goals": goals, "markdown": md}


def section_svm(args, cores: int) -> dict:
    from joblib import Parallel, delayed

    n, dim, m, C = args.svm_n, args.svm_dim, args.svm_m, 3.0
    p = raydp.make_plan(m=m, gamma=args.svm_gamma)
    bs = default_block_size(n, m)
    blocks = BlockLayout(m, bs).blocks()
    say(args, f"svm: n={n} d={dim} m={m} k={p.k} block {bs}; serial ...")
    t_serial, g_serial = timed(lambda: serial_loop(ColdSVM(C), oracles.svm_two_class(dim), n, m, p.k,
                                                   args.seed, bs))

    par = Parallel(n_jobs=cores)
    par(delayed(_svm_block)(n, dim, args.seed, bs, min(m, bs), 0, C) for _ in range(cores))  # start workers

    def joblib_run():
        gs = [g for chunk in par(delayed(_svm_block)(n, dim, args.seed, bs, m, b, C) for b in blocks) for g in chunk]
        return sorted(gs)[p.k - 1]

    say(args, "svm: joblib ...")
    t_joblib, g_joblib = timed(joblib_run, args.svm_repeats)
    say(args, "svm: raydp on Ray ...")
    cold = lambda: estimate(n, m, p.k, args.seed, "ray", target=ColdSVM(C),
                            oracle=oracles.svm_two_class(dim))
    cold(); t_ray, est_ray = timed(cold, args.svm_repeats)
    warm = lambda: estimate(n, m, p.k, args.seed, "ray", target=targets.svm(C=C),
                            oracle=oracles.svm_two_class(dim))
    t_warm, est_warm = timed(warm, args.svm_repeats)
    eff = t_serial / (cores * t_ray)
    res = {"n": n, "dim": dim, "m": m, "k": p.k, "block_size": bs, "cores": cores,
               "serial_s": t_serial, "joblib_s": t_joblib, "raydp_s": t_ray, "raydp_warm_s": t_warm,
               "efficiency": eff, "joblib_efficiency": t_serial / (cores * t_joblib), "raydp_over_joblib": t_joblib / t_ray,
               "delta_serial": g_serial, "delta_joblib": g_joblib, "delta_raydp": est_ray.sensitivity,
               "delta_raydp_warm": est_warm.sensitivity,
               "equal": bool(g_serial == g_joblib == est_ray.sensitivity),
               "warm_abs_diff": abs(est_warm.sensitivity - g_serial)}
    goals = [{"goal": "SVM parallel efficiency >= 0.85", "value": eff, "ok": eff >= 0.85},
             {"goal": "SVM raydp no slower than joblib (joblib_s / raydp_s >= 1)", "value": res["raydp_over_joblib"],
                  "ok": res["raydp_over_joblib"] >= 1.0},
             {"goal": "SVM Δ̂ equal: serial, joblib, raydp (cold fits)", "value": res["equal"], "ok": res["equal"]}]
    md = _report.table(["runner", "seconds", "pairs/s", "efficiency", "Δ̂"],
               [["serial loop (1 core)", f"{t_serial:.2f}", f"{m / t_serial:.1f}", "1 (reference)", f"{g_serial:.6g}"],
                [f"joblib, {cores} cores", f"{t_joblib:.2f}", f"{m / t_joblib:.1f}", f"{res['joblib_efficiency']:.2f}",
                 f"{g_joblib:.6g}"],
                [f"raydp Ray, {cores} cores", f"{t_ray:.2f}", f"{m / t_ray:.1f}", f"{eff:.2f}",
                 f"{est_ray.sensitivity:.6g}"],
                [f"raydp Ray, {cores} cores, warm-started pairs", f"{t_warm:.2f}", f"{m / t_warm:.1f}",
                 f"{t_serial / (cores * t_warm):.2f}", f"{est_warm.sensitivity:.6g}"]])
    md += (f"\n\nraydp / joblib speed: {res['raydp_over_joblib']:.2f}×. Δ̂ equal bit for bit (cold fits): "
           f"{'yes' if res['equal'] else 'NO'}; warm-started Δ̂ differs by {res['warm_abs_diff']:.1e}.")
    return {"result": res, "goals": goals, "markdown": md}


_SCALING_CHILD = r"""
import json, sys, time
import raydp
from raydp import oracles, targets
m, backend, uri, cores = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
kw = {}
if backend == "ray":
    from raydp.engine.ray import ensure_ray
    ensure_ray(None, cores)
    kw["num_cpus"] = cores
    raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), 10, m=4000, seed=1, backend=backend,
                               progress=False, **kw)  # start the workers before the clock does
def hwm_mb():  # this process's peak RSS (VmHWM); ru_maxrss would carry the parent's over fork+exec
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) / 1024
base = hwm_mb()
t0 = time.perf_counter()
est = raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), 10, m=m, seed=0,
                                 backend=backend, store=uri, progress=False, **kw)
wall = time.perf_counter() - t0
print(json.dumps(dict(m=m, backend=backend, wall_s=wall, peak_rss_mb=hwm_mb(), rss_before_mb=base,
                      delta=est.sensitivity)))
"""


def section_scaling(args, cores: int) -> dict:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for backend in ("local", "ray"):
            for m in args.scaling_ms:
                say(args, f"scaling: {backend} m={m} ...")
                uri = os.path.join(tmp, f"{backend}-{m}")
                out = subprocess.run([sys.executable, "-c", _SCALING_CHILD, str(m), backend, uri, str(cores)],
                                     capture_output=True, text=True, timeout=1800, check=False)
                if out.returncode != 0:
                    raise RuntimeError(f"scaling child failed: {out.stderr.strip().splitlines()[-1:]}")
                rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    fits, goals = {}, []
    for backend in ("local", "ray"):
        rs = [r for r in rows if r["backend"] == backend]
        ms = [r["m"] for r in rs]
        fits[backend] = {"wall_exponent": slope(ms, [r["wall_s"] for r in rs]),
                             "rss_exponent": slope(ms, [r["peak_rss_mb"] for r in rs]),
                             "rss_growth": rs[-1]["peak_rss_mb"] / rs[0]["peak_rss_mb"] - 1}
        goals.append({"goal": f"driver peak RSS flat in m ({backend}): growth <= 20%",
                          "value": fits[backend]["rss_growth"], "ok": fits[backend]["rss_growth"] <= 0.20})
    md = _report.table(["backend", "m", "wall s", "pairs/s", "driver peak RSS MB"],
               [[r["backend"], r["m"], f"{r['wall_s']:.2f}", rate(r["m"] / r["wall_s"]), f"{r['peak_rss_mb']:.0f}"]
                for r in rows])
    md += "\n\n" + _report.table(["backend", "wall ∝ m^", "RSS ∝ m^", "RSS growth, smallest → largest m"],
                         [[b, f"{f['wall_exponent']:.2f}", f"{f['rss_exponent']:.3f}", f"{100 * f['rss_growth']:+.1f}%"]
                          for b, f in fits.items()])
    return {"rows": rows, "fits": fits, "goals": goals, "markdown": md}


_FIRST_RESULT_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import raydp
from raydp import oracles, targets
from raydp.engine import PairJob, RayBackend
from raydp.engine.ray import ensure_ray
t_import = time.perf_counter() - t0
ensure_ray(None, int(sys.argv[1]))
t_init = time.perf_counter() - t0
job = PairJob(targets.mean(), oracles.exponential(1.0), raydp.Laplace(1.0), 10, 1000, 0, 100, 1)
first = next(iter(RayBackend().run(job, [0])))
t_first = time.perf_counter() - t0
print(json.dumps(dict(import_s=t_import, ray_init_s=t_init - t_import, first_block_s=t_first - t_init,
                      total_s=t_first)))
"""


def section_overheads(args, cores: int) -> dict:
    from raydp.engine import LocalBackend, PairJob, RayBackend
    from raydp.engine.reduce import Reducer

    say(args, "overheads: time to first result (fresh process) ...")
    out = subprocess.run([sys.executable, "-c", _FIRST_RESULT_CHILD, str(cores)], capture_output=True, text=True,
                         timeout=600, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"first-result child failed: {out.stderr.strip().splitlines()[-1:]}")
    first = json.loads(out.stdout.strip().splitlines()[-1])

    say(args, "overheads: per-task overhead ...")
    tasks = args.overhead_tasks
    job = PairJob(targets.mean(), oracles.exponential(1.0), raydp.Laplace(1.0), 10, tasks, 0, 1, 1)
    list(RayBackend(group_size=1).run(job, range(min(tasks, 4 * cores))))  # warm workers
    t_local, _ = timed(lambda: list(LocalBackend().run(job, range(tasks))), 3)
    t_ray, _ = timed(lambda: list(RayBackend(group_size=1, max_in_flight=4 * cores).run(job, range(tasks))), 3)
    per_task = (t_ray - t_local) / tasks

    say(args, "overheads: reduce time at the largest m ...")
    m = max(args.scaling_ms + [args.m_big])
    bs = default_block_size(10, m, batched=True)
    p = raydp.make_plan(m=m, gamma=0.01)
    big = PairJob(targets.mean(), oracles.exponential(1.0), raydp.Laplace(1.0), 10, m, 0, bs, 1)
    results = list(LocalBackend().run(big, big.layout.blocks()))
    compact = [r.compacted(p.keep) for r in results]

    def reduce(blocks, keep_sample):
        reducer = Reducer(big.layout, p.keep, keep_sample=keep_sample)
        for r in blocks:
            reducer.add(r)
        return reducer.finish()

    def reduce_full():
        return reduce(results, True)

    def reduce_compact():
        return reduce(compact, False)

    t_red_full, _ = timed(reduce_full, 3)
    t_red_compact, _ = timed(reduce_compact, 3)
    t_compute = sum(r.seconds for r in results)
    res = {"first_result": first, "per_task_overhead_ms": 1e3 * per_task, "tasks": tasks,
               "local_per_block_ms": 1e3 * t_local / tasks, "ray_per_task_ms": 1e3 * t_ray / tasks,
               "reduce_m": m, "reduce_blocks": len(results), "reduce_full_sample_s": t_red_full,
               "reduce_compacted_s": t_red_compact, "block_compute_s": t_compute}
    md = _report.table(["overhead", "value"], [
        ["fresh process: import raydp", f"{first['import_s']:.2f} s"],
        ["fresh process: start embedded Ray (ray.init on 127.0.0.1)", f"{first['ray_init_s']:.2f} s"],
        ["fresh process: first block back from a Ray task (worker start-up)", f"{first['first_block_s']:.2f} s"],
        ["time to first result, total", f"{first['total_s']:.2f} s"],
        [f"per-task overhead ({tasks} one-pair tasks, Ray − in process)", f"{1e3 * per_task:.2f} ms"],
        [f"reduce at m={m:,} ({len(results)} blocks): full sample kept", f"{t_red_full * 1e3:.1f} ms"],
        [f"reduce at m={m:,}: compacted blocks (Δ̂ only)", f"{t_red_compact * 1e3:.2f} ms"],
        ["for scale: computing those blocks (sum of block times)", f"{t_compute * 1e3:.0f} ms"],
    ])
    return {"result": res, "goals": [], "markdown": md}


_SMALL_RUN_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import raydp
from raydp import oracles, targets
t_import = time.perf_counter() - t0
est = raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), 100, gamma=0.05, seed=0, progress=False)
ray = sys.modules.get("ray")
print(json.dumps(dict(import_s=t_import, total_s=time.perf_counter() - t0, backend=est.backend,
                      ray_started=bool(ray is not None and ray.is_initialized()), delta=est.sensitivity)))
"""


def section_first(args, cores: int) -> dict:
    """Time to first result, each measured as a whole fresh process, repeats interleaved: the small run
    (mean of Exp(1), n = 100, γ = 0.05, default backend) and the README's main job at its default size."""
    job = os.path.join(os.path.dirname(os.path.abspath(__file__)), "svm_sensitivity.py")
    small, main_job, chosen = [], [], set()
    runs = 1 if args.quick else args.repeats
    for i in range(runs):
        say(args, f"first: small run, fresh process ({i + 1}/{runs}) ...")
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", _SMALL_RUN_CHILD], capture_output=True, text=True, timeout=600)
        wall = time.perf_counter() - t0
        if out.returncode != 0:
            raise RuntimeError(f"small-run child failed: {out.stderr.strip().splitlines()[-1:]}")
        child = json.loads(out.stdout.strip().splitlines()[-1])
        small.append(dict(child, wall_s=wall))
        chosen.add(child["backend"].split(" ")[0] + (" (Ray started)" if child["ray_started"] else ""))
        if args.quick:
            continue
        say(args, f"first: README main job, fresh process ({i + 1}/{runs}) ...")
        with tempfile.TemporaryDirectory(prefix="raydp-bench-job-") as d:
            t0 = time.perf_counter()
            done = subprocess.run([sys.executable, job, "--out", d, "--quiet"], capture_output=True, text=True,
                                  timeout=1800)
            main_job.append(time.perf_counter() - t0)
            if done.returncode != 0:
                raise RuntimeError(f"main job failed: {done.stderr.strip().splitlines()[-1:]}")
    walls = [r["wall_s"] for r in small]
    rows = [["small run (mean of Exp(1), n = 100, γ = 0.05), fresh process to Δ̂",
             f"{statistics.median(walls):.2f} s [{min(walls):.2f}–{max(walls):.2f}]", ", ".join(sorted(chosen))],
            ["of which: import raydp", f"{statistics.median(r['import_s'] for r in small):.2f} s", ""]]
    if main_job:
        rows.append(["README main job `python jobs/svm_sensitivity.py` (d = 2 and 8, m = 1500), fresh process",
                     f"{statistics.median(main_job):.1f} s [{min(main_job):.1f}–{max(main_job):.1f}]", "auto"])
    md = _report.table(["time to first result", "median [min–max]", "backend"], rows)
    goals = [{"goal": "small run from a fresh process in under 2 s, Ray not started",
              "value": statistics.median(walls), "ok": statistics.median(walls) < 2.0
              and not any(r["ray_started"] for r in small)}]
    return {"result": {"small": small, "main_job_s": main_job}, "goals": goals, "markdown": md}


# ----------------------------------------------------------------------------- main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sections", default=",".join(SECTIONS), help=f"comma list of {', '.join(SECTIONS)}")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"),
                    help="directory for bench.json and bench.md, or bench_<sections>.* (default: jobs/results)")
    ap.add_argument("--cores", type=int, default=os.cpu_count(), help="CPUs for Ray and joblib (default: all)")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per cell; the median is kept (default 3)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ns", type=int, nargs="+", default=[10, 100, 1000])
    ap.add_argument("--m-big", type=int, default=10**6, help="the large m of the cheap section (default 1e6)")
    ap.add_argument("--m-huge", type=int, default=10**7,
                    help="one more m for the smallest n, where a cheap run lasts long enough for Ray's fixed "
                         "costs to amortise (default 1e7; 0 skips it)")
    ap.add_argument("--serial-max", type=int, default=None,
                    help="time the serial loop on at most this many pairs (default: all m)")
    ap.add_argument("--svm-n", type=int, default=1000)
    ap.add_argument("--svm-dim", type=int, default=8)
    ap.add_argument("--svm-m", type=int, default=800)
    ap.add_argument("--svm-gamma", type=float, default=0.1)
    ap.add_argument("--svm-repeats", type=int, default=1)
    ap.add_argument("--scaling-ms", type=int, nargs="+", default=[10**4, 10**5, 10**6, 10**7])
    ap.add_argument("--overhead-tasks", type=int, default=200)
    ap.add_argument("--no-ray", action="store_true", help="cheap section without the Ray column (c)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: a plumbing check, not a measurement")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    bad = [s for s in sections if s not in SECTIONS]
    if bad:
        ap.error(f"unknown section(s) {', '.join(bad)}; choose from {', '.join(SECTIONS)}")
    if args.cores < 1 or args.repeats < 1:
        ap.error("--cores and --repeats must be >= 1")
    if args.quick:
        args.ns, args.m_big, args.m_huge, args.repeats = [10, 100], 50000, 100000, 1
        args.svm_n, args.svm_dim, args.svm_m, args.svm_gamma = 60, 2, 40, 0.3
        args.scaling_ms, args.overhead_tasks = [5000, 50000], 20

    cores = args.cores
    report = dict(_report.start("bench", argv), sections={})
    if any(s in sections for s in ("cheap", "perpair", "svm", "overheads")):
        report["ray_start_s"] = start_ray(cores)
    for name in sections:
        report["sections"][name] = globals()[f"section_{name}"](args, cores)
        if not args.quiet:
            print(f"\n## {name}\n\n{report['sections'][name]['markdown']}\n", flush=True)
    goals = [g for s in report["sections"].values() for g in s["goals"]]
    report["goals"] = goals
    md = [_report.header("raydp benchmark", report)]
    for name, s in report["sections"].items():
        md.append(f"## {name}\n\n{s['markdown']}\n")
    md.append("## goals\n\n" + _report.table(["goal", "measured", "met"], [
        [g["goal"], f"{g['value']:.3g}" if isinstance(g["value"], float) else g["value"], "yes" if g["ok"] else "**no**"]
        for g in goals]) + "\n")
    # a run of some sections never overwrites the full report: bench_<sections>.{json,md}
    name = "bench" if set(sections) == set(SECTIONS) else "bench_" + "_".join(sections)
    _report.write(args.out, name, report, "\n".join(md))
    if not args.quiet:
        print("## goals\n\n" + md[-1].split("\n", 2)[2])
        print(f"wrote {os.path.join(args.out, name + '.json')} and {name}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
