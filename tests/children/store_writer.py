"""A driver that streams a long run into a store, slowly enough to be killed mid-run:
``python store_writer.py URI`` (needs ``tests/support`` on ``PYTHONPATH`` for ``slow_targets``)."""

import sys

import slow_targets

import raydp
from raydp import oracles

raydp.estimate_sensitivity(slow_targets.slow_mean(0.001), oracles.exponential(1.0), n=30, m=2000, gamma=0.05,
                           seed=17, block_size=25, progress=False, store=sys.argv[1], flush_rows=100)
