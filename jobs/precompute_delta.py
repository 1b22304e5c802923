"""Precompute Δ̂ for any target and oracle into a Δ store (offline, amortised; reusable by releases).

Δ̂ depends on the target, the oracle, n and the plan, never on the private data: compute it once
here, keep its G sample in a store, and let later releases load it (``raydp release --estimate
URI``, ``raydp.load_estimate(URI, gamma=...)``).

    python jobs/precompute_delta.py                       # example: mean of Exp(1), n=1000, γ=0.05
    python jobs/precompute_delta.py --target raydp.targets:svm --target-args '{"C": 3}' \\
        --oracle raydp.oracles:svm_two_class --oracle-args '{"dim": 8}' --n 1000 --m 1500 \\
        --store out/svm-d8
    ray job submit --working-dir . -- python jobs/precompute_delta.py --gamma 0.01 --store s3://...

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
    ap.add_argument("--block-size", type=int, help="pairs per block (part of the run's identity)")
    ap.add_argument("--store", metavar="URI", help="store: local path or pyarrow URI (default: OUT/precompute-<target>)")
    ap.add_argument("--resume", action="store_true", help="continue or extend the run stored at --store")
    ap.add_argument("--strict", action="store_true", help="stop at the first failing pair instead of counting it")
    ap.add_argument("--plot", metavar="FILE.png", help="also write the empirical CDF of G (needs matplotlib)")
    ap.add_argument("--json", action="store_true", help="print the summary as one JSON line")
    _common.add_common_flags(ap, out_default="out")
    return ap


def main(argv: list[str] | None = None) -> int:
    from raydp.cli import build, build_mechanism
    from raydp.sampler import estimate_sensitivity

    a = make_parser().parse_args(argv)
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
    options = _common.engine_options(a)

    _common.say(a, f"sampling {target_spec} on {oracle_spec}, n={a.n}, {_common.where(a)} -> {store}")
    est = estimate_sensitivity(
        target, oracle, a.n, mechanism=mech, gamma=gamma, m=a.m, k=a.k, seed=a.seed,
        block_size=a.block_size, backend=a.backend, strict=a.strict, progress=not a.quiet,
        store=store, resume=a.resume, **options,
    )
    _common.print_summary(est, uri=store, as_json=a.json)
    if a.plot:
        from raydp import load_estimate
        from raydp.plots import plot_cdf

        plot_cdf(load_estimate(store), a.plot)
        if not a.json:
            print(f"plot         {a.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(_common.run_main(main))
