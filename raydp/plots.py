"""Pictures and tables of sensitivity estimates (optional: needs matplotlib for the pictures).

:func:`plot_cdf` draws the empirical CDF of the G sample behind an estimate: Δ̂ = G_(k) is where
that CDF reaches k/m, which Theorem 15 puts at or above the 1 − γ level. ``raydp show URI --plot
FILE.png`` calls it. :func:`save_table_markdown` writes result rows as a Markdown table (no
dependencies), for the jobs under ``jobs/``.

matplotlib is imported lazily, with the non-interactive Agg backend, so importing this module (or
raydp) never needs it and never opens a window.
"""

from __future__ import annotations

import math
import os
from typing import Iterable

import numpy as np

from .errors import InvalidArgument

__all__ = ["plot_cdf", "save_table_markdown", "markdown_table"]

NORM_LABELS = {"l1": "ℓ1", "l2": "ℓ2", "linf": "ℓ∞"}
# Above this many finite values the CDF is drawn through quantile-spaced points (plus the exact
# upper tail, which is where Δ̂ lives): a million-step line adds nothing a reader can see.
_MAX_PLOTTED = 20_000
# On a log x axis, show at most this many decades below the largest G.
_LOG_DECADES = 6


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise InvalidArgument("plotting needs matplotlib: pip install 'raydp-sensitivity[plot]'") from None
    if matplotlib.get_backend().lower() != "agg":
        matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _cdf_points(estimate):
    """(sorted finite G values, their ECDF levels, failures, tail_only) out of ``estimate``.

    Levels are counted over all m pairs, so +inf failures keep the curve below 1 by failures/m.
    Without the full sample only the m − k + 1 largest G are known; the ECDF is still exact there
    (each value's level is 1 − (number of larger values)/m), so that tail is what gets drawn.
    """
    m = int(estimate.plan.m)
    sample = getattr(estimate, "sample", None)
    if sample is not None:
        g = np.asarray(sample, dtype=np.float64)
        if np.isnan(g).any():
            raise InvalidArgument("the estimate's G sample is incomplete (NaN entries); cannot plot its CDF")
        tail_only, offset = False, 0
    elif getattr(estimate, "top", None) is not None and np.size(estimate.top) >= 2:
        g = np.asarray(estimate.top, dtype=np.float64)
        tail_only, offset = True, m - g.size  # g holds ranks offset+1 .. m
    else:
        raise InvalidArgument("plot_cdf needs the G sample: estimate with keep_sample=True, or load the "
                              "estimate from its store with raydp.load_estimate(uri)")
    failures = int(np.isposinf(g).sum())
    finite = np.sort(g[np.isfinite(g)])
    levels = (offset + np.arange(1, finite.size + 1)) / m
    if finite.size > _MAX_PLOTTED:
        tail = max(1, int(m - estimate.plan.k + 1) * 2)
        idx = np.unique(np.r_[np.linspace(0, finite.size - 1, _MAX_PLOTTED // 2).round().astype(int),
                              np.arange(max(0, finite.size - tail), finite.size)])
        finite, levels = finite[idx], levels[idx]
    return finite, levels, failures, tail_only


def plot_cdf(estimate, path) -> str:
    """Write the empirical CDF of ``estimate``'s G sample to ``path`` (PNG, or any format
    matplotlib infers from the suffix); return the path.

    Marks Δ̂ (vertical line) and the 1 − γ level (horizontal line); the title gives the plan
    (m, k, γ) and the norm. Failed pairs (G = +∞) cannot be drawn: they hold the curve below 1 and
    are reported in a note. The x axis is logarithmic when the positive values span more than two
    decades (at most six decades are shown; smaller values, zeros included, sit at the left edge
    and are counted in a note). Needs ``estimate.sample`` (``keep_sample=True``, or
    :func:`raydp.load_estimate`); without it only the exactly known upper tail (the m − k + 1
    largest G, if at least two) is drawn.
    """
    plt = _pyplot()
    values, levels, failures, tail_only = _cdf_points(estimate)
    p = estimate.plan
    delta = float(estimate.sensitivity)
    norm = NORM_LABELS.get(str(estimate.norm), str(estimate.norm))

    fig, ax = plt.subplots(figsize=(7.0, 4.4), dpi=120)
    try:
        # Log x when the positive values span more than two decades. The window is capped at
        # _LOG_DECADES below the largest value: G of a few ulps (e.g. an SVM whose changed record is
        # not a support vector) or exactly 0 would otherwise stretch the axis over 15+ decades of
        # nothing. Such values are drawn at the window's left edge and counted in a note.
        notes = []
        positive = values[values > 0]
        log_x = positive.size >= 2 and positive[-1] / positive[0] > 100.0
        delta_x = delta
        if log_x:
            floor = max(float(positive[0]), float(positive[-1]) * 10.0 ** -_LOG_DECADES)
            if delta > 0:
                floor = min(floor, delta)  # Δ̂ always stays in view
            below = int(np.sum(values < floor))
            if below:
                zeros = int(np.sum(values == 0))
                notes.append(f"{below} pair{'s' if below != 1 else ''} with G < {floor:.2g}"
                             + (f" ({zeros} exactly 0)" if zeros else "") + " drawn at the left edge")
                values = np.maximum(values, floor)
            delta_x = max(delta, floor)
            ax.set_xscale("log")
        if values.size:
            # start the step at level 0 (or at the first known level for a tail) on the left edge
            x = np.r_[values[0], values]
            y = np.r_[0.0 if not tail_only else levels[0] - 1.0 / p.m, levels]
            ax.step(x, y, where="post", color="#1f77b4", lw=1.6,
                    label="empirical CDF of G" + (" (upper tail only)" if tail_only else ""))

        ax.axhline(1.0 - p.gamma, color="#d62728", ls="--", lw=1.1,
                   label=f"1 − γ = {1.0 - p.gamma:.4g}")
        if math.isfinite(delta):
            ax.axvline(delta_x, color="#2ca02c", ls="-", lw=1.3, label=f"Δ̂ = G₍ₖ₎ = {delta:.4g}")
            ax.plot([delta_x], [p.k / p.m], "o", color="#2ca02c", ms=5, zorder=5)
        bottom = 0.0
        if tail_only and values.size:
            bottom = max(0.0, min(levels[0], 1.0 - p.gamma) - 0.02)
        ax.set_ylim(bottom, 1.0 + 0.02 * (1.0 - bottom))
        ax.set_xlabel(f"G = ‖f(D) − f(D′)‖ ({norm})")
        ax.set_ylabel("fraction of the m pairs")
        target = (estimate.target or {}).get("name", "?")
        oracle = (estimate.oracle or {}).get("name", "?")
        ax.set_title(f"Sensitivity sample: {target} on {oracle}, n = {estimate.n}\n"
                     f"m = {p.m}, k = {p.k}, γ = {p.gamma:.4g} ({norm} norm)", fontsize=10)
        if failures:
            notes.append(f"{failures} failed pair{'s' if failures != 1 else ''} (G = +∞) not drawn; "
                         f"the CDF stops at {1 - failures / p.m:.4g}")
        if not math.isfinite(delta):
            notes.append("Δ̂ = +∞: too many failed pairs for this γ")
        if notes:
            ax.text(0.98, 0.04, "\n".join(notes), transform=ax.transAxes, ha="right", va="bottom",
                    fontsize=8, color="#444444",
                    bbox=dict(boxstyle="round,pad=0.3", fc="#fff8e0", ec="#c8a000", lw=0.6))
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(loc="best", fontsize=8, framealpha=0.9)
        fig.tight_layout()
        path = os.fspath(path)
        parent = os.path.dirname(os.path.abspath(path))
        os.makedirs(parent, exist_ok=True)
        fig.savefig(path)
    finally:
        plt.close(fig)
    return path


# ----------------------------------------------------------------------------- tables


def _cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, (bool, np.bool_)):
        return str(bool(v))
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        v = float(v)
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "∞" if v > 0 else "−∞"
        return f"{v:.4g}"
    return str(v).replace("|", "\\|").replace("\n", " ")


