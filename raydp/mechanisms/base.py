"""The :class:`Mechanism` base class and the argument checks every mechanism shares.

A mechanism owns the norm in which the sampler measures ``G = ‖f(D) − f(D′)‖`` (:meth:`Mechanism.distance`),
its noise scale for a sensitivity Δ (:meth:`Mechanism.noise_scale`), its release, and — where it is
known in closed form — its exact privacy curve on a neighbouring pair (:meth:`Mechanism.exact_privacy`,
the white-box reference that :mod:`raydp.testing` compares audits with).

The checks :func:`check_epsilon`, :func:`check_delta` and :func:`check_sensitivity` raise
:class:`~raydp.errors.MechanismError` and are shared with :mod:`raydp.baselines`.

>>> check_epsilon(0.5), check_delta(1e-5), check_sensitivity(0)
(0.5, 1e-05, 0.0)
"""

from __future__ import annotations

import math
from numbers import Real
from typing import Callable

import numpy as np

from raydp.errors import InvalidArgumentError, MechanismError, TargetError
from raydp import validation
from raydp.validation import check_int

__all__ = ["Mechanism", "check_epsilon", "check_delta", "check_sensitivity", "resolve_claim", "check_mechanism",
           "PROTOCOL"]

# What every layer asks of a mechanism: the sampler measures G with embed/distance in its norm, a
# release calls privacy and release. One list, checked once wherever a mechanism comes in.
PROTOCOL = ("name", "norm", "embed", "distance", "privacy", "release")


def check_mechanism(mechanism, *, coordinatewise: bool = False, error: type[Exception] = InvalidArgumentError):
    """``mechanism`` if it is a raydp mechanism (:data:`PROTOCOL`), else ``error`` naming what is missing.

    ``coordinatewise``: it must also add noise to every coordinate of a vector (Laplace, Gaussian), as
    a released parameter vector needs.
    """
    missing = [attr for attr in PROTOCOL if not hasattr(mechanism, attr)]
    if missing:
        raise error(f"mechanism must be a raydp mechanism (missing .{', .'.join(missing)}), got {mechanism!r}")
    if coordinatewise and not getattr(mechanism, "coordinatewise_noise", False):
        raise error(f"mechanism must add noise to every coordinate of a vector (Laplace, Gaussian); "
                    f"{type(mechanism).__name__} releases something else")
    return mechanism


# ---------------------------------------------------------------------------------------------------
# validation helpers


def check_epsilon(epsilon, what: str = "epsilon") -> float:
    """ε as a float: a real number (not a bool), finite and > 0; else :class:`MechanismError`."""
    return validation.check_epsilon(epsilon, what, error=MechanismError)


def check_delta(delta) -> float:
    """δ as a float: a real number (not a bool) strictly between 0 and 1; else :class:`MechanismError`."""
    return validation.check_delta(delta, allow_zero=False, error=MechanismError)


def check_sensitivity(sensitivity) -> float:
    """Δ as a float: a real number (not a bool), finite and >= 0; else :class:`MechanismError`.

    An infinite Δ̂ is an estimate with too many failed pairs: the message says so.
    """
    try:
        return validation.check_nonnegative(sensitivity, "sensitivity", error=MechanismError)
    except MechanismError as exc:
        if isinstance(sensitivity, Real) and not isinstance(sensitivity, bool) and math.isinf(float(sensitivity)):
            raise MechanismError(f"{exc} (0 means no noise is needed); an infinite estimate means some sampled "
                                 "pair could not be bounded") from None
        raise


def check_positive_int(value, what: str) -> int:
    """An integer (Python or numpy, not a bool) >= 1; else :class:`MechanismError`."""
    if isinstance(value, np.integer):  # the message shows -4, not np.int64(-4)
        value = int(value)
    return check_int(value, what, min_value=1, error=MechanismError)


