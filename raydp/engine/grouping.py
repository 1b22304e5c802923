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

# At most about this many seconds of blocks in a task. Measured on the issue-20 case (64 slots,
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
    """``group_size`` consecutive blocks per task (a caller's explicit choice)."""

    def __init__(self, blocks: Sequence[int], group_size: int):
        self._left = deque(blocks)
        self.group_size = group_size

    def __bool__(self) -> bool:
        return bool(self._left)

    def __len__(self) -> int:
        return len(self._left)

    def take(self) -> list:
        return [self._left.popleft() for _ in range(min(self.group_size, len(self._left)))]

    def observe(self, blocks: int, seconds: float) -> None:
        pass


class GuidedGroups(FixedGroups):
    """Task sizes from the measured seconds per block (see the module docstring). ``per_slot`` > 1
    makes groups smaller (``remaining / (per_slot · slots)``); ``block_seconds`` seeds the cost as
    one block measured."""

    def __init__(self, blocks: Sequence[int], slots: int, per_slot: int = 1, task_seconds: float = TASK_SECONDS,
                 block_seconds: float | None = None):
        super().__init__(blocks, 1)
        self.slots, self.per_slot, self.task_seconds = max(1, slots), max(1, per_slot), task_seconds
        self._blocks, self._seconds = (0, 0.0) if block_seconds is None else (1, float(block_seconds))

    @property
    def block_seconds(self) -> float | None:
        """Running mean of seconds per block, or None before any block was measured."""
        return self._seconds / self._blocks if self._blocks else None

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

    def observe(self, blocks: int, seconds: float) -> None:
        """``blocks`` blocks came back having taken ``seconds`` in their task (block-function time)."""
        if blocks > 0 and math.isfinite(seconds) and seconds >= 0:
            self._blocks += blocks
            self._seconds += seconds
