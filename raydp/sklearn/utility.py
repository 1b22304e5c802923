"""How useful a private model will be, estimated from public records alone, before any private record is read.

:func:`simulate` plays the release on public data: for each repeat it draws n records from the oracle
(standing in for the private data), fits the estimator as the target does, releases the parameters
with noise of the mechanism's own law and scale at the Δ̂ already sampled (Laplace scale Δ̂/ε, or the
Gaussian's σ), and scores the released model on other oracle records — next to the same fit without noise and a trivial
predictor (the majority class, or the mean). Nothing private is read and nothing is charged: the
preview is a function of the public oracle, n, the estimator and Δ̂. Its noise is drawn from a seeded
numpy generator, so the same preview is the same table twice; that is fine here because no private
value is released — the release itself always draws from OpenDP's samplers.

"Useless" is a one-sided judgement with the preview's own uncertainty: the release is called useless
when the expected private score, less two standard errors, does not reach a tenth of the way from the
trivial predictor's score to the non-private one (:meth:`UtilityPreview.useless`).

What it cannot see: how far the private data differ from the oracle's. With a bootstrap oracle the
test records are drawn from the same public rows as the training records, so both scores (private and
not) are optimistic alike; their gap is what the preview is for.
"""

from __future__ import annotations

import copy
import math
import statistics
import warnings
from dataclasses import dataclass, field

import numpy as np

from ..errors import RaydpError
from .inputs import is_classifier
from .params import assign, resolve

__all__ = ["Pilot", "UtilityPreview", "UtilityWarning", "pilot_sensitivities", "simulate", "with_params"]

# The preview's own public draws: a fixed stream, apart from the skeleton's and the sampler's.
_PREVIEW_SEED = 0x9E_71E5
#: The interval a preview states (:meth:`UtilityPreview.interval`): the central INTERVAL_LEVEL of the
#: previewed releases' scores, widened INTERVAL_WIDEN times about its middle. The previews are drawn from the
#: oracle, not from the private data, so the central 80% alone held only 62% of real releases (49% of first
#: releases) in ``python jobs/sklearn_utility.py --one-liner`` (3 data sets, 45 fits, 495 releases); widened
#: twice it held 95% (95% CI 0.92-0.97; 43 of 45 first releases). The preview table states "9 in 10".
INTERVAL_LEVEL = 0.8
INTERVAL_WIDEN = 2.0
INTERVAL_CLAIM = "9 in 10"


class UtilityWarning(UserWarning):
    """The previewed private model is not shown to beat a trivial predictor (see :meth:`UtilityPreview.useless`)."""


def with_params(model, target, values: np.ndarray):
    """A copy of ``model`` with ``target``'s released parameters set from the flat vector ``values``."""
    out = copy.deepcopy(model)
    values = np.asarray(values, dtype=np.float64)
    at = 0
    for path, shape in zip(target.params, target.shapes):
        size = math.prod(shape)
        part = values[at: at + size]
        at += size
        original = resolve(model, path)
        assign(out, path, part.reshape(shape).copy() if isinstance(original, np.ndarray) else float(part[0]))
    return out


