"""Figure 7 of Rubinstein & Aldà (ICML 2017): private KDE with the Bernstein mechanism, sampled vs global.

Set-up (paper §7.3): a 1-d Gaussian kernel density estimate F(D, ·) on n = 5000
records from 0.4·N(0.5, 0.02) + 0.6·N(0.75, 0.005), released on [0, 1] with the Bernstein mechanism
(lattice K = 10, iterated order h = 3: Laplace noise of scale Δ(K+1)/ε at each of the 11 lattice
values, then the polynomial I − (I − B_K)³). Δ is either the analytic global sensitivity (below) or
the sampler's Δ̂ from m = 50 000 pairs, for γ ∈ {0.01, 0.1}, both read from ONE stored sample with
``raydp.load_estimate(uri, gamma=γ)`` (Table 1, mode k). Error = total variation distance between
the private release p̃ and the non-private KDE F on [0, 1], ½∫₀¹ |p̃(y) − F(D, y)| dy (trapezoid
rule on ``--grid`` = 2001 points; p̃ is not renormalised), averaged over repeated releases, against
ε on a log grid in [0.05, 0.2]. The paper's claim: sampled beats global at small ε (high privacy);
at larger ε both converge to the approximation error of the Bernstein polynomial (drawn as a dotted
line: the noiseless order-3 Bernstein polynomial against F).

    python jobs/kde_bernstein.py                  # m = 50 000, 200 repeats: ≈ 45 s (embedded Ray)
    python jobs/kde_bernstein.py --paper          # m = 50 000, 1000 repeats, as in the paper
    python jobs/kde_bernstein.py --scale var --bandwidth 0.1 --backend local
    ray job submit --working-dir . -- python jobs/kde_bernstein.py --paper --out /abs/path/out/kde

Outputs in --out (default out/kde): ``kde_bernstein.parquet`` (one row per curve and ε: curve,
gamma, m, k, sensitivity, epsilon, repeats, tv_mean, tv_sd, tv_se, approx_tv), ``kde_bernstein.md``
(the sensitivities, then mean TV per ε, one column per curve) and ``kde_bernstein.png`` (log-log TV
against ε, lines Global, γ = 0.01 and γ = 0.1, ±2 standard errors), like Figure 7. The G sample is
streamed into a store under ``STORE_ROOT/<settings>`` (default STORE_ROOT = --out) and reused by
re-runs with the same settings; ``--fresh`` deletes it first.

Global sensitivity of the KDE in the Bernstein mechanism's norm
----------------------------------------------------------------
F(D, y) = (1/n) Σᵢ K_b(y − xᵢ) with K_b(u) = exp(−u²/(2b²)) / (b√(2π)) (b = bandwidth), so
0 < K_b(u) ≤ 1/(b√(2π)) for every u. Neighbours D, D′ differ in one record, xⱼ vs x′ⱼ, and every
other term cancels:

    F(D, y) − F(D′, y) = (K_b(y − xⱼ) − K_b(y − x′ⱼ)) / n.

Both kernel values lie in [0, 1/(b√(2π))], and the difference of two numbers in [0, c] is at most c
in absolute value, so for every y (in particular every lattice point, the sup the mechanism uses)

    Δ_global = sup_{D≅D′} max_{p∈L} |F(D, p) − F(D′, p)| ≤ 1/(n·b·√(2π)).

The bound is tight (approached by xⱼ on a lattice point and x′ⱼ far from every lattice point), holds
for records anywhere in ℝ, and is 3.99e-4 at n = 5000, b = 0.2.

Choices the paper leaves open (and why)
---------------------------------------
* sd or variance. The paper writes N(0.5, 0.02) and N(0.75, 0.005). We read the second argument
  as a standard deviation (``--scale sd``, default; raydp.oracles.gaussian_mixture's default);
  ``--scale var`` reads them as variances (sds 0.141, 0.0707), as the paper's Figure 5 writes N(μ, 0.01·I) with a covariance. Under the sd reading the records are
  concentrated in ≈ [0.44, 0.77]: that concentration is what random DP exploits (a record far from
  the others, which is what drives the global bound, is unlikely under P). Under the var reading
  the records spread over [0.1, 1] and the sampled Δ̂ at γ = 0.01 is the global bound to within
  0.3% for every bandwidth ≤ 0.2 — no gain to see (measured: G / Δ_global at the 0.9992 quantile,
  200 000 pairs: var 1.000 for b ≤ 0.15, 0.997 at 0.2, 0.946 at 0.3).
* bandwidth (not stated). Default b = 0.2, for two reasons. (1) A K = 10 lattice resolves nothing
  finer than ≈ 1/K, so narrower kernels only add approximation error; the order-3 Bernstein error
  against F (sd reading) is 0.57, 0.30, 0.061, 0.016, 0.0095 at b = 0.02 (Silverman's rule here),
  0.05, 0.1, 0.15, 0.2, and Figure 7's y axis bottoms out at 10⁻², where "both approaches converge
  to the approximation error" — b ≈ 0.2 puts that floor there. (2) The sampled advantage depends on
  the kernel being wide relative to the records' spread: G / Δ_global at the quantiles Δ̂ uses
  (m = 50 000: 0.9992 for γ = 0.01, 0.9092 for γ = 0.1) is 0.97 / 0.96 at b = 0.1, 0.90 / 0.84
  at 0.15, 0.77 / 0.70 at 0.2 (sd reading). So with b ≤ 0.1 sampled and global curves coincide;
  at b = 0.2 the sampled Δ̂ is ≈ 25–30% below the bound. ``--bandwidth`` changes it.
* repeats. Each repeat is a fresh release (fresh OpenDP Laplace noise, which is not seedable) on
  the same private data set D (n records drawn from the same mixture with a seed derived from
  --seed); Δ̂ and Δ_global never depend on D. Default 200 repeats (±2 se bars are drawn); --paper
  uses 1000.

Runtime (measured on 2 shared cores): the sampler evaluates the KDE on the 11 lattice points for
both neighbours, ≈ 0.45 ms per pair in-process, so m = 50 000 takes ≈ 22 s with --backend local
and ≈ 35 s through the default embedded Ray (start-up included; 2 busy cores leave Ray nothing to
gain — a cluster does). A release plus its TV costs ≈ 1 ms: 200 repeats × 7 ε × 3 curves ≈ 4 s,
--paper's 1000 repeats ≈ 20 s. Whole job: ≈ 27 s (local) / 43 s (auto) by default, ≈ 45 s / 60 s
with --paper. A re-run with the same settings reuses the stored sample and only redoes the
releases.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import time

import _common
import _report

N = 5000
WEIGHTS = (0.4, 0.6)
MEANS = (0.5, 0.75)
SPREADS = (0.02, 0.005)  # as written in the paper; --scale says whether they are sds or variances
BANDWIDTH = 0.2
LATTICE = 10
ORDER = 3
M = 50_000
GAMMAS = (0.01, 0.1)
REPEATS = 200
PAPER_REPEATS = 1000
EPSILONS = (0.05, 0.0630, 0.0794, 0.1, 0.126, 0.159, 0.2)  # ≈ geometric, 0.05 .. 0.2
GRID = 2001
COLUMNS = ("curve", "gamma", "m", "k", "sensitivity", "epsilon", "repeats", "tv_mean", "tv_sd", "tv_se",
           "approx_tv")


def global_sensitivity(n: int, bandwidth: float) -> float:
    """sup over neighbours and y of |F(D, y) − F(D′, y)| for a Gaussian KDE: 1/(n·b·√(2π))."""
    if n < 1 or not bandwidth > 0:
        raise ValueError(f"need n >= 1 and bandwidth > 0, got n={n}, bandwidth={bandwidth}")
    return 1.0 / (n * bandwidth * math.sqrt(2.0 * math.pi))


def total_variation(p, q, grid) -> float:
    """½∫|p − q| over ``grid`` (trapezoid rule); p, q are values on the grid."""
    import numpy as np

    return 0.5 * float(np.trapezoid(np.abs(np.asarray(p) - np.asarray(q)), grid))


def make_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="kde_bernstein.py",
        description="Paper Figure 7: total variation error of a private 1-d KDE released with the Bernstein "
                    "mechanism (K=10, order 3) under sampled vs global sensitivity, against epsilon.")
    ap.add_argument("--m", type=int, help=f"sampler pairs (default: {M})")
    ap.add_argument("--gammas", type=float, nargs="+", default=list(GAMMAS), metavar="G",
                    help=f"privacy confidences, all from the same sample (default: {' '.join(map(str, GAMMAS))})")
    ap.add_argument("--repeats", type=int, help=f"releases per curve and epsilon (default: {REPEATS}; --paper: {PAPER_REPEATS})")
    ap.add_argument("--paper", action="store_true", help=f"the paper's sizes: m={M}, {PAPER_REPEATS} repeats")
    ap.add_argument("--epsilons", type=float, nargs="+", default=list(EPSILONS), metavar="EPS",
                    help="privacy budgets (default: 7 values, geometric from 0.05 to 0.2)")
    ap.add_argument("--n", type=int, default=N, help=f"records per database (default: {N})")
    ap.add_argument("--bandwidth", type=float, default=BANDWIDTH, help=f"KDE bandwidth (default: {BANDWIDTH:g}; see docstring)")
    ap.add_argument("--scale", choices=("sd", "var"), default="sd",
                    help="read the mixture's 0.02, 0.005 as standard deviations (sd, default) or variances (var)")
    ap.add_argument("--lattice", type=int, default=LATTICE, help=f"Bernstein lattice K (default: {LATTICE})")
    ap.add_argument("--order", type=int, default=ORDER, help=f"iterated Bernstein order h (default: {ORDER})")
    ap.add_argument("--grid", type=int, default=GRID, help=f"points of the TV integration grid on [0,1] (default: {GRID})")
    ap.add_argument("--store-root", metavar="URI", help="where the sample's store goes (default: --out)")
    ap.add_argument("--fresh", action="store_true", help="delete an existing local store first instead of reusing it")
    ap.add_argument("--no-plot", action="store_true", help="skip the PNG (no matplotlib needed)")
    _common.add_common_flags(ap, out_default=os.path.join("out", "kde"))
    return ap


def _store_uri(root: str, name: str) -> str:
    return _common.store_uri(root, name)


def write_parquet(rows: list[dict], path: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    types = dict(curve=pa.string(), gamma=pa.float64(), m=pa.int64(), k=pa.int64(), sensitivity=pa.float64(),
                 epsilon=pa.float64(), repeats=pa.int64(), tv_mean=pa.float64(), tv_sd=pa.float64(),
                 tv_se=pa.float64(), approx_tv=pa.float64())
    pq.write_table(pa.table({c: pa.array([r[c] for r in rows], type=types[c]) for c in COLUMNS}), path)


def main(argv: list[str] | None = None) -> int:
    import numpy as np

    import raydp
    from raydp import oracles, targets
    from raydp.errors import InvalidArgumentError, PlanError
    from raydp.mechanisms import bernstein_approximation
    from raydp.plan import min_gamma

    from _plots import markdown_table

    a = make_parser().parse_args(argv)
    if a.paper and (a.m is not None or a.repeats is not None):
        raise InvalidArgumentError("give --paper or --m/--repeats, not both")
    m = M if a.paper or a.m is None else a.m
    repeats = PAPER_REPEATS if a.paper else (REPEATS if a.repeats is None else a.repeats)
    if repeats < 2:
        raise InvalidArgumentError(f"--repeats must be >= 2 (a standard error is reported), got {repeats}")
    if a.n < 1 or not (a.bandwidth > 0 and math.isfinite(a.bandwidth)):
        raise InvalidArgumentError(f"need --n >= 1 and a finite --bandwidth > 0, got n={a.n}, bandwidth={a.bandwidth}")
    if a.grid < 3:
        raise InvalidArgumentError(f"--grid must be >= 3, got {a.grid}")
    epsilons = sorted(dict.fromkeys(a.epsilons))
    if any(not (e > 0 and math.isfinite(e)) for e in epsilons):
        raise InvalidArgumentError(f"--epsilons must be finite and > 0, got {epsilons}")
    raydp.make_plan(m=m)  # m too small for any gamma: fail before any work
    gammas, skipped = [], []
    for g in dict.fromkeys(a.gammas):
        try:
            raydp.make_plan(m=m, gamma=g)
            gammas.append(g)
        except PlanError:
            skipped.append(g)
    for g in skipped:
        print(f"note: gamma={g:g} skipped: m={m} pairs certify only gamma >= {min_gamma(m):.4g} "
              "(Theorem 15); raise --m to include it")
    if not gammas:
        raise InvalidArgumentError(f"no requested gamma is admissible with m={m}; "
                              f"use gammas >= {min_gamma(m):.4g} or a larger --m")
    oracle = oracles.gaussian_mixture(list(WEIGHTS), list(MEANS), list(SPREADS), scale=a.scale)
    target = targets.kde(a.bandwidth)
    sampling_mech = raydp.Bernstein(1.0, lattice=a.lattice, dims=1, order=a.order)  # ε plays no part in Δ̂
    os.makedirs(a.out, exist_ok=True)
    name = f"store-n{a.n}-h{a.bandwidth:g}-{a.scale}-K{a.lattice}-o{a.order}-m{m}-seed{a.seed}"
    uri = _store_uri(a.store_root or a.out, name)
    if a.fresh and "://" not in uri and os.path.isdir(uri):
        shutil.rmtree(uri)

    t_start = time.perf_counter()
    _common.say(a, f"KDE/Bernstein: n={a.n}, bandwidth={a.bandwidth:g}, mixture read as {a.scale}, "
                   f"K={a.lattice}, order={a.order}, m={m}, gammas={gammas}, {repeats} repeats, {_common.where(a)}")
    t0 = time.perf_counter()
    est = raydp.estimate_sensitivity(target, oracle, a.n, mechanism=sampling_mech, m=m,
                                     options=_common.options(a, store=uri, resume=True))
    sampling_seconds = time.perf_counter() - t0
    if est.failures:
        raise InvalidArgumentError(f"{est.failures} of {m} pairs failed; the KDE of finite records should never fail")
    estimates = {g: raydp.load_estimate(uri, gamma=g) for g in gammas}
    g_bound = global_sensitivity(a.n, a.bandwidth)
    _common.say(a, f"  sampled {m} pairs in {sampling_seconds:.1f} s (store {uri}); global bound {g_bound:.4g}; "
                   + ", ".join(f"Δ̂(γ={g:g}) = {e.sensitivity:.4g}" for g, e in estimates.items()))

    # The private data set and its non-private KDE (what the release is compared with).
    data = oracle.sample(np.random.default_rng([a.seed, 7_000_007]), a.n)
    grid = np.linspace(0.0, 1.0, a.grid)
    F = target(data)
    exact = F(grid)
    approx = bernstein_approximation(lambda y: F(y[:, 0]), a.lattice, 1, a.order)
    approx_tv = total_variation(approx(grid), exact, grid)

    curves = [("global", None, None, None, g_bound)]
    curves += [("sampled", g, e.plan.m, e.plan.k, e.sensitivity) for g, e in estimates.items()]
    rows = []
    t0 = time.perf_counter()
    for curve, gamma, mm, k, sens in curves:
        for eps in epsilons:
            mech = raydp.Bernstein(eps, lattice=a.lattice, dims=1, order=a.order)
            tv = np.empty(repeats)
            for r in range(repeats):
                if curve == "global":
                    poly = mech.release(F, g_bound)
                elif r == 0:  # Algorithm 2 with the stored Δ̂ (refuses an estimate made for other settings),
                    # the KDE evaluated on the data in a sealed process after the Δ̂'s witnesses were replayed
                    poly = raydp.sample_then_respond(data, target, mech, estimate=estimates[gamma]).value
                else:  # the repeats: the same mechanism's OpenDP noise on the same f(D)
                    poly = mech.release(F, sens)
                tv[r] = total_variation(poly(grid), exact, grid)
            sd = float(tv.std(ddof=1))
            rows.append(dict(curve=curve, gamma=gamma, m=mm, k=k, sensitivity=sens, epsilon=eps, repeats=repeats,
                             tv_mean=float(tv.mean()), tv_sd=sd, tv_se=sd / math.sqrt(repeats), approx_tv=approx_tv))
    release_seconds = time.perf_counter() - t0
    _common.say(a, f"  {len(curves) * len(epsilons) * repeats} releases in {release_seconds:.1f} s")

    base = os.path.join(a.out, "kde_bernstein")
    write_parquet(rows, base + ".parquet")
    sens_rows = [dict(curve=c, gamma=g, m=mm, k=k, sensitivity=s, ratio_to_global=s / g_bound)
                 for c, g, mm, k, s in curves]
    labels = [("global", None)] + [("sampled", g) for g in gammas]
    wide = []
    for eps in epsilons:
        row = {"epsilon": eps}
        for c, g in labels:
            r = next(r for r in rows if r["curve"] == c and r["gamma"] == g and r["epsilon"] == eps)
            row["global" if c == "global" else f"gamma={g:g}"] = r["tv_mean"]
        row["bernstein_approx"] = approx_tv
        wide.append(row)
    text = (f"KDE / Bernstein (Figure 7): n={a.n}, mixture 0.4·N(0.5, 0.02) + 0.6·N(0.75, 0.005) read as {a.scale}, "
            f"bandwidth {a.bandwidth:g}, K={a.lattice}, order {a.order}, m={m}, {repeats} releases per point, "
            f"seed {a.seed}\n\nSensitivity (sup over the lattice):\n\n"
            + markdown_table(sens_rows, ["curve", "gamma", "m", "k", "sensitivity", "ratio_to_global"])
            + "\nMean total variation distance to the non-private KDE:\n\n" + markdown_table(wide))
    text = _report.stamped("kde_bernstein", argv, text)
    with open(base + ".md", "w", encoding="utf-8") as f:
        f.write(text)
    outputs = [base + ".parquet", base + ".md"]
    if not a.no_plot:
        from _plots import plot_kde_tv

        title = (f"KDE error (relative to non-private), Bernstein K = {a.lattice}, order {a.order}\n"
                 f"n = {a.n}, bandwidth {a.bandwidth:g}, mixture read as {a.scale}, {repeats} releases per point")
        outputs.append(plot_kde_tv(rows, base + ".png", title=title))

    print(text, end="")
    small = epsilons[0]
    g_tv = next(r for r in rows if r["curve"] == "global" and r["epsilon"] == small)
    beats = [r for r in rows if r["curve"] == "sampled" and r["epsilon"] == small]
    verdict = ", ".join(f"γ={r['gamma']:g}: {r['tv_mean']:.4g} ({'<' if r['tv_mean'] < g_tv['tv_mean'] else '>='} "
                        f"global {g_tv['tv_mean']:.4g})" for r in beats)
    print(f"\nat epsilon={small:g}: {verdict}; Figure 7: sampled beats global at small ε, and all curves tend to "
          f"the Bernstein approximation error {approx_tv:.4g} as ε grows")
    print(f"wrote {', '.join(outputs)}")
    print(f"total {time.perf_counter() - t_start:.1f} s (sampling {sampling_seconds:.1f} s, releases {release_seconds:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(_common.run_main(main))
