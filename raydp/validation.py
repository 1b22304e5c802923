"""One place for argument checks, in the spirit of scikit-learn's ``check_scalar``.

Every check refuses ``bool`` where a number is meant (``True`` is an ``int`` to Python, never to us),
names the argument, says what is allowed and shows what was given, and raises the error type the
caller names (each raydp module raises its own :mod:`raydp.errors` type). The message is

    "<name> must be <expected>, got <value!r>"

where ``expected`` is derived from the bounds unless the caller words it (e.g. "a positive integer").

As in ``check_scalar``, a value of the wrong *type* raises a ``TypeError`` and one of the right type
outside the allowed values a ``ValueError``: ``error`` is what a wrong value raises, and a wrong type
raises its type counterpart (:func:`raydp.errors.type_error_for`: :class:`~raydp.errors.InvalidTypeError`
for the default, :class:`~raydp.errors.PlanTypeError` for ``PlanError``, ...), with the same message.

>>> check_int(3, "n", min_value=1)
3
>>> check_int(0, "n", min_value=1)
Traceback (most recent call last):
...
raydp.errors.InvalidArgumentError: n must be an integer >= 1, got 0
>>> check_int(True, "n", min_value=1)
Traceback (most recent call last):
...
raydp.errors.InvalidTypeError: n must be an integer >= 1, got True
>>> check_real(0.5, "gamma", min_value=0, max_value=1, include_min=False, include_max=False)
0.5
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .errors import InvalidArgumentError, type_error_for

__all__ = ["check_int", "check_real", "check_bool", "fail", "check_epsilon", "check_delta", "check_epsilon_delta",
           "check_gamma", "check_nonnegative"]


def fail(error: type[Exception], name: str, expected: str, value, *, wrong_type: bool = False) -> Exception:
    """The error ``error("<name> must be <expected>, got <value!r>")``, to raise; with ``wrong_type`` the
    same message in ``error``'s type counterpart, a ``TypeError`` (:func:`~raydp.errors.type_error_for`)."""
    return (type_error_for(error) if wrong_type else error)(f"{name} must be {expected}, got {value!r}")


def _is_bool(value) -> bool:
    return isinstance(value, (bool, np.bool_))


def check_int(value, name: str, *, min_value: int | None = None, max_value: int | None = None,
              error: type[Exception] = InvalidArgumentError, expected: str | None = None) -> int:
    """``value`` as an ``int`` if it is an integer (not a bool) in ``[min_value, max_value]``.

    Anything that is not an integer — a bool, a float even if whole, a string, None — is a wrong type.
    """
    if expected is None:
        if min_value is not None and max_value is not None:
            expected = f"an integer in [{min_value}, {max_value}]"
        elif min_value is not None:
            expected = f"an integer >= {min_value}"
        elif max_value is not None:
            expected = f"an integer <= {max_value}"
        else:
            expected = "an integer"
    if _is_bool(value) or not isinstance(value, numbers.Integral):
        raise fail(error, name, expected, value, wrong_type=True)
    v = int(value)
    if (min_value is not None and v < min_value) or (max_value is not None and v > max_value):
        raise fail(error, name, expected, value)
    return v


def check_real(value, name: str, *, min_value: float | None = None, max_value: float | None = None,
               include_min: bool = True, include_max: bool = True, finite: bool = True,
               error: type[Exception] = InvalidArgumentError, expected: str | None = None) -> float:
    """``value`` as a ``float`` if it is a real number (not a bool, not NaN) within the bounds.

    ``finite=True`` also refuses ±inf. ``include_min``/``include_max`` choose closed or open bounds.
    Anything that is not a real number (a bool, a string, a complex, a ``Decimal``, None) is a wrong
    type; NaN, ±inf and numbers out of bounds are wrong values.
    """
    if expected is None:
        parts = []
        if min_value is not None:
            parts.append(f"{'>=' if include_min else '>'} {min_value:g}")
        if max_value is not None:
            parts.append(f"{'<=' if include_max else '<'} {max_value:g}")
        expected = ("a finite real number" if finite else "a real number") + (" " + " and ".join(parts) if parts else "")
    if _is_bool(value) or not isinstance(value, numbers.Real):
        raise fail(error, name, expected, value, wrong_type=True)
    try:
        v = float(value)
    except OverflowError:  # an integer beyond any float (10**400)
        v = math.copysign(math.inf, value)
    if math.isnan(v) or (finite and not math.isfinite(v)):
        raise fail(error, name, expected, value)
    if min_value is not None and (v < min_value or (v == min_value and not include_min)):
        raise fail(error, name, expected, value)
    if max_value is not None and (v > max_value or (v == max_value and not include_max)):
        raise fail(error, name, expected, value)
    return v


def check_bool(value, name: str, *, error: type[Exception] = InvalidArgumentError) -> bool:
    """``value`` as a ``bool`` if it is ``True`` or ``False`` (numpy's bools too); anything else is a
    wrong type (``1``, ``"yes"`` and None too)."""
    if not _is_bool(value):
        raise fail(error, name, "True or False", value, wrong_type=True)
    return bool(value)


# ---------------------------------------------------------------------------------------------------
# Privacy parameters: every ε, δ and γ in raydp is checked here, with the caller's error type.
# ``allow_zero`` is the one name for "the closed interval at 0" (δ = 0 for pure DP, γ = 0 in a ledger).


def check_epsilon(value, name: str = "epsilon", *, error: type[Exception] = InvalidArgumentError) -> float:
    """ε: a real number (not a bool), finite and > 0.

    >>> check_epsilon(0.5)
    0.5
    """
    return check_real(value, name, min_value=0, include_min=False, error=error, expected="a finite real number > 0")


def check_delta(value, name: str = "delta", *, allow_zero: bool = True,
                error: type[Exception] = InvalidArgumentError) -> float:
    """δ: a real number in [0, 1) (``allow_zero=False``: in (0, 1), for mechanisms that need δ > 0).

    >>> check_delta(0.0), check_delta(1e-6, allow_zero=False)
    (0.0, 1e-06)
    """
    return check_real(value, name, min_value=0, max_value=1, include_min=allow_zero, include_max=False,
                      error=error, expected=f"a real number in {'[' if allow_zero else '('}0, 1)")


def check_epsilon_delta(epsilon, delta, *, allow_zero: bool = True,
                        error: type[Exception] = InvalidArgumentError) -> tuple[float, float]:
    """(ε, δ) of one release or one budget: :func:`check_epsilon` and :func:`check_delta` together
    (``allow_zero`` is δ's)."""
    return check_epsilon(epsilon, error=error), check_delta(delta, allow_zero=allow_zero, error=error)


def check_gamma(value, name: str = "gamma", *, allow_zero: bool = False,
                error: type[Exception] = InvalidArgumentError) -> float:
    """γ of random DP: a real number in the open interval (0, 1) (``allow_zero=True``: [0, 1), as a
    ledger records a release that holds for every pair).

    >>> check_gamma(0.05)
    0.05
    """
    return check_real(value, name, min_value=0, max_value=1, include_min=allow_zero, include_max=False,
                      error=error, expected=f"a real number in {'[' if allow_zero else '('}0, 1)")


def check_nonnegative(value, name: str, *, error: type[Exception] = InvalidArgumentError) -> float:
    """A finite real number >= 0 (a sensitivity, a noise scale, a proposed bound)."""
    return check_real(value, name, min_value=0, error=error, expected="a finite real number >= 0")
