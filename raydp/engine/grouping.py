"""Which blocks share a Ray task: a fixed size, or sizes that follow the measured cost of a block.

Grouping never changes a result — a block's G values depend on (seed, block size, block index) only
(:mod:`raydp.engine.blocks`) — so, unlike the block size, it may depend on the machine and on time.

:class:`GuidedGroups` (the default) is guided self-scheduling with a cost floor. The first tasks
hold one block each; once blocks come back, a task gets about ``task_seconds`` of blocks (at the
running mean of seconds per block), but never more than ``remaining / (per_slot · slots)`` blocks,
so groups shrink as the run nears its end and the last wave stays balanced:

- an expensive per-pair target (a model fit of a second or a minute per block) gets one block per
  task, and a run of m one-pair blocks spreads over as many slots as there are pairs;
- a cheap target gets tasks of ~``task_seconds`` (1 s) each, so Ray's per-task cost (1-3 ms on an
  idle host, 12-60 ms between two tasks of a worker on a loaded one) stays a few percent of the work.

>>> g = GuidedGroups(range(10), slots=2, per_slot=1)
>>> g.take(), g.take()          # nothing measured yet: one block per task
([0], [1])
>>> g.observe(2, 0.02)           # two blocks took 0.02 s: 0.01 s a block
>>> g.take()                     # task_seconds 1 s would be 100 blocks; 8 remain on 2 slots: 4
[2, 3, 4, 5]
"""

from __future__ import annotations

import math
from collections import deque
from typing import Sequence

# A task of about this many seconds of blocks. Measured on the issue-20 case (64 slots, 0.2 s blocks,
# jobs/scale_sim.py --wide-case): a worker waits 12-25 ms between two tasks on this loaded 2-core host,
# so 0.1 s tasks lost 6-8% of slot time to those gaps (efficiency 0.854) and 1 s tasks 4-6% (0.873);
# 3 s changed nothing (the balance cap below already binds). A failure loses at most this much work
# per slot, and the per-slot balance keeps the last wave short.
TASK_SECONDS = 1.0
# The driver's own time per task (c_task = 0.95 ms fitted by jobs/scale_sim.py): on a wide cluster a
# task must last long enough for the driver to serve every other slot meanwhile, at most a quarter busy.
DRIVER_TASK_SECONDS = 1e-3
DRIVER_SHARE = 0.25


def task_seconds(slots: int, task_timeout: float | None = None) -> float:
    """Seconds of blocks a task aims at: ``TASK_SECONDS``, longer on a cluster so wide that the
    driver's ~1 ms per task would otherwise be the limit (4 s at 1 000 slots), and never more than a
    tenth of ``task_timeout``.

    >>> task_seconds(64), task_seconds(1000), task_seconds(1000, task_timeout=5)
    (1.0, 4.0, 0.5)
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
    """Task sizes from the measured seconds per block (see the module docstring)."""

    def __init__(self, blocks: Sequence[int], slots: int, per_slot: int = 4, task_seconds: float = TASK_SECONDS,
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
