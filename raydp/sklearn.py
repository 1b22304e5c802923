"""Any scikit-learn estimator, private in one line: :class:`PrivateEstimator`.

The fitted float parameters of an estimator (a linear model's ``coef_`` and ``intercept_``, a
pipeline's scaler statistics, k-means centres, ...) are a black-box function of the training data.
:class:`PrivateEstimator` samples their sensitivity from a public oracle (Algorithm 1), fits the
wrapped estimator once on the private data and releases those parameters with Sample-Then-Respond
(Algorithm 2): ``raydp.sample_then_respond``, so the ledger, the checks of a stored Δ̂ and the
(ε, δ, γ) statement are the ones every other release has. No sensitivity is derived by hand.

>>> import numpy as np
>>> from sklearn.linear_model import LogisticRegression
>>> from raydp import oracles
>>> from raydp.sklearn import PrivateEstimator
>>> rng = np.random.default_rng(0)
>>> def data(size):                                    # rows [x_1, x_2 | label]
...     y = rng.integers(0, 2, size)
...     return np.column_stack([rng.normal(y[:, None] - 0.5, 0.5, (size, 2)), y])
>>> public, private = data(400), data(200)
>>> model = PrivateEstimator(LogisticRegression(), oracle=oracles.bootstrap(public),
...                          epsilon=1.0, gamma=0.2, m=100, seed=0)
>>> model = model.fit(private[:, :2], private[:, 2])
>>> model.released_params_
['coef_', 'intercept_']
>>> model.release_.statement().startswith("(1, 0, 0.2")
True

What is released, and what is not
---------------------------------
Records are rows ``[X | y]`` (label last) for a supervised estimator, rows of ``X`` otherwise; the
oracle must draw records of that width. Before anything private is touched, the estimator is fitted
once on a *public* sample of n oracle records (the "skeleton"). Every fitted attribute of the released
model ``estimator_`` is either one of the released parameters (noised) or the skeleton's (public):
iteration counts, ``classes_``, unused statistics (``StandardScaler.var_``, ``LinearRegression.singular_``)
never come from the private data. By default the released parameters are the fitted float arrays (and
float scalars) that predictions use, found on the skeleton by setting each to NaN and watching
``predict``/``predict_proba``/``decision_function``/``transform`` change; ``params=`` (a list of
attribute paths such as ``"logisticregression.coef_"``, or a callable taking the fitted skeleton and
returning one) overrides that. A ``random_state`` left at None is fixed to 0, so that the fit is a
function of the data, as the sampler requires.

Parameters that are not identified
----------------------------------
Parameters that can permute or flip between two fits on neighbouring data would make Δ̂ as large as
the parameters themselves. raydp canonicalises the common ones against the skeleton's fit: k-means
centres (``KMeans``, ``MiniBatchKMeans``) are matched to the skeleton's by an optimal assignment,
principal axes (``PCA``, ``IncrementalPCA``, ``TruncatedSVD``) get the sign of the skeleton's.
Estimators whose parameters are unidentified in other ways (mixtures, ICA/NMF-like factorisations,
neural networks) or are training records themselves (kernel SVMs, nearest neighbours) are refused
unless ``params=`` names what to release. Tested: ``LogisticRegression`` (binary and multinomial),
``LinearSVC``, ``Ridge``, ``LinearRegression``, pipelines with ``StandardScaler``, ``KMeans``, ``PCA``.
"""

from __future__ import annotations

import copy
import hashlib
import math
import numbers
import warnings

import numpy as np
from sklearn.base import BaseEstimator, clone
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import check_is_fitted

from .errors import EstimateMismatchError, InvalidArgumentError, OracleError, TargetError
from .estimate import SensitivityEstimate
from .identity import check_reusable, content_fields, describe, difference
from .mechanisms import Gaussian, Laplace
from .validation import check_delta, check_epsilon
from .oracles import as_oracle, check_records
from .plan import plan as make_plan
from .release import sample_then_respond
from .sampler import estimate_sensitivity
from .store import Store

__all__ = ["PrivateEstimator", "EstimatorTarget", "fitted_float_params", "prediction_params", "REFUSED"]

