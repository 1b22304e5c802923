"""Which blocks share a Ray task: a fixed size, or sizes that follow the measured cost of a block.

Grouping never changes a result — a block's G values depend on (seed, block size, block index) only
(:mod:`raydp.engine.blocks`) — so, unlike the block size, it may depend on the machine and on time.

:class:`GuidedGroups` (the default) is guided self-scheduling with a cost cap. Until a block's cost
is known, a task holds one block (the sampler seeds the cost from its timed probe, so this is rare);
from then on a task gets ``remaining / slots`` blocks — so groups shrink as the run nears its end
and the last wave stays balanced — but never more than about ``task_seconds`` of them (at the
running mean of seconds per block):

- an expensive per-pair target (a model fit of 5 s or more per block) gets one block per task, and
  while at least as many blocks as slots remain every slot has a task: a run of m one-pair blocks
  spreads over as many slots as there are pairs;
- a cheap target gets few, long tasks (up to ~``task_seconds``, 5 s), so Ray's per-task cost (1-3 ms
  on an idle host, 12-35 ms between two tasks of a worker on a loaded one) stays a few percent of
  the work; a lost worker loses at most that much work, a stopped driver the two tasks per slot
  in flight (resume from a store reruns them).

>>> g = GuidedGroups(range(10), slots=2)
>>> g.take(), g.take()          # nothing measured yet: one block per task
([0], [1])
>>> g.observe(2, 0.02)           # two blocks took 0.02 s: 0.01 s a block
>>> g.take()                     # task_seconds 5 s would be 500 blocks; 8 remain on 2 slots: 4
[2, 3, 4, 5]
"""

from __future__ import annotations

import math
from collections import deque
from typing import Sequence

# At most about this many seconds of blocks in a task. Measured on the wide case (64 slots,
# 1305 blocks of 0.2 s, jobs/scale_sim.py --wide-case, runs taken in turn on this loaded 2-core host,
# where a worker waits 12-35 ms between two of its tasks): fewer tasks, fewer gaps. Tasks of at most
# 1 s and at most remaining/(4·slots) blocks: 699 tasks, efficiency 0.83-0.90 (median 0.87 over 7);
# remaining/slots with the cap at 1 s: 491 tasks, 0.87-0.89; remaining/slots, cap not binding, cost
# seeded from the probe: 230 tasks, 0.89-0.92 (median 0.91 over 7). 5 s bounds what a failure or a
# stopped driver loses per slot and keeps the progress display moving.
TASK_SECONDS = 5.0
# The driver's own time per task (c_task = 0.95 ms fitted by jobs/scale_sim.py): on a wide cluster a
# task must last long enough for the driver to serve every other slot meanwhile, at most a quarter busy.
DRIVER_TASK_SECONDS = 1e-3
DRIVER_SHARE = 0.25
# A task is late (a backup copy of it may start on another node) past BACKUP_FACTOR times the time
# its blocks are expected to take plus BACKUP_SLACK seconds (:class:`Deadlines`). Tasks hold at most
# ~5 s of blocks, so a node that stops answering costs a cheap target ~20 s, not the minutes Ray's
# own detection takes (a silent node is marked dead after ~65 s, and a task running there fails only
# when its connection's keepalive gives up, measured ~7 min).
BACKUP_FACTOR = 3.0
BACKUP_SLACK = 5.0
DEADLINE_MEMORY = 512


def task_seconds(slots: int, task_timeout: float | None = None) -> float:
    """Seconds of blocks a task may hold: ``TASK_SECONDS``, longer on a cluster so wide that the
    driver's ~1 ms per task would otherwise be the limit (past 1 250 slots: 8 s at 2 000), and never
    more than a tenth of ``task_timeout``.

    >>> task_seconds(64), task_seconds(2000), task_seconds(2000, task_timeout=5)
    (5.0, 8.0, 0.5)
    """
    t = max(TASK_SECONDS, slots * DRIVER_TASK_SECONDS / DRIVER_SHARE)
    return t if task_timeout is None else min(t, task_timeout / 10)


