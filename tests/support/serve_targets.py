"""Targets the tests of ``raydp serve`` allow-list (importable in the server and in its sandbox).

:func:`sleepy_mean` is the mean of the records that, on a private data set, first sleeps ``scale`` × the mean
of its records: the data sets of those tests start with the record :data:`MARK`, which the oracle never draws,
so sampling and replaying Δ̂ on oracle records never sleeps and only the private evaluation takes a time that
depends on the private data.
"""

from __future__ import annotations

import time

import numpy as np

MARK = -777.0


class SleepyMean:
    def __init__(self, scale: float = 1.0):
        self.scale = float(scale)

    def __call__(self, data):
        data = np.asarray(data, dtype=np.float64)
        if data.size and data.flat[0] == MARK:  # the private data alone
            time.sleep(self.scale * float(np.mean(data[1:])))
        return float(np.mean(data))

    def identity(self) -> dict:
        return {"name": "serve_targets:sleepy_mean", "params": {"scale": self.scale}}


def sleepy_mean(scale: float = 1.0) -> SleepyMean:
    return SleepyMean(scale)


def private_mean_data(mean: float, n: int, seed: int = 0) -> np.ndarray:
    """n records: MARK, then n - 1 values whose mean is exactly ``mean`` (a normal sample, shifted)."""
    x = np.random.default_rng(seed).normal(0.0, 1.0, n - 1)
    x = x - x.mean() + mean
    return np.concatenate([[MARK], x])


class Fragile:
    """The mean; on a private data set (MARK first) it raises an error whose message quotes the data."""

    def __call__(self, data):
        data = np.asarray(data, dtype=np.float64)
        if data.size and data.flat[0] == MARK:
            raise ValueError(f"secret {data[1:].max()!r} {data[1:].sum()!r}")
        return float(np.mean(data))

    def identity(self) -> dict:
        return {"name": "serve_targets:fragile", "params": {}}


def fragile() -> Fragile:
    return Fragile()


class Peek:
    """The mean, plus 1000 when the file ``path`` can be read (and is not empty) where it runs."""

    def __init__(self, path: str):
        self.path = str(path)

    def __call__(self, data):
        try:
            with open(self.path, "rb") as f:
                seen = len(f.read(16)) > 0
        except OSError:
            seen = False
        return float(np.mean(np.asarray(data, dtype=np.float64))) + (1000.0 if seen else 0.0)

    def identity(self) -> dict:
        return {"name": "serve_targets:peek", "params": {"path": self.path}}


def peek(path: str) -> Peek:
    return Peek(path)
