"""The Ray engine's scheduler (:mod:`raydp.engine.schedule`), driven in process without Ray: one test per
transition — submit, done, late → backup, duplicate result, host lost, task_timeout, failures — and the
cold start (a task queued behind a cold worker pool is no late task).

The scheduler is given a fake clock, a fake cluster (nodes "a" and "b") and fake ``launch``/``cancel``
that record what the Ray edge (:mod:`raydp.engine.ray`) would have done.
"""

from __future__ import annotations

import logging

import pytest

from raydp.engine.grouping import BACKUP_FACTOR, BACKUP_SLACK, FixedGroups
from raydp.engine.schedule import MAX_COPIES, UNSEEN_SECONDS, Scheduler
from raydp.errors import EngineError


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class Affinity:
    """Stands for Ray's NodeAffinitySchedulingStrategy: a copy sent to a node by name."""

    def __init__(self, node_id):
        self.node_id = node_id


class Cluster:
    """Nodes by name; ``placement`` as :class:`raydp.engine.ray._Watch` gives it."""

    def __init__(self, nodes=("a", "b"), silent=(), backups=True):
        self.nodes, self.quiet, self.backups, self.track = set(nodes), set(silent), backups, True
        self.lost: set = set()  # nodes Ray marked dead
        self.asked = 0

    def alive(self):
        return set(self.nodes)

    def placement(self, exclude, load):
        others = sorted(self.nodes - set(exclude))
        if not others:
            return None
        if not set(exclude) & self.nodes and not self.lost:
            return {}
        pick = min(others, key=lambda n: (load.get(n, 0), n))
        load[pick] = load.get(pick, 0) + 1
        return {"scheduling_strategy": Affinity(pick)}

    def silent(self, nids):
        self.asked += 1
        return set(nids) & self.quiet

    def host(self, nid):
        return "a node not known yet" if nid is None else f"host-{nid}"


class Ray:
    """What the scheduler asked of Ray: every copy launched, every ref cancelled."""

    def __init__(self):
        self.launched, self.cancelled = [], []

    def launch(self, seq, group, epoch, placement):
        self.launched.append(dict(seq=seq, group=list(group), epoch=epoch, placement=placement))
        return f"r{seq}"

    def cancel(self, ref, force):
        self.cancelled.append((ref, force))

    def node_of(self, ref):
        placement = self.launched[int(ref[1:])]["placement"] or {}
        return getattr(placement.get("scheduling_strategy"), "node_id", None)


def make(items=8, group=1, slots=2, cap=None, **kw):
    clock, ray, cluster, notes = Clock(), Ray(), kw.pop("cluster", None) or Cluster(), []
    sched = Scheduler(FixedGroups(list(range(items)), group), slots=slots,
                      in_flight_cap=cap if cap is not None else 2 * slots, cluster=cluster, launch=ray.launch,
                      cancel=ray.cancel, clock=clock, note=notes.append, **kw)
    return sched, clock, ray, cluster, notes


def ref_of(sched, item):
    """The live ref(s) of the task holding ``item``."""
    return [r for r, c in sched.live.items() if item in c.task.group]


def finish_first(sched, clock, ray, seconds=1.0, node="a"):
    """Task [0] runs on ``node`` from t=0 and comes back after ``seconds``: the expected time is known."""
    sched.seen_running([(0, node, 0.0)])
    clock.t = seconds
    return sched.done("r0", "v0")


def test_submit_fills_up_to_the_cap_in_order_and_no_further():
    sched, clock, ray, _, _ = make(items=10, group=2, slots=2)
    assert sched.fill() == 4
    assert [x["group"] for x in ray.launched] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert all(x["epoch"] == 0 and x["placement"] is None for x in ray.launched)  # the plain task
    assert sched.fill() == 0 and len(sched.live) == 4 and sched.stats.groups == 4
    assert sched.done("r0", "v0") == ([0, 1], "v0")
    assert sched.fill() == 1 and ray.launched[-1]["group"] == [8, 9]
    assert sched.fill() == 0 and not sched.wants_more()


def test_done_yields_the_first_result_once_and_calibrates_the_expected_time():
    sched, clock, ray, _, _ = make(items=3, slots=3)
    sched.fill()
    assert sched.per_item() is None and sched.calibrated_at is None  # nothing measured: no deadline
    clock.t = 0.5
    sched.seen_running([(1, "a", 0.5)])
    clock.t = 2.5
    assert sched.done("r1", "v1") == ([1], "v1")
    assert sched.per_item() == 2.0 and sched.calibrated_at == 2.5
    assert sched.stats.results == 1 and [t.group for t in sched.open] == [[0], [2]]
    assert sched.done("r1", "again") is None  # a ref no longer awaited: nothing
    assert sched.stats.results == 1 and sched.stats.duplicates == 0


