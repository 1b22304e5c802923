"""Witness pairs: a few pairs of a run kept with their G and their oracle records, to be replayed.

A Δ̂ is reused long after it was sampled, with the target as it is *then*: a helper module edited, a
library upgraded, a class redefined in a notebook, state a fingerprint cannot see. The sampler is
deterministic — a pair's databases depend only on (seed, block size, pair index) — so the G of a
few pairs, recomputed with today's target on the same oracle records, says whether the stored G
values still describe today's code. Those pairs are the estimate's *witnesses*:

- the pair whose G is Δ̂ (the k-th order statistic),
- the pair with the largest G,
- :data:`SEEDED` pairs drawn by the run's seed (:func:`seeded_pairs`), picked before the run so
  that every backend reports their G even when it keeps only the largest values (``witness_pairs``
  of :class:`~raydp.engine.blocks.PairJob`).

A failed pair (G = +∞) is never a witness: whether it fails again may depend on the machine (a
timeout). Their records are drawn from the oracle once, when the estimate is made
(:func:`records_of`), and travel with it (a store keeps them in ``witnesses.npz``), so a replay
needs the target alone — never the oracle, never private data.

:func:`replay` evaluates them through the same code as every block (:meth:`PairJob.evaluate`) and
:func:`compare` judges the result: equal bit for bit where the target's arithmetic is exact, and
otherwise within :data:`RTOL` relative to the largest witness G — far below any change that matters
to privacy (a G that moved by 1e-9 of Δ̂ moves the noise by as little), far above the last-bit
differences between CPUs measured on the SVM (3e-11).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .blocks import PairJob

__all__ = ["Witnesses", "Replay", "RTOL", "SEEDED", "seeded_pairs", "pick", "records_of", "replay", "compare"]

# Spawn key of the stream that picks the seeded witnesses; no block (and not the probe) has it.
WITNESS_KEY = 2**64 - 2
SEEDED = 3
RTOL = 1e-9
# Oracle records kept with the witnesses, at most (the pair that set Δ̂ is always kept).
MAX_RECORD_BYTES = 64 << 20

ROLE_DELTA, ROLE_LARGEST, ROLE_SEEDED = "delta", "largest", "seeded"
_ROLE_WORDS = {ROLE_DELTA: "the pair that set Δ̂", ROLE_LARGEST: "the pair with the largest G",
               ROLE_SEEDED: "a pair drawn by the seed"}


def seeded_pairs(seed: int, m: int, count: int = SEEDED) -> tuple[int, ...]:
    """``count`` distinct pair indices in [0, m), a function of (seed, m) alone."""
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(WITNESS_KEY,))))
    count = min(int(count), int(m))
    return tuple(sorted(int(i) for i in rng.choice(int(m), size=count, replace=False)))


@dataclass(frozen=True)
class Witnesses:
    """Pairs of a run with the G they had and (when kept) their ``(n + 1)`` oracle records each.

    ``records`` has shape ``(len(pairs), n + 1, *record_shape)``; None for an estimate read from a
    store written before witnesses were kept (then the oracle must draw them: :meth:`with_records`).
    """

    pairs: tuple
    g: tuple
    roles: tuple
    records: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.pairs)

    def describe(self, i: int) -> str:
        return f"pair {self.pairs[i]} ({_ROLE_WORDS.get(self.roles[i], self.roles[i])})"

    def with_records(self, job: PairJob) -> "Witnesses":
        """The same witnesses with their records drawn by ``job``'s oracle (same seed and block size)."""
        return Witnesses(self.pairs, self.g, self.roles, records_of(job, self.pairs))

    def to_arrays(self) -> dict:
        """Plain arrays for ``numpy.savez`` (read back with ``allow_pickle=False``)."""
        out = {"pairs": np.asarray(self.pairs, dtype=np.int64), "g": np.asarray(self.g, dtype=np.float64),
               "roles": np.asarray(self.roles, dtype="U16")}
        if self.records is not None:
            out["records"] = self.records
        return out

    @classmethod
    def from_arrays(cls, arrays) -> "Witnesses":
        records = arrays["records"] if "records" in arrays else None
        return cls(tuple(int(i) for i in arrays["pairs"]), tuple(float(v) for v in arrays["g"]),
                   tuple(str(r) for r in arrays["roles"]), None if records is None else np.asarray(records))


