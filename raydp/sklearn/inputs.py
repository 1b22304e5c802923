"""Input checks of :class:`~raydp.sklearn.PrivateEstimator`: X, y and the estimator itself.

No message quotes the data. With a ledger, X and y are converted by their declared types alone
(:func:`schema_only`): a check whose answer depends on the private values would be a free probe.
"""

from __future__ import annotations

import numbers

import numpy as np
from sklearn.base import clone

from ..errors import InvalidArgumentError

__all__ = ["as_matrix", "as_labels", "is_supervised", "is_classifier", "prepare", "numeric"]


def typed(obj) -> bool:
    """A numpy array of a numeric dtype, or a pandas object whose columns all are (nullable ones too)."""
    if isinstance(obj, np.ndarray):
        return obj.dtype.kind in "biuf"
    if (type(obj).__module__ or "").startswith("pandas") and hasattr(obj, "dtypes"):
        from pandas.api.types import is_numeric_dtype

        dtypes = obj.dtypes if hasattr(obj, "columns") else [obj.dtype]
        return all(is_numeric_dtype(d) for d in dtypes)
    return False


def schema_only(obj, what: str, hint: str) -> np.ndarray:
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


def as_matrix(X, what: str, min_rows: int = 2, values: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
    """``X`` as a 2-D float64 array, and its column names (a DataFrame's). No message quotes the data.

    ``values=False`` (with a ledger) reads only the type and shape, never a value (:func:`schema_only`):
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
    if values and not typed(X):
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
        arr = schema_only(X, what, hint)
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


def numeric(values) -> bool:
    return np.asarray(values).dtype.kind in "biuf"


def as_labels(y, n: int, values: bool = True) -> np.ndarray:
    """``y`` as a 1-D float64 array of ``n`` entries; ``values=False``: by its type alone (see :func:`as_matrix`)."""
    hint = "y must be numeric: records are rows [X | y] of numbers, so encode class labels as numbers first (e.g. 0, 1, ...)"
    if values and not typed(y):
        try:
            raw = np.asarray(y)
        except Exception:
            raise InvalidArgumentError("y must be a 1-D array of numbers") from None
        if raw.dtype.kind == "O" and all(isinstance(v, numbers.Real) for v in raw.flat):
            raw = raw.astype(np.float64)
        if raw.dtype.kind not in "biuf":
            raise InvalidArgumentError(hint)
    else:
        raw = schema_only(y, "y", hint)
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


def is_supervised(estimator) -> bool:
    try:
        from sklearn.utils import get_tags

        tags = get_tags(estimator)
        return bool(tags.target_tags.required) or tags.estimator_type in ("classifier", "regressor")
    except ImportError:  # pragma: no cover - scikit-learn < 1.6
        from sklearn.base import is_classifier, is_regressor

        return is_classifier(estimator) or is_regressor(estimator)


def is_classifier(estimator) -> bool:
    from sklearn.base import is_classifier

    return bool(is_classifier(estimator))


def prepare(estimator):
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