def test_a_late_task_gets_exactly_one_backup_off_its_node():
    sched, clock, ray, _, notes = make(items=4, slots=2, cap=2)
    sched.fill()
    finish_first(sched, clock, ray, seconds=1.0)  # 1 s an item: a task of one is late after 3 x 1 + 5 s
    sched.fill()
    limit = BACKUP_FACTOR * 1.0 + BACKUP_SLACK
    sched.seen_running([(1, "a", 1.0), (2, "b", 1.0)])
    clock.t = 2.0
    sched.done("r2", "v2")  # [2] came back in 1 s; [1] still runs on "a"
    clock.t = 1.0 + limit - 0.5
    sched.check_late()
    assert len(ray.launched) == 3 and sched.stats.backups == 0  # not yet
    clock.t = 1.0 + limit + 1.0
    sched.check_late()
    assert len(ray.launched) == 4 and sched.stats.backups == 1
    backup = ray.launched[-1]
    assert backup["group"] == [1] and ray.node_of("r3") == "b"  # off the node it is late on
    assert "a" in sched.suspect and backup["epoch"] == 1  # a new kind of task for Ray: its own queue
    assert len(notes) == 1 and "1 task (1 item: 1) on host-a ran 9 s, past 3x the 1 s expected + 5 s" in notes[0]
    assert "new tasks keep off host-a" in notes[0]
    for t in (1.0 + limit + 2.0, 1.0 + limit + 4.0):  # later looks: still one copy, said once
        clock.t = t
        sched.check_late()
    assert sched.stats.backups == 1 and len(notes) == 1
    assert sched.fill() == 1 and ray.node_of("r4") == "b"  # new tasks keep off "a" too
    assert sched.done("r1", "v1") == ([1], "v1")  # the original wins after all: its copy is cancelled
    assert ("r3", False) in ray.cancelled and "r3" not in sched.live and sched.stats.backups_won == 0
    assert "a" not in sched.suspect  # "a" answered again


def test_a_duplicate_result_is_compared_and_dropped():
    compared = []

    def same(a, b):
        compared.append((a, b))
        return a == b

    sched, clock, ray, _, _ = make(items=3, slots=2, cap=2, same=same)
    sched.fill()
    finish_first(sched, clock, ray)
    sched.seen_running([(1, "a", 1.0)])
    clock.t = 20.0
    sched.check_late()
    (copy,) = [r for r in ref_of(sched, 1) if r != "r1"]
    assert sched.done(copy, "v1") == ([1], "v1")  # the backup wins
    assert sched.stats.backups_won == 1
    assert ("r1", False) not in ray.cancelled and "r1" in sched.live  # late on a suspect node: kept awaited
    assert sched.done("r1", "v1") is None  # the original's result: compared, dropped
    assert compared == [("v1", "v1")] and sched.stats.duplicates == 1 and sched.stats.duplicates_differ == 0
    assert sched.stats.results == 2 and "r1" not in sched.live


def test_a_duplicate_that_differs_is_counted_and_said_once(caplog):
    sched, clock, ray, _, _ = make(items=2, slots=2, cap=2, same=lambda a, b: a == b, what="blocks")
    sched.fill()
    finish_first(sched, clock, ray)
    sched.seen_running([(1, "a", 1.0)])
    clock.t = 20.0
    sched.check_late()
    sched.done("r2", "first")
    with caplog.at_level(logging.WARNING, logger="raydp.engine"):
        assert sched.done("r1", "other") is None
    assert sched.stats.duplicates_differ == 1
    assert [r.getMessage() for r in caplog.records] == [
        "two copies of blocks 1..1 gave different results (the first is kept): the target does not give the "
        "same value for the same input every time"]


def test_a_lost_hosts_tasks_are_resubmitted_elsewhere():
    sched, clock, ray, cluster, notes = make(items=6, slots=3, cap=5, what="blocks")
    sched.fill()
    finish_first(sched, clock, ray)
    sched.seen_running([(1, "a", 1.0), (2, "a", 1.0), (3, "b", 1.0)])  # [4] not seen running yet
    cluster.nodes.discard("a")
    cluster.lost.add("a")
    clock.t = 2.0
    sched.hosts_lost(["a"])
    again = {tuple(x["group"]) for x in ray.launched[5:]}
    assert again == {(1,), (2,), (4,)}  # the two running there, and the one that may wait for a worker there
    assert all(ray.node_of(f"r{x['seq']}") == "b" for x in ray.launched[5:])
    assert all(sched.live[r].lost for r in ("r1", "r2")) and not sched.live["r3"].lost
    assert sched.stats.lost_nodes == ["a"] and sched.stats.backups == 3 and "a" in sched.suspect
    assert notes == ["Ray marked node host-a dead (2 copies of this run's tasks were running there); 3 tasks "
                     "(3 blocks: 1..2, 4) started again on other nodes (1 of them not seen running anywhere yet)"]
    assert sched.done(ref_of(sched, 1)[-1], "v1") == ([1], "v1")


