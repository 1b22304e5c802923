"""The meta-estimator :class:`PrivateEstimator`: ``fit`` samples Δ̂, fits once and releases the parameters."""

from __future__ import annotations

import contextlib
import math
import time
import warnings
from dataclasses import dataclass, replace

import numpy as np
from sklearn.base import BaseEstimator, clone
from sklearn.model_selection import ParameterGrid
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import check_is_fitted

from ..errors import EstimateMismatchError, InvalidArgumentError, OracleError, TargetError, UtilityError
from ..estimate import SensitivityEstimate
from ..identity import check_reusable, describe, difference
from ..mechanisms import Gaussian, Laplace
from ..mechanisms.base import check_mechanism
from ..mechanisms.spec import as_mechanism
from ..options import SamplerOptions
from ..oracles import as_oracle, check_records
from ..plan import make_plan
from ..release import check_estimate_fits, respond
from ..seal import warm
from ..sampler import TimeBudgetError, estimate_sensitivity, over_budget, price_pairs
from ..store import Store
from ..validation import check_delta, check_epsilon, check_int, check_real
from .canonical import canonical_kinds
from .inputs import as_labels, as_matrix, is_classifier, is_supervised, numeric, prepare
from .params import REFUSED, estimators, fitted_float_params, prediction_params, resolve
from .public import freeze_public_steps, public_step_names
from .target import EstimatorTarget
from .utility import INTERVAL_CLAIM, PILOT_QUANTILE, UtilityPreview, UtilityWarning, pilot_sensitivities, simulate, with_params

__all__ = ["PrivateEstimator"]

# The public sample the skeleton is fitted on: a fixed stream, so the skeleton (and the references the
# canonicalisation aligns to) are a function of (estimator, oracle, n) alone, in every process.
_PUBLIC_SEED = 0x5EED_5C1E
# Public records the public pipeline steps (scalers, encoders) are fitted on: at least this many.
_PUBLIC_RECORDS = 2000
#: Seconds a fit spends by default (``time_budget="auto"``), a cap on the whole fit: on 2 cores a cheap model's
#: Δ̂ then comes from 10 000-50 000 pairs instead of the fewest (1305 at γ = 0.05).
DEFAULT_TIME_BUDGET = 20.0
#: Public draws a preview plays the release on (its interval is read off them).
PREVIEW_REPEATS = 20
#: ``mechanism="auto"``: public pilot pairs that choose the mechanism before its Δ̂ is sampled (at most
#: PILOT_PAIRS, at least PILOT_MIN_PAIRS, and beyond that no more than PILOT_SHARE of the time budget;
#: with ``time_budget=None``, PILOT_PAIRS_UNBUDGETED or the sample's m if fewer, at least PILOT_MIN_PAIRS).
PILOT_PAIRS = 200
PILOT_MIN_PAIRS = 20
PILOT_SHARE = 0.1
PILOT_PAIRS_UNBUDGETED = 50
#: ``tune=True``: the share of the time budget the candidates' pilots take together (each at least
#: PILOT_MIN_PAIRS pairs, at most PILOT_PAIRS); the chosen model's Δ̂ gets the rest.
TUNE_PILOT_SHARE = 0.25
#: What a budgeted fit keeps back for the release after sampling, besides the preview and the replay it
#: prices from the model's own timings: the sealed process's exchange (started while Δ̂ is sampled).
SEAL_SECONDS = 0.5
#: The release replays this share of the sampling time (raydp.engine.witness.REPLAY_SHARE), at least
#: REPLAY_PAIRS pairs.
REPLAY_SHARE = 0.05
REPLAY_PAIRS = 30
#: The share of what is left that sampling is sized to: the rest absorbs a machine slower than its timings.
SAMPLING_SLACK = 0.9
#: A fit is priced on the fastest of at most PRICE_FITS fits of the model on public records, while they take at
#: most PRICE_SHARE of the budget (at least two).
PRICE_FITS = 6
PRICE_SHARE = 0.03


class _Clock:
    """A fit's time budget (seconds, or None: no cap), counted from the call that made it."""

    def __init__(self, budget: float | None):
        self.budget = budget
        self.t0 = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def left(self) -> float | None:
        return None if self.budget is None else self.budget - self.elapsed()


@dataclass(frozen=True)
class _Price:
    """What a target costs, timed on public records: one fit (``fit``), one pair in a block (``pair``),
    and scoring one preview repeat's models (``score``)."""

    fit: float
    pair: float
    score: float

    def preview(self, repeats: int, mechanisms: int = 1) -> float:
        """A preview of ``repeats`` public draws at ``mechanisms`` mechanisms (fits shared between them)."""
        return repeats * (self.fit + (1 + mechanisms) * self.score)

    def after(self, sampling: float) -> float:
        """The release after ``sampling`` seconds of sampling: the preview, the replay of its pairs (at least
        REPLAY_PAIRS, two fits each, or REPLAY_SHARE of the sampling), the fit on the private data, the seal."""
        return (self.preview(PREVIEW_REPEATS) + max(REPLAY_PAIRS * 2 * self.fit, REPLAY_SHARE * sampling)
                + self.fit + SEAL_SECONDS)


def _own_store(options: SamplerOptions, mech) -> SamplerOptions:
    """With ``mechanism="auto"`` each mechanism's G sample lives in a store of its own under ``options.store``."""
    if options.store is None:
        return options
    uri = options.store.uri if isinstance(options.store, Store) else str(options.store)
    return replace(options, store=f"{uri.rstrip('/')}/{mech.name}")


@dataclass(frozen=True)
class _Stand:
    """A stand-in Δ̂ for a preview (the pilot's): what :meth:`PrivateEstimator._simulate` reads of an estimate."""

    sensitivity: float


def _start(model):
    """Where an exact solve of the final step starts: the public fit's ``coef_`` then ``intercept_`` (None
    when it has no such pair)."""
    steps = getattr(model, "steps", None)
    final = steps[-1][1] if isinstance(steps, list) and steps else model
    coef, intercept = getattr(final, "coef_", None), getattr(final, "intercept_", None)
    try:
        coef = np.asarray(coef, dtype=np.float64)
        intercept = np.atleast_1d(np.asarray(0.0 if intercept is None else intercept, dtype=np.float64))
    except (TypeError, ValueError):
        return None
    if coef.ndim != 2 or coef.shape[0] != 1 or intercept.shape != (1,) or not np.all(np.isfinite(coef)):
        return None
    return np.concatenate([coef[0], intercept]) if getattr(final, "fit_intercept", False) else coef[0]


def _estimator_has(attr: str):
    def check(self):
        getattr(self.estimator_ if hasattr(self, "estimator_") else self.estimator, attr)
        return True

    return check


@dataclass(frozen=True)
class _Inputs:
    """The private data as ``fit`` checked it (by type alone with a ledger), and what it says of the task."""

    X: np.ndarray
    y: np.ndarray | None
    names: np.ndarray | None
    supervised: bool

    @property
    def n(self) -> int:
        return int(self.X.shape[0])

    @property
    def d(self) -> int:
        return int(self.X.shape[1])

    def records(self) -> np.ndarray:
        """Rows ``[X | y]`` (label last) for a supervised estimator, rows of X otherwise."""
        return np.column_stack([self.X, self.y]) if self.supervised else self.X


@dataclass(frozen=True)
class _Choice:
    """The mechanism a fit releases with, its Δ̂, whether that Δ̂ was made before (then replayed), its
    preview, and (when chosen among several) why."""

    mechanism: object
    estimate: SensitivityEstimate
    reused: bool
    preview: UtilityPreview | None
    record: dict | None = None