def as_float_array(value, what: str) -> np.ndarray:
    """``value`` as a float64 array; :class:`TargetError` if it is not numeric."""
    try:
        is_complex = np.iscomplexobj(value)
    except (TypeError, ValueError):  # ragged: the cast below says so
        is_complex = False
    if is_complex:  # a cast to float would drop the imaginary part with only a warning
        raise TargetError(f"{what} is complex; a mechanism needs real numbers (return the real and imaginary "
                          "parts as separate coordinates)")
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TargetError(f"{what} must be numeric array-like, got {type(value).__name__}: {exc}") from None


def require_finite(vec: np.ndarray, what: str) -> None:
    """:class:`TargetError` unless every entry of ``vec`` is finite."""
    if not np.all(np.isfinite(vec)):
        raise TargetError(f"{what} contains NaN or inf; a private release needs finite values")


def resolve_claim(mechanism, claim) -> tuple[float, float]:
    """The (ε, δ) to check a mechanism against: ``claim``, or ``mechanism.privacy()`` when None.

    >>> from raydp.mechanisms import Laplace
    >>> resolve_claim(Laplace(1.0), None), resolve_claim(Laplace(1.0), (2, 0.1))
    ((1.0, 0.0), (2.0, 0.1))
    """
    if claim is None:
        eps, dlt = mechanism.privacy()
    else:
        eps, dlt = claim
    eps, dlt = float(eps), float(dlt)
    if not (math.isfinite(eps) and eps > 0) or not (0.0 <= dlt < 1.0):
        raise InvalidArgumentError(
            f"claimed privacy must have epsilon > 0 and 0 <= delta < 1, got ({eps}, {dlt})")
    return eps, dlt


def epsilon_at(delta_of: Callable[[float], float], delta: float) -> float:
    """The smallest ε′ >= 0 with ``delta_of(ε′) <= delta``, for a decreasing ``delta_of`` (bisection).

    ``inf`` when even ε′ = 1e6 does not reach ``delta``.

    >>> epsilon_at(lambda e: max(0.0, 1.0 - e), 0.25)
    0.75
    """
    if delta_of(0.0) <= delta:
        return 0.0
    hi = 1.0
    while delta_of(hi) > delta:
        hi *= 2.0
        if hi > 1e6:
            return math.inf
    lo = 0.0
    for _ in range(200):  # bisection: δ(·) may be flat (exactly 0) above the root
        mid = 0.5 * (lo + hi)
        if delta_of(mid) > delta:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-13 * max(1.0, hi):
            break
    return float(hi)


# ---------------------------------------------------------------------------------------------------
# base class