def test_a_lost_host_without_backups_leaves_the_retry_to_ray():
    sched, clock, ray, cluster, notes = make(items=3, slots=2, cap=2, cluster=Cluster(backups=False))
    sched.fill()
    sched.seen_running([(0, "a", 0.0), (1, "b", 0.0)])
    sched.hosts_lost(["a"])
    assert len(ray.launched) == 2 and sched.stats.backups == 0
    assert "1 task (1 item: 0) running there wait: Ray retries them (up to 3 times) once it notices" in notes[0]


def test_a_task_queued_behind_a_cold_pool_is_not_late():
    """40 tasks submitted at once onto 20 slots whose workers start two every 2 s (a cold pool; each task
    then takes 2 s): the queued ones wait far longer than 3x + 5 s + 10 s from their submission, but the
    pool keeps taking tasks — no copy, no line, no node told to keep off. (The old rule called them late
    from their submission, and kept calling a copy late once it ran: "ran 1 s, past 3x the 2.01 s
    expected + 5 s" — 60 copies and a node told to keep off in the wide case.)"""
    sched, clock, ray, cluster, notes = make(items=40, slots=20, cap=40)
    sched.fill()
    running: dict = {}  # ref -> when it comes back
    seq, t = 0, 0.0
    while sched.open and t < 120.0:
        t += 0.5
        clock.t = t
        for ref in [r for r, end in running.items() if end <= t]:
            del running[ref]
            sched.done(ref, "v")
        if t % 2 == 0 and seq < 40:  # two more workers every 2 s
            sched.seen_running([(seq, "a", t), (seq + 1, "b", t)])
            running.update({f"r{seq}": t + 2.0, f"r{seq + 1}": t + 2.0})
            seq += 2
        if t % 1 == 0:
            sched.check_late()
            sched.last_wave()
            assert not any(c.late for c in sched.live.values()), t
    assert not sched.open and t == 42.0  # the last two waited 40 s after their submission
    assert sched.stats.backups == 0 and len(ray.launched) == 40 and not sched.suspect and notes == []
    assert sched.stats.duplicates == 0 and sched.stats.results == 40
    assert cluster.asked >= 1  # it asked the nodes whether they answer (they did)


def test_short_tasks_never_seen_starting_are_not_late_while_results_come_back():
    """A task shorter than ``MARK_AFTER`` never says where it runs (no GCS call). 120 tasks of 0.4 s
    submitted at once onto 2 slots, none seen starting: the last ones wait 24 s, far past 3x + 5 s +
    10 s from their submission — but results keep coming back, so the pool takes tasks: no copy, no
    line, nothing late."""
    class Timed(FixedGroups):  # as GuidedGroups: the blocks' running mean, as the tasks measured it
        block_seconds = 0.4

    clock, ray, notes = Clock(), Ray(), []
    sched = Scheduler(Timed(list(range(120)), 1), slots=2, in_flight_cap=120, cluster=Cluster(), launch=ray.launch,
                      cancel=ray.cancel, clock=clock, note=notes.append)
    sched.fill()
    t, nxt = 0.0, 0
    while sched.open and t < 60.0:
        t = round(t + 0.4, 6)
        clock.t = t
        for _ in range(2):  # each slot finishes one and takes the next
            if nxt < 120:
                sched.done(f"r{nxt}", "v")
                nxt += 1
        sched.check_late()
        assert not any(c.late for c in sched.live.values()), t
    assert not sched.open and t == pytest.approx(24.0)
    assert sched.stats.backups == 0 and len(ray.launched) == 120 and notes == [] and not sched.suspect


