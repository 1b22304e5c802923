"""The small sampling run the store, ledger and fault tests share: the mean of n = 30 Exp(1) records,
m = 2000 pairs in blocks of 25, seed 17 — 80 blocks, under a second in process."""

from __future__ import annotations

import raydp
from raydp import oracles, targets

KW = dict(n=30, m=2000, seed=17, block_size=25, progress=False)
MARK = 7777.123456789  # a "private" value that must never appear in any output
MARK_TEXT = "7777.12"
EST_ARGS = ["estimate", "--target", "raydp.targets:mean", "--oracle", "raydp.oracles:exponential",
            "--oracle-args", '{"rate": 1.0}', "--n", "30", "--m", "2000", "--seed", "17", "--block-size", "25",
            "--quiet"]


def mean_run(oracle=None, **kw):
    """The shared run, with ``kw`` on top (store=, resume=, m=, ...)."""
    args = dict(KW)
    args.update(kw)
    return raydp.estimate_sensitivity(targets.mean(), oracle or oracles.exponential(1.0), **args)
