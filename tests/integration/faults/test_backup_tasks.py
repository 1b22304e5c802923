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


def test_a_copy_says_where_it_runs_once_it_has_run_a_while_and_the_driver_forgets_it_by_bucket(ray_session):
    """A tracked copy writes its key (node, start) once it has run ``MARK_AFTER`` seconds — a short one
    never calls the GCS — saying when it began, not when it wrote; no copy deletes its key: the driver
    deletes them a bucket at a time once no copy of the bucket is awaited, and the run's prefix at its
    end."""
    import time

    from ray.experimental import internal_kv

    def listed(prefix):
        return sorted(k.decode()[len(prefix):].split("/") for k in
                      internal_kv._internal_kv_list(prefix, namespace=ray_engine._KV_NAMESPACE))

    def nap(shared, group, seconds):
        began = time.time()
        time.sleep(seconds)
        return group, began

    class Backend:
        backup_tasks = True

    watch = ray_engine._Watch(Backend())
    b = ray_engine.BUCKET
    task = ray_session.remote(ray_engine._tracked(nap))
    t0 = time.time()
    naps = {0: 0.05, 1: 1.0, b: 4.0, 2 * b: 1.0}  # copy -> seconds
    refs = {seq: task.remote(watch.key(seq), None, [seq], s) for seq, s in naps.items()}
    results = {seq: ray_session.get(refs[seq]) for seq in (0, 1, 2 * b)}
    keys = listed(watch.prefix)
    assert [k[:2] for k in keys] == [["0", "1"], ["1", str(b)], ["2", str(2 * b)]], keys  # not the short one
    node = ray_session.get_runtime_context().get_node_id()
    assert all(k[2] == node for k in keys)
    for bucket, seq, _, start in keys:
        if int(seq) in results:
            assert abs(float(start) - results[int(seq)][1]) < 0.1  # when the copy began, not when it wrote
    assert sorted(seq for seq, _, _ in watch.starts()) == [1, b, 2 * b]
    watch.forget([b, 2 * b])  # copy b still awaited: bucket 0 goes, 1 and 2 stay
    assert [k[1] for k in listed(watch.prefix)] == [str(b), str(2 * b)]
    group, began = ray_session.get(refs[b])
    assert group == [b] and t0 <= began and time.time() - began >= naps[b]
    watch.close()
    assert listed(watch.prefix) == []