def test_a_copy_never_seen_on_a_silent_node_is_copied_once_past_its_limit():
    """A copy on a node cut off right after it started never says where it runs (its key cannot reach
    the GCS), while the other node keeps returning results. Past the copy's limit (3 x 1 s + 5 s after
    the first result) the nodes are asked, "b" does not answer, and the copy gets a copy on "a" at
    once — not UNSEEN_SECONDS later."""
    sched, clock, ray, cluster, notes = make(items=40, slots=2, cap=2, cluster=Cluster(silent=("b",)),
                                             what="blocks")
    sched.fill()
    finish_first(sched, clock, ray)  # [0] on "a" in 1 s; [1] (r1) went to "b" and is never seen
    t, copied_at = 1.0, None
    while copied_at is None and t < 40.0:
        sched.fill()
        t += 0.5
        clock.t = t
        for ref in [r for r, c in sched.live.items() if c.seq != 1]:  # "a" keeps finishing its tasks
            sched.done(ref, "v")
        sched.check_late()
        if sched.stats.backups:
            copied_at = t
    # its limit is at most 3 x 1 s + 5 s (the mean item time falls as "a" keeps finishing): copied within
    # a check of it, long before the UNSEEN_SECONDS more a copy not known to be stuck gets
    assert copied_at is not None and 1.0 + 5.0 < copied_at <= 1.0 + 8.0 + 0.5 < 1.0 + 5.0 + UNSEEN_SECONDS, copied_at
    assert "b" in sched.suspect and cluster.asked == 1
    assert notes[0] == "host-b does not answer: new tasks keep off it"
    assert ray.launched[-1]["group"] == [1] and ray.node_of(f"r{len(ray.launched) - 1}") == "a"


def test_a_copy_frozen_before_it_said_where_it_runs_is_copied_once_late_with_a_slot_free():
    """A copy frozen in its first ``MARK_AFTER`` seconds (SIGSTOP, a target holding the GIL) never says
    where it runs; its node answers. The other task is done, a slot is free: once the copy is late
    (its limit and UNSEEN_SECONDS after the first result) it is replaced by a copy — it cannot be
    waiting in a queue with a slot free."""
    sched, clock, ray, cluster, notes = make(items=2, slots=2, cap=2, what="blocks")
    sched.fill()
    finish_first(sched, clock, ray)  # [0] on "a" in 1 s: limit 3 x 1 s + 5 s; [1] never seen
    t = 1.0
    while not sched.stats.backups and t < 60.0:
        t += 0.5
        clock.t = t
        sched.check_late()
    assert 1.0 + 8.0 + UNSEEN_SECONDS < t <= 1.0 + 8.0 + UNSEEN_SECONDS + 0.5, t
    assert cluster.asked >= 1 and not sched.suspect  # asked from its limit on: every node answers
    assert ray.launched[-1]["group"] == [1] and ray.cancelled == [("r1", False)]
    assert notes == ["1 task (1 block: 1) waited 20 s for a worker, past 3x the 1 s expected + 5 s: a copy of each "
                     "started; the first copy to finish is used"]
    assert sched.done("r2", "v1") == ([1], "v1") and not sched.open


def test_a_task_that_waited_past_its_time_is_judged_from_its_start_once_running():
    sched, clock, ray, _, notes = make(items=4, slots=1, cap=4, cluster=Cluster(nodes=("a",)), backup_tasks=False)
    sched.fill()
    finish_first(sched, clock, ray, seconds=2.0)  # 2 s an item
    clock.t = 40.0  # nobody started anything for 38 s: the waiting copies are late (and cannot be copied)
    sched.check_late()
    assert all(c.late for c in sched.live.values())
    sched.seen_running([(1, "a", 39.0)])  # [1] starts after all
    clock.t = 40.0
    sched.check_late()
    assert not sched.live["r1"].late and sched.live["r2"].late and "a" not in sched.suspect  # ran 1 s: no "keep off", no copy
    assert not any("ran 1 s" in n for n in notes)


def test_a_waiting_task_with_no_start_anywhere_is_late():
    """The counterpart: when nothing has started for longer than the limit, a copy never seen running
    may wait for a worker on a node that does not answer: it is late, and said to be (a copy of it
    would wait in the same queue until a node is suspect, so it is not copied yet)."""
    sched, clock, ray, cluster, notes = make(items=4, slots=2, cap=3, what="blocks")
    sched.fill()
    finish_first(sched, clock, ray, seconds=1.0)  # limit 8 s, +10 s never seen running
    clock.t = 1.0 + 8.0 + UNSEEN_SECONDS - 0.5
    sched.check_late()
    assert not any(c.late for c in sched.live.values()) and notes == []
    clock.t = 1.0 + 8.0 + UNSEEN_SECONDS + 0.5
    sched.check_late()
    assert all(c.late for c in sched.live.values()) and cluster.asked == 1
    assert notes == ["2 tasks (2 blocks: 1..2) waiting for a worker have waited far past their time, but a copy "
                     "would wait in the same queue: waiting for them (Ray gives a node up after missing health "
                     "checks for ~1 min)"]
    assert not sched.suspect and sched.stats.backups == 0