@dataclass(frozen=True)
class UtilityPreview:
    """Expected score of the released model per ε, from public records only (no privacy spent).

    ``rows``: one dict per ε with ``epsilon``, ``mean``, ``sd`` and the repeats' ``scores``;
    ``nonprivate``: the same fits without noise (mean, sd); ``trivial``: the majority class's accuracy
    or the mean's R² (None for an unsupervised estimator); ``metric``: what ``score`` measures.
    """

    n: int
    sensitivity: float
    mechanism: str
    metric: str
    rows: list
    nonprivate: tuple
    trivial: float | None
    repeats: int
    public_steps: list = field(default_factory=list)

    def expected(self, epsilon: float) -> float:
        return self.row(epsilon)["mean"]

    def interval(self, epsilon: float, level: float = INTERVAL_LEVEL,
                 widen: float = INTERVAL_WIDEN) -> tuple[float, float]:
        """Where a release at ``epsilon`` is expected to land: the central ``level`` of the previewed releases'
        scores (empirical quantiles of the repeats), widened ``widen`` times about its middle (``widen=1``: the
        quantiles themselves). The default is the interval whose coverage of real releases was measured
        (:data:`INTERVAL_WIDEN`); ``python jobs/sklearn_utility.py --one-liner`` measures it again."""
        scores = np.asarray(self.row(epsilon)["scores"], dtype=np.float64)
        tail = (1.0 - level) / 2.0
        low, high = float(np.quantile(scores, tail)), float(np.quantile(scores, 1.0 - tail))
        if widen != 1:
            middle, half = (low + high) / 2.0, (high - low) / 2.0 * widen
            low, high = middle - half, middle + half
        # no score lies beyond its metric's range (accuracy in [0, 1], R² at most 1): the ends stop there
        if self.metric in ("accuracy", "R²"):
            high = min(high, 1.0)
        if self.metric == "accuracy":
            low = max(low, 0.0)
        return low, high

    def useless(self, epsilon: float) -> bool:
        """The release is not shown to beat the trivial predictor: the expected private score less two
        standard errors stays below ``trivial + 0.1·(non-private − trivial)``."""
        if self.trivial is None:
            return False
        row = self.row(epsilon)
        margin = 0.1 * max(self.nonprivate[0] - self.trivial, 0.0)
        return row["mean"] - 2 * row["sd"] / math.sqrt(max(len(row["scores"]), 1)) <= self.trivial + margin

    def risky(self, epsilon: float) -> bool:
        """A release may land below the trivial predictor: the stated interval (:meth:`interval`, where 9 in
        10 real releases were measured to land) reaches below its score. Weaker than :meth:`useless`: the
        release may still be useful on average."""
        if self.trivial is None:
            return False
        return self.interval(epsilon)[0] < self.trivial

    def row(self, epsilon: float) -> dict:
        """The preview at ``epsilon``: ``mean``, ``sd`` and the repeats' ``scores``."""
        return self._row(epsilon)

    def _row(self, epsilon: float) -> dict:
        for r in self.rows:
            if math.isclose(r["epsilon"], epsilon):
                return r
        raise KeyError(f"no preview at epsilon={epsilon}; previewed: {[r['epsilon'] for r in self.rows]}")

    def table(self) -> str:
        """A Markdown table: ε, expected private score ± sd, where a release lands (:meth:`interval`), non-private,
        trivial."""
        head = (f"| ε | expected private {self.metric} | {INTERVAL_CLAIM} releases measured in | non-private "
                "| trivial |\n|---|---|---|---|---|\n")
        np_mean, np_sd = self.nonprivate
        triv = "—" if self.trivial is None else f"{self.trivial:.3f}"

        def span(r):
            lo, hi = self.interval(r["epsilon"])
            return f"[{lo:.3f}, {hi:.3f}]"

        return head + "\n".join(f"| {r['epsilon']:g} | {r['mean']:.3f} ± {r['sd']:.3f} | {span(r)} | "
                                f"{np_mean:.3f} ± {np_sd:.3f} | {triv} |" for r in self.rows)

    def __str__(self) -> str:
        public = f"; fitted on public records: {', '.join(self.public_steps)}" if self.public_steps else ""
        return (f"Utility preview from public oracle records only (no private record read, no privacy spent): "
                f"n={self.n}, {self.mechanism} with Δ̂={self.sensitivity:.4g}, {self.repeats} repeats{public}\n"
                + self.table())


def _score(model, X, y) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(model.score(X) if y is None else model.score(X, y))


def _trivial(model, Xtr, ytr, Xte, yte) -> float | None:
    if ytr is None:
        return None
    from sklearn.dummy import DummyClassifier, DummyRegressor

    dummy = DummyClassifier(strategy="most_frequent") if is_classifier(model) else DummyRegressor()
    return _score(dummy.fit(Xtr, ytr), Xte, yte)


