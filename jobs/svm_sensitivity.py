"""Figure 5 of Rubinstein & Aldà (ICML 2017): sampled vs global sensitivity of a linear SVM.

Set-up (paper §7.2): n = 1000 records, label ±1 with probability ½, features from
N(0.2·𝟙, 0.01·I) for +1 and N(0.8·𝟙, 0.01·I) for −1 (``raydp.oracles.svm_two_class(d)``); a linear
SVM in the consistent formulation (C/n)·Σ hinge + ½‖w‖² with C = 3 (``raydp.targets.svm(C=3)``)
releasing (w, b) under the Laplace mechanism, so G is measured in ℓ1; m = 1500 pairs;
γ ∈ {0.05, 0.1, 0.15}.

    python jobs/svm_sensitivity.py                 # d ∈ {2, 8}: ~35 s on 2 cores, embedded Ray
    python jobs/svm_sensitivity.py --paper         # d ∈ {8, 16, 32, 64}, as in the paper
    ray job submit --working-dir . -- python jobs/svm_sensitivity.py --paper --out /abs/path/out/svm

(Under ``ray job submit`` relative paths resolve inside the job's copy of the working directory
on the head node; give an absolute ``--out`` or a ``--store-root`` URI to keep the results.)

How it runs. The sampler runs ONCE per d, with the plan m = 1500 (k = m), streaming all m G values
into a store ``STORE_ROOT/d=<d>`` (default STORE_ROOT = --out). Every γ is then derived from that same
stored sample with ``raydp.load_estimate(uri, gamma=γ)`` (Table 1, mode k: the same m iid pairs,
a different order statistic k). A γ that m pairs cannot certify (γ < γ_lo(m)) is skipped with a
note. Re-running with the same --out reuses the stored samples (identical runs are recognised by
their identity; ``--fresh`` deletes local stores first).

Outputs in --out: ``svm_sensitivity.parquet`` and ``.md`` (columns d, gamma, m, k, sensitivity,
global_bound, failures, seconds — ``seconds`` is the sampler's wall time for that d, shared by its
γ rows) and ``svm_sensitivity.png`` (log-y sensitivity against d, one line per γ, plus the global
bound), like the paper's Figure 5.

The global bound (Proposition 19) — a reconstruction, read with care
-------------------------------------------------------------------
The paper bounds the ℓ1 global sensitivity of the released (w, b) in its Proposition 19; its
proof is in the full version (arXiv:1706.02562). The text of the proposition as extracted from
the paper's PDF is cut off exactly there: it reads "the release (w, b) has L1 global sensitivity
bounded by 2 + 2C" and the formula stops. The same extraction drops radicals elsewhere (the
neighbouring ‖w_D − w_D′‖₁ ≤ 4LCκ√d/n of Rubinstein et al. 2012 comes out as "4LCκ d/n"), so a
lost "√d" is the most likely completion. The job therefore uses, by default,

    paper reading:   Δ_global(d) = 2 + 2·C·√d                         (--bound paper)

It matches what the text says about Figure 5: with C = 3 it is 19.0 at d = 8, 26 at d = 16 and
50 at d = 64 ("global sensitivity exceeds 20", against sampled Δ̂ ≈ 0.01).

An independent derivation (ours, for D = [0,1]^d, labels ±1, both classes present) supports it:
(a) the objective at (w, b) = (0, 0) is C, so ½‖w*‖² ≤ C and ‖w*‖₂ ≤ √(2C);
(b) the optimal b minimises a convex piecewise-linear function whose slope is positive for
    b > 1 + M and negative for b < −1 − M, with M = maxᵢ |⟨w*, xᵢ⟩| ≤ ‖w*‖₂·√d (every hinge of
    the other class is active there), so |b*| ≤ 1 + √(2C)·√d and |b_D − b_D′| ≤ 2 + 2√(2Cd);
(c) for w, the stability bound quoted by the paper, ‖w_D − w_D′‖₁ ≤ 4LCκ√d/n with L = 1 (hinge)
    and κ = sup‖x‖₂ = √d, gives 4Cd/n (that bound is for the SVM without a bias term; that it
    carries over with an unregularised b is an assumption).
Together:

    derived:         Δ_global(d) = 2 + 2·√(2C·d) + 4·C·d/n            (--bound derived)

For C ≥ 2, 2√(2C) ≤ 2C, and with C = 3, n = 1000 the slack 2(C − √(2C))√d covers 4Cd/n for
every d ≤ 8000, so the paper reading is at least as large as the derived bound in this set-up
(19.0 vs 16.0 at d = 8; 50.0 vs 42.0 at d = 64) — consistent with it being a valid, slightly
looser, bound. Confidence: the form "2 + 2C·√d" is a reconstruction (moderate confidence); the
derived bound is ours (steps (a), (b) are elementary; (c) borrows the quoted stability result).
Either way the Figure-5 conclusion — the global bound is three orders of magnitude above the
sampled Δ̂ — does not depend on the choice.
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

N = 1000
C = 3.0
DEFAULT_DIMS = (2, 8)
PAPER_DIMS = (8, 16, 32, 64)
GAMMAS = (0.05, 0.1, 0.15)
M = 1500
COLUMNS = ("d", "gamma", "m", "k", "sensitivity", "global_bound", "failures", "seconds")
BOUNDS = ("paper", "derived")


def global_bound(d: int, C: float = C, n: int = N, reading: str = "paper") -> float:
    """ℓ1 global sensitivity bound of the linear SVM's (w, b) on [0,1]^d (Proposition 19).

    ``reading="paper"``: 2 + 2C√d, our completion of the garbled statement "2 + 2C...";
    ``reading="derived"``: 2 + 2√(2Cd) + 4Cd/n, derived in this module's docstring.
    """
    if d < 1 or C <= 0 or n < 1:
        raise ValueError(f"need d >= 1, C > 0, n >= 1; got d={d}, C={C}, n={n}")
    if reading == "paper":
        return 2.0 + 2.0 * C * math.sqrt(d)
    if reading == "derived":
        return 2.0 + 2.0 * math.sqrt(2.0 * C * d) + 4.0 * C * d / n
    raise ValueError(f"reading must be one of {BOUNDS}, got {reading!r}")


def make_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="svm_sensitivity.py",
        description="Paper Figure 5: sampled sensitivity of a linear SVM (C=3, n=1000) against d, "
                    "for several gamma from one m-pair sample per d, and the analytic global bound.")
    ap.add_argument("--dims", type=int, nargs="+", metavar="D",
                    help=f"feature dimensions (default: {' '.join(map(str, DEFAULT_DIMS))}; "
                         f"--paper: {' '.join(map(str, PAPER_DIMS))})")
    ap.add_argument("--paper", action="store_true", help="the paper's dimensions d = 8, 16, 32, 64")
    ap.add_argument("--gammas", type=float, nargs="+", default=list(GAMMAS), metavar="G",
                    help=f"privacy confidences, each derived from the same sample (default: {GAMMAS})")
    ap.add_argument("--m", type=int, default=M, help=f"pairs per d (default: {M})")
    ap.add_argument("--n", type=int, default=N, help=f"records per database (default: {N})")
    ap.add_argument("--C", type=float, default=C, help=f"SVM regularisation, consistent formulation (default: {C:g})")
    ap.add_argument("--bound", choices=BOUNDS, default="paper",
                    help="global bound: paper = 2 + 2C√d (Prop. 19 as read), derived = 2 + 2√(2Cd) + 4Cd/n")
    ap.add_argument("--store-root", metavar="URI", help="where the per-d stores go (default: --out)")
    ap.add_argument("--fresh", action="store_true", help="delete existing local stores first instead of reusing them")
    ap.add_argument("--no-plot", action="store_true", help="skip the PNG (no matplotlib needed)")
    _common.add_common_flags(ap, out_default=os.path.join("out", "svm"))
    return ap


def _store_uri(root: str, d: int) -> str:
    return _common.store_uri(root, f"d={d}")


def sample_dimension(a, d: int, uri: str):
    """Run (or reuse) the m-pair sample for dimension d in ``uri``; return (estimate, seconds)."""
    import raydp
    from raydp import oracles, targets

    if a.fresh and "://" not in uri and os.path.isdir(uri):
        shutil.rmtree(uri)
    t0 = time.perf_counter()
    est = raydp.estimate_sensitivity(
        targets.svm(C=a.C), oracles.svm_two_class(d), a.n, mechanism=raydp.Laplace(1.0), m=a.m,
        options=_common.options(a, store=uri, resume=True),
    )
    return est, time.perf_counter() - t0


def plot_figure5(rows: list[dict], gammas: list[float], dims: list[int], bound_label: str, title: str,
                 path: str) -> str:
    from _plots import pyplot, save_figure

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.6, 4.4), dpi=120)
    try:
        colours = plt.get_cmap("viridis")(
            [0.15 + 0.6 * i / max(1, len(gammas) - 1) for i in range(len(gammas))])
        for g, colour in zip(gammas, colours):
            pts = sorted((r["d"], r["sensitivity"]) for r in rows if r["gamma"] == g and math.isfinite(r["sensitivity"]))
            if pts:
                xs, ys = zip(*pts)
                ax.plot(xs, ys, "o-", color=colour, lw=1.6, ms=5, label=f"sampled, γ = {g:g}")
        bounds = sorted({(r["d"], r["global_bound"]) for r in rows})
        xs, ys = zip(*bounds)
        ax.plot(xs, ys, "s--", color="black", lw=1.4, ms=4.5, label=f"global bound ({bound_label})")
        ax.set_yscale("log")
        ax.set_xticks(sorted(set(dims)))
        ax.set_xlim(min(dims) - 0.06 * max(1, max(dims) - min(dims)) - 0.5,
                    max(dims) + 0.06 * max(1, max(dims) - min(dims)) + 0.5)
        ax.set_xlabel("data dimension d")
        ax.set_ylabel("sensitivity of (w, b), ℓ1 (log scale)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="major", alpha=0.35)
        ax.grid(True, which="minor", axis="y", alpha=0.12)
        ax.legend(fontsize=8, loc="best", framealpha=0.92)
        fig.tight_layout()
        save_figure(fig, path)
    finally:
        plt.close(fig)
    return path


def write_parquet(rows: list[dict], path: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    types = dict(d=pa.int64(), gamma=pa.float64(), m=pa.int64(), k=pa.int64(), sensitivity=pa.float64(),
                 global_bound=pa.float64(), failures=pa.int64(), seconds=pa.float64())
    table = pa.table({c: pa.array([r[c] for r in rows], type=types[c]) for c in COLUMNS})
    pq.write_table(table, path)


def main(argv: list[str] | None = None) -> int:
    import raydp
    from raydp.errors import InvalidArgumentError, PlanError
    from raydp.plan import min_gamma

    from _plots import markdown_table

    a = make_parser().parse_args(argv)
    dims = a.dims or list(PAPER_DIMS if a.paper else DEFAULT_DIMS)
    if a.dims and a.paper:
        raise InvalidArgumentError("give --dims or --paper, not both")
    if any(d < 1 for d in dims):
        raise InvalidArgumentError(f"--dims must be positive integers, got {dims}")
    dims = list(dict.fromkeys(dims))
    raydp.make_plan(m=a.m)  # m too small for any gamma: fail before any work
    gammas, skipped = [], []
    for g in dict.fromkeys(a.gammas):
        try:
            raydp.make_plan(m=a.m, gamma=g)
            gammas.append(g)
        except PlanError:
            skipped.append(g)
    for g in skipped:
        print(f"note: gamma={g:g} skipped: m={a.m} pairs certify only gamma >= {min_gamma(a.m):.4g} "
              "(Theorem 15); raise --m to include it")
    if not gammas:
        raise InvalidArgumentError(f"no requested gamma is admissible with m={a.m}; "
                              f"use gammas >= {min_gamma(a.m):.4g} or a larger --m")
    os.makedirs(a.out, exist_ok=True)
    root = a.store_root or a.out

    t_start = time.perf_counter()
    rows: list[dict] = []
    _common.say(a, f"SVM sensitivity: d={dims}, n={a.n}, C={a.C:g}, m={a.m}, gammas={gammas}, "
                   f"{_common.where(a)}")
    for d in dims:
        uri = _store_uri(root, d)
        est, seconds = sample_dimension(a, d, uri)
        bound = global_bound(d, a.C, a.n, a.bound)
        for g in gammas:
            e = raydp.load_estimate(uri, gamma=g)
            rows.append(dict(d=d, gamma=g, m=e.plan.m, k=e.plan.k, sensitivity=e.sensitivity,
                             global_bound=bound, failures=e.failures, seconds=round(seconds, 3)))
        worst = max(r["sensitivity"] for r in rows if r["d"] == d)
        _common.say(a, f"  d={d}: {seconds:.1f} s, {est.failures} failed pairs, store {uri}; "
                       f"max over gammas {_common.fmt(worst)}, global bound {bound:.4g}")

    base = os.path.join(a.out, "svm_sensitivity")
    write_parquet(rows, base + ".parquet")
    text = _report.stamped("svm_sensitivity", argv, markdown_table(rows, list(COLUMNS)))
    with open(base + ".md", "w", encoding="utf-8") as f:
        f.write(text)
    outputs = [base + ".parquet", base + ".md"]
    if not a.no_plot:
        label = "2 + 2C√d" if a.bound == "paper" else "2 + 2√(2Cd) + 4Cd/n"
        title = f"Global vs sampled sensitivity, linear SVM (C = {a.C:g}, n = {a.n}, m = {a.m})"
        outputs.append(plot_figure5(rows, gammas, dims, label, title, base + ".png"))

    print(text, end="")
    finite = [r for r in rows if math.isfinite(r["sensitivity"]) and r["sensitivity"] > 0]
    if finite:
        ratio = min(r["global_bound"] / r["sensitivity"] for r in finite)
        print(f"\nglobal bound / sampled sensitivity >= {ratio:.0f} (bound: {a.bound}; "
              f"Figure 5 reports ~0.01 sampled vs > 20 global)")
    print(f"wrote {', '.join(outputs)}")
    print(f"total {time.perf_counter() - t_start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(_common.run_main(main))
