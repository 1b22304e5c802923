"""Sample-Then-Respond (Algorithm 2): release M_Δ̂(f(D)) with its (ε, δ, γ) statement.

Δ̂ never depends on the private data D: it is computed from the oracle (or loaded from a store),
then the mechanism runs once on f(D). Reusing one Δ̂ for many releases is fine (the paper's offline
amortisation); each release still spends its own ε and δ.

>>> import numpy as np, raydp
>>> from raydp import oracles, targets
>>> data = np.random.default_rng(0).exponential(1.0, size=200)   # the private data
>>> r = raydp.sample_then_respond(data, targets.mean(), raydp.Laplace(1.0),
...                               oracle=oracles.exponential(1.0), gamma=0.1, seed=1)
>>> (r.epsilon, r.delta, r.gamma)
(1.0, 0.0, 0.1)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .errors import EstimateMismatchError, InvalidArgumentError, MechanismError, TargetError
from .estimate import SensitivityEstimate
from .identity import describe, measurement
from .sampler import estimate_sensitivity
from .targets import as_target


@dataclass(frozen=True)
class Release:
    """A private response and the privacy it was released under.

    ``mechanism`` is the mechanism's identity (``{"name": ..., "params": {...}}``), the same kind as
    ``SensitivityEstimate.mechanism``; ``estimate`` the provenance of the Δ̂ that was used.
    """

    value: object
    epsilon: float
    delta: float
    gamma: float
    sensitivity: float
    mechanism: dict
    estimate: dict = field(default_factory=dict, repr=False)
    # With a ledger: {"path", "entry" (its id), "composed": the ledger's (Σε, Σδ, γ) after this release}.
    ledger: dict | None = field(default=None, repr=False)

    def statement(self) -> str:
        notion = "ε" if self.delta == 0 else "(ε, δ)"
        return (f"({self.epsilon:g}, {self.delta:g}, {self.gamma:g})-random differential privacy: "
                f"{notion}-DP for all but a γ={self.gamma:g} fraction of neighbouring databases drawn "
                f"from the oracle; {self.mechanism['name']} mechanism with sensitivity {self.sensitivity:.6g}")


def check_estimate_fits(estimate: SensitivityEstimate, target, mechanism, n: int) -> None:
    """Refuse an estimate computed for another target, mechanism norm or database size."""
    problems = []
    if estimate.n != n:
        problems.append(f"it was computed for n={estimate.n} records, the data has n={n}")
    if estimate.norm != mechanism.norm:
        problems.append(f"it measures G in {estimate.norm}, the {mechanism.name} mechanism needs {mechanism.norm}")
    elif measurement(estimate.mechanism) != measurement(describe(mechanism)):
        problems.append(f"it was computed for mechanism {measurement(estimate.mechanism)}, "
                        f"not {measurement(describe(mechanism))}")
    if estimate.target != describe(target):
        problems.append(f"it was computed for target {estimate.target['name']} {estimate.target['params']}, "
                        f"not {describe(target)['name']} {describe(target)['params']}")
    if problems:
        raise EstimateMismatchError("stored estimate does not fit this release: " + "; ".join(problems))
    if not math.isfinite(estimate.sensitivity):
        raise MechanismError(
            f"the estimated sensitivity is {estimate.sensitivity} because {estimate.failures} of "
            f"m={estimate.plan.m} pairs failed (at least m-k+1={estimate.plan.keep}); "
            "fix the target or the oracle before releasing"
        )


def _respond(mechanism, value, sensitivity: float):
    """``mechanism.release`` on the private answer; a failure's message is withheld (it may quote it)."""
    try:
        return mechanism.release(value, sensitivity)
    except Exception as exc:
        raise MechanismError(f"the {mechanism.name} mechanism raised {type(exc).__name__} on the private answer; "
                             "its message is withheld because it may quote the answer") from None


