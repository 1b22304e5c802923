"""A child process of the store, ledger and filesystem tests (formerly a string in test_hostile.py)."""
import sys, raydp
from raydp import oracles, targets
est = raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), n=30, m=2000, seed=17, block_size=25,
                                 store=sys.argv[1], resume=True, progress=False, flush_rows=25)
print(est.sensitivity.hex())
