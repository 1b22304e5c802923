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

from .errors import EstimateMismatchError, InvalidArgumentError, MechanismError, RaydpError, TargetError
from .estimate import SensitivityEstimate
from .identity import check_reusable, describe, difference, measurement
from .plan import format_up
from .mechanisms.base import check_mechanism
from .options import SamplerOptions
from .sampler import estimate_sensitivity
from .engine.blocks import set_up_here
from .silence import silenced
from .tables import PrivateTable
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
        """The guarantee in words. ε, δ and γ are printed rounded up, never understated."""
        notion = "ε-DP" if self.delta == 0 else "(ε, δ)-DP"
        eps, dlt, gam = format_up(self.epsilon), format_up(self.delta), format_up(self.gamma)
        return (f"({eps}, {dlt}, {gam})-random differential privacy: with probability at least 1 − {gam} over "
                f"a neighbouring pair drawn from the oracle and the sampler's draw of Δ̂, the release is {notion} "
                f"on that pair; {_mechanism_words(self.mechanism)} with sensitivity {self.sensitivity:.6g}")


def _mechanism_words(mechanism: dict) -> str:
    calibration = mechanism.get("params", {}).get("calibration")
    return f"{mechanism['name']} mechanism" + (f" ({calibration} calibration)" if calibration else "")


def check_estimate_fits(estimate: SensitivityEstimate, target, mechanism, n: int, *, reused: bool = True) -> None:
    """Refuse an estimate computed for another target, mechanism norm or database size.

    ``reused``: the estimate was made elsewhere (``estimate=``, a store), so the target must have a
    content fingerprint that shows it is the one the estimate was computed for.
    """
    if reused:
        check_reusable(describe(target), "target", EstimateMismatchError, "a precomputed estimate")
    problems = []
    if estimate.n != n:
        problems.append(f"it was computed for n={estimate.n} records, the data has n={n}")
    if estimate.norm != mechanism.norm:
        problems.append(f"it measures G in {estimate.norm}, the {mechanism.name} mechanism needs {mechanism.norm}")
    elif measurement(estimate.mechanism) != measurement(describe(mechanism)):
        problems.append(f"it was computed for mechanism {measurement(estimate.mechanism)}, "
                        f"not {measurement(describe(mechanism))}")
    if estimate.target != describe(target):
        problems.append(f"it was computed for target {difference(estimate.target, describe(target))}")
    if problems:
        raise EstimateMismatchError("stored estimate does not fit this release: " + "; ".join(problems))
    if not math.isfinite(estimate.sensitivity):
        raise MechanismError(
            f"the estimated sensitivity is {estimate.sensitivity} because {estimate.failures} of "
            f"m={estimate.plan.m} pairs failed (at least m-k+1={estimate.plan.keep}); "
            "fix the target or the oracle before releasing"
        )


def _private_release(data, target, mechanism, estimate: SensitivityEstimate):
    """target(data), embedded and noised: the only code that touches the private data.

    No message of the target or the mechanism is repeated (computed on the private data, it may quote
    records or the exact answer), nor anything they print, warn, log or write to file descriptors 1
    and 2 (:func:`raydp.silence.silenced`); a ``SystemExit`` or other
    ``BaseException`` of the target is a failure like any other (a ``KeyboardInterrupt`` stays one,
    without its arguments).
    """
    if isinstance(data, PrivateTable):  # read here, inside the charge: its values answer nothing for free
        try:
            data = data.load()
        except RaydpError:
            raise TargetError("the private data file could not be read as finite numbers") from None
        if data.shape[0] != estimate.n:
            raise EstimateMismatchError(f"the data has {data.shape[0]} records; the estimate was for n={estimate.n}")
    try:
        with silenced():
            value = target(data)
    except KeyboardInterrupt:
        raise KeyboardInterrupt() from None
    except BaseException as exc:  # noqa: BLE001 - SystemExit(data) must not reach the caller either
        raise TargetError(f"the target raised {type(exc).__name__} on the private data; its message is "
                          "withheld because it may quote the data") from None
    try:
        with silenced():
            embedded = np.asarray(mechanism.embed(value))
    except KeyboardInterrupt:
        raise KeyboardInterrupt() from None
    except BaseException as exc:  # noqa: BLE001
        raise MechanismError(f"the target's output on the private data does not fit the {mechanism.name} "
                             f"mechanism ({type(exc).__name__}; message withheld: it may quote the output)") from None
    if embedded.size != estimate.output_dim:
        raise EstimateMismatchError(
            f"target output on the data has {embedded.size} coordinates; the estimate was for {estimate.output_dim}"
        )
    try:
        with silenced():
            return mechanism.release(value, estimate.sensitivity)
    except KeyboardInterrupt:
        raise KeyboardInterrupt() from None
    except BaseException as exc:  # noqa: BLE001
        raise MechanismError(f"the {mechanism.name} mechanism raised {type(exc).__name__} on the private answer; "
                             "its message is withheld because it may quote the answer") from None


