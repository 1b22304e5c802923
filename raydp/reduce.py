"""The reduce side: keep only the m − k + 1 largest sensitivities, merge them, read off G_(k).

Δ̂ = G_(k) is the (m − k + 1)-th largest of the m values, so every map task can forward just its
own m − k + 1 largest and any tree of merges gives the same answer. +∞ (a failed pair) sorts
above everything, so failures push Δ̂ up, never down.
"""

from __future__ import annotations

import numpy as np


def largest(values: np.ndarray, keep: int) -> np.ndarray:
    """The ``keep`` largest entries of ``values`` (unordered)."""
    values = np.asarray(values, dtype=np.float64)
    if values.size <= keep:
        return values.copy()
    return np.partition(values, values.size - keep)[values.size - keep:].copy()


class TopK:
    """Running multiset of the ``keep`` largest values seen, plus how many values were seen."""

    __slots__ = ("keep", "values", "count")

    def __init__(self, keep: int):
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.keep = int(keep)
        self.values = np.empty(0, dtype=np.float64)
        self.count = 0

    def add(self, g: np.ndarray, count: int | None = None) -> "TopK":
        """Add values; ``count`` is how many values ``g`` stands for (when it was compacted)."""
        g = np.asarray(g, dtype=np.float64)
        self.count += g.size if count is None else int(count)
        self.values = largest(np.concatenate([self.values, largest(g, self.keep)]), self.keep)
        return self

    def merge(self, other: "TopK") -> "TopK":
        if other.keep != self.keep:
            raise ValueError("cannot merge TopK with different keep")
        self.count += other.count
        self.values = largest(np.concatenate([self.values, other.values]), self.keep)
        return self

    def order_statistic(self) -> float:
        """G_(k) once all m values were added: the smallest of the kept ``keep`` largest."""
        if self.values.size < self.keep:
            raise ValueError(f"only {self.values.size} values seen; need at least {self.keep}")
        return float(np.min(self.values))

    def sorted_desc(self) -> np.ndarray:
        return np.sort(self.values)[::-1]


def kth_smallest(sample: np.ndarray, k: int) -> float:
    """G_(k) of a full sample (1-based k)."""
    sample = np.asarray(sample, dtype=np.float64)
    if not 1 <= k <= sample.size:
        raise ValueError(f"k must be in [1, {sample.size}], got {k}")
    return float(np.partition(sample, k - 1)[k - 1])
