"""Bad input to the API (issue 6): every public function, a table of bad arguments.

Each bad call raises one specific :mod:`raydp.errors` class whose message names the problem (the
fragment). A target that fails on some sampled pairs is not bad input: those pairs count as G = +∞;
only the probe and strict mode raise. The command line's table: ``integration/cli/test_bad_input_cli.py``;
property-based tests over the same surface: ``statistical/test_properties.py``.
"""

from __future__ import annotations

import os
from decimal import Decimal

import numpy as np
import pytest

import raydp
from raydp import mechanisms, oracles, targets
from raydp.errors import (
    EstimateMismatchError,
    InvalidArgumentError,
    InvalidTypeError,
    MechanismError,
    MechanismTypeError,
    OracleError,
    OracleTypeError,
    PlanError,
    PlanTypeError,
    RaydpError,
    StoreError,
    TargetError,
    TargetTypeError,
)

NAN, INF = float("nan"), float("inf")
HUGE = 2**70


from bad_inputs import (
    ChangingShape, complex_oracle, inf_oracle, list_oracle, nan_oracle, none_oracle, raises, raising_oracle,
    returns_dict, returns_empty, returns_none, returns_str, scalar_oracle, short_oracle, str_oracle,
    transposed_oracle,
    make_files,
)


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    return make_files(tmp_path_factory.mktemp("bad_input"))


def _est(**kw):
    base = {"target": targets.mean(), "oracle": oracles.exponential(1.0), "n": 5, "m": 50, "seed": 0,
            "progress": False, "backend": "local"}  # the default (auto) is covered by its own rows
    return raydp.estimate_sensitivity(**{**base, **kw})


def _str(**kw):
    """sample_then_respond on 5 private records with the module's stored estimate unless overridden."""
    return lambda c: raydp.sample_then_respond(
        **{"data": np.load(c.data), "target": targets.mean(), "mechanism": mechanisms.Laplace(1.0),
           "estimate": c.est, **kw})


_rng = np.random.default_rng(0)
_L = mechanisms.Laplace(1.0)
_E2 = mechanisms.Exponential(1.0, ["a", "b"])
_B4 = mechanisms.Bernstein(1.0, lattice=4, dims=1)
_POLY = mechanisms.bernstein_approximation(lambda y: y[:, 0], lattice=4, dims=1)


def P(**kw):
    return lambda c: raydp.make_plan(**kw)


def C(f, *a, **kw):
    """A call that does not need the fixture."""
    return lambda c: f(*a, **kw)


