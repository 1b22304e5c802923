"""Sampled sensitivity against the classic ways to beat global sensitivity.

For the median and the mean of three distributions — light tailed N(0, 1), heavy tailed Student t
with 2 degrees of freedom (infinite variance), and bimodal ½N(−2, 1) + ½N(2, 1) — at n ∈ {100, 1000,
10000} and ε ∈ {0.1, 0.5, 1, 2}, the mean absolute error over repeats of each private release:

==================  ============================================================  ===============
column              release                                                       privacy
==================  ============================================================  ===============
global              f(x) + Lap(GS/ε); GS = U − L (median), (U − L)/n (mean)       ε-DP
sampled             Sample-Then-Respond, Laplace, Δ̂ from the oracle, γ = 0.05     (ε, 0, γ)-RDP
smooth_cauchy       smooth sensitivity + Cauchy-like noise, exponent 4 (NRS 2007)  ε-DP
smooth_laplace      smooth sensitivity + Laplace noise, δ (NRS 2007)               (ε, δ)-DP
ptr                 propose-test-release, median only; ⊥ rate reported            (ε, δ)-DP
sample_aggregate    blocks of 10 records (Ray tasks) + widened Winsorized mean     ε-DP
                    (blocks compute numpy's median / mean)
exponential         exponential mechanism for the 0.5-quantile, median only        ε-DP
inverse_sensitivity inverse sensitivity mechanism, median only                     ε-DP
==================  ============================================================  ===============

δ = 1e-6 by default. The methods are in ``raydp.baselines``; see their docstrings for sources.

Data and bounds. Every method needs, or is given, the same public range [L, U] = [−10, 10]: the
data are clipped to it before anything is computed (for N(0,1) nothing is clipped in practice;
for t₂ about 1% of records; for the mixture ~1e-16), and the oracle of the sampled column is the
same distribution clipped the same way (``raydp.baselines.clipped``), i.e. the public model of the
data. The median is the order statistic x_(⌈n/2⌉) (lower median for even n) for every column,
including the sampled one (target ``raydp.baselines.median_target()``). Error is measured against
the statistic of the clipped data (the non-private answer every mechanism is releasing), and
every release is clamped to [L, U] (post-processing: privacy unchanged). Selection mechanisms use
a grid of ``--grid-size`` equally spaced points on [L, U] (20001: step 0.001, which floors their error
near 2.5e-4; the aggregator of sample-and-aggregate uses 4001 points for its quartiles); PTR's proposed bound comes from
simulated data of the public model (``raydp.baselines.propose_bound``), never from the private data.

Randomness. Data are drawn with numpy from fixed seeds (``--seed``); all privacy noise comes from
OpenDP (``raydp.noise``) and cannot be seeded, so errors vary slightly run to run (the standard
error is in the Parquet).

    python jobs/compare_baselines.py                    # 50 repeats: about 2-3 minutes on 2 cores
    python jobs/compare_baselines.py --full             # 500 repeats (about 10x longer)
    python jobs/compare_baselines.py --backend local --n 100 --eps 1 --repeats 2   # tiny, no Ray

Outputs in --out (default out/baselines): ``compare_baselines.parquet`` (long format, one row per
statistic × distribution × n × ε × method), ``compare_baselines.md`` (the tables, privacy notion in
each column header) and ``compare_baselines.png`` (one panel per statistic × distribution × n,
error against ε on log-log axes, one line per method).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import _common
import _report
import numpy as np

LOWER, UPPER = -10.0, 10.0
NS = (100, 1000, 10000)
EPSILONS = (0.1, 0.5, 1.0, 2.0)
DISTRIBUTIONS = ("normal", "student_t2", "bimodal")
STATISTICS = ("median", "mean")
DEFAULT_REPEATS, FULL_REPEATS = 50, 500
GAMMA, DELTA = 0.05, 1e-6
BLOCK_SIZE = 10
GRID_SIZE = 20001
SA_GRID_SIZE = 4001  # the aggregator only needs rough quartiles of the block values

# method key, column label, privacy notion, statistics it applies to
METHODS = (
    ("global", "Global Δ", "ε-DP", STATISTICS),
    ("sampled", "Sampled Δ̂", "(ε, 0, γ)-RDP", STATISTICS),
    ("smooth_cauchy", "Smooth, Cauchy-like", "ε-DP", STATISTICS),
    ("smooth_laplace", "Smooth, Laplace", "(ε, δ)-DP", STATISTICS),
    ("ptr", "PTR", "(ε, δ)-DP", ("median",)),
    ("sample_aggregate", "Sample & aggregate", "ε-DP", STATISTICS),
    ("exponential", "Exponential mech.", "ε-DP", ("median",)),
    ("inverse_sensitivity", "Inverse sensitivity", "ε-DP", ("median",)),
)
DIST_LABELS = {"normal": "N(0, 1)", "student_t2": "Student t, 2 df", "bimodal": "½N(−2,1) + ½N(2,1)"}
COLUMNS = ("statistic", "distribution", "n", "epsilon", "method", "label", "notion", "mae", "se", "refused_rate",
           "answered", "repeats", "delta", "gamma", "lower", "upper", "sensitivity")


def oracle_for(name: str):
    from raydp import baselines, oracles

    if name == "normal":
        return oracles.normal(0.0, 1.0)
    if name == "student_t2":
        return baselines.student_t(2.0)
    if name == "bimodal":
        return oracles.gaussian_mixture([0.5, 0.5], [-2.0, 2.0], [1.0, 1.0])
    raise ValueError(f"unknown distribution {name!r}; choose from {', '.join(DISTRIBUTIONS)}")


def make_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="compare_baselines.py",
        description="Median and mean of several distributions: error of sampled sensitivity against global, "
                    "smooth sensitivity, PTR, sample-and-aggregate, exponential and inverse sensitivity mechanisms.")
    ap.add_argument("--n", type=int, nargs="+", default=list(NS), metavar="N", help=f"database sizes (default: {NS})")
    ap.add_argument("--eps", type=float, nargs="+", default=list(EPSILONS), metavar="E",
                    help=f"privacy budgets ε (default: {EPSILONS})")
    ap.add_argument("--dists", nargs="+", default=list(DISTRIBUTIONS), choices=DISTRIBUTIONS, metavar="D",
                    help=f"distributions (default: {' '.join(DISTRIBUTIONS)})")
    ap.add_argument("--stats", nargs="+", default=list(STATISTICS), choices=STATISTICS, metavar="S",
                    help="statistics (default: median mean)")
    ap.add_argument("--repeats", type=int, help=f"datasets per cell (default: {DEFAULT_REPEATS}; --full: {FULL_REPEATS})")
    ap.add_argument("--full", action="store_true", help=f"{FULL_REPEATS} repeats per cell")
    ap.add_argument("--gamma", type=float, default=GAMMA, help=f"γ of the sampled column (default: {GAMMA})")
    ap.add_argument("--delta", type=float, default=DELTA, help=f"δ of the (ε, δ)-DP columns (default: {DELTA:g})")
    ap.add_argument("--grid-size", type=int, default=GRID_SIZE,
                    help=f"grid points on [L, U] for the selection mechanisms (default: {GRID_SIZE})")
    ap.add_argument("--sa-block-size", type=int, default=BLOCK_SIZE,
                    help=f"records per sample-and-aggregate block (default: {BLOCK_SIZE})")
    ap.add_argument("--no-plot", action="store_true", help="skip the PNG (no matplotlib needed)")
    _common.add_common_flags(ap, out_default=os.path.join("out", "baselines"))
    return ap


def _check_args(a) -> None:
    from raydp.errors import InvalidArgumentError

    if any(n < 2 for n in a.n):
        raise InvalidArgumentError("--n values must be >= 2")
    if any(not (math.isfinite(e) and e > 0) for e in a.eps):
        raise InvalidArgumentError("--eps values must be finite and > 0")
    if a.repeats is not None and a.repeats < 1:
        raise InvalidArgumentError("--repeats must be >= 1")
    if not 0 < a.delta < 1:
        raise InvalidArgumentError("--delta must lie in (0, 1)")
    if a.sa_block_size < 1:
        raise InvalidArgumentError("--sa-block-size must be >= 1")
    if a.grid_size < 2:
        raise InvalidArgumentError("--grid-size must be >= 2")


class _Acc:
    """Absolute errors of one (statistic, distribution, n, ε, method) cell."""

    __slots__ = ("errors", "refused", "trials")

    def __init__(self):
        self.errors: list[float] = []
        self.refused = 0
        self.trials = 0

    def add(self, value, truth: float) -> None:
        self.trials += 1
        if value is None:
            self.refused += 1
        else:
            self.errors.append(abs(float(value) - truth))


def run(a) -> list[dict]:
    import raydp
    from raydp import baselines as B
    from raydp import targets

    repeats = a.repeats or (FULL_REPEATS if a.full else DEFAULT_REPEATS)
    sa_backend = "local" if a.backend == "local" else "ray"
    options = _common.options(a, progress=False)
    grid = np.linspace(LOWER, UPPER, a.grid_size)
    sa_grid = np.linspace(LOWER, UPPER, SA_GRID_SIZE)
    stat_fns = {"median": B.lower_median, "mean": lambda x: float(np.mean(x))}
    stat_targets = {"median": B.median_target(), "mean": targets.mean()}
    rows: list[dict] = []

    for di, dist in enumerate(a.dists):
        base = oracle_for(dist)
        model = B.clipped(base, LOWER, UPPER)
        for n in a.n:
            t0 = time.perf_counter()
            blocks = max(1, n // a.sa_block_size)
            estimates, bounds = {}, {}
            for stat in a.stats:
                estimates[stat] = raydp.estimate_sensitivity(
                    stat_targets[stat], model, n, mechanism=raydp.Laplace(1.0), gamma=a.gamma, options=options)
            if "median" in a.stats:
                for ei, eps in enumerate(a.eps):
                    rng = np.random.default_rng([a.seed, 7, di, n, ei])  # public simulation, not private data
                    bounds[eps] = B.propose_bound(model, n, eps, a.delta, LOWER, UPPER, rng=rng)
            acc = {(s, e, m[0]): _Acc() for s in a.stats for e in a.eps for m in METHODS if s in m[3]}
            for r in range(repeats):
                rng = np.random.default_rng([a.seed, 1, di, n, r])
                x = np.clip(base.sample(rng, n), LOWER, UPPER)
                for stat in a.stats:
                    truth = float(stat_fns[stat](x))
                    mean = stat == "mean"
                    # blocks run numpy's median/mean: the lower median of an even-sized block is biased
                    # low by half a gap, which averaging over blocks would not remove
                    z = B.block_values(x, np.mean if mean else np.median, blocks, backend=sa_backend)
                    for eps in a.eps:
                        cell = {m[0]: acc[(stat, eps, m[0])] for m in METHODS if stat in m[3]}
                        if mean:
                            cell["global"].add(B.global_mean_release(x, eps, LOWER, UPPER).value, truth)
                            sc = B.smooth_mean_release(x, eps, LOWER, UPPER).value
                            sl = B.smooth_mean_release(x, eps, LOWER, UPPER, delta=a.delta).value
                        else:
                            cell["global"].add(B.global_median_release(x, eps, LOWER, UPPER).value, truth)
                            sc = B.smooth_median_release(x, eps, LOWER, UPPER).value
                            sl = B.smooth_median_release(x, eps, LOWER, UPPER, delta=a.delta).value
                            cell["ptr"].add(B.ptr_median(x, eps, a.delta, bounds[eps], LOWER, UPPER).value, truth)
                            cell["exponential"].add(B.exponential_quantile(x, 0.5, eps, LOWER, UPPER, grid=grid).value,
                                                    truth)
                            cell["inverse_sensitivity"].add(
                                B.inverse_sensitivity_median(x, eps, LOWER, UPPER, grid=grid).value, truth)
                        cell["smooth_cauchy"].add(sc, truth)
                        cell["smooth_laplace"].add(sl, truth)
                        if r == 0:  # Algorithm 2 once per cell: checked against the estimate, sealed, replayed
                            value = raydp.sample_then_respond(x, stat_targets[stat], raydp.Laplace(eps),
                                                              estimate=estimates[stat]).value
                        else:  # the repeats draw the same mechanism's OpenDP noise on f(x) (simulated data)
                            value = raydp.Laplace(eps).release(stat_targets[stat](x), estimates[stat].sensitivity)
                        cell["sampled"].add(min(max(float(np.asarray(value)), LOWER), UPPER), truth)
                        cell["sample_aggregate"].add(
                            B.widened_winsorized_mean(z, eps, LOWER, UPPER, grid=sa_grid).value, truth)
            for (stat, eps, method), c in acc.items():
                _, label, notion, _ = next(m for m in METHODS if m[0] == method)
                errs = np.asarray(c.errors)
                sens = {"global": (UPPER - LOWER) / (n if stat == "mean" else 1),
                        "sampled": estimates[stat].sensitivity}.get(method, math.nan)
                if method == "ptr":
                    sens = bounds[eps]
                rows.append(dict(
                    statistic=stat, distribution=dist, n=n, epsilon=eps, method=method, label=label, notion=notion,
                    mae=float(errs.mean()) if errs.size else math.nan,
                    se=float(errs.std(ddof=1) / math.sqrt(errs.size)) if errs.size > 1 else math.nan,
                    refused_rate=c.refused / c.trials, answered=int(errs.size), repeats=c.trials,
                    delta=a.delta if "δ)" in notion else 0.0, gamma=a.gamma if "γ" in notion else 0.0,
                    lower=LOWER, upper=UPPER, sensitivity=float(sens)))
            _common.say(a, f"{dist:10s} n={n:<6d} {repeats} repeats  {time.perf_counter() - t0:6.1f} s")
    return rows


# ----------------------------------------------------------------------------- outputs


def write_parquet(rows: list[dict], path: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    types = dict(statistic=pa.string(), distribution=pa.string(), n=pa.int64(), epsilon=pa.float64(),
                 method=pa.string(), label=pa.string(), notion=pa.string(), mae=pa.float64(), se=pa.float64(),
                 refused_rate=pa.float64(), answered=pa.int64(), repeats=pa.int64(), delta=pa.float64(),
                 gamma=pa.float64(), lower=pa.float64(), upper=pa.float64(), sensitivity=pa.float64())
    pq.write_table(pa.table({c: pa.array([r[c] for r in rows], type=types[c]) for c in COLUMNS}), path)


def _fmt(v: float) -> str:
    if not math.isfinite(v):
        return "—"
    return f"{v:.3g}" if v >= 1e-3 else f"{v:.2e}"


def markdown(rows: list[dict], repeats: int, eps_filter: float | None = None) -> str:
    """One table per statistic: rows (distribution, n, ε), one column per method (notion in the header)."""
    lines = []
    for stat in [s for s in STATISTICS if any(r["statistic"] == s for r in rows)]:
        methods = [m for m in METHODS if stat in m[3]]
        sub = {(r["distribution"], r["n"], r["epsilon"], r["method"]): r for r in rows if r["statistic"] == stat}
        keys = sorted({k[:3] for k in sub}, key=lambda k: (DISTRIBUTIONS.index(k[0]), k[1], k[2]))
        if eps_filter is not None:
            keys = [k for k in keys if k[2] == eps_filter]
        lines.append(f"**{stat}** — mean absolute error over {repeats} datasets (best in bold; PTR: error when it "
                     "answered, ⊥ rate in brackets)\n")
        lines.append("| distribution | n | ε | " + " | ".join(f"{m[1]} [{m[2]}]" for m in methods) + " |")
        lines.append("|---|---:|---:|" + "---:|" * len(methods))
        for k in keys:
            vals = [sub[k + (m[0],)]["mae"] for m in methods]
            finite = [v for v in vals if math.isfinite(v)]
            best = min(finite) if finite else math.nan
            cells = []
            for m, v in zip(methods, vals):
                s = _fmt(v)
                if math.isfinite(v) and v == best:
                    s = f"**{s}**"
                if m[0] == "ptr":
                    s += f" (⊥ {sub[k + ('ptr',)]['refused_rate']:.0%})"
                cells.append(s)
            lines.append(f"| {DIST_LABELS[k[0]]} | {k[1]} | {k[2]:g} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def write_markdown(rows: list[dict], a, repeats: int, path: str, argv=None) -> None:
    head = (f"# Sampled sensitivity vs. baselines\n\n"
            f"Data clipped to the public range [{LOWER:g}, {UPPER:g}]; releases clamped to it. "
            f"γ = {a.gamma:g} (sampled Δ̂), δ = {a.delta:g} (the (ε, δ)-DP columns), exponential / inverse-sensitivity grid of {a.grid_size} points on the range, "
            f"sample-and-aggregate blocks of {a.sa_block_size} records. Privacy notion of each column in brackets: "
            "ε-DP and (ε, δ)-DP hold for every pair of neighbouring databases; (ε, 0, γ)-RDP only for all but a γ "
            "fraction of neighbouring pairs drawn from the public model.\n\n")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(_report.stamped("compare_baselines", argv, head + markdown(rows, repeats)))


COLOURS = {"global": "#000000", "sampled": "#d62728", "smooth_cauchy": "#1f77b4", "smooth_laplace": "#17becf",
           "ptr": "#9467bd", "sample_aggregate": "#8c564b", "exponential": "#2ca02c",
           "inverse_sensitivity": "#ff7f0e"}
STYLES = {"global": "s--", "sampled": "o-", "smooth_cauchy": "^-", "smooth_laplace": "v-", "ptr": "D-",
          "sample_aggregate": "P-", "exponential": "x-", "inverse_sensitivity": "*-"}


def _mathtext(label: str) -> str:
    return label.replace("Δ̂", r"$\hat{\Delta}$")  # the combining hat does not render in DejaVu Sans


def plot(rows: list[dict], path: str, repeats: int) -> str:
    from _plots import pyplot, save_figure

    plt = pyplot()
    stats = [s for s in STATISTICS if any(r["statistic"] == s for r in rows)]
    dists = [d for d in DISTRIBUTIONS if any(r["distribution"] == d for r in rows)]
    ns = sorted({r["n"] for r in rows})
    cols = [(s, d) for s in stats for d in dists]
    fig, axes = plt.subplots(len(ns), len(cols), figsize=(3.3 * len(cols) + 0.6, 2.75 * len(ns) + 1.3), dpi=110,
                             squeeze=False)
    try:
        for i, n in enumerate(ns):
            for j, (s, d) in enumerate(cols):
                ax = axes[i][j]
                for key, label, notion, applies in METHODS:
                    if s not in applies:
                        continue
                    pts = sorted((r["epsilon"], r["mae"]) for r in rows if r["statistic"] == s and
                                 r["distribution"] == d and r["n"] == n and r["method"] == key and
                                 math.isfinite(r["mae"]) and r["mae"] > 0)
                    if pts:
                        xs, ys = zip(*pts)
                        ax.plot(xs, ys, STYLES[key], color=COLOURS[key], lw=1.3, ms=4.5,
                                label=_mathtext(f"{label} [{notion}]"))
                ax.set_xscale("log")
                ax.set_yscale("log")
                ax.grid(True, which="major", alpha=0.35)
                ax.tick_params(labelsize=8.5)
                if i == 0:
                    ax.set_title(f"{s} — {DIST_LABELS[d]}", fontsize=10.5)
                if j == 0:
                    ax.set_ylabel(f"n = {n}\nmean |error|", fontsize=10.5)
                if i == len(ns) - 1:
                    ax.set_xlabel("ε", fontsize=10.5)
        handles = {}
        for ax in axes.flat:
            for h, l in zip(*ax.get_legend_handles_labels()):
                handles.setdefault(l, h)
        order = [_mathtext(f"{m[1]} [{m[2]}]") for m in METHODS if _mathtext(f"{m[1]} [{m[2]}]") in handles]
        fig.legend([handles[l] for l in order], order, loc="lower center", ncol=min(4, len(order)), fontsize=10.5,
                   frameon=False)
        fig.suptitle(f"Mean absolute error of private median / mean releases ({repeats} datasets per point; "
                     f"data clipped to [{LOWER:g}, {UPPER:g}]; PTR: answered releases only)", fontsize=10.5)
        fig.tight_layout(rect=(0, 0.075 if len(ns) > 1 else 0.15, 1, 0.97))
        save_figure(fig, path)
    finally:
        plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    a = make_parser().parse_args(argv)
    _check_args(a)
    repeats = a.repeats or (FULL_REPEATS if a.full else DEFAULT_REPEATS)
    if a.backend != "local":
        import raydp

        raydp.RayBackend(address=a.address, num_cpus=a.num_cpus).connect()  # sample-and-aggregate uses it too
    _common.say(a, f"compare_baselines: {len(a.dists)} distributions × n {a.n} × ε {a.eps}, {repeats} repeats; "
                   f"{_common.where(a)}")
    t0 = time.perf_counter()
    rows = run(a)
    os.makedirs(a.out, exist_ok=True)
    stem = os.path.join(a.out, "compare_baselines")
    write_parquet(rows, stem + ".parquet")
    write_markdown(rows, a, repeats, stem + ".md", argv)
    if not a.no_plot:
        plot(rows, stem + ".png", repeats)
    print(markdown(rows, repeats))
    print(f"wrote {stem}.parquet, {stem}.md" + ("" if a.no_plot else f", {stem}.png")
          + f" in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(_common.run_main(main))
