"""Which fitted attributes of a scikit-learn model are its parameters, and which of them predictions use.

A path names an attribute: ``"coef_"``, a pipeline step's ``"standardscaler.mean_"``, a fitted
sub-estimator's ``"estimators_.0.coef_"``. :func:`fitted_float_params` lists every fitted float array
or scalar by path, :func:`prediction_params` those that ``predict``/``predict_proba``/
``decision_function``/``transform`` actually use (each is set to NaN in a copy: a changed output means
it is used). :data:`REFUSED` names the estimators whose parameters cannot be released as they are.
"""

from __future__ import annotations

import copy
import warnings

import numpy as np
from sklearn.base import BaseEstimator

__all__ = ["fitted_float_params", "prediction_params", "REFUSED", "estimators", "resolve", "assign", "class_path"]

_PREDICT_METHODS = ("predict", "predict_proba", "decision_function", "transform")

# Fitted attributes that are not learned parameters (the label set), never released.
_NOT_PARAMS = frozenset({"classes_"})

_UNIDENTIFIED = ("its fitted parameters are identified only up to a permutation (and sign or scale): two fits on "
                 "neighbouring data can swap them, so the sampled Δ̂ would be as large as the parameters")
_RECORDS = ("its fitted parameters are training records (support vectors, the data itself), whose number and "
            "identity change with every record")
#: scikit-learn estimators refused unless ``params=`` names what to release, with the reason.
REFUSED = {
    **{name: _UNIDENTIFIED for name in (
        "GaussianMixture", "BayesianGaussianMixture", "FastICA", "NMF", "MiniBatchNMF", "LatentDirichletAllocation",
        "DictionaryLearning", "MiniBatchDictionaryLearning", "SparsePCA", "MiniBatchSparsePCA", "FactorAnalysis",
        "KernelPCA", "MLPClassifier", "MLPRegressor", "BernoulliRBM", "BisectingKMeans")},
    **{name: _RECORDS for name in (
        "SVC", "NuSVC", "SVR", "NuSVR", "OneClassSVM", "KNeighborsClassifier", "KNeighborsRegressor",
        "RadiusNeighborsClassifier", "RadiusNeighborsRegressor", "NearestNeighbors", "KernelDensity",
        "LocalOutlierFactor")},
}


def class_path(obj) -> str:
    cls = obj if isinstance(obj, type) else type(obj)
    return f"{cls.__module__}:{cls.__qualname__}"


def _is_pipeline(obj) -> bool:
    from sklearn.pipeline import Pipeline

    return isinstance(obj, Pipeline)


def _children(est):
    """``(segment, sub-estimator)`` of a fitted estimator: a pipeline's steps, fitted sub-estimators."""
    if _is_pipeline(est):
        for name, step in est.steps:
            if step is not None and not isinstance(step, str):
                yield name, step
        return
    for key, value in vars(est).items():
        if key.startswith("_") or not key.endswith("_"):
            continue
        if isinstance(value, BaseEstimator):
            yield key, value
        elif isinstance(value, (list, tuple)) and value and all(isinstance(v, BaseEstimator) for v in value):
            for i, v in enumerate(value):
                yield f"{key}.{i}", v


def estimators(est, prefix: str = ""):
    """``(path prefix, estimator)`` for ``est`` and every fitted sub-estimator in it."""
    yield prefix, est
    for seg, child in _children(est):
        yield from estimators(child, f"{prefix}{seg}.")


def _is_float_param(value) -> bool:
    if isinstance(value, np.ndarray):
        return value.dtype.kind == "f" and value.size > 0
    return isinstance(value, (float, np.floating))


def fitted_float_params(model) -> dict:
    """Every fitted float array or float scalar of ``model`` and its sub-estimators, by path.

    A path is the attribute name (``"coef_"``), prefixed by a pipeline step's name or a fitted
    sub-estimator's attribute (``"standardscaler.mean_"``, ``"estimators_.0.coef_"``). Sorted by path.
    """
    out = {}
    for prefix, est in estimators(model):
        for key, value in vars(est).items():
            if key.startswith("_") or not key.endswith("_") or key in _NOT_PARAMS:
                continue
            if _is_float_param(value):
                out[prefix + key] = value
    return dict(sorted(out.items()))


def resolve(model, path: str):
    obj = model
    for seg in path.split("."):
        if _is_pipeline(obj) and seg in obj.named_steps:
            obj = obj.named_steps[seg]
        elif isinstance(obj, (list, tuple)) and seg.isdigit():
            obj = obj[int(seg)]
        else:
            obj = getattr(obj, seg)
    return obj


def assign(model, path: str, value) -> None:
    parent_path, _, name = path.rpartition(".")
    parent = resolve(model, parent_path) if parent_path else model
    setattr(parent, name, value)


def _outputs(model, X) -> dict:
    out = {}
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        for name in _PREDICT_METHODS:
            if not hasattr(model, name):
                continue
            try:
                out[name] = np.asarray(getattr(model, name)(X), dtype=np.float64)
            except Exception:  # a NaN parameter that makes a method raise is used by it
                out[name] = None
    return out


def _same(a: dict, b: dict) -> bool:
    for name in a.keys() | b.keys():
        u, v = a.get(name), b.get(name)
        if (u is None) != (v is None):
            return False
        if u is not None and (u.shape != v.shape or not np.array_equal(u, v, equal_nan=True)):
            return False
    return True


def prediction_params(model, X) -> list[str]:
    """The paths of ``model``'s fitted float parameters that its predictions on ``X`` use.

    Each is set to NaN in a copy of ``model``; it is used when ``predict``, ``predict_proba``,
    ``decision_function`` or ``transform`` then gives another output (or raises). The ``intercept_`` of
    an estimator with ``fit_intercept=False`` is a constant and is not released.
    """
    base = _outputs(model, X)
    fixed = {prefix + "intercept_" for prefix, est in estimators(model) if getattr(est, "fit_intercept", None) is False}
    used = []
    for path, value in fitted_float_params(model).items():
        if path in fixed:  # fit_intercept=False: a constant 0, nothing to release
            continue
        probe = copy.deepcopy(model)
        assign(probe, path, np.full_like(value, np.nan) if isinstance(value, np.ndarray) else float("nan"))
        if not _same(base, _outputs(probe, X)):
            used.append(path)
    return used