# The public sample the skeleton is fitted on: a fixed stream, so the skeleton (and the references the
# canonicalisation aligns to) are a function of (estimator, oracle, n) alone, in every process.
_PUBLIC_SEED = 0x5EED_5C1E

# Methods whose outputs define "the parameters predictions use".
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


# ----------------------------------------------------------------------------- fitted attributes


def _class_path(obj) -> str:
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


def _estimators(est, prefix: str = ""):
    """``(path prefix, estimator)`` for ``est`` and every fitted sub-estimator in it."""
    yield prefix, est
    for seg, child in _children(est):
        yield from _estimators(child, f"{prefix}{seg}.")


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
    for prefix, est in _estimators(model):
        for key, value in vars(est).items():
            if key.startswith("_") or not key.endswith("_") or key in _NOT_PARAMS:
                continue
            if _is_float_param(value):
                out[prefix + key] = value
    return dict(sorted(out.items()))


def _resolve(model, path: str):
    obj = model
    for seg in path.split("."):
        if _is_pipeline(obj) and seg in obj.named_steps:
            obj = obj.named_steps[seg]
        elif isinstance(obj, (list, tuple)) and seg.isdigit():
            obj = obj[int(seg)]
        else:
            obj = getattr(obj, seg)
    return obj


def _assign(model, path: str, value) -> None:
    parent_path, _, name = path.rpartition(".")
    parent = _resolve(model, parent_path) if parent_path else model
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
    fixed = {prefix + "intercept_" for prefix, est in _estimators(model) if getattr(est, "fit_intercept", None) is False}
    used = []
    for path, value in fitted_float_params(model).items():
        if path in fixed:  # fit_intercept=False: a constant 0, nothing to release
            continue
        probe = copy.deepcopy(model)
        _assign(probe, path, np.full_like(value, np.nan) if isinstance(value, np.ndarray) else float("nan"))
        if not _same(base, _outputs(probe, X)):
            used.append(path)
    return used


# ----------------------------------------------------------------------------- canonical forms


def _canonical_kinds(model) -> dict:
    """``{path of the attribute: kind}`` for the parameters raydp canonicalises in ``model``."""
    from sklearn.cluster import KMeans, MiniBatchKMeans
    from sklearn.decomposition import PCA, IncrementalPCA, TruncatedSVD

    kinds = {}
    for prefix, est in _estimators(model):
        if isinstance(est, (KMeans, MiniBatchKMeans)):
            kinds[prefix + "cluster_centers_"] = "match-rows"
        elif isinstance(est, (PCA, IncrementalPCA, TruncatedSVD)):
            kinds[prefix + "components_"] = "match-signs"
    return kinds


def _canonicalise(model, references: dict, kinds: dict) -> None:
    """Align ``model``'s unidentified parameters to ``references`` (the skeleton's), in place."""
    from scipy.optimize import linear_sum_assignment

    for path, kind in kinds.items():
        value = np.asarray(_resolve(model, path), dtype=np.float64)
        ref = references[path]
        if value.shape != ref.shape:
            continue  # the shape check of EstimatorTarget reports it
        if kind == "match-rows":  # k-means centres: the assignment to the reference with least total distance
            cost = ((value[None, :, :] - ref[:, None, :]) ** 2).sum(axis=-1)
            _, order = linear_sum_assignment(cost)
            _assign(model, path, value[order].copy())
        else:  # principal axes: the sign that agrees with the reference axis
            signs = np.where(np.sum(value * ref, axis=1) < 0, -1.0, 1.0)
            _assign(model, path, value * signs[:, None])


# ----------------------------------------------------------------------------- the target


def _param_json(v):
    if isinstance(v, BaseEstimator):
        return _class_path(v)  # its own parameters are listed by get_params(deep=True)
    if isinstance(v, type):
        return {"class": _class_path(v), **content_fields(v)}
    if isinstance(v, dict):
        return {str(k): _param_json(x) for k, x in sorted(v.items(), key=lambda kv: str(kv[0]))}
    if isinstance(v, (list, tuple)):
        return [_param_json(x) for x in v]
    if isinstance(v, np.ndarray):
        return _param_json(v.tolist())
    if isinstance(v, np.generic):
        v = v.item()
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else repr(v)
    if callable(v):  # func=, score_func=, kernels: named by what they compute, not only by name
        name = f"{getattr(v, '__module__', '?')}:{getattr(v, '__qualname__', type(v).__qualname__)}"
        return {"callable": name, **content_fields(v)}
    return {"object": _class_path(v), **content_fields(v)}


