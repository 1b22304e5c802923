"""Targets used by subprocess tests (importable as ``slow_targets`` with tests/ on PYTHONPATH)."""

import time

import numpy as np


class SlowMean:
    """Mean of the records after a short sleep: slow enough to kill a run halfway."""

    def __init__(self, delay=0.002):
        self.delay = delay

    def __call__(self, db):
        time.sleep(self.delay)
        return float(np.mean(db))

    def identity(self):
        return {"name": "slow_mean", "params": {}}  # delay does not change values


def slow_mean(delay=0.002):
    return SlowMean(delay)
