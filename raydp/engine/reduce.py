"""The reduce side: keep only the m − k + 1 largest sensitivities, merge them, read off G_(k).

Δ̂ = G_(k) is the (m − k + 1)-th largest of the m values, so every map task can forward just its
own m − k + 1 largest and any tree of merges gives the same answer. +∞ (a failed pair) sorts
above everything, so failures push Δ̂ up, never down.
"""

from __future__ import annotations

import numpy as np

from ..errors import EngineError


def largest(values: np.ndarray, keep: int) -> np.ndarray:
    """The ``keep`` largest entries of ``values`` (unordered)."""
    values = np.asarray(values, dtype=np.float64)
    if values.size <= keep:
        return values.copy()
    return np.partition(values, values.size - keep)[values.size - keep:].copy()


def largest_at(values: np.ndarray, at: np.ndarray, keep: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``keep`` largest entries of ``values`` (unordered) and the matching entries of ``at``."""
    values = np.asarray(values, dtype=np.float64)
    if values.size <= keep:
        return values.copy(), np.array(at, dtype=np.int64)
    chosen = np.argpartition(values, values.size - keep)[values.size - keep:]
    return values[chosen], np.asarray(at, dtype=np.int64)[chosen]


class TopK:
    """Running multiset of the ``keep`` largest values seen, with the pair index of each, and how many
    values were seen.

    Added arrays are buffered and cut down to the ``keep`` largest only when the buffer holds
    twice that many, so merging many blocks costs O(total) rather than O(blocks × keep).
    """

    __slots__ = ("keep", "_parts", "_at", "_buffered", "count")

    def __init__(self, keep: int):
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.keep = int(keep)
        self._parts: list[np.ndarray] = []
        self._at: list[np.ndarray] = []
        self._buffered = 0
        self.count = 0

    @property
    def values(self) -> np.ndarray:
        """The (at most) ``keep`` largest values seen, unordered."""
        self._consolidate()
        return self._parts[0] if self._parts else np.empty(0, dtype=np.float64)

    @property
    def at(self) -> np.ndarray:
        """The pair index of each of :attr:`values` (-1 where none was given)."""
        self._consolidate()
        return self._at[0] if self._at else np.empty(0, dtype=np.int64)

    def _consolidate(self) -> None:
        if len(self._parts) > 1 or (self._parts and self._parts[0].size > self.keep):
            merged, at = largest_at(np.concatenate(self._parts), np.concatenate(self._at), self.keep)
            self._parts, self._at, self._buffered = [merged], [at], merged.size

    def _push(self, g: np.ndarray, at: np.ndarray) -> None:
        if g.size > self.keep:
            g, at = largest_at(g, at, self.keep)
        self._parts.append(g)
        self._at.append(at)
        self._buffered += g.size
        if self._buffered >= 2 * self.keep + 1024:
            self._consolidate()

    def add(self, g: np.ndarray, count: int | None = None, at: np.ndarray | None = None) -> "TopK":
        """Add values; ``count`` is how many values ``g`` stands for (when it was compacted), ``at``
        their pair indices."""
        g = np.array(g, dtype=np.float64).ravel()  # a copy: the caller's array may be reused
        at = np.full(g.size, -1, dtype=np.int64) if at is None else np.array(at, dtype=np.int64).ravel()
        self.count += g.size if count is None else int(count)
        self._push(g, at)
        return self

    def merge(self, other: "TopK") -> "TopK":
        if other.keep != self.keep:
            raise ValueError("cannot merge TopK with different keep")
        self.count += other.count
        self._push(other.values.copy(), other.at.copy())
        return self

    def order_statistic(self) -> float:
        """G_(k) once all m values were added: the smallest of the kept ``keep`` largest."""
        values = self.values
        if values.size < self.keep:
            raise ValueError(f"only {values.size} values seen; need at least {self.keep}")
        return float(np.min(values))

    def order_statistic_pair(self) -> int:
        """The pair index of G_(k) (one of them, if several pairs share its value)."""
        values = self.values
        if values.size < self.keep:
            raise ValueError(f"only {values.size} values seen; need at least {self.keep}")
        return int(self.at[int(np.argmin(values))])

    def largest_pair(self) -> tuple[int, float]:
        """The pair index and value of the largest G seen."""
        values = self.values
        i = int(np.argmax(values))
        return int(self.at[i]), float(values[i])

    def sorted_desc(self) -> np.ndarray:
        return np.sort(self.values)[::-1]

    def sorted_desc_at(self) -> np.ndarray:
        """The pair indices of :meth:`sorted_desc`, in the same order (ties by pair index)."""
        values, at = self.values, self.at
        order = np.lexsort((at, -values))
        return at[order]


def kth_smallest(sample: np.ndarray, k: int) -> float:
    """G_(k) of a full sample (1-based k)."""
    sample = np.asarray(sample, dtype=np.float64)
    if not 1 <= k <= sample.size:
        raise ValueError(f"k must be in [1, {sample.size}], got {k}")
    return float(np.partition(sample, k - 1)[k - 1])


class Reducer:
    """Merges block results into what an estimate needs: G_(k)'s TopK, failure counts, the full sample.

    Refuses to finish unless every block of the layout arrived exactly once: an estimate from fewer
    than m pairs would void Theorem 15, and a block counted twice would weigh its pairs twice.
    """

    def __init__(self, layout, keep: int, *, keep_sample: bool, witness_pairs=()):
        self.layout = layout
        self.top = TopK(keep)
        self.failures = 0
        self.failure_kinds: dict = {}
        self.sample = np.full(layout.m, np.nan) if keep_sample else None
        self._seen = np.zeros(layout.count, dtype=bool)  # one byte per block, whatever m
        self.witness_pairs = tuple(int(i) for i in witness_pairs)
        self.witnessed: dict[int, float] = {}  # G of the witness pairs, from whichever blocks held them

    def add(self, result) -> None:
        b = result.index
        if not 0 <= b < self.layout.count:
            raise EngineError(f"block {b} was not requested")
        if self._seen[b]:
            raise EngineError(f"block {b} was delivered twice; refusing to count its pairs twice")
        if self.sample is not None and not result.complete:
            raise EngineError(f"block {b} arrived compacted but the full sample was asked for")
        self._seen[b] = True
        self.top.add(result.g, count=result.pairs, at=result.pair_indices())
        if self.witness_pairs:
            if result.complete:
                end = result.start + result.g.size
                self.witnessed.update({i: float(result.g[i - result.start]) for i in self.witness_pairs
                                       if result.start <= i < end})
            elif result.witnessed:
                self.witnessed.update(result.witnessed)
        self.failures += result.failures
        for kind, count in result.failure_kinds.items():
            self.failure_kinds[kind] = self.failure_kinds.get(kind, 0) + count
        if self.sample is not None:
            self.sample[result.start: result.start + result.g.size] = result.g

    @property
    def done(self) -> int:
        """How many blocks were added."""
        return int(np.count_nonzero(self._seen))

    def missing(self) -> list[int]:
        """Blocks of the layout not yet added, in order."""
        return np.flatnonzero(~self._seen).tolist()

    def finish(self) -> "Reducer":
        missing = np.flatnonzero(~self._seen)
        if missing.size:
            raise EngineError(f"{missing.size} block(s) never finished (e.g. block {missing[0]}); "
                                "no estimate is returned from fewer than m pairs")
        if self.top.count != self.layout.m:
            raise EngineError(f"{self.top.count} pairs evaluated, plan needs m={self.layout.m}")
        return self

    def order_statistic(self) -> float:
        return self.top.order_statistic()

    def bound(self) -> float | None:
        """A lower bound on the final Δ̂ from the values seen so far (None before m − k + 1 were seen)."""
        values = self.top.values
        return float(np.min(values)) if values.size >= self.top.keep else None