def estimator_params(estimator) -> dict:
    """``estimator.get_params(deep=True)`` as JSON-able data, the same in every process."""
    return {k: _param_json(v) for k, v in sorted(estimator.get_params(deep=True).items())}


def _digest(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a, dtype=np.float64).tobytes()).hexdigest()[:16]


class EstimatorTarget:
    """The target ``records -> released parameters`` of a scikit-learn estimator.

    ``database`` holds rows ``[X | y]`` (``supervised``) or rows of X; the estimator is cloned, fitted
    (warnings silenced), canonicalised and the parameters at ``params`` (with the ``shapes`` the
    skeleton gave them) are returned as one float vector. A fit that raises, or parameters of another
    shape (e.g. a class missing from the database), raise :class:`~raydp.errors.TargetError`: the
    sampler counts that pair as G = +∞. Picklable (Ray ships it), with a stable :meth:`identity`.
    """

    def __init__(self, estimator, *, n_features: int, supervised: bool, integer_labels: bool, params, shapes,
                 references=None, kinds=None, classes=None):
        self.estimator = estimator
        # the public fit's classes: a database with another label is a failed fit, never a relabelled one
        self.classes = None if classes is None else np.asarray(classes, dtype=np.float64)
        self.n_features = int(n_features)
        self.supervised = bool(supervised)
        self.integer_labels = bool(integer_labels)
        self.params = list(params)
        self.shapes = [tuple(int(s) for s in shape) for shape in shapes]
        self.references = {k: np.asarray(v, dtype=np.float64) for k, v in (references or {}).items()}
        self.kinds = dict(sorted((kinds or {}).items()))
        missing = sorted(set(self.kinds) - set(self.references))
        if missing:
            raise TargetError(f"canonical forms {missing} need a reference (the public fit's values)")

    @property
    def output_dim(self) -> int:
        return int(sum(math.prod(s) for s in self.shapes))

    def split(self, database):
        """``(X, y)`` of a database of records (``y`` None when unsupervised)."""
        db = np.asarray(database, dtype=np.float64)
        if db.ndim == 1:
            db = db[:, None]
        if not np.all(np.isfinite(db)):  # with a ledger, the private data's NaN is refused only here
            raise TargetError("records must be finite numbers (a missing value, NaN or inf)")
        width = self.n_features + int(self.supervised)
        if db.ndim != 2 or db.shape[1] != width:
            raise TargetError(f"records must have {width} columns ({self.n_features} features"
                              f"{' and the label last' if self.supervised else ''}), got shape {db.shape}")
        X = db[:, : self.n_features]
        if not self.supervised:
            return X, None
        y = db[:, self.n_features]
        if self.classes is not None and not np.all(np.isin(y, self.classes)):
            raise TargetError("a class label outside the public fit's classes")
        if self.integer_labels:
            if not np.all(y == np.round(y)):
                raise TargetError("class labels (the last column) must be whole numbers")
            y = y.astype(np.int64)
        return X, y

    def fit(self, database):
        """The estimator fitted on ``database`` and canonicalised."""
        X, y = self.split(database)
        model = clone(self.estimator)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(X) if y is None else model.fit(X, y)
        _canonicalise(model, self.references, self.kinds)
        return model

    def vector(self, model) -> np.ndarray:
        """The released parameters of a fitted ``model``, flattened in path order."""
        parts = []
        for path, shape in zip(self.params, self.shapes):
            value = np.asarray(_resolve(model, path), dtype=np.float64)
            if value.shape != shape:
                raise TargetError(f"the fit gave {path} of shape {value.shape}, expected {shape} "
                                  "(as on the public sample; a class missing from this database?)")
            parts.append(value.ravel())
        return np.concatenate(parts)

    def __call__(self, database) -> np.ndarray:
        return self.vector(self.fit(database))

    def identity(self) -> dict:
        import sklearn

        return {"name": "sklearn:" + _class_path(self.estimator).replace(":", "."),
                "params": {"estimator": estimator_params(self.estimator), "released": self.params,
                           "shapes": [list(s) for s in self.shapes], "supervised": self.supervised,
                           "integer_labels": self.integer_labels, "n_features": self.n_features,
                           "canonical": {k: {"kind": v, "reference_sha256": _digest(self.references[k])}
                                         for k, v in sorted(self.kinds.items())},
                           "sklearn": sklearn.__version__,
                           **({} if self.classes is None else {"classes": self.classes.tolist()})}}

    def __repr__(self) -> str:
        return f"EstimatorTarget({self.estimator!r}, released={self.params})"


