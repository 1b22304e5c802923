"""What the sampler asks of a backend: :class:`Backend`.

A backend runs the block function over block indices and yields each block's result; it never sees
a plan's γ, a store or a mechanism's ε. Two calls make the whole protocol:

- ``choose(job, blocks, *, compact, consume)`` — called once before anything runs: returns the
  backend that runs the rest, the blocks left and a description of the choice for the estimate's
  ``backend`` field. A plain backend returns itself and every block; :class:`~raydp.engine.AutoBackend`
  may run a block or two in process to time them (handing their results to ``consume``) and then
  return the local or the Ray backend.
- ``run(job, blocks, *, compact=None)`` — yields a :class:`~raydp.engine.blocks.BlockResult` per
  block, in any order; ``compact`` keeps only that many largest G per block (enough for Δ̂).

Results must equal :class:`~raydp.engine.LocalBackend`'s bit for bit (``tests/statistical/test_golden.py``).
"""

from __future__ import annotations

import abc
from typing import Callable, Iterator, Sequence

__all__ = ["Backend"]


class Backend(abc.ABC):
    """Base of every backend: ``name``, :meth:`run`, and a :meth:`choose` that keeps everything here."""

    name = "backend"

    def choose(self, job, blocks: Sequence[int], *, compact: int | None,
               consume: Callable) -> tuple["Backend", list[int], str]:
        """``(backend, blocks left, why)`` before the run starts: by default this backend, every block."""
        return self, list(blocks), self.name

    @abc.abstractmethod
    def run(self, job, blocks: Sequence[int], *, compact: int | None = None) -> Iterator:
        """Yield the result of every block in ``blocks``."""