# The pilot's own public draws (:func:`pilot_sensitivities`): apart from the preview's, the skeleton's and the sampler's.
_PILOT_SEED = 0x9170_7A1E
#: The pilot's Δ̂ stand-in: this quantile of its G values (the next one up; with few pairs, their largest).
PILOT_QUANTILE = 0.99


@dataclass(frozen=True)
class Pilot:
    """Neighbouring pairs drawn from the oracle alone, each measured in every candidate's norm: a stand-in
    Δ̂ per mechanism (their :data:`PILOT_QUANTILE` quantile) to choose a mechanism by preview before the
    real Δ̂ is sampled. Public, and apart from the sampler's pairs: the plan and the sample stay independent of it."""

    pairs: int
    failed: int
    seconds: float
    sensitivities: dict  # mechanism name -> stand-in Δ̂


def pilot_sensitivities(target, oracle, n: int, mechanisms: list, *, max_pairs: int, min_pairs: int,
                        seconds: float | None) -> Pilot | None:
    """Up to ``max_pairs`` public pairs (at least ``min_pairs``, then while under ``seconds``): D of n oracle
    records and D′ with its last record redrawn, G = ‖f(D) − f(D′)‖ in each mechanism's norm. None when fewer
    than two pairs could be evaluated (the caller then samples each mechanism's Δ̂ instead)."""
    import time

    t0 = time.perf_counter()
    gs = {m.name: [] for m in mechanisms}
    failed = pairs = 0
    chunk = PILOT_CHUNK if _block_form(target) else 1
    i = 0
    while i < max_pairs:
        if i >= min_pairs and seconds is not None and time.perf_counter() - t0 > seconds:
            break
        count = min(chunk, max_pairs - i) if i >= min_pairs else min(chunk, min_pairs - i)
        ds, dps = [], []
        for j in range(i, i + count):
            rng = np.random.default_rng([_PILOT_SEED, n, j])
            records = np.asarray(oracle.sample(rng, n + 1), dtype=np.float64)
            ds.append(records[:n])
            dps.append(np.concatenate([records[: n - 1], records[n:]]))
        i += count
        pairs += count
        for a, b in _pilot_outputs(target, ds, dps):
            if a is None:
                failed += 1  # a public draw the fit cannot take: no stand-in from it (nothing is released from a pilot)
                continue
            for m in mechanisms:
                g = float(m.distance(m.embed(a)[None, :], m.embed(b)[None, :])[0])
                if math.isfinite(g):
                    gs[m.name].append(g)
    if min(len(v) for v in gs.values()) < 2:
        return None
    q = {name: float(np.quantile(v, PILOT_QUANTILE, method="higher")) for name, v in gs.items()}
    return Pilot(pairs=pairs, failed=failed, seconds=time.perf_counter() - t0, sensitivities=q)


#: Pilot pairs evaluated at once by a target with a block form (its ``pair_batch`` or ``batch``).
PILOT_CHUNK = 16


def _block_form(target) -> bool:
    return callable(getattr(target, "pair_batch", None)) or callable(getattr(target, "batch", None))


def _pilot_outputs(target, ds: list, dps: list):
    """``(f(D), f(D′))`` of each pilot pair, ``(None, None)`` where the fit fails: a chunk at once through the
    target's block form (the same parameters as its fit, :mod:`raydp.sklearn.fast`), pair by pair otherwise
    or when the block form raises."""
    if len(ds) > 1 and _block_form(target):
        try:
            d, dp = np.stack(ds), np.stack(dps)
            pair_batch = getattr(target, "pair_batch", None)
            a, b = pair_batch(d, dp) if callable(pair_batch) else (target.batch(d), target.batch(dp))
            a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
            ok = np.isfinite(a).all(axis=1) & np.isfinite(b).all(axis=1)
            return [(a[j], b[j]) if ok[j] else (None, None) for j in range(len(ds))]
        except (RaydpError, ValueError, ArithmeticError):
            pass
    out = []
    for d, dp in zip(ds, dps):
        try:
            out.append((np.asarray(target(d), dtype=np.float64), np.asarray(target(dp), dtype=np.float64)))
        except (RaydpError, ValueError, ArithmeticError):
            out.append((None, None))
    return out