# ----------------------------------------------------------------------------- input checks


def _typed(obj) -> bool:
    """A numpy array of a numeric dtype, or a pandas object whose columns all are (nullable ones too)."""
    if isinstance(obj, np.ndarray):
        return obj.dtype.kind in "biuf"
    if (type(obj).__module__ or "").startswith("pandas") and hasattr(obj, "dtypes"):
        from pandas.api.types import is_numeric_dtype

        dtypes = obj.dtypes if hasattr(obj, "columns") else [obj.dtype]
        return all(is_numeric_dtype(d) for d in dtypes)
    return False


def _schema_only(obj, what: str, hint: str) -> np.ndarray:
    """``obj`` as float64 from its declared types alone: nothing about a value is checked or reported.

    With a ledger (:meth:`PrivateEstimator.fit`) a numpy array must have a numeric dtype and a pandas
    DataFrame or Series numeric columns (nullable ``Int64``/``Float64`` too: a missing cell becomes NaN,
    which the charged release then refuses). A list, an object column or an object array would have to
    be looked at cell by cell to be converted — a free probe of the private values — and is refused
    here for its type, whatever it holds.
    """
    module = type(obj).__module__ or ""
    if module.startswith("pandas"):
        from pandas.api.types import is_numeric_dtype

        dtypes = obj.dtypes.items() if hasattr(obj, "columns") else [(getattr(obj, "name", what), obj.dtype)]
        bad = [f"{name} ({dtype})" for name, dtype in dtypes if not is_numeric_dtype(dtype)]
        if bad:
            raise InvalidArgumentError(f"{hint}; with a ledger only numeric column types are accepted (their values "
                                       f"are checked inside the charged release), got {', '.join(map(str, bad))}")
        return obj.to_numpy(dtype=np.float64, na_value=np.nan)
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind not in "biuf":
            raise InvalidArgumentError(f"{hint}; with a ledger the array's dtype must be numeric (its values are "
                                       f"checked inside the charged release), got dtype {obj.dtype}")
        return obj.astype(np.float64)
    raise InvalidArgumentError(f"with a ledger, {what} must be a numpy array or a pandas DataFrame/Series of a "
                               f"numeric dtype, so that it is checked by its type and never by its values; got "
                               f"{type(obj).__name__} (convert it with numpy.asarray(..., dtype=float) first)")


