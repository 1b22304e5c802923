"""Scaling out: the cost model (:mod:`raydp.engine.costmodel`) that ``jobs/scale_sim.py`` fits and projects, the Ray engine's default
grouping of blocks into tasks (:mod:`raydp.engine.grouping`), the default block size, and (marked slow) a
``--quick`` simulation on a real 2-node cluster.

The model's formulas are checked against hand-computed cases; the grouping against the arithmetic it
is built on. Grouping never changes a result: it only decides which blocks share a task
(``tests/statistical/test_golden.py`` holds the results themselves).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

import raydp.engine.costmodel as sim
from raydp.engine.blocks import default_block_size
from raydp.engine.grouping import FixedGroups, GuidedGroups
from paths import JOBS

COSTS = sim.Costs(c_task=1e-3, c_result=2e-5, c_inflight=0.0, o_task=0.0, fixed=0.0)


def test_layout_is_the_engine_default_grouping():
    # the model counts the tasks GuidedGroups makes when the cost of a block is known from the start
    for t_pair, first in ((1e-4, 20), (0.1, 5), (0.04, 12), (1.0, 1)):  # blocks of 1 ms, 1 s, 0.4 s, 10 s
        block_s = 10 * t_pair
        sizes = _drain(GuidedGroups(range(100), slots=5, block_seconds=block_s), block_s)
        assert sizes[0] == first  # ⌈100/5⌉ = 20, unless 5 s of blocks is fewer
        assert sim.layout(1000, 10, 5, t_pair=t_pair) == (100, pytest.approx(100 / len(sizes)), len(sizes))
    assert sim.layout(1000, 10, 5, t_pair=1.0) == (100, 1, 100)  # 10 s blocks: one per task
    assert sim.layout(1000, 10, 5, group_size=7) == (100, 7, 15)


def test_predict_slot_bound_run_is_waves_of_tasks():
    # 64 slots, 256 tasks of 200 pairs at 10 ms: exactly four waves of 2 s, efficiency 1
    p = sim.predict(COSTS, m=256 * 200, t_pair=0.01, block_size=200, slots=64, group_size=1)
    assert (p["blocks"], p["group"], p["tasks"]) == (256, 1, 256)
    assert p["tau_s"] == pytest.approx(2.0)
    assert p["wall_s"] == pytest.approx(8.0) and p["efficiency"] == pytest.approx(1.0)
    assert p["bound"] == "slots"
    # one task more than four waves: a fifth wave of one task
    p = sim.predict(COSTS, m=257 * 200, t_pair=0.01, block_size=200, slots=64, group_size=1)
    assert p["wall_s"] == pytest.approx(10.0)
    assert p["efficiency"] == pytest.approx(257 * 2 / (64 * 10))
    # the default guided groups (2 blocks a task first, then ones) fill the slots just as well
    p = sim.predict(COSTS, m=256 * 200, t_pair=0.01, block_size=200, slots=64)
    assert p["tasks"] < 256 and p["wall_s"] == pytest.approx(8.0) and p["bound"] == "slots"


def test_predict_driver_bound_run():
    # 1 ms per task at the driver and 10 ms tasks: at most ~10 slots kept busy, whatever the width
    p = sim.predict(COSTS, m=20000, t_pair=0.01, block_size=1, slots=1000, group_size=1)
    assert p["bound"] == "driver"
    d = COSTS.c_task + COSTS.c_result
    assert p["wall_s"] == pytest.approx(20000 * d + 0.01)
    assert p["max_slots"] == pytest.approx(0.01 / d)
    assert p["efficiency"] == pytest.approx(20000 * 0.01 / (1000 * p["wall_s"]))


def test_max_slots_solves_the_quadratic_with_in_flight_cost():
    c = sim.Costs(c_task=1e-3, c_result=0.0, c_inflight=1e-6, o_task=0.0, fixed=0.0)
    s = sim.max_slots(c, t_pair=1.0, block_size=1, g=1)
    # S · (c_task + c_inflight · 2S) = τ
    assert s * (1e-3 + 1e-6 * 2 * s) == pytest.approx(1.0)
    assert s < sim.max_slots(COSTS, 1.0, 1, 1)  # the in-flight scan can only lower it


def test_task_time_spread_adds_a_tail():
    a = sim.predict(COSTS, m=4000, t_pair=0.1, block_size=10, slots=100)
    b = sim.predict(COSTS, m=4000, t_pair=0.1, block_size=10, slots=100, cv_task=0.1)
    assert b["wall_s"] == pytest.approx(a["wall_s"] + a["tau_s"] * 0.1 * math.sqrt(2 * math.log(100)))


def test_fit_costs_recovers_known_costs():
    runs = []
    for tasks, results, wall in [(10, 10, 1.0), (1000, 1000, 5.0), (100, 3200, 2.0), (500, 4000, 9.0), (50, 50, 3.0)]:
        cpu = 0.05 + 1e-3 * tasks + 3e-5 * results + 0.01 * wall
        runs.append(dict(tasks=tasks, results=results, wall_s=wall, driver_cpu_s=cpu))
    fit = sim.fit_costs(runs)
    assert fit["c_run"] == pytest.approx(0.05) and fit["c_task"] == pytest.approx(1e-3)
    assert fit["c_result"] == pytest.approx(3e-5) and fit["c_idle"] == pytest.approx(0.01)
    assert fit["r2"] == pytest.approx(1.0)


def test_tail_loss_counts_idle_slots_after_the_last_submission():
    # 2 slots, 3 tasks submitted at 0, done at 1, 1 and 2: after the last submission (t=0), slots idle
    # are 0 until t=1, then 1 slot idle for one second -> 1 slot-second
    assert sim.tail_loss([0.0, 0.0, 0.0], [1.0, 1.0, 2.0], slots=2, end=2.0) == pytest.approx(1.0)
    assert sim.tail_loss([0.0, 0.0], [1.0, 1.0], slots=2, end=1.0) == pytest.approx(0.0)
    assert sim.tail_loss([], [], slots=4, end=1.0) == 0.0


@pytest.mark.slow
def test_recommended_block_size_is_within_the_records_cap_and_no_worse_than_default():
    from raydp.engine.blocks import default_block_size

    for m, slots in [(41971, 100), (1305, 100), (5486187, 1000)]:
        bs = sim.recommended_block_size(COSTS, m, 0.01, slots, 1000)
        assert 1 <= bs <= 65536 // 1001
        best = sim.predict(COSTS, m, 0.01, bs, slots)["efficiency"]
        assert best >= sim.predict(COSTS, m, 0.01, default_block_size(1000, m), slots)["efficiency"] - 1e-12


def test_wave_fill():
    assert sim.wave_fill(646, 100, 1) == pytest.approx(646 / 700)
    assert sim.wave_fill(646, 100, 2) == pytest.approx(646 / 800)


def _drain(groups, seconds_per_block):
    sizes = []
    while groups:
        g = groups.take()
        sizes.append(len(g))
        groups.observe(len(g), len(g) * seconds_per_block)
    return sizes


def test_guided_groups_give_every_block_once_in_order():
    for per_block in (0.0, 1e-5, 0.01, 5.0):
        for per_slot in (1, 4):
            g = GuidedGroups(range(1000), slots=7, per_slot=per_slot)
            out = []
            while g:
                part = g.take()
                out += part
                g.observe(len(part), len(part) * per_block)
            assert out == list(range(1000))


def test_guided_groups_one_block_per_task_for_an_expensive_target():
    # m = 1305 one-pair blocks of 10 s or more (a model fit): 1305 tasks, never capped by grouping
    for seconds in (10.0, 120.0):
        assert _drain(GuidedGroups(range(1305), slots=64), seconds) == [1] * 1305
        assert _drain(GuidedGroups(range(1305), slots=64, block_seconds=seconds), seconds) == [1] * 1305
    # blocks of 1 s share tasks of up to 5 s, but never so few tasks that a slot idles: on 1000 slots
    # the first tasks hold 2 blocks (⌈1305/1000⌉), then ones — at least one task per slot
    sizes = _drain(GuidedGroups(range(1305), slots=1000, block_seconds=1.0), 1.0)
    assert max(sizes) == 2 and len(sizes) >= 1000


def test_guided_groups_on_the_issue_20_case():
    # 1305 blocks of 0.2 s on 64 slots, the cost known from the probe: ⌈left/64⌉ a task (21 first,
    # under the 5 s cap of 25), shrinking to ones at the end; far fewer tasks than before (699)
    sizes = _drain(GuidedGroups(range(1305), slots=64, block_seconds=0.2), 0.2)
    assert sizes[0] == 21 and sizes == sorted(sizes, reverse=True) and sizes[-64:] == [1] * 64
    assert sum(sizes) == 1305 and 64 < len(sizes) < 300
    assert len(sizes) == sim.guided_tasks(1305, 64, 0.2)  # the cost model counts the same tasks
    # without a guess the first task holds one block, then the same rule
    sizes = _drain(GuidedGroups(range(1305), slots=64), 0.2)
    assert sizes[0] == 1 and sizes[1] == 21


def test_guided_tasks_counts_what_one_task_at_a_time_counts():
    # guided_tasks counts a run of equal groups at once; it must give what taking one group at a time
    # gives, on small and wide clusters, cheap and expensive blocks, and with the sampler's own
    # GuidedGroups (its cost known from the start)
    import numpy as np

    def one_at_a_time(blocks, slots, block_seconds, per_slot=1):
        tasks, left = 0, blocks
        while left > 0:
            left -= min(left, sim.guided_group(left, slots, block_seconds, per_slot))
            tasks += 1
        return tasks

    rng = np.random.default_rng(7)
    cases = [(1, 1, 0.0), (1305, 64, 0.2), (100_000, 8, 1e-3), (50_000, 2000, 1e-4), (7, 3, 10.0)]
    cases += [(int(rng.integers(1, 20_000)), int(rng.integers(1, 300)), float(10 ** rng.uniform(-5, 1)))
              for _ in range(200)]
    for blocks, slots, seconds in cases:
        for per_slot in (1, 2):
            assert sim.guided_tasks(blocks, slots, seconds, per_slot) == one_at_a_time(blocks, slots, seconds, per_slot)
    for blocks, slots, seconds in cases[:40]:
        assert sim.guided_tasks(blocks, slots, seconds) == len(
            _drain(GuidedGroups(range(blocks), slots=slots, block_seconds=seconds), seconds))


def test_guided_groups_grow_for_a_cheap_target_and_shrink_at_the_end():
    sizes = _drain(GuidedGroups(range(100_000), slots=8), 1e-3)  # 1 ms a block
    assert sizes[0] == 1  # nothing measured yet
    assert max(sizes) == 5000  # 5 s of blocks per task (the balance cap, 12 500, does not bind yet)
    assert sizes[-1] == 1 and sizes == sizes[:1] + sorted(sizes[1:], reverse=True)  # guided: shrinking
    assert len(sizes) < 200  # far fewer tasks than blocks
    # the balance cap: never more than ⌈left / (per_slot · slots)⌉ blocks in a task
    g = GuidedGroups(range(100), slots=10, per_slot=2, block_seconds=1e-6)
    assert len(g.take()) == 5
    g = GuidedGroups(range(100), slots=10, block_seconds=1e-6)
    assert len(g.take()) == 10


def test_cost_model_guided_slot_bound():
    # the guided layout keeps slots busy to within one block: 1305 blocks of 0.2 s on 64 slots take
    # ⌈1305/64⌉ = 21 block times, not waves of the mean task
    c = sim.Costs(c_task=1e-9, c_result=0.0, c_inflight=0.0, o_task=0.0, fixed=0.0)
    p = sim.predict(c, 1305, 0.2, 1, 64)
    assert p["wall_s"] == pytest.approx(21 * 0.2) and p["tasks"] == sim.guided_tasks(1305, 64, 0.2)
    # one pair per task for an expensive target: the same waves as a fixed group of one
    assert sim.predict(c, 1305, 120.0, 1, 64)["wall_s"] == pytest.approx(sim.predict(c, 1305, 120.0, 1, 64, 1)["wall_s"])


def test_fixed_groups():
    g = FixedGroups(range(10), 4)
    assert [g.take(), g.take(), g.take()] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]] and not g


def test_default_block_size_lets_a_per_pair_target_spread():
    # issue 20: per-pair targets get one pair per block up to m = 2048, then about 2048 blocks
    assert default_block_size(10, 1305) == 1
    assert default_block_size(1000, 2048) == 1 and default_block_size(1000, 2049) == 2
    assert default_block_size(10, 41971) == 21
    assert default_block_size(1000, 5_486_187) == 65536 // 1001  # the records cap
    # batched targets keep theirs
    assert default_block_size(100, 41971, batched=True) == 1297


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.subprocess
def test_scale_sim_quick_on_a_real_cluster(tmp_path):
    """The whole simulation at toy size: a 2-node loopback cluster of 4 slots, every kind of run,
    the model fitted and checked, the projection, the table and the plot."""
    job = JOBS / "scale_sim.py"
    p = subprocess.run([sys.executable, str(job), "--quick", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    report = json.loads((tmp_path / "scale_sim.json").read_text())
    (w,) = report["widths"]
    assert w["slots"] == 4 and w["workers"] >= 4
    kinds = {r["kind"] for r in w["runs"]}
    assert kinds == {"default", "1pair", "g8", "g32", "null", "inflight"}
    for r in w["runs"]:
        assert r["failures"] == 0 and r["tasks"] >= 1 and r["driver_cpu_s"] > 0
        assert r["driver"]["results"] == r["tasks"]
        if r["t_pair"]:
            assert 0 < r["efficiency"] <= 1.05
    assert len(report["projection"]) == 3 * 2 * 2
    assert (tmp_path / "scale_sim.png").stat().st_size > 10_000
    md = (tmp_path / "scale_sim.md").read_text()
    assert "## Projection" in md and "## Where the time goes" in md


class _SlowEval:
    """A per-pair target (no ``batch``) of about 30 ms per evaluation."""

    def __call__(self, database):
        import time

        time.sleep(0.03)
        return float(sum(database)) / len(database)

    def identity(self):
        return {"name": "slow-eval-test"}


def test_the_probe_time_sizes_the_first_tasks():
    # the driver's timed probe (one draw, one evaluation) guesses a block's cost, so the first Ray
    # tasks need not be one block each (issue 20: 128 one-block tasks at the start of the 64-slot case)
    import raydp
    from raydp import oracles, targets
    from raydp.sampler import resolve_run

    run = resolve_run(_SlowEval(), oracles.exponential(1.0), 10, plan=raydp.make_plan(gamma=0.05),
                      options=raydp.SamplerOptions(seed=1, block_size=2))
    job = run.job
    assert 0.03 <= job.probe_seconds < 1.0
    assert job.block_seconds_guess() == pytest.approx(2 * job.probe_seconds * 2)  # a pair is two evaluations
    guess = job.block_seconds_guess()
    first = GuidedGroups(range(1305), slots=64, block_seconds=guess).take()
    # ⌈1305/64⌉ = 21 or 5 s of guessed blocks, whichever is fewer (a loaded machine's probe is slower) — not 1
    assert len(first) == min(21, math.floor(5.0 / guess)) and len(first) > 1
    # a batched target's pairs cost far less than an evaluation each: no guess, one block first
    batched = resolve_run(targets.mean(), oracles.exponential(1.0), 10, plan=raydp.make_plan(gamma=0.05),
                          options=raydp.SamplerOptions(seed=1))
    assert batched.job.probe_seconds is not None and batched.job.block_seconds_guess() is None
