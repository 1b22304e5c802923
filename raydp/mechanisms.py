"""Sensitivity-induced mechanisms (Rubinstein & Aldà 2017, Corollaries 10–14).

Each mechanism owns the norm in which the sampler measures ``G = ‖f(D) − f(D′)‖``, so a sensitivity
estimate always matches the mechanism that spends it:

=============  ========  =====================================================  ==========
mechanism      norm      release with sensitivity Δ                             guarantee
=============  ========  =====================================================  ==========
Laplace        ℓ1        f(D) + Lap(Δ/ε) per coordinate                         ε-DP
Gaussian       ℓ2        f(D) + N(0, σ²) per coordinate                         (ε, δ)-DP
Exponential    ℓ∞        r with P(r) ∝ exp(ε s(D, r) / (2Δ))                    ε-DP
Bernstein      ℓ∞        Bernstein polynomial of F(D, ·) + Lap(Δ(K+1)^ℓ/ε)      ε-DP
=============  ========  =====================================================  ==========

With a *sampled* Δ̂ the guarantee becomes (ε, δ, γ)-random DP (Theorem 15). All noise comes from
OpenDP's samplers (:mod:`raydp.noise`), never from numpy.

>>> import numpy as np
>>> mech = Laplace(epsilon=1.0)
>>> mech.norm, mech.noise_scale(0.5)
('l1', 0.5)
>>> mech.release(np.zeros((2, 2)), sensitivity=0.5).shape
(2, 2)
"""

from __future__ import annotations

import math
import sys
from numbers import Real
from typing import Any, Sequence

import numpy as np
from scipy import optimize, special

from raydp import noise
from raydp.errors import MechanismError, TargetError

__all__ = [
    "Mechanism",
    "Laplace",
    "Gaussian",
    "Exponential",
    "Bernstein",
    "BernsteinRelease",
    "bernstein_approximation",
    "analytic_gaussian_sigma",
]

# Lattices beyond this many points are refused: every sampled database would need that many target
# evaluations, and the noise scale Δ(K+1)^ℓ/ε would swamp any signal long before.
_MAX_LATTICE_POINTS = 10_000_000
# The order-h coefficients Σ (−1)^{i+1} C(h, i) A^{i−1} F cancel terms of size ~2^h: rounding error
# grows like 2^h·ε_machine and swamps the approximation from h ≈ 50 on (measured: sin(6y), K = 10).
_MAX_ORDER = 40
# The analytic Gaussian calibration is verified to bracket and solve its root for every δ in
# [smallest normal float, 1) when ε lies in this range (outside it log Φ under/overflows).
_ANALYTIC_EPSILON_RANGE = (1e-100, 1e15)


# ---------------------------------------------------------------------------------------------------
# validation helpers


def _check_epsilon(epsilon, what: str = "epsilon") -> float:
    if isinstance(epsilon, bool) or not isinstance(epsilon, Real):
        raise MechanismError(f"{what} must be a real number > 0, got {epsilon!r}")
    eps = float(epsilon)
    if not math.isfinite(eps) or eps <= 0:
        raise MechanismError(f"{what} must be finite and > 0, got {eps!r}")
    return eps


def _check_delta(delta) -> float:
    if isinstance(delta, bool) or not isinstance(delta, Real):
        raise MechanismError(f"delta must be a real number in (0, 1), got {delta!r}")
    d = float(delta)
    if not (0.0 < d < 1.0):  # also refuses NaN
        raise MechanismError(f"delta must lie strictly between 0 and 1, got {d!r}")
    return d


def _check_sensitivity(sensitivity) -> float:
    if isinstance(sensitivity, bool) or not isinstance(sensitivity, Real):
        raise MechanismError(f"sensitivity must be a real number >= 0, got {sensitivity!r}")
    s = float(sensitivity)
    if math.isnan(s) or math.isinf(s) or s < 0:
        raise MechanismError(
            f"sensitivity must be finite and >= 0 (0 means no noise is needed), got {s!r}; "
            "an infinite estimate means some sampled pair could not be bounded"
        )
    return s


