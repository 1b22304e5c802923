"""In-process backend: the reference the Ray backend must match bit for bit."""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np

from ..blocks import BlockResult, PairJob


def groups_of(blocks: Sequence[int], group_size: int) -> list[list[int]]:
    blocks = list(blocks)
    return [blocks[i : i + group_size] for i in range(0, len(blocks), group_size)]


def run_blocks(job: PairJob, blocks: Sequence[int], *, group_size: int = 1,
               shuffle_seed: int | None = None, compact: int | None = None,
               task_timeout: float | None = None) -> Iterator[BlockResult]:
    """Run ``blocks`` in process, ``group_size`` blocks per call.

    ``shuffle_seed`` runs the groups in a shuffled order; it exists to show (and test) that the
    order of execution never changes a result.
    """
    if task_timeout is not None:
        from ..errors import InvalidArgument

        raise InvalidArgument("task_timeout needs the Ray backend (it kills the worker running the task); "
                              "in process use pair_timeout")
    groups = groups_of(blocks, max(1, int(group_size)))
    if shuffle_seed is not None:
        order = np.random.default_rng(shuffle_seed).permutation(len(groups))
        groups = [groups[i] for i in order]
    for group in groups:
        for result in job.run_blocks(group):
            yield result if compact is None else result.compacted(compact)
