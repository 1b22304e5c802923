"""Scaling out: the cost model (:mod:`raydp.engine.costmodel`) that ``jobs/scale_sim.py`` fits and projects, the Ray engine's default
grouping of blocks into tasks, and (marked slow) a ``--quick`` simulation on a real 2-node cluster.

The model's formulas are checked against hand-computed cases; the grouping against the wave
arithmetic it is built on. Neither may change a result: grouping only decides which blocks share a
task (``tests/test_golden.py`` holds the results themselves).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

import raydp.engine.costmodel as sim
from raydp.engine.ray import default_group_size, wave_fill
from paths import JOBS

COSTS = sim.Costs(c_task=1e-3, c_result=2e-5, c_inflight=0.0, o_task=0.0, fixed=0.0)


def test_layout_is_the_engine_default_grouping():
    assert sim.layout(1000, 10, 5) == (100, 5, 20)  # 100 blocks, ⌈100/(4·5)⌉ = 5 per task, 20 tasks
    # 101 blocks: 6 per task would leave the 4th wave 2/5 full (0.84 of slot time); 3 per task fill 7 waves (0.96)
    assert sim.layout(1001, 10, 5) == (101, 3, 34)
    assert sim.layout(10, 1, 8) == (10, 1, 10)  # fewer blocks than 4 per slot: one block per task
    assert sim.layout(1000, 10, 5, group_size=7) == (100, 7, 15)


def test_predict_slot_bound_run_is_waves_of_tasks():
    # 64 slots, 256 tasks of 200 pairs at 10 ms: exactly four waves of 2 s, efficiency 1
    p = sim.predict(COSTS, m=256 * 200, t_pair=0.01, block_size=200, slots=64)
    assert (p["blocks"], p["group"], p["tasks"]) == (256, 1, 256)
    assert p["tau_s"] == pytest.approx(2.0)
    assert p["wall_s"] == pytest.approx(8.0) and p["efficiency"] == pytest.approx(1.0)
    assert p["bound"] == "slots"
    # one task more than four waves: a fifth wave of one task
    p = sim.predict(COSTS, m=257 * 200, t_pair=0.01, block_size=200, slots=64, group_size=1)
    assert p["wall_s"] == pytest.approx(10.0)
    assert p["efficiency"] == pytest.approx(257 * 2 / (64 * 10))


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


def test_recommended_block_size_is_within_the_records_cap_and_no_worse_than_default():
    from raydp.engine.blocks import default_block_size

    for m, slots in [(41971, 100), (1305, 100), (5486187, 1000)]:
        bs = sim.recommended_block_size(COSTS, m, 0.01, slots, 1000)
        assert 1 <= bs <= 65536 // 1001
        best = sim.predict(COSTS, m, 0.01, bs, slots)["efficiency"]
        assert best >= sim.predict(COSTS, m, 0.01, default_block_size(1000, m), slots)["efficiency"] - 1e-12


@pytest.mark.parametrize("blocks,slots,per_slot", [(646, 100, 4), (84403, 1000, 4), (84403, 100, 4), (10, 4, 4),
                                                   (256, 64, 4), (200, 4, 4), (461, 4, 2), (5000, 3, 2)])
def test_default_group_size_fills_waves_at_least_as_well_as_the_old_rule(blocks, slots, per_slot):
    g = default_group_size(blocks, slots, per_slot)
    old = max(1, math.ceil(blocks / (per_slot * slots)))
    assert 1 <= g <= old  # never fewer than per_slot tasks per slot
    assert wave_fill(blocks, slots, g) >= wave_fill(blocks, slots, old) - 1e-12
    assert wave_fill(blocks, slots, g) <= 1.0


def test_default_group_size_examples():
    assert default_group_size(646, 100) == 1  # 7 waves, 0.92 of slot time, instead of 2 per task: 0.81
    assert wave_fill(646, 100, 1) == pytest.approx(646 / 700)
    assert wave_fill(646, 100, 2) == pytest.approx(646 / 800)
    assert default_group_size(84403, 1000) == 22  # 0.96: within 5% of the best (17 per task, 0.99), fewer tasks
    assert default_group_size(84403, 1000, tolerance=0.02) == 17
    assert default_group_size(3, 8) == 1


@pytest.mark.slow
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
