"""Hanging targets become counted failures (G = +∞), never a stuck job.

``pair_timeout`` interrupts one pair (SIGALRM in the process evaluating it: the driver for the local
backend, a Ray worker for the Ray backend). ``task_timeout`` (Ray) kills a task whose target is
stuck where a signal cannot reach it. Which pairs hang is decided by the records, so the expected
failures are computed independently from the same blocks.

``faulthandler.dump_traceback_later`` ends the test process if a timeout ever fails to fire, so a
regression fails CI instead of stalling it.
"""

from __future__ import annotations

import faulthandler
import math
import signal
import sys
import time

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import raydp  # noqa: E402
from raydp import oracles  # noqa: E402
from raydp.engine.blocks import BlockLayout, block_rng  # noqa: E402
from raydp.errors import EngineError, InvalidArgumentError, InvalidTypeError, TargetError  # noqa: E402

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

N, M, BLOCK, SEED = 5, 240, 20, 99
HANG_ABOVE = 3.5  # a database hangs when its last record exceeds this (Exp(1): p = 3%)
RARE_HANG_ABOVE = 5.5  # for the task-timeout test: only a couple of blocks hang


class Mean:
    def __call__(self, db):
        return float(np.mean(np.asarray(db, dtype=np.float64)))

    def identity(self):
        return {"name": "test_mean", "params": {}}


class Hangs(Mean):
    """Sleeps for an hour on a database whose last record exceeds HANG_ABOVE; swallows Exception
    (as careless targets do) — the timeout must still get through."""

    def __call__(self, db):
        if float(np.asarray(db)[-1]) > HANG_ABOVE:
            try:
                time.sleep(3600)
            except Exception:  # noqa: BLE001 - deliberately careless
                pass
        return super().__call__(db)


class HangsUninterruptibly(Mean):
    """Hangs with SIGALRM blocked — like a C extension that never returns to the interpreter."""

    def __call__(self, db):
        if float(np.asarray(db)[-1]) > RARE_HANG_ABOVE:
            signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])
            time.sleep(3600)
        return super().__call__(db)


class AlwaysHangs(Mean):
    def __call__(self, db):
        time.sleep(3600)


def hanging_pairs(above: float = HANG_ABOVE) -> np.ndarray:
    """Pair indices where D (last record x_n) or D′ (last record x_{n+1}) hangs."""
    out = []
    for b in BlockLayout(M, BLOCK).blocks():
        x = oracles.exponential(1.0).sample(block_rng(SEED, b), BLOCK * (N + 1)).reshape(BLOCK, N + 1)
        p = min(BLOCK, M - b * BLOCK)
        bad = (x[:p, N - 1] > above) | (x[:p, N] > above)
        out.extend(b * BLOCK + np.flatnonzero(bad))
    return np.asarray(out, dtype=int)


@pytest.fixture(scope="module")
def clean():
    return raydp.estimate_sensitivity(Mean(), oracles.exponential(1.0), N, m=M, seed=SEED, block_size=BLOCK,
                                      keep_sample=True, progress=False)


@pytest.fixture(scope="module")
def hangs():
    h = hanging_pairs()
    assert 3 <= h.size <= 30, h.size  # the seed gives a few hanging pairs, not none
    return h


