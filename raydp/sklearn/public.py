"""Pipeline steps fitted on public records and frozen: preprocessing whose statistics need no privacy.

A scaler's ``mean_`` of a feature measured in thousands (a body mass in grams) is as sensitive as the
feature: released with noise of its own sensitivity, it drowns the model behind it (on four raw
features of the bundled breast-cancer data, ℓ2 Δ̂ ≈ 29 and accuracy below the majority class at
ε = 1). Such statistics can be fitted on the public oracle's records instead, where they cost no
privacy: then only the parameters of the remaining steps are sampled and released, on features
already on a public scale.

``public_steps="auto"`` (the default) fits the leading steps of a :class:`~sklearn.pipeline.Pipeline`
that are preprocessing of a kind listed in :data:`PUBLIC_BY_DEFAULT` (scalers, encoders, imputers,
fixed feature maps); a list of step names chooses them (a PCA may be public only when named);
``None`` fits every step on the private data and releases its parameters.
A public step is fitted once, on public records drawn with a fixed seed, and wrapped in
:class:`sklearn.frozen.FrozenEstimator`: every evaluation of the target, and the released model,
transform with the same public statistics. The run's identity carries a digest of the frozen
statistics, so a Δ̂ sampled with one public fit is never reused with another.
"""

from __future__ import annotations

import hashlib

import numpy as np
from sklearn.base import clone

from ..errors import InvalidArgumentError, TargetError

__all__ = ["PUBLIC_BY_DEFAULT", "public_step_names", "freeze_public_steps", "frozen_digest", "is_frozen"]

#: Preprocessing fitted on public records by default (``public_steps="auto"``) when it leads a pipeline.
PUBLIC_BY_DEFAULT = frozenset({
    "StandardScaler", "MinMaxScaler", "MaxAbsScaler", "RobustScaler", "QuantileTransformer", "PowerTransformer",
    "Normalizer", "Binarizer", "OneHotEncoder", "OrdinalEncoder", "SimpleImputer", "MissingIndicator",
    "KBinsDiscretizer", "PolynomialFeatures", "SplineTransformer", "FunctionTransformer",
})


def _pipeline(estimator):
    from sklearn.pipeline import Pipeline

    return estimator if isinstance(estimator, Pipeline) else None


def is_frozen(step) -> bool:
    from sklearn.frozen import FrozenEstimator

    return isinstance(step, FrozenEstimator)


def public_step_names(estimator, public_steps) -> list[str]:
    """The names of the pipeline steps to fit on public records (a leading run of steps)."""
    pipe = _pipeline(estimator)
    if public_steps is None or public_steps is False:
        return []
    if isinstance(public_steps, str) and public_steps == "auto":
        if pipe is None:
            return []
        names = []
        for name, step in pipe.steps[:-1]:  # the last step is the model: it is what is released
            if step is None or step == "passthrough" or is_frozen(step):
                continue
            if type(step).__name__ in PUBLIC_BY_DEFAULT and type(step).__module__.startswith("sklearn."):
                names.append(name)
            else:
                break
        return names
    if isinstance(public_steps, str) or not all(isinstance(s, str) for s in public_steps):
        raise InvalidArgumentError(f'public_steps must be "auto", None or a list of pipeline step names, '
                                   f"got {public_steps!r}")
    wanted = list(dict.fromkeys(public_steps))
    if not wanted:
        return []
    if pipe is None:
        raise InvalidArgumentError(f"public_steps={wanted} names pipeline steps, but the estimator is a "
                                   f"{type(estimator).__name__}, not a Pipeline")
    names = [name for name, _ in pipe.steps]
    unknown = [w for w in wanted if w not in names]
    if unknown:
        raise InvalidArgumentError(f"public_steps: no step named {', '.join(map(repr, unknown))}; the pipeline's "
                                   f"steps are {', '.join(map(repr, names))}")
    if names[-1] in wanted:
        raise InvalidArgumentError(f"public_steps: {names[-1]!r} is the pipeline's last step, the model whose "
                                   "parameters are released; only steps before it can be fitted publicly")
    if sorted(names.index(w) for w in wanted) != list(range(len(wanted))):
        raise InvalidArgumentError(f"public_steps {wanted} must be the leading steps of the pipeline ({names}): a "
                                   "step after a privately fitted one would see private data")
    return [n for n in names if n in wanted]


def freeze_public_steps(estimator, names: list[str], X_public: np.ndarray, y_public=None):
    """A copy of the pipeline whose steps ``names`` are fitted on ``X_public`` (and ``y_public``) and frozen."""
    from sklearn.frozen import FrozenEstimator
    from sklearn.pipeline import Pipeline

    if not names:
        return estimator
    pipe = _pipeline(estimator)
    X = X_public
    steps = []
    for name, step in pipe.steps:
        if name in names:
            try:
                fitted = clone(step).fit(X) if y_public is None else clone(step).fit(X, y_public)
                X = fitted.transform(X)
            except Exception as exc:  # public data: its message may be shown
                raise TargetError(f"public step {name!r} ({type(step).__name__}) could not be fitted on public oracle "
                                  f"records ({type(exc).__name__}: {exc})".splitlines()[0]) from None
            steps.append((name, FrozenEstimator(fitted)))
        else:
            steps.append((name, step))
    params = pipe.get_params(deep=False)
    params.pop("steps", None)
    return Pipeline(steps, **params)


def frozen_digest(frozen) -> str:
    """SHA-256 of a frozen step's fitted state (every public fitted attribute, ``mean_``, ``categories_``, …)."""
    est = frozen.estimator
    h = hashlib.sha256(f"{type(est).__module__}:{type(est).__qualname__}".encode())
    for key in sorted(vars(est)):
        if key.startswith("_") or not key.endswith("_"):
            continue
        h.update(key.encode())
        h.update(_bytes(getattr(est, key)))
    return h.hexdigest()


def _bytes(value) -> bytes:
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        return f"{value.dtype.str}{value.shape}".encode() + np.ascontiguousarray(value).tobytes()
    if isinstance(value, (list, tuple)):
        return b"[" + b",".join(_bytes(v) for v in value) + b"]"
    return repr(value).encode()