class FixedGroups:
    """``group_size`` consecutive blocks per task (a caller's explicit choice). Keeps the running mean
    of seconds per block it is told of (:meth:`observe`), which sets the deadline of a task."""

    def __init__(self, blocks: Sequence[int], group_size: int):
        self._left = deque(blocks)
        self.group_size = group_size
        self._blocks, self._seconds = 0, 0.0

    @property
    def block_seconds(self) -> float | None:
        """Running mean of seconds per block, or None before any block was measured."""
        return self._seconds / self._blocks if self._blocks else None

    def __bool__(self) -> bool:
        return bool(self._left)

    def __len__(self) -> int:
        return len(self._left)

    def take(self) -> list:
        return [self._left.popleft() for _ in range(min(self.group_size, len(self._left)))]

    def observe(self, blocks: int, seconds: float) -> None:
        """``blocks`` blocks came back having taken ``seconds`` in their task (block-function time)."""
        if blocks > 0 and math.isfinite(seconds) and seconds >= 0:
            self._blocks += blocks
            self._seconds += seconds


class GuidedGroups(FixedGroups):
    """Task sizes from the measured seconds per block (see the module docstring). ``per_slot`` > 1
    makes groups smaller (``remaining / (per_slot · slots)``); ``block_seconds`` seeds the cost as
    one block measured."""

    def __init__(self, blocks: Sequence[int], slots: int, per_slot: int = 1, task_seconds: float = TASK_SECONDS,
                 block_seconds: float | None = None):
        super().__init__(blocks, 1)
        self.slots, self.per_slot, self.task_seconds = max(1, slots), max(1, per_slot), task_seconds
        if block_seconds is not None:
            self._blocks, self._seconds = 1, float(block_seconds)

    def size(self) -> int:
        per_block = self.block_seconds
        if per_block is None:
            return 1
        want = math.floor(self.task_seconds / per_block * (1 + 1e-9)) if per_block > 0 else len(self._left)
        balance = math.ceil(len(self._left) / (self.per_slot * self.slots))
        return max(1, min(want, balance))

    def take(self) -> list:
        self.group_size = self.size()
        return super().take()


class Deadlines:
    """When a task has run "far past what its blocks are expected to take".

    A task of b blocks is expected to take ``b · block_seconds`` (the running mean of its kind); it is
    late once it has run ``factor`` times that plus ``slack`` seconds. A fixed timeout would be wrong
    for both a 10 ms and a 10 min target; this one scales with the blocks. ``slack`` covers what a
    task costs beyond its blocks (a lease, shipping the job and the result, the driver's polling).
    ``factor`` starts at ``BACKUP_FACTOR`` and rises to 1.5× the factor that nine in ten finished
    tasks stayed within (of the last :data:`DEADLINE_MEMORY`), so a target whose blocks vary a lot does
    not set off copy after copy, while one slow spell (a worker starved on a busy host) does not
    stretch every later deadline; a task shorter than the slack, whose time is mostly those fixed
    costs, never raises it.

    >>> d = Deadlines()
    >>> d.limit(blocks=10, block_seconds=0.5)        # 3 × 5 s + 5 s
    20.0
    >>> d.observe(run_seconds=25.0, blocks=10, block_seconds=0.5)   # needed (25 - 5) / 5 = 4
    >>> d.limit(blocks=10, block_seconds=0.5)        # 1.5 × 4 × 5 s + 5 s
    35.0
    >>> d.limit(blocks=10, block_seconds=None) is None   # nothing measured yet: no deadline
    True
    """

    def __init__(self, factor: float | None = None, slack: float | None = None):
        self.base = float(BACKUP_FACTOR if factor is None else factor)
        self.slack = float(BACKUP_SLACK if slack is None else slack)
        self.needed: deque = deque(maxlen=DEADLINE_MEMORY)  # factors finished tasks needed

    @property
    def factor(self) -> float:
        if not self.needed:
            return self.base
        ranked = sorted(self.needed)
        return max(self.base, 1.5 * ranked[int(0.9 * (len(ranked) - 1))])

    def expected(self, blocks: int, block_seconds: float | None) -> float | None:
        return None if block_seconds is None else blocks * block_seconds

    def limit(self, blocks: int, block_seconds: float | None) -> float | None:
        """Seconds a task of ``blocks`` blocks may run before a copy of it is started elsewhere."""
        expected = self.expected(blocks, block_seconds)
        return None if expected is None else self.factor * expected + self.slack

    def observe(self, run_seconds: float, blocks: int, block_seconds: float | None) -> None:
        """A task that ran ``run_seconds`` finished first (copies that lost are not counted)."""
        expected = self.expected(blocks, block_seconds)
        if expected and expected > 0 and math.isfinite(run_seconds):
            self.needed.append(max(0.0, (run_seconds - self.slack) / expected))
