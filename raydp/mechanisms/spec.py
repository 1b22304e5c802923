"""One way to give a mechanism: a name or an object, with ε and δ, the same at every entry point.

:func:`as_mechanism` is what :func:`raydp.estimate_sensitivity`, :func:`raydp.sample_then_respond`,
:class:`raydp.sklearn.PrivateEstimator`, :class:`raydp.sklearn.PrivateSearchCV` and the command line call:

- a **name** (:data:`NAMES`: ``"laplace"``, ``"gaussian"``, ``"exponential"``, ``"bernstein"``) takes its
  ε from ``epsilon`` and its δ from ``delta`` (the Gaussian only; the others are ε-DP, δ = 0). The
  exponential and Bernstein mechanisms also need their responses or lattice: from Python give the object
  (``raydp.Exponential(epsilon, responses)``), from the command line ``--mechanism-args``;
- a **mechanism object** carries its own ε and δ; ``epsilon`` and ``delta``, when also given, must agree
  with them (a disagreement is refused, never settled silently).

ε and δ are never read from a mechanism's other arguments (``--mechanism-args``): they have their own.

>>> as_mechanism("gaussian", epsilon=1.0, delta=1e-5).privacy()
(1.0, 1e-05)
>>> from raydp.mechanisms import Laplace
>>> as_mechanism(Laplace(0.5), epsilon=0.5).privacy()
(0.5, 0.0)
"""

from __future__ import annotations

from ..errors import InvalidArgumentError, RaydpError
from .base import check_mechanism
from .bernstein import Bernstein
from .exponential import Exponential
from .gaussian import Gaussian
from .laplace import Laplace

__all__ = ["NAMES", "as_mechanism", "SAMPLING_EPSILON", "SAMPLING_DELTA"]

#: The mechanisms a name gives.
NAMES = {"laplace": Laplace, "gaussian": Gaussian, "exponential": Exponential, "bernstein": Bernstein}
#: ε and δ a mechanism named only to fix the norm of a sampling run gets (they do not change how G is measured).
SAMPLING_EPSILON = 1.0
SAMPLING_DELTA = 1e-6


def as_mechanism(mechanism, epsilon=None, delta=None, *, params: dict | None = None, budget: bool = True,
                 error: type[Exception] = InvalidArgumentError):
    """The mechanism ``mechanism`` names (with ``epsilon``, ``delta`` and ``params``) or is.

    ``budget=False`` (a sampling run, which needs only the norm): a name without ``epsilon`` gets
    :data:`SAMPLING_EPSILON`, a Gaussian without ``delta`` :data:`SAMPLING_DELTA`. ``params``: the named
    mechanism's other arguments (the command line's ``--mechanism-args``; responses, lattice, calibration).
    """
    if isinstance(mechanism, str):
        return _named(mechanism, epsilon, delta, dict(params or {}), budget, error)
    if params:
        raise error("mechanism arguments go with a mechanism name; a mechanism object carries its own")
    mech = check_mechanism(mechanism, error=error)
    if epsilon is None and delta is None:
        return mech
    m_eps, m_dlt = (float(v) for v in mech.privacy())
    given_eps = m_eps if epsilon is None else _number(epsilon, "epsilon", error)
    given_dlt = m_dlt if delta is None else _number(delta, "delta", error)
    if (given_eps, given_dlt) != (m_eps, m_dlt):
        raise error(f"the {mech.name} mechanism has (ε, δ) = ({m_eps:g}, {m_dlt:g}) but "
                    + ", ".join(f"{k}={v!r}" for k, v in (("epsilon", epsilon), ("delta", delta)) if v is not None)
                    + " was given: give ε and δ once (in the mechanism, or with its name), or make them agree")
    return mech


def _number(value, what: str, error):
    if isinstance(value, bool):
        raise error(f"{what} must be a number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise error(f"{what} must be a number, got {value!r}") from None


def _named(name: str, epsilon, delta, kwargs: dict, budget: bool, error):
    if name not in NAMES:
        raise error(f"mechanism must be a name ({', '.join(repr(n) for n in NAMES)}) or a raydp mechanism, "
                    f"got {name!r}")
    inside = sorted(set(kwargs) & {"epsilon", "delta"})
    if inside:
        raise error(f"give {' and '.join(inside)} as {'their' if len(inside) > 1 else 'its'} own argument "
                    f"(--{inside[0]} on the command line, {inside[0]}= in Python), not among the mechanism's "
                    "arguments")
    if epsilon is None:
        if budget:
            raise error(f"mechanism={name!r} needs epsilon (or give a mechanism object, which carries its own)")
        epsilon = SAMPLING_EPSILON
    kwargs["epsilon"] = epsilon
    if name == "gaussian":
        if delta is None and not budget:
            delta = SAMPLING_DELTA
        if delta is None or (not isinstance(delta, bool) and isinstance(delta, (int, float)) and delta == 0):
            raise error('mechanism="gaussian" needs delta > 0')
        kwargs["delta"] = delta
        kwargs.setdefault("calibration", "analytic")
    elif delta is not None and not (not isinstance(delta, bool) and isinstance(delta, (int, float)) and delta == 0):
        raise error(f"delta applies to the gaussian mechanism only; {name} is pure ε-DP (delta = 0)")
    try:
        return NAMES[name](**kwargs)
    except RaydpError:
        raise
    except TypeError as exc:
        needs = {"exponential": "responses", "bernstein": "lattice and dims"}.get(name)
        hint = (f" (it needs its {needs}: in Python give the object, raydp.{NAMES[name].__name__}(...); on the "
                "command line --mechanism-args)") if needs else ""
        raise error(f"the mechanism arguments do not fit the {name} mechanism: {exc}{hint}") from None
