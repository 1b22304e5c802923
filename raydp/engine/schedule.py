"""The Ray engine's scheduler: its state as one object, changed only by named transitions, with no Ray in it.

:class:`Scheduler` holds what one :meth:`raydp.engine.ray.RayBackend.imap` call keeps — the groups left
to hand out, the open tasks, every copy still awaited, deadlines, suspect nodes, the driver's counters —
and changes it only through these transitions:

- :meth:`~Scheduler.fill` (**submit**): new tasks until the in-flight cap;
- :meth:`~Scheduler.seen_running`: a copy was seen running on a node (its time runs from then);
- :meth:`~Scheduler.done` (**done**): a copy's result — the first one of its task is handed back to be
  yielded and the task's other copies are cancelled; a later one is a **duplicate**, compared with the
  first and dropped;
- :meth:`~Scheduler.failed`: a copy's error — re-raised (the target's own error), ignored (another
  copy finished or still runs) or the task is lost (:class:`~raydp.errors.EngineError`);
- :meth:`~Scheduler.expire`: copies past ``task_timeout`` are killed; a task with no copy left fails;
- :meth:`~Scheduler.check_late` (**late → backup**): a copy far past its time gets one copy elsewhere;
- :meth:`~Scheduler.hosts_lost` (**host lost**): the tasks of a node Ray marked dead start again;
- :meth:`~Scheduler.last_wave`: copies for the last wave (off by default).

Everything it does to the world goes through what it is given: ``launch(seq, group, epoch, placement)
-> ref`` and ``cancel(ref, force)`` (Ray's task calls, in :mod:`raydp.engine.ray`), a ``cluster`` (the
nodes: ``alive()``, ``placement(exclude, load)``, ``silent(nodes)``, ``host(node)``, ``backups``,
``track``), ``note(line)`` for the user's lines and ``clock()``. Unit tests drive it with fakes of
these (``tests/unit/test_scheduler.py``).

When a copy is late. A copy seen running is late once it has run the task's limit
(:class:`~raydp.engine.grouping.Deadlines`) since it started. A copy never seen running may wait for a
worker from a node that does not answer, or run on one without having said so (a copy says where it
runs once it has run :data:`raydp.engine.ray.MARK_AFTER` seconds; a node cut off, or a copy frozen
before that, cannot). Its time runs from its submission, but never from before the first result set
the expected time (:attr:`Scheduler.calibrated_at`). Past its limit the nodes are asked whether they
answer; it is late :data:`UNSEEN_SECONDS` later, or at once if a node already looks lost — but not
while the pool still takes tasks (a copy started, or a result came back, within the limit): a cold
worker pool, or a queue behind busy slots, is no late task. A node whose raylet does not answer (asked
every :data:`PROBE_EVERY` s at most) is suspect, and from then on waiting is lateness. A late copy
never seen running is replaced by a copy elsewhere — unless every slot is taken and the copy would wait
in the same queue.
"""

from __future__ import annotations

import itertools
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import EngineError
from . import progress as _progress
from .grouping import Deadlines

log = logging.getLogger("raydp.engine")

# The original and at most two backup copies of a task.
MAX_COPIES = 3
# How often the driver asks the nodes' raylets whether they answer (only while copies wait for a worker
# past their time and no node is known to be lost).
PROBE_EVERY = 10.0
# A copy never seen running gets this much longer than its deadline (a worker's start on a loaded host)
# before it counts as stuck on its way to a node that does not answer — unless a node already looks
# lost (a copy of it late, or Ray marked it dead): the tasks queued for it do not start either.
UNSEEN_SECONDS = 10.0


