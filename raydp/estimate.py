"""The sensitivity estimate: Δ̂ with the plan and run identity it was computed for."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from .engine.reduce import kth_smallest
from .engine.witness import Replay, Witnesses
from .errors import PlanError
from .identity import RunIdentity
from .plan import Plan, plan as make_plan


@dataclass(frozen=True)
class SensitivityEstimate:
    """Δ̂ and everything needed to trust and reuse it (plan and run identity).

    ``sensitivity`` is G_(k); ``top`` the m − k + 1 largest G (descending); ``sample`` the whole G
    sample in pair order when it was kept. ``failures`` counts pairs whose target failed (each
    counted as G = +∞). ``identity`` is the :class:`~raydp.identity.RunIdentity`; its fields are
    also readable here (``est.n``, ``est.seed``, ``est.mechanism``, ...).
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
