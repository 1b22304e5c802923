"""Auditing the guarantee: the sampler's coverage (Theorem 15) and the mechanisms' privacy loss.

Two independent checks, both statistical, both with a stated false-alarm rate.

**Sampler coverage.** Theorem 15 promises, for each run of the Sensitivity Sampler with plan
(m, k, γ, ρ), ``P(Φ(Δ̂) < 1 − γ) ≤ ρ`` where Φ is the CDF of G = ‖f(D) − f(D′)‖. For a target whose
law of G is known exactly, :func:`sampler_coverage` runs the sampler many times with distinct seeds,
counts the runs with Φ(Δ̂) < 1 − γ and tests the count against Binomial(runs, ρ) (one-sided): a
correct sampler is rejected with probability at most ``alpha``. The same runs also test *wrong*
samplers (another order statistic of the same G sample), to show the test has power.

The reference law used in the tests and the audit job is the **median of n = 2r + 1 iid U(0, 1)
records** (:func:`median_of_uniforms_cdf`)::

    Φ(t) = P(G ≤ t) = 1 − (r + 1)/n · (1 − t)^(n+1),   0 ≤ t ≤ 1,

an atom of mass r/n at 0 and, given G > 0, G ~ Beta(1, n + 1). Derivation: let S be the 2r shared
records, sorted, and (a, b) = (S_(r), S_(r+1)); then median(D) = clip(x_n, a, b) and median(D′) =
clip(x_{n+1}, a, b). Given (a, b), U = clip(x_n, a, b) has atoms a (mass a) and b (mass 1 − b) and
density 1 on (a, b); with L = b − a and 0 ≤ t < L, counting the ways |U − V| > t for two such
independent U, V gives ``P(G > t | a, b) = 2a(1 − b) + 2(a + 1 − b)(L − t) + (L − t)²``. The spacings
(a, L, 1 − b) of 2r uniforms at the r-th and (r+1)-th order statistics are Dirichlet(r, 1, r), so
L ~ Beta(1, 2r) and, given L, a = (1 − L)W with W ~ Beta(r, r), E[a(1 − b) | L] = (1 − L)² r/(2(2r+1)).
With u = 1 − L and s = 1 − t the integrand collapses (2u(s − u) + (s − u)² = s² − u²):
``P(G > t) = ∫_0^s 2r u^(2r−1) [r u²/(2r+1) + s² − u²] du = (r+1)/(2r+1) · s^(2r+2)``.
:func:`median_of_uniforms_cdf_integral` computes the same Φ as the 2-D integral over the joint
density of (a, b), as an independent check of the algebra.

**Mechanism audit.** :func:`audit` draws N outputs of ``mechanism.release(value, Δ)`` and N of
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

>>> import raydp
>>> res = audit(raydp.Laplace(1.0), 0.0, 1.0, sensitivity=1.0, samples=4000)
>>> res.passes in (True, False), res.epsilon_lower <= 1.5
(True, True)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy import integrate, special, stats

from .errors import InvalidArgument, MechanismError

__all__ = [
    "AuditResult",
    "CoverageResult",
    "Miscalibrated",
    "WrongSamplerResult",
    "audit",
    "audit_counts",
    "exact_failure_probability",
    "exact_privacy",
    "median_of_uniforms_cdf",
    "median_of_uniforms_cdf_integral",
    "median_of_uniforms_quantile",
    "sampler_coverage",
]

DEFAULT_ALPHA = 1e-5  # audit: false-alarm rate of `passes` for a correct mechanism
COVERAGE_ALPHA = 1e-6  # coverage: false-alarm rate of the binomial test for a correct sampler
_BATCH = 50_000  # outputs per vectorised release call


# ==================================================================================================
# the reference law: median of n iid U(0, 1)


def _odd_n(n) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1 or n % 2 == 0:
        raise InvalidArgument(f"n must be an odd integer >= 1 (the median is then one record), got {n!r}")
    return int(n)


def median_of_uniforms_cdf(t, n: int):
    """Φ(t) = P(G ≤ t) for f = median of n (odd) iid U(0, 1) records: ``1 − (r+1)/n · (1 − t)^(n+1)``.

    G = |median(D) − median(D′)| for neighbours that replace the last record by a fresh draw;
    n = 2r + 1. Φ(t) = 0 for t < 0 and 1 for t ≥ 1; Φ(0) = r/n (the atom at 0).

    >>> float(median_of_uniforms_cdf(0.0, 21)) == 10 / 21
    True
    """
    n = _odd_n(n)
    r = (n - 1) // 2
    t = np.asarray(t, dtype=np.float64)
    s = np.clip(1.0 - t, 0.0, 1.0)
    out = 1.0 - (r + 1) / n * s ** (n + 1)
    return np.where(t < 0, 0.0, out)


def median_of_uniforms_quantile(gamma: float, n: int) -> float:
    """Δ*(γ): the smallest t with Φ(t) ≥ 1 − γ (the exact (ε, γ)-RDP sensitivity of the median)."""
    n = _odd_n(n)
    r = (n - 1) // 2
    if not 0.0 < gamma < 1.0:
        raise InvalidArgument(f"gamma must be in (0, 1), got {gamma!r}")
    if gamma >= (r + 1) / n:
        return 0.0
    return 1.0 - (gamma * n / (r + 1)) ** (1.0 / (n + 1))


def median_of_uniforms_cdf_integral(t: float, n: int, *, tol: float = 1e-12) -> float:
    """Φ(t) computed as a 2-D integral (scipy ``dblquad``), independently of the closed form.

    Φ(t) = 1 − ∫∫_{0<a<b<1, b−a>t} f(a, b) · [2a(1−b) + 2(a+1−b)(b−a−t) + (b−a−t)²] db da with
    f(a, b) = (2r)!/((r−1)!)² · a^(r−1) (1−b)^(r−1), the joint density of the r-th and (r+1)-th of
    the 2r shared records (n = 2r + 1 ≥ 3).
    """
    n = _odd_n(n)
    r = (n - 1) // 2
    if r < 1:
        raise InvalidArgument("the integral form needs n >= 3")
    t = float(t)
    if t < 0:
        return 0.0
    if t >= 1:
        return 1.0
    logc = special.gammaln(2 * r + 1) - 2 * special.gammaln(r)

    def integrand(b, a):
        L = b - a
        h = 2 * a * (1 - b) + 2 * (a + 1 - b) * (L - t) + (L - t) ** 2
        return math.exp(logc + (r - 1) * (math.log(a) + math.log1p(-b))) * h if a > 0 and b < 1 else 0.0

    val, _ = integrate.dblquad(integrand, 0.0, 1.0 - t, lambda a: a + t, lambda a: 1.0,
                               epsabs=tol, epsrel=tol)
    return 1.0 - val


# ==================================================================================================
# sampler coverage (Theorem 15)


def exact_failure_probability(m: int, k: int, gamma: float) -> float:
    """P(Φ(G_(k)) < 1 − γ) for m iid G, when Φ is continuous at its (1 − γ)-quantile q.

    Φ(G_(k)) < 1 − γ iff G_(k) < q iff at least k of the m draws fall below q, and P(G < q) = 1 − γ:
    the count is Binomial(m, 1 − γ). Theorem 15 bounds this by ρ; it is usually far smaller.
    """
    return float(stats.binom.sf(k - 1, m, 1.0 - gamma))


def _binom_pvalue(count: int, runs: int, p: float) -> float:
    """One-sided P(Binomial(runs, p) ≥ count)."""
    return float(stats.binom.sf(count - 1, runs, p)) if count > 0 else 1.0


def _reject_limit(runs: int, p: float, alpha: float) -> int:
    """Largest count c with P(Binomial(runs, p) ≥ c) ≥ alpha: counts above it are rejected."""
    c = int(stats.binom.isf(alpha, runs, p))  # P(X > c) <= alpha
    while c > 0 and _binom_pvalue(c, runs, p) < alpha:
        c -= 1
    while c < runs and _binom_pvalue(c + 1, runs, p) >= alpha:
        c += 1
    return c


@dataclass(frozen=True)
class WrongSamplerResult:
    """A deliberately wrong sampler (order statistic ``k`` of the same G samples) put to the same test."""

    name: str
    k: int
    failures: int
    failure_rate: float
    exact_failure_prob: float
    p_value: float
    flagged: bool
    power: float  # P(flagged) for this wrong sampler, exactly: P(Binomial(runs, exact) > limit)
    law_pvalue: float  # KS test of its Δ̂ values against the law of the *correct* Δ̂ = G_(k)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class CoverageResult:
    """Outcome of :func:`sampler_coverage`.

    ``failures`` counts runs with Φ(Δ̂) < 1 − γ; ``p_value`` is P(Binomial(runs, ρ) ≥ failures);
    ``passes`` is ``p_value ≥ alpha`` (a correct sampler fails with probability ≤ alpha).
    ``exact_failure_prob`` is the true per-run failure probability (:func:`exact_failure_probability`)
    and ``law_pvalue`` a KS test of the Δ̂ values against their exact law
    ``P(Δ̂ ≤ t) = P(Binomial(m, Φ(t)) ≥ k)``.
    """

    m: int
    k: int
    gamma: float
    rho: float
    mode: str
    n: int
    runs: int
    failures: int
    failure_rate: float
    exact_failure_prob: float
    p_value: float
    limit: int
    alpha: float
    passes: bool
    law_pvalue: float
    delta_star: float | None
    sensitivity_mean: float
    wrong: tuple = ()
    sensitivities: np.ndarray = field(default=None, repr=False, compare=False)
    seconds: float = 0.0

    def to_dict(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if k not in ("sensitivities", "wrong")}
        d["wrong"] = [w.to_dict() for w in self.wrong]
        return d


WRONG_SAMPLERS: dict[str, Callable[[int, int, float], int]] = {
    # the plug-in (1 − γ)-quantile, without Theorem 15's DKW margin: fails about half the time
    "naive": lambda m, k, gamma: max(1, math.ceil(m * (1.0 - gamma))),
    # the median order statistic: fails almost always
    "median": lambda m, k, gamma: max(1, math.ceil(m / 2)),
    # G_(k−1): Theorem 15's slack hides it from the coverage test; the law test sees it
    "off_by_one": lambda m, k, gamma: max(1, k - 1),
}


def sampler_coverage(target, oracle, n: int, cdf: Callable, *, runs: int, seed: int = 0,
                     alpha: float = COVERAGE_ALPHA, mechanism=None, wrong=("naive", "median", "off_by_one"),
                     quantile: Callable | None = None, **plan_kwargs) -> CoverageResult:
    """Test Theorem 15's per-run guarantee ``P(Φ(Δ̂) < 1 − γ) ≤ ρ`` against a known CDF Φ of G.

    Runs ``raydp.estimate_sensitivity(target, oracle, n, seed=seed + i, backend="local",
    keep_sample=True, **plan_kwargs)`` for i < ``runs``, counts the runs with ``cdf(Δ̂) < 1 − γ`` and
    compares the count with Binomial(runs, ρ) (one-sided, level ``alpha``). Each name in ``wrong``
    (:data:`WRONG_SAMPLERS`) re-derives a wrong Δ̂ from the same G samples and is put to the same test.
    ``quantile(gamma)``, if given, is reported as ``delta_star`` (the exact Φ⁻¹(1 − γ)).
    """
    import time

    from . import estimate_sensitivity
    from . import plan as make_plan
    from .reduce import kth_smallest

    if isinstance(runs, bool) or not isinstance(runs, (int, np.integer)) or runs < 1:
        raise InvalidArgument(f"runs must be a positive integer, got {runs!r}")
    if not 0.0 < alpha < 1.0:
        raise InvalidArgument(f"alpha must be in (0, 1), got {alpha!r}")
    unknown = [w for w in wrong if w not in WRONG_SAMPLERS]
    if unknown:
        raise InvalidArgument(f"unknown wrong sampler(s) {unknown}; choose from {sorted(WRONG_SAMPLERS)}")
    p = make_plan(**plan_kwargs)
    wrong_k = {w: WRONG_SAMPLERS[w](p.m, p.k, p.gamma) for w in wrong}
    t0 = time.perf_counter()
    deltas = np.empty(runs)
    wrong_deltas = {w: np.empty(runs) for w in wrong}
    for i in range(runs):
        est = estimate_sensitivity(target, oracle, n, mechanism=mechanism, seed=int(seed) + i,
                                   backend="local", progress=False, keep_sample=True, **plan_kwargs)
        if est.failures:
            raise InvalidArgument(f"run {i}: {est.failures} pairs failed; the coverage test needs a total target")
        deltas[i] = est.sensitivity
        for w, kw in wrong_k.items():
            wrong_deltas[w][i] = kth_smallest(est.sample, kw)
    seconds = time.perf_counter() - t0

    level = 1.0 - p.gamma
    limit = _reject_limit(runs, p.rho, alpha)

    def count(values):
        return int(np.sum(np.asarray(cdf(values), dtype=np.float64) < level))

    failures = count(deltas)
    pv = _binom_pvalue(failures, runs, p.rho)
    def law_cdf(t):  # P(G_(k) ≤ t) = P(at least k of m draws ≤ t)
        return stats.binom.sf(p.k - 1, p.m, np.asarray(cdf(t), dtype=np.float64))

    law = stats.kstest(deltas, law_cdf)
    wrong_results = []
    for w, kw in wrong_k.items():
        f = count(wrong_deltas[w])
        ex = exact_failure_probability(p.m, kw, p.gamma)
        wpv = _binom_pvalue(f, runs, p.rho)
        wrong_results.append(WrongSamplerResult(
            name=w, k=kw, failures=f, failure_rate=f / runs, exact_failure_prob=ex, p_value=wpv,
            flagged=wpv < alpha, power=float(stats.binom.sf(limit, runs, ex)),
            law_pvalue=float(stats.kstest(wrong_deltas[w], law_cdf).pvalue)))
    return CoverageResult(
        m=p.m, k=p.k, gamma=p.gamma, rho=p.rho, mode=p.mode, n=int(n), runs=int(runs), failures=failures,
        failure_rate=failures / runs, exact_failure_prob=exact_failure_probability(p.m, p.k, p.gamma),
        p_value=pv, limit=limit, alpha=float(alpha), passes=pv >= alpha, law_pvalue=float(law.pvalue),
        delta_star=None if quantile is None else float(quantile(p.gamma)),
        sensitivity_mean=float(np.mean(deltas)), wrong=tuple(wrong_results), sensitivities=deltas,
        seconds=seconds)


# ==================================================================================================
# mechanism audit


class Miscalibrated:
    """A deliberately broken mechanism: claims ``inner``'s (ε, δ) but releases with sensitivity ``factor·Δ``.

    ``factor < 1`` adds too little noise (e.g. 0.5: half the Laplace or Gaussian scale, twice the
    exponential mechanism's inverse temperature). For testing auditors only.
    """

    def __init__(self, inner, factor: float):
        if not (isinstance(factor, (int, float)) and math.isfinite(factor) and factor > 0):
            raise InvalidArgument(f"factor must be a finite number > 0, got {factor!r}")
        self.inner = inner
        self.factor = float(factor)

    def release(self, value, sensitivity: float):
        return self.inner.release(value, sensitivity * self.factor)

    def noise_scale(self, sensitivity: float) -> float:
        return self.inner.noise_scale(sensitivity * self.factor)

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
    from .mechanisms import Gaussian, Laplace

    return isinstance(_unwrap(mechanism), (Laplace, Gaussian))


def _claim(mechanism, claim) -> tuple[float, float]:
    if claim is None:
        eps, dlt = mechanism.privacy()
    else:
        eps, dlt = claim
    eps, dlt = float(eps), float(dlt)
    if not (math.isfinite(eps) and eps > 0) or not (0.0 <= dlt < 1.0):
        raise InvalidArgument(f"claimed privacy must have epsilon > 0 and 0 <= delta < 1, got ({eps}, {dlt})")
    return eps, dlt


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
            raise InvalidArgument(f"statistic returned {o.size} numbers; expected 1 or {vec.size} (the embedded size)")
    return out


def exact_privacy(mechanism, value, value_prime, sensitivity: float, *, claim=None) -> dict:
    """White-box reference for :func:`audit`: the exact ε at the claimed δ and δ at the claimed ε.

    Computed from the noise the mechanism actually adds (``mechanism.noise_scale(Δ)``, so a
    :class:`Miscalibrated` wrapper is accounted for) on the given pair:

    * Laplace, pair differing in one coordinate by d: ε_t = d/b, δ(ε) = 1 − e^{−(ε_t − ε)/2} for ε < ε_t
      (0 above), ε(δ) = ε_t + 2 log(1 − δ);
    * Gaussian: Balle & Wang's exact δ(ε) with r = σ/‖d‖₂, ε(δ) its root in ε;
    * Exponential: the exact selection probabilities, δ(ε) = Σ_r (p_r − e^ε q_r)_+ (worse direction),
      ε(δ) by bisection;
    * Bernstein: only ε_t = ‖d‖₁/b (δ(ε) is None) — attained when every lattice value moves.

    Returns ``{"epsilon": ε(δ) or None, "delta": δ(ε) or None}``; None where no closed form is known.
    """
    from .mechanisms import Bernstein, Exponential, Gaussian, Laplace, _bw_excess

    eps, dlt = _claim(mechanism, claim)
    sens = float(sensitivity)
    base = _unwrap(mechanism)
    u, v = (np.asarray(mechanism.embed(x), dtype=np.float64) for x in (value, value_prime))
    diff = v - u
    scale = float(mechanism.noise_scale(sens))

    def eps_at(delta_of):  # smallest ε' >= 0 with δ(ε') <= dlt, δ(·) decreasing
        if delta_of(0.0) <= dlt:
            return 0.0
        hi = 1.0
        while delta_of(hi) > dlt:
            hi *= 2.0
            if hi > 1e6:
                return math.inf
        lo = 0.0
        for _ in range(200):  # bisection: δ(·) may be flat (exactly 0) above the root
            mid = 0.5 * (lo + hi)
            if delta_of(mid) > dlt:
                lo = mid
            else:
                hi = mid
            if hi - lo < 1e-13 * max(1.0, hi):
                break
        return float(hi)

    if isinstance(base, Laplace):
        if np.count_nonzero(diff) != 1:
            return {"epsilon": None, "delta": None}
        et = float(np.abs(diff).sum()) / scale
        return {"epsilon": max(0.0, et + 2.0 * math.log1p(-dlt)),
                "delta": max(0.0, -math.expm1(-(et - eps) / 2.0)) if et > eps else 0.0}
    if isinstance(base, Gaussian):
        r = scale / float(np.linalg.norm(diff))
        delta_of = lambda e: max(0.0, _bw_excess(r, e))  # noqa: E731
        return {"epsilon": eps_at(delta_of), "delta": delta_of(eps)}
    if isinstance(base, Exponential):
        from scipy.special import softmax

        p, q = softmax(u / scale), softmax(v / scale)

        def delta_of(e):
            return float(max(np.sum(np.maximum(p - math.exp(e) * q, 0.0)),
                             np.sum(np.maximum(q - math.exp(e) * p, 0.0))))

        return {"epsilon": eps_at(delta_of), "delta": delta_of(eps)}
    if isinstance(base, Bernstein):
        return {"epsilon": float(np.abs(diff).sum()) / scale if dlt == 0 else None, "delta": None}
    return {"epsilon": None, "delta": None}


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

    eps, dlt = _claim(mechanism, claim)
    if isinstance(samples, bool) or not isinstance(samples, (int, np.integer)) or samples < 100:
        raise InvalidArgument(f"samples must be an integer >= 100, got {samples!r}")
    if not 0.0 < alpha < 1.0:
        raise InvalidArgument(f"alpha must be in (0, 1), got {alpha!r}")
    if not 0.0 < select_fraction < 1.0:
        raise InvalidArgument(f"select_fraction must be in (0, 1), got {select_fraction!r}")
    if isinstance(bins, bool) or not isinstance(bins, (int, np.integer)) or bins < 2:
        raise InvalidArgument(f"bins must be an integer >= 2, got {bins!r}")
    sens = float(sensitivity)
    if not (math.isfinite(sens) and sens > 0):
        raise MechanismError(f"sensitivity must be finite and > 0 for an audit, got {sensitivity!r}")
    u, v = (np.asarray(mechanism.embed(x), dtype=np.float64) for x in (value, value_prime))
    if u.shape != v.shape:
        raise InvalidArgument(f"value and value_prime embed to different shapes {u.shape} and {v.shape}")
    dist = float(mechanism.distance(u[None, :], v[None, :])[0])
    if not dist > 0:
        raise InvalidArgument("value and value_prime are equal: there is nothing to audit")
    if dist > sens * (1 + 1e-9):
        raise InvalidArgument(
            f"the pair is at distance {dist:.6g} in the mechanism's {mechanism.norm} norm, more than the "
            f"sensitivity {sens:.6g}: it is not a neighbouring pair for this Δ")
    n_sel = int(round(samples * select_fraction))
    n_eval = samples - n_sel
    if n_sel < 1 or n_eval < 1:
        raise InvalidArgument("select_fraction leaves no samples on one side of the split")

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