@dataclass
class DriverStats:
    """Where the driver's time went in one :meth:`RayBackend.imap` call (diagnostics for tuning and
    ``jobs/scale_sim.py``; a few clock reads per task). ``last_stats()`` returns the latest one.

    Wall time splits into ``submit_s`` (``task.remote``), ``wait_s`` (blocked in ``ray.wait``: the
    driver idle), ``get_s`` (``ray.get``: fetching and deserialising results) and ``consumer_s`` (the
    caller's work between two results: reducer, store, progress); the rest is loop bookkeeping.
    ``submitted`` / ``done`` are per-task times (seconds from the start, in submission and completion
    order), ``busy_s`` the block seconds reported by the tasks (the sampler's blocks only).
    ``backups`` copies of late tasks were started and ``backups_won`` of them finished first;
    ``duplicates`` results of a task came after its first (dropped; ``duplicates_differ`` of them
    differed from it); ``expired`` copies were killed past ``task_timeout``; ``lost_nodes`` are the
    nodes Ray marked dead during the run; ``deadline_factor`` is the factor of the deadlines at the end
    (:class:`~raydp.engine.grouping.Deadlines`).
    """

    slots: int = 0
    in_flight_cap: int = 0
    groups: int = 0
    results: int = 0
    wall_s: float = 0.0
    submit_s: float = 0.0
    wait_s: float = 0.0
    wait_calls: int = 0
    get_s: float = 0.0
    consumer_s: float = 0.0
    busy_s: float = 0.0
    submitted: list = field(default_factory=list)
    done: list = field(default_factory=list)
    backups: int = 0
    backups_won: int = 0
    duplicates: int = 0
    duplicates_differ: int = 0
    expired: int = 0
    lost_nodes: list = field(default_factory=list)
    deadline_factor: float = 0.0

    def to_dict(self, timeline: bool = False) -> dict:
        d = {k: getattr(self, k) for k in ("slots", "in_flight_cap", "groups", "results", "wall_s", "submit_s",
                                           "wait_s", "wait_calls", "get_s", "consumer_s", "busy_s", "backups",
                                           "backups_won", "duplicates", "duplicates_differ", "expired",
                                           "deadline_factor")}
        d["lost_nodes"] = list(self.lost_nodes)
        if timeline:
            d.update(submitted=list(self.submitted), done=list(self.done))
        return d


@dataclass(eq=False)
class Copy:
    """One submission of a task: the original or a backup copy."""

    ref: Any
    task: "Task"
    seq: int
    submitted: float  # the scheduler's clock
    backup: bool
    deadline: float | None = None  # task_timeout: killed after this
    node: str | None = None  # where it runs, once its start is seen
    started: float | None = None
    late: bool = False  # ran far past its time (or waited past it, while never seen running)
    lost: bool = False  # its node was marked dead
    dropped: bool = False  # never seen running and given up for a new copy
    klass: str | None = None  # its options beyond the plain ones (Ray queues each kind apart)
    target: str | None = None  # the node it was sent to by name


@dataclass(eq=False)
class Task:
    """A group of items and its copies; done once one copy's result was yielded."""

    group: list
    copies: list = field(default_factory=list)
    done: bool = False
    winner: Any = None

    def live(self, refs: dict) -> list:
        return [c for c in self.copies if c.ref in refs]


def _node_of(placement: dict | None) -> str | None:
    return getattr((placement or {}).get("scheduling_strategy"), "node_id", None)


def _klass(placement: dict | None) -> str | None:
    """The kind of a copy's options beyond the plain ones: Ray queues and leases each kind apart."""
    if not placement:
        return None
    return str(getattr(placement.get("scheduling_strategy"), "node_id", placement))


def span(tasks: list, what: str) -> str:
    """"3 tasks (24 blocks: 100..115, 140..147)": the tasks, their items and, when they are numbers,
    which (at most three runs of consecutive ones, then how many more)."""
    items = sorted(i for t in tasks for i in t.group if isinstance(i, int))
    n = sum(len(t.group) for t in tasks)
    where = ""
    if items and len(items) == n:
        runs: list = []
        for i in items:
            if runs and i == runs[-1][1] + 1:
                runs[-1][1] = i
            else:
                runs.append([i, i])
        shown = ", ".join(f"{a}" if a == b else f"{a}..{b}" for a, b in runs[:3])
        where = ": " + shown + (f" and {len(runs) - 3} more runs" if len(runs) > 3 else "")
    return f"{len(tasks)} task{'s' if len(tasks) != 1 else ''} ({n} {what.rstrip('s') if n == 1 else what}{where})"


