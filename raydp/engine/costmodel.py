"""A cost model of the Ray backend: how long a run takes on S slots, and what limits it.

A run of m pairs at t_pair seconds each, in blocks of b pairs grouped g to a task, is T tasks of
τ = g·b·t_pair + o_task seconds. They run in waves on the slots, unless the driver — at d seconds of
its own time per task — cannot hand them out and collect them that fast:

    wall = fixed + max(W·τ + tail,  T·d + τ),   W = ⌈T / S⌉,   d = c_task + g·c_result + c_inflight·in_flight

:class:`Costs` holds the driver's and the slots' per-task costs; ``jobs/scale_sim.py`` measures them on
a simulated wide cluster (:func:`fit_costs`), checks :func:`predict` against every simulated run and
projects to 1 000 cores. The model never decides anything in the engine: the default block size
depends only on the run (n, m, target kind), never on the machine, so a result is reproducible; the
grouping follows measured block times (:mod:`raydp.engine.grouping`) and never changes a result.

>>> c = Costs(c_task=1e-3, c_result=2e-5, c_inflight=0.0, o_task=0.0, fixed=0.0)
>>> round(predict(c, m=256 * 200, t_pair=0.01, block_size=200, slots=64)["efficiency"], 3)
1.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["Costs", "wave_fill", "guided_group", "guided_tasks", "layout", "predict", "max_slots", "driver_seconds_per_task",
           "recommended_block_size", "fit_costs", "fit_host", "tail_loss"]


@dataclass(frozen=True)
class Costs:
    """The model's parameters, all in seconds.

    - ``c_task``: driver CPU per task (submit, wait, get, Ray's owner-side bookkeeping);
    - ``c_result``: driver CPU per block result (deserialise, reducer, store, progress);
    - ``c_inflight``: driver CPU per task per task in flight (``ray.wait`` looks at every pending ref);
    - ``o_task``: slot time per task beyond its pairs (lease, push, fetch and deserialise the job,
      return the result);
    - ``fixed``: wall time of a run around its tasks with warm workers (probe, put, first lease, store);
    - ``driver_share``: the share of one core the driver may spend (1: a core of its own).
    """

    c_task: float
    c_result: float
    c_inflight: float
    o_task: float
    fixed: float
    driver_share: float = 1.0


def wave_fill(blocks: int, slots: int, group: int) -> float:
    """Share of slot time in blocks when ``blocks`` equal blocks run ``group`` to a task on ``slots``:
    blocks / (slots · waves · group), waves = ⌈⌈blocks / group⌉ / slots⌉ (a last wave only partly
    full leaves slots idle)."""
    tasks = -(-blocks // group)
    return blocks / (slots * -(-tasks // slots) * group)


def guided_group(blocks: int, slots: int, block_seconds: float, per_slot: int = 1) -> int:
    """The first, largest group of the default :class:`~raydp.engine.grouping.GuidedGroups` once
    blocks are timed: ⌈blocks / (per_slot · slots)⌉, at most about
    :func:`~raydp.engine.grouping.task_seconds` of blocks."""
    from .grouping import task_seconds

    want = math.floor(task_seconds(slots) / block_seconds * (1 + 1e-9)) if block_seconds > 0 else blocks
    return max(1, min(want, -(-blocks // (per_slot * slots))))


def guided_tasks(blocks: int, slots: int, block_seconds: float, per_slot: int = 1) -> int:
    """How many tasks :class:`~raydp.engine.grouping.GuidedGroups` makes of ``blocks`` blocks of
    ``block_seconds`` each (its cost known from the start, as when the sampler sets it from its probe)."""
    # The group is g = max(1, min(want, ⌈left / S⌉)) with S = per_slot · slots; it keeps its value while
    # left > (g − 1)·S, so the steps of one value are counted at once: a few dozen steps where one task
    # at a time took up to ``blocks`` (the projections of jobs/scale_sim.py call this thousands of times).
    spread = per_slot * slots
    tasks, left = 0, blocks
    while left > 0:
        g = guided_group(left, slots, block_seconds, per_slot)
        steps = max(1, -(-(left - (g - 1) * spread) // g))
        left = max(0, left - steps * g)
        tasks += steps
    return tasks


def layout(m: int, block_size: int, slots: int, group_size: int | None = None, per_slot: int = 1,
           t_pair: float = 0.0) -> tuple[int, float, int]:
    """(blocks, mean blocks per task, tasks) under the Ray backend's grouping for pairs of ``t_pair`` s:
    ``group_size`` fixed, else the default guided groups (large first, shrinking to one block)."""
    blocks = -(-m // block_size)
    if group_size:
        return blocks, float(group_size), -(-blocks // group_size)
    tasks = guided_tasks(blocks, slots, block_size * t_pair, per_slot)
    return blocks, blocks / tasks, tasks


def driver_seconds_per_task(c: Costs, g: int, in_flight: int) -> float:
    """d = c_task + g·c_result + c_inflight·in_flight: the driver's time per task of g blocks."""
    return c.c_task + g * c.c_result + c.c_inflight * in_flight


def max_slots(c: Costs, t_pair: float, block_size: int, g: int, in_flight_per_slot: float = 2.0) -> float:
    """The largest number of slots one driver keeps busy: S with S·d(S) = τ·driver_share.

    τ = g·b·t_pair + o_task is a task's slot time; while it runs the driver must handle the S − 1
    other tasks' completions, each costing d(S) = c_task + g·c_result + c_inflight·(in_flight_per_slot·S).
    Solves c_inflight·k·S² + (c_task + g·c_result)·S − τ·share = 0.
    """
    tau = g * block_size * t_pair + c.o_task
    a = c.c_inflight * in_flight_per_slot
    b = c.c_task + g * c.c_result
    if a <= 0:
        return tau * c.driver_share / b
    return (-b + math.sqrt(b * b + 4 * a * tau * c.driver_share)) / (2 * a)


def predict(c: Costs, m: int, t_pair: float, block_size: int, slots: int, group_size: int | None = None,
            max_in_flight: int | None = None, cv_task: float = 0.0, host: tuple | None = None) -> dict:
    """Wall time and efficiency of one run.

    wall = fixed + max(W·τ + τ·cv·√(2 ln S'),  T·d + τ),  W = ⌈T / S'⌉,  S' = min(S, T)

    With a fixed ``group_size``, T tasks of τ seconds each run in W waves on S' slots (the last one
    partly empty when T is not a multiple of S'). With the default guided groups (large tasks first,
    one block each at the end) the slots stay busy to within one block: W·τ becomes the whole work
    (blocks and per-task cost) over S' slots, rounded up to whole one-block tasks τ₁. With task times
    of relative spread cv the slowest of S' adds ≈ cv·√(2 ln S') task times. The driver, at d seconds
    per task, may be slower still (T·d).
    Efficiency = m·t_pair / (S·wall): the share of slot time spent in pairs.
    """
    blocks, g, tasks = layout(m, block_size, slots, group_size, t_pair=t_pair)
    in_flight = min(tasks, max_in_flight or 2 * slots)
    tau = g * block_size * t_pair + c.o_task
    d = driver_seconds_per_task(c, g, in_flight) / c.driver_share
    s_used = min(slots, tasks)
    if group_size:  # equal tasks in waves
        slot_bound = -(-tasks // s_used) * tau
    else:  # guided: large tasks first, one-block tasks at the end fill the slots to within one block
        tau1 = block_size * t_pair + c.o_task
        work = blocks * block_size * t_pair + tasks * c.o_task
        slot_bound = -(-work // (s_used * tau1)) * tau1 if tau1 > 0 else 0.0
    slot_bound += tau * cv_task * math.sqrt(2 * math.log(max(s_used, 1)))
    driver_bound = tasks * d + tau
    host_bound = 0.0 if host is None else (tasks * host[1] + m * host[2]) / host[0]
    wall = c.fixed + max(slot_bound, driver_bound, host_bound)
    bound = max((slot_bound, "tasks" if tasks < slots else "slots"), (driver_bound, "driver"), (host_bound, "host"))[1]
    return {"blocks": blocks, "group": g, "tasks": tasks, "tau_s": tau, "driver_s_per_task": d,
            "max_slots": max_slots(c, t_pair, block_size, g), "wall_s": wall,
            "bound": bound,
            "efficiency": m * t_pair / (slots * wall)}


def recommended_block_size(c: Costs, m: int, t_pair: float, slots: int, n: int, cv_pair: float = 0.0) -> int:
    """The block size with the best projected efficiency on ``slots`` (the larger on a tie), within the
    default's records-per-block cap (65 536 records). Passing it changes the run's identity (another,
    equally valid sample); the default block size never depends on the cluster."""
    from .blocks import _RECORDS_PER_BLOCK

    cap = max(1, _RECORDS_PER_BLOCK // (n + 1))
    best, best_e = 1, -1.0
    for bs in range(1, min(cap, m) + 1):
        g = layout(m, bs, slots, t_pair=t_pair)[1]
        e = predict(c, m, t_pair, bs, slots, cv_task=cv_pair / math.sqrt(g * bs))["efficiency"]
        if e >= best_e - 1e-12:
            best, best_e = bs, e
    return best


def _nnls(a: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float, float]:
    """Non-negative least squares (costs are never negative): (coefficients, R², median relative error)."""
    from scipy.optimize import nnls

    coef, _ = nnls(a, y)
    resid = y - a @ coef
    r2 = float(1 - (resid @ resid) / max(((y - y.mean()) @ (y - y.mean())), 1e-30))
    return coef, r2, float(np.median(np.abs(resid) / np.maximum(y, 1e-9)))


def fit_costs(runs: list[dict]) -> dict:
    """Driver CPU = c_run + c_task·tasks + c_result·results + c_idle·wall over the runs (costs ≥ 0)."""
    a = np.array([[1.0, r["tasks"], r["results"], r["wall_s"]] for r in runs], dtype=float)
    y = np.array([r["driver_cpu_s"] for r in runs], dtype=float)
    coef, r2, err = _nnls(a, y)
    return {"c_run": float(coef[0]), "c_task": float(coef[1]), "c_result": float(coef[2]), "c_idle": float(coef[3]),
            "r2": r2, "rel_err_median": err}


def fit_host(runs: list[dict]) -> dict:
    """CPU of every process of the run (driver, raylets, GCS, workers, agents) = h_run + h_task·tasks + h_pair·m.

    On this 2-core VM that is what limits the narrow tasks of a wide simulated cluster; on a real
    cluster each node brings its own cores, so the projection leaves it out.
    """
    a = np.array([[1.0, r["tasks"], r["m"]] for r in runs], dtype=float)
    y = np.array([r["driver_cpu_s"] + sum(r["cluster_cpu_s"].values()) for r in runs], dtype=float)
    coef, r2, err = _nnls(a, y)
    return {"h_run": float(coef[0]), "h_task": float(coef[1]), "h_pair": float(coef[2]), "r2": r2,
            "rel_err_median": err}


def tail_loss(submitted: list, done: list, slots: int, end: float) -> float:
    """Slot-seconds idle after the last submission: ∫ (S − min(in flight, S)) dt from then to ``end``."""
    if not submitted:
        return 0.0
    t_last = max(submitted)
    events = sorted([(t, 1) for t in submitted] + [(t, -1) for t in done])
    level, t_prev, lost = 0, None, 0.0
    for t, step in events:
        if t_prev is not None and t_prev >= t_last:
            lost += (slots - min(level, slots)) * (t - t_prev)
        elif t_prev is not None and t > t_last:
            lost += (slots - min(level, slots)) * (t - t_last)
        level += step
        t_prev = t
    if t_prev is not None and end > t_prev:
        lost += (slots - min(level, slots)) * (end - max(t_prev, t_last))
    return lost


# ----------------------------------------------------------------------------- the driver process
