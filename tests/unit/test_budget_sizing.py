"""A time budget sizes m from timings on public probe data, and the run goes where it was sized for.

In process, no Ray: the budgets here are too small for starting Ray to pay (``auto`` keeps the run in
process, and must not start Ray behind the sizing's back).
"""

from __future__ import annotations

import sys
import time

import numpy as np

import raydp
from raydp import SamplerOptions, oracles
from raydp.engine import AutoBackend, RayBackend
from raydp.sampler import CONFIRM_EVALUATIONS, WARM_EVALUATIONS


class SlowFirstCall:
    """The mean of the records; the first call in a process sleeps (one-off imports, caches, a JIT)."""

    def __init__(self, first: float):
        self.first, self.calls = first, 0

    def __call__(self, records):
        self.calls += 1
        if self.calls == 1:
            time.sleep(self.first)
        return np.asarray(records, dtype=np.float64).mean(axis=0)


def test_the_fastest_timed_evaluation_prices_a_pair_not_the_cold_first_call():
    target = SlowFirstCall(first=0.1)
    est = raydp.estimate_sensitivity(target, oracles.normal(dim=1), 20, gamma=0.3,
                                     options=SamplerOptions(seed=0, backend="local", time_budget=10.0,
                                                            pair_timeout=None))
    sizing = est.sizing
    assert sizing["timed_evaluations"] == 1 + WARM_EVALUATIONS  # 5% of 10 s leaves room for every warm call
    # priced by a warm call (micro-seconds), not by the 0.1 s cold one (which would buy 10 / 0.2 = 50 pairs,
    # below the smallest larger plan, 2000): the budget buys a larger plan
    assert sizing["pair_seconds"] < 0.05 and sizing["m"] > sizing["fewest_pairs"]
    assert sizing["where"] == "in process"


def test_a_cold_call_that_eats_the_warm_share_is_confirmed_by_warm_calls_before_a_refusal():
    target = SlowFirstCall(first=0.2)
    est = raydp.estimate_sensitivity(target, oracles.normal(dim=1), 20, gamma=0.3,
                                     options=SamplerOptions(seed=0, backend="local", time_budget=1.0))
    # 5% of a 1 s budget is 0.05 s: the 0.2 s probe already spent it. Priced on it alone the fewest pairs (24 at
    # 0.4 s) would not fit the budget, and a budget is a cap: warm calls are timed before refusing, and price it
    assert est.sizing["timed_evaluations"] == 1 + CONFIRM_EVALUATIONS and est.sizing["pair_seconds"] < 0.05
    assert est.plan.m == est.sizing["m"] and est.sizing["estimated_seconds"] <= 1.0


def test_the_warm_timings_leave_the_sample_alone():
    """Same seed, same m: the G sample is the same whether or not warm evaluations were timed first."""
    oracle = oracles.normal(dim=2)
    f = lambda records: np.asarray(records).mean(axis=0)  # noqa: E731
    sized = raydp.estimate_sensitivity(f, oracle, 30, gamma=0.3, options=SamplerOptions(
        seed=7, backend="local", time_budget=0.5, keep_sample=True))
    plain = raydp.estimate_sensitivity(f, oracle, 30, m=sized.plan.m, k=sized.plan.k,
                                       options=SamplerOptions(seed=7, backend="local", keep_sample=True))
    assert sized.sizing["timed_evaluations"] > 1 and sized.plan.m > raydp.make_plan(gamma=0.3).m
    assert np.array_equal(sized.sample, plain.sample) and sized.sensitivity == plain.sensitivity


def test_auto_sized_for_one_core_stays_in_process():
    """A budget too small for starting Ray to pay is sized for one core in process, and the run stays there
    (before: auto timed its first blocks again and could start Ray after all, as it would here)."""

    def millisecond(records):
        time.sleep(0.001)
        return np.asarray(records, dtype=np.float64).mean(axis=0)

    # local_seconds=0.01: auto on its own would start Ray for anything over 10 ms of work (24 pairs take ~50 ms)
    backend = AutoBackend(ray=RayBackend(num_cpus=2), local_seconds=0.01)
    est = raydp.estimate_sensitivity(millisecond, oracles.normal(dim=1), 10, gamma=0.3,
                                     options=SamplerOptions(seed=0, backend=backend, time_budget=1.0))
    assert est.sizing["where"] == "in process" and est.sizing["slots"] == 1
    assert est.plan.m == est.sizing["fewest_pairs"]  # ~500 affordable pairs: below the next plan (2000)
    assert est.backend.startswith("local")
    ray = sys.modules.get("ray")
    assert ray is None or not ray.is_initialized()
