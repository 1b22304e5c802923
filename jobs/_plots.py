"""Tables and paper figures for the jobs in this directory (not part of the raydp library).

:func:`markdown_table` and :func:`save_table_markdown` write result rows as GitHub-flavoured
Markdown (no dependencies). :func:`plot_example6` (paper Figure 4, ``example6.py``) and
:func:`plot_kde_tv` (Figure 7, ``kde_bernstein.py``) draw a job's figure from its result rows (a
list of dicts, a pyarrow Table, or anything with ``to_pylist`` or ``to_dict("records")``), so a
figure can be redrawn from the job's Parquet file alone. :func:`pyplot` is matplotlib's pyplot with
the non-interactive Agg backend (imported lazily, as in :mod:`raydp.plots`), for the jobs that
draw their own figures.
"""

from __future__ import annotations

import math
import os
from typing import Iterable

import numpy as np

from raydp.errors import InvalidArgumentError
from raydp.plots import pyplot

__all__ = ["markdown_table", "save_table_markdown", "plot_example6", "plot_kde_tv", "pyplot"]


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
        raise InvalidArgumentError("a table needs at least one column")
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


def _as_rows(data) -> list[dict]:
    if hasattr(data, "to_pylist"):  # pyarrow Table
        return list(data.to_pylist())
    if hasattr(data, "to_dict") and not isinstance(data, dict):  # pandas DataFrame
        return list(data.to_dict("records"))
    rows = list(data)
    if rows and not isinstance(rows[0], dict):
        raise InvalidArgumentError(f"expected result rows as dicts, got {type(rows[0]).__name__}")
    return rows


def save_figure(fig, path) -> str:
    """Write ``fig`` to ``path`` (its directory made if needed); returns the path."""
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path)
    return path


def _need(rows: list[dict], columns: tuple[str, ...], what: str) -> None:
    if not rows:
        raise InvalidArgumentError(f"{what}: no rows to plot")
    missing = [c for c in columns if c not in rows[0]]
    if missing:
        raise InvalidArgumentError(f"{what}: rows lack column(s) {', '.join(missing)}")


def plot_example6(data, path, *, title: str | None = None) -> str:
    """Paper Figure 4: sampled Δ̂ (mean over repeats) against γ, one line per m, with the exact Δ*(γ).

    Rows need ``m``, ``gamma``, ``sensitivity_mean``, ``sensitivity_sd`` and ``delta_star``
    (= log(1/γ)/(λn)); λn is read back from them to draw the analytic curve on a fine γ grid from
    near 0. The y axis is fitted to the sampled curves (the analytic one diverges as γ → 0 and is
    clipped there, as in the paper). A band shows ±1 sd over the repeats. Returns ``path``.
    """
    rows = _as_rows(data)
    _need(rows, ("m", "gamma", "sensitivity_mean", "sensitivity_sd", "delta_star"), "plot_example6")
    plt = pyplot()
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
        return save_figure(fig, path)
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
    plt = pyplot()
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
        return save_figure(fig, path)
    finally:
        plt.close(fig)
