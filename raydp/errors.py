"""Exception types. Every error raydp raises on bad input is a ``RaydpError``.

They subclass ``ValueError`` (or ``RuntimeError``) so callers that already catch the builtin
keep working, and the CLI can turn any of them into one line without a traceback.
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
    """An argument (n, seed, block size, backend, data) that is out of range or of the wrong type."""


# The name before 0.2; kept so that ``except raydp.InvalidArgument`` keeps working.
InvalidArgument = InvalidArgumentError


class BudgetError(RaydpError, ValueError):
    """A privacy ledger that refuses a release (over budget) or cannot be used (totals that differ
    from the stored ones, a missing or corrupt ledger file)."""


class UtilityError(RaydpError, ValueError):
    """``strict=True`` and the release is expected to be no better than a trivial predictor (previewed on
    public data); nothing was released or charged."""
