"""Sampler coverage (Theorem 15), tested against a target whose law of G is known exactly.

Theorem 15 promises, for each run of the Sensitivity Sampler with plan (m, k, γ, ρ),
``P(Φ(Δ̂) < 1 − γ) ≤ ρ`` where Φ is the CDF of G = ‖f(D) − f(D′)‖. For a target whose law of G is
known exactly, :func:`sampler_coverage` runs the sampler many times with distinct seeds, counts the
runs with Φ(Δ̂) < 1 − γ and tests the count against Binomial(runs, ρ) (one-sided): a correct
sampler is rejected with probability at most ``alpha``. The same runs also test *wrong* samplers
(another order statistic of the same G sample), to show the test has power.

The reference law used in the tests and the audit job is the **median of n = 2r + 1 iid U(0, 1)
records** (:func:`median_of_uniforms_cdf`)::

    Φ(t) = P(G ≤ t) = 1 − (r + 1)/n · (1 − t)^(n+1),   0 ≤ t ≤ 1,

an atom of mass r/n at 0 and, given G > 0, G ~ Beta(1, n + 1). Derivation: let S be the 2r shared
records, sorted, and (a, b) = (S_(r), S_(r+1)); then median(D) = clip(x_n, a, b) and median(D′) =
clip(x_{n+1}, a, b). Given (a, b), U = clip(x_n, a, b) has atoms a (mass a) and b (mass 1 − b) and
density 1 on (a, b); with L = b − a and 0 ≤ t < L, counting the ways ``|U − V| > t`` for two such
independent U, V gives ``P(G > t | a, b) = 2a(1 − b) + 2(a + 1 − b)(L − t) + (L − t)²``. The spacings
(a, L, 1 − b) of 2r uniforms at the r-th and (r+1)-th order statistics are Dirichlet(r, 1, r), so
L ~ Beta(1, 2r) and, given L, a = (1 − L)W with W ~ Beta(r, r), E[a(1 − b) | L] = (1 − L)² r/(2(2r+1)).
With u = 1 − L and s = 1 − t the integrand collapses (2u(s − u) + (s − u)² = s² − u²):
``P(G > t) = ∫_0^s 2r u^(2r−1) [r u²/(2r+1) + s² − u²] du = (r+1)/(2r+1) · s^(2r+2)``.
:func:`median_of_uniforms_cdf_integral` computes the same Φ as the 2-D integral over the joint
density of (a, b), as an independent check of the algebra.

>>> q = median_of_uniforms_quantile(0.1, 21)          # Δ*(0.1): Φ(q) = 0.9
>>> round(float(median_of_uniforms_cdf(q, 21)), 12)
0.9
>>> round(exact_failure_probability(10, 10, 0.1), 6)  # all 10 draws below the 0.9-quantile: 0.9^10
0.348678
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np
from scipy import integrate, special, stats

from raydp.errors import InvalidArgumentError
from raydp.validation import check_int, fail

__all__ = [
    "CoverageResult",
    "WrongSamplerResult",
    "exact_failure_probability",
    "median_of_uniforms_cdf",
    "median_of_uniforms_cdf_integral",
    "median_of_uniforms_quantile",
    "sampler_coverage",
]

COVERAGE_ALPHA = 1e-6  # coverage: false-alarm rate of the binomial test for a correct sampler


# ==================================================================================================
# the reference law: median of n iid U(0, 1)

_ODD_N = "an odd integer >= 1 (the median is then one record)"


def _odd_n(n) -> int:
    v = check_int(n, "n", min_value=1, expected=_ODD_N)
    if v % 2 == 0:
        raise fail(InvalidArgumentError, "n", _ODD_N, n)
    return v
def median_of_uniforms_cdf(t, n: int):
    """Φ(t) = P(G ≤ t) for f = median of n (odd) iid U(0, 1) records: ``1 − (r+1)/n · (1 − t)^(n+1)``.

    ``G = |median(D) − median(D′)|`` for neighbours that replace the last record by a fresh draw;
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
        raise InvalidArgumentError(f"gamma must be in (0, 1), got {gamma!r}")
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
        raise InvalidArgumentError("the integral form needs n >= 3")
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

    from raydp.plan import make_plan
    from raydp.engine.reduce import kth_smallest
    from raydp.sampler import estimate_sensitivity

    check_int(runs, "runs", min_value=1, expected="a positive integer")
    if not 0.0 < alpha < 1.0:
        raise InvalidArgumentError(f"alpha must be in (0, 1), got {alpha!r}")
    unknown = [w for w in wrong if w not in WRONG_SAMPLERS]
    if unknown:
        raise InvalidArgumentError(f"unknown wrong sampler(s) {unknown}; choose from {sorted(WRONG_SAMPLERS)}")
    p = make_plan(**plan_kwargs)
    wrong_k = {w: WRONG_SAMPLERS[w](p.m, p.k, p.gamma) for w in wrong}
    t0 = time.perf_counter()
    deltas = np.empty(runs)
    wrong_deltas = {w: np.empty(runs) for w in wrong}
    for i in range(runs):
        est = estimate_sensitivity(target, oracle, n, mechanism=mechanism, seed=int(seed) + i,
                                   backend="local", progress=False, keep_sample=True, **plan_kwargs)
        if est.failures:
            raise InvalidArgumentError(f"run {i}: {est.failures} pairs failed; the coverage test needs a total target")
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