def sample_then_respond(data, target, mechanism, *, estimate: SensitivityEstimate | None = None,
                        oracle=None, gamma=None, m=None, k=None, seed=None, ledger=None,
                        ledger_label: str | None = None, **sampler_options) -> Release:
    """Release ``mechanism`` applied to ``target(data)`` with a sampled (or given) Δ̂.

    Give ``estimate`` to reuse a precomputed Δ̂ (it must match the target, the mechanism's norm and
    ``len(data)``), or ``oracle`` plus a plan (``gamma`` | ``m`` | ...) to sample one now.

    ``ledger`` (a :class:`raydp.ledger.Ledger` or the path of an existing one) charges this release's
    (ε, δ, γ) durably before the noise is drawn and refuses it with :class:`raydp.errors.BudgetError`,
    releasing nothing, if it would exceed the ledger's totals. ``ledger_label`` is stored with the
    entry (never put private data in it).
    """
    if ledger is not None:
        from .ledger import Ledger

        ledger = ledger if isinstance(ledger, Ledger) else Ledger(ledger)  # fail before any sampling
    elif ledger_label is not None:
        raise InvalidArgumentError("ledger_label= needs ledger=")
    try:
        data = np.asarray(data)
    except (TypeError, ValueError) as exc:  # ragged nested lists; numpy's message could quote the data
        raise InvalidArgumentError(f"data must be an array with records along the first axis ({type(exc).__name__}: "
                              "rows of unequal length?)") from None
    if data.ndim < 1 or data.shape[0] < 1:
        raise InvalidArgumentError(f"data must be an array with records along the first axis, got shape {data.shape}")
    n = int(data.shape[0])
    target = as_target(target)
    for attr in ("embed", "release", "privacy", "norm"):
        if not hasattr(mechanism, attr):
            raise InvalidArgumentError(f"mechanism must be a raydp mechanism (missing .{attr}), got {mechanism!r}")
    if estimate is not None and not isinstance(estimate, SensitivityEstimate):
        raise InvalidArgumentError("estimate must be a SensitivityEstimate (from estimate_sensitivity or load_estimate), "
                              f"got {type(estimate).__name__}")
    if estimate is None:
        if oracle is None:
            raise InvalidArgumentError("give either estimate= (a precomputed Δ̂) or oracle= and a plan to sample one")
        sampler_options.setdefault("progress", False)
        estimate = estimate_sensitivity(target, oracle, n, mechanism=mechanism, gamma=gamma, m=m, k=k,
                                        seed=seed, **sampler_options)
    elif any(v is not None for v in (oracle, gamma, m, k, seed)):
        raise InvalidArgumentError("estimate= was given: do not also give oracle, gamma, m, k or seed")
    check_estimate_fits(estimate, target, mechanism, n)
    # Neither the target's nor the mechanism's error message is repeated: computed on the private
    # data, it may quote records or the exact (unnoised) answer.
    try:
        value = target(data)
    except Exception as exc:
        raise TargetError(f"the target raised {type(exc).__name__} on the private data; its message is "
                          "withheld because it may quote the data") from None
    try:
        embedded = np.asarray(mechanism.embed(value))
    except Exception as exc:
        raise MechanismError(f"the target's output on the private data does not fit the {mechanism.name} "
                             f"mechanism ({type(exc).__name__}; message withheld: it may quote the output)") from None
    if embedded.size != estimate.output_dim:
        raise EstimateMismatchError(
            f"target output on the data has {embedded.size} coordinates; the estimate was for {estimate.output_dim}"
        )
    eps, delta = mechanism.privacy()
    entry = None
    if ledger is None:
        released = _respond(mechanism, value, estimate.sensitivity)
    else:
        with ledger.charge(eps, delta, estimate.gamma, mechanism=mechanism.name, sensitivity=estimate.sensitivity,
                           estimate=estimate.provenance(), label=ledger_label) as charge:
            released = _respond(mechanism, value, estimate.sensitivity)
        entry = {"path": ledger.path, "entry": charge.id, "composed": charge.guarantee.to_dict()}
    return Release(value=released, epsilon=float(eps), delta=float(delta), gamma=estimate.gamma,
                   sensitivity=estimate.sensitivity, mechanism=describe(mechanism), estimate=estimate.provenance(),
                   ledger=entry)
