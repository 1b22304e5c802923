"""A target without its fast forms: to check them against the function a release evaluates.

A target may offer faster ways to evaluate a block of pairs (``pair``, ``batch``, ``pair_batch``:
:mod:`raydp.engine.blocks`); the release always calls the target itself on one database.
:class:`Cold` hides every form but the call, so the engine evaluates each database on its own — the
reference a fast form must match (bit for bit, or within its stated tolerance).

>>> import numpy as np
>>> from raydp import targets
>>> hasattr(Cold(targets.mean()), "batch")
False
"""

from __future__ import annotations

__all__ = ["Cold"]


class Cold:
    """``inner`` with its call and its identity (so an estimate names the same target) and nothing else."""

    def __init__(self, inner):
        self.inner = inner

    def __call__(self, database):
        return self.inner(database)

    def identity(self):
        return self.inner.identity()