class Scheduler:
    """The state of one ``imap`` and its transitions (module docstring). ``groups`` hands out the
    groups (``take()``, truthy while any is left; a ``block_seconds`` running mean when it keeps one)."""

    def __init__(self, groups, *, slots: int, in_flight_cap: int, cluster, launch: Callable, cancel: Callable,
                 task_timeout: float | None = None, backup_tasks: bool | None = None, max_retries: int = 3,
                 what: str = "items", same: Callable[[Any, Any], bool] | None = None, expirable: bool = True,
                 last_wave_factor: float | None = None, stats: DriverStats | None = None,
                 clock: Callable[[], float] = time.monotonic, elapsed: Callable[[], float] | None = None,
                 note: Callable[[str], None] | None = None):
        self.pending, self.slots, self.cap = groups, slots, in_flight_cap
        self.cluster, self.launch, self.cancel = cluster, launch, cancel
        self.task_timeout, self.backup_tasks, self.max_retries = task_timeout, backup_tasks, max_retries
        self.what, self.same, self.expirable, self.last_wave_factor = what, same, expirable, last_wave_factor
        self.stats = stats if stats is not None else DriverStats(slots=slots, in_flight_cap=in_flight_cap)
        self.clock, self.note = clock, note if note is not None else _progress.note
        self.elapsed = elapsed if elapsed is not None else (lambda: 0.0)
        self.deadlines = Deadlines()
        self.open: dict = {}  # Task -> None, in submission order: groups not yielded yet
        self.live: dict = {}  # ref -> Copy, every copy still awaited
        self.suspect: set = set()  # nodes with a late or lost copy: new tasks keep off them while one is left
        self.epoch, self._epoch_nodes = 0, frozenset()  # a new function for Ray whenever `suspect` grows
        self.probed = -PROBE_EVERY  # when the nodes' raylets were last asked whether they answer
        self.said: set = set()  # lines said once per run
        self.seen_items, self.seen_seconds = 0, 0.0  # finished tasks as the driver saw them
        self.calibrated_at: float | None = None  # when the first result came back (the expected time known)
        self.last_start: float | None = None  # the latest start of a copy seen so far
        self.last_result = clock()
        self._seqs = itertools.count()

    # ---- what is left ---------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        """Groups are left to hand out or to come back."""
        return bool(self.pending) or bool(self.open)

    def wants_more(self) -> bool:
        return bool(self.pending) and len(self.open) < self.cap

    def per_item(self) -> float | None:
        """Seconds an item takes: the groups' running mean when they keep one, else as the driver saw
        tasks take. None until a task has finished (a guess from the probe sets no deadline)."""
        if not self.seen_items:
            return None
        s = getattr(self.pending, "block_seconds", None)
        return s if s is not None else self.seen_seconds / self.seen_items

    def wake(self, default: float) -> float:
        """When the driver must look again at the latest: ``default``, or the first copy's deadline."""
        return min((c.deadline for c in self.live.values() if c.deadline is not None), default=default) \
            if self.task_timeout is not None else default

    def load(self) -> dict:
        """Copies of this run on each node: running there, or sent there by name."""
        out: dict = {}
        for c in self.live.values():
            nid = c.node if c.node is not None else c.target
            if nid is not None:
                out[nid] = out.get(nid, 0) + 1
        return out

    # ---- submit ---------------------------------------------------------------------------------
    def fill(self) -> int:
        """Submit new tasks until ``in_flight_cap`` are open or no group is left; how many."""
        n = 0
        while self.wants_more():
            t = Task(self.pending.take())
            self.open[t] = None
            self._submit(t)
            self.stats.groups += 1
            self.stats.submitted.append(self.elapsed())
            n += 1
        return n

    def _bump_epoch(self) -> None:
        if not self._epoch_nodes >= self.suspect:  # a node newly suspect: from now on a new kind of task
            self.epoch, self._epoch_nodes = self.epoch + 1, frozenset(self.suspect | self._epoch_nodes)

    def _submit(self, t: Task, backup: bool = False, placement: dict | None = None) -> Copy:
        now = self.clock()
        seq = next(self._seqs)
        self._bump_epoch()
        if not backup and self.suspect:
            placement = self.cluster.placement(self.suspect, self.load())
        ref = self.launch(seq, t.group, self.epoch, placement)
        copy = Copy(ref, t, seq, now, backup,
                    deadline=None if self.task_timeout is None else now + self.task_timeout,
                    klass=f"{self.epoch} {_klass(placement)}", target=_node_of(placement))
        t.copies.append(copy)
        self.live[ref] = copy
        if backup:
            self.stats.backups += 1
        return copy

    # ---- seen running ---------------------------------------------------------------------------
    def seen_running(self, sightings) -> None:
        """``(seq, node, start)`` of copies seen running (``start`` on the scheduler's clock). A copy seen
        for the first time is judged from its start from now on, whatever it waited before."""
        if not sightings:
            return
        by_seq = {c.seq: c for c in self.live.values()}
        now = self.clock()
        for seq, nid, start in sightings:
            c = by_seq.get(seq)
            if c is None or (c.node == nid and c.started is not None):
                continue
            if c.started is None:
                c.late = False  # it waited past its time, but runs now: a queue or a cold pool, not a stuck copy
            # another host's clock: kept between the submission and the first sight of it
            c.node, c.started = nid, min(max(start, c.submitted), now)
            self.last_start = c.started if self.last_start is None else max(self.last_start, c.started)

    # ---- done, duplicate, failed ----------------------------------------------------------------
    def done(self, ref, value) -> tuple[list, Any] | None:
        """A copy's result: ``(group, value)`` to yield when it is its task's first, else None (a
        duplicate, compared and dropped, or a copy no longer awaited)."""
        copy = self.live.pop(ref, None)
        if copy is None:
            return None
        t = copy.task
        if copy.node in self.suspect and not copy.lost:
            self.suspect.discard(copy.node)  # it answers again
        if t.done:
            self._duplicate(t, value)
            return None
        self._finish(t, copy, value)
        self.last_result = self.clock()
        return t.group, value

    def failed(self, ref, error: BaseException, raised: BaseException | None = None) -> None:
        """A copy ended in ``error``; ``raised`` is the target's own exception when it raised one (re-raised
        here: it is deterministic). Without, the task is lost once no copy of it is left."""
        copy = self.live.pop(ref, None)
        if copy is None:
            return
        t = copy.task
        if raised is not None and not t.done:
            raise raised from None
        if t.done or t.live(self.live):
            return  # a copy lost while another one finished or still runs
        raise EngineError(
            f"{self.what} {t.group[0]}..{t.group[-1]} were lost ({type(error).__name__}; Ray retries a dead "
            f"worker's task up to {self.max_retries} times); the run stops rather than return fewer than m pairs. "
            "Rerun with a store and resume=True to keep finished blocks.") from error

    def _duplicate(self, t: Task, value: Any) -> None:
        self.stats.duplicates += 1
        if self.same is not None and t.winner is not None and not self.same(t.winner, value):
            self.stats.duplicates_differ += 1
            if "differ" not in self.said:
                self.said.add("differ")
                log.warning("two copies of %s %s..%s gave different results (the first is kept): the target "
                            "does not give the same value for the same input every time", self.what, t.group[0],
                            t.group[-1])
        if not any(c.ref in self.live for c in t.copies):
            t.winner = None

    def _finish(self, t: Task, copy: Copy | None, value: Any = None) -> None:
        del self.open[t]
        t.done = True
        now = self.clock()
        if copy is not None:
            began = copy.started if copy.started is not None else copy.submitted
            self.seen_items += len(t.group)
            self.seen_seconds += now - began
            if self.calibrated_at is None:
                self.calibrated_at = now
            if copy.started is not None:
                self.deadlines.observe(now - copy.started, len(t.group), self.per_item())
            if copy.backup:
                self.stats.backups_won += 1
            if self.same is not None and any(c.ref in self.live for c in t.copies if c is not copy):
                t.winner = value
            self._settle(t)
        self.stats.done.append(self.elapsed())
        self.stats.results += 1

    def _settle(self, t: Task) -> None:
        """``t`` has its result: cancel its other copies, but keep waiting for those that run late on a
        node that does not answer or was lost (they cannot be reached; if one answers, its result is
        compared and dropped)."""
        for c in t.copies:
            if c.ref in self.live and not (c.lost or (c.late and c.started is not None)):
                del self.live[c.ref]
                self.cancel(c.ref, False)

    # ---- task_timeout ---------------------------------------------------------------------------
    def expire(self) -> list[Task]:
        """Kill the copies past their ``task_timeout``; the tasks left without a copy, to be yielded as
        failed (:class:`EngineError` when the caller has no failed result for them)."""
        if self.task_timeout is None:
            return []
        now, out = self.clock(), []
        for copy in [c for c in self.live.values() if c.deadline is not None and c.deadline <= now]:
            del self.live[copy.ref]
            self.cancel(copy.ref, True)
            self.stats.expired += 1
            t = copy.task
            if t.done or t.live(self.live):
                continue
            if not self.expirable:
                raise EngineError(f"{self.what} {t.group[0]}..{t.group[-1]}: task ran over "
                                  f"task_timeout={self.task_timeout:g} s")
            self._finish(t, None)
            out.append(t)
        return out

    # ---- backups --------------------------------------------------------------------------------
    def _back_up(self, t: Task, avoid: set) -> str | None:
        """Start a copy of ``t`` off its own nodes (and off ``avoid`` when that leaves a node); None,
        else why not."""
        if sum(not c.dropped for c in t.copies) >= MAX_COPIES:
            return "it has all its copies"
        own = {c.node for c in t.copies if c.node}
        placement = self.cluster.placement(own | avoid, self.load())
        if placement is None and avoid - own:
            placement = self.cluster.placement(own, self.load())
        if placement is None and self.backup_tasks:  # asked for even where no other node is left
            placement = {}
        if placement is None:
            return "no other node can run a copy"
        stuck = [c for c in t.live(self.live) if c.late and c.started is None]
        self._bump_epoch()
        if stuck and len(self.live) >= self.slots and all(c.klass == f"{self.epoch} {_klass(placement)}"
                                                          for c in t.live(self.live)):
            return "a copy would wait in the same queue"  # with a slot free it would not: a copy frozen unseen
        for c in stuck:  # a late copy never seen running is replaced, not joined: it may be
            c.dropped = True  # waiting for a worker on a node that does not answer
            del self.live[c.ref]
            self.cancel(c.ref, False)
        self._submit(t, backup=True, placement=placement)
        return None

    # ---- host lost ------------------------------------------------------------------------------
    def hosts_lost(self, nodes: list) -> None:
        """Ray marked ``nodes`` dead: their copies are lost; their tasks, and every task never seen
        running (it may wait for a worker there), get a copy elsewhere. One line per node."""
        for nid in nodes:
            self.stats.lost_nodes.append(nid)
            self.suspect.add(nid)
            there = [c for c in self.live.values() if c.node == nid]
            for c in there:
                c.lost = True
            tasks = list({c.task: None for c in there if not c.task.done})
            unseen = [t for t in self.open
                      if t not in tasks and all(c.started is None for c in t.live(self.live))]
            redone, covered, stuck = [], [], []
            for t in tasks + unseen:
                if any(not (c.lost or c.late) and c.started is not None for c in t.live(self.live)):
                    covered.append(t)
                elif self.cluster.backups and self._back_up(t, {nid}) is None:
                    redone.append(t)
                elif t in tasks:
                    stuck.append(t)
            self.note(self._lost_line(nid, len(there), redone, covered, stuck, len(unseen)))

    def _lost_line(self, nid, copies: int, redone: list, covered: list, stuck: list, unseen: int) -> str:
        parts = []
        if redone:
            parts.append(f"{span(redone, self.what)} started again on other nodes"
                         + (f" ({unseen} of them not seen running anywhere yet)" if unseen else ""))
        if covered:
            parts.append(f"{span(covered, self.what)} already have a copy running elsewhere")
        if stuck:
            why = ("no other node can run them" if self.cluster.backups else
                   f"Ray retries them (up to {self.max_retries} times) once it notices")
            parts.append(f"{span(stuck, self.what)} running there wait: {why}")
        there = f"{copies} cop{'y' if copies == 1 else 'ies'} of this run's tasks"
        return (f"Ray marked node {self.cluster.host(nid)} dead ({there} were running there); "
                + ("; ".join(parts) if parts else "nothing to redo"))

    # ---- late -> backup -------------------------------------------------------------------------
    def check_late(self) -> None:
        """Copies far past their time get a copy elsewhere (module docstring: when a copy is late)."""
        s = self.per_item()
        if s is None:
            return  # nothing measured yet: no deadline
        now = self.clock()
        limits = {t: self.deadlines.limit(len(t.group), s) for t in self.open}
        for t, limit in limits.items():
            for c in t.live(self.live):
                if c.started is not None and not c.lost and now - c.started > limit:
                    c.late = True
        late, waiting = self._late_by_node(now, limits)
        if not late and not waiting:
            return
        if (waiting or None in late) and not self.suspect and now >= self.probed + PROBE_EVERY:
            self._probe(now)
        if not late:
            return
        self.suspect.update(nid for nid in late if nid is not None)
        avoid = set(self.suspect)
        for nid, pairs in late.items():
            self._back_up_node(nid, pairs, avoid, now, s)

    def _waited_too_long(self, c: Copy, now: float, limit: float, grace: float) -> tuple[bool, bool]:
        """(late, waiting) of a copy never seen running: waiting past its limit (from its submission, never
        from before the first result) — the nodes are asked whether they answer —, late past the limit
        plus ``grace``, and only waiting while the pool still takes tasks."""
        since = max(c.submitted, self.calibrated_at if self.calibrated_at is not None else c.submitted)
        if now - since <= limit:
            return False, False
        if now - since <= limit + grace:
            return False, True  # not late yet, but worth asking: a copy on a cut link is never seen
        # the pool takes tasks: a copy was seen starting, or a result came back (its slot takes the next;
        # a copy shorter than raydp.engine.ray.MARK_AFTER is never seen starting)
        turns = [self.last_start, self.last_result if self.calibrated_at is not None else None]
        last = max((x for x in turns if x is not None), default=None)
        taking = not self.suspect and last is not None and now - last <= limit
        return not taking, taking

    def _late_by_node(self, now: float, limits: dict) -> tuple[dict, bool]:
        """{node (None: not seen running): [(task, its late copy)]} of the tasks with no copy on time and
        a copy left to start; and whether copies wait past their time while the pool still takes tasks."""
        grace = 0.0 if self.suspect or any(c.late and c.started is not None for c in self.live.values()) \
            else UNSEEN_SECONDS
        late: dict = {}
        waiting = False
        for t, limit in limits.items():
            fine, worst = False, None
            for c in t.live(self.live):
                if c.lost:
                    continue
                if c.started is not None:
                    over = c.late
                else:
                    over, held = self._waited_too_long(c, now, limit, grace)
                    waiting = waiting or held
                    c.late = c.late or over
                if over:
                    worst = c
                else:
                    fine = True
            if not fine and worst is not None and sum(not c.dropped for c in t.copies) < MAX_COPIES:
                late.setdefault(worst.node, []).append((t, worst))
        return late, waiting

    def _probe(self, now: float) -> None:
        """Copies wait for a worker and no node is known to be lost: ask every node's raylet."""
        self.probed = now
        silent = self.cluster.silent(self.cluster.alive())
        if silent:
            self.suspect.update(silent)
            one = len(silent) == 1
            self.note(f"{', '.join(sorted(self.cluster.host(nid) for nid in silent))} "
                      f"{'does' if one else 'do'} not answer: new tasks keep off {'it' if one else 'them'}")

    def _back_up_node(self, nid, pairs: list, avoid: set, now: float, s: float) -> None:
        why = {t: self._back_up(t, avoid) for t, _ in pairs}
        started = [t for t, _ in pairs if why[t] is None]
        if not started:
            if ("stuck", nid) not in self.said:
                self.said.add(("stuck", nid))
                where = f"on {self.cluster.host(nid)} run" if nid is not None else "waiting for a worker have waited"
                self.note(f"{span([t for t, _ in pairs], self.what)} {where} far past their time, but "
                          f"{next(iter(why.values()))}: waiting for them (Ray gives a node up after missing health "
                          "checks for ~1 min)")
            return
        oldest = max(now - (c.started if c.started is not None else c.submitted) for _, c in pairs)
        expected = self.deadlines.expected(sum(len(t.group) for t in started), s) / len(started)
        where = (f"on {self.cluster.host(nid)} ran {oldest:.0f} s" if nid is not None else
                 f"waited {oldest:.0f} s for a worker")
        self.note(f"{span(started, self.what)} {where}, past {self.deadlines.factor:g}x the "
                  f"{expected:.3g} s expected + {self.deadlines.slack:g} s: a copy of each started"
                  f"{' on another node' if nid is not None or avoid else ''}; the first copy to finish is used"
                  + (f"; new tasks keep off {self.cluster.host(nid)}" if nid is not None else ""))

    def last_wave(self) -> None:
        """Once nothing is left to hand out: a copy on an idle slot for each task running past
        ``last_wave_factor`` times its expected time (None: off)."""
        s = self.per_item()
        idle = self.slots - len(self.live)
        if self.last_wave_factor is None or self.pending or idle <= 0 or s is None:
            return
        now = self.clock()
        ready = [t for t in self.open if len(t.live(self.live)) == 1 and t.live(self.live)[0].started is not None
                 and now - t.live(self.live)[0].started > self.last_wave_factor * len(t.group) * s]
        ready.sort(key=lambda t: t.live(self.live)[0].started)
        for t in ready[:idle]:
            self._back_up(t, set())  # when it cannot, the task just runs on

    # ---- what the user sees ---------------------------------------------------------------------
    def outstanding(self, quiet: float) -> str:
        """What has not come back, where and for how long."""
        now = self.clock()
        alive = self.cluster.alive()
        only = next(iter(alive)) if len(alive) == 1 else None
        where: dict = {}  # (node, running) -> [tasks, longest, lost]
        for t in self.open:
            copies = t.live(self.live)
            copies = [c for c in copies if not (c.lost or c.late)] or copies  # the copy the task waits for
            running = [c for c in copies if c.started is not None]
            if running:
                c = min(running, key=lambda c: c.started)
                key, since = (c.node, True), c.started
            else:  # untracked (one node) or not seen running yet: the time since it was submitted
                c = min(copies, key=lambda c: c.submitted)
                key, since = (None if self.cluster.track else only, False), c.submitted
            w = where.setdefault(key, [0, 0.0, False])
            w[0] += 1
            w[1] = max(w[1], now - since)
            w[2] = w[2] or c.lost
        parts = []
        for (nid, running), (n, longest, lost) in sorted(where.items(), key=lambda kv: -kv[1][1]):
            tasks = f"{n} task{'s' if n != 1 else ''}"
            if nid is None:
                parts.append(f"{tasks} not seen running yet, submitted {longest:.0f} s ago")
            else:
                parts.append(f"{self.cluster.host(nid)}{' (lost)' if lost else ''}: {tasks} "
                             f"{'running' if running else 'submitted'} {longest:.0f} s")
        items, n_open = sum(len(t.group) for t in self.open), len(self.open)
        return (f"nothing back for {quiet:.0f} s: {items} {self.what.rstrip('s') if items == 1 else self.what} "
                f"outstanding in {n_open} task{'s' if n_open != 1 else ''}; " + "; ".join(parts))

    def close(self) -> None:
        """The run ends (or stops): cancel every copy still awaited."""
        for ref in self.live:
            self.cancel(ref, False)
