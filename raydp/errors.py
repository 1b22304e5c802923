"""Exception types. Every error raydp raises on bad input is a ``RaydpError``.

They subclass ``ValueError`` (or ``RuntimeError``) so callers that already catch the builtin
keep working, and the CLI can turn any of them into one line without a traceback.

Argument checks split as scikit-learn's ``check_scalar`` does: an argument of the wrong *type* (a
bool or a float where an integer is meant, a string where a number is) raises a ``TypeError``, one
of the right type with a wrong *value* (out of range, NaN) a ``ValueError``. The generic pair is
:class:`InvalidTypeError` / :class:`InvalidArgumentError`. A module with its own error family keeps
it for both, so ``except PlanError`` still catches every bad plan argument: a wrong type there is a
:class:`PlanTypeError`, which is a ``PlanError`` and a ``TypeError`` (:func:`type_error_for`).
"""


class RaydpError(Exception):
    """Base class of every error raydp raises on purpose."""


class PlanError(RaydpError, ValueError):
    """An (m, k, gamma) request that Theorem 15 cannot satisfy or that is malformed."""


class MechanismError(RaydpError, ValueError):
    """Bad mechanism parameters (epsilon, delta, lattice, responses) or a bad sensitivity."""


class OracleError(RaydpError, ValueError):
    """An oracle that is misconfigured or returns records of the wrong shape."""


class TargetError(RaydpError, ValueError):
    """A target that cannot be evaluated (in strict mode) or whose output does not fit the mechanism."""


class EstimateMismatchError(RaydpError, ValueError):
    """A stored sensitivity estimate used for a release it was not computed for."""


class StoreError(RaydpError, RuntimeError):
    """A Δ store that cannot be read, written or resumed."""


class EngineError(RaydpError, RuntimeError):
    """A distributed run that cannot finish with every pair accounted for."""


class InvalidArgumentError(RaydpError, ValueError):
    """An argument (n, seed, block size, backend, data) whose value is out of range or not allowed."""


class InvalidTypeError(RaydpError, TypeError):
    """An argument of the wrong type: a bool or a float where an integer is meant, a string where a
    number is, something that is not a path where a store is."""


class BudgetError(RaydpError, ValueError):
    """A privacy ledger that refuses a release (over budget) or cannot be used (totals that differ
    from the stored ones, a missing or corrupt ledger file)."""


class UtilityError(RaydpError, ValueError):
    """``on_useless="refuse"`` and the release is expected to be no better than a trivial predictor (previewed
    on public data); nothing was released or charged."""


class PlanTypeError(PlanError, TypeError):
    """A plan argument (m, k, gamma) of the wrong type."""


class MechanismTypeError(MechanismError, TypeError):
    """A mechanism parameter (epsilon, delta, a sensitivity, a lattice size) of the wrong type."""


class OracleTypeError(OracleError, TypeError):
    """An oracle parameter (a dimension, a sample size) of the wrong type."""


class TargetTypeError(TargetError, TypeError):
    """A target parameter (an iteration count, a quantile) of the wrong type."""


_TYPE_ERRORS = {InvalidArgumentError: InvalidTypeError, PlanError: PlanTypeError, MechanismError: MechanismTypeError,
                OracleError: OracleTypeError, TargetError: TargetTypeError}


def type_error_for(error: type[Exception]) -> type[Exception]:
    """The class a wrong *type* raises where ``error`` is what a wrong value raises.

    >>> type_error_for(InvalidArgumentError).__name__, type_error_for(PlanError).__name__
    ('InvalidTypeError', 'PlanTypeError')

    A class with no type counterpart here is its own (one class for both kinds of mistake).
    """
    if issubclass(error, TypeError):
        return error
    return _TYPE_ERRORS.get(error, error)
