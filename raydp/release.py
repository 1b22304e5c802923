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
import time
from dataclasses import dataclass, field, replace

import numpy as np

from .engine.witness import Replay
from .errors import EstimateMismatchError, InvalidArgumentError, MechanismError, RaydpError, TargetError
from .estimate import SensitivityEstimate
from .identity import check_reusable, describe, difference, measurement
from .plan import format_up
from .mechanisms.spec import as_mechanism
from .options import SamplerOptions
from .sampler import estimate_sensitivity
from .seal import Limits, Sealed, warm
from .tables import PrivateTable
from .targets import as_target
from .validation import check_gamma


@dataclass(frozen=True)
class Release:
    """A private response and the privacy it was released under.

    ``mechanism`` is the mechanism's identity (``{"name": ..., "params": {...}}``), the same kind as
    ``SensitivityEstimate.mechanism``; ``estimate`` the provenance of the Δ̂ that was used; ``replay``
    how a reused Δ̂ was checked against the target (its witness pairs replayed, or not: ``replay=False``).
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
    replay: Replay | None = field(default=None, repr=False)
    # where the target ran on the private data: "sandboxed" (bubblewrap) or "sealed, not sandboxed"
    isolation: str | None = field(default=None, repr=False)
    # seconds after the private data was sent at which the answer left (None: as soon as it was ready)
    respond_after: float | None = field(default=None, repr=False)

    def statement(self) -> str:
        """The guarantee in words. ε, δ and γ are printed rounded up, never understated."""
        notion = "ε-DP" if self.delta == 0 else "(ε, δ)-DP"
        eps, dlt, gam = format_up(self.epsilon), format_up(self.delta), format_up(self.gamma)
        text = (f"({eps}, {dlt}, {gam})-random differential privacy: with probability at least 1 − {gam} over "
                f"a neighbouring pair drawn from the oracle and the sampler's draw of Δ̂, the release is {notion} "
                f"on that pair; {_mechanism_words(self.mechanism)} with sensitivity {self.sensitivity:.6g}")
        sizing = self.estimate.get("sizing") if isinstance(self.estimate, dict) else None
        if sizing:
            text += (f"; Δ̂ is G_(k), k = {sizing['k']}, of m = {sizing['m']} sampled G (the fewest pairs for this "
                     f"γ would be {sizing['fewest_pairs']}, k = m): m was sized to a {sizing['budget_seconds']:g} s "
                     f"budget on {sizing['slots']} slot{'s' if sizing['slots'] != 1 else ''}"
                     f"{' (' + sizing['where'] + ')' if sizing.get('where') else ''} at "
                     f"{sizing['pair_seconds']:.2g} s per pair (the fastest of "
                     f"{sizing.get('timed_evaluations', 1)} timed evaluations on public probe data, twice), "
                     "before any G was drawn")
        if self.replay is not None and (self.replay.skipped is not None or self.replay.reused):
            text += f"; {self.replay.words()}"
        if self.isolation is not None and self.isolation.startswith("sandboxed"):
            text += ("; the target saw the private data only in a sandbox (no network, read-only files, its own "
                     "processes, limits) and only its checked value came back")
            if self.isolation != "sandboxed":
                text += " (without its seccomp filter: libseccomp could not be loaded)"
        elif self.isolation is not None:
            text += (f"; {self.isolation}: the target saw the private data in a process of its own without "
                     "namespaces (bubblewrap unavailable)")
        if self.respond_after is not None:
            text += f"; answered {self.respond_after:g} s after the data was sent, whatever the target's time"
        return text


def _mechanism_words(mechanism: dict) -> str:
    calibration = mechanism.get("params", {}).get("calibration")
    return f"{mechanism['name']} mechanism" + (f" ({calibration} calibration)" if calibration else "")


def check_estimate_fits(estimate: SensitivityEstimate, target, mechanism, n: int, *, reused: bool = True,
                        replay: bool = True, gamma: float | None = None) -> None:
    """Refuse an estimate computed for another target, mechanism norm, database size or γ.

    ``reused``: the estimate was made elsewhere (``estimate=``, a store), so the target must be shown
    to be the one it was computed for: by its content fingerprint and (``replay``) by its witness
    pairs, which :func:`respond` replays. ``gamma``: the γ the caller expects to release under.
    """
    if reused:
        check_reusable(describe(target), "target", EstimateMismatchError, "a precomputed estimate", replay=replay)
    if gamma is not None and not math.isclose(check_gamma(gamma), estimate.gamma, rel_tol=1e-12):
        raise EstimateMismatchError(
            f"the estimate's plan gives gamma={format_up(estimate.gamma)}, not the gamma={gamma:g} asked for "
            f"(m={estimate.plan.m}, k={estimate.plan.k}); re-derive it for that gamma from a stored sample "
            "(load_estimate(store, gamma=...)) or sample it again")
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


def _replay(sealed: Sealed, estimate: SensitivityEstimate) -> Replay:
    """Pairs of the estimate's run recomputed in the sealed process, with the target it will release: r drawn
    at random now from all its pairs with a finite G (records drawn again by the oracle) and the pair that
    set Δ̂; or, when arbitrary pairs cannot be drawn, its fixed witness pairs (:mod:`raydp.engine.witness`)."""
    from .engine.witness import run

    plan = estimate.replay_plan()
    w = plan.pairs
    if not plan.fresh and not len(w):
        raise EstimateMismatchError(
            f"this estimate carries no witness pairs to replay and no pairs can be drawn at random "
            f"({plan.why_fixed}), so nothing shows it was computed for this target; sample it again, "
            "or pass replay=False to trust it (the statement will say so)")
    if not plan.fresh and w.records is None:
        raise EstimateMismatchError(
            "this estimate's witness pairs have no oracle records (its store was written before raydp kept them "
            "and its oracle is not a built-in one): load it with load_estimate(store, oracle=...) (raydp release "
            "--oracle ...) so they can be drawn, or pass replay=False (the statement will say so)")
    result = run(plan, sealed.replay, scale=estimate.sensitivity)
    if result.mismatch is not None:
        raise EstimateMismatchError(
            f"this target computes something else than the one Δ̂ was sampled for: {result.mismatch}. Something "
            "its G depends on is not what it was when Δ̂ was sampled — its code or a module it imports, a library, "
            "a configuration or data file it reads, the environment (variables, thread counts, hardware) — or its "
            "output is random (e.g. random_state=None: fix its seed). Sample Δ̂ again for the target as it is now")
    return result


def respond(data, target, mechanism, estimate: SensitivityEstimate, *, reused: bool, replay: bool = True,
            gamma: float | None = None, ledger=None, ledger_label: str | None = None,
            respond_after: float | None = None, limits: Limits | None = None) -> Release:
    """Release ``mechanism`` on ``target(data)`` with ``estimate``'s Δ̂; ``data`` checked, ``ledger`` a Ledger.

    The target runs on the private data in the sandbox (:mod:`raydp.seal`); the estimate's pairs are
    replayed there first (``replay``), before any charge. ``reused``: the estimate was made before this
    call (``estimate=``, a store, a preview), so the target must also be fingerprinted or replayed, and
    the statement says how it was checked. ``respond_after``: the answer (or the failure) comes exactly
    that many seconds after the private data was sent, whatever the target did; a target still running
    then is stopped and the release fails (counted). ``limits``: the sandbox's resource limits.
    """
    if ledger is not None:
        from .ledger import Ledger

        ledger = ledger if isinstance(ledger, Ledger) else Ledger(ledger)
    respond_after = _check_respond_after(respond_after)
    n = data.rows if isinstance(data, PrivateTable) and data.rows is not None else (
        estimate.n if isinstance(data, PrivateTable) else int(np.shape(data)[0]))
    check_estimate_fits(estimate, target, mechanism, n, reused=reused, replay=replay, gamma=gamma)
    eps, delta = mechanism.privacy()
    entry = None
    with Sealed(limits=limits) as sealed:
        sealed.load(target, mechanism, estimate.n, estimate.output_dim)  # setup() there: it sees no data
        # Replayed also for a Δ̂ sampled a moment ago: the sandbox imports the target's modules afresh,
        # and a module edited on disk since the caller imported it would compute something else there
        # than the pairs did. Nothing is charged and no private record is sent before this.
        checked = replace(_replay(sealed, estimate), reused=reused) if replay else Replay(skipped="replay=False")
        _probe_shape(sealed, estimate)
        if ledger is None:
            released = _evaluate(sealed, data, mechanism, estimate.sensitivity, respond_after)
        else:
            # Charged before the target sees the private data: whatever happens next (the target raises or
            # returns another size *depending on the data*) was an evaluation on the data and stays counted,
            # and its failure says only that it failed — one answer whatever the reason.
            with ledger.charge(eps, delta, estimate.gamma, mechanism=mechanism.name, sensitivity=estimate.sensitivity,
                               estimate=estimate.provenance(), label=ledger_label,
                               calibration=describe(mechanism).get("params", {}).get("calibration")) as charge:
                try:
                    released = _evaluate(sealed, data, mechanism, estimate.sensitivity, respond_after)
                except RaydpError:
                    raise TargetError(f"the release failed on the private data; why is withheld because it depends "
                                      f"on the data (ledger entry {charge.id} stays counted as spent)") from None
            entry = {"path": ledger.path, "entry": charge.id, "composed": charge.guarantee.to_dict()}
        isolation = sealed.isolation
    return Release(value=released, epsilon=float(eps), delta=float(delta), gamma=estimate.gamma,
                   sensitivity=estimate.sensitivity, mechanism=describe(mechanism), estimate=estimate.provenance(),
                   ledger=entry, replay=checked, isolation=isolation, respond_after=respond_after)


def _noise(mechanism, value, sensitivity: float):
    """The mechanism on the checked private value, in this process; its message is withheld (it may quote
    the value), its type named (the mechanism is the caller's, not the target's)."""
    try:
        return mechanism.release(value, sensitivity)
    except Exception as exc:  # noqa: BLE001
        raise MechanismError(f"the mechanism raised {type(exc).__name__} on the private answer; its message is "
                             "withheld because it may quote the answer") from None


def _check_respond_after(value) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise InvalidArgumentError(f"respond_after must be a positive number of seconds, got {value!r}")
    return float(value)


def _probe_shape(sealed: Sealed, estimate: SensitivityEstimate) -> None:
    """The shape the private answer must have: the target's on one public database (the first witness's
    records), in the sandbox. Without public records the answer comes back flat."""
    w = estimate.witnesses
    if w is not None and w.records is not None and len(w.records):
        sealed.probe(np.asarray(w.records[0][: estimate.n]))


def _evaluate(sealed: Sealed, data, mechanism, sensitivity: float, respond_after: float | None):
    """The checked private value, noised here in the caller; with ``respond_after`` the answer or the
    failure leaves exactly then (the sandbox is stopped at that deadline)."""
    if respond_after is None:
        return _noise(mechanism, sealed.evaluate(data), sensitivity)
    deadline = time.monotonic() + respond_after
    try:
        return _noise(mechanism, sealed.evaluate(data, timeout=respond_after), sensitivity)
    finally:
        left = deadline - time.monotonic()
        if left > 0:
            time.sleep(left)


def sample_then_respond(data, target, mechanism, *, epsilon=None, delta=None,
                        estimate: SensitivityEstimate | None = None,
                        oracle=None, gamma=None, m=None, k=None, options: SamplerOptions | None = None,
                        ledger=None, ledger_label: str | None = None, respond_after: float | None = None,
                        limits: Limits | None = None, **keywords) -> Release:
    """Release ``mechanism`` applied to ``target(data)`` with a sampled (or given) Δ̂.

    ``mechanism`` is a name with its privacy (``"laplace", epsilon=0.5``; ``"gaussian", epsilon=1,
    delta=1e-5``) or a mechanism object (``raydp.Laplace(0.5)``), as at every entry point
    (:mod:`raydp.mechanisms.spec`): an object carries its own ε and δ, and ``epsilon``/``delta`` given
    with it must agree.

    Give ``estimate`` to reuse a precomputed Δ̂ (it must match the target, the mechanism's norm and
    ``len(data)``; ``gamma``, if given, is the γ you expect and an estimate whose plan gives another is
    refused), or ``oracle`` plus a plan (``gamma`` | ``m`` | ...) to sample one now, run as
    ``options`` (a :class:`~raydp.options.SamplerOptions`, or its fields as keywords: ``seed=``,
    ``backend=``, ``store=``, ...).

    A reused Δ̂ is checked by behaviour before anything is charged: 30 or more of its pairs, drawn at
    this release from all of them (the one that set Δ̂ among them), are evaluated again with ``target``
    as it is now, and the release is refused when a G differs (:mod:`raydp.engine.witness`); the
    statement says how many and the probability of catching a change. ``replay=False`` skips that,
    and the statement says so.

    The target sees the private data only in a sandbox (:mod:`raydp.seal`; "sealed, not sandboxed"
    where bubblewrap is unavailable): only a checked value of its output's dimension comes back, the
    noise is added here, and a failure comes back as a fixed kind alone. ``respond_after`` (seconds):
    the answer or the failure comes exactly then after the private data was sent, so the release's
    wall time does not depend on the data (a target still running is stopped: a counted failure).
    ``limits``: the sandbox's resource limits (:class:`raydp.seal.Limits`).

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
    warm()  # the sealed process's template starts while Δ̂ is sampled or checked
    if ledger is not None:
        from .ledger import Ledger

        ledger = ledger if isinstance(ledger, Ledger) else Ledger(ledger)  # fail before any sampling
    elif ledger_label is not None:
        raise InvalidArgumentError("ledger_label= needs ledger=")
    if isinstance(data, PrivateTable):  # columns vs the oracle's record fields: schema, before any charge
        data.check_fields(PrivateTable.record_shape(estimate, oracle))
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
    mechanism = as_mechanism(mechanism, epsilon, delta)
    if estimate is not None and not isinstance(estimate, SensitivityEstimate):
        raise InvalidArgumentError("estimate must be a SensitivityEstimate (from estimate_sensitivity or load_estimate), "
                                   f"got {type(estimate).__name__}")
    if estimate is None:
        if oracle is None:
            raise InvalidArgumentError("give either estimate= (a precomputed Δ̂) or oracle= and a plan to sample one")
        options = SamplerOptions.of(options, **keywords)
        estimate = estimate_sensitivity(target, oracle, n, mechanism=mechanism, gamma=gamma, m=m, k=k,
                                        options=options)
        return respond(data, target, mechanism, estimate, reused=False, ledger=ledger, ledger_label=ledger_label,
                       respond_after=respond_after, limits=limits)
    extra = sorted(set(keywords) - {"replay"})
    if any(v is not None for v in (oracle, m, k)) or extra:
        raise InvalidArgumentError("estimate= was given: do not also give oracle, m, k or sampler options other than "
                                   f"replay{' (' + ', '.join(extra) + ')' if extra else ''}")
    options = SamplerOptions.of(options, **keywords)
    return respond(data, target, mechanism, estimate, reused=True, replay=options.replay, gamma=gamma, ledger=ledger,
                   ledger_label=ledger_label, respond_after=respond_after, limits=limits)