# ----------------------------------------------------------------------------- the API table
# (id, call(ctx), exception class (exact), message fragment)
API = [
    # --- raydp.plan: γ, m, k
    ("plan-gamma-str", P(gamma="0.1"), PlanTypeError, "gamma must be a real number in (0, 1)"),
    ("plan-gamma-bool", P(gamma=True), PlanTypeError, "gamma must be a real number in (0, 1)"),
    ("plan-gamma-list", P(gamma=[0.1]), PlanTypeError, "gamma must be a real number in (0, 1)"),
    ("plan-gamma-complex", P(gamma=0.1j), PlanTypeError, "gamma must be a real number in (0, 1)"),
    ("plan-gamma-decimal", P(gamma=Decimal("0.1")), PlanTypeError, "gamma must be a real number in (0, 1)"),
    ("plan-gamma-nan", P(gamma=NAN), PlanError, "real number in (0, 1), got nan"),
    ("plan-gamma-np-nan", P(gamma=np.float64("nan")), PlanError, "real number in (0, 1)"),
    ("plan-gamma-inf", P(gamma=INF), PlanError, "real number in (0, 1), got inf"),
    ("plan-gamma-neg-inf", P(gamma=-INF), PlanError, "real number in (0, 1)"),
    ("plan-gamma-0", P(gamma=0), PlanError, "real number in (0, 1), got 0"),
    ("plan-gamma-1", P(gamma=1.0), PlanError, "real number in (0, 1)"),
    ("plan-gamma-neg", P(gamma=-0.1), PlanError, "real number in (0, 1)"),
    ("plan-gamma-huge", P(gamma=1e308), PlanError, "real number in (0, 1)"),
    ("plan-gamma-subnormal", P(gamma=1e-320), PlanError, "needs more than 2**53 pairs; use gamma >= 3.49e-08"),
    ("plan-gamma-tiniest", P(gamma=5e-324), PlanError, "use gamma >= 3.49e-08"),
    ("plan-gamma-1e-9", P(gamma=1e-9), PlanError, "use gamma >= 3.49e-08"),
    ("plan-m-0", P(m=0), PlanError, "m must be a positive integer at most 2**53, got 0"),
    ("plan-m-neg", P(m=-3), PlanError, "m must be a positive integer"),
    ("plan-m-float", P(m=10.5), PlanError, "m must be a positive integer at most 2**53, got 10.5"),
    ("plan-m-np-float", P(m=np.float64(10.5)), PlanError, "m must be a positive integer"),
    ("plan-m-nan", P(m=NAN), PlanError, "m must be a positive integer at most 2**53, got nan"),
    ("plan-m-inf", P(m=INF), PlanError, "m must be a positive integer at most 2**53, got inf"),
    ("plan-m-str", P(m="100"), PlanTypeError, "m must be a positive integer at most 2**53, got '100'"),
    ("plan-m-bool", P(m=True), PlanTypeError, "m must be a positive integer at most 2**53, got True"),
    ("plan-m-list", P(m=[100]), PlanTypeError, "m must be a positive integer"),
    ("plan-m-1e308", P(m=1e308), PlanError, "at most 2**53, got 1e+308"),
    ("plan-m-2**70", P(m=HUGE), PlanError, "at most 2**53"),
    ("plan-m-2**53+1", P(m=2**53 + 1, gamma=0.5), PlanError, "at most 2**53"),
    ("plan-m-1", P(m=1), PlanError, "use m >= 2"),
    ("plan-m-gamma-too-small", P(m=1000, gamma=0.05), PlanError, "use gamma >= 0.0564678"),  # rounded up: 0.0564677 itself is refused
    ("plan-m-gamma-nan", P(m=1000, gamma=NAN), PlanError, "real number in (0, 1)"),
    ("plan-k-0", P(m=100, k=0), PlanError, "k must be a positive integer at most 2**53, got 0"),
    ("plan-k-neg", P(m=100, k=-1), PlanError, "k must be a positive integer"),
    ("plan-k-float", P(m=100, k=2.5), PlanError, "k must be a positive integer"),
    ("plan-k-str", P(m=100, k="5"), PlanTypeError, "k must be a positive integer"),
    ("plan-k-gt-m", P(m=100, k=101), PlanError, "k must be at most m, got k=101 > m=100"),
    ("plan-k-huge", P(m=100, k=HUGE), PlanError, "at most 2**53"),
    ("plan-k-certifies-nothing", P(m=100, k=1), PlanError, "certifies no gamma < 1"),
    ("plan-k-alone", P(k=5), PlanError, "k needs m"),
    ("plan-gamma-k", P(gamma=0.1, k=5), PlanError, "k needs m"),
    ("plan-all-three", P(gamma=0.1, m=100, k=5), PlanError, "at most two"),
    ("plan-nothing", P(), PlanError, "give gamma, or m"),
    # --- mechanisms: ε, δ, calibration
    ("laplace-eps-none", C(mechanisms.Laplace, None), MechanismTypeError, "epsilon must be a finite real number > 0"),
    ("laplace-eps-str", C(mechanisms.Laplace, "1"), MechanismTypeError, "epsilon must be a finite real number > 0"),
    ("laplace-eps-bool", C(mechanisms.Laplace, True), MechanismTypeError, "epsilon must be a finite real number > 0"),
    ("laplace-eps-list", C(mechanisms.Laplace, [1.0]), MechanismTypeError, "epsilon must be a finite real number > 0"),
    ("laplace-eps-complex", C(mechanisms.Laplace, 1j), MechanismTypeError, "epsilon must be a finite real number > 0"),
    ("laplace-eps-nan", C(mechanisms.Laplace, NAN), MechanismError, "epsilon must be a finite real number > 0, got nan"),
    ("laplace-eps-inf", C(mechanisms.Laplace, INF), MechanismError, "epsilon must be a finite real number > 0, got inf"),
    ("laplace-eps-0", C(mechanisms.Laplace, 0), MechanismError, "epsilon must be a finite real number > 0, got 0"),
    ("laplace-eps-neg", C(mechanisms.Laplace, -1.0), MechanismError, "epsilon must be a finite real number > 0"),
    ("laplace-delta-nan", C(mechanisms.Laplace, 1.0, NAN), MechanismError, "delta must be a real number in (0, 1)"),
    ("laplace-delta-str", C(mechanisms.Laplace, 1.0, "0"), MechanismTypeError, "delta must be a real number"),
    ("gaussian-delta-0", C(mechanisms.Gaussian, 0.5, 0.0), MechanismError, "delta must be a real number in (0, 1)"),
    ("gaussian-delta-1", C(mechanisms.Gaussian, 0.5, 1.0), MechanismError, "delta must be a real number in (0, 1)"),
    ("gaussian-delta-nan", C(mechanisms.Gaussian, 0.5, NAN), MechanismError, "real number in (0, 1), got nan"),
    ("gaussian-delta-none", C(mechanisms.Gaussian, 0.5, None), MechanismTypeError, "delta must be a real number in (0, 1)"),
    ("gaussian-delta-str", C(mechanisms.Gaussian, 0.5, "1e-5"), MechanismTypeError, "delta must be a real number"),
    ("gaussian-calibration", C(mechanisms.Gaussian, 0.5, 1e-5, calibration="exact"), MechanismError,
     "calibration must be one of ('classic', 'analytic')"),
    ("gaussian-classic-eps-1", C(mechanisms.Gaussian, 1.0, 1e-5, calibration="classic"), MechanismError,
     "only valid for epsilon < 1"),
    ("gaussian-classic-eps-tiny", C(mechanisms.Gaussian, 1e-320, 1e-5, calibration="classic"), MechanismError,
     "too small"),
    ("gaussian-analytic-eps-tiny", C(mechanisms.Gaussian, 1e-320, 1e-5), MechanismError, "needs 1e-100 <= epsilon"),
    ("gaussian-analytic-eps-1e308", C(mechanisms.Gaussian, 1e308, 1e-5, calibration="analytic"), MechanismError,
     "needs 1e-100 <= epsilon <= 1e+15"),
    ("gaussian-analytic-eps-2**70", C(mechanisms.Gaussian, HUGE, 1e-5, calibration="analytic"), MechanismError,
     "needs 1e-100 <= epsilon <= 1e+15"),
    ("gaussian-analytic-eps-1e-300", C(mechanisms.Gaussian, 1e-300, 1e-5, calibration="analytic"), MechanismError,
     "needs 1e-100 <= epsilon"),
    ("gaussian-analytic-delta-subnormal", C(mechanisms.Gaussian, 1.0, 5e-324, calibration="analytic"),
     MechanismError, "delta >= 2.225e-308"),
    ("analytic-sigma-eps-huge", C(mechanisms.analytic_gaussian_sigma, 1e300, 1e-5), MechanismError, "epsilon <= 1e+15"),
    ("analytic-sigma-sens-neg", C(mechanisms.analytic_gaussian_sigma, 1.0, 1e-5, -1.0), MechanismError,
     "sensitivity must be a finite real number >= 0"),
    # --- exponential: response sets
    ("exp-responses-empty", C(mechanisms.Exponential, 1.0, []), MechanismError, "responses must be non-empty"),
    ("exp-responses-dup", C(mechanisms.Exponential, 1.0, ["a", "b", "a"]), MechanismError,
     "responses must be distinct"),
    ("exp-responses-dup-unhashable", C(mechanisms.Exponential, 1.0, [[1], [1]]), MechanismError,
     "responses must be distinct"),
    ("exp-responses-dup-array", C(mechanisms.Exponential, 1.0, np.array([1, 2, 1])), MechanismError,
     "responses must be distinct"),
    ("exp-responses-str", C(mechanisms.Exponential, 1.0, "abc"), MechanismError, "got a string; wrap it in a list"),
    ("exp-responses-set", C(mechanisms.Exponential, 1.0, {1, 2}), MechanismError, "ordered sequence"),
    ("exp-responses-dict", C(mechanisms.Exponential, 1.0, {"a": 1}), MechanismError, "ordered sequence"),
    ("exp-responses-none", C(mechanisms.Exponential, 1.0, None), MechanismError,
     "responses must be a non-empty sequence, got NoneType"),
    ("exp-responses-int", C(mechanisms.Exponential, 1.0, 5), MechanismError, "responses must be a non-empty sequence"),
    ("exp-responses-2d", C(mechanisms.Exponential, 1.0, np.zeros((2, 2))), MechanismError, "must be 1-D"),
    ("exp-eps-nan", C(mechanisms.Exponential, NAN, [1, 2]), MechanismError, "epsilon must be a finite real number"),
    # --- bernstein: lattice, dims, order
    ("bern-lattice-0", C(mechanisms.Bernstein, 1.0, 0, 1), MechanismError, "lattice (K, the number of lattice steps"),
    ("bern-lattice-neg", C(mechanisms.Bernstein, 1.0, -4, 1), MechanismError, "must be an integer >= 1, got -4"),
    ("bern-lattice-float", C(mechanisms.Bernstein, 1.0, 4.5, 1), MechanismTypeError, "lattice (K"),
    ("bern-lattice-str", C(mechanisms.Bernstein, 1.0, "4", 1), MechanismTypeError, "lattice (K"),
    ("bern-lattice-bool", C(mechanisms.Bernstein, 1.0, True, 1), MechanismTypeError, "lattice (K"),
    ("bern-lattice-none", C(mechanisms.Bernstein, 1.0, None, 1), MechanismTypeError, "lattice (K"),
    ("bern-lattice-huge", C(mechanisms.Bernstein, 1.0, HUGE, 1), MechanismError, "points is too large"),
    ("bern-lattice-10M", C(mechanisms.Bernstein, 1.0, 10_000_000, 1), MechanismError, "at most 10,000,000 allowed"),
    ("bern-dims-0", C(mechanisms.Bernstein, 1.0, 4, 0), MechanismError, "dims (ℓ, the input dimension of F)"),
    ("bern-dims-huge", C(mechanisms.Bernstein, 1.0, 4, HUGE), MechanismError, "points is too large"),
    ("bern-dims-24", C(mechanisms.Bernstein, 1.0, 1, 24), MechanismError, "points is too large"),
    ("bern-order-0", C(mechanisms.Bernstein, 1.0, 4, 1, 0), MechanismError, "order (h, the iterated Bernstein order)"),
    ("bern-order-41", C(mechanisms.Bernstein, 1.0, 4, 1, 41), MechanismError, "must be at most 40, got 41"),
    ("bern-order-huge", C(mechanisms.Bernstein, 1.0, 4, 1, HUGE), MechanismError, "must be at most 40"),
    ("bern-order-matrix", C(mechanisms.Bernstein, 1.0, 5000, 1, 2), MechanismError,
     "order h > 1 needs lattice K <= 3161"),
    ("bern-approx-lattice-0", C(mechanisms.bernstein_approximation, lambda y: y[:, 0], 0, 1), MechanismError,
     "lattice (K"),
    ("bern-approx-wrong-size", C(mechanisms.bernstein_approximation, np.zeros(3), 4, 1), TargetError,
     "expected (K+1)^ℓ = 5 lattice values"),
    ("bern-release-coefficients", C(mechanisms.BernsteinRelease, np.zeros(3), 4, 1), MechanismError,
     "expected (K+1)^ℓ = 5 coefficients"),
    ("bern-poly-outside", C(_POLY, np.array([1.5])), MechanismError, "must lie in [0, 1]"),
    ("bern-poly-nan", C(_POLY, np.array([NAN])), MechanismError, "must lie in [0, 1]"),
    ("bern-poly-shape", C(_POLY, np.zeros((2, 3))), MechanismError, "query points must have shape (q, 1)"),
    # --- releases: sensitivity and target output
    ("release-sens-nan", C(_L.release, [1.0], NAN), MechanismError, "sensitivity must be a finite real number >= 0"),
    ("release-sens-inf", C(_L.release, [1.0], INF), MechanismError, "an infinite estimate means"),
    ("release-sens-neg", C(_L.release, [1.0], -1.0), MechanismError, "sensitivity must be a finite real number >= 0"),
    ("release-sens-str", C(_L.release, [1.0], "1"), MechanismTypeError, "sensitivity must be a finite real number >= 0"),
    ("release-sens-none", C(_L.release, [1.0], None), MechanismTypeError, "sensitivity must be a finite real number"),
    ("release-noise-overflow", C(mechanisms.Laplace(1e-300).release, [1.0], 1e300), MechanismError,
     "noise scale must be a finite real number"),
    ("release-value-str", C(_L.release, ["a"], 1.0), TargetError, "target output must be numeric array-like"),
    ("release-value-nan", C(_L.release, [NAN], 1.0), TargetError, "contains NaN or inf"),
    ("release-value-ragged", C(_L.release, [[1.0], [1.0, 2.0]], 1.0), TargetError, "numeric array-like"),
    ("exp-release-wrong-count", C(_E2.release, [1.0, 2.0, 3.0], 1.0), TargetError, "expected 2 scores"),
    ("exp-release-score-str", C(_E2.release, lambda r: "high", 1.0), TargetError,
     "must return one real number per response"),
    ("exp-release-nan", C(_E2.release, [NAN, 1.0], 1.0), TargetError, "scores contains NaN or inf"),
    ("bern-release-wrong-size", C(_B4.release, lambda y: np.zeros(3), 1.0), TargetError,
     "F must map a (5, 1) array of points to 5 values"),
    # --- oracles
    ("oracle-rate-0", C(oracles.exponential, 0), OracleError, "rate must be > 0"),
    ("oracle-rate-neg", C(oracles.exponential, -1.0), OracleError, "rate must be > 0"),
    ("oracle-rate-nan", C(oracles.exponential, NAN), OracleError, "rate must be finite"),
    ("oracle-rate-inf", C(oracles.exponential, INF), OracleError, "rate must be finite"),
    ("oracle-rate-str", C(oracles.exponential, "1"), OracleError, "rate must be a finite real number"),
    ("oracle-rate-bool", C(oracles.exponential, True), OracleError, "rate must be a finite real number"),
    ("oracle-rate-none", C(oracles.exponential, None), OracleError, "rate must be a finite real number"),
    ("normal-sd-0", C(oracles.normal, 0.0, 0.0), OracleError, "sd must be > 0"),
    ("normal-vector-no-dim", C(oracles.normal, [0.0, 1.0]), OracleError, "must be a scalar when dim is None"),
    ("normal-vector-wrong-len", C(oracles.normal, [0.0, 1.0, 2.0], 1.0, 2), OracleError, "length-2 vector"),
    ("normal-dim-0", C(oracles.normal, dim=0), OracleError, "dim must be None (scalar records) or a positive integer"),
    ("normal-dim-float", C(oracles.normal, dim=2.0), OracleTypeError, "dim must be None"),
    ("normal-dim-bool", C(oracles.normal, dim=True), OracleTypeError, "dim must be None"),
    ("uniform-low-high", C(oracles.uniform, 1.0, 0.0), OracleError, "uniform needs low < high"),
    ("uniform-nan", C(oracles.uniform, NAN), OracleError, "low must be finite"),
    ("mixture-sum", C(oracles.gaussian_mixture, [0.5], [0.0], [1.0]), OracleError, "weights must sum to 1"),
    ("mixture-lengths", C(oracles.gaussian_mixture, [0.5, 0.5], [0.0], [1.0]), OracleError, "same length"),
    ("mixture-sd-0", C(oracles.gaussian_mixture, [1.0], [0.0], [0.0]), OracleError, "sds must be > 0"),
    ("mixture-negative-weight", C(oracles.gaussian_mixture, [-1.0, 2.0], [0, 1], [1, 1]), OracleError,
     "weights must be >= 0"),
    ("mixture-empty", C(oracles.gaussian_mixture, [], [], []), OracleError, "non-empty 1-D sequence"),
    ("mixture-scale", C(oracles.gaussian_mixture, [1.0], [0.0], [1.0], "std"), OracleError,
     "scale must be 'sd'"),
    ("mixture-nan", C(oracles.gaussian_mixture, [1.0], [NAN], [1.0]), OracleError, "means must be finite"),
    ("svm-oracle-dim-0", C(oracles.svm_two_class, 0), OracleError, "dim must be a positive integer"),
    ("svm-oracle-dim-none", C(oracles.svm_two_class, None), OracleTypeError, "dim must be a positive integer"),
    ("bootstrap-missing-file", C(oracles.bootstrap, "/no/such/file.csv"), OracleError, "does not exist"),
    ("bootstrap-directory", lambda c: oracles.bootstrap(c.tmp), OracleError, "is a directory, not a regular file"),
    ("bootstrap-unknown-format", lambda c: oracles.bootstrap(c.file), OracleError, "cannot tell the format"),
    ("bootstrap-text-column", lambda c: oracles.bootstrap(c.text_csv), OracleError, "non-numeric columns: name"),
    ("bootstrap-missing-values", lambda c: oracles.bootstrap(c.gaps_csv), OracleError, "missing values"),
    ("bootstrap-no-rows", lambda c: oracles.bootstrap(c.empty_parquet), OracleError, "has no rows"),
    ("bootstrap-int", C(oracles.bootstrap, 5), OracleError, "must be a Parquet/CSV file path"),
    ("bootstrap-empty-array", C(oracles.bootstrap, np.zeros(0)), OracleError, "at least one row"),
    ("bootstrap-3d", C(oracles.bootstrap, np.zeros((2, 2, 2))), OracleError, "1-D or 2-D"),
    ("bootstrap-str-array", C(oracles.bootstrap, np.array(["a"])), OracleError, "integer or floating dtype"),
    ("bootstrap-nan-array", C(oracles.bootstrap, np.array([1.0, NAN])), OracleError, "NaN or infinite"),
    ("as-oracle-none", C(oracles.as_oracle, None), OracleError, "callable sample(rng, size)"),
    ("as-oracle-function", C(oracles.as_oracle, lambda rng, n: None), OracleError, "callable sample(rng, size)"),
    ("check-records-list", C(oracles.check_records, [1.0, 2.0], 2), OracleError, "must return a numpy array"),
    ("check-records-count", C(oracles.check_records, np.zeros(3), 2), OracleError, "returned 3 records"),
    ("check-records-0d", C(oracles.check_records, np.array(1.0), 1), OracleError, "0-d array"),
    ("check-records-scalar", C(oracles.check_records, np.float64(1.0), 1), OracleError, "oracle returned float64"),
    ("check-records-str", C(oracles.check_records, np.array(["a"]), 1), OracleError, "records must be real numbers"),
    ("check-records-complex", C(oracles.check_records, np.ones(1, complex), 1), OracleError, "must be real numbers"),
    ("check-records-nan", C(oracles.check_records, np.array([NAN]), 1), OracleError, "NaN or infinite"),
    ("sample-size-neg", C(oracles.exponential(1.0).sample, _rng, -1), OracleError, "size must be an integer"),
    ("sample-size-float", C(oracles.exponential(1.0).sample, _rng, 2.0), OracleTypeError, "size must be an integer"),
    ("sample-size-huge", C(oracles.exponential(1.0).sample, _rng, HUGE), OracleError, "[0, 2**63 - 1]"),
    # --- targets
    ("quantile-q-1.5", C(targets.quantile, 1.5), TargetError, "q must be in [0, 1]"),
    ("quantile-q-nan", C(targets.quantile, NAN), TargetError, "q must be finite"),
    ("quantile-q-str", C(targets.quantile, "0.5"), TargetError, "q must be a finite real number"),
    ("svm-C-0", C(targets.svm, C=0.0), TargetError, "C must be > 0 and finite"),
    ("svm-tol-nan", C(targets.svm, tol=NAN), TargetError, "tol must be > 0 and finite"),
    ("svm-max-iter-0", C(targets.svm, max_iter=0), TargetError, "max_iter must be a positive integer"),
    ("svm-max-iter-float", C(targets.svm, max_iter=1e6), TargetTypeError, "max_iter must be a positive integer"),
    ("kde-bandwidth-0", C(targets.kde, 0.0), TargetError, "bandwidth must be > 0 and finite"),
    ("kde-kernel", C(targets.kde, 0.1, kernel="box"), TargetError, "kernel must be one of ['gaussian']"),
    ("as-target-none", C(targets.as_target, None), TargetError, "a target must be callable"),
    ("as-target-int", C(targets.as_target, 5), TargetError, "a target must be callable"),
    ("mean-of-str", C(targets.mean(), "abc"), TargetError, "database must be a numeric array"),
    ("mean-of-empty", C(targets.mean(), []), TargetError, "database has no records"),
    ("mean-of-scalar", C(targets.mean(), 5.0), TargetError, "records on axis 0"),
    ("svm-one-class", C(targets.svm(), np.ones((4, 3))), TargetError, "single class"),
    ("svm-labels", C(targets.svm(), np.column_stack([[0.0, 1.0, 0.0], np.ones((3, 2))])), TargetError,
     "must be +1 or -1"),
    ("svm-shape", C(targets.svm(), np.ones(4)), TargetError, "shape (n, d + 1)"),
    ("kde-vector-records", C(targets.kde(0.1), np.ones((3, 2))), TargetError, "kde needs scalar records"),
    ("kde-function-2d", C(targets.KDEFunction(np.ones(3), 0.1), np.ones((2, 2))), TargetError, "KDE is 1-D"),
    # --- estimate_sensitivity: n, seed, block size, backend, flags, options
    ("est-n-0", lambda c: _est(n=0), InvalidArgumentError, "n must be an integer >= 1, got 0"),
    ("est-n-neg", lambda c: _est(n=-1), InvalidArgumentError, "n must be an integer >= 1"),
    ("est-n-float", lambda c: _est(n=5.0), InvalidTypeError, "n must be an integer >= 1, got 5.0"),
    ("est-n-str", lambda c: _est(n="5"), InvalidTypeError, "n must be an integer >= 1"),
    ("est-n-none", lambda c: _est(n=None), InvalidTypeError, "n must be an integer >= 1"),
    ("est-n-bool", lambda c: _est(n=True), InvalidTypeError, "n must be an integer >= 1"),
    ("est-n-huge", lambda c: _est(n=HUGE), InvalidArgumentError, "block_size * (n + 1) must be at most 2**63 - 1"),
    ("est-seed-neg", lambda c: _est(seed=-1), InvalidArgumentError, "seed must be a non-negative integer or None"),
    ("est-seed-float", lambda c: _est(seed=1.0), InvalidTypeError, "seed must be a non-negative integer"),
    ("est-seed-np-float", lambda c: _est(seed=np.float64(1)), InvalidTypeError, "seed must be a non-negative integer"),
    ("est-seed-str", lambda c: _est(seed="1"), InvalidTypeError, "seed must be a non-negative integer"),
    ("est-seed-bool", lambda c: _est(seed=True), InvalidTypeError, "seed must be a non-negative integer"),
    ("est-block-0", lambda c: _est(block_size=0), InvalidArgumentError, "block_size must be an integer >= 1"),
    ("est-block-float", lambda c: _est(block_size=2.5), InvalidTypeError, "block_size must be an integer >= 1"),
    ("est-block-huge", lambda c: _est(block_size=HUGE), InvalidArgumentError, "block_size * (n + 1)"),
    ("est-backend", lambda c: _est(backend="spark"), InvalidArgumentError, "backend must be one of local, ray, auto"),
    ("est-backend-case", lambda c: _est(backend="Local"), InvalidArgumentError, "backend must be one of local, ray, auto"),
    ("est-backend-none", lambda c: _est(backend=None), InvalidArgumentError, "backend must be one of"),
    ("est-strict-str", lambda c: _est(strict="yes"), InvalidTypeError, "strict must be True or False, got 'yes'"),
    ("est-progress-none", lambda c: _est(progress=None), InvalidTypeError, "progress must be True or False"),
    ("est-keep-sample-int", lambda c: _est(keep_sample=1), InvalidTypeError, "keep_sample must be True or False"),
    ("est-resume-str", lambda c: _est(resume="no"), InvalidTypeError, "resume must be True or False"),
    ("est-resume-no-store", lambda c: _est(resume=True), InvalidArgumentError, "resume=True needs a store"),
    ("est-unknown-option", lambda c: _est(foo=1), InvalidArgumentError, "unknown option(s) foo for the local backend"),
    ("est-address-local", lambda c: _est(address="127.0.0.1:6379"), InvalidArgumentError,
     "unknown option(s) address for the local backend"),
    ("est-unknown-option-ray", lambda c: _est(backend="ray", foo=1), InvalidArgumentError,  # refused before Ray starts
     "unknown option(s) foo for the ray backend"),
    ("est-unknown-option-auto", lambda c: _est(backend="auto", foo=1), InvalidArgumentError,
     "unknown option(s) foo for the auto backend"),
    ("est-auto-local-seconds", lambda c: _est(backend=raydp.AutoBackend(local_seconds=-1.0)), InvalidArgumentError,
     "local_seconds must be"),
    ("est-flush-without-store", lambda c: _est(flush_rows=10), InvalidArgumentError, "option(s) flush_rows need store="),
    ("est-task-timeout-local", lambda c: _est(task_timeout=5.0), InvalidArgumentError, "task_timeout needs the Ray backend"),
    ("est-pair-timeout-neg", lambda c: _est(pair_timeout=-1.0), InvalidArgumentError, "pair_timeout must be a positive"),
    ("est-plan-gamma", lambda c: _est(m=None, gamma=2.0), PlanError, "real number in (0, 1)"),
    ("est-plan-none", lambda c: _est(m=None), PlanError, "give gamma, or m"),
    ("est-plan-m-huge", lambda c: _est(m=HUGE), PlanError, "at most 2**53"),
    ("est-mechanism-str", lambda c: _est(mechanism="cauchy"), InvalidArgumentError,
     "mechanism must be a name ('laplace', 'gaussian', 'exponential', 'bernstein') or a raydp mechanism, got 'cauchy'"),
    ("est-mechanism-object", lambda c: _est(mechanism=object()), InvalidArgumentError,
     "mechanism must be a raydp mechanism (missing .name, .norm, .embed"),
    ("est-mechanism-class", lambda c: _est(mechanism=int), InvalidArgumentError, "mechanism must be a raydp mechanism"),
    # store URIs
    ("est-store-scheme", lambda c: _est(store="foo://x"), StoreError, "cannot open store 'foo://x'"),
    ("est-store-file", lambda c: _est(store=c.file), StoreError, "is a file; a store is a directory"),
    ("est-store-bool", lambda c: _est(store=True), InvalidTypeError,
     "store must be a path, a URI or a raydp Store, got bool"),
    ("est-store-empty", lambda c: _est(store=""), StoreError, "store must be a path or URI string"),
    ("est-store-taken", lambda c: _est(store=c.store), StoreError, "already holds a run"),
    ("est-store-other-run", lambda c: _est(store=c.store, resume=True, n=6, seed=1), StoreError,
     "holds a different run (n: stored 5, asked 6)"),
    ("est-store-smaller-m", lambda c: _est(store=c.store, resume=True, m=20, seed=1), StoreError,
     "holds m=50 pairs"),
    # targets and oracles that do not work
    ("est-target-none", lambda c: _est(target=None), TargetError, "a target must be callable"),
    ("est-target-str-output", lambda c: _est(target=returns_str), TargetError,
     "does not fit the laplace mechanism"),
    ("est-target-dict-output", lambda c: _est(target=returns_dict), TargetError, "does not fit the laplace mechanism"),
    ("est-target-empty-output", lambda c: _est(target=returns_empty), TargetError, "expected a non-empty vector"),
    ("est-target-raises", lambda c: _est(target=raises), TargetError, "ZeroDivisionError on a probe database"),
    ("est-target-changing-strict", lambda c: _est(target=ChangingShape(), strict=True), TargetError,
     "wrong output shape"),
    ("est-target-none-strict", lambda c: _est(target=returns_none, strict=True), TargetError,
     "returned a non-finite value"),
    ("est-target-exp-scores", lambda c: _est(mechanism=mechanisms.Exponential(1.0, [1, 2, 3])), TargetError,
     "expected 3 scores"),
    ("est-oracle-none", lambda c: _est(oracle=None), OracleError, "callable sample(rng, size)"),
    ("est-oracle-nan", lambda c: _est(oracle=nan_oracle), OracleError, "NaN or infinite values"),
    ("est-oracle-inf", lambda c: _est(oracle=inf_oracle), OracleError, "NaN or infinite values"),
    ("est-oracle-list", lambda c: _est(oracle=list_oracle), OracleError, "oracle returned list"),
    ("est-oracle-short", lambda c: _est(oracle=short_oracle), OracleError, "returned 4 records (shape (4,))"),
    ("est-oracle-transposed", lambda c: _est(oracle=transposed_oracle), OracleError, "returned 1 records"),
    ("est-oracle-scalar", lambda c: _est(oracle=scalar_oracle), OracleError, "oracle returned float64"),
    ("est-oracle-returns-none", lambda c: _est(oracle=none_oracle), OracleError, "oracle returned NoneType"),
    ("est-oracle-str", lambda c: _est(oracle=str_oracle), OracleError, "records must be real numbers"),
    ("est-oracle-complex", lambda c: _est(oracle=complex_oracle), OracleError, "records must be real numbers"),
    ("est-oracle-raises", lambda c: _est(oracle=raising_oracle), OracleError,
     "oracle.sample(rng, 5) raised RuntimeError: no data today"),
    # --- load_estimate: URIs, stores, γ
    ("load-missing", lambda c: raydp.load_estimate(os.path.join(c.tmp, "nothing")), StoreError, "no raydp store at"),
    ("load-file", lambda c: raydp.load_estimate(c.file), StoreError, "is a file; a store is a directory"),
    ("load-scheme", C(raydp.load_estimate, "foo://x"), StoreError, "Unrecognized filesystem type"),
    ("load-none", C(raydp.load_estimate, None), StoreError, "store must be a path or URI string, got None"),
    ("load-int", C(raydp.load_estimate, 5), StoreError, "store must be a path or URI string"),
    ("load-empty", C(raydp.load_estimate, ""), StoreError, "store must be a path or URI string"),
    ("load-meta-not-json", lambda c: raydp.load_estimate(c.meta_not_json), StoreError, "cannot read meta.json"),
    ("load-meta-list", lambda c: raydp.load_estimate(c.meta_list), StoreError, "is not a JSON object"),
    ("load-meta-no-plan", lambda c: raydp.load_estimate(c.meta_no_plan), StoreError, "malformed meta.json (KeyError"),
    ("load-meta-bad-m", lambda c: raydp.load_estimate(c.meta_bad_m), StoreError, "malformed meta.json (ValueError"),
    ("load-meta-inf-m", lambda c: raydp.load_estimate(c.meta_inf_m), StoreError, "malformed meta.json"),
    ("load-meta-no-oracle", lambda c: raydp.load_estimate(c.meta_no_oracle), StoreError,
     "malformed meta.json (KeyError: 'oracle')"),
    ("load-meta-breaks-thm15", lambda c: raydp.load_estimate(c.meta_bad_plan), StoreError, "holds an invalid run"),
    ("load-gamma-0", lambda c: raydp.load_estimate(c.store, gamma=0.0), PlanError, "real number in (0, 1)"),
    ("load-gamma-nan", lambda c: raydp.load_estimate(c.store, gamma=NAN), PlanError, "real number in (0, 1)"),
    ("load-gamma-str", lambda c: raydp.load_estimate(c.store, gamma="0.3"), PlanTypeError, "gamma must be a real number"),
    ("load-gamma-too-small", lambda c: raydp.load_estimate(c.store, gamma=1e-300), PlanError,
     "smallest gamma that m=50 pairs can certify"),
    # --- sample_then_respond: data, estimate, mechanism, target
    ("str-data-none", _str(data=None), InvalidArgumentError, "data must be an array with records along the first axis"),
    ("str-data-empty", _str(data=[]), InvalidArgumentError, "got shape (0,)"),
    ("str-data-scalar", _str(data=5.0), InvalidArgumentError, "got shape ()"),
    ("str-data-no-rows", _str(data=np.zeros((0, 3))), InvalidArgumentError, "got shape (0, 3)"),
    ("str-data-ragged", _str(data=[[1.0, 2.0], [3.0]]), InvalidArgumentError, "data must be an array"),
    # a non-finite answer is the target's failure, checked in the caller (raydp.seal): nothing of it comes back
    ("str-data-nan", _str(data=np.full(5, NAN)), TargetError, "not a value of its output dimension"),
    ("str-data-size", _str(data=np.ones(6)), EstimateMismatchError, "computed for n=5 records, the data has n=6"),
    ("str-estimate-str", _str(estimate="delta.parquet"), InvalidArgumentError, "estimate must be a SensitivityEstimate"),
    ("str-estimate-dict", _str(estimate={}), InvalidArgumentError, "estimate must be a SensitivityEstimate"),
    ("str-mechanism-none", _str(mechanism=None), InvalidArgumentError, "mechanism must be a raydp mechanism"),
    ("str-mechanism-str", _str(mechanism="laplace"), InvalidArgumentError, "mechanism='laplace' needs epsilon"),
    ("str-mechanism-unknown", _str(mechanism="cauchy"), InvalidArgumentError, "mechanism must be a name"),
    ("str-mechanism-disagrees", _str(epsilon=2.0), InvalidArgumentError, "give ε and δ once"),
    ("str-mechanism-norm", _str(mechanism=mechanisms.Gaussian(0.5, 1e-5)), EstimateMismatchError,
     "the gaussian mechanism needs l2"),
    ("str-target-none", _str(target=None), TargetError, "a target must be callable"),
    ("str-target-other", _str(target=targets.median()), EstimateMismatchError, "computed for target mean"),
    ("str-no-estimate", _str(estimate=None), InvalidArgumentError, "give either estimate="),
    ("str-estimate-and-m", _str(m=50), InvalidArgumentError, "do not also give oracle, m, k or sampler options"),
    ("str-estimate-and-seed", _str(seed=1), InvalidArgumentError, "sampler options other than replay (seed)"),
    ("str-estimate-other-gamma", _str(gamma=0.1), EstimateMismatchError, "not the gamma=0.1 asked for"),
    ("str-oracle-bad-gamma", _str(estimate=None, oracle=oracles.exponential(1.0), gamma=2.0), PlanError,
     "real number in (0, 1)"),
    ("str-oracle-bad-seed", _str(estimate=None, oracle=oracles.exponential(1.0), m=50, seed=-5), InvalidArgumentError,
     "seed must be a non-negative integer"),
]


