"""Picture of a sensitivity estimate (optional: needs matplotlib).

:func:`plot_cdf` draws the empirical CDF of the G sample behind an estimate: Δ̂ = G_(k) is where
that CDF reaches k/m, which Theorem 15 puts at or above the 1 − γ level. ``raydp show URI --plot
FILE.png`` calls it. (The jobs' Markdown tables and paper figures live beside them, in
``jobs/_plots.py``.)

matplotlib is imported lazily, with the non-interactive Agg backend, so importing this module (or
raydp) never needs it and never opens a window.
"""

from __future__ import annotations

import math
import os

import numpy as np

from .errors import InvalidArgumentError

__all__ = ["plot_cdf", "pyplot"]

NORM_LABELS = {"l1": "ℓ1", "l2": "ℓ2", "linf": "ℓ∞"}
# Above this many finite values the CDF is drawn through quantile-spaced points (plus the exact
# upper tail, which is where Δ̂ lives): a million-step line adds nothing a reader can see.
_MAX_PLOTTED = 20_000
# On a log x axis, show at most this many decades below the largest G.
_LOG_DECADES = 6


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (files, no screen), or one line saying how to install it."""
    try:
        import matplotlib
    except ImportError:
        raise InvalidArgumentError("plotting needs matplotlib (a raydp dependency): pip install matplotlib") from None
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
            raise InvalidArgumentError("the estimate's G sample is incomplete (NaN entries); cannot plot its CDF")
        tail_only, offset = False, 0
    elif getattr(estimate, "top", None) is not None and np.size(estimate.top) >= 2:
        g = np.asarray(estimate.top, dtype=np.float64)
        tail_only, offset = True, m - g.size  # g holds ranks offset+1 .. m
    else:
        raise InvalidArgumentError("plot_cdf needs the G sample: estimate with keep_sample=True, or load the "
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
    plt = pyplot()
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