def _check_positive_int(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise MechanismError(f"{what} must be an integer >= 1, got {value!r}")
    if int(value) < 1:
        raise MechanismError(f"{what} must be an integer >= 1, got {int(value)}")
    return int(value)


def _as_float_array(value, what: str) -> np.ndarray:
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TargetError(f"{what} must be numeric array-like, got {type(value).__name__}: {exc}") from None


def _require_finite(vec: np.ndarray, what: str) -> None:
    if not np.all(np.isfinite(vec)):
        raise TargetError(f"{what} contains NaN or inf; a private release needs finite values")


# ---------------------------------------------------------------------------------------------------
# base class


class Mechanism:
    """Base class: a privacy mechanism that owns its norm.

    Subclasses set ``name`` and ``norm`` and implement :meth:`release` and :meth:`noise_scale`.
    """

    name: str = "mechanism"
    norm: str = "l2"

    def __init__(self, epsilon: float, delta: float = 0.0):
        self._epsilon = _check_epsilon(epsilon)
        pure = not isinstance(delta, bool) and isinstance(delta, Real) and delta == 0
        self._delta = 0.0 if pure else _check_delta(delta)

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
        return _as_float_array(value, "target output").ravel()

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

    # -- provenance ---------------------------------------------------------------------------------
    def _params(self) -> dict:
        return {"epsilon": self._epsilon}

    def identity(self) -> dict:
        """``{"name": ..., "params": {...}}``: JSON-able, equal for equally configured mechanisms."""
        return {"name": self.name, "params": self._params()}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._params().items())
        return f"{type(self).__name__}({args})"


# ---------------------------------------------------------------------------------------------------
# Laplace


class Laplace(Mechanism):
    """Laplace mechanism: ``f(D) + Lap(Δ/ε)`` on every coordinate; ℓ1 sensitivity; ε-DP.

    Parameters
    ----------
    epsilon : float
        Privacy parameter, finite and > 0.

    The release has the shape of the target's output (scalars come back as 0-d arrays).

    >>> mech = Laplace(epsilon=0.5)
    >>> mech.noise_scale(1.0), mech.variance(1.0)
    (2.0, 8.0)
    >>> mech.release([1.0, 2.0, 3.0], sensitivity=0.0)   # Δ = 0: nothing to hide
    array([1., 2., 3.])
    """

    name = "laplace"
    norm = "l1"

    def noise_scale(self, sensitivity: float) -> float:
        """Laplace scale ``b = Δ/ε``."""
        return _check_sensitivity(sensitivity) / self._epsilon

    def variance(self, sensitivity: float) -> float:
        """Noise variance per coordinate, ``2 b²``."""
        b = self.noise_scale(sensitivity)
        return 2.0 * b * b  # float ** 2 raises OverflowError for b > 1e154; b * b gives inf

    def release(self, value, sensitivity: float) -> np.ndarray:
        """``value`` + Laplace(Δ/ε) noise, with ``value``'s shape."""
        scale = self.noise_scale(sensitivity)
        arr = _as_float_array(value, "target output")
        vec = arr.ravel()
        _require_finite(vec, "target output")
        return noise.laplace(vec, scale).reshape(arr.shape)


# ---------------------------------------------------------------------------------------------------
# Gaussian


