"""raydp: sensitivity sampling (Rubinstein & Aldà, ICML 2017) on Ray.

Three steps, as in the paper's R package: pick a mechanism, sample its sensitivity from an oracle,
release a response whose (ε, δ, γ) comes back with it.

>>> import numpy as np, raydp
>>> from raydp import oracles, targets
>>> mech = raydp.Laplace(epsilon=1.0)
>>> est = raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), n=500,
...                                  mechanism=mech, gamma=0.05, seed=0, progress=False)
>>> data = np.random.default_rng(1).exponential(1.0, 500)          # private
>>> r = raydp.sample_then_respond(data, targets.mean(), mech, estimate=est)
>>> r.gamma
0.05
"""

from ._version import __version__
from .errors import (
    BudgetError,
    EngineError,
    EstimateMismatchError,
    InvalidArgumentError,
    InvalidTypeError,
    MechanismError,
    OracleError,
    PlanError,
    RaydpError,
    StoreError,
    TargetError,
)
from .engine import AutoBackend, Backend, LocalBackend, RayBackend
from .estimate import SensitivityEstimate
from .identity import RunIdentity
from .ledger import Ledger
from .mechanisms import Bernstein, Exponential, Gaussian, Laplace
from .options import SamplerOptions
from .plan import Plan, make_plan  # the function; raydp.plan is the module
from .release import Release, sample_then_respond
from .sampler import estimate_sensitivity, load_estimate
from .store import Store
from . import oracles, targets


__all__ = [
    "__version__", "make_plan", "Plan", "estimate_sensitivity", "SensitivityEstimate", "sample_then_respond",
    "Release", "Laplace", "Gaussian", "Exponential", "Bernstein", "oracles", "targets", "load_estimate",
    "RaydpError", "PlanError", "MechanismError", "OracleError", "TargetError", "EstimateMismatchError",
    "StoreError", "EngineError", "InvalidArgumentError", "InvalidTypeError", "Ledger", "BudgetError",
    "AutoBackend", "Backend", "LocalBackend", "RayBackend", "Store", "RunIdentity", "SamplerOptions",
]
