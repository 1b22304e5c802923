"""Model selection on public data: :class:`PrivateSearchCV` picks hyperparameters by the previewed private score.

Every candidate needs its own Δ̂ — a run of the sampler on public oracle records, the expensive and
parallel work the engine exists for (on Ray when the options say so or the run is large). Each is
previewed (:meth:`PrivateEstimator.preview`) at the user's ε; the candidate with the best expected
private score is fitted on the private data and released once, reusing the Δ̂ its preview sampled,
charged once to the ledger. The search reads no private record and spends no privacy: it is a function
of the public oracle, n and the candidates; only the chosen candidate's release touches the data.
"""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.base import BaseEstimator, clone
from sklearn.model_selection import ParameterGrid
from sklearn.utils.validation import check_is_fitted

from ..errors import InvalidArgumentError, RaydpError
from ..validation import check_int, check_real
from .estimator import PrivateEstimator
from .inputs import as_matrix

__all__ = ["PrivateSearchCV"]

# Keys of a grid that set the PrivateEstimator rather than the wrapped estimator.
_OWN = ("public_steps",)


def _results(grid: list[dict], rows: list[tuple]) -> dict:
    """``cv_results_`` in scikit-learn's key pattern from each candidate's ``(mean, sd, non-private, trivial, Δ̂,
    error)``."""
    results = {"params": grid}
    for name in sorted({key for params in grid for key in params}):
        column = np.ma.MaskedArray(np.empty(len(grid), dtype=object), mask=True)
        for i, params in enumerate(grid):
            if name in params:
                column[i] = params[name]
        results[f"param_{name}"] = column
    for i, key in enumerate(("mean_test_score", "std_test_score", "mean_nonprivate_test_score",
                             "mean_trivial_test_score", "sensitivity")):
        results[key] = np.array([row[i] for row in rows], dtype=float)
    results["error"] = [row[5] for row in rows]
    return results