def test_a_task_gets_at_most_max_copies():
    sched, clock, ray, _, _ = make(items=2, slots=2, cap=2, cluster=Cluster(nodes=("a", "b", "c")))
    sched.fill()
    finish_first(sched, clock, ray)  # limit 8 s
    clock.t = 1.0
    sched.seen_running([(1, "a", 1.0)])
    for t in range(2, 60):  # every copy starts at once and runs late
        clock.t = float(t)
        sched.seen_running([(c.seq, ray.node_of(c.ref), float(t)) for c in sched.live.values() if c.started is None])
        sched.check_late()
    (task,) = sched.open
    assert len(task.copies) == MAX_COPIES and sched.stats.backups == MAX_COPIES - 1
    assert {c.node for c in task.copies} == {"a", "b", "c"}  # each on another node


def test_a_silent_node_found_by_the_probe_becomes_suspect():
    cluster = Cluster(silent=("b",))
    sched, clock, ray, _, notes = make(items=6, slots=2, cap=3, cluster=cluster)
    sched.fill()
    finish_first(sched, clock, ray, seconds=1.0)
    clock.t = 15.0
    sched.seen_running([(1, "a", 15.0)])  # the pool still takes tasks, but [2] waits
    clock.t = 20.0
    sched.check_late()
    assert cluster.asked == 1 and sched.suspect == {"b"}
    assert notes == ["host-b does not answer: new tasks keep off it"]
    sched.fill()
    assert ray.node_of(f"r{ray.launched[-1]['seq']}") == "a"  # new tasks go to "a" by name
    clock.t = 21.0
    sched.check_late()  # once a node is suspect, waiting is lateness
    assert sched.stats.backups >= 1


def test_a_copy_past_task_timeout_is_killed_and_its_task_fails_unless_a_copy_is_left():
    sched, clock, ray, _, _ = make(items=2, slots=2, cap=2, task_timeout=3.0)
    sched.fill()
    assert sched.wake(100.0) == 3.0
    clock.t = 3.5
    expired = sched.expire()
    assert [t.group for t in expired] == [[0], [1]] and sched.stats.expired == 2
    assert set(ray.cancelled) == {("r0", True), ("r1", True)} and not sched.busy
    strict, clock, _, _, _ = make(items=1, task_timeout=1.0, expirable=False)
    strict.fill()
    clock.t = 2.0
    with pytest.raises(EngineError, match="ran over task_timeout=1 s"):
        strict.expire()


def test_failures_raise_the_targets_error_or_lose_the_task_only_when_no_copy_is_left():
    sched, clock, ray, _, _ = make(items=3, slots=3, cap=3)
    sched.fill()
    with pytest.raises(ValueError, match="boom"):
        sched.failed("r0", RuntimeError("wrapped"), ValueError("boom"))
    sched, clock, ray, _, _ = make(items=2, slots=2, cap=2)
    sched.fill()
    finish_first(sched, clock, ray)
    sched.seen_running([(1, "a", 1.0)])
    clock.t = 20.0
    sched.check_late()  # [1] has a backup now
    sched.failed("r1", RuntimeError("worker died"))  # another copy still runs: nothing
    (backup,) = ref_of(sched, 1)
    with pytest.raises(EngineError, match="items 1..1 were lost"):
        sched.failed(backup, RuntimeError("worker died"))


def test_close_cancels_every_copy_still_awaited():
    sched, _, ray, _, _ = make(items=3, slots=3, cap=3)
    sched.fill()
    sched.close()
    assert ray.cancelled == [("r0", False), ("r1", False), ("r2", False)]


def test_outstanding_says_what_is_out_where_and_for_how_long():
    sched, clock, ray, _, _ = make(items=3, slots=3, cap=3, what="blocks")
    sched.fill()
    clock.t = 1.0
    sched.seen_running([(0, "a", 1.0)])
    clock.t = 31.0
    assert sched.outstanding(31.0) == ("nothing back for 31 s: 3 blocks outstanding in 3 tasks; "
                                       "2 tasks not seen running yet, submitted 31 s ago; host-a: 1 task running 30 s")
    sched.seen_running([(1, "b", 31.0)])
    assert sched.outstanding(31.0).endswith("1 task not seen running yet, submitted 31 s ago; host-a: 1 task "
                                            "running 30 s; host-b: 1 task running 0 s")