def _bw_excess(r: float, epsilon: float) -> float:
    """Balle & Wang's ``Φ(1/(2r) − εr) − e^ε Φ(−1/(2r) − εr)`` with ``r = σ/Δ``, in log space."""
    u = 0.5 / r - epsilon * r
    v = -0.5 / r - epsilon * r
    lu = special.log_ndtr(u)
    lv = special.log_ndtr(v)
    # Φ(u) (1 − e^{ε + log Φ(v) − log Φ(u)}): no overflow of e^ε, no cancellation near the root.
    return float(np.exp(lu) * -np.expm1(epsilon + lv - lu))


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest σ for which N(0, σ²) noise is (ε, δ)-DP at ℓ2 sensitivity Δ (Balle & Wang 2018, Thm 8).

    Solves ``Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ) = δ`` by Brent's method on ``log(σ/Δ)``; the left
    side decreases in σ, so the root is the smallest valid σ. Valid for 1e-100 ≤ ε ≤ 1e15 (wider ε
    under- or overflows log Φ and raises :class:`MechanismError`).

    >>> round(analytic_gaussian_sigma(1.0, 1e-5), 3) < round(math.sqrt(2 * math.log(1.25e5)), 3)
    True
    """
    eps = _check_epsilon(epsilon)
    dlt = _check_delta(delta)
    sens = _check_sensitivity(sensitivity)
    if sens == 0.0:
        return 0.0
    return _analytic_ratio(eps, dlt) * sens


def _analytic_ratio(eps: float, dlt: float) -> float:
    lo, hi = _ANALYTIC_EPSILON_RANGE
    if not lo <= eps <= hi or dlt < sys.float_info.min:
        raise MechanismError(
            f"the analytic Gaussian calibration needs {lo:g} <= epsilon <= {hi:g} and "
            f"delta >= {sys.float_info.min:.4g}, got epsilon={eps!r}, delta={dlt!r}"
        )

    def f(t: float) -> float:
        return _bw_excess(math.exp(t), eps) - dlt

    # start from the classic calibration and walk out until the root is bracketed
    t0 = math.log(math.sqrt(2.0 * math.log(1.25 / dlt)) / eps)
    lo, hi = t0 - 1.0, t0 + 1.0
    for _ in range(200):
        if f(lo) > 0:
            break
        lo -= 2.0
    for _ in range(200):
        if f(hi) <= 0:
            break
        hi += 2.0
    if not (f(lo) > 0 >= f(hi)):  # pragma: no cover - the excess goes 1 -> 0 monotonically
        raise MechanismError(f"could not calibrate the analytic Gaussian for epsilon={eps}, delta={dlt}")
    t = optimize.brentq(f, lo, hi, xtol=1e-15, rtol=4 * np.finfo(float).eps, maxiter=500)
    r = math.exp(t)
    # Brent returns a point within tolerance of the root; step up so the δ condition really holds.
    while _bw_excess(r, eps) > dlt:
        r *= 1.0 + 1e-14
    return r


class Gaussian(Mechanism):
    """Gaussian mechanism: ``f(D) + N(0, σ²)`` on every coordinate; ℓ2 sensitivity; (ε, δ)-DP.

    Parameters
    ----------
    epsilon : float
        Finite and > 0. The classic calibration needs ε < 1.
    delta : float
        In (0, 1).
    calibration : {"classic", "analytic"}
        ``"classic"`` (Dwork & Roth, Thm A.1): ``σ = Δ·sqrt(2 log(1.25/δ))/ε``, valid only for ε < 1.
        ``"analytic"`` (Balle & Wang 2018): the smallest σ satisfying their exact condition; valid for
        every ε in [1e-100, 1e15] and never larger than classic.

    >>> mech = Gaussian(epsilon=0.5, delta=1e-5)
    >>> round(mech.noise_scale(1.0), 4)
    9.6896
    >>> Gaussian(2.0, 1e-5, calibration="analytic").noise_scale(1.0) < 2.5
    True
    """

    name = "gaussian"
    norm = "l2"
    CALIBRATIONS = ("classic", "analytic")

    def __init__(self, epsilon: float, delta: float, calibration: str = "classic"):
        super().__init__(epsilon)
        self._delta = _check_delta(delta)
        if calibration not in self.CALIBRATIONS:
            raise MechanismError(
                f"calibration must be one of {self.CALIBRATIONS}, got {calibration!r}"
            )
        self.calibration = calibration
        if calibration == "classic":
            if self._epsilon >= 1.0:
                raise MechanismError(
                    f"the classic Gaussian calibration is only valid for epsilon < 1, got "
                    f"epsilon={self._epsilon}; use calibration='analytic', which is valid for every epsilon > 0"
                )
            self._ratio = math.sqrt(2.0 * math.log(1.25 / self._delta)) / self._epsilon
        else:
            self._ratio = _analytic_ratio(self._epsilon, self._delta)
        if not 0.0 < self._ratio < math.inf:  # ε so small that σ/Δ overflows
            raise MechanismError(f"epsilon={self._epsilon!r} is too small: the Gaussian noise scale overflows")

    def noise_scale(self, sensitivity: float) -> float:
        """Standard deviation σ for ℓ2 sensitivity Δ (σ is proportional to Δ)."""
        return self._ratio * _check_sensitivity(sensitivity)

    def variance(self, sensitivity: float) -> float:
        """Noise variance per coordinate, ``σ²``."""
        sigma = self.noise_scale(sensitivity)
        return sigma * sigma  # inf rather than OverflowError for huge σ

    def release(self, value, sensitivity: float) -> np.ndarray:
        """``value`` + N(0, σ²) noise, with ``value``'s shape."""
        scale = self.noise_scale(sensitivity)
        arr = _as_float_array(value, "target output")
        vec = arr.ravel()
        _require_finite(vec, "target output")
        return noise.gaussian(vec, scale).reshape(arr.shape)

    def _params(self) -> dict:
        return {"epsilon": self._epsilon, "delta": self._delta, "calibration": self.calibration}


