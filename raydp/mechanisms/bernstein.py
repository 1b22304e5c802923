"""The Bernstein mechanism (Aldà & Rubinstein 2017) and Bernstein's polynomial basis on ``[0, 1]^ℓ``.

The private release of a function ``F(D, ·)``: Laplace noise on F's values at the lattice
``{0, 1/K, …, 1}^ℓ``, then the (iterated, order h) Bernstein polynomial of the noisy values
(:class:`BernsteinRelease`). :func:`bernstein_approximation` builds the same polynomial without noise.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

from raydp import noise
from raydp.errors import MechanismError, TargetError

from .base import Mechanism, as_float_array, check_positive_int, check_sensitivity, require_finite

__all__ = ["Bernstein", "BernsteinRelease", "bernstein_approximation"]

# Lattices beyond this many points are refused: every sampled database would need that many target
# evaluations, and the noise scale Δ(K+1)^ℓ/ε would swamp any signal long before.
_MAX_LATTICE_POINTS = 10_000_000
# The order-h coefficients Σ (−1)^{i+1} C(h, i) A^{i−1} F cancel terms of size ~2^h: rounding error
# grows like 2^h·ε_machine and swamps the approximation from h ≈ 50 on (measured: sin(6y), K = 10).
_MAX_ORDER = 40


def _check_lattice(lattice, dims, order) -> tuple[int, int, int]:
    K = check_positive_int(lattice, "lattice (K, the number of lattice steps per dimension)")
    ell = check_positive_int(dims, "dims (ℓ, the input dimension of F)")
    h = check_positive_int(order, "order (h, the iterated Bernstein order)")
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
        vals = as_float_array(raw, "F(lattice points)").ravel()
        if vals.size != p:
            raise TargetError(
                f"F must map a ({p}, {ell}) array of points to {p} values, got {vals.size} values; "
                "vectorise F over the rows of its input"
            )
        return vals
    vals = as_float_array(F, "lattice values").ravel()
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
        return check_sensitivity(sensitivity) * self.size / self._epsilon

    def release(self, value, sensitivity: float) -> BernsteinRelease:
        """The order-h Bernstein polynomial of F's noisy lattice values (a callable :class:`BernsteinRelease`)."""
        scale = self.noise_scale(sensitivity)
        vals = self.embed(value)
        require_finite(vals, "F's lattice values")
        noisy = noise.laplace(vals, scale)
        coef = _coefficients(noisy, self.lattice, self.dims, self.order)
        return BernsteinRelease(coef, self.lattice, self.dims, self.order,
                                lattice_values=noisy, noise_scale=scale)

    def exact_privacy(self, value, value_prime, sensitivity: float, *, claim=None) -> dict:
        """Only the pure-DP ε: ``ε_t = ‖d‖₁/b`` over the lattice values (None when δ > 0); δ(ε) is None.

        ε_t is attained when every lattice value moves (the polynomial is post-processing of them).

        >>> Bernstein(1.0, lattice=1, dims=1).exact_privacy(np.zeros(2), np.ones(2), 1.0)
        {'epsilon': 1.0, 'delta': None}
        """
        _, dlt, _, _, diff, scale = self._privacy_inputs(value, value_prime, sensitivity, claim)
        return {"epsilon": float(np.abs(diff).sum()) / scale if dlt == 0 else None, "delta": None}

    def _params(self) -> dict:
        return {"epsilon": self._epsilon, "lattice": self.lattice, "dims": self.dims, "order": self.order}
