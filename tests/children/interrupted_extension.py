"""A child process of the store, ledger and filesystem tests (formerly a string in test_hostile.py)."""
import sys, time, raydp
import numpy as np
from raydp import oracles

class Mean:
    calls = 0
    def __call__(self, db):
        Mean.calls += 1
        if Mean.calls > 800:
            time.sleep(5)  # the extension is killed while it sleeps here
        return float(np.mean(db))
    def identity(self):
        return {"name": "mean", "params": {}}

raydp.estimate_sensitivity(Mean(), oracles.exponential(1.0), n=30, m=4000, seed=17, block_size=25,
                           store=sys.argv[1], resume=True, progress=False, flush_rows=25)