def markdown_table(rows: Iterable[dict], columns: list[str] | None = None) -> str:
    """A GitHub-flavoured Markdown table of ``rows`` (floats to 4 significant digits).

    Columns are ``columns`` or the keys of the rows in first-seen order; missing cells are blank.
    """
    rows = list(rows)
    if columns is None:
        columns = []
        for r in rows:
            columns.extend(c for c in r if c not in columns)
    if not columns:
        raise InvalidArgument("a table needs at least one column")
    numeric = [all(isinstance(r.get(c), (int, float, np.integer, np.floating)) and not isinstance(r.get(c), bool)
                   for r in rows if r.get(c) is not None) for c in columns]
    lines = ["| " + " | ".join(columns) + " |",
             "|" + "|".join("---:" if num else "---" for num in numeric) + "|"]
    lines += ["| " + " | ".join(_cell(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def save_table_markdown(rows: list[dict], path, columns: list[str] | None = None) -> str:
    """Write :func:`markdown_table` of ``rows`` to ``path`` (directories created); return the text."""
    text = markdown_table(rows, columns)
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return text


# ----------------------------------------------------------------------------- paper figures
# Pictures for the paper-reproduction jobs (jobs/example6.py, jobs/kde_bernstein.py). They take
# the jobs' result rows (a list of dicts, a pyarrow Table, or anything with ``to_pylist`` or
# ``to_dict("records")``), so a figure can be redrawn from the job's Parquet file alone.

__all__ += ["plot_example6", "plot_kde_tv"]


def _as_rows(data) -> list[dict]:
    if hasattr(data, "to_pylist"):  # pyarrow Table
        return list(data.to_pylist())
    if hasattr(data, "to_dict") and not isinstance(data, dict):  # pandas DataFrame
        return list(data.to_dict("records"))
    rows = list(data)
    if rows and not isinstance(rows[0], dict):
        raise InvalidArgument(f"expected result rows as dicts, got {type(rows[0]).__name__}")
    return rows


def _save(fig, path) -> str:
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path)
    return path


def _need(rows: list[dict], columns: tuple[str, ...], what: str) -> None:
    if not rows:
        raise InvalidArgument(f"{what}: no rows to plot")
    missing = [c for c in columns if c not in rows[0]]
    if missing:
        raise InvalidArgument(f"{what}: rows lack column(s) {', '.join(missing)}")


def plot_example6(data, path, *, title: str | None = None) -> str:
    """Paper Figure 4: sampled Δ̂ (mean over repeats) against γ, one line per m, with the exact Δ*(γ).

    Rows need ``m``, ``gamma``, ``sensitivity_mean``, ``sensitivity_sd`` and ``delta_star``
    (= log(1/γ)/(λn)); λn is read back from them to draw the analytic curve on a fine γ grid from
    near 0. The y axis is fitted to the sampled curves (the analytic one diverges as γ → 0 and is
    clipped there, as in the paper). A band shows ±1 sd over the repeats. Returns ``path``.
    """
    rows = _as_rows(data)
    _need(rows, ("m", "gamma", "sensitivity_mean", "sensitivity_sd", "delta_star"), "plot_example6")
    plt = _pyplot()
    g0 = float(rows[0]["gamma"])
    lam_n = math.log(1.0 / g0) / float(rows[0]["delta_star"])
    ms = sorted({int(r["m"]) for r in rows}, reverse=True)
    gmax = max(float(r["gamma"]) for r in rows)
    fig, ax = plt.subplots(figsize=(6.4, 4.6), dpi=120)
    try:
        grid = np.linspace(gmax / 400.0, gmax, 800)
        ax.plot(grid, np.log(1.0 / grid) / lam_n, color="black", lw=2.0, label="Analytical Δ*(γ)", zorder=4)
        colours = plt.get_cmap("viridis")(np.linspace(0.15, 0.8, max(2, len(ms))))
        styles = ["-", "--", "-.", ":"]
        top = 0.0
        for i, m in enumerate(ms):
            pts = sorted((float(r["gamma"]), float(r["sensitivity_mean"]), float(r["sensitivity_sd"]))
                         for r in rows if int(r["m"]) == m)
            g, mu, sd = (np.array(v) for v in zip(*pts))
            ax.plot(g, mu, styles[i % len(styles)], color=colours[i], lw=1.8, marker="o", ms=3.2,
                    label=f"m = {m}")
            ax.fill_between(g, mu - sd, mu + sd, color=colours[i], alpha=0.13, lw=0)
            top = max(top, float(np.max(mu + sd)))
        low = min(float(np.log(1.0 / gmax) / lam_n), min(float(r["sensitivity_mean"]) for r in rows))
        ax.set_xlim(0.0, gmax * 1.02)
        ax.set_ylim(low - 0.08 * (top - low), top + 0.08 * (top - low))
        ax.set_xlabel("Privacy confidence γ")
        ax.set_ylabel("Computed sensitivity")
        repeats = rows[0].get("repeats")
        default = (f"Analytical vs estimated sensitivity, Example 6 (n·λ = {lam_n:.4g}"
                   + (f", {repeats} repeats)" if repeats else ")"))
        ax.set_title(title or default, fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper right", fontsize=9, framealpha=0.92)
        fig.tight_layout()
        return _save(fig, path)
    finally:
        plt.close(fig)


def plot_kde_tv(data, path, *, title: str | None = None) -> str:
    """Paper Figure 7: total variation distance of the private KDE release against ε (log-log).

    Rows need ``curve`` (``"global"`` or ``"sampled"``), ``gamma`` (NaN/None for global), ``m``,
    ``epsilon``, ``tv_mean`` and ``tv_se``; an ``approx_tv`` column (the noiseless Bernstein
    approximation error, the floor every curve tends to as ε grows) is drawn as a dotted line.
    Error bars are ±2 standard errors over the repeats. Returns ``path``.
    """
    rows = _as_rows(data)
    _need(rows, ("curve", "gamma", "m", "epsilon", "tv_mean", "tv_se"), "plot_kde_tv")
    plt = _pyplot()
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    def key(r):
        g = r.get("gamma")
        return (r["curve"], None if g is None or (isinstance(g, float) and math.isnan(g)) else float(g))

    curves: dict = {}
    for r in rows:
        curves.setdefault(key(r), []).append(r)
    order = sorted(curves, key=lambda c: (c[0] != "global", c[1] if c[1] is not None else 0.0))
    eps_all = sorted({float(r["epsilon"]) for r in rows})
    fig, ax = plt.subplots(figsize=(6.4, 4.6), dpi=120)
    try:
        colours = plt.get_cmap("viridis")(np.linspace(0.2, 0.75, max(2, len(order) - 1)))
        ci = 0
        for c in order:
            pts = sorted(curves[c], key=lambda r: float(r["epsilon"]))
            e = np.array([float(r["epsilon"]) for r in pts])
            mu = np.array([float(r["tv_mean"]) for r in pts])
            se = np.array([float(r["tv_se"]) for r in pts])
            if c[0] == "global":
                colour, marker, label = "black", "s", "Global"
            else:
                colour, marker = colours[ci], "o" if ci == 0 else "^"
                ci += 1
                label = f"γ = {c[1]:g}, m = {int(pts[0]['m'])} (opt. k)"
            ax.errorbar(e, mu, yerr=np.minimum(2 * se, 0.95 * mu), color=colour, marker=marker, ms=4.5,
                        lw=1.6, capsize=2.5, label=label)
        approx = [float(r["approx_tv"]) for r in rows if r.get("approx_tv") is not None]
        if approx:
            ax.axhline(approx[0], color="#888888", ls=":", lw=1.4, label="Bernstein approximation (no noise)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ticks = [t for t in (0.05, 0.1, 0.15, 0.2) if eps_all[0] * 0.999 <= t <= eps_all[-1] * 1.001] or eps_all
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.2f}"))
        ax.set_xlim(eps_all[0] / 1.06, eps_all[-1] * 1.06)
        ax.set_xlabel("Privacy budget ε (log scale)")
        ax.set_ylabel("Total variation distance (log scale)")
        ax.set_title(title or "KDE error (relative to non-private): sampled vs global sensitivity", fontsize=10)
        ax.grid(True, which="major", alpha=0.35)
        ax.grid(True, which="minor", axis="y", alpha=0.12)
        handles, labels = ax.get_legend_handles_labels()
        last = [i for i, lab in enumerate(labels) if lab.startswith("Bernstein approximation")]
        keep = [i for i in range(len(labels)) if i not in last] + last  # the floor goes last
        ax.legend([handles[i] for i in keep], [labels[i] for i in keep], loc="upper right", fontsize=8.5,
                  framealpha=0.92)
        fig.tight_layout()
        return _save(fig, path)
    finally:
        plt.close(fig)