def pick(delta: tuple[int, float], largest: tuple[int, float], seeded: dict) -> Witnesses:
    """The witnesses of a finished run: the Δ̂ pair, the largest pair, the seeded pairs (``{pair: G}``),
    each once, failed pairs (G = +∞) left out."""
    pairs, g, roles = [], [], []
    for role, items in ((ROLE_DELTA, [delta]), (ROLE_LARGEST, [largest]), (ROLE_SEEDED, sorted(seeded.items()))):
        for pair, value in items:
            if pair is None or pair < 0 or pair in pairs or not math.isfinite(value):
                continue
            pairs.append(int(pair))
            g.append(float(value))
            roles.append(role)
    return Witnesses(tuple(pairs), tuple(g), tuple(roles))


def records_of(job: PairJob, pairs) -> np.ndarray:
    """The ``(n + 1)`` records of each pair, as its block drew them, shaped ``(len(pairs), n + 1, ...)``.

    Past :data:`MAX_RECORD_BYTES` the later pairs are left out (the first, the Δ̂ pair, always stays):
    the caller keeps only the witnesses whose records it got.
    """
    out, size = [], 0
    by_block: dict[int, tuple] = {}
    for i, pair in enumerate(pairs):
        b = pair // job.block_size
        if b not in by_block:
            by_block = {b: job.draw(b)}  # one block held at a time
        records, start = by_block[b]
        rec = np.array(records[pair - start])  # its own copy: not a view holding the whole block
        size += rec.nbytes
        if i and size > MAX_RECORD_BYTES:
            break
        out.append(rec)
    return np.stack(out)


def trimmed(w: Witnesses, records: np.ndarray) -> Witnesses:
    """``w`` with ``records``, keeping only the witnesses the records cover."""
    k = records.shape[0]
    return Witnesses(w.pairs[:k], w.g[:k], w.roles[:k], records)


def replay(target, mechanism, n: int, out_dim: int, records: np.ndarray, pairs=None) -> np.ndarray:
    """G of each witness recomputed with ``target`` on its records, through :meth:`PairJob.evaluate`
    (the block function's own evaluation; a failure is +∞)."""
    job = PairJob(target=target, oracle=None, mechanism=mechanism, n=n, m=max(1, len(records)), seed=0,
                  block_size=1, out_dim=out_dim)
    pairs = range(len(records)) if pairs is None else pairs
    return np.array([float(job.evaluate(records[i][None], int(p))[0][0]) for i, p in enumerate(pairs)])


@dataclass(frozen=True)
class Replay:
    """What replaying an estimate's witnesses showed: ``pairs`` replayed, ``exact`` of them equal bit for
    bit, ``max_rel`` the largest difference relative to the largest witness G. ``skipped`` says why no
    replay happened (``replay=False``), ``mismatch`` which witnesses differ."""

    pairs: int = 0
    exact: int = 0
    max_rel: float = 0.0
    skipped: str | None = None
    mismatch: str | None = None
    reused: bool = True  # the estimate was made before the release that replayed it (the statement says so)

    @property
    def ok(self) -> bool:
        return self.skipped is None and self.mismatch is None

    def words(self) -> str:
        """How a statement reports it."""
        if self.skipped is not None:
            return f"Δ̂ reused without replaying its witness pairs ({self.skipped}): that it describes this target is assumed, not checked"
        how = "bit for bit" if self.exact == self.pairs else f"within {RTOL:g} relative (largest difference {self.max_rel:.2g})"
        return f"Δ̂ reused after its {self.pairs} witness pairs gave the same G with this target, {how}"

    def to_dict(self) -> dict:
        return {"pairs": self.pairs, "exact": self.exact, "max_rel": self.max_rel, "skipped": self.skipped,
                "reused": self.reused}


def compare(w: Witnesses, now: np.ndarray, rtol: float = RTOL) -> Replay:
    """Judge ``now`` (the replayed G of each witness, in order) against the stored G."""
    then = np.asarray(w.g[: len(now)], dtype=np.float64)
    now = np.asarray(now, dtype=np.float64)
    finite = then[np.isfinite(then)]
    scale = float(finite.max()) if finite.size else 0.0
    exact = np.array([a == b or (math.isnan(a) and math.isnan(b)) for a, b in zip(then, now)])
    with np.errstate(invalid="ignore"):
        diff = np.abs(now - then)
    close = exact | (np.isfinite(diff) & (diff <= rtol * np.maximum(np.abs(then), scale)))
    rel = [0.0 if e else (float(d) / scale if scale > 0 and math.isfinite(d) else math.inf)
           for e, d in zip(exact, diff)]
    bad = [f"{w.describe(i)}: G was {then[i]:.6g} when Δ̂ was sampled, {now[i]:.6g} now" for i in np.flatnonzero(~close)]
    return Replay(pairs=int(len(now)), exact=int(exact.sum()), max_rel=max(rel, default=0.0),
                  mismatch="; ".join(bad[:3]) + (f"; and {len(bad) - 3} more" if len(bad) > 3 else "") if bad else None)