def sample_then_respond(data, target, mechanism, *, estimate: SensitivityEstimate | None = None,
                        oracle=None, gamma=None, m=None, k=None, options: SamplerOptions | None = None,
                        ledger=None, ledger_label: str | None = None, **keywords) -> Release:
    """Release ``mechanism`` applied to ``target(data)`` with a sampled (or given) Δ̂.

    Give ``estimate`` to reuse a precomputed Δ̂ (it must match the target, the mechanism's norm and
    ``len(data)``), or ``oracle`` plus a plan (``gamma`` | ``m`` | ...) to sample one now, run as
    ``options`` (a :class:`~raydp.options.SamplerOptions`, or its fields as keywords: ``seed=``,
    ``backend=``, ``store=``, ...).

    ``data`` is an array (records along the first axis) or a :class:`raydp.tables.PrivateTable` (a
    Parquet or CSV file of which only the schema has been read): with a ledger its values are read
    inside the charged release, so a missing, NaN or text cell is never reported before the charge.

    ``ledger`` (a :class:`raydp.ledger.Ledger` or the path of an existing one) charges this release's
    (ε, δ, γ) durably before the target sees the private data, and refuses it with
    :class:`raydp.errors.BudgetError` — the same refusal whatever the data, the target never called —
    if it would exceed the ledger's totals. A release that then fails is counted, and its error
    does not say why (the reason could depend on the data). ``ledger_label`` is stored with the
    entry (never put private data in it).
    """
    if ledger is not None:
        from .ledger import Ledger

        ledger = ledger if isinstance(ledger, Ledger) else Ledger(ledger)  # fail before any sampling
    elif ledger_label is not None:
        raise InvalidArgumentError("ledger_label= needs ledger=")
    if isinstance(data, PrivateTable) and ledger is None:
        data = data.load()  # no budget to protect: every check now, with its full message
    if isinstance(data, PrivateTable):
        # With a ledger only the schema was read; the values are read inside the charged release.
        n = data.rows if data.rows is not None else (estimate.n if estimate is not None else None)
        if n is None:
            raise InvalidArgumentError(f"{data.path!r}: a CSV file's rows are counted only when it is read, which "
                                       "with a ledger happens inside the charged release; give estimate= (its n is "
                                       "checked there) or use a Parquet file")
    else:
        try:
            data = np.asarray(data)
        except (TypeError, ValueError) as exc:  # ragged nested lists; numpy's message could quote the data
            raise InvalidArgumentError(f"data must be an array with records along the first axis "
                                       f"({type(exc).__name__}: rows of unequal length?)") from None
        if data.ndim < 1 or data.shape[0] < 1:
            raise InvalidArgumentError(f"data must be an array with records along the first axis, got shape "
                                       f"{data.shape}")
        n = int(data.shape[0])
    target = as_target(target)
    check_mechanism(mechanism)
    if estimate is not None and not isinstance(estimate, SensitivityEstimate):
        raise InvalidArgumentError("estimate must be a SensitivityEstimate (from estimate_sensitivity or load_estimate), "
                              f"got {type(estimate).__name__}")
    if estimate is None:
        if oracle is None:
            raise InvalidArgumentError("give either estimate= (a precomputed Δ̂) or oracle= and a plan to sample one")
        options = SamplerOptions.of(options, **keywords)
        estimate = estimate_sensitivity(target, oracle, n, mechanism=mechanism, gamma=gamma, m=m, k=k,
                                        options=options)
        fresh = options.store is None  # with a store, the Δ̂ may be a stored one
    elif any(v is not None for v in (oracle, gamma, m, k, options)) or keywords:
        raise InvalidArgumentError("estimate= was given: do not also give oracle, gamma, m, k, options or sampler "
                                   f"options{' (' + ', '.join(sorted(keywords)) + ')' if keywords else ''}")
    else:
        fresh = False
    check_estimate_fits(estimate, target, mechanism, n, reused=not fresh)
    _, target = set_up_here(target)  # setup() sees no data: before any charge; the copy set up is evaluated
    eps, delta = mechanism.privacy()
    entry = None
    if ledger is None:
        released = _private_release(data, target, mechanism, estimate)
    else:
        # Charged before the target sees the private data: whatever happens next (the target raises or
        # returns another size *depending on the data*) was an evaluation on the data and stays counted,
        # and its failure says only that it failed — one answer whatever the reason.
        with ledger.charge(eps, delta, estimate.gamma, mechanism=mechanism.name, sensitivity=estimate.sensitivity,
                           estimate=estimate.provenance(), label=ledger_label,
                           calibration=describe(mechanism).get("params", {}).get("calibration")) as charge:
            try:
                released = _private_release(data, target, mechanism, estimate)
            except RaydpError:
                raise TargetError(f"the release failed on the private data; why is withheld because it depends on "
                                  f"the data (ledger entry {charge.id} stays counted as spent)") from None
        entry = {"path": ledger.path, "entry": charge.id, "composed": charge.guarantee.to_dict()}
    return Release(value=released, epsilon=float(eps), delta=float(delta), gamma=estimate.gamma,
                   sensitivity=estimate.sensitivity, mechanism=describe(mechanism), estimate=estimate.provenance(),
                   ledger=entry)