class Mechanism:
    """Base class: a privacy mechanism that owns its norm.

    Subclasses set ``name`` and ``norm`` and implement :meth:`release` and :meth:`noise_scale`, and
    :meth:`exact_privacy` where their privacy curve is known. ``coordinatewise_noise`` is True for
    mechanisms whose release adds iid noise to each coordinate of the value (so a stack of values
    can be released in one call, as the audits in :mod:`raydp.testing` do).
    """

    name: str = "mechanism"
    norm: str = "l2"
    coordinatewise_noise: bool = False

    def __init__(self, epsilon: float, delta: float = 0.0):
        self._epsilon = check_epsilon(epsilon)
        pure = not isinstance(delta, bool) and isinstance(delta, Real) and delta == 0
        self._delta = 0.0 if pure else check_delta(delta)

    @property
    def epsilon(self) -> float:
        """The ε of the (ε, δ)-DP guarantee (given the true sensitivity)."""
        return self._epsilon

    @property
    def delta(self) -> float:
        """The δ of the (ε, δ)-DP guarantee; 0.0 for pure DP."""
        return self._delta

    def privacy(self) -> tuple[float, float]:
        """``(epsilon, delta)``."""
        return (self._epsilon, self._delta)

    # -- the norm -----------------------------------------------------------------------------------
    def embed(self, value) -> np.ndarray:
        """The target output as a 1-D float64 vector (a point of the normed space B)."""
        return as_float_array(value, "target output").ravel()

    def embed_batch(self, values) -> np.ndarray:
        """Embed many outputs at once: ``(B, ...) -> (B, d)``; what a target's batch form returns.

        The base embedding is a ravel, so a numeric array is reshaped in one step (this is the
        hot path for cheap batched targets); subclasses with their own ``embed`` go row by row.
        """
        if type(self).embed is Mechanism.embed and isinstance(values, np.ndarray) and values.dtype.kind in "fiu":
            return np.asarray(values, dtype=np.float64).reshape(values.shape[0], -1)
        return np.stack([self.embed(v) for v in values])

    def distance(self, a, b) -> np.ndarray:
        """Row-wise ``‖a − b‖`` in this mechanism's norm: ``(p, d) x (p, d) -> (p,)``.

        NaN in a row gives NaN; an infinite difference gives inf.

        >>> from raydp.mechanisms import Gaussian, Laplace
        >>> Laplace(1.0).distance(np.array([[0.0, 0.0]]), np.array([[3.0, -4.0]]))
        array([7.])
        >>> Gaussian(0.5, 1e-5).distance(np.array([[0.0, 0.0]]), np.array([[3.0, -4.0]]))
        array([5.])
        """
        diff = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            if self.norm == "l1":
                return np.sum(np.abs(diff), axis=-1)
            if self.norm == "l2":
                return np.sqrt(np.sum(diff * diff, axis=-1))
            return np.max(np.abs(diff), axis=-1, initial=0.0)

    # -- the release --------------------------------------------------------------------------------
    def noise_scale(self, sensitivity: float) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def release(self, value, sensitivity: float):  # pragma: no cover - abstract
        raise NotImplementedError

    # -- the privacy curve --------------------------------------------------------------------------
    def _add_noise(self, value, sensitivity: float, sampler) -> np.ndarray:
        """``value`` + i.i.d. noise of ``noise_scale(sensitivity)`` per coordinate from ``sampler``
        (one of :mod:`raydp.noise`'s OpenDP samplers), with ``value``'s shape."""
        scale = self.noise_scale(sensitivity)
        arr = as_float_array(value, "target output")
        vec = arr.ravel()
        require_finite(vec, "target output")
        return sampler(vec, scale).reshape(arr.shape)

    def exact_privacy(self, value, value_prime, sensitivity: float, *, claim=None) -> dict:
        """The exact ε at the claimed δ and δ at the claimed ε of this mechanism on one pair.

        ``value`` and ``value_prime`` are target outputs of two neighbouring databases; the noise is
        the one :meth:`release` adds for ``sensitivity`` (``self.noise_scale(Δ)``); ``claim`` is the
        (ε, δ) to evaluate at (default :meth:`privacy`). Returns ``{"epsilon": ε(δ) or None,
        "delta": δ(ε) or None}`` (None where no closed form is known). Subclasses with a known
        privacy curve override this; the base class has none and raises ``NotImplementedError``.
        """
        raise NotImplementedError(
            f"{type(self).__name__} does not state its exact privacy curve: it has no exact_privacy() "
            "(the Laplace, Gaussian, Exponential and Bernstein mechanisms do)"
        )

    def _privacy_inputs(self, value, value_prime, sensitivity, claim):
        """(ε, δ) claimed, the embedded pair u, v, ``v − u`` and the noise scale, for :meth:`exact_privacy`."""
        eps, dlt = resolve_claim(self, claim)
        sens = float(sensitivity)
        u, v = (np.asarray(self.embed(x), dtype=np.float64) for x in (value, value_prime))
        diff = v - u
        scale = float(self.noise_scale(sens))
        return eps, dlt, u, v, diff, scale

    # -- provenance ---------------------------------------------------------------------------------
    def _params(self) -> dict:
        return {"epsilon": self._epsilon}

    def identity(self) -> dict:
        """``{"name": ..., "params": {...}}``: JSON-able, equal for equally configured mechanisms."""
        return {"name": self.name, "params": self._params()}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._params().items())
        return f"{type(self).__name__}({args})"
