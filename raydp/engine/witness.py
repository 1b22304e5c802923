"""Replaying a reused Δ̂: pairs of its run recomputed with the target as it is *now*.

A Δ̂ is reused long after it was sampled, with the target as it is then: a helper module edited, a
library upgraded, a configuration or data file the target reads changed, a class redefined in a
notebook, state a fingerprint cannot see. The sampler is deterministic — a pair's databases depend
only on (seed, block size, pair index) through the oracle (:meth:`PairJob.draw`) — so the G of a pair,
recomputed with today's target on the same oracle records, says whether the stored G still
describes today's code.

**Fresh pairs** (:func:`choose`, the default). At every reuse, ``r`` pairs are drawn *at release time*
— by :func:`fresh_rng`, seeded from the operating system's entropy, never from the run's seed — uniformly
without replacement from all the pairs of the run whose stored G is finite, their records drawn again
by the oracle; the pair that set Δ̂ is replayed in addition (cheap, and it catches the most common
change). Which pairs will be looked at cannot be known when the target is changed, so the chance of
catching a change is a property of the change alone:

    a change of the target that moves G on a fraction ≥ q of the pairs drawn from the oracle is caught
    with probability ≥ 1 − (1 − q)^r.

(The m stored pairs are iid oracle pairs and r of them taken uniformly at random are iid oracle pairs
too.) A change that alters the target's output on a fraction q of *databases* moves G on at least that
fraction of pairs (a pair holds two databases), so the bound holds for it as well; when the change hits
each of a pair's two databases independently — one keyed on the database's bytes, say — it is
1 − (1 − q)^(2r). The statement prints the bound that holds for every change, at q = 10 %.

``r`` (:func:`replay_count`) is the number of pairs that fit in :data:`REPLAY_SHARE` of the estimate's own
sampling time at its own cost per pair, but at least ``min(MIN_REPLAY, m)`` and at most m.

**Fixed witnesses** (the fallback). When the records of arbitrary pairs cannot be drawn — the estimate
keeps no G sample (``keep_sample=False``), or no oracle is at hand (an estimate loaded from a store of
a user's oracle without ``oracle=``) — the few *witness* pairs kept with every estimate are replayed
instead, and the statement says so and claims no probability:

- the pair whose G is Δ̂ (the k-th order statistic),
- the pair with the largest G,
- :data:`SEEDED` pairs drawn by the run's seed (:func:`seeded_pairs`), picked before the run so
  that every backend reports their G even when it keeps only the largest values (``witness_pairs``
  of :class:`~raydp.engine.blocks.PairJob`).

A failed pair (G = +∞) is never replayed: whether it fails again may depend on the machine (a
timeout). The witnesses' records are drawn from the oracle once, when the estimate is made
(:func:`records_of`), and travel with it (a store keeps them in ``witnesses.npz``).

**Tolerance** (:func:`compare`). A replayed G is accepted when it equals the stored one bit for bit, or
differs by at most :data:`TOLERANCE` · max(Δ̂, abs(G then)). That cannot matter to privacy: the noise
scale is proportional to Δ̂, and a target whose G all moved by that little has a Δ̂ within a factor
1 ± 1e-6 of the stored one — a release that is as private as one at ε·(1 + 1e-6) instead of ε. It is
far above the last-bit differences of floating point that a machine's configuration makes: a ridge
target's G moved by 1.4e-9 relative when ``OPENBLAS_NUM_THREADS`` went from 1 to 2, the SVM's by 3e-11
between CPUs; and far below any change that matters (the hostile test's is 1000×).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from .blocks import PairJob

__all__ = ["Witnesses", "Replay", "ReplayPlan", "TOLERANCE", "RTOL", "SEEDED", "REPLAY_SHARE", "MIN_REPLAY",
           "seeded_pairs", "pick", "records_of", "replay", "compare", "replay_count", "fresh_rng", "choose",
           "fixed", "run", "power", "draw_chunks"]

# Spawn key of the stream that picks the seeded witnesses; no block (and not the probe) has it.
WITNESS_KEY = 2**64 - 2
SEEDED = 3
#: Relative tolerance of a replayed G: abs(G now − G then) ≤ TOLERANCE · max(Δ̂, abs(G then)) (module docstring).
TOLERANCE = 1e-6
RTOL = TOLERANCE  # its earlier name
#: Share of the estimate's own sampling time a reuse spends replaying fresh pairs (5 %).
REPLAY_SHARE = 0.05
#: Fewest fresh pairs replayed (all m when m is smaller), whatever :data:`REPLAY_SHARE` affords: 30 pairs
#: catch a change on 10 % of pairs with probability ≥ 1 − 0.9^30 > 0.957.
MIN_REPLAY = 30
#: The q at which a statement prints the power of its replay.
POWER_Q = 0.1
# Oracle records kept with the witnesses, at most (the pair that set Δ̂ is always kept); also the most
# records sent to the sealed process in one replay message.
MAX_RECORD_BYTES = 64 << 20

ROLE_DELTA, ROLE_LARGEST, ROLE_SEEDED, ROLE_FRESH = "delta", "largest", "seeded", "fresh"
_ROLE_WORDS = {ROLE_DELTA: "the pair that set Δ̂", ROLE_LARGEST: "the pair with the largest G",
               ROLE_SEEDED: "a pair drawn by the seed", ROLE_FRESH: "drawn at random at this release"}
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


# ----------------------------------------------------------------------------- fresh pairs


def replay_count(m: int, seconds: float = 0.0, block_seconds: float | None = None) -> int:
    """``r``: the fresh pairs a reuse replays — as many as fit in :data:`REPLAY_SHARE` of the estimate's
    sampling time (``seconds``, wall clock), at least ``min(MIN_REPLAY, m)``, at most ``m``.

    A replayed pair is priced at ``block_seconds``, the estimate's own mean time to draw and evaluate
    one block in one process (a replayed pair draws its whole block, and the replay runs in one
    process): for a run of one pair per block in one process that is ``seconds / m`` and r is
    ``REPLAY_SHARE · m``; a run spread over many slots, or of many pairs per block, affords fewer.
    Without ``block_seconds`` the price is ``seconds / m``; without ``seconds`` (a store written before
    raydp recorded it) r is the floor.

    >>> replay_count(285, 1.0), replay_count(10_000, 100.0, 0.01), replay_count(10_000, 100.0), replay_count(12)
    (30, 500, 500, 12)
    """
    m = int(m)
    floor = min(MIN_REPLAY, m)
    seconds = float(seconds or 0.0)
    price = float(block_seconds) if block_seconds is not None and block_seconds > 0 else (seconds / m if m else 0.0)
    if not (seconds > 0 and price > 0 and math.isfinite(seconds) and math.isfinite(price)):
        return floor
    return max(floor, min(m, int(REPLAY_SHARE * seconds / price)))


def fresh_rng() -> np.random.Generator:
    """The generator that picks a release's fresh pairs: seeded from the operating system's entropy
    (``SeedSequence()``), never from the run's seed, so the pairs a release will look at cannot be known
    beforehand. Its draws choose pairs to check, they are not noise."""
    return np.random.default_rng()


def power(r: int, q: float = POWER_Q) -> float:
    """A lower bound on the probability that ``r`` fresh pairs catch a change of the target that moves G on a
    fraction ≥ ``q`` of pairs: ``1 − (1 − q)^r`` (module docstring)."""
    return 1.0 - (1.0 - q) ** int(r) if r > 0 else 0.0


def _power_text(r: int, q: float = POWER_Q) -> str:
    """:func:`power` as printed: rounded down, never overstated (``0.957``, or ``1 − 2.7e-05`` near 1)."""
    miss = (1.0 - q) ** int(r)
    p = 1.0 - miss
    if p < 0.999:
        return f"{math.floor(p * 1000) / 1000:.3f}"
    up = float(f"{miss:.1e}")
    if up < miss:
        up = float(f"{up + 10 ** (math.floor(math.log10(miss)) - 1):.1e}")
    return f"1 − {up:.2g}"


@dataclass(frozen=True)
class ReplayPlan:
    """What a reuse replays: ``pairs`` (a :class:`Witnesses`: the pairs with their stored G and roles,
    their records when already at hand) and ``job``, which draws the records of any pair of the run
    (None: replay the fixed witnesses' kept records). ``drawn`` is r, the pairs drawn at random from the
    ``candidates`` pairs of the run's ``m`` whose G is finite; ``why_fixed`` says why no pairs were drawn."""

    pairs: Witnesses
    job: PairJob | None
    fresh: bool
    m: int
    drawn: int = 0
    candidates: int = 0
    why_fixed: str | None = None


def choose(sample: np.ndarray, delta_pair: int, job: PairJob, r: int, rng: np.random.Generator | None = None) -> ReplayPlan:
    """``r`` pairs drawn uniformly without replacement from the pairs of ``sample`` (every G of the run, in
    pair order) with a finite G, by ``rng`` (default :func:`fresh_rng`), and the pair that set Δ̂
    (``delta_pair``) first, in addition. Records are drawn later, by ``job`` (:func:`run`)."""
    sample = np.asarray(sample, dtype=np.float64)
    candidates = np.flatnonzero(np.isfinite(sample))
    r = max(0, min(int(r), candidates.size))
    rng = fresh_rng() if rng is None else rng
    drawn = np.sort(rng.choice(candidates, size=r, replace=False)) if r else np.empty(0, dtype=np.int64)
    delta_pair = int(delta_pair)
    pairs = [delta_pair] + [int(p) for p in drawn if p != delta_pair]
    roles = [ROLE_DELTA] + [ROLE_FRESH] * (len(pairs) - 1)
    w = Witnesses(tuple(pairs), tuple(float(sample[p]) for p in pairs), tuple(roles))
    return ReplayPlan(w, job, fresh=True, m=int(sample.size), drawn=r, candidates=int(candidates.size))


def fixed(w: Witnesses, m: int, why: str) -> ReplayPlan:
    """The fallback: the estimate's fixed witnesses, with their kept records; ``why`` no pairs were drawn."""
    return ReplayPlan(w, None, fresh=False, m=int(m), why_fixed=why)


def draw_chunks(job: PairJob, pairs, max_bytes: int = MAX_RECORD_BYTES):
    """``(pairs, records)`` chunks of the given pairs, in their order, records shaped ``(len, n + 1, ...)``
    as their blocks drew them; each chunk at most ``max_bytes`` of records (at least one pair). One block
    is held at a time, so pairs in block order draw each block once."""
    held, start, chunk, out, size = None, 0, [], [], 0
    for pair in pairs:
        b = int(pair) // job.block_size
        if b != held:
            records, start = job.draw(b)
            held = b
        rec = np.array(records[int(pair) - start])  # its own copy: not a view holding the whole block
        if out and size + rec.nbytes > max_bytes:
            yield chunk, np.stack(out)
            chunk, out, size = [], [], 0
        chunk.append(int(pair))
        out.append(rec)
        size += rec.nbytes
    if out:
        yield chunk, np.stack(out)


def run(plan: ReplayPlan, evaluate, scale: float | None = None, max_bytes: int = MAX_RECORD_BYTES) -> "Replay":
    """Replay ``plan``: ``evaluate(records, pairs)`` gives the G of each pair now (the sealed process's
    :meth:`~raydp.seal.Sealed.replay`), :func:`compare` judges it against the stored G, tolerance relative to
    ``scale`` (Δ̂). Fresh pairs are drawn and sent in chunks of at most ``max_bytes`` of records; the
    first chunk with a G that differs ends the replay."""
    t0 = time.perf_counter()
    w = plan.pairs
    if plan.job is None:
        result = compare(w, evaluate(w.records, list(w.pairs)), scale=scale)
        done, exact, max_rel, mismatch = result.pairs, result.exact, result.max_rel, result.mismatch
    else:
        done = exact = 0
        max_rel, mismatch = 0.0, None
        for pairs, records in draw_chunks(plan.job, w.pairs, max_bytes):
            part = Witnesses(w.pairs[done:done + len(pairs)], w.g[done:done + len(pairs)],
                             w.roles[done:done + len(pairs)])
            result = compare(part, evaluate(records, pairs), scale=scale)
            done += result.pairs
            exact += result.exact
            max_rel = max(max_rel, result.max_rel)
            if result.mismatch is not None:
                mismatch = result.mismatch
                break
    return Replay(pairs=done, exact=exact, max_rel=max_rel, mismatch=mismatch, fresh=plan.fresh, drawn=plan.drawn,
                  m=plan.m, candidates=plan.candidates, why_fixed=plan.why_fixed,
                  seconds=time.perf_counter() - t0, indices=tuple(w.pairs[:done]))


# ----------------------------------------------------------------------------- the result


@dataclass(frozen=True)
class Replay:
    """What replaying an estimate's pairs showed.

    ``pairs`` replayed in all, ``exact`` of them equal bit for bit, ``max_rel`` the largest difference
    relative to max(Δ̂, abs(G then)). ``fresh``: ``drawn`` (r) of them were drawn at random at this release
    from the ``candidates`` pairs with a finite G among the run's ``m`` (and the pair that set Δ̂ added);
    else they were the fixed witnesses, and ``why_fixed`` says why. ``skipped`` says why no replay happened
    (``replay=False``), ``mismatch`` which pairs differ. ``seconds``: how long the replay took.
    """

    pairs: int = 0
    exact: int = 0
    max_rel: float = 0.0
    skipped: str | None = None
    mismatch: str | None = None
    reused: bool = True  # the estimate was made before the release that replayed it (the statement says so)
    fresh: bool = False
    drawn: int = 0
    m: int = 0
    candidates: int = 0
    why_fixed: str | None = None
    tolerance: float = TOLERANCE
    seconds: float = 0.0
    indices: tuple = field(default=(), repr=False)  # the pairs replayed, in order (pair indices of the run)

    @property
    def ok(self) -> bool:
        return self.skipped is None and self.mismatch is None

    def power(self, q: float = POWER_Q) -> float | None:
        """Probability ≥ this that the replay catches a change moving G on ≥ ``q`` of pairs; None when the
        pairs were not drawn at random (fixed witnesses, or none)."""
        return power(self.drawn, q) if self.fresh and self.skipped is None else None

    def words(self) -> str:
        """How a statement reports it."""
        if self.skipped is not None:
            return (f"Δ̂ reused without replaying its witness pairs ({self.skipped}): that it describes this target is "
                    "assumed, not checked")
        how = ("bit for bit" if self.exact == self.pairs else
               f"within {self.tolerance:g} of max(Δ̂, G) (largest difference {self.max_rel:.2g})")
        if not self.fresh:
            return (f"Δ̂ reused after its {self.pairs} fixed witness pairs (the pair that set Δ̂, the largest G, pairs "
                    f"drawn by the run's seed) gave the same G with this target, {how}; no pairs were drawn at random "
                    f"at this release ({self.why_fixed or 'not asked'}), so no probability of catching a change of "
                    "the target is claimed")
        of = f"all {self.candidates} pairs of its run" + (
            f" with a finite G (of m = {self.m})" if self.candidates != self.m else "")
        delta = "the pair that set Δ̂ among them" if self.pairs == self.drawn else "and the pair that set Δ̂"
        return (f"Δ̂ reused after {self.pairs} of its pairs gave the same G with this target, {how}: {self.drawn} drawn "
                f"at random at this release from {of}, {delta}; a change of the target that moves G "
                f"on ≥ {POWER_Q:.0%} of pairs would have been caught with probability ≥ {_power_text(self.drawn)}")

    def to_dict(self) -> dict:
        return {"pairs": self.pairs, "exact": self.exact, "max_rel": self.max_rel, "skipped": self.skipped,
                "reused": self.reused, "fresh": self.fresh, "drawn": self.drawn, "m": self.m,
                "candidates": self.candidates, "why_fixed": self.why_fixed, "tolerance": self.tolerance,
                "power": None if self.power() is None else {"bound": "1 - (1 - q)^drawn",
                                                             **{str(q): power(self.drawn, q) for q in (0.1, 0.3)}},
                "seconds": self.seconds}


def compare(w: Witnesses, now: np.ndarray, rtol: float = TOLERANCE, scale: float | None = None) -> Replay:
    """Judge ``now`` (the replayed G of each pair of ``w``, in order) against the stored G: equal, or within
    ``rtol`` · max(``scale``, abs(G then)). ``scale`` is Δ̂ (default: the largest finite stored G of ``w``)."""
    then = np.asarray(w.g[: len(now)], dtype=np.float64)
    now = np.asarray(now, dtype=np.float64)
    if scale is None or not math.isfinite(scale):
        finite = then[np.isfinite(then)]
        scale = float(finite.max()) if finite.size else 0.0
    scale = abs(float(scale))
    exact = np.array([a == b or (math.isnan(a) and math.isnan(b)) for a, b in zip(then, now)], dtype=bool)
    with np.errstate(invalid="ignore"):
        diff = np.abs(now - then)
        allowed = rtol * np.maximum(np.abs(then), scale)
    close = exact | (np.isfinite(diff) & (diff <= allowed))
    with np.errstate(invalid="ignore", divide="ignore"):
        base = np.maximum(np.abs(then), scale)
    rel = [0.0 if e else (float(d) / float(s) if s > 0 and math.isfinite(d) else math.inf)
           for e, d, s in zip(exact, diff, base)]
    bad = [f"{w.describe(i)}: G was {float(then[i])!r} when Δ̂ was sampled, {float(now[i])!r} now "
           + ("(the target failed on it)" if not math.isfinite(now[i]) else
              f"(a difference of {rel[i]:.3g} relative to max(Δ̂, G then), more than the {rtol:g} tolerated)")
           for i in np.flatnonzero(~close)]
    return Replay(pairs=int(len(now)), exact=int(exact.sum()), max_rel=max(rel, default=0.0), tolerance=rtol,
                  mismatch="; ".join(bad[:3]) + (f"; and {len(bad) - 3} more" if len(bad) > 3 else "") if bad else None)