# ---------------------------------------------------------------------------------------------------
# Exponential


def _same(a, b) -> bool:
    try:
        eq = a == b
        if isinstance(eq, np.ndarray):
            return bool(np.array_equal(a, b))
        return bool(eq)
    except Exception:  # noqa: BLE001 - incomparable objects are distinct
        return False


class Exponential(Mechanism):
    """Exponential mechanism over a finite response set; ℓ∞ sensitivity over responses; ε-DP.

    The target returns scores over ``responses``: either an array of ``len(responses)`` scores, or a
    callable ``r -> score`` that :meth:`embed` evaluates on each response. :meth:`release` returns one
    response with probability ``∝ exp(ε s(r) / (2Δ))``, sampled as report-noisy-max with Gumbel noise of
    scale ``2Δ/ε`` (OpenDP), i.e. in log space: no score range underflows. Δ = 0 gives the argmax.

    Parameters
    ----------
    epsilon : float
        Finite and > 0.
    responses : sequence
        Non-empty, distinct candidates (a list, tuple, range or 1-D array; order matters).

    >>> mech = Exponential(1.0, ["low", "mid", "high"])
    >>> mech.release([0.0, 1.0, 5.0], sensitivity=0.0)
    'high'
    >>> mech.embed(lambda r: len(r))
    array([3., 3., 4.])
    >>> mech.release([0.0, 1e6, 1e6 + 1], sensitivity=1.0) in ("mid", "high")
    True
    """

    name = "exponential"
    norm = "linf"

    def __init__(self, epsilon: float, responses: Sequence[Any]):
        super().__init__(epsilon)
        if isinstance(responses, (str, bytes)):
            raise MechanismError(
                "responses must be a sequence of candidates, got a string; wrap it in a list"
            )
        if isinstance(responses, (set, frozenset, dict)):
            raise MechanismError(
                f"responses must be an ordered sequence (list, tuple, range, 1-D array), got "
                f"{type(responses).__name__}; pass sorted(...) or list(...)"
            )
        if isinstance(responses, np.ndarray):
            if responses.ndim != 1:
                raise MechanismError(f"a responses array must be 1-D, got shape {responses.shape}")
            responses = responses.tolist()
        try:
            items = tuple(responses)
        except TypeError:
            raise MechanismError(
                f"responses must be a non-empty sequence, got {type(responses).__name__}"
            ) from None
        if len(items) == 0:
            raise MechanismError("responses must be non-empty: the mechanism needs something to select")
        try:
            distinct = len(set(items)) == len(items)
        except TypeError:  # unhashable responses: compare pairwise
            distinct = not any(
                _same(items[i], items[j]) for i in range(len(items)) for j in range(i)
            )
        if not distinct:
            raise MechanismError("responses must be distinct; found a repeated response")
        self._responses = items

    @property
    def responses(self) -> tuple:
        """The candidate responses, in order."""
        return self._responses

    def embed(self, value) -> np.ndarray:
        """Scores over the responses: from an array of ``len(responses)`` or a callable ``r -> score``."""
        k = len(self._responses)
        if callable(value):
            out = np.empty(k, dtype=np.float64)
            for i, r in enumerate(self._responses):
                s = value(r)
                try:
                    out[i] = float(np.asarray(s, dtype=np.float64).reshape(()))
                except (TypeError, ValueError):
                    raise TargetError(
                        f"the score function must return one real number per response; "
                        f"for response {r!r} it returned {s!r}"
                    ) from None
            return out
        vec = _as_float_array(value, "scores").ravel()
        if vec.size != k:
            raise TargetError(
                f"expected {k} scores (one per response), got {vec.size}; return an array of "
                "len(responses) scores or a callable response -> score"
            )
        return vec

    def noise_scale(self, sensitivity: float) -> float:
        """Gumbel noise scale ``2Δ/ε``."""
        return 2.0 * _check_sensitivity(sensitivity) / self._epsilon

    def probabilities(self, value, sensitivity: float) -> np.ndarray:
        """Exact selection probabilities ``softmax(ε s / (2Δ))`` (one-hot argmax for Δ = 0)."""
        scale = self.noise_scale(sensitivity)
        scores = self.embed(value)
        _require_finite(scores, "scores")
        if scale == 0.0:
            p = np.zeros(scores.size)
            p[int(np.argmax(scores))] = 1.0
            return p
        with np.errstate(over="ignore"):  # shift first: the top score maps to 0, so no inf - inf = NaN
            return special.softmax((scores - scores.max()) / scale)

    def release(self, value, sensitivity: float):
        """One response, chosen with probability ∝ ``exp(ε s(r) / (2Δ))``."""
        scale = self.noise_scale(sensitivity)
        scores = self.embed(value)
        _require_finite(scores, "scores")
        return self._responses[noise.noisy_max_index(scores, scale)]

    def _params(self) -> dict:
        return {"epsilon": self._epsilon, "responses": list(self._responses)}


