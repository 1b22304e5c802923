"""The sensitivity estimate: Δ̂ with the plan and run identity it was computed for."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from .engine.blocks import PairJob
from .engine.reduce import kth_smallest
from .engine.witness import Replay, ReplayPlan, Witnesses, choose, fixed, records_of, replay_count
from .errors import PlanError
from .identity import RunIdentity
from .plan import Plan, make_plan


@dataclass(frozen=True)
class SensitivityEstimate:
    """Δ̂ and everything needed to trust and reuse it (plan and run identity).

    ``sensitivity`` is G_(k); ``top`` the m − k + 1 largest G (descending); ``sample`` the whole G
    sample in pair order when it was kept (by default: ``SamplerOptions.keep_sample``). ``failures``
    counts pairs whose target failed (each counted as G = +∞). ``identity`` is the
    :class:`~raydp.identity.RunIdentity`; its fields are also readable here (``est.n``, ``est.seed``,
    ``est.mechanism``, ...).

    A reuse replays pairs of the run drawn at random at release time (:meth:`replay_plan`,
    :mod:`raydp.engine.witness`): that needs ``sample`` (the stored G of every pair) and ``redraw``, a
    :class:`~raydp.engine.blocks.PairJob` holding the oracle, seed and block size that draw any pair's
    records again (never written to a store, left out of a pickle it would break; a built-in oracle is
    rebuilt from the identity without it). Without them the fixed ``witnesses`` are replayed.
    """

    sensitivity: float
    plan: Plan
    identity: RunIdentity
    failures: int
    top: np.ndarray = field(default=None, repr=False, compare=False)
    sample: np.ndarray | None = field(default=None, repr=False, compare=False)
    failure_kinds: dict = field(default_factory=dict, compare=False)
    seconds: float = field(default=0.0, compare=False)
    # where the pairs ran ("local", "ray", with auto's reason); never part of the result
    backend: str | None = field(default=None, compare=False)
    # a few pairs with their G and oracle records, replayed whenever this Δ̂ is reused (raydp.engine.witness)
    witnesses: Witnesses | None = field(default=None, repr=False, compare=False)
    # how stored G values this estimate reused (a store's resume) were checked against the target
    replay: Replay | None = field(default=None, repr=False, compare=False)
    # how a time budget chose m (SamplerOptions.time_budget): budget, slots, seconds per pair, the fewest
    # pairs γ needed and the (m, k) taken; None when the plan was taken as asked
    sizing: dict | None = field(default=None, compare=False)
    # mean seconds one block took to draw and evaluate in one process (prices a replayed pair); None: unknown
    block_seconds: float | None = field(default=None, compare=False)
    # draws the records of any pair of the run again (oracle, seed, block size; no target): fresh replays
    redraw: PairJob | None = field(default=None, repr=False, compare=False)

    # the run identity, read through
    n = property(lambda self: self.identity.n)
    seed = property(lambda self: self.identity.seed)
    block_size = property(lambda self: self.identity.block_size)
    mechanism = property(lambda self: self.identity.mechanism, doc="The mechanism's identity dict (name, params).")
    norm = property(lambda self: self.identity.norm)
    target = property(lambda self: self.identity.target)
    oracle = property(lambda self: self.identity.oracle)
    output_dim = property(lambda self: self.identity.output_dim)
    version = property(lambda self: self.identity.version)

    @property
    def gamma(self) -> float:
        return self.plan.gamma

    def __getstate__(self):
        # ``redraw`` holds the user's oracle: kept in a pickle when it pickles, else left out (a reuse of the
        # unpickled estimate then rebuilds a built-in oracle, or replays the fixed witnesses and says so)
        state = dict(self.__dict__)
        if state.get("redraw") is not None:
            import pickle

            try:
                pickle.dumps(state["redraw"])
            except Exception:  # noqa: BLE001 - any oracle that does not pickle
                state["redraw"] = None
        return state

    def drawer(self) -> PairJob | None:
        """What draws the records of any pair of this run: ``redraw``, or a built-in oracle rebuilt from the
        identity (:func:`raydp.oracles.rebuild`); None when neither is at hand."""
        if self.redraw is not None:
            return self.redraw
        from .oracles import rebuild

        oracle = rebuild(self.oracle)
        return None if oracle is None else drawing_job(oracle, self.identity, self.plan.m)

    def delta_pair(self) -> int | None:
        """The index of the pair that set Δ̂ (one of them, when several pairs share its G)."""
        if self.sample is not None and self.sample.size == self.plan.m:
            at = np.flatnonzero(self.sample == self.sensitivity)
            if at.size:
                return int(at[0])
        w = self.witnesses
        if w is not None and len(w) and w.roles[0] == "delta" and w.g[0] == self.sensitivity:
            return int(w.pairs[0])
        return None

    def replay_plan(self, rng=None) -> ReplayPlan:
        """What a reuse replays (:mod:`raydp.engine.witness`): r pairs drawn at random now, by ``rng``
        (default: seeded from the OS), from all pairs of the run with a finite G, and the pair that set Δ̂,
        r from :func:`~raydp.engine.witness.replay_count`; or, when the records of arbitrary pairs cannot be
        drawn, the fixed witnesses, with the reason."""
        why, job, delta = None, None, self.delta_pair()
        if self.sample is None or self.sample.size != self.plan.m:
            why = "the estimate keeps no G sample: it was made with keep_sample=False"
        elif delta is None:
            why = "the estimate's G sample holds no pair at Δ̂"
        else:
            job = self.drawer()
            if job is None:
                why = ("no oracle to draw its pairs' records: its oracle is not a built-in one and none was given "
                       "(load_estimate(store, oracle=...))")
            elif not self._draws_its_witnesses(job):
                why = "its oracle no longer draws the records its witness pairs were evaluated on"
        if why is None:
            r = replay_count(self.plan.m, self.seconds, self.block_seconds)
            return choose(self.sample, delta, job, r, rng)
        w = self.witnesses if self.witnesses is not None else Witnesses((), (), ())
        return fixed(w, self.plan.m, why)

    def _draws_its_witnesses(self, job: PairJob) -> bool:
        """``job`` draws the records kept with the first witness again (the same oracle, seed and blocks)."""
        w = self.witnesses
        if w is None or w.records is None or not len(w):
            return True  # nothing kept to compare with
        try:
            return bool(np.array_equal(records_of(job, w.pairs[:1])[0], w.records[0]))
        except Exception:  # noqa: BLE001 - an oracle that fails drawing cannot redraw pairs either
            return False

    def provenance(self) -> dict:
        """The run identity and plan: what Δ̂ was computed for (not the result); with ``sizing`` when a time
        budget chose m."""
        prov = self.identity.provenance(self.plan)
        if self.sizing is not None:
            prov["sizing"] = dict(self.sizing)
        return prov

    def to_dict(self) -> dict:
        d = self.provenance()
        d.update(sensitivity=self.sensitivity, failures=self.failures, failure_kinds=dict(self.failure_kinds))
        return d

    def for_gamma(self, gamma: float) -> "SensitivityEstimate":
        """Re-derive Δ̂ for another γ from the same m pairs (Table 1, mode k) without sampling.

        Theorem 15 holds for the new (m, k, γ) because the G sample is the same iid sample; only
        the order statistic changes. Needs the full sample unless the new k is at least the old k.
        The witnesses stay those of the sample (they check the target against it, whatever k).
        """
        new = make_plan(m=self.plan.m, gamma=gamma)
        if new.k >= self.plan.k and self.top is not None:
            top_sorted = np.sort(self.top)[::-1]
            value = float(top_sorted[self.plan.m - new.k])
        elif self.sample is not None:
            value = kth_smallest(self.sample, new.k)
        else:
            raise PlanError(
                f"gamma={gamma} needs k={new.k} < {self.plan.k}: the full G sample is required "
                "(run with keep_sample=True or a store)"
            )
        keep = new.m - new.k + 1
        top = None
        if self.sample is not None:
            top = np.sort(self.sample)[::-1][:keep]
        elif self.top is not None:
            top = np.sort(self.top)[::-1][:keep]
        return replace(self, sensitivity=value, plan=new, top=top)


def drawing_job(oracle, identity: RunIdentity, m: int) -> PairJob:
    """A job that only draws records (:meth:`PairJob.draw`): ``oracle`` with the run's n, seed and block size."""
    return PairJob(target=None, oracle=oracle, mechanism=None, n=identity.n, m=int(m), seed=identity.seed,
                   block_size=identity.block_size, out_dim=identity.output_dim)
