"""The mechanisms' privacy loss, audited: lower confidence bounds on ε and δ from samples.

:func:`audit` draws N outputs of ``mechanism.release(value, Δ)`` and N of
``mechanism.release(value′, Δ)`` for a neighbouring pair at distance Δ in the mechanism's norm and
returns lower confidence bounds on

* ε̂: the smallest ε′ for which the mechanism is (ε′, δ)-DP on this pair (δ the claimed δ; for pure
  DP the largest log-likelihood ratio of a set of outputs), and
* δ̂: the hockey-stick divergence ``sup_S P(M(x) ∈ S) − e^ε P(M(x′) ∈ S)`` at the claimed ε,

over unions of histogram bins (DP-Sniper / DP-Auditorium style). The samples are split: a selection
part fixes the bins and picks, for each direction and each statistic, the bin union (a prefix of the
bins sorted by estimated likelihood ratio) that looks most violating; the held-out part then gives
Clopper–Pearson bounds for that one fixed set. Eight one-sided Clopper–Pearson bounds are used (a
lower bound on P(S) and an upper bound on Q(S), for two statistics and two directions), each at
level α/8, so **all reported bounds hold simultaneously with probability ≥ 1 − α**; binning is
post-processing, so a binned ratio never exceeds the true one. ``passes`` is ``ε̂ ≤ ε and δ̂ ≤ δ``:
a correct mechanism fails with probability at most α whatever N is; N only buys power. Noise comes
from OpenDP and cannot be seeded: audits are not reproducible, their error rates are what is fixed.

The white-box reference is each mechanism's own privacy curve (``mechanism.exact_privacy``, see
:mod:`raydp.mechanisms`); :func:`exact_privacy` calls it. :class:`Miscalibrated` wraps a mechanism
with a wrong noise scale, to show that the audit has power.

>>> import raydp
>>> res = audit(raydp.Laplace(1.0), 0.0, 1.0, sensitivity=1.0, samples=4000)
>>> res.passes in (True, False), res.epsilon_lower <= 1.5
(True, True)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import stats

from raydp.errors import InvalidArgumentError, MechanismError
from raydp.mechanisms.base import resolve_claim
from raydp.validation import check_int

__all__ = [
    "AuditResult",
    "Miscalibrated",
    "audit",
    "audit_counts",
    "exact_privacy",
]

DEFAULT_ALPHA = 1e-5  # audit: false-alarm rate of `passes` for a correct mechanism
_BATCH = 50_000  # outputs per vectorised release call


class Miscalibrated:
    """A deliberately broken mechanism: claims ``inner``'s (ε, δ) but releases with sensitivity ``factor·Δ``.

    ``factor < 1`` adds too little noise (e.g. 0.5: half the Laplace or Gaussian scale, twice the
    exponential mechanism's inverse temperature). For testing auditors only. Its
    :meth:`exact_privacy` is ``inner``'s curve for the noise it really adds.

    >>> import raydp
    >>> Miscalibrated(raydp.Laplace(1.0), 0.5).exact_privacy(0.0, 1.0, 1.0)["epsilon"]
    2.0
    """

    def __init__(self, inner, factor: float):
        if not (isinstance(factor, (int, float)) and math.isfinite(factor) and factor > 0):
            raise InvalidArgumentError(f"factor must be a finite number > 0, got {factor!r}")
        self.inner = inner
        self.factor = float(factor)

    def release(self, value, sensitivity: float):
        return self.inner.release(value, sensitivity * self.factor)

    def noise_scale(self, sensitivity: float) -> float:
        return self.inner.noise_scale(sensitivity * self.factor)

    def exact_privacy(self, value, value_prime, sensitivity: float, *, claim=None) -> dict:
        """``inner``'s exact privacy for the noise this wrapper adds (that of sensitivity factor·Δ)."""
        resolve_claim(self, claim)  # a bad claim is refused first, whatever the sensitivity
        return self.inner.exact_privacy(value, value_prime, float(sensitivity) * self.factor, claim=claim)

    def __getattr__(self, name: str) -> Any:  # norm, embed, distance, privacy, responses, ...
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def identity(self) -> dict:
        return {"name": "miscalibrated", "params": {"inner": self.inner.identity(), "factor": self.factor}}

    def __repr__(self) -> str:
        return f"Miscalibrated({self.inner!r}, factor={self.factor!r})"


def _unwrap(mechanism):
    while isinstance(mechanism, Miscalibrated):
        mechanism = mechanism.inner
    return mechanism


def _coordinatewise(mechanism) -> bool:
    """True for mechanisms whose release adds iid noise per coordinate (raydp Laplace and Gaussian)."""
    return bool(getattr(_unwrap(mechanism), "coordinatewise_noise", False))


def _cp_lower(k: np.ndarray, n: int, a: float) -> np.ndarray:
    """One-sided Clopper–Pearson lower bound on p from k successes in n, level a (P(bound > p) ≤ a)."""
    k = np.asarray(k, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        lo = stats.beta.ppf(a, k, n - k + 1)
    return np.where(k <= 0, 0.0, lo)


def _cp_upper(k: np.ndarray, n: int, a: float) -> np.ndarray:
    """One-sided Clopper–Pearson upper bound on p (P(bound < p) ≤ a)."""
    k = np.asarray(k, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        hi = stats.beta.ppf(1.0 - a, k + 1, n - k)
    return np.where(k >= n, 1.0, hi)


def _eps_score(cp, cq, n, delta, a):
    p_lo, q_hi = _cp_lower(cp, n, a), _cp_upper(cq, n, a)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.log((p_lo - delta) / q_hi)
    return np.where(p_lo - delta > 0, out, -np.inf)


def _delta_score(cp, cq, n, epsilon, a):
    return _cp_lower(cp, n, a) - math.exp(epsilon) * _cp_upper(cq, n, a)


@dataclass(frozen=True)
class AuditResult:
    """Outcome of :func:`audit` (all bounds hold simultaneously with probability ≥ 1 − ``alpha``).

    ``epsilon_lower`` (ε̂) is a lower confidence bound on the smallest ε′ for which the mechanism is
    (ε′, ``delta``)-DP on the audited pair; ``delta_lower`` (δ̂) one on its hockey-stick divergence at
    ``epsilon``. Both are clipped at 0 (the true values are ≥ 0). ``epsilon_point`` and
    ``delta_point`` are the uncorrected held-out estimates for the same sets. ``passes`` is
    ``epsilon_lower ≤ epsilon and delta_lower ≤ delta``.
    """

    mechanism: str
    epsilon: float
    delta: float
    sensitivity: float
    samples: int
    epsilon_lower: float
    delta_lower: float
    epsilon_point: float
    delta_point: float
    passes: bool
    alpha: float
    bins: int
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def audit_counts(x_select, y_select, x_eval, y_eval, n_select: int, n_eval: int, *, epsilon: float,
                 delta: float, alpha: float = DEFAULT_ALPHA) -> dict:
    """The estimator behind :func:`audit`, on per-bin counts.

    ``x_select``/``y_select`` are bin counts of the selection samples (``n_select`` per side) and
    ``x_eval``/``y_eval`` of the held-out samples (``n_eval`` per side), for the same bins. For each
    direction (x against y and y against x) and each statistic, the prefix of bins sorted by the
    selection likelihood ratio with the best selection-sample bound is chosen; its held-out
    Clopper–Pearson bound (level α/8) is returned. Keys: epsilon_lower, delta_lower, epsilon_point,
    delta_point (not clipped).
    """
    xs, ys, xe, ye = (np.asarray(c, dtype=np.float64) for c in (x_select, y_select, x_eval, y_eval))
    a = alpha / 8.0
    out = dict(epsilon_lower=-np.inf, delta_lower=-np.inf, epsilon_point=-np.inf, delta_point=-np.inf)
    for ps, qs, pe, qe in ((xs, ys, xe, ye), (ys, xs, ye, xe)):
        order = np.argsort(-(ps + 0.5) / (qs + 0.5), kind="stable")
        cps, cqs = np.cumsum(ps[order])[:-1], np.cumsum(qs[order])[:-1]  # proper prefixes only
        cpe, cqe = np.cumsum(pe[order])[:-1], np.cumsum(qe[order])[:-1]
        if cps.size == 0:
            continue
        j = int(np.argmax(_eps_score(cps, cqs, n_select, delta, a)))
        out["epsilon_lower"] = max(out["epsilon_lower"], float(_eps_score(cpe[j], cqe[j], n_eval, delta, a)))
        pp, qq = cpe[j] / n_eval, cqe[j] / n_eval
        point = math.log((pp - delta) / qq) if pp > delta and qq > 0 else (math.inf if pp > delta else -math.inf)
        out["epsilon_point"] = max(out["epsilon_point"], point)
        j = int(np.argmax(_delta_score(cps, cqs, n_select, epsilon, a)))
        out["delta_lower"] = max(out["delta_lower"], float(_delta_score(cpe[j], cqe[j], n_eval, epsilon, a)))
        out["delta_point"] = max(out["delta_point"], float(cpe[j] / n_eval - math.exp(epsilon) * cqe[j] / n_eval))
    return out


def _draw_continuous(mechanism, value, sensitivity, samples, batch, statistic, direction):
    """``samples`` outputs projected on ``direction`` (a unit vector in the embedded space)."""
    vec = np.asarray(mechanism.embed(value), dtype=np.float64)
    if batch:
        arr = np.asarray(value, dtype=np.float64)
        parts, left = [], samples
        while left > 0:
            c = min(left, _BATCH)
            out = mechanism.release(np.broadcast_to(arr, (c,) + arr.shape).copy(), sensitivity)
            parts.append(np.asarray(out, dtype=np.float64).reshape(c, vec.size) @ direction)
            left -= c
        return np.concatenate(parts)
    out = np.empty(samples)
    for i in range(samples):
        o = np.asarray(statistic(mechanism.release(value, sensitivity)), dtype=np.float64).ravel()
        if o.size == vec.size:
            out[i] = o @ direction
        elif o.size == 1:  # a scalar statistic is used as it is
            out[i] = o[0]
        else:
            raise InvalidArgumentError(f"statistic returned {o.size} numbers; expected 1 or {vec.size} (the embedded size)")
    return out


def exact_privacy(mechanism, value, value_prime, sensitivity: float, *, claim=None) -> dict:
    """White-box reference for :func:`audit`: the exact ε at the claimed δ and δ at the claimed ε.

    ``mechanism.exact_privacy(value, value_prime, sensitivity, claim=claim)``: each mechanism states
    its own curve, computed from the noise it actually adds (``mechanism.noise_scale(Δ)``, so a
    :class:`Miscalibrated` wrapper is accounted for) on the given pair:

    * Laplace, pair differing in one coordinate by d: ε_t = d/b, δ(ε) = 1 − e^{−(ε_t − ε)/2} for ε < ε_t
      (0 above), ε(δ) = ε_t + 2 log(1 − δ);
    * Gaussian: Balle & Wang's exact δ(ε) with r = σ/‖d‖₂, ε(δ) its root in ε;
    * Exponential: the exact selection probabilities, δ(ε) = Σ_r (p_r − e^ε q_r)_+ (worse direction),
      ε(δ) by bisection;
    * Bernstein: only ε_t = ‖d‖₁/b (δ(ε) is None) — attained when every lattice value moves.

    Returns ``{"epsilon": ε(δ) or None, "delta": δ(ε) or None}``; None where no closed form is known.
    A mechanism without a stated curve raises ``NotImplementedError`` (the base class's
    :meth:`raydp.mechanisms.Mechanism.exact_privacy`).
    """
    return mechanism.exact_privacy(value, value_prime, sensitivity, claim=claim)


def _default_statistic(output):
    lattice = getattr(output, "lattice_values", None)  # a Bernstein release: its noisy lattice values
    return output if lattice is None else lattice


def audit(mechanism, value, value_prime, sensitivity: float, *, samples: int = 100_000,
          alpha: float = DEFAULT_ALPHA, bins: int = 50, select_fraction: float = 0.3,
          statistic: Callable | None = None, batch: bool | None = None, claim=None) -> AuditResult:
    """Audit ``mechanism`` on one neighbouring pair: lower confidence bounds on its ε and δ.

    Parameters
    ----------
    mechanism
        A raydp mechanism (Laplace, Gaussian, Exponential, Bernstein) or anything with
        ``release(value, sensitivity)``, ``embed``, ``distance`` and ``privacy()``.
    value, value_prime
        Target outputs of two neighbouring databases (scores for Exponential, lattice values or a
        vectorised F for Bernstein). Their distance in the mechanism's norm must be at most
        ``sensitivity`` (the audit is most telling at exactly Δ).
    sensitivity
        Δ passed to ``release``.
    samples
        Releases per side; ``select_fraction`` of them choose the bins and sets, the rest bound them.
    alpha
        Simultaneous error of all bounds; a correct mechanism gets ``passes=False`` with
        probability ≤ alpha.
    statistic
        Maps one release to a number, or to a numeric vector of the embedded size (default: the
        release itself, or a Bernstein release's noisy lattice values). Vectors are projected on the
        unit vector from embed(value) to embed(value′). Either way this is post-processing, so every
        bound stays valid; the projection is the optimal statistic for Gaussian noise and for Laplace
        noise when the pair differs in one coordinate, and a custom scalar statistic can do better
        elsewhere (e.g. the largest noisy lattice value of a Bernstein release when every lattice value
        moves by +Δ: the quadrant below the pair is where the likelihood ratio peaks).
        Exponential outputs (responses) are counted per response, no binning.
    batch
        Draw many outputs per ``release`` call by tiling ``value`` along a new leading axis (valid
        when noise is iid per coordinate); default: True for raydp Laplace and Gaussian.
    claim
        (ε, δ) to audit against; default ``mechanism.privacy()``.
    """
    import time

    eps, dlt = resolve_claim(mechanism, claim)
    check_int(samples, "samples", min_value=100)
    if not 0.0 < alpha < 1.0:
        raise InvalidArgumentError(f"alpha must be in (0, 1), got {alpha!r}")
    if not 0.0 < select_fraction < 1.0:
        raise InvalidArgumentError(f"select_fraction must be in (0, 1), got {select_fraction!r}")
    check_int(bins, "bins", min_value=2)
    sens = float(sensitivity)
    if not (math.isfinite(sens) and sens > 0):
        raise MechanismError(f"sensitivity must be finite and > 0 for an audit, got {sensitivity!r}")
    u, v = (np.asarray(mechanism.embed(x), dtype=np.float64) for x in (value, value_prime))
    if u.shape != v.shape:
        raise InvalidArgumentError(f"value and value_prime embed to different shapes {u.shape} and {v.shape}")
    dist = float(mechanism.distance(u[None, :], v[None, :])[0])
    if not dist > 0:
        raise InvalidArgumentError("value and value_prime are equal: there is nothing to audit")
    if dist > sens * (1 + 1e-9):
        raise InvalidArgumentError(
            f"the pair is at distance {dist:.6g} in the mechanism's {mechanism.norm} norm, more than the "
            f"sensitivity {sens:.6g}: it is not a neighbouring pair for this Δ")
    n_sel = int(round(samples * select_fraction))
    n_eval = samples - n_sel
    if n_sel < 1 or n_eval < 1:
        raise InvalidArgumentError("select_fraction leaves no samples on one side of the split")

    t0 = time.perf_counter()
    responses = getattr(_unwrap(mechanism), "responses", None)
    if responses is not None:  # discrete outputs: one bin per response
        index = {}
        for i, r in enumerate(responses):
            try:
                index[r] = i
            except TypeError:
                index = None
                break

        def idx(r):
            if index is not None:
                return index[r]
            return next(i for i, q in enumerate(responses) if q is r or _eq(q, r))

        def counts(val):
            draws = np.fromiter((idx(mechanism.release(val, sens)) for _ in range(samples)), dtype=np.int64,
                                count=samples)
            k = len(responses)
            return np.bincount(draws[:n_sel], minlength=k), np.bincount(draws[n_sel:], minlength=k)

        (xs, xe), (ys, ye) = counts(value), counts(value_prime)
        nbins = len(responses)
    else:
        if batch is None:
            batch = _coordinatewise(mechanism) and statistic is None
        direction = (v - u) / np.linalg.norm(v - u)
        stat = _default_statistic if statistic is None else statistic
        x = _draw_continuous(mechanism, value, sens, samples, batch, stat, direction)
        y = _draw_continuous(mechanism, value_prime, sens, samples, batch, stat, direction)
        pooled = np.concatenate([x[:n_sel], y[:n_sel]])
        edges = np.unique(np.quantile(pooled, np.linspace(0, 1, bins + 1)[1:-1]))
        nbins = edges.size + 1

        def hist(z):
            return np.bincount(np.searchsorted(edges, z, side="right"), minlength=nbins)

        xs, xe, ys, ye = hist(x[:n_sel]), hist(x[n_sel:]), hist(y[:n_sel]), hist(y[n_sel:])
    est = audit_counts(xs, ys, xe, ye, n_sel, n_eval, epsilon=eps, delta=dlt, alpha=alpha)
    e_lo, d_lo = max(0.0, est["epsilon_lower"]), max(0.0, est["delta_lower"])
    return AuditResult(
        mechanism=repr(mechanism), epsilon=eps, delta=dlt, sensitivity=sens, samples=int(samples),
        epsilon_lower=e_lo, delta_lower=d_lo, epsilon_point=est["epsilon_point"],
        delta_point=est["delta_point"], passes=bool(e_lo <= eps and d_lo <= dlt), alpha=float(alpha),
        bins=int(nbins), seconds=time.perf_counter() - t0)


def _eq(a, b) -> bool:
    try:
        eq = a == b
        return bool(np.all(eq)) if isinstance(eq, np.ndarray) else bool(eq)
    except Exception:  # noqa: BLE001
        return False
