"""In-process backend: the reference the Ray backend must match bit for bit.

>>> LocalBackend()
LocalBackend(group_size=1, shuffle_seed=None)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

from ..validation import check_int
from .blocks import BlockResult, PairJob
from .protocol import Backend


def groups_of(blocks: Sequence[int], group_size: int) -> list[list[int]]:
    blocks = list(blocks)
    return [blocks[i: i + group_size] for i in range(0, len(blocks), group_size)]


@dataclass(frozen=True)
class LocalBackend(Backend):
    """Run every block in this process, ``group_size`` blocks per call.

    ``shuffle_seed`` runs the groups in a shuffled order; it exists to show (and test) that the
    order of execution never changes a result.
    """

    group_size: int = 1
    shuffle_seed: int | None = None

    name = "local"

    def __post_init__(self):
        check_int(self.group_size, "group_size", min_value=1)
        if self.shuffle_seed is not None:
            check_int(self.shuffle_seed, "shuffle_seed", min_value=0)

    def run(self, job: PairJob, blocks: Sequence[int], *, compact: int | None = None) -> Iterator[BlockResult]:
        """Yield the result of every block; ``compact`` keeps only that many largest G per block."""
        groups = groups_of(blocks, self.group_size)
        if self.shuffle_seed is not None:
            order = np.random.default_rng(self.shuffle_seed).permutation(len(groups))
            groups = [groups[i] for i in order]
        for group in groups:
            for result in job.run_blocks(group):
                yield result if compact is None else result.compacted(compact)
