"""A child process of the store, ledger and filesystem tests (formerly a string in test_hostile.py)."""
import sys, time
import numpy as np
from raydp.cli import main

class SlowMean:
    def __call__(self, db):
        time.sleep(0.002)
        return float(np.mean(db))
    def identity(self):
        return {"name": "slow_mean", "params": {}}

sys.modules["slowmod"] = sys.modules[__name__]
sys.exit(main(["estimate", "--target", "slowmod:SlowMean", "--target-args", "{}", "--oracle", "raydp.oracles:exponential",
               "--oracle-args", '{"rate": 1.0}', "--n", "10", "--m", "4000", "--seed", "1", "--block-size", "20", "--quiet",
               "--backend", "local",  # the target lives in this script: Ray workers could not import it
               "--store", sys.argv[1]]))
