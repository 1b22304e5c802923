"""The target a scikit-learn estimator becomes: records in, released parameter vector out."""

from __future__ import annotations

import hashlib
import math
import warnings

import numpy as np
from sklearn.base import BaseEstimator, clone

from ..errors import TargetError
from ..identity import content_fields
from .canonical import canonicalise
from .fast import fast_form
from .params import assign, class_path, resolve
from .public import frozen_digest, is_frozen

__all__ = ["EstimatorTarget", "estimator_params"]


def _param_json(v):
    if is_frozen(v):  # fitted on public records: named by its fitted state too, not only its class
        return {"frozen": class_path(v.estimator), "fitted_sha256": frozen_digest(v)}
    if isinstance(v, BaseEstimator):  # its parameters are listed by get_params(deep=True); its class by content
        return {"class": class_path(v), **content_fields(type(v))}
    if isinstance(v, type):
        return {"class": class_path(v), **content_fields(v)}
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
    return {"object": class_path(v), **content_fields(v)}


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

    Linear and logistic models (alone or behind public steps) also have a vectorised form, ``batch``
    (and ``pair_batch`` for the logistic model), that fits a whole block of databases at once with the
    parameters the fit releases, to the tolerance :mod:`raydp.sklearn.fast` states; a binary logistic
    model's released function is then the exact minimiser of scikit-learn's objective (``identity()``
    says so). Other targets have neither attribute.
    """

    def __init__(self, estimator, *, n_features: int, supervised: bool, integer_labels: bool, params, shapes,
                 references=None, kinds=None, classes=None, start=None):
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
        # where the exact logistic solve starts (the public fit's coefficients then intercept); the result is
        # the minimiser whatever the start, to rounding (raydp.sklearn.fast)
        self.start = None if start is None else np.asarray(start, dtype=np.float64).ravel().copy()
        self._fast = fast_form(estimator, params=self.params, shapes=self.shapes, supervised=self.supervised,
                               classes=self.classes, kinds=self.kinds)

    # ---- the vectorised forms (raydp.sklearn.fast): attributes only where the model has one -------------
    @property
    def batch(self):
        """``batch(databases) -> (B, output_dim)``: every database of a stack fitted at once."""
        if getattr(self, "_fast", None) is None:
            raise AttributeError("batch")
        return self._batch

    @property
    def pair_batch(self):
        """``pair_batch(D, D′) -> (outputs of D, outputs of D′)``: D′ warm-started from D (logistic model)."""
        if getattr(self, "_fast", None) is None or self._fast.kind != "logistic":
            raise AttributeError("pair_batch")
        return self._pair_batch

    def _stack(self, databases) -> tuple[np.ndarray, np.ndarray]:
        """Features (B, n, p) and labels (B, n) of a stack, checked as :meth:`split` checks one database."""
        db = np.asarray(databases, dtype=np.float64)
        width = self.n_features + 1
        if db.ndim != 3 or db.shape[2] != width or db.shape[1] < 1:
            raise TargetError(f"a stack of databases of shape (B, n, {width}) was expected, got {db.shape}")
        if not np.all(np.isfinite(db)):
            raise TargetError("records must be finite numbers")
        y = db[:, :, self.n_features]
        if self.classes is not None and not np.all(np.isin(y, self.classes)):
            raise TargetError("a class label outside the public fit's classes")
        if self.integer_labels and not np.all(y == np.round(y)):
            raise TargetError("class labels (the last column) must be whole numbers")
        return self._fast.features(db[:, :, : self.n_features]), y

    def _batch(self, databases) -> np.ndarray:
        fast = self._fast
        X, y = self._stack(databases)
        if fast.kind == "logistic":
            w, b, ok, _ = fast.logistic(X, (y == fast.classes[1]).astype(np.float64), self.start)
            out = fast.vectors(w, b)
            out[~ok] = np.nan  # a class missing, or no convergence: the pair fails, as its fit does
            return out
        w, b, ok = fast.linear(X, y)
        out = fast.vectors(w, b)
        for i in np.flatnonzero(~ok):  # ill-conditioned: scikit-learn's own fit, the released function
            out[i] = self(np.asarray(databases)[i])
        return out

    def _pair_batch(self, d, d_prime) -> tuple[np.ndarray, np.ndarray]:
        fast = self._fast
        Xa, ya = self._stack(d)
        Xb, yb = self._stack(d_prime)
        pos = fast.classes[1]
        w, b, ok, warm = fast.logistic(Xa, (ya == pos).astype(np.float64), self.start)
        w2, b2, ok2 = fast.logistic_from(Xb, (yb == pos).astype(np.float64), warm, ok)
        if not ok.all():  # D′ of a pair whose D failed: from its own cold start, as __call__ would
            bad = np.flatnonzero(~ok)
            w3, b3, ok3, _ = fast.logistic(Xb[bad], (yb[bad] == pos).astype(np.float64), self.start)
            w2[bad], b2[bad], ok2[bad] = w3, b3, ok3
        a, c = fast.vectors(w, b), fast.vectors(w2, b2)
        a[~ok] = np.nan
        c[~ok2] = np.nan
        return a, c

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
        """The estimator fitted on ``database`` and canonicalised (a binary logistic model with a fast form:
        its released parameters set to the exact minimiser, :meth:`__call__`)."""
        X, y = self.split(database)
        model = clone(self.estimator)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(X) if y is None else model.fit(X, y)
        canonicalise(model, self.references, self.kinds)
        if self._exact():
            value, at = self._exact_vector(database), 0
            for path, shape in zip(self.params, self.shapes):
                size = math.prod(shape)
                assign(model, path, value[at: at + size].reshape(shape).copy())
                at += size
        return model

    def _exact(self) -> bool:
        fast = getattr(self, "_fast", None)
        return fast is not None and fast.kind == "logistic"

    def _exact_vector(self, database) -> np.ndarray:
        """The released parameters of a binary logistic model: the exact minimiser (raydp.sklearn.fast)."""
        db = np.asarray(database, dtype=np.float64)
        X, y = self.split(db)  # the checks of one database, with their messages
        if np.unique(y).size < 2:
            raise TargetError("the database holds a single class; a classifier needs both of the public fit's classes")
        out = self._batch(db[None])[0]
        if not np.all(np.isfinite(out)):
            raise TargetError("the logistic regression did not converge on this database")
        return out

    def vector(self, model) -> np.ndarray:
        """The released parameters of a fitted ``model``, flattened in path order."""
        parts = []
        for path, shape in zip(self.params, self.shapes):
            value = np.asarray(resolve(model, path), dtype=np.float64)
            if value.shape != shape:
                raise TargetError(f"the fit gave {path} of shape {value.shape}, expected {shape} "
                                  "(as on the public sample; a class missing from this database?)")
            parts.append(value.ravel())
        return np.concatenate(parts)

    def __call__(self, database) -> np.ndarray:
        if self._exact():
            return self._exact_vector(database)
        return self.vector(self.fit(database))

    def identity(self) -> dict:
        import sklearn

        return {"name": "sklearn:" + class_path(self.estimator).replace(":", "."),
                "params": {"estimator": estimator_params(self.estimator),
                           # the class by content (its methods, class attributes, bases; a library's by name and
                           # version): a class redefined or edited since Δ̂ was sampled is another target
                           "class": content_fields(type(self.estimator)), "released": self.params,
                           "shapes": [list(s) for s in self.shapes], "supervised": self.supervised,
                           "integer_labels": self.integer_labels, "n_features": self.n_features,
                           **({"solver": self._fast.identity()} if self._exact() else {}),
                           "canonical": {k: {"kind": v, "reference_sha256": _digest(self.references[k])}
                                         for k, v in sorted(self.kinds.items())},
                           "sklearn": sklearn.__version__,
                           **({} if self.classes is None else {"classes": self.classes.tolist()})}}

    def __repr__(self) -> str:
        return f"EstimatorTarget({self.estimator!r}, released={self.params})"