def _noised(mechanism, vec: np.ndarray, sensitivity: float, rng: np.random.Generator) -> np.ndarray:
    """``vec`` plus noise of ``mechanism``'s law and scale, from a seeded generator (public data only)."""
    scale = mechanism.noise_scale(sensitivity)
    if mechanism.name == "laplace":
        return vec + rng.laplace(0.0, scale, vec.shape)
    if mechanism.name == "gaussian":
        return vec + rng.normal(0.0, scale, vec.shape)
    raise RaydpError(f"no preview for a {mechanism.name} mechanism: Laplace or Gaussian only")


def simulate(skeleton_model, target, oracle, n: int, sensitivity: float, mechanisms: dict, repeats: int = 5,
             test_records: int | None = None, seed: int = _PREVIEW_SEED, cache: dict | None = None) -> UtilityPreview:
    """The preview: ``mechanisms`` maps each ε to the mechanism that would release at it. ``cache`` (a dict,
    one per target, skeleton and oracle) keeps each repeat's draws, fit and noise-free scores, so that
    previews of other mechanisms or Δ̂s of the same target do not fit it again (the noise is drawn afresh
    from the same seeded stream: the same preview as without the cache)."""
    if not mechanisms:
        raise RaydpError("no epsilon to preview")
    test_records = max(n, 200) if test_records is None else test_records
    per_eps = {eps: [] for eps in mechanisms}
    clean, trivial = [], []
    cache = {} if cache is None else cache
    for r in range(repeats):
        key = (n, test_records, seed, r)
        if key not in cache:
            rng = np.random.default_rng([seed, r])
            train = np.asarray(oracle.sample(rng, n), dtype=np.float64)
            test = np.asarray(oracle.sample(rng, test_records), dtype=np.float64)
            Xtr, ytr = target.split(train)
            Xte, yte = target.split(test)
            try:
                vec = target(train)
            except RaydpError:
                cache[key] = None  # a public draw the fit cannot take (a class missing): not a preview of anything
                continue
            cache[key] = (vec, Xte, yte, _score(with_params(skeleton_model, target, vec), Xte, yte),
                          _trivial(skeleton_model, Xtr, ytr, Xte, yte), rng.bit_generator.state)
        entry = cache[key]
        if entry is None:
            continue
        vec, Xte, yte, score, t, state = entry
        rng = np.random.default_rng()
        rng.bit_generator.state = state  # the stream just past the draws, as without the cache
        clean.append(score)
        if t is not None:
            trivial.append(t)
        for eps, mech in mechanisms.items():
            noisy = _noised(mech, vec, sensitivity, rng)
            per_eps[eps].append(_score(with_params(skeleton_model, target, noisy), Xte, yte))
    if not clean:
        raise RaydpError(f"no preview: the estimator could not be fitted on any of {repeats} public draws of n={n}")
    sd = (lambda v: statistics.stdev(v) if len(v) > 1 else 0.0)
    rows = [dict(epsilon=float(eps), mean=statistics.fmean(v), sd=sd(v), scores=v) for eps, v in per_eps.items()]
    metric = ("accuracy" if is_classifier(skeleton_model) else "R²") if target.supervised else "score"
    first = next(iter(mechanisms.values()))
    return UtilityPreview(n=n, sensitivity=float(sensitivity), mechanism=first.name, metric=metric, rows=rows,
                          nonprivate=(statistics.fmean(clean), sd(clean)),
                          trivial=statistics.fmean(trivial) if trivial else None, repeats=len(clean))
