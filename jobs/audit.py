"""The guarantee, audited: sampler coverage against an exact law, and a privacy audit.

Two tables, printed as Markdown and written to ``--out`` (default jobs/results) as ``audit.md`` and
``audit.json``.

**Coverage (Theorem 15).** Target: the median of n = 21 iid U(0, 1) records, whose sensitivity law
is known exactly, Φ(t) = 1 − (r+1)/n · (1 − t)^(n+1) (n = 2r + 1; derivation in
``raydp.testing.coverage``).
For each plan, ``--runs`` seeded sampler runs (in process, ``backend="local"``) give Δ̂; a run fails
when Φ(Δ̂) < 1 − γ, which Theorem 15 allows with probability ≤ ρ. The failures are tested against
Binomial(runs, ρ), one-sided, at ``--coverage-alpha`` (1e-6): a correct sampler is flagged with at
most that probability. Columns: the exact per-run failure probability P(Bin(m, 1 − γ) ≥ k) (far
below ρ: the theorem is conservative), the binomial p-value, and a KS p-value of the Δ̂ values
against their exact law P(Bin(m, Φ(t)) ≥ k). Rows below each plan put *wrong* samplers, other
order statistics of the same G samples, to the same tests: "naive" k = ⌈m(1 − γ)⌉ (the plug-in
quantile, no DKW margin), "median" k = ⌈m/2⌉, and "off_by_one" k − 1 (which only the law test sees).

**Mechanism audit.** Each mechanism is run N times on each side of a neighbouring pair at distance
exactly Δ = 1 in its norm, and ``raydp.testing.audit`` returns lower confidence bounds ε̂ (the smallest
ε′ with (ε′, δ)-DP on the pair) and δ̂ (the hockey-stick divergence at the claimed ε); all bounds
hold simultaneously with probability ≥ 1 − ``--alpha`` (1e-5), so a correct mechanism "passes"
except with that probability. "exact" columns are white-box references (``raydp.testing.exact_privacy``:
each mechanism's own curve) for the noise actually added. Mis-scaled rows use
``raydp.testing.Miscalibrated`` (release with factor·Δ while claiming Δ). Expected outcomes: correct
rows pass; rows marked "flag" must be flagged; the correct sampler passes both its tests and the
"naive" and "median" samplers are flagged (the job exits with status 1 otherwise). The halved
*classic* Gaussian is a real but small violation (δ(ε) = 0.0083 against δ = 0.001: the classic
calibration has slack), marked "weak": at 30 000 samples per side it usually passes; one audit at
300 000 per side (``--scale 10``, ~45 s for that row alone) flagged it with δ̂ ≥ 0.0029 and ε̂ ≥ 0.97.

OpenDP noise cannot be seeded, so the audit rows vary from run to run (within the stated error);
the coverage rows are reproducible from ``--seed``.

    python jobs/audit.py                       # ≈ 1–2 min on 2 cores
    python jobs/audit.py --scale 0.2 --runs 200 --quiet     # quick look
    python jobs/audit.py --scale 4             # more power (≈ 4x the audit time)

Runtime note: OpenDP's exact samplers cost ~20 µs (Laplace) to ~80 µs (Gaussian) per draw and the
Exponential/Bernstein releases ~0.1–0.2 ms per call, so N is chosen per mechanism (``--scale``
multiplies all of them).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import sys
import time

import _common
import _report

N_MEDIAN = 21
RUNS = 1000
PLANS = ({"gamma": 0.1}, {"m": 2000, "gamma": 0.05}, {"m": 1000})
AUDIT_COLUMNS = ("mechanism", "claimed_eps", "claimed_delta", "samples", "exact_eps", "eps_lower",
                 "eps_point", "exact_delta", "delta_lower", "expect", "verdict")
COVERAGE_COLUMNS = ("plan", "sampler", "k", "runs", "failures", "rate", "rho", "exact_p_fail", "p_value",
                    "law_p", "verdict")


def make_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="audit.py",
        description="Audit the guarantee: Theorem 15 coverage on the median of uniforms (exact law), "
                    "and lower confidence bounds on the privacy loss of each mechanism.")
    ap.add_argument("--runs", type=int, default=RUNS, help=f"sampler runs per plan (default: {RUNS})")
    ap.add_argument("--n", type=int, default=N_MEDIAN, help=f"records per database, odd (default: {N_MEDIAN})")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="multiply every mechanism's sample size (default: 1; 0.05 for a smoke test)")
    ap.add_argument("--alpha", type=float, default=1e-5,
                    help="audit error: a correct mechanism fails with at most this probability (default: 1e-5)")
    ap.add_argument("--coverage-alpha", type=float, default=1e-6,
                    help="level of the one-sided binomial coverage test (default: 1e-6)")
    ap.add_argument("--law-alpha", type=float, default=1e-4,
                    help="level of the KS test of the Δ̂ values against their exact law (default: 1e-4)")
    ap.add_argument("--seed", type=int, default=0, help="first sampler seed of the coverage runs (default: 0)")
    ap.add_argument("--out", default=os.path.join("jobs", "results"), metavar="DIR",
                    help="output directory (default: jobs/results)")
    ap.add_argument("--quiet", action="store_true", help="no per-step messages")
    return ap


def audit_cases():
    """(label, mechanism, value, value′, base N, expectation, audit kwargs) for every audited row."""
    import numpy as np

    import raydp
    from raydp.testing import Miscalibrated

    lap = raydp.Laplace(1.0)
    classic = raydp.Gaussian(0.9, 1e-3, calibration="classic")
    analytic = raydp.Gaussian(1.0, 1e-2, calibration="analytic")
    expo = raydp.Exponential(1.0, [f"r{i}" for i in range(10)])
    bern = raydp.Bernstein(1.0, lattice=1, dims=1)
    s, sp = np.array([1.0] + [0.0] * 9), np.array([0.0] + [1.0] * 9)
    F, Fp = np.zeros(2), np.ones(2)
    top = dict(statistic=lambda rel: float(np.max(rel.lattice_values)))
    forgot = 1.0 / math.sqrt(2 * math.log(1.25 / classic.delta))
    return [
        ("Laplace(1)", lap, 0.0, 1.0, 100_000, "pass", {}),
        ("Laplace(1), noise ×0.5", Miscalibrated(lap, 0.5), 0.0, 1.0, 100_000, "flag", {}),
        ("Laplace(1), noise ×0.8", Miscalibrated(lap, 0.8), 0.0, 1.0, 100_000, "flag", {}),
        ("Gaussian(0.9, 1e-3) classic", classic, 0.0, 1.0, 30_000, "pass", {}),
        ("Gaussian(0.9, 1e-3) classic, σ = Δ/ε", Miscalibrated(classic, forgot), 0.0, 1.0, 30_000, "flag", {}),
        ("Gaussian(0.9, 1e-3) classic, σ ×0.5", Miscalibrated(classic, 0.5), 0.0, 1.0, 30_000, "weak", {}),
        ("Gaussian(1, 1e-2) analytic", analytic, 0.0, 1.0, 30_000, "pass", {}),
        ("Gaussian(1, 1e-2) analytic, σ ×0.5", Miscalibrated(analytic, 0.5), 0.0, 1.0, 30_000, "flag", {}),
        ("Exponential(1), 10 responses", expo, s, sp, 20_000, "pass", {}),
        ("Exponential(1), Δ/2 in release", Miscalibrated(expo, 0.5), s, sp, 20_000, "flag", {}),
        ("Bernstein(1), K=1, ℓ=1", bern, F, Fp, 10_000, "pass", top),
        ("Bernstein(1), (K+1)^ℓ forgotten", Miscalibrated(bern, 0.5), F, Fp, 10_000, "flag", top),
    ]


def run_audits(a) -> list[dict]:
    from raydp.testing import audit, exact_privacy

    rows = []
    for label, mech, x, xp, base_n, expect, kw in audit_cases():
        n = max(200, round(base_n * a.scale))
        t0 = time.perf_counter()
        res = audit(mech, x, xp, 1.0, samples=n, alpha=a.alpha, **kw)
        ex = exact_privacy(mech, x, xp, 1.0)
        verdict = "pass" if res.passes else "FLAGGED"
        rows.append(dict(mechanism=label, claimed_eps=res.epsilon, claimed_delta=res.delta, samples=n,
                         exact_eps=ex["epsilon"], eps_lower=res.epsilon_lower, eps_point=res.epsilon_point,
                         exact_delta=ex["delta"], delta_lower=res.delta_lower, expect=expect,
                         verdict=verdict, passes=res.passes, alpha=res.alpha, repr=res.mechanism,
                         seconds=time.perf_counter() - t0))
        _common.say(a, f"  {label}: ε̂ ≥ {res.epsilon_lower:.3f}, δ̂ ≥ {res.delta_lower:.3g} -> {verdict} "
                       f"({n} per side, {time.perf_counter() - t0:.1f} s)")
    return rows


def run_coverage(a) -> tuple[list[dict], list[dict]]:
    from raydp import oracles, targets
    from raydp.testing import (
        median_of_uniforms_cdf,
        median_of_uniforms_quantile,
        sampler_coverage,
    )

    table, results = [], []
    cdf = functools.partial(median_of_uniforms_cdf, n=a.n)
    quantile = functools.partial(median_of_uniforms_quantile, n=a.n)
    for i, kwargs in enumerate(PLANS):
        res = sampler_coverage(targets.median(), oracles.uniform(), a.n, cdf, runs=a.runs,
                               seed=a.seed + i * 10_000_000, alpha=a.coverage_alpha, quantile=quantile, **kwargs)
        results.append(res)
        plan = f"m={res.m}, k={res.k}, γ={res.gamma:.4g}"
        table.append(dict(plan=plan, sampler="Δ̂ = G_(k)", k=res.k, runs=res.runs, failures=res.failures,
                          rate=res.failure_rate, rho=res.rho, exact_p_fail=res.exact_failure_prob,
                          p_value=res.p_value, law_p=res.law_pvalue,
                          verdict=_verdict(not res.passes, res.law_pvalue < a.law_alpha)))
        for w in res.wrong:
            table.append(dict(plan=plan, sampler=f"wrong: {w.name}", k=w.k, runs=res.runs, failures=w.failures,
                              rate=w.failure_rate, rho=res.rho, exact_p_fail=w.exact_failure_prob,
                              p_value=w.p_value, law_p=w.law_pvalue,
                              verdict=_verdict(w.flagged, w.law_pvalue < a.law_alpha)))
        _common.say(a, f"  {plan}: {res.failures}/{res.runs} failures (ρ = {res.rho:.4g}, p = {res.p_value:.3g}); "
                       f"{res.seconds:.1f} s")
    return table, results


def _verdict(coverage_flag: bool, law_flag: bool) -> str:
    return f"coverage {'FLAGGED' if coverage_flag else 'pass'}; law {'FLAGGED' if law_flag else 'pass'}"


def _finite(x):
    """JSON-safe copy: numpy scalars to Python, non-finite floats to None (strict JSON has no inf)."""
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _cell(x):
    if x is None:
        return "—"
    if isinstance(x, float):
        return "0" if x == 0 else f"{x:.4g}"
    return str(x)


def markdown(rows: list[dict], columns) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(_cell(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from raydp.errors import InvalidArgumentError

    a = make_parser().parse_args(argv)
    if a.runs < 1:
        raise InvalidArgumentError(f"--runs must be >= 1, got {a.runs}")
    if a.n < 3 or a.n % 2 == 0:
        raise InvalidArgumentError(f"--n must be odd and >= 3, got {a.n}")
    if not (a.scale > 0 and math.isfinite(a.scale)):
        raise InvalidArgumentError(f"--scale must be > 0, got {a.scale}")
    for name in ("alpha", "coverage_alpha", "law_alpha"):
        if not 0.0 < getattr(a, name) < 1.0:
            raise InvalidArgumentError(f"--{name.replace('_', '-')} must be in (0, 1)")
    os.makedirs(a.out, exist_ok=True)
    t_start = time.perf_counter()

    _common.say(a, f"coverage: median of n={a.n} U(0,1) records, {a.runs} runs per plan")
    cov_table, cov_results = run_coverage(a)
    _common.say(a, f"audit: alpha={a.alpha:g}, sample scale {a.scale:g}")
    audit_rows = run_audits(a)

    text = (
        f"## Mechanism audit (Δ = 1, all bounds jointly at confidence 1 − {a.alpha:g})\n\n"
        "ε̂ = lower bound on the smallest ε′ with (ε′, claimed δ)-DP on the pair; δ̂ = lower bound on the "
        "hockey-stick divergence at the claimed ε; exact = white-box value for the noise actually added; "
        "expect: pass / flag / weak (a real but small violation, beyond this N).\n\n"
        + markdown(audit_rows, AUDIT_COLUMNS)
        + f"\n## Sampler coverage (Theorem 15): median of n = {a.n} U(0, 1), Φ(t) = 1 − (r+1)/n·(1 − t)^(n+1)\n\n"
        f"failure: Φ(Δ̂) < 1 − γ; p_value = P(Binomial(runs, ρ) ≥ failures), flagged below "
        f"{a.coverage_alpha:g}; exact_p_fail = P(Bin(m, 1 − γ) ≥ k); law_p = KS p-value of the Δ̂ values "
        f"against the exact law of G_(k), flagged below {a.law_alpha:g} (seeds fixed: reproducible). "
        "Theorem 15 is conservative: off_by_one passes the coverage test, only the law test sees it.\n\n"
        + markdown(cov_table, COVERAGE_COLUMNS)
    )
    ok_audit = all((r["passes"] if r["expect"] == "pass" else (not r["passes"] if r["expect"] == "flag" else True))
                   for r in audit_rows)
    ok_cov = all(r.passes and r.law_pvalue >= a.law_alpha for r in cov_results) and all(
        w.flagged for r in cov_results for w in r.wrong if w.name in ("naive", "median"))
    summary = ("all as expected: correct mechanisms and sampler pass, mis-scaled ones are flagged"
               if ok_audit and ok_cov else "NOT as expected: see the verdict columns")
    report = _report.start("audit", argv)   # date, commit, machine, command: in both files
    text = _report.stamped("audit", argv, text + f"\n{summary}.\n", report)
    md_path, json_path = os.path.join(a.out, "audit.md"), os.path.join(a.out, "audit.json")
    with open(md_path, "w", encoding="utf-8") as f:
        f.write(text)
    payload = {
        **report,
        "settings": {"runs": a.runs, "n": a.n, "scale": a.scale, "alpha": a.alpha,
                     "coverage_alpha": a.coverage_alpha, "law_alpha": a.law_alpha, "seed": a.seed},
        "audit": audit_rows,
        "coverage": [r.to_dict() for r in cov_results],
        "as_expected": bool(ok_audit and ok_cov),
    }
    with open(json_path, "w", encoding="utf-8") as f:
        json.dump(_finite(payload), f, indent=2)
    print(text, end="")
    print(f"wrote {md_path}, {json_path}")
    print(f"total {time.perf_counter() - t_start:.1f} s")
    return 0 if ok_audit and ok_cov else 1


if __name__ == "__main__":
    sys.exit(_common.run_main(main))