# ---------------------------------------------------------------------------------------------------
# Bernstein


def _check_lattice(lattice, dims, order) -> tuple[int, int, int]:
    K = _check_positive_int(lattice, "lattice (K, the number of lattice steps per dimension)")
    ell = _check_positive_int(dims, "dims (ℓ, the input dimension of F)")
    h = _check_positive_int(order, "order (h, the iterated Bernstein order)")
    if h > _MAX_ORDER:
        raise MechanismError(f"order (h, the iterated Bernstein order) must be at most {_MAX_ORDER}, got {h}; "
                             "beyond that rounding error swamps the approximation")
    # 2^ℓ ≤ (K+1)^ℓ: bound ℓ first so a huge ℓ is refused without computing the power
    if ell >= _MAX_LATTICE_POINTS.bit_length() or (K + 1) ** ell > _MAX_LATTICE_POINTS:
        raise MechanismError(
            f"a lattice of (K+1)^ℓ = ({K}+1)^{ell} points is too large (at most "
            f"{_MAX_LATTICE_POINTS:,} allowed); lower lattice or dims"
        )
    if h > 1 and (K + 1) ** 2 > _MAX_LATTICE_POINTS:  # B_K is applied as a dense (K+1) x (K+1) matrix
        raise MechanismError(
            f"order h > 1 needs lattice K <= {math.isqrt(_MAX_LATTICE_POINTS) - 1} (a (K+1) x (K+1) operator "
            f"matrix), got K={K}; lower lattice or use order=1"
        )
    return K, ell, h


def _lattice_points(K: int, ell: int) -> np.ndarray:
    axis = np.arange(K + 1, dtype=np.float64) / K
    grids = np.meshgrid(*([axis] * ell), indexing="ij")
    return np.stack([g.ravel() for g in grids], axis=1)


def _basis(y: np.ndarray, K: int) -> np.ndarray:
    """``(q,) -> (q, K+1)``: ``C(K, ν) y^ν (1 − y)^{K−ν}``, in log space (stable for large K)."""
    nu = np.arange(K + 1, dtype=np.float64)
    logc = special.gammaln(K + 1.0) - special.gammaln(nu + 1.0) - special.gammaln(K - nu + 1.0)
    y = np.asarray(y, dtype=np.float64)[:, None]
    return np.exp(logc + special.xlogy(nu, y) + special.xlog1py(K - nu, -y))


def _apply_operator(values: np.ndarray, K: int, ell: int) -> np.ndarray:
    """Lattice values of ``B_K g`` from the lattice values of ``g`` (the tensor-product matrix A)."""
    A1 = _basis(np.arange(K + 1, dtype=np.float64) / K, K)  # A1[i, ν] = b_ν(i/K)
    T = values.reshape((K + 1,) * ell)
    for axis in range(ell):
        T = np.moveaxis(np.tensordot(A1, T, axes=([1], [axis])), 0, axis)
    return T.ravel()


def _coefficients(lattice_values: np.ndarray, K: int, ell: int, h: int) -> np.ndarray:
    """``c = Σ_{i=1..h} (−1)^{i+1} C(h, i) A^{i−1} F_L`` — the operator ``I − (I − B_K)^h``."""
    c = np.zeros_like(lattice_values)
    v = lattice_values
    for i in range(1, h + 1):
        c = c + ((-1) ** (i + 1)) * math.comb(h, i) * v
        if i < h:
            v = _apply_operator(v, K, ell)
    return c


