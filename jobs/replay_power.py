"""Replay with measured power: how often a stale Δ̂ gets through fixed or drawn pairs, and what replay costs.

A stored Δ̂ is reused with the target as it is at release time; the release replays pairs of the sampled
run with that target (in the sealed process that then evaluates the private data) and is refused when a G
differs (:mod:`raydp.engine.witness`).

* **Fixed witnesses**: the ≤ 5 fixed witness pairs (the pair that set Δ̂, the largest G, 3 pairs drawn by the run's
  seed) — emulated here by replaying the estimate's witnesses with their kept records through the same
  sealed process and the same comparison.
* **Drawn at release**: r pairs drawn at release time, from OS entropy, uniformly from all the run's pairs with a finite
  G (r = the pairs that fit in 5 % of the sampling time, at least 30, at most m), and the pair that set Δ̂ —
  ``sample_then_respond`` as a user calls it.

**The power table.** A hostile case: a target (a mean, n = 50, γ = 0.1: m = 285) multiplies its
answer by a factor read from a configuration file; after Δ̂ was sampled the file changes so that a share q
of databases — picked by a hash of the database's bytes — give 1000×. For q = 0.1 and 0.3 and 20 seeds each
(the estimate's seed; the release's pairs are drawn from OS entropy, as in use), the table counts the
stale Δ̂ accepted under each rule, beside the bounds: a change moving G on ≥ q of pairs is accepted with
probability ≤ (1 − q)^r (any change; the statement prints it), and ≤ (1 − q)^(2r) when, as here, the change
hits each of a pair's two databases independently.

**What replay costs.** For a cheap target (the built-in mean, n = 1000, γ = 0.1) a release with
``replay=False`` and one with replay, interleaved ``--repeats`` times: replay's share of the release time,
and of the estimate's own sampling time.

    python jobs/replay_power.py                  # about a minute
    python jobs/replay_power.py --seeds 5 --repeats 3 --out /tmp/rp
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _report  # noqa: E402

import raydp  # noqa: E402
from raydp import oracles, targets  # noqa: E402
from raydp.engine import witness  # noqa: E402
from raydp.errors import EstimateMismatchError  # noqa: E402
from raydp.seal import Sealed  # noqa: E402

N_POWER = 50
N_COST = 1000
SHARES = (0.1, 0.3)


def _in_share(d, share: float) -> bool:
    h = hashlib.sha256(np.ascontiguousarray(d).tobytes()).digest()
    return int.from_bytes(h[:8], "little") / 2.0**64 < share


def config_target(path: str):
    """A mean times a factor read from ``path`` at every call: ``factor`` scales every database, ``factor share``
    only the ``share`` of databases whose hash falls below it."""

    def f(d):
        with open(path) as fh:
            words = fh.read().split()
        factor = float(words[0])
        if len(words) > 1 and not _in_share(d, float(words[1])):
            factor = 1.0
        return np.array([factor * float(np.mean(d))])

    return f


def _before(est, target) -> bool:
    """The fixed-witness rule: the fixed witnesses replayed in the sealed process; True when accepted."""
    plan = witness.fixed(est.witnesses, est.plan.m, "the fixed-witness rule")
    mech = raydp.Laplace(1.0)
    with Sealed() as sealed:
        sealed.load(target, mech, est.n, est.output_dim)
        return witness.run(plan, sealed.replay, scale=est.sensitivity).ok


def power_table(seeds: int, workdir: str) -> list[dict]:
    config = os.path.join(workdir, "config.txt")
    f = config_target(config)
    data = np.random.default_rng(0).exponential(1.0, N_POWER)
    rows = []
    for share in SHARES:
        before = now = 0
        drawn, pairs = set(), set()
        for seed in range(seeds):
            with open(config, "w") as fh:
                fh.write("1")
            est = raydp.estimate_sensitivity(f, oracles.exponential(1.0), N_POWER, gamma=0.1, seed=seed,
                                             progress=False, backend="local")
            with open(config, "w") as fh:
                fh.write(f"1000 {share}")
            before += _before(est, f)
            pairs.add(len(est.witnesses))
            plan_r = witness.replay_count(est.plan.m, est.seconds, est.block_seconds)
            drawn.add(plan_r)
            try:
                raydp.sample_then_respond(data, f, raydp.Laplace(1.0), estimate=est)
                now += 1
            except EstimateMismatchError:
                pass
        r = min(drawn)
        rows.append({"q": share, "seeds": seeds, "m": est.plan.m, "witnesses": sorted(pairs), "r": sorted(drawn),
                     "accepted_before": before, "accepted_now": now,
                     "bound_any_change": (1 - share) ** r, "bound_independent_databases": (1 - share) ** (2 * r),
                     "expected_before_independent": seeds * (1 - share) ** (2 * max(pairs))})
    return rows


def replay_cost(repeats: int) -> dict:
    est = raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), N_COST, gamma=0.1, seed=1,
                                     progress=False, backend="local")
    data = np.random.default_rng(1).exponential(1.0, N_COST)
    mech = raydp.Laplace(1.0)
    raydp.sample_then_respond(data, targets.mean(), mech, estimate=est)  # the template is up
    off, on, inside, pairs = [], [], [], 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        raydp.sample_then_respond(data, targets.mean(), mech, estimate=est, replay=False)
        off.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        r = raydp.sample_then_respond(data, targets.mean(), mech, estimate=est)
        on.append(time.perf_counter() - t0)
        inside.append(r.replay.seconds)
        pairs = r.replay.pairs
    return {"m": est.plan.m, "sampling_seconds": est.seconds, "block_seconds": est.block_seconds,
            "pairs": pairs, "drawn": r.replay.drawn, "off": _report.spread(off), "on": _report.spread(on),
            "replay": _report.spread(inside),
            "share_of_release": [i / o for i, o in zip(inside, on)],
            "share_of_sampling": [i / est.seconds for i in inside]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20, help="estimates per share q")
    ap.add_argument("--repeats", type=int, default=7, help="releases timed with and without replay")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    a = ap.parse_args(argv)
    report = _report.start("replay_power", argv)
    workdir = tempfile.mkdtemp(prefix="raydp-replay-power-")
    sys.path.insert(0, workdir)  # the sandbox shows the caller's sys.path (and empties the rest of /tmp)
    t0 = time.perf_counter()
    try:
        rows = power_table(a.seeds, workdir)
    finally:
        sys.path.remove(workdir)
        shutil.rmtree(workdir, ignore_errors=True)
    power_seconds = time.perf_counter() - t0
    cost = replay_cost(a.repeats)
    report.update(power=rows, cost=cost, power_seconds=power_seconds, share=witness.REPLAY_SHARE,
                  min_replay=witness.MIN_REPLAY, tolerance=witness.TOLERANCE)

    md = _report.header("Replay with measured power", report)
    md += ("\nA stale Δ̂: a target reads a factor from a configuration file, which changes after Δ̂ was sampled "
           "so that a share q of databases (by a hash of their bytes) give 1000×. *Fixed witnesses*: the estimate's "
           "fixed witness pairs replayed (emulated through the same sealed process); *drawn at release*: "
           "`sample_then_respond` as a user calls it — r pairs drawn at release time from all m, and the pair that "
           "set Δ̂. The bounds are per release: a change moving G on ≥ q of pairs gets through with probability "
           "≤ (1 − q)^r (any change), ≤ (1 − q)^(2r) when it hits a pair's two databases independently (this one).\n\n")
    md += _report.table(
        ["q", "estimates", "m", "fixed witnesses", "stale Δ̂ accepted, fixed", "r drawn", "stale Δ̂ accepted, drawn",
         "bound (1 − q)^r", "bound (1 − q)^(2r)"],
        [[f"{row['q']:g}", row["seeds"], row["m"], "/".join(map(str, row["witnesses"])),
          f"{row['accepted_before']} of {row['seeds']}", "/".join(map(str, row["r"])),
          f"{row['accepted_now']} of {row['seeds']}", f"{row['bound_any_change']:.2g}",
          f"{row['bound_independent_databases']:.2g}"] for row in rows])
    md += (f"\n\n{power_seconds:.0f} s for the table ({2 * a.seeds} estimates, each replayed under both rules).\n\n"
           f"What replay costs for a cheap target (the built-in mean, n = {N_COST}, m = {cost['m']}, sampled in "
           f"{cost['sampling_seconds']:.3f} s): {cost['pairs']} pairs replayed ({cost['drawn']} drawn at random "
           f"and the Δ̂ pair), seconds per release, median [min–max] of {a.repeats} interleaved repeats.\n\n")
    md += _report.table(
        ["release, replay=False", "release, replay on", "replay itself", "replay / release",
         "replay / the estimate's sampling time"],
        [[_report.spread_text(cost["off"]["values"], "{:.4f}"), _report.spread_text(cost["on"]["values"], "{:.4f}"),
          _report.spread_text(cost["replay"]["values"], "{:.4f}"),
          _report.spread_text(cost["share_of_release"], "{:.1%}"),
          _report.spread_text(cost["share_of_sampling"], "{:.0%}")]])
    md += (f"\n\nr is the pairs that fit in {witness.REPLAY_SHARE:.0%} of the estimate's sampling time at its own "
           f"seconds per block, at least min({witness.MIN_REPLAY}, m): a run this cheap affords fewer than "
           f"{witness.MIN_REPLAY}, so the floor decides and replay takes more than {witness.REPLAY_SHARE:.0%} of its "
           "sampling time (milliseconds).\n")
    _report.publish(a.out, "replay_power", report, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
