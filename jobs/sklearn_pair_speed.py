"""Pairs per second of scikit-learn targets with and without their fast forms, and the one-liner's time, m and Δ̂.

The same time budget buys far more pairs when a pair is cheap. In one process, on one machine:

* ``pairs``: pairs per second the sampler evaluates (``estimate_sensitivity``, in process, one core, BLAS
  held to one thread for both — on a busy machine scikit-learn's fits with two BLAS threads were several
  times slower, which would flatter the speed-up) for
  ``LogisticRegression()``, ``Ridge()`` and ``make_pipeline(StandardScaler(), LogisticRegression())`` at
  n = 400 records of d = 17 features — *scikit-learn fits*: the targets made inside
  ``raydp.sklearn.fast.disabled()`` (every database fitted by scikit-learn), *fast forms*: with their fast forms (batched normal
  equations; the exact logistic minimiser, D′ warm-started from D). Repeats are interleaved, so the
  machine's load falls on both alike. Next to it, how far the fast G are from the released function's: the
  same pairs evaluated through the block form and database by database (``__call__``, the function the
  release fits), the largest difference relative to Δ̂.
* ``line``: the README's one-liner (``PrivateEstimator(make_pipeline(StandardScaler(), LogisticRegression()),
  epsilon=1, delta=1e-5, gamma=0.05, tune=True)``, ``backend="local"``, the default 20 s budget) on the
  README's data (breast cancer, 199 private training rows, 30 columns) and on a 400-row, 17-column
  ``make_classification`` set, for ``--seeds`` seeds, both ways: wall time, m and Δ̂ and its spread
  across the seeds (sd / mean). *Scikit-learn fits, fewest pairs* is the fit without fast forms and at the
  fewest pairs γ allows (``time_budget=None``: m = k = 1305, Δ̂ the largest G); *as written*: the line as
  written (fast forms, 20 s budget).

    python jobs/sklearn_pair_speed.py                  # ~10 min on 2 cores
    python jobs/sklearn_pair_speed.py --repeats 1 --seeds 2 --out /tmp/sps
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _report  # noqa: E402

import raydp  # noqa: E402
from raydp import SamplerOptions, oracles  # noqa: E402
from raydp.sklearn import PrivateEstimator, fast  # noqa: E402
from raydp.testing.cold import Cold  # noqa: E402

N, D = 400, 17


def _public(kind: str) -> np.ndarray:
    from sklearn.datasets import make_classification, make_regression

    if kind == "regression":
        X, y = make_regression(2000, D, n_informative=8, noise=10.0, random_state=0)
    else:
        X, y = make_classification(2000, D, n_informative=8, random_state=0)
    return np.column_stack([X, y])


def _models():
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return [("LogisticRegression()", LogisticRegression, "classification"),
            ("Ridge()", Ridge, "regression"),
            ("StandardScaler() + LogisticRegression()", lambda: make_pipeline(StandardScaler(), LogisticRegression()),
             "classification")]


def _target(make, public):
    pe = PrivateEstimator(make(), oracle=oracles.bootstrap(public), epsilon=1.0, gamma=0.05)
    return pe._skeleton(pe._checked_estimator(), oracles.bootstrap(public), N, public.shape[1] - 1, True).target


def _rate(target, oracle, m: int, seed: int) -> float:
    t0 = time.perf_counter()
    raydp.estimate_sensitivity(target, oracle, N, m=m, k=m, options=SamplerOptions(seed=seed, backend="local",
                                                                                 progress=False))
    return m / (time.perf_counter() - t0)


def pairs_section(repeats: int, fits_m: int, fast_m: int) -> dict:
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        return _pairs_section(repeats, fits_m, fast_m)


def _pairs_section(repeats: int, fits_m: int, fast_m: int) -> dict:
    out = {}
    for name, make, kind in _models():
        public = _public(kind)
        oracle = oracles.bootstrap(public)
        fast_target = _target(make, public)
        with fast.disabled():
            fits_target = _target(make, public)
        rates = {"fits": [], "fast": [], "ratio": []}
        for r in range(repeats):
            b = _rate(fits_target, oracle, fits_m, seed=r)
            a = _rate(fast_target, oracle, fast_m, seed=r)
            rates["fits"].append(b)
            rates["fast"].append(a)
            rates["ratio"].append(a / b)
        # the G of the fast form against the released function's on the same pairs (same seed and blocks)
        kw = dict(m=512, k=512, options=SamplerOptions(seed=11, block_size=64, keep_sample=True, backend="local",
                                                      progress=False))
        f = raydp.estimate_sensitivity(fast_target, oracle, N, **kw)
        c = raydp.estimate_sensitivity(Cold(fast_target), oracle, N, **kw)
        out[name] = {"rates": rates, "max_g_difference": float(np.max(np.abs(f.sample - c.sample))),
                     "delta_hat": float(c.sensitivity),
                     "delta_hat_difference": float(abs(f.sensitivity - c.sensitivity)),
                     "pair_form": "pair_batch" if callable(getattr(fast_target, "pair_batch", None)) else "batch"}
        print(f"{name}: scikit-learn fits {_report.spread_text(rates['fits'], '{:.0f}')} pairs/s, fast forms "
              f"{_report.spread_text(rates['fast'], '{:.0f}')} pairs/s", flush=True)
    return out


def _line_data(which: str):
    from sklearn.datasets import load_breast_cancer, make_classification
    from sklearn.model_selection import train_test_split

    if which == "breast cancer (README)":
        X, y = load_breast_cancer(return_X_y=True)
    else:
        X, y = make_classification(1144, D, n_informative=8, random_state=0)  # 400 private training rows
    X_public, X_private, y_public, y_private = train_test_split(X, y, test_size=0.5, random_state=0)
    X_train, X_test, y_train, y_test = train_test_split(X_private, y_private, test_size=0.3, random_state=0)
    return np.column_stack([X_public, y_public]), X_train, y_train, X_test, y_test


def _line(public, X, y, Xt, yt, seed: int, time_budget="auto") -> dict:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = PrivateEstimator(make_pipeline(StandardScaler(), LogisticRegression()),
                                 oracle=oracles.bootstrap(public), epsilon=1.0, delta=1e-5, gamma=0.05, tune=True,
                                 time_budget=time_budget,
                                 options=raydp.SamplerOptions(seed=seed, backend="local", progress=False)).fit(X, y)
    wall = time.perf_counter() - t0
    est = model.estimate_
    return {"seed": seed, "wall": wall, "m": est.plan.m, "k": est.plan.k, "delta_hat": float(est.sensitivity),
            "mechanism": model.release_.mechanism["name"], "tuned": {k: repr(v) for k, v in model.tuned_params_.items()},
            "sampling_seconds": est.seconds, "sizing": est.sizing, "accuracy": float(model.score(Xt, yt)),
            "load": round(os.getloadavg()[0], 2)}


def line_section(seeds: int) -> dict:
    out = {}
    for which in ("breast cancer (README)", f"make_classification, {N} rows × {D} columns"):
        public, X, y, Xt, yt = _line_data(which)
        runs = {"fits": [], "fast": []}
        for seed in range(seeds):
            with fast.disabled():  # the fit without fast forms: scikit-learn's fits, the fewest pairs
                runs["fits"].append(_line(public, X, y, Xt, yt, seed, time_budget=None))
            runs["fast"].append(_line(public, X, y, Xt, yt, seed))
            print(f"{which}, seed {seed}: " + "; ".join(
                f"{LINE_MODES[mode]} {r[-1]['wall']:.1f} s, m={r[-1]['m']}, Δ̂={r[-1]['delta_hat']:.4g}"
                for mode, r in runs.items()), flush=True)
        out[which] = {"n": int(X.shape[0]), "d": int(X.shape[1]), "runs": runs}
    return out


LINE_MODES = {"fits": "scikit-learn fits, fewest pairs", "fast": "as written"}  # report keys -> labels


def _spread(values) -> float:
    return statistics.stdev(values) / statistics.fmean(values) if len(values) > 1 else float("nan")


def markdown(report: dict) -> str:
    md = _report.header("Cheaper pairs for scikit-learn models: pairs per second and the one-liner", report)
    p = report["pairs"]
    md += (f"\nPairs per second in process (one core, `estimate_sensitivity`, n = {N}, d = {D}), median [min–max] of "
           f"{report['repeats']} interleaved repeats: *scikit-learn fits*: the targets made inside "
           "`raydp.sklearn.fast.disabled()` (every database fitted by scikit-learn; "
           f"{report['fits_m']} pairs a run); *fast forms*: with their fast forms ({report['fast_m']} pairs a run). "
           "*G vs released*: the same 512 pairs through the fast form and database by database through the "
           "function the release fits (`__call__`), the largest difference of a G and of Δ̂ = G_(512).\n\n")
    rows = []
    for name, r in p.items():
        rows.append([name, _report.spread_text(r["rates"]["fits"], "{:.0f}"),
                     _report.spread_text(r["rates"]["fast"], "{:.0f}"),
                     _report.spread_text(r["rates"]["ratio"], "{:.1f}") + "×", f"`{r['pair_form']}`",
                     f"{r['max_g_difference']:.1e} (Δ̂ {r['delta_hat']:.3g}, differs by {r['delta_hat_difference']:.1e})"])
    md += _report.table(["model", "scikit-learn fits, pairs/s", "fast forms, pairs/s", "speed-up", "form", "G vs released"], rows)
    md += ("\n\nWith scikit-learn fits a logistic regression's released function is scikit-learn's lbfgs fit at "
           "tol=1e-4; with fast forms it is the exact minimiser of the same objective (`raydp.sklearn.fast`), so the "
           "two "
           "release slightly different functions for the two logistic models (~1e-3 relative): their speeds are "
           "comparable, their Δ̂ are not. Ridge releases scikit-learn's own fit in both.\n")
    if "line" in report:
        md += ("\n## The one-liner\n\nThe README's line (`tune=True`, ε = 1, δ = 1e-5, γ = 0.05, `backend=\"local\"`), "
               "the fit alone, per seed (`SamplerOptions(seed=...)`), in this machine's default threads. *As written*: "
               "the line as written (the default 20 s budget). *Scikit-learn fits, fewest pairs*: the fit without fast forms — inside "
               "`raydp.sklearn.fast.disabled()` and with `time_budget=None`, the fewest pairs γ allows (m = k = 1305, "
               "Δ̂ the largest G: what a 20 s budget buys with scikit-learn's fits on a loaded "
               "machine). Δ̂ spread is sd / mean across the seeds.\n\n")
        rows = []
        for which, w in report["line"].items():
            for mode in ("fits", "fast"):
                runs = w["runs"][mode]
                deltas = [r["delta_hat"] for r in runs]
                tuned = sorted({", ".join(f"{k}={v}" for k, v in sorted(r["tuned"].items())) for r in runs})
                rows.append([f"{which} (n = {w['n']}, d = {w['d']})", LINE_MODES[mode],
                             _report.spread_text([r["wall"] for r in runs], "{:.1f}") + " s",
                             ", ".join(str(r["m"]) for r in runs),
                             f"{statistics.fmean(deltas):.4g}", f"{100 * _spread(deltas):.1f}%",
                             _report.spread_text([r["accuracy"] for r in runs], "{:.3f}"), "; ".join(tuned),
                             _report.spread_text([r["load"] for r in runs], "{:.1f}")])
        md += _report.table(["data", "", "wall time", "m per seed", "mean Δ̂", "Δ̂ sd/mean", "accuracy",
                             "tune chose", "load after"], rows)
        md += ("\n\nThe wall time is the whole `fit`: the public search of `tune=True`, sampling, the preview and the "
               "sealed release with its replay. Seeds change the sample and the noise only: the candidate "
               "`tune=True` chooses is decided on fixed public draws, and m by the budget and the machine's "
               "timings.\n")
    m = report["machine"]
    md += (f"\nLoad average at the start {m['load_at_start']}, at the end {report['load_at_end']} (other users' work "
           "on a shared machine is in every figure).\n")
    return md


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3, help="interleaved repeats of the pairs-per-second runs")
    ap.add_argument("--fits-m", type=int, default=300, help="pairs a run with scikit-learn fits")
    ap.add_argument("--fast-m", type=int, default=5000, help="pairs a run with fast forms")
    ap.add_argument("--seeds", type=int, default=5, help="seeds of the one-liner, each way (0: skip it)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    a = ap.parse_args(argv)
    report = _report.start("sklearn_pair_speed", argv)
    report.update(repeats=a.repeats, fits_m=a.fits_m, fast_m=a.fast_m, seeds=a.seeds)
    report["pairs"] = pairs_section(a.repeats, a.fits_m, a.fast_m)
    if a.seeds > 0:
        report["line"] = line_section(a.seeds)
    report["load_at_end"] = round(os.getloadavg()[0], 2)
    md = markdown(report)
    _report.publish(a.out, "sklearn_pair_speed", report, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