@pytest.mark.parametrize("call, exc, fragment", [pytest.param(f, e, s, id=i) for i, f, e, s in API])
def test_api_refuses_bad_input(ctx, call, exc, fragment):
    with pytest.raises(RaydpError) as info:
        call(ctx)
    assert type(info.value) is exc, f"{type(info.value).__name__}: {info.value}"
    assert fragment in str(info.value)
    # a wrong type is a TypeError, a wrong value a ValueError (or RuntimeError): callers catching the builtin
    # keep working; a module's own family (PlanError, ...) also catches its wrong types
    wrong_type = exc in (InvalidTypeError, PlanTypeError, MechanismTypeError, OracleTypeError, TargetTypeError)
    assert isinstance(info.value, TypeError) is wrong_type
    assert wrong_type or isinstance(info.value, (ValueError, RuntimeError))
    assert exc is InvalidTypeError or isinstance(info.value, (ValueError, RuntimeError))


def test_api_ids_are_unique():
    assert len({row[0] for row in API}) == len(API)


# ----------------------------------------------------------------------------- not errors, on purpose


def test_target_failing_on_sampled_pairs_counts_them_as_infinite():
    # Changing output shape is caught per pair (G = +∞), never dropped; only strict mode raises.
    est = _est(target=ChangingShape())
    assert est.failures == 50 and est.failure_kinds == {"wrong output shape": 50}
    assert est.sensitivity == INF
    with pytest.raises(TargetError, match="non-finite value"):  # None embeds as NaN on the probe too:
        _est(target=returns_none)  # every pair would fail, so the run is refused up front


def test_extreme_but_valid_values_give_numbers_not_nan():
    assert mechanisms.Laplace(1.0).variance(1e300) == INF  # overflows to inf, no OverflowError
    assert mechanisms.Gaussian(0.5, 1e-5).variance(1e300) == INF
    p = mechanisms.Exponential(1e308, ["a", "b"]).probabilities([0.0, 1e10], 1.0)
    assert p.tolist() == [0.0, 1.0]
    p = mechanisms.Exponential(1.0, ["a", "b"]).probabilities([-1e308, 1e308], 1e-300)
    assert p.tolist() == [0.0, 1.0]
    assert _est(seed=2**200).seed == 2**200  # any non-negative int seeds numpy's SeedSequence
    assert raydp.make_plan(m=2**53).satisfies_theorem15()
    assert raydp.make_plan(gamma=3.49e-8).m <= 2**53