def _as_matrix(X, what: str, min_rows: int = 2, values: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
    """``X`` as a 2-D float64 array, and its column names (a DataFrame's). No message quotes the data.

    ``values=False`` (with a ledger) reads only the type and shape, never a value (:func:`_schema_only`):
    any check whose answer depends on the private values happens after the charge (see
    :meth:`PrivateEstimator.fit`).
    """
    try:
        import scipy.sparse as sp

        if sp.issparse(X):
            raise InvalidArgumentError(f"{what} is a sparse matrix; raydp.sklearn needs a dense numeric array "
                                       f"({what}.toarray())")
    except ImportError:  # pragma: no cover - scipy is a dependency
        pass
    names = None
    columns = getattr(X, "columns", None)
    if columns is not None and hasattr(X, "dtypes"):
        names = np.asarray([str(c) for c in columns], dtype=object)
    hint = (f"{what} must be numeric: encode text, categorical or date columns as numbers first "
            "(e.g. with an encoder fitted on public data)")
    if values and not _typed(X):
        try:
            raw = np.asarray(X)
        except Exception:
            raise InvalidArgumentError(f"{what} must be a 2-D array of numbers (rows of unequal length?)") from None
        if raw.dtype.kind == "O":
            if not all(isinstance(v, numbers.Real) for v in raw.flat):
                raise InvalidArgumentError(hint)
        elif raw.dtype.kind not in "biuf":
            raise InvalidArgumentError(f"{hint}; got dtype {raw.dtype}")
        arr = raw.astype(np.float64)
    else:
        arr = _schema_only(X, what, hint)
    if arr.ndim != 2:
        raise InvalidArgumentError(f"{what} must be 2-D (n_samples, n_features), got {arr.ndim}-D; "
                                   "reshape a single feature with X.reshape(-1, 1)")
    if arr.shape[0] < min_rows or arr.shape[1] < 1:
        raise InvalidArgumentError(f"{what} must have at least {min_rows} row{'s' * (min_rows > 1)} and 1 column, "
                                   f"got shape {arr.shape}")
    if values and not np.all(np.isfinite(arr)):
        raise InvalidArgumentError(f"{what} contains NaN or infinite values; impute or drop them first")
    # C order whatever came in (a DataFrame's block is column-major): BLAS then sums in the same order, so
    # the same numbers give the same fit and predictions, bit for bit, from an array or a frame.
    return np.ascontiguousarray(arr), names


def _numeric(values) -> bool:
    return np.asarray(values).dtype.kind in "biuf"


def _as_labels(y, n: int, values: bool = True) -> np.ndarray:
    """``y`` as a 1-D float64 array of ``n`` entries; ``values=False``: by its type alone (see :func:`_as_matrix`)."""
    hint = "y must be numeric: records are rows [X | y] of numbers, so encode class labels as numbers first (e.g. 0, 1, ...)"
    if values and not _typed(y):
        try:
            raw = np.asarray(y)
        except Exception:
            raise InvalidArgumentError("y must be a 1-D array of numbers") from None
        if raw.dtype.kind == "O" and all(isinstance(v, numbers.Real) for v in raw.flat):
            raw = raw.astype(np.float64)
        if raw.dtype.kind not in "biuf":
            raise InvalidArgumentError(hint)
    else:
        raw = _schema_only(y, "y", hint)
    if raw.ndim == 2 and raw.shape[1] == 1:
        raw = raw[:, 0]
    if raw.ndim != 1:
        raise InvalidArgumentError(f"y must be 1-D (one target per row of X), got shape {raw.shape}")
    if raw.shape[0] != n:
        raise InvalidArgumentError(f"y has {raw.shape[0]} entries but X has {n} rows")
    arr = raw.astype(np.float64)
    if values and not np.all(np.isfinite(arr)):
        raise InvalidArgumentError("y contains NaN or infinite values")
    return arr


def _is_supervised(estimator) -> bool:
    try:
        from sklearn.utils import get_tags

        tags = get_tags(estimator)
        return bool(tags.target_tags.required) or tags.estimator_type in ("classifier", "regressor")
    except ImportError:  # pragma: no cover - scikit-learn < 1.6
        from sklearn.base import is_classifier, is_regressor

        return is_classifier(estimator) or is_regressor(estimator)


def _is_classifier(estimator) -> bool:
    from sklearn.base import is_classifier

    return bool(is_classifier(estimator))


def _prepare(estimator):
    """An unfitted clone of ``estimator`` whose every ``random_state`` that was None is 0."""
    est = clone(estimator)
    params = est.get_params(deep=True)
    fixes, bad = {}, []
    for key, value in params.items():
        if key == "random_state" or key.endswith("__random_state"):
            if value is None:
                fixes[key] = 0
            elif isinstance(value, (np.random.RandomState, np.random.Generator)):
                bad.append(key)
    if bad:
        raise InvalidArgumentError(f"{', '.join(sorted(bad))} is a random generator object; give an integer "
                                   "(or None, fixed to 0) so that the fit is a function of the data alone")
    if fixes:
        est.set_params(**fixes)
    return est


def _estimator_has(attr: str):
    def check(self):
        getattr(self.estimator_ if hasattr(self, "estimator_") else self.estimator, attr)
        return True

    return check


# ----------------------------------------------------------------------------- the meta-estimator


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
    epsilon, delta : privacy of the release. ``delta=0``: Laplace (ℓ1 Δ̂), ε-DP on all but a γ
        fraction of neighbours; ``delta > 0``: Gaussian (ℓ2 Δ̂, analytic calibration), (ε, δ)-DP.
    gamma : the γ of random DP (with ``m``/``k``: any plan :func:`raydp.plan` accepts).
    seed : the sampler's seed (None: fresh, recorded in ``estimate_``; with a ``store`` that holds a
        run: that run's seed).
    mechanism : a raydp Laplace or Gaussian mechanism to use instead; its (ε, δ) must equal
        ``epsilon``/``delta``.
    params : None (the float parameters predictions use), a list of attribute paths, or a callable
        ``fitted_public_model -> list of paths``.
    estimate : a :class:`~raydp.estimate.SensitivityEstimate` to reuse (another fit's ``estimate_``,
        or ``raydp.load_estimate``); it must match the estimator, oracle, n, norm and plan.
    m, k, backend, store, progress, block_size, pair_timeout, strict : the sampler's options
        (:func:`raydp.estimate_sensitivity`). ``store`` reuses (or resumes) the Δ̂ stored there for the
        same estimator parameters, oracle and n (and scikit-learn version, part of the target's
        identity), and refuses one made for anything else.
    ledger, ledger_label : charge the release to a :class:`raydp.Ledger` (refused when over budget).

    Attributes
    ----------
    estimator_ : the released model (the released parameters; every other fitted attribute from a
        fit on a public oracle sample).
    estimate_ : the :class:`~raydp.estimate.SensitivityEstimate` used.
    release_ : the :class:`~raydp.release.Release` (its ``value`` is the released parameter vector,
        its ``statement()`` the (ε, δ, γ) guarantee).
    released_params_ : the released attribute paths, in the order of ``release_.value``.
    target_ : the :class:`EstimatorTarget` that was sampled (reusable with ``raydp.estimate_sensitivity``).
    n_features_in_, feature_names_in_ (a DataFrame's columns), classes_ (classifiers).
    """

    def __init__(self, estimator, *, oracle, epsilon, delta=0.0, gamma, seed=None, mechanism=None, params=None,
                 estimate=None, m=None, k=None, backend="auto", store=None, progress=False, block_size=None,
                 pair_timeout=None, strict=False, ledger=None, ledger_label=None):
        self.estimator = estimator
        self.oracle = oracle
        self.epsilon = epsilon
        self.delta = delta
        self.gamma = gamma
        self.seed = seed
        self.mechanism = mechanism
        self.params = params
        self.estimate = estimate
        self.m = m
        self.k = k
        self.backend = backend
        self.store = store
        self.progress = progress
        self.block_size = block_size
        self.pair_timeout = pair_timeout
        self.strict = strict
        self.ledger = ledger
        self.ledger_label = ledger_label

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

    def _mechanism(self):
        delta = check_delta(self.delta)
        if self.mechanism is None:
            if delta == 0:
                return Laplace(self.epsilon)
            return Gaussian(self.epsilon, delta, calibration="analytic")
        mech = self.mechanism
        for attr in ("embed", "release", "privacy", "norm", "distance"):
            if not hasattr(mech, attr):
                raise InvalidArgumentError(f"mechanism must be a raydp mechanism (missing .{attr}), got {mech!r}")
        if not getattr(mech, "coordinatewise_noise", False):
            raise InvalidArgumentError(f"mechanism must add noise to every coordinate of a vector (Laplace, Gaussian); "
                                       f"{type(mech).__name__} releases something else")
        eps, dlt = mech.privacy()
        if (float(eps), float(dlt)) != (check_epsilon(self.epsilon), delta):
            raise InvalidArgumentError(f"mechanism has (ε, δ) = ({eps:g}, {dlt:g}) but epsilon={self.epsilon!r}, "
                                       f"delta={delta!r} were given; make them agree")
        return mech

    def _public_sample(self, oracle, n: int, d: int, supervised: bool) -> np.ndarray:
        try:
            records = oracle.sample(np.random.default_rng(_PUBLIC_SEED), n)
        except Exception as exc:  # the oracle is public: its message may be shown
            raise OracleError(f"the oracle raised {type(exc).__name__} drawing {n} records: {exc}") from None
        records = check_records(records, n)
        if records.ndim == 1:
            records = records[:, None]
        width = d + int(supervised)
        if records.ndim != 2 or records.shape[1] != width:
            got = f"{records.shape[1]} columns" if records.ndim == 2 else f"records of shape {records.shape[1:]}"
            need = (f"rows [X | y] with the label last: {d} features + 1 label = {width} columns" if supervised
                    else f"rows of X: {d} columns")
            raise OracleError(f"the oracle draws {got}, but X has {d} features; its records must be {need}")
        return records

    def _checked_estimate(self, oracle):
        est = self.estimate
        if not isinstance(est, SensitivityEstimate):
            raise InvalidArgumentError("estimate must be a SensitivityEstimate (another fit's estimate_, or "
                                       f"raydp.load_estimate), got {type(est).__name__}")
        if self.store is not None:
            raise InvalidArgumentError("give estimate= (a Δ̂ in memory) or store= (a stored Δ̂), not both")
        check_reusable(describe(oracle), "oracle", EstimateMismatchError, "a precomputed estimate")
        problems = []
        if est.oracle != describe(oracle):
            problems.append(f"it was computed for oracle {difference(est.oracle, describe(oracle))}")
        wanted = make_plan(gamma=self.gamma, m=self.m, k=self.k)
        if (wanted.m, wanted.k) != (est.plan.m, est.plan.k) or not math.isclose(wanted.gamma, est.plan.gamma):
            problems.append(f"it was computed with plan (m={est.plan.m}, k={est.plan.k}, γ={est.plan.gamma:g}), "
                            f"not (m={wanted.m}, k={wanted.k}, γ={wanted.gamma:g})")
        if self.seed is not None and self.seed != est.seed:
            problems.append(f"it was computed with seed {est.seed}, not {self.seed}")
        if problems:
            raise EstimateMismatchError("estimate does not fit this estimator: " + "; ".join(problems))
        return est

    def _sample(self, target, oracle, n, mechanism):
        seed, store = self.seed, self.store
        if store is not None and seed is None:
            st = Store.open(store)
            if st.exists("meta.json"):
                seed = st.load()[0].seed  # reuse the stored run (its target, oracle and n are checked)
        return estimate_sensitivity(target, oracle, n, mechanism=mechanism, gamma=self.gamma, m=self.m, k=self.k,
                                    seed=seed, block_size=self.block_size, backend=self.backend, store=store,
                                    resume=store is not None, strict=self.strict, progress=self.progress,
                                    pair_timeout=self.pair_timeout)

    # ---- fit -----------------------------------------------------------------------------
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
        estimator = self._checked_estimator()
        name = type(estimator).__name__
        # Checks whose answer depends on the private *values* (NaN, unknown labels) are made here only
        # without a ledger. With one, they would be free probes of the data: they happen inside the
        # charged private evaluation instead (the fit fails there, counted, its reason withheld).
        values = self.ledger is None
        X, names = _as_matrix(X, "X", values=values)
        n, d = X.shape
        supervised = _is_supervised(estimator)
        if supervised and y is None:
            raise InvalidArgumentError(f"{name} requires y to be passed, but the target y is None: call fit(X, y) "
                                       "(records are rows [X | y], label last)")
        if not supervised and y is not None:
            raise InvalidArgumentError(f"{name} is unsupervised: call fit(X) without y (records are rows of X)")
        y = _as_labels(y, n, values=values) if supervised else None
        oracle = as_oracle(self.oracle)
        mechanism = self._mechanism()
        template = _prepare(estimator)

        # The skeleton: one fit on public oracle records. Everything not released comes from it.
        public = self._public_sample(oracle, n, d, supervised)
        X_pub = public[:, :d]
        classifier = _is_classifier(template)
        integer_labels = bool(supervised and classifier and np.all(public[:, d] == np.round(public[:, d])))
        probe = EstimatorTarget(template, n_features=d, supervised=supervised, integer_labels=integer_labels,
                                params=[], shapes=[])
        try:
            skeleton = probe.fit(public)
        except Exception as exc:  # public data: the message may be shown
            raise TargetError(f"{name} could not be fitted on a public sample of n={n} oracle records "
                              f"({type(exc).__name__}: {exc})") from None
        paths = self._released_paths(skeleton, X_pub, name)
        kinds = _canonical_kinds(skeleton)
        references = {p: np.asarray(_resolve(skeleton, p), dtype=np.float64) for p in kinds}
        shapes = [np.shape(_resolve(skeleton, p)) for p in paths]
        classes = getattr(skeleton, "classes_", None) if classifier else None
        target = EstimatorTarget(template, n_features=d, supervised=supervised, integer_labels=integer_labels,
                                 params=paths, shapes=shapes, references=references, kinds=kinds,
                                 classes=None if classes is None or not _numeric(classes) else classes)
        if supervised and classifier and values:
            if integer_labels and not np.all(y == np.round(y)):
                raise InvalidArgumentError("y must hold whole-number class labels, like the oracle's")
            if classes is not None and not np.all(np.isin(y, np.asarray(classes, dtype=np.float64))):
                raise InvalidArgumentError(f"y holds class labels the oracle never draws (the oracle's: "
                                           f"{np.asarray(classes).tolist()}); the released model knows only those")

        est = self._checked_estimate(oracle) if self.estimate is not None else self._sample(target, oracle, n, mechanism)
        records = np.column_stack([X, y]) if supervised else X
        release = sample_then_respond(records, target, mechanism, estimate=est, ledger=self.ledger,
                                      ledger_label=self.ledger_label)
        model = copy.deepcopy(skeleton)
        values = np.asarray(release.value, dtype=np.float64)
        at = 0
        for path, shape in zip(paths, shapes):
            size = math.prod(shape)
            part = values[at: at + size]
            at += size
            original = _resolve(skeleton, path)
            _assign(model, path, part.reshape(shape).copy() if isinstance(original, np.ndarray) else float(part[0]))

        self.estimator_ = model
        self.estimate_ = est
        self.release_ = release
        self.released_params_ = list(paths)
        self.target_ = target
        self.n_features_in_ = d
        if names is not None:
            self.feature_names_in_ = names
        elif hasattr(self, "feature_names_in_"):
            del self.feature_names_in_
        if classes is not None:
            self.classes_ = classes
        return self

    def _released_paths(self, skeleton, X_pub, name: str) -> list[str]:
        floats = fitted_float_params(skeleton)
        if self.params is None:
            for _, sub in _estimators(skeleton):
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
        check_is_fitted(self)
        arr, names = _as_matrix(X, "X", min_rows=1)
        if arr.shape[1] != self.n_features_in_:
            raise InvalidArgumentError(f"X has {arr.shape[1]} features, the model was fitted with {self.n_features_in_}")
        ours = getattr(self, "feature_names_in_", None)
        if names is not None and ours is not None and list(names) != list(ours):
            raise InvalidArgumentError("X's columns differ from (or are in another order than) those it was fitted with")
        return arr

    @available_if(_estimator_has("predict"))
    def predict(self, X):
        """Predictions of the released model."""
        X = self._X(X)
        return self.estimator_.predict(X)

    @available_if(_estimator_has("predict_proba"))
    def predict_proba(self, X):
        X = self._X(X)
        return self.estimator_.predict_proba(X)

    @available_if(_estimator_has("predict_log_proba"))
    def predict_log_proba(self, X):
        X = self._X(X)
        return self.estimator_.predict_log_proba(X)

    @available_if(_estimator_has("decision_function"))
    def decision_function(self, X):
        X = self._X(X)
        return self.estimator_.decision_function(X)

    @available_if(_estimator_has("transform"))
    def transform(self, X):
        X = self._X(X)
        return self.estimator_.transform(X)

    @available_if(_estimator_has("score"))
    def score(self, X, y=None):
        """The released model's ``score`` (accuracy for classifiers, R² for regressors)."""
        X = self._X(X)
        if y is None:
            return self.estimator_.score(X)
        return self.estimator_.score(X, _as_labels(y, X.shape[0]))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        from sklearn.utils import get_tags

        inner = get_tags(self.estimator)
        tags.estimator_type = inner.estimator_type
        tags.classifier_tags = inner.classifier_tags
        tags.regressor_tags = inner.regressor_tags
        tags.transformer_tags = inner.transformer_tags
        tags.target_tags.required = _is_supervised(self.estimator)
        tags.non_deterministic = True
        tags.input_tags.sparse = False
        tags.input_tags.allow_nan = False
        return tags
