"""Backup copies of a late task, on one embedded Ray with 2 CPUs (``backup_tasks=True``: a copy may
then run on the same node; by default they are on only where there is another node, see
test_lost_host.py).

The target stalls on the first evaluation of one chosen database (in whichever process gets it
first; a marker file says it happened) and is quick everywhere else — a task stuck on a frozen
machine, which a copy finishes in the usual time. Values do not depend on the stall, so every run
must equal the in-process run bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import raydp  # noqa: E402
from raydp import oracles  # noqa: E402
from raydp.engine import ray as ray_engine  # noqa: E402
from raydp.engine.blocks import block_rng  # noqa: E402

import stall_targets  # noqa: E402

ray.cloudpickle.register_pickle_by_value(stall_targets)  # the workers do not have tests/support on their path

pytestmark = [pytest.mark.slow, pytest.mark.ray]

N, SEED, STALLED = 10, 3, 5


@pytest.fixture(autouse=True)
def short_slack(monkeypatch):
    """1 s of slack instead of the default 5 s (test_lost_host.py runs the defaults): shorter runs."""
    from raydp.engine import grouping

    monkeypatch.setattr(grouping, "BACKUP_SLACK", 1.0)


def _last_record_of_d(block: int) -> float:
    """The last record of D in pair ``block`` (one pair per block): the key the target stalls on."""
    return float(oracles.exponential(1.0).sample(block_rng(SEED, block), N + 1)[N - 1])


def _reference(m: int):
    return raydp.estimate_sensitivity(stall_targets.traced_sleep(0.0), oracles.exponential(1.0), N, m=m, seed=SEED,
                                      block_size=1, backend="local", keep_sample=True, progress=False)


def _run(target, m: int, **backend):
    return raydp.estimate_sensitivity(target, oracles.exponential(1.0), N, m=m, seed=SEED, block_size=1,
                                      backend=raydp.RayBackend(group_size=1, backup_tasks=True, **backend),
                                      keep_sample=True, progress=False)


def test_a_late_task_is_copied_and_its_late_result_dropped(ray_session, tmp_path):
    """Pair 5 stalls 3 s; blocks take 50 ms, so after 3 × 50 ms + 1 s (the slack here) a copy runs on
    the other slot and wins. The stalled original still returns while the run goes on: its result is compared with
    the copy's (equal) and dropped — the reducer, which refuses a block twice, never sees it."""
    target = stall_targets.StallsOnce(0.025, 3.0, (_last_record_of_d(STALLED),), str(tmp_path))
    est = _run(target, 140)
    stats = ray_engine.last_stats()
    clean = _reference(140)
    np.testing.assert_array_equal(est.sample, clean.sample)
    assert est.sensitivity == clean.sensitivity and est.failures == 0
    assert (tmp_path / f"stalled-{_last_record_of_d(STALLED)!r}").exists()  # the stall happened
    assert stats.backups >= 1 and stats.backups_won >= 1, stats.to_dict()
    assert stats.duplicates >= 1 and stats.duplicates_differ == 0, stats.to_dict()
    assert stats.results == stats.groups == 140


def test_a_copy_killed_past_task_timeout_is_no_failure_when_its_backup_finished(ray_session, tmp_path):
    """Pair 5 stalls 10 min. Its copy wins after ~1-2 s; at task_timeout = 3 s the stalled original is
    killed (task_timeout as documented) — and since a copy of its task finished, no pair counts as
    failed."""
    target = stall_targets.StallsOnce(0.025, 600.0, (_last_record_of_d(STALLED),), str(tmp_path))
    est = _run(target, 120, task_timeout=3.0)
    stats = ray_engine.last_stats()
    clean = _reference(120)
    np.testing.assert_array_equal(est.sample, clean.sample)
    assert est.failures == 0 and est.failure_kinds == {}
    assert stats.backups_won >= 1 and stats.expired >= 1, stats.to_dict()
