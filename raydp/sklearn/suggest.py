"""What works instead: when the preview says a release would not beat a trivial predictor.

The parameters that control a model's sensitivity are its regularisation (``C``, ``alpha``) and how
far a record can move it — clipping the features, after public scaling, to a public bound
(:class:`PublicClip`). :func:`suggest` searches them on public records only (no privacy spent, no
private record read): a :class:`~raydp.sklearn.PrivateSearchCV` over the estimator with a clipping step
slotted in after its public preprocessing and its regularisation scaled down (C) or up (alpha), and
returns the exact ``PrivateSearchCV(...)`` line whose best candidate previewed best, with that score.
The warning prints it; running that line picks and releases the best candidate.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin

__all__ = ["PublicClip", "Suggestion", "suggest"]

# What the regularisation is scaled by in the suggested search (C smaller, alpha larger: more regularised).
_C_FACTORS = (0.01, 0.1, 1.0)
_ALPHA_FACTORS = (1.0, 10.0, 100.0)


class PublicClip(TransformerMixin, BaseEstimator):
    """Clip every feature to [−bound, bound]: a per-record map with a public bound, so it needs no data.

    Placed after public scaling (``StandardScaler`` fitted on public records), it bounds how far one
    record can move a model — an outlier in raw units becomes at most ``bound`` standard deviations —
    and so the model's sensitivity, at no privacy cost.

    >>> PublicClip(2.0).fit_transform(np.array([[-5.0, 0.5, 9.0]]))
    array([[-2. ,  0.5,  2. ]])
    """

    def __init__(self, bound=3.0):
        self.bound = bound

    def fit(self, X, y=None):
        self.n_features_in_ = np.shape(X)[1]
        return self

    def transform(self, X):
        bound = float(self.bound)
        return np.clip(np.asarray(X, dtype=np.float64), -bound, bound)


@dataclass(frozen=True)
class Suggestion:
    """``line``: a ``PrivateSearchCV(...)`` call to paste; ``score``: its best candidate's previewed score;
    ``best_params``: that candidate; ``search``: the search that previewed them."""

    line: str
    score: float
    best_params: dict
    search: object


def _final(estimator):
    from sklearn.pipeline import Pipeline

    if isinstance(estimator, Pipeline):
        name, step = estimator.steps[-1]
        return f"{name}__", step
    return "", estimator


def _space(estimator, public: list[str]):
    """The estimator with a clipping step after its public steps (a pipeline with public scaling), and the
    grid key for it; (estimator, None) when there is no public scaling to clip after."""
    from sklearn.pipeline import Pipeline

    if not isinstance(estimator, Pipeline) or not public:
        return estimator, None
    names = [name for name, _ in estimator.steps]
    at = max(names.index(p) for p in public) + 1
    steps = list(estimator.steps[:at]) + [("publicclip", "passthrough")] + list(estimator.steps[at:])
    params = estimator.get_params(deep=False)
    params.pop("steps", None)
    return Pipeline(steps, **params), "publicclip"


def grid_for(estimator, public: list[str]) -> tuple[object, dict]:
    """The search space (estimator with a clipping slot) and the grid over its regularisation and clipping."""
    space, clip_key = _space(estimator, public)
    prefix, model = _final(space)
    params = model.get_params(deep=False)
    grid = {}
    if "C" in params and isinstance(params["C"], (int, float)):
        grid[prefix + "C"] = [float(params["C"]) * f for f in _C_FACTORS]
    elif "alpha" in params and isinstance(params["alpha"], (int, float)):
        grid[prefix + "alpha"] = [float(params["alpha"]) * f for f in _ALPHA_FACTORS]
    if clip_key is not None:
        grid[clip_key] = ["passthrough", PublicClip(3.0)]
    return space, grid


def suggest(private_estimator, skeleton, oracle, n: int, options) -> Suggestion | None:
    """Search the sensitivity-controlling parameters on public records; None when there is nothing to
    search or no candidate previews better than the estimator as given."""
    from .search import PrivateSearchCV

    space, grid = grid_for(private_estimator.estimator, list(skeleton.public))
    if not grid:
        return None
    # within a budgeted fit, the search gets what the fit has left (options.time_budget), and refuses — no
    # suggestion — when that cannot buy it; an unbudgeted fit's search samples the fewest pairs
    budget = options.time_budget
    options = dataclasses.replace(options, time_budget=None, progress=False)
    pe = private_estimator
    search = PrivateSearchCV(space, grid, oracle=oracle, epsilon=pe.epsilon, delta=pe.delta, gamma=pe.gamma, m=pe.m,
                             k=pe.k, mechanism=pe.mechanism, options=options, time_budget=budget, repeats=5)
    from ..sampler import TimeBudgetError

    try:
        search.search(n)
    except TimeBudgetError:
        raise  # the caller says the budget left no time for the search, not that it found nothing
    except Exception:  # noqa: BLE001 - a suggestion that cannot be made is no suggestion
        return None
    extra = "".join(f", {k}={v!r}" for k, v in (("delta", pe.delta), ("gamma", pe.gamma), ("m", pe.m), ("k", pe.k),
                                                 ("mechanism", pe.mechanism)) if v is not None and not (
                        isinstance(v, (int, float)) and v == 0))
    line = f"PrivateSearchCV({space!r}, {grid!r}, oracle=oracle, epsilon={pe.epsilon!r}{extra})"
    return Suggestion(line=" ".join(line.split()), score=float(search.best_score_), best_params=search.best_params_,
                      search=search)