class BernsteinRelease:
    """A released (or exact) Bernstein polynomial on ``[0, 1]^ℓ``.

    Callable on query points: ``(q, ℓ)`` arrays give ``(q,)`` values; for ℓ = 1 a 1-D array of ``q``
    points gives ``(q,)`` and a scalar gives a float; for ℓ > 1 a single point of length ℓ gives a float.
    Picklable (plain arrays).

    Attributes
    ----------
    coefficients : ndarray, ((K+1)^ℓ,)
        Coefficients of the Bernstein basis, C-order over the lattice multi-index ν.
    lattice_values : ndarray, ((K+1)^ℓ,)
        The (noisy) values on the lattice the polynomial was built from.
    lattice, dims, order : int
        K, ℓ, h.
    noise_scale : float
        Laplace scale added at each lattice point (0.0 for :func:`bernstein_approximation`).
    """

    def __init__(self, coefficients, lattice: int, dims: int, order: int = 1,
                 lattice_values=None, noise_scale: float = 0.0):
        self.lattice, self.dims, self.order = _check_lattice(lattice, dims, order)
        self.coefficients = np.asarray(coefficients, dtype=np.float64).ravel()
        if self.coefficients.size != (self.lattice + 1) ** self.dims:
            raise MechanismError(
                f"expected (K+1)^ℓ = {(self.lattice + 1) ** self.dims} coefficients, got {self.coefficients.size}"
            )
        self.lattice_values = None if lattice_values is None else np.asarray(lattice_values, dtype=np.float64).ravel()
        self.noise_scale = float(noise_scale)

    def __call__(self, points):
        K, ell = self.lattice, self.dims
        y = np.asarray(points, dtype=np.float64)
        scalar = False
        if y.ndim == 0 and ell == 1:
            y, scalar = y.reshape(1, 1), True
        elif y.ndim == 1 and ell == 1:
            y = y[:, None]
        elif y.ndim == 1 and y.size == ell:
            y, scalar = y[None, :], True
        if y.ndim != 2 or y.shape[1] != ell:
            raise MechanismError(
                f"query points must have shape (q, {ell})" + (" or (q,)" if ell == 1 else "")
                + f", got shape {np.shape(points)}"
            )
        if not np.all((y >= 0.0) & (y <= 1.0)):  # also refuses NaN
            raise MechanismError("query points must lie in [0, 1]^ℓ (the Bernstein polynomial's domain)")
        q = y.shape[0]
        out = np.empty(q, dtype=np.float64)
        # bound the working array q_chunk * (K+1)^(ℓ-1) to a few million floats
        chunk = max(1, 4_000_000 // max(1, (K + 1) ** (ell - 1)))
        for start in range(0, q, chunk):
            yc = y[start:start + chunk]
            R = _basis(yc[:, 0], K) @ self.coefficients.reshape(K + 1, -1)  # (qc, (K+1)^(ℓ-1))
            for j in range(1, ell):
                R = np.einsum("qa,qab->qb", _basis(yc[:, j], K), R.reshape(yc.shape[0], K + 1, -1))
            out[start:start + chunk] = R.reshape(-1)
        return float(out[0]) if scalar else out

    def __repr__(self) -> str:
        return (f"BernsteinRelease(lattice={self.lattice}, dims={self.dims}, order={self.order}, "
                f"noise_scale={self.noise_scale!r})")


def _lattice_values(F, K: int, ell: int) -> np.ndarray:
    p = (K + 1) ** ell
    if callable(F):
        pts = _lattice_points(K, ell)
        raw = F(pts)
        vals = _as_float_array(raw, "F(lattice points)").ravel()
        if vals.size != p:
            raise TargetError(
                f"F must map a ({p}, {ell}) array of points to {p} values, got {vals.size} values; "
                "vectorise F over the rows of its input"
            )
        return vals
    vals = _as_float_array(F, "lattice values").ravel()
    if vals.size != p:
        raise TargetError(
            f"expected (K+1)^ℓ = {p} lattice values (C-order over the lattice), got {vals.size}; "
            "or return a callable F(points) instead"
        )
    return vals


def bernstein_approximation(F, lattice: int, dims: int, order: int = 1) -> BernsteinRelease:
    """The (iterated) Bernstein approximation of F on ``[0, 1]^ℓ``, without noise.

    ``F`` is a vectorised callable ``(p, ℓ) -> (p,)`` or the ``(K+1)^ℓ`` lattice values (C-order).
    Order h applies Micchelli's ``I − (I − B_K)^h``; h = 1 is the plain Bernstein polynomial
    ``Σ_ν F(ν/K) Π_j C(K, ν_j) y_j^{ν_j} (1 − y_j)^{K − ν_j}``.

    >>> p = bernstein_approximation(lambda y: 2 * y[:, 0] + 1, lattice=4, dims=1)
    >>> p(np.array([0.0, 0.3, 1.0]))       # Bernstein operators reproduce linear functions
    array([1. , 1.6, 3. ])
    """
    K, ell, h = _check_lattice(lattice, dims, order)
    vals = _lattice_values(F, K, ell)
    return BernsteinRelease(_coefficients(vals, K, ell, h), K, ell, h, lattice_values=vals)


class Bernstein(Mechanism):
    """Bernstein mechanism (Aldà & Rubinstein 2017): private release of a function ``F(D, ·)`` on ``[0, 1]^ℓ``.

    The target returns F as a vectorised callable ``F(points: (p, ℓ)) -> (p,)`` or as its values on the
    lattice ``L = {0, 1/K, …, 1}^ℓ`` ((K+1)^ℓ values, C-order, see :meth:`lattice_points`). The norm
    is ℓ∞ over the lattice (the sup of ``|F(D, p) − F(D′, p)|``, p ∈ L).

    :meth:`release` adds Laplace noise of scale ``Δ(K+1)^ℓ/ε`` at each lattice point and returns the
    order-h iterated Bernstein polynomial of the noisy values. Privacy: the vector of lattice values
    has ℓ1 sensitivity at most ``(K+1)^ℓ · Δ`` (each of the (K+1)^ℓ coordinates moves by at most the
    sup Δ), so the Laplace mechanism at that scale is ε-DP, and building the polynomial is
    post-processing.

    Parameters
    ----------
    epsilon : float
        Finite and > 0.
    lattice : int
        K ≥ 1, lattice steps per dimension.
    dims : int
        ℓ ≥ 1, the dimension of F's input.
    order : int
        1 ≤ h ≤ 40, the iterated Bernstein order (1: plain Bernstein polynomial); h > 1 needs K ≤ 3161.

    >>> mech = Bernstein(epsilon=1.0, lattice=4, dims=1)
    >>> mech.lattice_points().ravel()
    array([0.  , 0.25, 0.5 , 0.75, 1.  ])
    >>> mech.noise_scale(0.1)
    0.5
    >>> poly = mech.release(lambda y: y[:, 0] ** 2, sensitivity=0.1)
    >>> poly(np.linspace(0, 1, 3)).shape
    (3,)
    """

    name = "bernstein"
    norm = "linf"

    def __init__(self, epsilon: float, lattice: int, dims: int, order: int = 1):
        super().__init__(epsilon)
        self.lattice, self.dims, self.order = _check_lattice(lattice, dims, order)

    @property
    def size(self) -> int:
        """Number of lattice points, ``(K+1)^ℓ``."""
        return (self.lattice + 1) ** self.dims

    def lattice_points(self) -> np.ndarray:
        """The lattice ``{0, 1/K, …, 1}^ℓ`` as a ``((K+1)^ℓ, ℓ)`` array, C-order (last coordinate fastest)."""
        return _lattice_points(self.lattice, self.dims)

    def embed(self, value) -> np.ndarray:
        """F's values on the lattice, flattened (C-order)."""
        return _lattice_values(value, self.lattice, self.dims)

    def noise_scale(self, sensitivity: float) -> float:
        """Laplace scale at each lattice point, ``Δ (K+1)^ℓ / ε``."""
        return _check_sensitivity(sensitivity) * self.size / self._epsilon

    def release(self, value, sensitivity: float) -> BernsteinRelease:
        """The order-h Bernstein polynomial of F's noisy lattice values (a callable :class:`BernsteinRelease`)."""
        scale = self.noise_scale(sensitivity)
        vals = self.embed(value)
        _require_finite(vals, "F's lattice values")
        noisy = noise.laplace(vals, scale)
        coef = _coefficients(noisy, self.lattice, self.dims, self.order)
        return BernsteinRelease(coef, self.lattice, self.dims, self.order,
                                lattice_values=noisy, noise_scale=scale)

    def _params(self) -> dict:
        return {"epsilon": self._epsilon, "lattice": self.lattice, "dims": self.dims, "order": self.order}