class PrivateSearchCV(BaseEstimator):
    """Choose among ``param_grid`` by the score the *released* model is expected to reach, then release once.

    Parameters
    ----------
    estimator : scikit-learn estimator (unfitted)
    param_grid : dict or list of dicts, as :class:`sklearn.model_selection.GridSearchCV` takes; keys are the
        estimator's parameters (``"logisticregression__C"``), or ``"public_steps"`` (which pipeline steps are
        fitted on public records).
    oracle, epsilon, delta, gamma, m, k, mechanism, options, ledger, ledger_label, on_useless, random_state : as
        :class:`PrivateEstimator` (``mechanism`` a name or an object, ε and δ as there; ``on_useless`` judges the
        chosen candidate's release before it is made: "warn" or "refuse"; ``random_state`` seeds the sampler,
        never the noise).
    time_budget : "auto", None or seconds: the time of the whole search and its release, a cap shared by its
        candidates ("auto": ``options.time_budget`` when set, else the default of :class:`PrivateEstimator`;
        None: every candidate samples the fewest pairs γ allows, however long that takes). Before any
        candidate samples, the search is priced on public records; when even every candidate's fewest pairs
        cannot be bought in time it is refused with :class:`~raydp.sampler.TimeBudgetError`, saying what would
        fit.
    repeats : public draws per candidate in its preview (default 5).

    With a cluster at hand (``options`` backend "ray", ``RAY_ADDRESS``, an address, or Ray already running)
    the candidates are sampled together, their pairs spread over the cluster at once, instead of one
    candidate after another.

    Attributes
    ----------
    cv_results_ : dict of arrays, one entry per candidate, in scikit-learn's key pattern (``pandas.DataFrame``
        takes it): ``params`` (the candidates' dicts), ``param_<name>`` (a masked array per grid key, masked
        where a candidate lacks it), ``mean_test_score`` and ``std_test_score`` (the score the *released*
        model is expected to reach, previewed on public records at this ε), ``rank_test_score`` (1: the
        chosen one), ``mean_nonprivate_test_score`` and ``mean_trivial_test_score`` (the fit without noise
        and a trivial predictor, on the same records), ``sensitivity`` (the candidate's Δ̂) and ``error`` (why
        a candidate could not be previewed, else None).
    best_index_, best_params_, best_score_ (the chosen candidate's expected private score).
    best_estimator_ : the fitted :class:`PrivateEstimator` of the chosen candidate (its ``release_`` is the
        one release; its ``statement()`` the guarantee).
    """

    def __init__(self, estimator, param_grid, *, oracle, epsilon, delta=None, gamma=None, m=None, k=None,
                 mechanism=None, time_budget="auto", options=None, ledger=None, ledger_label=None, repeats=5,
                 on_useless="warn", random_state=None):
        self.estimator = estimator
        self.param_grid = param_grid
        self.oracle = oracle
        self.epsilon = epsilon
        self.delta = delta
        self.gamma = gamma
        self.m = m
        self.k = k
        self.options = options
        self.ledger = ledger
        self.ledger_label = ledger_label
        self.repeats = repeats
        self.mechanism = mechanism
        self.time_budget = time_budget
        self.on_useless = on_useless
        self.random_state = random_state

    def _candidate(self, params: dict, *, ledger=None, time_budget="auto") -> PrivateEstimator:
        own = {k: v for k, v in params.items() if k in _OWN}
        inner = {k: v for k, v in params.items() if k not in _OWN}
        est = clone(self.estimator)
        try:
            est.set_params(**inner)
        except ValueError as exc:
            raise InvalidArgumentError(f"param_grid: {exc}".splitlines()[0]) from None
        return PrivateEstimator(est, oracle=self.oracle, epsilon=self.epsilon, delta=self.delta, gamma=self.gamma,
                                m=self.m, k=self.k, mechanism=self.mechanism, time_budget=time_budget,
                                options=self.options, ledger=ledger, ledger_label=self.ledger_label,
                                on_useless=self.on_useless, random_state=self.random_state)

    def _total(self):
        """The search's time budget in seconds (None: no cap)."""
        budget = self.time_budget
        if isinstance(budget, str) and budget == "auto":
            from ..options import SamplerOptions
            from .estimator import DEFAULT_TIME_BUDGET

            base = SamplerOptions.of(self.options).time_budget
            budget = base if base is not None else DEFAULT_TIME_BUDGET
        if budget is None:
            return None
        return check_real(budget, "time_budget", min_value=0, include_min=False,
                          expected='"auto", None or a positive number of seconds')

    def _budget(self, candidates: int):
        """Each candidate's share of the search's time budget (None: the fewest pairs)."""
        total = self._total()
        return None if total is None else total / max(candidates, 1)

    def _priced(self, cand, n: int, clock, candidates: int):
        """Before any candidate samples: the first candidate priced on public records (its fits, its pairs, its
        previews); :class:`~raydp.sampler.TimeBudgetError` when ``candidates`` of them — each its fewest pairs
        and its preview — and the release after cannot be bought in what ``clock`` has left. Returns the
        seconds to keep back for the release (0 when it cannot be priced)."""
        from ..oracles import as_oracle
        from ..plan import make_plan
        from ..sampler import TimeBudgetError, over_budget
        from .estimator import PILOT_MIN_PAIRS
        from .inputs import is_supervised

        try:
            est = cand._checked_estimator()
            oracle = as_oracle(self.oracle)
            supervised = is_supervised(est)
            d = cand._oracle_width(oracle, n) - int(supervised)
            options = cand._options()
            with cand._timed(None):
                skeleton = cand._skeleton(est, oracle, n, d, supervised)
                price = cand._price(skeleton, oracle, n, options)
                slots = cand._slots(options)
            mechanisms = len(cand._mechanisms())
        except RaydpError:
            return 0.0  # a candidate that cannot be fitted says so in its own row
        if price is None:
            return 0.0
        wanted = make_plan(gamma=self.gamma, m=self.m, k=self.k)
        pilot = PILOT_MIN_PAIRS * price.pair if mechanisms > 1 and supervised else 0.0
        preview = price.preview(self.repeats, mechanisms) + pilot
        release = price.after(0.0)
        best = None
        for count, start in slots:
            sampling = candidates * wanted.m * price.pair / count
            fixed = clock.elapsed() + start + candidates * preview + release
            if best is None or fixed + sampling < sum(best[:2]):
                best = (fixed, sampling, count)
        fixed, sampling, count = best
        if fixed + sampling > clock.budget:
            raise TimeBudgetError(over_budget(candidates * wanted.m, price.pair, clock.budget, count, wanted.gamma,
                                              self.m is None and self.k is None,
                                              what=f"this search of {candidates} candidates", fixed=fixed))
        return release

    def _together(self) -> bool:
        """A cluster is at hand: candidates are sampled at once, their pairs spread over it together."""
        from ..engine import AutoBackend, RayBackend
        from ..options import SamplerOptions

        backend = SamplerOptions.of(self.options).backend
        return isinstance(backend, RayBackend) or (isinstance(backend, AutoBackend) and backend.cluster_reason()
                                                     is not None)

    def search(self, n):
        """The public part alone: preview every candidate for n records; fills ``cv_results_`` and the
        ``best_*`` attributes except ``best_estimator_``. No private record is read, nothing is charged."""
        n = check_int(n, "n", min_value=2)
        repeats = check_int(self.repeats, "repeats", min_value=1)
        try:
            grid = list(ParameterGrid(self.param_grid))
        except (TypeError, ValueError) as exc:
            raise InvalidArgumentError(f"param_grid: {exc}".splitlines()[0]) from None
        grids = self.param_grid if isinstance(self.param_grid, (list, tuple)) else [self.param_grid]
        if not grid or any(isinstance(g, dict) and not g for g in grids):
            raise InvalidArgumentError("param_grid has no candidate: give a dict of parameter name -> list of values")
        share = self._budget(len(grid))
        built = [self._candidate(params, time_budget=share) for params in grid]  # every name checked first
        from .estimator import _Clock

        clock = _Clock(self._total())
        reserve = 0.0 if clock.budget is None else self._priced(built[0], n, clock, len(built))
        rows = []
        def preview(cand):
            try:
                return cand.preview(n, repeats=repeats), None
            except RaydpError as exc:  # public data only: a candidate that cannot be fitted is out, and says why
                return None, exc

        # Warnings are silenced here, in the calling thread, around every candidate: catch_warnings is not
        # thread-safe, and entered in the pool's threads it could leave the process's filters at "ignore"
        # for good (a later UtilityWarning lost). This thread's exit restores them whatever the threads did.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if self._together() and len(built) > 1:
                from concurrent.futures import ThreadPoolExecutor

                with ThreadPoolExecutor(max_workers=len(built)) as pool:
                    outcomes = list(pool.map(preview, built))
            else:
                outcomes = []
                for i, cand in enumerate(built):
                    if clock.budget is not None:  # what is left, shared by the candidates still to preview
                        cand.set_params(time_budget=max((clock.left() - reserve) / (len(built) - i), 1e-3))
                    outcomes.append(preview(cand))
        candidates = []
        for cand, (previewed, exc) in zip(built, outcomes):
            if exc is not None:
                rows.append((np.nan, np.nan, np.nan, np.nan, np.nan, str(exc).splitlines()[0]))
                candidates.append(None)
            else:
                r = previewed.rows[0]
                rows.append((r["mean"], r["sd"], previewed.nonprivate[0],
                             np.nan if previewed.trivial is None else previewed.trivial, previewed.sensitivity, None))
                candidates.append(cand)
        results = _results(grid, rows)
        scores = results["mean_test_score"]
        if np.all(np.isnan(scores)):
            raise InvalidArgumentError("no candidate could be previewed on public records: "
                                       + "; ".join(e for e in results["error"] if e))
        order = np.argsort(-np.where(np.isnan(scores), -np.inf, scores), kind="stable")
        rank = np.empty(len(scores), dtype=np.int32)
        rank[order] = np.arange(1, len(scores) + 1)
        results["rank_test_score"] = rank
        self.cv_results_ = results
        self.best_index_ = int(order[0])
        self.best_params_ = grid[self.best_index_]
        self.best_score_ = float(scores[self.best_index_])
        self._best_candidate = candidates[self.best_index_]
        self.n_candidates_ = len(grid)
        self.search_seconds_ = clock.elapsed()
        return self

    def fit(self, X, y=None):
        """Search on public data for n = len(X), then fit and release the chosen candidate once on (X, y)."""
        arr, _ = as_matrix(X, "X", values=self.ledger is None)
        self.search(arr.shape[0])
        best = self._candidate(self.best_params_, ledger=self.ledger,
                               time_budget=self._budget(self.n_candidates_) if self._total() is None else
                               max(self._total() - getattr(self, "search_seconds_", 0.0), 1e-3))
        best.preview_estimate_ = self._best_candidate.preview_estimate_  # its Δ̂, sampled in the search
        best.preview_choice_ = getattr(self._best_candidate, "preview_choice_", None)  # and its mechanism's why
        self.best_estimator_ = best.fit(X, y)
        return self

    def table(self) -> str:
        """The candidates as a Markdown table, best first."""
        check_is_fitted(self, "cv_results_")
        r = self.cv_results_
        lines = ["| rank | params | expected private score | non-private | trivial | Δ̂ |", "|---|---|---|---|---|---|"]
        for i in sorted(range(len(r["params"])), key=lambda j: r["rank_test_score"][j]):
            lines.append(f"| {r['rank_test_score'][i]} | {r['params'][i]} | {r['mean_test_score'][i]:.3f} ± "
                         f"{r['std_test_score'][i]:.3f} | {r['mean_nonprivate_test_score'][i]:.3f} | "
                         f"{r['mean_trivial_test_score'][i]:.3f} | {r['sensitivity'][i]:.4g} |")
        return "\n".join(lines)

    def statement(self) -> str:
        """The chosen candidate's release statement (:meth:`PrivateEstimator.statement`), and how it was chosen."""
        check_is_fitted(self, "best_estimator_")
        chosen = ", ".join(f"{k}={v!r}" for k, v in sorted(self.best_params_.items()))
        return (self.best_estimator_.statement() + f"; PrivateSearchCV chose {chosen} among {self.n_candidates_} "
                f"candidates by the score previewed on public records ({self.best_score_:.3f}), no privacy spent: "
                "one release")

    def predict(self, X):
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_.predict(X)

    def predict_proba(self, X):
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_.predict_proba(X)

    def score(self, X, y=None):
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_.score(X, y)