@pytest.fixture(autouse=True)
def watchdog():
    faulthandler.dump_traceback_later(240, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


def _check(est, clean, failed_pairs, kind):
    s = est.sample
    assert np.isinf(s[failed_pairs]).all()
    others = np.setdiff1d(np.arange(M), failed_pairs)
    assert np.array_equal(s[others], clean.sample[others])  # nothing else changed
    assert est.failures == failed_pairs.size
    assert est.failure_kinds == {kind: failed_pairs.size}
    assert est.plan.m == M and s.size == M  # no pair dropped


def test_pair_timeout_in_process(clean, hangs):
    t0 = time.monotonic()
    est = raydp.estimate_sensitivity(Hangs(), oracles.exponential(1.0), N, m=M, seed=SEED, block_size=BLOCK,
                                     keep_sample=True, progress=False, pair_timeout=0.2)
    _check(est, clean, hangs, "timed out")
    assert time.monotonic() - t0 < 0.2 * hangs.size + 30
    assert est.sensitivity == math.inf or est.sensitivity >= clean.sensitivity  # failures only raise Δ̂


def test_pair_timeout_in_ray_workers(ray_session, clean, hangs):
    est = raydp.estimate_sensitivity(Hangs(), oracles.exponential(1.0), N, m=M, seed=SEED, block_size=BLOCK,
                                     keep_sample=True, progress=False, pair_timeout=0.2, backend="ray",
                                     group_size=1)
    _check(est, clean, hangs, "timed out")


def test_task_timeout_kills_a_target_a_signal_cannot_reach(ray_session, clean):
    """SIGALRM is blocked inside the target, so only killing the worker ends it.

    The clock of a task starts when it is submitted and so includes starting a fresh worker after
    a kill (seconds on a loaded machine): the timeout is set well above that, as users should.
    """
    blocks = np.unique(hanging_pairs(RARE_HANG_ABOVE) // BLOCK)
    assert 1 <= blocks.size <= 3, blocks
    failed = np.concatenate([np.arange(b * BLOCK, min(M, (b + 1) * BLOCK)) for b in blocks])
    t0 = time.monotonic()
    est = raydp.estimate_sensitivity(HangsUninterruptibly(), oracles.exponential(1.0), N, m=M, seed=SEED,
                                     block_size=BLOCK, keep_sample=True, progress=False, backend="ray",
                                     group_size=1, task_timeout=8.0)
    _check(est, clean, failed, "task timed out")
    # one 8 s deadline per hanging block, two slots: far below the hour the target would sleep
    assert time.monotonic() - t0 < 8.0 * blocks.size + 60


def test_task_timeout_in_strict_mode_raises(ray_session):
    with pytest.raises(TargetError, match="task_timeout"):
        raydp.estimate_sensitivity(HangsUninterruptibly(), oracles.exponential(1.0), N, m=M, seed=SEED,
                                   block_size=BLOCK, progress=False, backend="ray", group_size=1,
                                   task_timeout=2.0, strict=True)


def test_pair_timeout_in_strict_mode_raises():
    with pytest.raises(TargetError, match="timed out"):
        raydp.estimate_sensitivity(Hangs(), oracles.exponential(1.0), N, m=M, seed=SEED, block_size=BLOCK,
                                   progress=False, pair_timeout=0.1, strict=True)


def test_target_hanging_on_the_probe_is_refused_quickly():
    t0 = time.monotonic()
    with pytest.raises(TargetError, match="pair_timeout"):
        raydp.estimate_sensitivity(AlwaysHangs(), oracles.exponential(1.0), N, m=M, seed=SEED, progress=False,
                                   pair_timeout=0.2)
    assert time.monotonic() - t0 < 10


@pytest.mark.parametrize("bad, error", [(0, InvalidArgumentError), (-1, InvalidArgumentError),
                                        (float("nan"), InvalidArgumentError), (float("inf"), InvalidArgumentError),
                                        ("1", InvalidTypeError), (True, InvalidTypeError)])
def test_bad_pair_timeout(bad, error):
    with pytest.raises(error, match="pair_timeout"):
        raydp.estimate_sensitivity(Mean(), oracles.exponential(1.0), N, m=M, seed=SEED, progress=False,
                                   pair_timeout=bad)


def test_task_timeout_needs_ray():
    with pytest.raises(InvalidArgumentError, match="task_timeout needs the Ray backend"):
        raydp.estimate_sensitivity(Mean(), oracles.exponential(1.0), N, m=M, seed=SEED, progress=False,
                                   backend="local", task_timeout=5)


def test_pair_timeout_off_the_main_thread_is_refused():
    import threading

    box = {}

    def run():
        try:
            raydp.estimate_sensitivity(Mean(), oracles.exponential(1.0), N, m=M, seed=SEED, progress=False,
                                       pair_timeout=1.0)
        except Exception as exc:  # noqa: BLE001
            box["exc"] = exc

    t = threading.Thread(target=run)
    t.start()
    t.join(60)
    assert isinstance(box.get("exc"), EngineError) and "main thread" in str(box["exc"])
