"""Figure 6 of Rubinstein & Aldà (ICML 2017): utility of a private linear SVM, sampled vs global Δ.

Set-up (paper §7.3): the Figure-5 SVM with d = 2 — n = 1000 training records, label ±1
with probability ½, features from N(0.2·𝟙, 0.01·I) for +1 and N(0.8·𝟙, 0.01·I) for −1
(``raydp.oracles.svm_two_class(2)``), C = 3 in the consistent formulation (C/n)·Σ hinge + ½‖w‖²
(``raydp.targets.svm(C=3)``) — released privately as (w, b) + Laplace(Δ/ε)³ (ℓ1 sensitivity Δ).
Four curves of misclassification rate on a fixed test set against ε (log grid 0.05 … 5, 8 points):

* global        Δ = the Proposition-19 bound 2 + 2C√d (``svm_sensitivity.global_bound``; ``--bound``
                picks the reading, see that job's docstring): ε-DP;
* γ, opt. m     Δ̂ from the plan ``raydp.make_plan(gamma=γ)`` (γ = 0.05: m = k = 1305), (ε, γ)-RDP;
* γ, m = 2000   Δ̂ from ``raydp.make_plan(m=2000, gamma=γ)`` (optimal k = 1983), (ε, γ)-RDP;
* non-private   the SVM itself (no noise; the floor the private curves approach).

    python jobs/svm_utility.py                 # 50 repeats: ≈ 17 s on 2 cores (embedded Ray)
    python jobs/svm_utility.py --paper         # 500 repeats, as in the paper: ≈ 25 s
    python jobs/svm_utility.py --backend local --m-opt-k 200 --gamma 0.2 --repeats 5   # tiny
    ray job submit --working-dir . -- python jobs/svm_utility.py --paper --out /abs/path/out/svm_utility

How it runs. Each Δ̂ is sampled ONCE (offline amortisation) and streamed into a store under
``STORE_ROOT/<settings>`` (default STORE_ROOT = --out); re-runs with the same settings reuse it and
``--fresh`` deletes it first. The two sampled settings use seeds --seed and --seed + 1, so their
pairs are independent. Every repeat then draws a fresh private training set (n records, seeds
derived from --seed), fits the SVM once, and releases it for every curve and ε. The first repeat
goes through ``raydp.sample_then_respond(train, svm, Laplace(ε), estimate=Δ̂)`` (Algorithm 2: the
estimate checked against the target, n, norm and γ, its witness pairs replayed, the SVM fitted on the
data in a sealed process); the others draw the same mechanism's noise on that repeat's fit with
``Laplace(ε).release(f(D), Δ̂)``, as the global curve does with the bound — the training sets are
simulated, and f(D) is deterministic, only the noise differs. The noise comes from OpenDP and cannot be seeded, so the
private curves vary a little between runs (the non-private one does not). Error = fraction of the
``--test-size`` test records (fixed seed, same distribution) with sign(w·x + b) ≠ y, averaged over
the repeats (± standard error).

Outputs in --out (default out/svm_utility): ``svm_utility.parquet`` (one row per curve and ε:
curve, gamma, m, k, sensitivity, epsilon, repeats, error_mean, error_sd, error_se — the non-private
curve is repeated at every ε), ``svm_utility.md`` (the Δ of each curve, then the mean error per ε,
one column per curve) and ``svm_utility.png`` (log-x ε, log-y error, four lines), like Figure 6.

Runtime (measured on 2 shared cores). The 1305 + 2000 pairs cost ≈ 1 ms each in-process thanks to
``SVM.pair`` (exact active-set solver warm-started from D's solution; two cold libsvm fits at d = 2
take ≈ 19 ms), so sampling is ≈ 4 s with --backend local and ≈ 12 s through the embedded Ray (mostly
its start-up). A repeat (one fit, 3 × 8 releases and test evaluations) costs ≈ 16 ms: 50 repeats
≈ 1 s, 500 ≈ 8 s. Whole job, fresh stores: ≈ 17 s (auto) / 5.5 s (local); --paper ≈ 25 s / 11 s.
A re-run with the same settings reuses the stored samples and only redoes the releases.

Why the non-private error is ≈ 2%, not ≈ 0. The classes are far apart (Bayes error ≈ 1e-5 at d = 2),
but with C/n = 0.003 the SVM is so strongly regularised that nearly every record is inside the margin
(α = C/n); b then only balances the two classes' counts (it is the midpoint of an interval of optimal
b, libsvm's rule), so a training set with 520 positives and 480 negatives shifts the boundary
noticeably. The same mechanism makes the SVM's sensitivity at d = 2 heavy-tailed (one relabelled
record moves b by up to ~0.2), which is what Δ̂ with k = m (opt. m) sees.
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
from svm_sensitivity import BOUNDS, global_bound  # Proposition 19, one definition

N = 1000
C = 3.0
D = 2
GAMMA = 0.05
M_OPT_K = 2000
REPEATS = 50
PAPER_REPEATS = 500
EPSILONS = (0.05, 0.0965, 0.186, 0.359, 0.694, 1.34, 2.59, 5.0)  # ≈ geometric, 0.05 .. 5
TEST_SIZE = 10_000
COLUMNS = ("curve", "gamma", "m", "k", "sensitivity", "epsilon", "repeats", "error_mean", "error_sd", "error_se")
CURVES = ("global", "sampled_opt_m", "sampled_opt_k", "non_private")


def make_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="svm_utility.py",
        description="Paper Figure 6: misclassification of a Laplace-private linear SVM (d=2, C=3, n=1000) "
                    "against epsilon, with the global bound, sampled sensitivities and no privacy.")
    ap.add_argument("--gamma", type=float, default=GAMMA, help=f"privacy confidence of both sampled curves (default: {GAMMA:g})")
    ap.add_argument("--m-opt-k", type=int, default=M_OPT_K,
                    help=f"pairs of the 'fixed m, optimal k' curve (default: {M_OPT_K})")
    ap.add_argument("--epsilons", type=float, nargs="+", default=list(EPSILONS), metavar="EPS",
                    help="privacy budgets (default: 8 points, log grid 0.05 .. 5)")
    ap.add_argument("--repeats", type=int, help=f"training sets (each released once per curve and ε) "
                                                f"(default: {REPEATS}; --paper: {PAPER_REPEATS})")
    ap.add_argument("--paper", action="store_true", help=f"{PAPER_REPEATS} repeats, as in the paper")
    ap.add_argument("--n", type=int, default=N, help=f"training records (default: {N})")
    ap.add_argument("--d", type=int, default=D, help=f"feature dimension (default: {D}, as in Figure 6)")
    ap.add_argument("--C", type=float, default=C, help=f"SVM regularisation, consistent formulation (default: {C:g})")
    ap.add_argument("--bound", choices=BOUNDS, default="paper",
                    help="global bound: paper = 2 + 2C√d (Prop. 19 as read), derived = 2 + 2√(2Cd) + 4Cd/n")
    ap.add_argument("--test-size", type=int, default=TEST_SIZE, help=f"test records (default: {TEST_SIZE})")
    ap.add_argument("--store-root", metavar="URI", help="where the samples' stores go (default: --out)")
    ap.add_argument("--fresh", action="store_true", help="delete existing local stores first instead of reusing them")
    ap.add_argument("--no-plot", action="store_true", help="skip the PNG (no matplotlib needed)")
    _common.add_common_flags(ap, out_default=os.path.join("out", "svm_utility"))
    return ap


def _store_uri(root: str, name: str) -> str:
    return _common.store_uri(root, name)


def misclassification(wb, X, y) -> float:
    return float((((X @ wb[:-1] + wb[-1]) > 0) != (y > 0)).mean())


def write_parquet(rows: list[dict], path: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    types = dict(curve=pa.string(), gamma=pa.float64(), m=pa.int64(), k=pa.int64(), sensitivity=pa.float64(),
                 epsilon=pa.float64(), repeats=pa.int64(), error_mean=pa.float64(), error_sd=pa.float64(),
                 error_se=pa.float64())
    pq.write_table(pa.table({c: pa.array([r[c] for r in rows], type=types[c]) for c in COLUMNS}), path)


def curve_label(r: dict) -> str:
    c = r["curve"]
    if c == "global":
        return "Global"
    if c == "sampled_opt_m":
        return f"γ = {r['gamma']:g} (opt. m = {r['m']})"
    if c == "sampled_opt_k":
        return f"γ = {r['gamma']:g}, m = {r['m']} (opt. k = {r['k']})"
    return "Non private"


def plot_figure6(rows: list[dict], path: str, title: str) -> str:
    from _plots import pyplot, save_figure

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.6, 4.4), dpi=120)
    style = {"global": ("s-", "black"), "sampled_opt_m": ("o-", "tab:blue"),
             "sampled_opt_k": ("^-", "tab:orange"), "non_private": ("--", "tab:green")}
    try:
        floor, handles = None, []
        for curve in CURVES:
            pts = sorted((r["epsilon"], r["error_mean"], r["error_se"]) for r in rows if r["curve"] == curve)
            if not pts:
                continue
            xs, ys, se = (list(v) for v in zip(*pts))
            fmt, colour = style[curve]
            label = curve_label(next(r for r in rows if r["curve"] == curve))
            pos = [y for y in ys if y > 0]
            floor = min(pos + ([floor] if floor else [])) if pos else floor
            if curve == "non_private":  # no noise: its spread is the training sets', not drawn
                handles.append(ax.plot(xs, ys, fmt, color=colour, lw=1.6, label=label)[0])
            else:
                handles.append(ax.errorbar(xs, ys, yerr=[2 * s for s in se], fmt=fmt, color=colour, lw=1.6, ms=5,
                                           capsize=2, label=label + " ± 2 se" if curve == "global" else label))
        ax.set_xscale("log")
        ax.set_yscale("log")
        if floor:
            ax.set_ylim(bottom=floor / 2)
        from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

        ticks = [t for t in (0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10) if min(r["epsilon"] for r in rows) <= t
                 <= max(r["epsilon"] for r in rows)]
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("privacy budget ε (log scale)")
        ax.set_ylabel("misclassification rate (log scale)")
        ax.set_title(title, fontsize=9)
        ax.grid(True, which="major", alpha=0.35)
        ax.grid(True, which="minor", alpha=0.12)
        ax.legend(handles=handles, fontsize=8, loc="best", framealpha=0.92)
        fig.tight_layout()
        save_figure(fig, path)
    finally:
        plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    import numpy as np

    import raydp
    from raydp import oracles, targets
    from raydp.errors import InvalidArgumentError

    from _plots import markdown_table

    a = make_parser().parse_args(argv)
    if a.paper and a.repeats is not None:
        raise InvalidArgumentError("give --paper or --repeats, not both")
    repeats = PAPER_REPEATS if a.paper else (REPEATS if a.repeats is None else a.repeats)
    if repeats < 2:
        raise InvalidArgumentError(f"--repeats must be >= 2 (a standard error is reported), got {repeats}")
    if a.n < 2 or a.d < 1 or a.test_size < 1:
        raise InvalidArgumentError(f"need --n >= 2, --d >= 1, --test-size >= 1; got {a.n}, {a.d}, {a.test_size}")
    if not (a.C > 0 and math.isfinite(a.C)):
        raise InvalidArgumentError(f"--C must be finite and > 0, got {a.C}")
    epsilons = sorted(dict.fromkeys(a.epsilons))
    if any(not (e > 0 and math.isfinite(e)) for e in epsilons):
        raise InvalidArgumentError(f"--epsilons must be finite and > 0, got {epsilons}")
    plan_m = raydp.make_plan(gamma=a.gamma)                 # optimal m (Table 1, row 1)
    plan_k = raydp.make_plan(m=a.m_opt_k, gamma=a.gamma)    # fixed m, optimal k (row 3); PlanError if γ too small

    oracle = oracles.svm_two_class(a.d)
    target = targets.svm(C=a.C)
    os.makedirs(a.out, exist_ok=True)
    root = a.store_root or a.out
    t_start = time.perf_counter()
    _common.say(a, f"SVM utility: d={a.d}, n={a.n}, C={a.C:g}, gamma={a.gamma:g} (opt. m={plan_m.m}; "
                   f"m={plan_k.m}, opt. k={plan_k.k}), {repeats} repeats, {len(epsilons)} epsilons, {_common.where(a)}")

    estimates = {}
    sampling_seconds = 0.0
    runs = (("sampled_opt_m", plan_m, dict(gamma=a.gamma), a.seed),
            ("sampled_opt_k", plan_k, dict(m=a.m_opt_k, gamma=a.gamma), a.seed + 1))
    for curve, p, plan_args, seed in runs:
        uri = _store_uri(root, f"store-d{a.d}-n{a.n}-C{a.C:g}-m{p.m}-seed{seed}")
        if a.fresh and "://" not in uri and os.path.isdir(uri):
            shutil.rmtree(uri)
        t0 = time.perf_counter()
        # Laplace(1): only the norm (ℓ1) matters for Δ̂; ε is chosen at release time
        est = raydp.estimate_sensitivity(target, oracle, a.n, mechanism=raydp.Laplace(1.0), **plan_args,
                                         options=_common.options(a, seed=seed, store=uri, resume=True))
        sampling_seconds += time.perf_counter() - t0
        if not math.isfinite(est.sensitivity):
            raise InvalidArgumentError(f"{est.failures} of {p.m} pairs failed: the sampled sensitivity is infinite")
        estimates[curve] = est
        _common.say(a, f"  {curve}: m={p.m}, k={p.k}, Δ̂ = {est.sensitivity:.4g} ({est.failures} failed pairs), store {uri}")
    bound = global_bound(a.d, a.C, a.n, a.bound)
    _common.say(a, f"  sampling {sampling_seconds:.1f} s; global bound {bound:.4g} ({a.bound})")

    test = oracle.sample(np.random.default_rng([a.seed, 6, 1]), a.test_size)
    Xt, yt = test[:, 1:], test[:, 0]
    curves = [("global", None, None, None, bound)]
    curves += [(c, e.gamma, e.plan.m, e.plan.k, e.sensitivity) for c, e in estimates.items()]
    errors = {(c, eps): np.empty(repeats) for c, *_ in curves for eps in epsilons}
    non_private = np.empty(repeats)
    t0 = time.perf_counter()
    for r in range(repeats):
        train = oracle.sample(np.random.default_rng([a.seed, 6, 2, r]), a.n)  # the private data
        value = target(train)
        non_private[r] = misclassification(value, Xt, yt)
        for eps in epsilons:
            mech = raydp.Laplace(eps)
            errors[("global", eps)][r] = misclassification(mech.release(value, bound), Xt, yt)
            for c, est in estimates.items():
                if r == 0:  # Algorithm 2 with the stored Δ̂: checked against target, n, norm, γ and its
                    # witness pairs, the SVM fitted on the data in a sealed process
                    released = raydp.sample_then_respond(train, target, mech, estimate=est).value
                else:  # the repeats: the same mechanism's OpenDP noise on this repeat's f(D)
                    released = mech.release(value, est.sensitivity)
                errors[(c, eps)][r] = misclassification(released, Xt, yt)
        if not a.quiet and (r + 1) % max(1, repeats // 5) == 0:
            _common.say(a, f"  repeat {r + 1}/{repeats}")
    release_seconds = time.perf_counter() - t0

    def row(curve, gamma, m, k, sens, eps, errs):
        sd = float(errs.std(ddof=1))
        return dict(curve=curve, gamma=gamma, m=m, k=k, sensitivity=sens, epsilon=eps, repeats=repeats,
                    error_mean=float(errs.mean()), error_sd=sd, error_se=sd / math.sqrt(repeats))

    rows = [row(c, g, m, k, s, eps, errors[(c, eps)]) for c, g, m, k, s in curves for eps in epsilons]
    rows += [row("non_private", None, None, None, 0.0, eps, non_private) for eps in epsilons]

    base = os.path.join(a.out, "svm_utility")
    write_parquet(rows, base + ".parquet")
    sens_rows = [dict(curve=c, gamma=g, m=m, k=k, sensitivity=s, ratio_to_global=s / bound) for c, g, m, k, s in curves]
    wide = []
    for eps in epsilons:
        w = {"epsilon": eps}
        for c in CURVES:
            w[c] = next(r["error_mean"] for r in rows if r["curve"] == c and r["epsilon"] == eps)
        wide.append(w)
    text = (f"Private linear SVM (Figure 6): d={a.d}, n={a.n}, C={a.C:g}, Laplace on (w, b), "
            f"{repeats} training sets × 1 release per point, test set {a.test_size}, seed {a.seed}\n\n"
            "Sensitivity (ℓ1 of (w, b)):\n\n"
            + markdown_table(sens_rows, ["curve", "gamma", "m", "k", "sensitivity", "ratio_to_global"])
            + "\nMean misclassification rate on the test set:\n\n" + markdown_table(wide))
    text = _report.stamped("svm_utility", argv, text)
    with open(base + ".md", "w", encoding="utf-8") as f:
        f.write(text)
    outputs = [base + ".parquet", base + ".md"]
    if not a.no_plot:
        title = (f"Linear SVM predictive error, sampled vs global sensitivity\n"
                 f"d = {a.d}, n = {a.n}, C = {a.C:g}, {repeats} repeats, test set {a.test_size}")
        outputs.append(plot_figure6(rows, base + ".png", title))

    print(text, end="")
    top, mid = epsilons[-1], epsilons[len(epsilons) // 2]
    err = {(r["curve"], r["epsilon"]): r["error_mean"] for r in rows}
    print(f"\nat epsilon={top:g}: " + ", ".join(f"{c} {err[(c, top)]:.4g}" for c in CURVES)
          + f"; at epsilon={mid:g}: " + ", ".join(f"{c} {err[(c, mid)]:.4g}" for c in CURVES[:3])
          + ". Figure 6: the sampled curves reach the non-private error quickly, the global one lags far behind.")
    print(f"wrote {', '.join(outputs)}")
    print(f"total {time.perf_counter() - t_start:.1f} s (sampling {sampling_seconds:.1f} s, "
          f"releases {release_seconds:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(_common.run_main(main))