def _at(mechanism, epsilon):
    """The same kind of mechanism at another ε (a preview at several ε)."""
    if float(epsilon) == float(mechanism.privacy()[0]):
        return mechanism
    if isinstance(mechanism, Laplace):
        return Laplace(epsilon)
    return Gaussian(epsilon, mechanism.delta, calibration=mechanism.calibration)


@dataclass(frozen=True)
class _Skeleton:
    """The estimator fitted once on public oracle records: everything that is not released comes from it."""

    model: object
    target: EstimatorTarget
    classes: np.ndarray | None
    public: list = ()  # pipeline steps fitted on public records and frozen


class PrivateEstimator(BaseEstimator):
    """A scikit-learn estimator whose fitted parameters are released with (ε, δ, γ)-random DP.

    ``fit(X, y)`` samples Δ̂ of the wrapped estimator's parameters for n = len(X) from ``oracle``,
    fits it once on (X, y) and releases the parameters with ``raydp.sample_then_respond``;
    ``predict``, ``predict_proba``, ``decision_function``, ``transform`` and ``score`` (where the
    estimator has them) use the released model ``estimator_``, never a fit on the private data.

    Parameters
    ----------
    estimator : scikit-learn estimator (unfitted; it is cloned, never modified)
    oracle : raydp oracle
        Public records: rows ``[X | y]`` (label last) for a classifier or regressor, rows of X for an
        unsupervised estimator; usually ``raydp.oracles.bootstrap(public_rows)``.
    epsilon, delta : privacy of the release. ``delta`` None or 0: Laplace (ℓ1 Δ̂), ε-DP on all but a γ
        fraction of neighbours; ``delta > 0``: the better of Laplace and Gaussian (below). With a mechanism
        object, which carries its own (ε, δ), they must agree with it (``delta=None``: the object's δ).
    gamma, m, k : the plan (any combination :func:`raydp.make_plan` accepts; usually ``gamma`` alone).
    time_budget : "auto", None or seconds: a cap on the whole ``fit`` (or ``preview``) — the public search of
        ``tune=True``, the pilot, sampling, the preview and the sealed release with its replay. With
        ``gamma`` alone, Δ̂ is sampled from as many pairs as what is left affords on the resources at hand
        (more on a cluster), k following from Theorem 15: a lower order statistic of more pairs, so a
        smaller and steadier Δ̂ at the same γ (:attr:`raydp.SamplerOptions.time_budget`). When even the
        fewest pairs γ allows (or the ``m`` given) cannot be bought in time, the fit refuses before it
        samples, with :class:`raydp.sampler.TimeBudgetError` saying its estimate and what would fit.
        "auto": ``options.time_budget`` when set, else :data:`DEFAULT_TIME_BUDGET` seconds. None: the
        fewest pairs γ allows, whatever they take (for an expensive model). The chosen (m, k) and the
        budget are in ``estimate_.sizing`` and the statement.
    mechanism : None or "auto" (default): Laplace when ``delta=0``; with ``delta > 0`` both Laplace (ℓ1)
        and Gaussian (ℓ2, analytic calibration) are previewed on public data at (ε, δ) — no privacy
        spent — each at a stand-in Δ̂ read off the same public pilot pairs (at most a tenth of the
        budget), and the one expected to score better gets the rest of the budget for its Δ̂ and releases
        (``mechanism_choice_`` and the statement say which and why; an unsupervised model has no score to
        preview by, and keeps the Gaussian). To choose yourself, a name or an object as at every entry point
        (:mod:`raydp.mechanisms.spec`): "laplace", "gaussian" (at ``epsilon``, ``delta``), or a raydp Laplace
        or Gaussian mechanism whose (ε, δ) agree with ``epsilon``/``delta``.
    params : None (the float parameters predictions use), a list of attribute paths, or a callable
        ``fitted_public_model -> list of paths``.
    estimate : a :class:`~raydp.estimate.SensitivityEstimate` to reuse (another fit's ``estimate_``,
        or ``raydp.load_estimate``); it must match the estimator, oracle, n, norm and plan.
    options : :class:`raydp.SamplerOptions`
        How Δ̂ is sampled: seed, backend, store, progress, ... (the same object every raydp function
        takes). With a ``store`` the Δ̂ stored there for the same estimator parameters, oracle and n
        (and scikit-learn version, part of the target's identity) is reused or resumed, and one made
        for anything else is refused; with ``seed=None`` and a store that holds a run, that run's seed.
    ledger, ledger_label : charge the release to a :class:`raydp.Ledger` (refused when over budget).
    on_useless : "warn" (default) or "refuse": when the preview on public data says the release would not
        beat a trivial predictor, warn (with a ``PrivateSearchCV(...)`` line that previews better), or
        refuse with :class:`~raydp.errors.UtilityError` before anything is released or charged.
    random_state : int or None: seeds the sampler — which oracle pairs are drawn, so Δ̂ — and nothing
        else (scikit-learn's name for ``options.seed``; give one of the two). It never seeds the noise: the
        release's noise comes from OpenDP's samplers, fresh at every ``fit``, so two fits with one
        ``random_state`` have the same ``estimate_`` and different released parameters. (A wrapped
        estimator's own ``random_state`` left at None is fixed to 0, so that its fit is a function of the
        data.) Other sampler options go in ``options``.
    reuse_preview : bool (default True). True: a ``fit`` for n records reuses the Δ̂ (and the mechanism's
        choice) that :meth:`preview` sampled for the same n, settings and seed, in ``preview_estimate_`` —
        sampled on public records, it is replayed before the release like any reused Δ̂, and saves sampling
        it again. False: ``fit`` samples its own and does the same whether or not ``preview`` was called.
    tune : bool (default False). True: before the release, choose the model's regularisation (``C`` as
        given × 0.01, 0.1, 1, or ``alpha`` × 1, 10, 100) and whether a public clipping step
        (:class:`~raydp.sklearn.PublicClip`) follows its public scaling, by the score the *released* model is
        expected to reach — each candidate previewed at a stand-in Δ̂ read off the same public pilot pairs
        (together at most :data:`TUNE_PILOT_SHARE` of the budget), no privacy spent, no private record read —
        then spend the rest of the budget on the chosen model's Δ̂ and release it once. The model as given is
        one of the candidates; ``tuned_params_`` holds the choice, ``tuning_`` every candidate's preview, and
        the statement says what was chosen and why. For a grid of your own, :class:`~raydp.sklearn.PrivateSearchCV`.

    Attributes
    ----------
    estimator_ : the released model (the released parameters; every other fitted attribute from a
        fit on a public oracle sample).
    estimate_ : the :class:`~raydp.estimate.SensitivityEstimate` used.
    release_ : the :class:`~raydp.release.Release` (its ``value`` is the released parameter vector,
        its ``statement()`` the (ε, δ, γ) guarantee).
    released_params_ : the released attribute paths, in the order of ``release_.value``.
    target_ : the :class:`EstimatorTarget` that was sampled (reusable with ``raydp.estimate_sensitivity``).
    tuned_params_, tuning_ : with ``tune=True``, the parameters chosen on public data, and every candidate's
        pilot preview.
    n_features_in_, feature_names_in_ (a DataFrame's columns), classes_ (classifiers).
    """

    # What to suggest when the preview says "useless" (raydp.sklearn.suggest.suggest, which searches with
    # PrivateSearchCV and so imports this module): plugged in by the package, not imported here.
    _suggest = None
    # The candidates tune=True previews (raydp.sklearn.suggest.grid_for, the same space the warning searches):
    # plugged in likewise, since that module's search imports this one.
    _grid = None

    def __init__(self, estimator, *, oracle, epsilon, delta=None, gamma=None, m=None, k=None, time_budget="auto",
                 mechanism=None, params=None, public_steps="auto", estimate=None, options=None, ledger=None,
                 ledger_label=None, on_useless="warn", random_state=None, tune=False, reuse_preview=True):
        self.estimator = estimator
        self.oracle = oracle
        self.epsilon = epsilon
        self.delta = delta
        self.gamma = gamma
        self.m = m
        self.k = k
        self.mechanism = mechanism
        self.params = params
        self.public_steps = public_steps
        self.estimate = estimate
        self.options = options
        self.ledger = ledger
        self.ledger_label = ledger_label
        self.time_budget = time_budget
        self.on_useless = on_useless
        self.random_state = random_state
        self.tune = tune
        self.reuse_preview = reuse_preview

    # ---- fit, step by step ---------------------------------------------------------------
    def fit(self, X, y=None, **fit_params):
        """Sample Δ̂ (or reuse one), fit once on (X, y) and release the parameters. Returns self.

        ``fit_params`` such as ``sample_weight`` are refused: a weight belongs to a record, and the
        oracle draws unweighted records, so Δ̂ would be sampled for another function than the fit.
        """
        if fit_params:
            raise InvalidArgumentError(
                f"fit() does not take {', '.join(sorted(fit_params))}: Δ̂ is sampled over records drawn from the "
                "oracle, which carry no weights or fit options; put a weight in the records (a column of X) or "
                "resample the data instead")
        if self._tuning():
            return self._fit_tuned(X, y)
        estimator = self._checked_estimator()
        inputs = self._inputs(estimator, X, y)
        oracle = as_oracle(self.oracle)
        options = self._options()
        self._mechanisms()  # checked before any sampling
        with self._timed(options.time_budget):
            warm()  # the sealed process that will fit on the private data gets ready meanwhile
            skeleton = self._skeleton(estimator, oracle, inputs.n, inputs.d, inputs.supervised)
            self._check_labels(skeleton, inputs)
            self._check_budget(skeleton, oracle, inputs.n, options)
            choice = self._choose(skeleton, oracle, inputs.n, options)
            self._judge(choice, skeleton, oracle, inputs.n, options)
            release = respond(inputs.records(), skeleton.target, choice.mechanism, choice.estimate,
                              reused=choice.reused, replay=options.replay, ledger=self.ledger,
                              ledger_label=self.ledger_label)
        self._assemble(skeleton, inputs, choice.estimate, release)
        self.utility_ = choice.preview
        self.mechanism_choice_ = choice.record
        return self

    def preview(self, n, *, epsilons=None, repeats: int = PREVIEW_REPEATS) -> UtilityPreview:
        """The release played on public records, before any private record is read: no privacy spent.

        Samples Δ̂ for n records exactly as ``fit`` would (kept in ``preview_estimate_``: a later ``fit`` with
        n records reuses it when ``reuse_preview`` is True, the default; with
        ``mechanism`` "auto" and δ > 0 the mechanism is chosen on public pilot pairs first), then,
        ``repeats`` times, fits on n oracle records, releases with the mechanism's noise at each ε of
        ``epsilons`` (default: this estimator's) and scores on other oracle records, next to the fit
        without noise and a trivial predictor. Returns a :class:`~raydp.sklearn.utility.UtilityPreview`
        (``print`` it for a table). ``n`` is the private data's number of records (public: Δ̂ depends on it).
        """
        n = check_int(n, "n", min_value=2)
        epsilons = [self.epsilon] if epsilons is None else list(np.atleast_1d(epsilons))
        for e in epsilons:
            check_epsilon(e)
        repeats = check_int(repeats, "repeats", min_value=2)
        if self._tuning():  # the chosen candidate's preview (a fit for n records then reuses its Δ̂)
            final, record = self._tuned(n)
            result = final.preview(n, epsilons=epsilons, repeats=repeats)
            self.preview_estimate_ = final.preview_estimate_
            self.preview_choice_ = record.get("mechanism")
            self.preview_tuning_ = record
            return result
        estimator = self._checked_estimator()
        oracle = as_oracle(self.oracle)
        supervised = is_supervised(estimator)
        d = self._oracle_width(oracle, n) - int(supervised)
        if d < 1:
            raise OracleError("the oracle's records have no feature column")
        options = self._options()
        with self._timed(options.time_budget):
            skeleton = self._skeleton(estimator, oracle, n, d, supervised)
            self._check_budget(skeleton, oracle, n, options, release=False)
            choice = self._choose(skeleton, oracle, n, options, repeats=repeats)
            self.preview_estimate_ = choice.estimate
            self.preview_choice_ = choice.record
            if [float(e) for e in epsilons] == [float(self.epsilon)] and choice.preview is not None:
                return choice.preview
            return self._simulate(skeleton, oracle, n, choice.estimate, choice.mechanism, epsilons, repeats)

    def _reuse_preview(self) -> bool:
        if not isinstance(self.reuse_preview, (bool, np.bool_)):
            raise InvalidArgumentError(f"reuse_preview must be True or False, got {self.reuse_preview!r}")
        return bool(self.reuse_preview)

    def _previewed(self) -> SensitivityEstimate | None:
        """The Δ̂ a :meth:`preview` sampled, when ``reuse_preview`` lets ``fit`` reuse it (None otherwise)."""
        return getattr(self, "preview_estimate_", None) if self._reuse_preview() else None

    # ---- tune=True: a search on public data first -----------------------------------------
    def _tuning(self) -> bool:
        if not isinstance(self.tune, (bool, np.bool_)):
            raise InvalidArgumentError(f"tune must be True or False, got {self.tune!r}")
        if self.tune and self.estimate is not None:
            raise InvalidArgumentError(
                "tune=True chooses the model on public data and samples Δ̂ for the model it chooses, so estimate= "
                "cannot be given with it: give the chosen model itself (tuned_params_ of the fit that made the "
                "estimate) with tune=False")
        return bool(self.tune)

    def _tuned(self, n: int):
        """``(candidate, record)`` for n private records: the chosen model as an unfitted PrivateEstimator
        (tune off, the rest of the budget, the mechanism its pilot chose) and the record of every candidate's
        pilot preview. Chosen once for these settings and n (a preview's choice is the fit's)."""
        key = (n, repr(sorted(self.get_params(deep=False).items(), key=lambda kv: kv[0])))
        done = getattr(self, "_tuned_for", None)
        if done is not None and done[0] == key and self._reuse_preview():
            return done[1]
        estimator = self._checked_estimator()
        options = self._options()
        mechanisms = self._mechanisms()  # every setting checked before any sampling
        oracle = as_oracle(self.oracle)
        name = type(estimator).__name__
        if not is_supervised(estimator):
            raise InvalidArgumentError(f"tune=True chooses by the score a release is expected to reach, and "
                                       f"{name} has no score against labels: give tune=False")
        space, grid = self._grid(estimator, list(public_step_names(prepare(estimator), self.public_steps)))
        if not grid:
            raise InvalidArgumentError(
                f"tune=True has nothing to tune in {name}: it tunes a final step's C or alpha and a public clipping "
                "step after public scaling; give tune=False, or a PrivateSearchCV with a grid of your own")
        d = self._oracle_width(oracle, n) - 1
        if d < 1:
            raise OracleError("the oracle's records have no feature column")
        grid = list(ParameterGrid(grid))
        budget = options.time_budget
        with self._timed(budget) as clock:
            rows, spent = self._tune_candidates(grid, space, oracle, n, d, options, mechanisms, clock)
            tuned_seconds = clock.elapsed()
            left = clock.left()
        return self._tuned_choice(rows, spent, tuned_seconds, left, space, estimator, mechanisms, key, budget)

    def _tune_candidates(self, grid, space, oracle, n, d, options, mechanisms, clock):
        """Every candidate of tune=True previewed at stand-in Δ̂s from its public pilot pairs: ``(rows, pilot
        seconds)``."""
        budget = clock.budget
        eps = float(self.epsilon)
        rows, spent = [], 0.0
        for i, params in enumerate(grid):
            model = clone(space).set_params(**params)
            cand = self._candidate(model)
            with cand._timed(None):  # its previews' fits are kept between its mechanisms
                skeleton = cand._skeleton(model, oracle, n, d, True)
                if i == 0 and budget is not None:  # before any pair: can the budget buy this search and a Δ̂?
                    self._check_budget(skeleton, oracle, n, options, candidates=len(grid), clock=clock, pilot=True)
                pilot = self._pilot(skeleton.target, oracle, n, mechanisms,
                                    None if budget is None else TUNE_PILOT_SHARE * budget / len(grid))
                row = {"params": params, "mean": float("nan"), "sd": float("nan"), "mechanism": None, "previews": {},
                       "pairs": 0 if pilot is None else pilot.pairs}
                if pilot is not None:
                    spent += pilot.seconds
                    for mech in mechanisms:
                        pv = cand._simulate(skeleton, oracle, n, _Stand(pilot.sensitivities[mech.name]), mech, [eps],
                                            PREVIEW_REPEATS)
                        row["previews"][mech.name] = {"mean": pv.expected(eps), "sd": pv.row(eps)["sd"],
                                                      "sensitivity": pilot.sensitivities[mech.name]}
                    best = max(mechanisms, key=lambda m: row["previews"][m.name]["mean"])
                    row.update(mean=row["previews"][best.name]["mean"], sd=row["previews"][best.name]["sd"],
                               mechanism=best)
            rows.append(row)
        return rows, spent

    def _tuned_choice(self, rows, spent, tuned_seconds, left, space, estimator, mechanisms, key, budget):
        """The chosen candidate (the rest of the budget, its mechanism) and the record of the search."""
        scored = [r for r in rows if r["mechanism"] is not None and math.isfinite(r["mean"])]
        if not scored:
            raise InvalidArgumentError(f"tune=True could not preview any candidate: the pilot's public pairs failed "
                                       f"for every one of {len(rows)}")
        chosen = max(scored, key=lambda r: r["mean"])  # the first of equals: the grid's order
        # the chosen model's fit gets what is left of the budget: a cap, so no floor (its own check refuses,
        # before it samples, when what is left cannot buy its Δ̂)
        rest = None if budget is None else max(left, 1e-3)
        # the chosen mechanism as an object, which carries its own (ε, δ): δ is not given again beside it
        final = self._candidate(clone(space).set_params(**chosen["params"]), time_budget=rest,
                                mechanism=chosen["mechanism"], delta=None)
        final._suggest = None  # a warning of the chosen model has no further search to suggest: this was it
        given = estimator.get_params(deep=True)
        as_given = next((r["mean"] for r in rows if all(v == "passthrough" if k == "publicclip" else given.get(k) == v
                                                        for k, v in r["params"].items())), None)
        record = {"params": dict(chosen["params"]), "previewed": chosen["mean"], "as_given": as_given,
                  "pilot_seconds": spent, "seconds": tuned_seconds,
                  "candidates": [{"params": dict(r["params"]), "mean": r["mean"], "sd": r["sd"], "pairs": r["pairs"],
                                  "mechanism": None if r["mechanism"] is None else r["mechanism"].name,
                                  "previews": r["previews"]} for r in rows]}
        if len(mechanisms) > 1:
            record["mechanism"] = {"mechanism": chosen["mechanism"].name, "previews": chosen["previews"],
                                   "reason": "previewed on public data at the caller's (ε, δ), with the model",
                                   "pilot": {"pairs": chosen["pairs"], "quantile": PILOT_QUANTILE}}
        self._tuned_for = (key, (final, record))
        return final, record

    def _candidate(self, estimator, **changes) -> "PrivateEstimator":
        """This estimator's settings with another model (and ``changes``), tune off: a candidate of tune=True."""
        params = self.get_params(deep=False)
        params.update(estimator=estimator, tune=False, **changes)
        return type(self)(**params)

    def _fit_tuned(self, X, y):
        arr, _ = as_matrix(X, "X", values=self.ledger is None)
        final, record = self._tuned(arr.shape[0])
        final.fit(X, y)
        for name in [k for k in vars(self) if k.endswith("_") and not k.startswith("_")]:
            delattr(self, name)  # nothing left from an earlier fit
        for name, value in vars(final).items():
            if name.endswith("_") and not name.startswith("_"):
                setattr(self, name, value)
        if "mechanism" in record:
            self.mechanism_choice_ = record["mechanism"]
        self.tuned_params_ = dict(record["params"])
        self.tuning_ = record
        return self

    def _simulate(self, skeleton, oracle, n, estimate, mechanism, epsilons, repeats) -> UtilityPreview:
        caches = self.__dict__.get("_caches")
        cache = None
        if caches is not None:  # within one fit: a target's preview fits are made once (utility.simulate)
            cache = caches.setdefault(id(skeleton.target), (skeleton.target, {}))[1]
        result = simulate(skeleton.model, skeleton.target, oracle, n, estimate.sensitivity,
                          {float(e): _at(mechanism, e) for e in epsilons}, repeats, cache=cache)
        return replace(result, public_steps=list(skeleton.public))

    def _choose(self, skeleton, oracle, n: int, options: SamplerOptions, repeats: int = PREVIEW_REPEATS) -> _Choice:
        """The mechanism, its Δ̂ (sampled, or reused) and its preview at this ε. With several candidate
        mechanisms (``mechanism`` "auto", δ > 0) a public pilot chooses (:meth:`_pilot_choice`) and only the
        chosen one's Δ̂ is sampled; when no pilot can be run (an unsupervised model, a pilot whose pairs all
        fail) each gets its Δ̂ — the time budget shared between them — and the one previewed better is taken."""
        candidates = self._mechanisms()
        previewed = self._previewed()
        if self.estimate is not None or previewed is not None:  # a Δ̂ made before fixes the norm
            norm = (self.estimate if self.estimate is not None else previewed).norm
            fitting = [mech for mech in candidates if mech.norm == norm]
            candidates = fitting or candidates
        unscored = None
        if len(candidates) > 1 and not skeleton.target.supervised:
            # no score to preview a release of an unsupervised model by: nothing to choose on, so the first
            # candidate (the Gaussian) gets the whole budget instead of each sampling on half of it
            candidates = candidates[:1]
            unscored = {"mechanism": candidates[0].name, "previews": {},
                        "reason": "an unsupervised model has no score to preview a release by: kept without a choice"}
        if len(candidates) > 1:
            chosen = self._pilot_choice(candidates, skeleton, oracle, n, options, repeats)
            if chosen is not None:
                mech, record, spent = chosen  # the pilot's seconds came out of the budget (the fit's clock)
                estimate, reused = self._estimate(skeleton.target, oracle, n, mech, _own_store(options, mech))
                preview = self._simulate(skeleton, oracle, n, estimate, mech, [self.epsilon], repeats)
                return _Choice(mech, estimate, reused, preview, record)
        tried = []
        for i, mech in enumerate(candidates):
            own = _own_store(options, mech) if len(candidates) > 1 else options
            # each mechanism's Δ̂ its share of what is left (the budget shared between them)
            estimate, reused = self._estimate(skeleton.target, oracle, n, mech, own, share=1.0 / (len(candidates) - i))
            preview = (self._simulate(skeleton, oracle, n, estimate, mech, [self.epsilon], repeats)
                       if skeleton.target.supervised else None)
            tried.append(_Choice(mech, estimate, reused, preview, None))
        if len(tried) == 1 or tried[0].preview is None:
            if self.estimate is None and tried[0].estimate is previewed:  # the choice made when it was previewed
                return replace(tried[0], record=getattr(self, "preview_choice_", None))
            return replace(tried[0], record=unscored) if unscored else tried[0]
        eps = float(self.epsilon)
        best = max(tried, key=lambda c: c.preview.expected(eps))
        record = {"mechanism": best.mechanism.name, "reason": "previewed on public data at the caller's (ε, δ)",
                  "previews": {c.mechanism.name: {"mean": c.preview.expected(eps), "sd": c.preview.row(eps)["sd"],
                                                  "sensitivity": c.estimate.sensitivity} for c in tried}}
        return replace(best, record=record)

    def _pilot_choice(self, candidates, skeleton, oracle, n: int, options: SamplerOptions, repeats: int):
        """``(mechanism, record, seconds)``: the candidate previewed better on public data at the caller's
        (ε, δ), each at a stand-in Δ̂ read off the same public pilot pairs (:func:`pilot_sensitivities`) — so
        the whole budget goes to the chosen mechanism's Δ̂. None (each is then sampled) for an unsupervised
        target or when the pilot could evaluate too few pairs."""
        if not skeleton.target.supervised:
            return None
        budget = options.time_budget
        pilot = self._pilot(skeleton.target, oracle, n, candidates, None if budget is None else PILOT_SHARE * budget)
        if pilot is None:
            return None
        previews = {mech.name: self._simulate(skeleton, oracle, n, _Stand(pilot.sensitivities[mech.name]), mech,
                                              [self.epsilon], repeats) for mech in candidates}
        eps = float(self.epsilon)
        best = max(candidates, key=lambda mech: previews[mech.name].expected(eps))
        record = {"mechanism": best.name,
                  "reason": (f"previewed on public data at the caller's (ε, δ), each at the {PILOT_QUANTILE:g} quantile "
                             f"of G over the same {pilot.pairs} public pilot pairs; the whole budget then went to "
                             f"{best.name}'s Δ̂"),
                  "pilot": {"pairs": pilot.pairs, "failed": pilot.failed, "seconds": pilot.seconds,
                            "quantile": PILOT_QUANTILE},
                  "previews": {name: {"mean": pv.expected(eps), "sd": pv.row(eps)["sd"],
                                      "sensitivity": pilot.sensitivities[name]} for name, pv in previews.items()}}
        return best, record, pilot.seconds

    def _pilot(self, target, oracle, n: int, mechanisms, seconds: float | None):
        """Public pilot pairs measured in each mechanism's norm (:func:`pilot_sensitivities`): while under
        ``seconds`` (at least PILOT_MIN_PAIRS, at most PILOT_PAIRS); with no budget (an expensive target) a small
        fixed pilot, PILOT_PAIRS_UNBUDGETED or the sample's m if fewer, never more pairs than the sample."""
        if seconds is None:
            pairs = min(PILOT_PAIRS_UNBUDGETED, max(PILOT_MIN_PAIRS, make_plan(gamma=self.gamma, m=self.m, k=self.k).m))
            return pilot_sensitivities(target, oracle, n, mechanisms, max_pairs=pairs, min_pairs=pairs, seconds=None)
        return pilot_sensitivities(target, oracle, n, mechanisms, max_pairs=PILOT_PAIRS, min_pairs=PILOT_MIN_PAIRS,
                                   seconds=seconds)

    def _judge(self, choice: _Choice, skeleton, oracle, n: int, options: SamplerOptions) -> None:
        """Before the private data is touched: is the release expected to beat a trivial predictor?
        Warns (``on_useless="refuse"``: refuses, before any charge) when it is not, with the
        ``PrivateSearchCV(...)`` line that previews best on public data."""
        result = choice.preview
        if result is None:
            return
        if not result.useless(float(self.epsilon)):
            low, high = result.interval(float(self.epsilon))
            if result.risky(float(self.epsilon)):  # useful on average, yet a release may land below trivial
                remedy = ("More records, a larger epsilon, or regularisation and public clipping chosen on public "
                          "data (tune=True, or a PrivateSearchCV with raydp.sklearn.PublicClip) narrow it"
                          if self._suggest is not None else  # a tune=True fit: that choice was made
                          "More records or a larger epsilon narrow it")
                warnings.warn(
                    f"at epsilon={self.epsilon:g} the released model is expected to score "
                    f"{result.expected(float(self.epsilon)):.3f}, but {INTERVAL_CLAIM} releases land in "
                    f"[{low:.3f}, {high:.3f}] ({result.metric}, {result.repeats} previews on public records), which "
                    f"reaches below a trivial predictor's {result.trivial:.3f}: this release may be worse than no "
                    f"model. {remedy}", UtilityWarning, stacklevel=3)
            return
        row = result.row(float(self.epsilon))
        msg = (f"at epsilon={self.epsilon:g} the released model is expected to score {row['mean']:.3f} ± "
               f"{row['sd']:.3f} ({result.metric}, {result.repeats} previews on public records), not clearly "
               f"better than a trivial predictor's {result.trivial:.3f}; the fit without noise scores "
               f"{result.nonprivate[0]:.3f} (Δ̂={choice.estimate.sensitivity:.4g} is large against the parameters)")
        clock = self.__dict__.get("_clock")
        if clock is not None and clock.budget is not None:  # the search it runs gets what the release leaves
            entry = self.__dict__.get("_prices", {}).get(id(skeleton.target))
            reserve = 0.0 if entry is None or entry[1] is None else entry[1].after(0.0)
            options = replace(options, time_budget=max(clock.left() - reserve, 1e-3))
        try:
            suggestion = self._suggest(self, skeleton, oracle, n, options) if self._suggest is not None else None
            no_time = False
        except TimeBudgetError:
            suggestion, no_time = None, True
        if suggestion is not None and suggestion.score > row["mean"]:
            msg += (f". Searched on public data over regularisation and public clipping, this previews "
                    f"{suggestion.score:.3f} (best: {suggestion.best_params}): {suggestion.line} — or add tune=True "
                    "to this line, which chooses among the same candidates on public data")
        elif no_time:
            msg += (". The time budget left no room to search regularisation and public clipping on public data: "
                    "add tune=True to this line (it searches them within the budget), or give a larger time_budget")
        else:
            msg += (". Searching regularisation and public clipping on public data found nothing better: give more "
                    "records or a larger epsilon")
        if self.on_useless == "refuse":
            raise UtilityError(msg + ' (on_useless="refuse": nothing was released or charged)')
        warnings.warn(msg, UtilityWarning, stacklevel=3)

    def _inputs(self, estimator, X, y) -> _Inputs:
        """X and y checked. Checks whose answer depends on the private *values* (NaN, unknown labels)
        are made here only without a ledger; with one they would be free probes of the data, so they
        happen inside the charged private evaluation (the fit fails there, counted, its reason withheld)."""
        name = type(estimator).__name__
        values = self.ledger is None
        X, names = as_matrix(X, "X", values=values)
        supervised = is_supervised(estimator)
        if supervised and y is None:
            raise InvalidArgumentError(f"{name} requires y to be passed, but the target y is None: call fit(X, y) "
                                       "(records are rows [X | y], label last)")
        if not supervised and y is not None:
            raise InvalidArgumentError(f"{name} is unsupervised: call fit(X) without y (records are rows of X)")
        y = as_labels(y, X.shape[0], values=values) if supervised else None
        return _Inputs(X=X, y=y, names=names, supervised=supervised)

    def _skeleton(self, estimator, oracle, n: int, d: int, supervised: bool) -> _Skeleton:
        """One fit on n public oracle records; the released paths, canonical forms and the target from it.
        Pipeline steps that need no privacy (``public_steps``) are fitted on public records first and frozen."""
        name = type(estimator).__name__
        template = prepare(estimator)
        names = public_step_names(template, self.public_steps)
        if names:
            wide = self._public_sample(oracle, max(n, _PUBLIC_RECORDS), d, supervised, seed=_PUBLIC_SEED + 1)
            template = freeze_public_steps(template, names, wide[:, :d], wide[:, d] if supervised else None)
        public = self._public_sample(oracle, n, d, supervised)
        classifier = is_classifier(template)
        integer_labels = bool(supervised and classifier and np.all(public[:, d] == np.round(public[:, d])))
        probe = EstimatorTarget(template, n_features=d, supervised=supervised, integer_labels=integer_labels,
                                params=[], shapes=[])
        try:
            model = probe.fit(public)
        except Exception as exc:  # public data: the message may be shown
            raise TargetError(f"{name} could not be fitted on a public sample of n={n} oracle records "
                              f"({type(exc).__name__}: {exc})") from None
        paths = self._released_paths(model, public[:, :d], name)
        kinds = canonical_kinds(model)
        references = {p: np.asarray(resolve(model, p), dtype=np.float64) for p in kinds}
        shapes = [np.shape(resolve(model, p)) for p in paths]
        classes = getattr(model, "classes_", None) if classifier else None
        target = EstimatorTarget(template, n_features=d, supervised=supervised, integer_labels=integer_labels,
                                 params=paths, shapes=shapes, references=references, kinds=kinds,
                                 classes=None if classes is None or not numeric(classes) else classes,
                                 start=_start(model))
        return _Skeleton(model=model, target=target, classes=classes, public=names)

    def _check_labels(self, skeleton: _Skeleton, inputs: _Inputs) -> None:
        """y's labels against the oracle's: only without a ledger (with one it would be a free probe)."""
        if not (inputs.supervised and is_classifier(skeleton.model) and self.ledger is None):
            return
        y, classes = inputs.y, skeleton.classes
        if skeleton.target.integer_labels and not np.all(y == np.round(y)):
            raise InvalidArgumentError("y must hold whole-number class labels, like the oracle's")
        if classes is not None and not np.all(np.isin(y, np.asarray(classes, dtype=np.float64))):
            raise InvalidArgumentError(f"y holds class labels the oracle never draws (the oracle's: "
                                       f"{np.asarray(classes).tolist()}); the released model knows only those")

    def _estimate(self, target, oracle, n: int, mechanism, options: SamplerOptions,
                  share: float = 1.0) -> tuple[SensitivityEstimate, bool]:
        """The Δ̂ to release with, and whether it was made before this call (``estimate=``, or a preview's):
        then its witness pairs are replayed before the release. Else it is sampled now (a stored run in
        ``options.store`` is replayed by the sampler before it is reused), within ``share`` of the sampling
        time the fit's budget has left (:meth:`_sampling_budget`)."""
        if self.estimate is not None:
            est = self._checked_estimate(oracle, options)
            # the target, n and norm before anything else (the preview would use a Δ̂ made for another model)
            check_estimate_fits(est, target, mechanism, n, reused=True, replay=options.replay)
            return est, True
        previewed = self._previewed()
        if (previewed is not None and options.store is None and previewed.target == describe(target)
                and previewed.oracle == describe(oracle) and previewed.n == n and previewed.norm == mechanism.norm
                and (options.seed is None or options.seed == previewed.seed)
                and self._plan_matches(previewed)):
            return previewed, True  # sampled on public data by preview() for this very target, n and plan
        if options.store is not None:
            seed = options.seed
            if seed is None:
                st = Store.open(options.store)
                if st.exists("meta.json"):
                    seed = st.load()[0].seed  # reuse the stored run (its target, oracle and n are checked)
            options = replace(options, seed=seed, resume=True)
        if options.time_budget is not None:
            options = replace(options, time_budget=self._sampling_budget(target, share))
        return estimate_sensitivity(target, oracle, n, mechanism=mechanism, gamma=self.gamma, m=self.m, k=self.k,
                                    options=options), False

    # ---- the time budget: a cap ----------------------------------------------------------------
    @contextlib.contextmanager
    def _timed(self, budget: float | None):
        """The clock of this call (``fit``, ``preview``): every phase reads what is left of ``budget`` from it.
        A call inside another keeps the outer clock; the outermost drops the clock and its timings at the end."""
        outer = "_clock" in self.__dict__
        if not outer:
            self._clock = _Clock(budget)
            self._prices, self._caches = {}, {}
        try:
            yield self._clock
        finally:
            if not outer:
                for name in ("_clock", "_prices", "_caches"):
                    self.__dict__.pop(name, None)

    def _price(self, skeleton, oracle, n: int, options: SamplerOptions, confirm: bool = False) -> _Price | None:
        """The target timed on public records (cached for the call): the fastest of its fits (at least two, at
        most :data:`PRICE_FITS` while within :data:`PRICE_SHARE` of the budget; all of them with ``confirm``,
        before a refusal), a pair as a block evaluates it (:func:`raydp.sampler.price_pairs`) and one preview
        model scored. None when the fit fails on every public draw tried (the sampler's own pricing decides)."""
        prices = self.__dict__.setdefault("_prices", {})
        key = id(skeleton.target)
        if key in prices:
            return prices[key][1]
        target = skeleton.target
        rng = np.random.default_rng([_PUBLIC_SEED, 2])
        times, vec, records = [], None, None
        share = PRICE_SHARE * (options.time_budget or DEFAULT_TIME_BUDGET)
        for _ in range(3):
            records = np.asarray(oracle.sample(rng, n), dtype=np.float64)
            try:
                # the fastest of a few fits: the first ones pay imports and caches (in a fresh process, with the
                # sealed process starting beside them, several times the fit itself), a busy neighbour only adds
                while len(times) < PRICE_FITS and (len(times) < (PRICE_FITS if confirm else 2)
                                                   or sum(times) + min(times) <= share):
                    t0 = time.perf_counter()
                    vec = target(records)
                    times.append(time.perf_counter() - t0)
                break
            except Exception:  # noqa: BLE001 - a public draw the fit cannot take: try another
                times, vec = [], None
        if not times:
            prices[key] = (target, None)
            return None
        priced = replace(options, time_budget=options.time_budget or DEFAULT_TIME_BUDGET, pair_timeout=None)
        pair = price_pairs(target, oracle, Laplace(1.0), n, _PUBLIC_SEED, target.output_dim, times, priced)
        score = 0.0
        if target.supervised:
            X, y = target.split(records)
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    with_params(skeleton.model, target, vec).score(X, y)
                except Exception:  # noqa: BLE001 - a timing only
                    pass
            score = time.perf_counter() - t0
        price = _Price(fit=min(times), pair=pair, score=score)
        prices[key] = (target, price)
        return price

    def _slots(self, options: SamplerOptions) -> list[tuple[int, float]]:
        """``(slots, start seconds)`` the sampling could run on: a cluster's slots, or one core in process and,
        for ``auto``, this machine's free cores on an embedded Ray after its start."""
        from ..engine import AutoBackend, RayBackend
        from ..engine.backends import free_cores, ray_start_seconds

        backend = options.backend
        if isinstance(backend, RayBackend):
            return [(backend.slots(), 0.0)]
        if isinstance(backend, AutoBackend):
            if backend.cluster_reason() is not None:
                return [(backend.ray.slots(), 0.0)]
            return [(1, 0.0), (max(1, int(free_cores(backend.ray.num_cpus))), ray_start_seconds())]
        return [(1, 0.0)]

    def _check_budget(self, skeleton, oracle, n: int, options: SamplerOptions, *, candidates: int = 1,
                      clock: _Clock | None = None, pilot: bool | None = None, release: bool = True,
                      confirmed: bool = False) -> None:
        """Before anything is sampled: refuse (:class:`~raydp.sampler.TimeBudgetError`) when even the fewest
        pairs this plan allows, with the public pilot and previews around them and the release after, cannot
        be bought with the time budget — priced on public records, with what would fit. Nothing when the
        budget is None (no cap), or Δ̂ is reused."""
        clock = clock or self.__dict__.get("_clock")
        if clock is None or clock.budget is None or self.estimate is not None:
            return
        if candidates == 1 and self._previewed() is not None:
            return  # the preview's Δ̂, if it fits, is reused; if not, the sampler checks the plan it samples
        price = self._price(skeleton, oracle, n, options, confirm=confirmed)
        if price is None:
            return
        mechanisms = len(self._mechanisms())
        if pilot is None:
            pilot = mechanisms > 1 and skeleton.target.supervised
        wanted = make_plan(gamma=self.gamma, m=self.m, k=self.k)
        public = 0.0
        if pilot:
            public = candidates * (PILOT_MIN_PAIRS * price.pair + price.preview(PREVIEW_REPEATS, mechanisms))
        best = None
        for slots, start in self._slots(options):
            sampling = wanted.m * price.pair / slots
            after = price.after(sampling) if release else price.preview(PREVIEW_REPEATS)
            fixed = clock.elapsed() + public + start + after
            if best is None or fixed + sampling < best[0] + best[1]:
                best = (fixed, sampling, slots)
        fixed, sampling, slots = best
        if fixed + sampling > clock.budget:
            if not confirmed:  # priced again on PRICE_FITS fits before a refusal: the first may be a cold start's
                self.__dict__.get("_prices", {}).pop(id(skeleton.target), None)
                return self._check_budget(skeleton, oracle, n, options, candidates=candidates, clock=clock,
                                          pilot=pilot, release=release, confirmed=True)
            raise TimeBudgetError(over_budget(wanted.m, price.pair, clock.budget, slots, wanted.gamma,
                                              self.m is None and self.k is None, what="this fit", fixed=fixed))

    def _sampling_budget(self, target, share: float = 1.0) -> float:
        """Seconds of sampling this fit can still spend: what its clock has left, less the release after it
        (priced on the target's own timings), times :data:`SAMPLING_SLACK` — and ``share`` of that."""
        clock = self.__dict__.get("_clock")
        if clock is None or clock.budget is None:
            return self._options().time_budget
        left = clock.left()
        entry = self.__dict__.get("_prices", {}).get(id(target))
        price = None if entry is None else entry[1]
        if price is not None:
            left -= price.after(0.0)
        seconds = share * SAMPLING_SLACK * left / (1.0 + REPLAY_SHARE)
        if seconds <= 0:
            raise TimeBudgetError(
                f"the time budget of {clock.budget:g} s is spent ({clock.elapsed():.1f} s so far: the public "
                "previews, and the release still to come) before any pair could be sampled; nothing was sampled. "
                "Give a larger time_budget, or time_budget=None to sample the fewest pairs whatever they take")
        return seconds

    def _assemble(self, skeleton: _Skeleton, inputs: _Inputs, estimate, release) -> None:
        """The released model: the skeleton with the released parameters put in; the fitted attributes."""
        target = skeleton.target
        self.estimator_ = with_params(skeleton.model, target, release.value)
        self.public_steps_ = list(skeleton.public)
        self.estimate_ = estimate
        self.release_ = release
        self.released_params_ = list(target.params)
        self.target_ = target
        self.n_features_in_ = inputs.d
        if inputs.names is not None:
            self.feature_names_in_ = inputs.names
        elif hasattr(self, "feature_names_in_"):
            del self.feature_names_in_
        if skeleton.classes is not None:
            self.classes_ = skeleton.classes

    def statement(self) -> str:
        """The release's (ε, δ, γ) statement, which mechanism was chosen and why, and which pipeline steps were
        fitted on public records."""
        check_is_fitted(self, ("estimator_", "release_"))  # not preview_estimate_, set by preview()
        text = self.release_.statement()
        choice = getattr(self, "mechanism_choice_", None)
        if choice and not choice["previews"]:  # nothing to choose on (an unsupervised model)
            text += f"; {choice['mechanism']} kept: {choice['reason'].split(': ')[0]}"
        elif choice:
            pilot = choice.get("pilot")
            stand = "pilot Δ̂" if pilot else "Δ̂"
            seen = "; ".join(f"{name} {p['mean']:.3f} ± {p['sd']:.3f} ({stand} {p['sensitivity']:.4g})"
                             for name, p in sorted(choice["previews"].items()))
            where = (f", each at the {pilot['quantile']:g} quantile of G over the same {pilot['pairs']} public "
                     "pilot pairs" if pilot else "")
            text += (f"; {choice['mechanism']} chosen: it previewed better on public data at this (ε, δ){where}, "
                     f"no privacy spent ({seen})")
        if self.public_steps_:
            text += ("; fitted on public oracle records and not released (no privacy cost): "
                     + ", ".join(self.public_steps_))
        tuning = getattr(self, "tuning_", None)
        if tuning:
            chosen = ", ".join(f"{k}={v!r}" for k, v in sorted(tuning["params"].items()))
            text += (f"; tune=True chose {chosen} among {len(tuning['candidates'])} candidates by the score previewed "
                     f"on public data at stand-in Δ̂s from public pilot pairs, no privacy spent ({tuning['previewed']:.3f}"
                     + (f"; the model as given {tuning['as_given']:.3f}" if tuning["as_given"] is not None else "")
                     + ")")
        return text

    # ---- checks --------------------------------------------------------------------------
    def _checked_estimator(self):
        est = self.estimator
        if isinstance(est, type):
            raise InvalidArgumentError(f"estimator must be an instance such as {est.__name__}(), not the class")
        if not callable(getattr(est, "fit", None)):
            raise InvalidArgumentError("estimator must be a scikit-learn estimator with a fit(X[, y]) method, "
                                       f"got {type(est).__name__}")
        if not callable(getattr(est, "get_params", None)):
            raise InvalidArgumentError(f"estimator {type(est).__name__} must follow scikit-learn's API "
                                       "(get_params/set_params, so that it can be cloned)")
        return est

    def _options(self) -> SamplerOptions:
        """``options`` with ``random_state`` as its seed and ``time_budget`` resolved ("auto": the options'
        budget, else :data:`DEFAULT_TIME_BUDGET`)."""
        options = SamplerOptions.of(self.options)
        if self.random_state is not None:
            seed = check_int(self.random_state, "random_state", min_value=0, expected="a non-negative integer or None")
            if options.seed is not None and options.seed != seed:
                raise InvalidArgumentError(f"random_state={seed} and options.seed={options.seed} disagree: give one")
            options = replace(options, seed=seed)
        budget = self.time_budget
        if isinstance(budget, str) and budget == "auto":
            budget = options.time_budget if options.time_budget is not None else DEFAULT_TIME_BUDGET
        elif budget is not None:
            budget = check_real(budget, "time_budget", min_value=0, include_min=False,
                                expected='"auto", None or a positive number of seconds')
        if self.on_useless not in ("warn", "refuse"):
            raise InvalidArgumentError(f'on_useless must be "warn" or "refuse", got {self.on_useless!r}')
        return replace(options, time_budget=budget)

    def _mechanisms(self) -> list:
        """The mechanisms this estimator may release with, at its ε (one, or both for "auto" with δ > 0): a
        name or an object, as at every entry point (:func:`raydp.mechanisms.as_mechanism`; an object's ε and δ
        must agree with ``epsilon`` and ``delta`` when those are given)."""
        eps = float(Laplace(self.epsilon).privacy()[0])  # ε checked as every mechanism checks it
        choice = self.mechanism
        if choice is None or (isinstance(choice, str) and choice == "auto"):
            delta = 0.0 if self.delta is None else check_delta(self.delta)
            return [Laplace(eps)] if delta == 0 else [Gaussian(eps, delta, calibration="analytic"), Laplace(eps)]
        if isinstance(choice, str) and choice not in ("laplace", "gaussian"):
            raise InvalidArgumentError(f'mechanism must be None, "auto", "laplace", "gaussian" or a raydp Laplace or '
                                       f"Gaussian mechanism, got {choice!r}")
        if self.delta is not None:
            check_delta(self.delta)
        mech = check_mechanism(as_mechanism(choice, eps, self.delta), coordinatewise=True)
        if not isinstance(mech, (Laplace, Gaussian)):
            raise InvalidArgumentError(f"mechanism must be a raydp Laplace or Gaussian mechanism, got "
                                       f"{type(mech).__name__}")
        return [mech]

    def _oracle_width(self, oracle, n: int) -> int:
        records = self._public_sample(oracle, n, None, False)
        return int(records.shape[1])

    def _public_sample(self, oracle, n: int, d: int | None, supervised: bool, seed: int = _PUBLIC_SEED) -> np.ndarray:
        try:
            records = oracle.sample(np.random.default_rng(seed), n)
        except Exception as exc:  # the oracle is public: its message may be shown
            raise OracleError(f"the oracle raised {type(exc).__name__} drawing {n} records: {exc}") from None
        records = check_records(records, n)
        if records.ndim == 1:
            records = records[:, None]
        if d is None:
            if records.ndim != 2:
                raise OracleError(f"the oracle draws records of shape {records.shape[1:]}; an estimator needs rows")
            return records
        width = d + int(supervised)
        if records.ndim != 2 or records.shape[1] != width:
            got = f"{records.shape[1]} columns" if records.ndim == 2 else f"records of shape {records.shape[1:]}"
            need = (f"rows [X | y] with the label last: {d} features + 1 label = {width} columns" if supervised
                    else f"rows of X: {d} columns")
            raise OracleError(f"the oracle draws {got}, but X has {d} features; its records must be {need}")
        return records

    def _plan_matches(self, est) -> bool:
        """The estimate's plan is what this estimator asks for: the same (m, k, γ), or — γ alone asked, so a
        time budget may have sized m — the same γ from at least the fewest pairs, within Theorem 15."""
        wanted = make_plan(gamma=self.gamma, m=self.m, k=self.k)
        if not math.isclose(wanted.gamma, est.plan.gamma):
            return False
        if self.m is None and self.k is None:
            return est.plan.m >= wanted.m and est.plan.satisfies_theorem15()
        return (wanted.m, wanted.k) == (est.plan.m, est.plan.k)

    def _checked_estimate(self, oracle, options: SamplerOptions) -> SensitivityEstimate:
        est = self.estimate
        if not isinstance(est, SensitivityEstimate):
            raise InvalidArgumentError("estimate must be a SensitivityEstimate (another fit's estimate_, or "
                                       f"raydp.load_estimate), got {type(est).__name__}")
        if options.store is not None:
            raise InvalidArgumentError("give estimate= (a Δ̂ in memory) or options.store (a stored Δ̂), not both")
        check_reusable(describe(oracle), "oracle", EstimateMismatchError, "a precomputed estimate",
                       replay=options.replay)
        problems = []
        if est.oracle != describe(oracle):
            problems.append(f"it was computed for oracle {difference(est.oracle, describe(oracle))}")
        wanted = make_plan(gamma=self.gamma, m=self.m, k=self.k)
        if not self._plan_matches(est):
            problems.append(f"it was computed with plan (m={est.plan.m}, k={est.plan.k}, γ={est.plan.gamma:g}), "
                            f"not (m={wanted.m}, k={wanted.k}, γ={wanted.gamma:g})")
        if options.seed is not None and options.seed != est.seed:
            problems.append(f"it was computed with seed {est.seed}, not {options.seed}")
        if problems:
            raise EstimateMismatchError("estimate does not fit this estimator: " + "; ".join(problems))
        return est

    def _released_paths(self, skeleton, X_pub, name: str) -> list[str]:
        floats = fitted_float_params(skeleton)
        if self.params is None:
            for _, sub in estimators(skeleton):
                reason = REFUSED.get(type(sub).__name__)
                if reason is not None and type(sub).__module__.startswith("sklearn."):
                    raise InvalidArgumentError(
                        f"{type(sub).__name__} is not supported: {reason}. raydp canonicalises KMeans centres and "
                        "PCA/TruncatedSVD axes only; pass params= to release chosen attributes anyway")
            paths = prediction_params(skeleton, X_pub)
            if not paths:
                raise InvalidArgumentError(
                    f"{name} has no fitted float parameter that its predictions use (raydp releases float arrays "
                    f"such as coef_ and intercept_; found {sorted(floats) or 'none'}); give params= to choose")
            return paths
        if callable(self.params):
            try:
                chosen = self.params(skeleton)
            except Exception as exc:  # the skeleton is a fit on public records: its message may be shown
                raise InvalidArgumentError(f"params: the callable raised {type(exc).__name__} on the model fitted "
                                           f"on public records: {exc}".splitlines()[0]) from None
        else:
            chosen = self.params
        if isinstance(chosen, str) or not all(isinstance(p, str) for p in chosen):
            raise InvalidArgumentError(f"params must be a list of attribute paths (or a callable returning one), "
                                       f"got {chosen!r}")
        paths = list(dict.fromkeys(chosen))
        unknown = [p for p in paths if p not in floats]
        if unknown or not paths:
            raise InvalidArgumentError(f"params {unknown or paths} are not fitted float parameters of {name}; "
                                       f"its fitted float parameters are: {', '.join(floats) or 'none'}")
        return paths

    # ---- predictions: the released model only -------------------------------------------
    def _X(self, X) -> np.ndarray:
        # the released model's attributes, not any "_" one: preview() sets preview_estimate_ before any fit
        check_is_fitted(self, ("estimator_", "release_"))
        arr, names = as_matrix(X, "X", min_rows=1)
        if arr.shape[1] != self.n_features_in_:
            raise InvalidArgumentError(f"X has {arr.shape[1]} features, the model was fitted with {self.n_features_in_}")
        ours = getattr(self, "feature_names_in_", None)
        if names is not None and ours is not None and list(names) != list(ours):
            raise InvalidArgumentError("X's columns differ from (or are in another order than) those it was fitted with")
        return arr

    @available_if(_estimator_has("predict"))
    def predict(self, X):
        """Predictions of the released model."""
        X = self._X(X)  # NotFittedError before any attribute
        return self.estimator_.predict(X)

    @available_if(_estimator_has("predict_proba"))
    def predict_proba(self, X):
        X = self._X(X)  # NotFittedError before any attribute
        return self.estimator_.predict_proba(X)

    @available_if(_estimator_has("predict_log_proba"))
    def predict_log_proba(self, X):
        X = self._X(X)  # NotFittedError before any attribute
        return self.estimator_.predict_log_proba(X)

    @available_if(_estimator_has("decision_function"))
    def decision_function(self, X):
        X = self._X(X)  # NotFittedError before any attribute
        return self.estimator_.decision_function(X)

    @available_if(_estimator_has("transform"))
    def transform(self, X):
        X = self._X(X)  # NotFittedError before any attribute
        return self.estimator_.transform(X)

    @available_if(_estimator_has("score"))
    def score(self, X, y=None):
        """The released model's ``score`` (accuracy for classifiers, R² for regressors)."""
        X = self._X(X)
        if y is None:
            return self.estimator_.score(X)
        return self.estimator_.score(X, as_labels(y, X.shape[0]))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        from sklearn.utils import get_tags

        inner = get_tags(self.estimator)
        tags.estimator_type = inner.estimator_type
        tags.classifier_tags = inner.classifier_tags
        tags.regressor_tags = inner.regressor_tags
        tags.transformer_tags = inner.transformer_tags
        tags.target_tags.required = is_supervised(self.estimator)
        tags.non_deterministic = True
        tags.input_tags.sparse = False
        tags.input_tags.allow_nan = False
        return tags
