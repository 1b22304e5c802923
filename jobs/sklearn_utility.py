"""Your own scikit-learn model, private in one line, on real data: raydp vs diffprivlib vs a global bound.

Data bundled with scikit-learn (no download), each shuffled (seed --seed) and cut in two halves:

* the PUBLIC half is the oracle (``raydp.oracles.bootstrap`` of its rows ``[X | y]``) and gives every
  preprocessing statistic: features are standardised with its means and deviations, divided by the
  95th percentile of its row norms, and every row is then clipped to ‖x‖₂ ≤ 1 (a per-record map, so
  no private statistic is used); a regression target is standardised with its mean and deviation and
  clipped to [−3, 3];
* the PRIVATE half is split, in each repeat, into a training set (70%, n records) and a test set.

Tasks (λ: the L2 penalty per record, the same for every column of a row; sklearn's C = 1/(nλ), Ridge's
α = nλ):

| task | model | metric |
|---|---|---|
| breast_cancer / logistic | ``LogisticRegression(C=1/(nλ), fit_intercept=False)``, λ = 0.01 | accuracy |
| breast_cancer / linear_svm | ``LinearSVC(C=1/(nλ))``, λ = 0.01 | accuracy |
| diabetes / ridge | ``Ridge(alpha=nλ)``, λ = 0.1 | R² |
| diabetes / linear_regression | ``LinearRegression()`` | R² |
| digits / logistic (10 classes) | ``LogisticRegression(C=1/(nλ), fit_intercept=False)`` (multinomial), λ = 0.01 | accuracy |

Columns, each with its privacy notion:

* ``non_private``: the model itself (no privacy);
* ``raydp_laplace``: ``PrivateEstimator(model, oracle=..., epsilon=ε, gamma=γ, mechanism="laplace",
  time_budget=None)`` — Laplace on ℓ1 Δ̂ of the fewest pairs: (ε, 0, γ)-random DP;
* ``raydp_gaussian``: the same with ``delta=δ, mechanism="gaussian"`` — analytic Gaussian on ℓ2 Δ̂:
  (ε, δ, γ)-random DP;
* ``diffprivlib``: diffprivlib 0.6.6's model for the task where it has one (``LogisticRegression``
  with ``data_norm=1``, objective perturbation of Chaudhuri et al., one-vs-rest with ε/K per class;
  ``LinearRegression`` with ``bounds_X=(-1, 1)``, ``bounds_y=(-3, 3)``, the functional mechanism): ε-DP;
* ``global_laplace`` / ``global_gaussian`` (logistic tasks): output perturbation with the proven ℓ2
  sensitivity of L2-regularised logistic regression without intercept on ‖x‖ ≤ 1, 2/(nλ) (Chaudhuri,
  Monteleoni & Sarwate 2011, Cor. 8; multinomial: 2√2/(nλ), the same argument with the softmax loss's
  Lipschitz constant √2), noised with raydp's mechanisms: Laplace on the ℓ1 bound √p·2/(nλ) (p
  parameters) is ε-DP, the analytic Gaussian on the ℓ2 bound is (ε, δ)-DP.

Random DP is weaker than DP: the (ε, δ) guarantee holds for all but a γ fraction of neighbouring
databases drawn from the oracle (see README, "Concepts").

    python jobs/sklearn_utility.py                     # the table in README (≈ 2 min 15 s on 2 shared cores)
    python jobs/sklearn_utility.py --tasks breast_cancer/logistic --repeats 5 --epsilons 1 10
    python jobs/sklearn_utility.py --diffprivlib-python none         # without the diffprivlib column
    python jobs/sklearn_utility.py --one-liner --out jobs/results   # the README's line on raw data (≈ 40 min)

``--one-liner`` runs the README's line itself, ``PrivateEstimator(make_pipeline(StandardScaler(),
LogisticRegression()), oracle=oracles.bootstrap(public_rows), epsilon=1.0, delta=1e-5, gamma=0.05,
tune=True)`` (``Ridge()`` for a regression), on every RAW column of three bundled sets (breast cancer: 30 columns,
2 classes; wine: 13 columns, 3 cultivars; diabetes with ``scaled=False``: 10 columns, Ridge). Each of
--repeats splits (default 5, fixed seeds) shuffles a set: the public half is the oracle, the private
half is split 70/30 into train and test. Lines: the trivial predictor, the non-private pipeline, the
line at the fewest pairs with the Gaussian (``time_budget=None, mechanism="gaussian"``),
the line with ``tune=False`` (C or alpha as given; a sampling budget; the mechanism chosen on public pilot
pairs, the budget spent on its Δ̂), the line as written (``tune=True``: regularisation and public clipping
chosen on public pilot pairs as well), the ``PrivateSearchCV``
a UtilityWarning suggests (C or alpha × ``PublicClip``), and diffprivlib given the public half's
bounds. Each private fit is recorded with its mechanism, (m, k), Δ̂, preview, whether the preview
judged it useless or risky (its stated interval reaching below the trivial predictor) and whether a
UtilityWarning was seen, then released --releases more times at its
Δ̂ to measure how often a release lands in its preview's interval. Then Δ̂ across --spread-seeds
sampler seeds (the fewest pairs; C as given in ℓ2 with ``mechanism="gaussian"``; the line as written), ``on_useless="refuse"`` with a ledger on a useless fit, and the
wall time of one fit of each line (fewest pairs, ``tune=False``, as written), each in a fresh process, in process and on a 2-node
:class:`raydp.local_cluster.LocalCluster` (--wall-time-repeats rounds, interleaved). Writes
``sklearn_one_liner.{md,json}`` in --out (38 minutes on 2 shared cores with the README's options).

How it runs. Δ̂ is sampled ONCE per task and norm (offline amortisation), by the first
``PrivateEstimator.fit`` with ``store=OUT/stores/<task>-<norm>`` (a re-run reuses it; ``--fresh``
deletes it); every other fit reuses it with ``estimate=`` (the estimator, oracle, n, norm and plan
are checked). Each repeat draws a new train/test split of the private half; raydp's and the global
columns release once per ε, diffprivlib fits once per ε. OpenDP's noise cannot be seeded, so the
private columns vary a little between runs.

diffprivlib runs in its own environment (see README, "Your own scikit-learn model"), through
``_diffprivlib_runner.py`` executed by ``--diffprivlib-python`` (default: ``jobs/.venv-diffprivlib``
when it exists), with the data passed in temporary ``.npz`` files; without it the column is left out
and the job says so.

Outputs in --out (default out/sklearn_utility): ``sklearn_utility.parquet`` (one row per task, method
and ε: mean, sd and se over the repeats), ``sklearn_utility.md`` (the Δ table and the utility table)
and ``sklearn_utility.png`` (one panel per task).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

import _common
import _report

GAMMA = 0.05
DELTA = 1e-5
EPSILONS = (0.1, 0.3, 1.0, 3.0, 10.0)
REPEATS = 20
TEST_FRACTION = 0.3
TASKS = ("breast_cancer/logistic", "breast_cancer/linear_svm", "diabetes/ridge", "diabetes/linear_regression",
         "digits/logistic")
METHODS = ("non_private", "raydp_laplace", "raydp_gaussian", "diffprivlib", "global_laplace", "global_gaussian")
NOTION = {
    "non_private": "no privacy",
    "raydp_laplace": "(ε, 0, γ)-random DP",
    "raydp_gaussian": "(ε, δ, γ)-random DP",
    "diffprivlib": "ε-DP",
    "global_laplace": "ε-DP",
    "global_gaussian": "(ε, δ)-DP",
}
LAMBDA = {"breast_cancer/logistic": 0.01, "breast_cancer/linear_svm": 0.01, "diabetes/ridge": 0.1,
          "diabetes/linear_regression": None, "digits/logistic": 0.01}
COLUMNS = ("task", "metric", "method", "notion", "epsilon", "delta", "gamma", "n", "sensitivity", "repeats",
           "score_mean", "score_sd", "score_se")
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DPL = os.path.join(HERE, ".venv-diffprivlib", "bin", "python")


def make_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="sklearn_utility.py",
        description="Accuracy / R² of scikit-learn models made private with raydp.sklearn.PrivateEstimator, "
                    "diffprivlib and a global-sensitivity baseline, on data bundled with scikit-learn.")
    ap.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS), metavar="TASK",
                    help=f"tasks to run (default: all of {', '.join(TASKS)})")
    ap.add_argument("--epsilons", type=float, nargs="+", default=list(EPSILONS), metavar="EPS",
                    help="privacy budgets (default: 0.1 0.3 1 3 10)")
    ap.add_argument("--gamma", type=float, default=GAMMA, help=f"γ of raydp's random DP (default: {GAMMA:g}, m = 1305 pairs per Δ̂)")
    ap.add_argument("--delta", type=float, default=DELTA, help=f"δ of the Gaussian columns (default: {DELTA:g})")
    ap.add_argument("--repeats", type=int, default=REPEATS, help=f"train/test splits of the private half (default: {REPEATS})")
    ap.add_argument("--diffprivlib-python", metavar="PATH",
                    help="python of an environment with diffprivlib (default: jobs/.venv-diffprivlib when it "
                         "exists); 'none' leaves the diffprivlib column out")
    ap.add_argument("--fresh", action="store_true", help="delete stored Δ̂ samples first instead of reusing them")
    ap.add_argument("--no-plot", action="store_true", help="skip the PNG (no matplotlib needed)")
    ap.add_argument("--one-liner", action="store_true",
                    help="only the README's line on raw public data (breast cancer, wine, diabetes): as written, as given, "
                         "at the fewest pairs, PrivateSearchCV, diffprivlib, Δ̂ across seeds, the preview's calibration, "
                         "the refusal and the fit's wall time; one --epsilons value (default 1), --repeats default 5")
    ap.add_argument("--sets", nargs="+", choices=sorted(ONE_LINER_SETS), default=list(ONE_LINER_SETS),
                    metavar="SET", help="--one-liner: data sets (default: all of breast_cancer wine diabetes)")
    ap.add_argument("--releases", type=int, default=10,
                    help="--one-liner: more releases per fit at its Δ̂, for the preview's calibration (default 10)")
    ap.add_argument("--spread-seeds", type=int, default=5,
                    help="--one-liner: sampler seeds for Δ̂'s spread, split 0 (default 5; 0 skips it)")
    ap.add_argument("--wall-time-repeats", type=int, default=3,
                    help="--one-liner: rounds of the wall-time runs, each fit in a fresh process (default 3; 0 skips)")
    ap.add_argument("--wall-time-where", nargs="+", choices=("local", "cluster"), default=["local", "cluster"],
                    help="--one-liner: in process (local) and/or on a 2-node local cluster (default both)")
    ap.add_argument("--wall-time-set", choices=sorted(ONE_LINER_SETS), default="breast_cancer",
                    help="--one-liner: the data set whose fit is timed (default breast_cancer)")
    ap.add_argument("--one-fit", metavar="SET:LINE", help=argparse.SUPPRESS)  # one timed fit, in a fresh process
    _common.add_common_flags(ap, out_default=os.path.join("out", "sklearn_utility"))
    return ap


# ----------------------------------------------------------------------------- data


def load_task(task: str, seed: int):
    """(public rows [X | y], private X, private y, metric) of a task, preprocessed with public statistics only."""
    import numpy as np
    from sklearn import datasets

    name = task.split("/")[0]
    loader = {"breast_cancer": datasets.load_breast_cancer, "diabetes": datasets.load_diabetes,
              "digits": datasets.load_digits}[name]
    X, y = loader(return_X_y=True)
    order = np.random.default_rng([seed, 13]).permutation(len(X))
    X, y = X[order].astype(np.float64), y[order].astype(np.float64)
    half = len(X) // 2
    mu, sd = X[:half].mean(axis=0), X[:half].std(axis=0)
    sd[sd == 0] = 1.0  # a constant public column (digits' corners) stays 0
    Z = (X - mu) / sd
    Z /= np.quantile(np.linalg.norm(Z[:half], axis=1), 0.95)
    Z /= np.maximum(np.linalg.norm(Z, axis=1, keepdims=True), 1.0)  # every row: ‖x‖ ≤ 1
    regression = name == "diabetes"
    if regression:
        y = np.clip((y - y[:half].mean()) / y[:half].std(), -3.0, 3.0)
    public = np.column_stack([Z[:half], y[:half]])
    return public, Z[half:], y[half:], ("r2" if regression else "accuracy")


def make_model(task: str, n: int):
    from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge
    from sklearn.svm import LinearSVC

    lam = LAMBDA[task]
    model = task.split("/")[1]
    if model == "logistic":
        return LogisticRegression(C=1.0 / (n * lam), fit_intercept=False, tol=1e-6, max_iter=1000)
    if model == "linear_svm":
        return LinearSVC(C=1.0 / (n * lam), max_iter=10_000)
    if model == "ridge":
        return Ridge(alpha=n * lam)
    return LinearRegression()


def global_l2_bound(task: str, n: int, classes: int) -> float | None:
    """Proven ℓ2 sensitivity of the logistic tasks' parameters: 2L/(nλ), L = 1 (binary) or √2 (softmax)."""
    if not task.endswith("/logistic"):
        return None
    lipschitz = 1.0 if classes == 2 else math.sqrt(2.0)
    return 2.0 * lipschitz / (n * LAMBDA[task])


def diffprivlib_spec(task: str, n: int) -> dict | None:
    if task.endswith("/logistic"):
        return {"model": "logistic", "params": {"data_norm": 1.0, "C": 1.0 / (n * LAMBDA[task]),
                                                "fit_intercept": False, "max_iter": 1000}}
    if task.endswith("/linear_regression"):
        return {"model": "linear_regression", "params": {"bounds_X": [-1.0, 1.0], "bounds_y": [-3.0, 3.0]}}
    return None


def run_diffprivlib(python: str, spec: dict | list, splits: list, epsilons: list[float]):
    """diffprivlib's scores (repeats × ε) and versions, from its own environment; ``spec`` is one model for every
    split, or a list with one per split (bounds read off each split's public half)."""
    import numpy as np

    specs = spec if isinstance(spec, list) else [spec] * len(splits)
    with tempfile.TemporaryDirectory(prefix="raydp-dpl-") as tmp:
        arrays = {"spec": np.array(json.dumps(specs[0])), "epsilons": np.asarray(epsilons, dtype=np.float64),
                  "repeats": np.array(len(splits))}
        for r, (Xtr, ytr, Xte, yte) in enumerate(splits):
            arrays.update({f"X_train_{r}": Xtr, f"y_train_{r}": ytr, f"X_test_{r}": Xte, f"y_test_{r}": yte,
                           f"spec_{r}": np.array(json.dumps(specs[r]))})
        src, dst = os.path.join(tmp, "in.npz"), os.path.join(tmp, "out.npz")
        np.savez(src, **arrays)
        proc = subprocess.run([python, os.path.join(HERE, "_diffprivlib_runner.py"), src, dst],
                              check=False, capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["(no message)"])[-1]
            raise RuntimeError(f"diffprivlib runner failed (exit {proc.returncode}): {tail}")
        with np.load(dst, allow_pickle=False) as f:
            return f["scores"], json.loads(str(f["versions"]))


# ----------------------------------------------------------------------------- outputs


def write_parquet(rows: list[dict], path: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    types = dict(task=pa.string(), metric=pa.string(), method=pa.string(), notion=pa.string(), epsilon=pa.float64(),
                 delta=pa.float64(), gamma=pa.float64(), n=pa.int64(), sensitivity=pa.float64(), repeats=pa.int64(),
                 score_mean=pa.float64(), score_sd=pa.float64(), score_se=pa.float64())
    pq.write_table(pa.table({c: pa.array([r[c] for r in rows], type=types[c]) for c in COLUMNS}), path)


def plot(rows: list[dict], tasks: list[str], path: str, title: str) -> str:
    from _plots import pyplot, save_figure

    plt = pyplot()
    cols = min(3, len(tasks))
    nrows = -(-len(tasks) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.6 * cols, 3.6 * nrows), dpi=110, squeeze=False)
    style = {"non_private": ("--", "tab:green"), "raydp_laplace": ("o-", "tab:blue"),
             "raydp_gaussian": ("^-", "tab:cyan"), "diffprivlib": ("s-", "tab:red"),
             "global_laplace": ("x-", "black"), "global_gaussian": ("+-", "tab:gray")}
    try:
        for ax, task in zip(axes.flat, tasks):
            metric = next(r["metric"] for r in rows if r["task"] == task)
            for method in METHODS:
                pts = sorted((r["epsilon"], max(r["score_mean"], -1.0)) for r in rows  # R² far below 0 drawn at −1
                             if r["task"] == task and r["method"] == method)
                if pts:
                    fmt, colour = style[method]
                    ax.plot(*zip(*pts), fmt, color=colour, lw=1.4, ms=4, label=f"{method}: {NOTION[method]}")
            ax.set_xscale("log")
            ax.set_ylim(0.0 if metric == "accuracy" else -1.0, 1.0)
            ax.set_title(task, fontsize=9)
            ax.set_xlabel("ε (log scale)")
            ax.set_ylabel("test accuracy" if metric == "accuracy" else "test R² (clipped at −1)")
            ax.grid(True, alpha=0.3)
        for ax in list(axes.flat)[len(tasks):]:
            ax.axis("off")
        handles, labels = [], []
        for ax in axes.flat:
            for h, lab in zip(*ax.get_legend_handles_labels()):
                if lab not in labels:
                    handles.append(h)
                    labels.append(lab)
        fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=7.5, frameon=False)
        fig.suptitle(title, fontsize=9)
        fig.tight_layout(rect=(0, 0.09 if nrows > 1 else 0.16, 1, 0.95))
        save_figure(fig, path)
    finally:
        plt.close(fig)
    return path


# ----------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    import numpy as np

    import raydp
    from raydp import SamplerOptions, oracles
    from raydp.errors import InvalidArgumentError
    from raydp.sklearn import PrivateEstimator
    from sklearn.base import clone

    from _plots import markdown_table

    a = make_parser().parse_args(argv)
    if a.one_liner:
        return one_liner(a, argv)
    import warnings

    from raydp.sklearn import UtilityWarning

    # this job measures every ε, useless ones included: the table says what the warning would
    warnings.filterwarnings("ignore", category=UtilityWarning)
    if a.repeats < 2:
        raise InvalidArgumentError(f"--repeats must be >= 2 (a standard error is reported), got {a.repeats}")
    epsilons = sorted(dict.fromkeys(a.epsilons))
    if any(not (e > 0 and math.isfinite(e)) for e in epsilons):
        raise InvalidArgumentError(f"--epsilons must be finite and > 0, got {epsilons}")
    if not 0 < a.delta < 1:
        raise InvalidArgumentError(f"--delta must lie in (0, 1), got {a.delta}")
    tasks = list(dict.fromkeys(a.tasks))
    plan = raydp.make_plan(gamma=a.gamma)
    dpl = a.diffprivlib_python
    if dpl is None:
        dpl = DEFAULT_DPL if os.path.exists(DEFAULT_DPL) else None
        shown = os.path.relpath(DEFAULT_DPL, os.path.dirname(HERE))
        dpl_note = (f"diffprivlib: {shown}" if dpl else
                    f"diffprivlib column left out: no environment at {shown} (see README, 'Your own scikit-learn model')")
    elif dpl.lower() == "none":
        dpl, dpl_note = None, "diffprivlib column left out (--diffprivlib-python none)"
    else:
        if not os.path.exists(dpl):
            raise InvalidArgumentError(f"--diffprivlib-python {dpl!r} does not exist")
        dpl_note = "diffprivlib: " + dpl
    os.makedirs(a.out, exist_ok=True)
    t_start = time.perf_counter()
    _common.say(a, f"scikit-learn utility: {len(tasks)} tasks, γ={a.gamma:g} (m={plan.m}), δ={a.delta:g}, "
                   f"{a.repeats} repeats, ε in {epsilons}, {_common.where(a)}; {dpl_note}")

    rows, delta_rows, versions, dpl_failures = [], [], None, []
    sampling_seconds = 0.0
    for task in tasks:
        public, Xp, yp, metric = load_task(task, a.seed)
        n = int(round(len(Xp) * (1 - TEST_FRACTION)))
        oracle = oracles.bootstrap(public)
        model = make_model(task, n)
        splits = []
        for r in range(a.repeats):
            order = np.random.default_rng([a.seed, 13, r]).permutation(len(Xp))
            tr, te = order[:n], order[n:]
            splits.append((Xp[tr], yp[tr], Xp[te], yp[te]))
        scores = {m: np.full((a.repeats, len(epsilons)), np.nan) for m in METHODS}

        # raydp: Δ̂ sampled once per norm by the first fit (stored), reused by every other fit
        estimates = {}
        for method, delta in (("raydp_laplace", 0.0), ("raydp_gaussian", a.delta)):
            store = os.path.join(a.out, "stores", f"{task.replace('/', '-')}-{method.split('_')[1]}-g{a.gamma:g}"
                                                  f"-seed{a.seed}")
            if a.fresh and os.path.isdir(store):
                shutil.rmtree(store)
            Xtr, ytr, _, _ = splits[0]
            t0 = time.perf_counter()
            options = _common.options(a, store=store)
            # each column its own mechanism, at the fewest pairs: the table compares norms at one plan
            first = PrivateEstimator(model, oracle=oracle, epsilon=epsilons[0], delta=delta, gamma=a.gamma,
                                     mechanism=method.split("_")[1], time_budget=None, options=options).fit(Xtr, ytr)
            sampling_seconds += time.perf_counter() - t0
            estimates[method] = first.estimate_
        classes = len(np.unique(public[:, -1])) if metric == "accuracy" else 0
        bound2 = global_l2_bound(task, n, classes)
        p = estimates["raydp_laplace"].output_dim
        bound1 = None if bound2 is None else math.sqrt(p) * bound2
        delta_rows.append(dict(task=task, n=n, parameters=p, gamma=a.gamma, m=plan.m,
                               sampled_l1=estimates["raydp_laplace"].sensitivity,
                               sampled_l2=estimates["raydp_gaussian"].sensitivity,
                               global_l1=bound1, global_l2=bound2,
                               failures=estimates["raydp_laplace"].failures + estimates["raydp_gaussian"].failures))
        _common.say(a, f"  {task}: n={n}, {p} parameters, Δ̂ ℓ1={delta_rows[-1]['sampled_l1']:.4g} "
                       f"ℓ2={delta_rows[-1]['sampled_l2']:.4g}" + (f", global ℓ2 bound {bound2:.4g}" if bound2 else ""))

        for r, (Xtr, ytr, Xte, yte) in enumerate(splits):
            plain = clone(model).fit(Xtr, ytr)
            scores["non_private"][r, :] = plain.score(Xte, yte)
            for j, eps in enumerate(epsilons):
                for method, delta in (("raydp_laplace", 0.0), ("raydp_gaussian", a.delta)):
                    private = PrivateEstimator(model, oracle=oracle, epsilon=eps, delta=delta, gamma=a.gamma,
                                               mechanism=method.split("_")[1], time_budget=None,
                                               estimate=estimates[method],
                                               options=SamplerOptions(seed=a.seed)).fit(Xtr, ytr)
                    scores[method][r, j] = private.score(Xte, yte)
                if bound2 is not None:  # output perturbation of the same fit, with the proven bound
                    for method, mech, bound in (("global_laplace", raydp.Laplace(eps), bound1),
                                                ("global_gaussian", raydp.Gaussian(eps, a.delta, calibration="analytic"),
                                                 bound2)):
                        noisy = copy.deepcopy(plain)
                        noisy.coef_ = mech.release(plain.coef_, bound)
                        scores[method][r, j] = noisy.score(Xte, yte)
        spec = diffprivlib_spec(task, n)
        if dpl is not None and spec is not None:
            t0 = time.perf_counter()
            try:
                scores["diffprivlib"], versions = run_diffprivlib(dpl, spec, splits, epsilons)
            except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:  # its column is left out, said why
                dpl_failures.append(f"diffprivlib failed on {task}: {exc}")
                _common.say(a, "    " + dpl_failures[-1])
            else:
                _common.say(a, f"    diffprivlib {time.perf_counter() - t0:.1f} s")

        for method in METHODS:
            s = scores[method]
            if np.all(np.isnan(s)):
                continue
            for j, eps in enumerate(epsilons):
                col = s[:, j]
                sd = float(col.std(ddof=1))
                sens = {"raydp_laplace": delta_rows[-1]["sampled_l1"], "raydp_gaussian": delta_rows[-1]["sampled_l2"],
                        "global_laplace": bound1, "global_gaussian": bound2}.get(method)
                rows.append(dict(task=task, metric=metric, method=method, notion=NOTION[method], epsilon=eps,
                                 delta=a.delta if method in ("raydp_gaussian", "global_gaussian") else 0.0,
                                 gamma=a.gamma if method.startswith("raydp") else 0.0, n=n, sensitivity=sens,
                                 repeats=a.repeats, score_mean=float(col.mean()), score_sd=sd,
                                 score_se=sd / math.sqrt(a.repeats)))

    base = os.path.join(a.out, "sklearn_utility")
    write_parquet(rows, base + ".parquet")
    present = [m for m in METHODS if any(r["method"] == m for r in rows)]
    wide = []
    for task in tasks:
        for eps in epsilons:
            w = {"task": task, "metric": next(r["metric"] for r in rows if r["task"] == task), "ε": eps}
            for m in present:
                hit = [r["score_mean"] for r in rows if r["task"] == task and r["method"] == m and r["epsilon"] == eps]
                w[f"{m} [{NOTION[m]}]"] = hit[0] if hit else None
            wide.append(w)
    notes = [f"γ = {a.gamma:g} (m = k = {plan.m} pairs per Δ̂), δ = {a.delta:g}, {a.repeats} train/test splits of the "
             f"private half, test fraction {TEST_FRACTION:g}, seed {a.seed}. Mean test score (accuracy, or R² on the "
             "standardised target); blank: no such model or bound.", dpl_note, *dpl_failures]
    if versions:
        notes.append("diffprivlib environment: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    text = ("Sensitivity of the released parameters (sampled Δ̂ vs the proven global bound):\n\n"
            + markdown_table(delta_rows) + "\nUtility on held-out private data:\n\n" + markdown_table(wide)
            + "\n" + "\n".join(f"- {x}" for x in notes) + "\n")
    text = _report.stamped("sklearn_utility", argv, text)
    with open(base + ".md", "w", encoding="utf-8") as f:
        f.write(text)
    outputs = [base + ".parquet", base + ".md"]
    if not a.no_plot:
        outputs.append(plot(rows, tasks, base + ".png",
                            f"scikit-learn models made private: raydp (random DP), diffprivlib, global bound; "
                            f"γ = {a.gamma:g}, δ = {a.delta:g}, {a.repeats} splits"))
    print(text, end="")
    print(f"wrote {', '.join(outputs)}")
    print(f"total {time.perf_counter() - t_start:.1f} s (sampling {sampling_seconds:.1f} s)")
    return 0


# ----------------------------------------------------------------------------- --one-liner
# Every column raw, in its own unit: what a new user hands the line. Why these three: bundled with
# scikit-learn (no download), columns on scales from 0.01 to thousands, two classifiers (one binary
# with 100+ private records, one with three classes and fewer) and a regression.
ONE_LINER_SETS = {
    "breast_cancer": ("load_breast_cancer", {}, "all 30 raw columns (radius in µm, area up to 2 500 µm², smoothness "
                      "near 0.1, ...), 2 classes, logistic regression"),
    "wine": ("load_wine", {}, "all 13 raw columns (alcohol in %, magnesium, proline up to 1 680 mg/l, ...), "
             "3 cultivars, logistic regression"),
    "diabetes": ("load_diabetes", {"scaled": False}, "all 10 raw columns (age in years, sex coded 1/2, BMI, blood "
                 "pressure, six serum measurements), progression after a year, Ridge"),
}
REGRESSION_SETS = ("diabetes",)
# The line without a time budget or a mechanism choice: the fewest pairs γ allows, Gaussian for δ > 0.
FEWEST_PAIRS = {"time_budget": None, "mechanism": "gaussian"}
LINES = ("before", "after", "tuned", "search")
# report keys: "before": the line at the fewest pairs with the Gaussian; "after": the line with tune=False (the model as given); "tuned": the README's line as written (tune=True)
LINE_TITLES = {"before": "line, fewest pairs, Gaussian", "after": "line, tune=False (C or alpha as given)",
               "tuned": "README line as written (tune=True)",
               "search": "PrivateSearchCV (C or alpha × PublicClip)"}
LINE_SHORT = {"before": "fewest pairs", "after": "tune=False", "tuned": "as written", "search": "search"}
DPL_VARIANTS = {"scaled": "diffprivlib, public scaling and bounds", "raw": "diffprivlib, raw columns, public bounds"}
# Intervals whose share of real releases is measured: central levels of the previewed releases' scores
# (1.0: their whole range), and the 80% interval widened about its middle.
COVERAGE_LEVELS = (0.8, 0.9, 0.95, 1.0)
COVERAGE_WIDENINGS = (1.5, 2.0, 3.0)


def _line(name: str, **params):
    """The README's pipeline for a set: the scaler (fitted on public records by raydp), then the model."""
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(StandardScaler(), Ridge(**params) if name in REGRESSION_SETS else LogisticRegression(**params))


def _suggested_search(name: str):
    """The search a UtilityWarning prints for the line: C (or alpha), and PublicClip after the public scaler."""
    from sklearn.pipeline import Pipeline

    from raydp.sklearn import PublicClip

    line = _line(name)
    last, model = line.steps[-1]
    space = Pipeline([line.steps[0], ("publicclip", "passthrough"), (last, model)])
    regularisation = ({f"{last}__alpha": [1.0, 10.0, 100.0]} if name in REGRESSION_SETS
                      else {f"{last}__C": [0.01, 0.1, 1.0]})
    return space, {**regularisation, "publicclip": ["passthrough", PublicClip(3.0)]}


def _one_liner_split(name: str, seed: int, r: int):
    """Split r of a set: shuffled; rows [X | y] of the public half, then the private half's train (70%) and test."""
    import numpy as np
    from sklearn import datasets

    loader, kwargs, _ = ONE_LINER_SETS[name]
    X, y = getattr(datasets, loader)(return_X_y=True, **kwargs)
    order = np.random.default_rng([seed, 21, r]).permutation(len(X))
    X, y = X[order].astype(np.float64), y[order].astype(np.float64)
    half = len(X) // 2
    Xp, yp = X[half:], y[half:]
    n = int(round(len(Xp) * (1 - TEST_FRACTION)))
    return np.column_stack([X[:half], y[:half]]), Xp[:n], yp[:n], Xp[n:], yp[n:]


def _watched_fit(make, X, y):
    """``make().fit(X, y)`` with its UtilityWarnings recorded: (fitted, their messages, seconds)."""
    import warnings

    from raydp.sklearn import UtilityWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UtilityWarning)
        t0 = time.perf_counter()
        fitted = make().fit(X, y)
        seconds = time.perf_counter() - t0
    return fitted, [str(w.message) for w in caught if issubclass(w.category, UtilityWarning)], seconds


def _fit_record(pe, eps: float, messages: list[str], seconds: float, score: float, trivial: float) -> dict:
    """What one fit of a line chose, previewed and scored (its preview is on public records only)."""
    import re

    est, preview = pe.estimate_, pe.utility_
    row = preview.row(eps)
    low, high = preview.interval(eps, widen=1.0)  # the central 80% itself: the calibration below widens it
    said = re.search(r"this previews (-?[0-9.]+)", " ".join(messages))
    choice = getattr(pe, "mechanism_choice_", None)
    return dict(score=float(score), trivial=float(trivial), below_trivial=bool(score < trivial), seconds=seconds,
                sampling_seconds=float(est.seconds),
                mechanism=pe.release_.mechanism["name"], m=int(est.plan.m), k=int(est.plan.k),
                sensitivity=float(est.sensitivity), sizing=est.sizing, backend=est.backend,
                previews_by_mechanism=None if not choice else {k: dict(v) for k, v in choice["previews"].items()},
                preview=float(row["mean"]), preview_sd=float(row["sd"]),
                preview_scores=[float(s) for s in row["scores"]], interval=[low, high],
                useless=bool(preview.useless(eps)), risky=bool(preview.risky(eps)), warned=bool(messages),
                warned_may_be_worse=any("may be worse than no model" in m for m in messages),
                pilot=None if not choice else choice.get("pilot"),
                suggestion=float(said.group(1)) if said else None)


def _more_releases(pe, Xtr, ytr, Xte, yte, count: int) -> list[float]:
    """``count`` more releases of a fitted line at its Δ̂, each with fresh noise, scored on the test split."""
    import numpy as np

    import raydp
    from raydp.sklearn.utility import with_params

    if pe.release_.mechanism["name"] == "laplace":
        mechanism = raydp.Laplace(pe.epsilon)
    else:
        mechanism = raydp.Gaussian(pe.epsilon, pe.delta, calibration="analytic")
    records = np.column_stack([Xtr, ytr])
    scores = []
    for _ in range(count):
        release = raydp.sample_then_respond(records, pe.target_, mechanism, estimate=pe.estimate_)
        scores.append(float(with_params(pe.estimator_, pe.target_, release.value).score(Xte, yte)))
    return scores


def _dpl_inputs(name: str, variant: str, public, Xtr, ytr, Xte, yte, r: int):
    """diffprivlib's model and data for one split: bounds read off the public half, on raw columns or on columns
    standardised with the public half's statistics (what raydp's public scaler does)."""
    import numpy as np

    Xpub, ypub = public[:, :-1], public[:, -1]
    if variant == "scaled":
        mu, sd = Xpub.mean(axis=0), Xpub.std(axis=0)
        sd[sd == 0] = 1.0
        Xpub, Xtr, Xte = (Xpub - mu) / sd, (Xtr - mu) / sd, (Xte - mu) / sd
    if name in REGRESSION_SETS:
        spec = {"model": "linear_regression", "params": {
            "bounds_X": [Xpub.min(axis=0).tolist(), Xpub.max(axis=0).tolist()],
            "bounds_y": [float(ypub.min()), float(ypub.max())], "random_state": r}}
    else:
        spec = {"model": "logistic", "params": {"data_norm": float(np.linalg.norm(Xpub, axis=1).max()),
                                                "random_state": r, "max_iter": 1000}}
    return spec, (Xtr, ytr, Xte, yte)


def _printable(params: dict) -> dict:
    """Chosen parameters for the report: numbers and strings as they are, an estimator by its class name."""
    return {k: (v if isinstance(v, (str, float, int)) else type(v).__name__) for k, v in params.items()}


def _stats(values) -> dict:
    import numpy as np

    v = np.asarray(values, dtype=np.float64)
    sd = float(v.std(ddof=1)) if len(v) > 1 else 0.0
    return {"mean": float(v.mean()), "sd": sd, "min": float(v.min()), "max": float(v.max()),
            "median": float(np.median(v)), "cv": sd / float(v.mean()) if v.mean() else float("nan"), "count": len(v)}


def _num(x: float) -> str:
    """3 decimals, or 3 significant digits for a score far off the scale (an R² of −10⁸)."""
    return f"{x:.3f}" if abs(x) < 1000 else f"{x:.3g}"


def _cell(values, warned: int | None = None) -> str:
    s = _stats(values)
    text = f"{_num(s['mean'])} ± {_num(s['sd'])}, min {_num(s['min'])}"
    return text if warned is None else f"{text}; warned {warned}/{s['count']}"


def _refused_note(fits: list[dict]) -> str:
    """How many of a line's fits refused their time budget before sampling (then ran with time_budget=None)."""
    refused = sum(bool(f.get("budget_refused")) for f in fits)
    return f"; budget refused {refused}/{len(fits)}, then time_budget=None" if refused else ""


def _coverage(releases: list[dict]) -> list[dict]:
    """Share of real releases inside each candidate interval of their previews, with a 95% Clopper–Pearson interval."""
    import numpy as np
    from scipy.stats import binomtest

    rows = []
    candidates = [(f"central {int(round(level * 100))}% of the previews" if level < 1 else "whole range of the previews",
                   ("level", level)) for level in COVERAGE_LEVELS]
    candidates += [(f"80% interval widened ×{w:g} about its middle", ("widen", w)) for w in COVERAGE_WIDENINGS]
    for label, (kind, value) in candidates:
        inside = 0
        for rel in releases:
            scores = np.asarray(rel["preview_scores"], dtype=np.float64)
            if kind == "level":
                tail = (1.0 - value) / 2.0
                low, high = np.quantile(scores, tail), np.quantile(scores, 1.0 - tail)
            else:
                low, high = np.quantile(scores, 0.1), np.quantile(scores, 0.9)
                mid, half = (low + high) / 2.0, (high - low) / 2.0 * value
                low, high = mid - half, mid + half
            inside += int(low <= rel["score"] <= high)
        total = len(releases)
        ci = binomtest(inside, total).proportion_ci(0.95) if total else None
        rows.append({"interval": label, "inside": inside, "releases": total, "share": inside / total if total else None,
                     "ci95": None if ci is None else [float(ci.low), float(ci.high)]})
    return rows


def _one_fit(a, spec: str) -> int:
    """One fit of the line in this process (``--one-fit SET:before|after|tuned``, for the wall-time runs): one JSON line."""
    import numpy as np

    from raydp import SamplerOptions, oracles
    from raydp.errors import InvalidArgumentError
    from raydp.sklearn import PrivateEstimator

    name, _, variant = spec.partition(":")
    if name not in ONE_LINER_SETS or variant not in WALL_VARIANTS:
        raise InvalidArgumentError(f"--one-fit must be SET:before, SET:after or SET:tuned with SET in "
                                   f"{sorted(ONE_LINER_SETS)}, got {spec!r}")
    public, Xtr, ytr, Xte, yte = _one_liner_split(name, a.seed, 0)
    extra = dict(FEWEST_PAIRS) if variant == "before" else {"tune": True} if variant == "tuned" else {}
    if a.time_budget is not None:  # a quick run's budget (the line as written leaves it at its default)
        extra["options"] = SamplerOptions(time_budget=a.time_budget)
    # the README's line as written (the default backend finds RAY_ADDRESS), with a fixed seed
    make = (lambda: PrivateEstimator(_line(name), oracle=oracles.bootstrap(public), epsilon=1.0, delta=a.delta,
                                     gamma=a.gamma, random_state=a.seed, **extra))
    pe, messages, seconds = _watched_fit(make, Xtr, ytr)
    est = pe.estimate_
    print(json.dumps({"fit_seconds": seconds, "sampling_seconds": est.seconds, "useless": bool(pe.utility_.useless(1.0)),
                      "m": int(est.plan.m), "k": int(est.plan.k), "backend": est.backend,
                      "mechanism": pe.release_.mechanism["name"], "sizing": est.sizing, "warned": bool(messages),
                      "score": float(pe.score(Xte, yte)), "cores": os.cpu_count(),
                      "trivial": float(np.mean(yte == np.bincount(ytr.astype(int)).argmax()))
                      if name not in REGRESSION_SETS else None}, default=float))
    return 0


WALL_VARIANTS = ("before", "after", "tuned")


def _wall_times(a, report: dict) -> None:
    """One fit of each line (fewest pairs, tune=False, as written), each in a fresh process, in process and on a 2-node local cluster
    (head + 1 worker, one CPU each, token auth), interleaved; ``report["wall_time"]``."""
    from raydp.local_cluster import LocalCluster

    runs = []
    base = [sys.executable, os.path.abspath(__file__), "--one-liner", "--one-fit", "", "--gamma", repr(a.gamma),
            "--delta", repr(a.delta), "--seed", str(a.seed)]
    if a.time_budget is not None:
        base += ["--time-budget", repr(a.time_budget)]
    local_env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS")}

    def one(where: str, variant: str, env: dict) -> None:
        cmd = list(base)
        cmd[cmd.index("--one-fit") + 1] = f"{a.wall_time_set}:{variant}"
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600, check=False)
        elapsed = time.perf_counter() - t0
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["(no message)"])[-1]
            raise RuntimeError(f"the {variant} fit {where} failed (exit {proc.returncode}): {tail}")
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        runs.append(dict(got, where=where, variant=variant, process_seconds=elapsed, load=os.getloadavg()[0]))
        _common.say(a, f"    wall time {where:10s} {variant:6s}: fit {got['fit_seconds']:.1f} s (process {elapsed:.1f} s), "
                       f"m={got['m']} on {got['backend']}, {got['mechanism']}, warned={got['warned']}")

    def rounds(cluster) -> None:
        for rep in range(a.wall_time_repeats):
            order = WALL_VARIANTS[rep % 3:] + WALL_VARIANTS[:rep % 3]  # each variant first in turn
            for where in a.wall_time_where:
                for variant in order:
                    one(where, variant, local_env if where == "local" else cluster.env)

    if "cluster" in a.wall_time_where:
        with LocalCluster(workers=1, cpus_per_node=1) as cluster:
            rounds(cluster)
    else:
        rounds(None)
    summary = []
    for where in a.wall_time_where:
        for variant in WALL_VARIANTS:
            mine = [r for r in runs if r["where"] == where and r["variant"] == variant]
            summary.append({"where": where, "variant": variant,
                            "fit_seconds": _report.spread([r["fit_seconds"] for r in mine]),
                            "process_seconds": _report.spread([r["process_seconds"] for r in mine]),
                            "sampling_seconds": _report.spread([r["sampling_seconds"] for r in mine]),
                            "m": sorted({r["m"] for r in mine}), "warned": sum(r["warned"] for r in mine),
                            "useless": sum(r["useless"] for r in mine),
                            "runs": len(mine)})
    report["wall_time"] = {"set": a.wall_time_set, "repeats": a.wall_time_repeats, "runs": runs, "summary": summary}


def one_liner(a, argv) -> int:
    """The README's line on raw public data, as written, as given and at the fewest pairs, beside the search and
    diffprivlib;
    Δ̂'s spread across seeds, the preview's calibration, the refusal, and the fit's wall time."""
    import tempfile

    import numpy as np
    from sklearn.dummy import DummyClassifier, DummyRegressor

    import raydp
    from raydp import oracles
    from raydp.errors import InvalidArgumentError, UtilityError
    from raydp.sampler import TimeBudgetError
    from raydp.sklearn import PrivateEstimator, PrivateSearchCV

    if a.one_fit:
        return _one_fit(a, a.one_fit)
    given = set(argv if argv is not None else sys.argv[1:])
    epsilons = sorted(dict.fromkeys(a.epsilons)) if "--epsilons" in given else [1.0]
    if len(epsilons) != 1 or not (epsilons[0] > 0 and math.isfinite(epsilons[0])):
        raise InvalidArgumentError(f"--one-liner takes one finite --epsilons value > 0, got {epsilons}")
    eps = epsilons[0]
    repeats = a.repeats if "--repeats" in given else 5
    if repeats < 2:
        raise InvalidArgumentError(f"--repeats must be >= 2 (a spread is reported), got {repeats}")
    if a.releases < 0 or a.spread_seeds < 0 or a.spread_seeds == 1 or a.wall_time_repeats < 0:
        raise InvalidArgumentError("--releases and --wall-time-repeats must be >= 0, --spread-seeds 0 or >= 2")
    sets = list(dict.fromkeys(a.sets))
    dpl = a.diffprivlib_python
    if dpl is None:
        dpl = DEFAULT_DPL if os.path.exists(DEFAULT_DPL) else None
    elif dpl.lower() == "none":
        dpl = None
    elif not os.path.exists(dpl):
        raise InvalidArgumentError(f"--diffprivlib-python {dpl!r} does not exist")
    os.makedirs(a.out, exist_ok=True)
    report = dict(_report.start("sklearn_utility", sys.argv[1:] if argv is None else argv), epsilon=eps, delta=a.delta,
                  gamma=a.gamma, repeats=repeats, releases_per_fit=a.releases, seed=a.seed,
                  sets={k: ONE_LINER_SETS[k][2] for k in sets}, splits=[], fits=[], spread=[], refuse=[],
                  diffprivlib_versions=None, diffprivlib_failures=[])
    t_start = time.perf_counter()
    common = dict(epsilon=eps, delta=a.delta, gamma=a.gamma)

    for name in sets:
        useless_fit = {}  # the first fit of each line that the preview judged useless
        dpl_splits = {v: ([], []) for v in DPL_VARIANTS}
        for r in range(repeats):
            public, Xtr, ytr, Xte, yte = _one_liner_split(name, a.seed, r)
            oracle = oracles.bootstrap(public)
            dummy = DummyRegressor() if name in REGRESSION_SETS else DummyClassifier(strategy="most_frequent")
            trivial = float(dummy.fit(Xtr, ytr).score(Xte, yte))
            plain = float(_line(name).fit(Xtr, ytr).score(Xte, yte))
            report["splits"].append(dict(data=name, split=r, n=len(Xtr), test=len(Xte), public=len(public),
                                         trivial=trivial, nonprivate=plain))
            options = _common.options(a, seed=a.seed + r)
            makers = {
                "before": lambda: PrivateEstimator(_line(name), oracle=oracle, **common, **FEWEST_PAIRS,
                                                   options=options),
                "after": lambda: PrivateEstimator(_line(name), oracle=oracle, **common, options=options),
                "tuned": lambda: PrivateEstimator(_line(name), oracle=oracle, **common, options=options, tune=True),
                "search": lambda: PrivateSearchCV(*_suggested_search(name), oracle=oracle, **common, options=options),
            }
            for line in LINES:
                budget_refused = None
                try:
                    fitted, messages, seconds = _watched_fit(makers[line], Xtr, ytr)
                except TimeBudgetError as exc:
                    if line != "search":
                        raise
                    # the search's budget cannot buy the fewest pairs of its candidates: it says so before it
                    # samples; recorded, then the same search with time_budget=None (the fewest pairs, uncapped)
                    budget_refused = str(exc).splitlines()[0]
                    fitted, messages, seconds = _watched_fit(
                        lambda: PrivateSearchCV(*_suggested_search(name), oracle=oracle, **common, time_budget=None,
                                                options=options), Xtr, ytr)
                pe = fitted.best_estimator_ if line == "search" else fitted
                rec = dict(data=name, split=r, line=line, n=len(Xtr),
                           **_fit_record(pe, eps, messages, seconds, pe.score(Xte, yte), trivial),
                           budget_refused=budget_refused)
                if line in ("search", "tuned"):
                    chosen = fitted.best_params_ if line == "search" else fitted.tuned_params_
                    rec["best_params"] = _printable(chosen)
                rec["more_releases"] = _more_releases(pe, Xtr, ytr, Xte, yte, a.releases)
                report["fits"].append(rec)
                if line != "search" and rec["useless"] and line not in useless_fit:
                    useless_fit[line] = (line, r, pe.estimate_, options, Xtr, ytr, oracle)
                _common.say(a, f"  {name} split {r} {line:6s}: {rec['score']:.3f} (trivial {trivial:.3f}, non-private "
                               f"{plain:.3f}), {rec['mechanism']} m={rec['m']} k={rec['k']} Δ̂={rec['sensitivity']:.4g}, "
                               f"preview {rec['preview']:.3f}, warned={rec['warned']}, {seconds:.0f} s")
            for variant in DPL_VARIANTS:
                spec, data = _dpl_inputs(name, variant, public, Xtr, ytr, Xte, yte, r)
                dpl_splits[variant][0].append(spec)
                dpl_splits[variant][1].append(data)
        if dpl is not None:
            for variant, (specs, data) in dpl_splits.items():
                try:
                    scores, versions = run_diffprivlib(dpl, specs, data, [eps])
                except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
                    report["diffprivlib_failures"].append(f"{name} ({variant}): {exc}")
                    continue
                report["diffprivlib_versions"] = versions
                for r, s in enumerate(scores[:, 0]):
                    report["splits"][-repeats + r][f"diffprivlib_{variant}"] = float(s)
        if useless_fit:  # the same fit (the line as written first) with on_useless="refuse" and a ledger
            line, r, estimate, options, Xtr, ytr, oracle = next(useless_fit[x] for x in ("tuned", "after", "before")
                                                                if x in useless_fit)
            extra = FEWEST_PAIRS if line == "before" else {"tune": True} if line == "tuned" else {}
            if line == "tuned":
                estimate = None  # tune=True samples the Δ̂ of the model it chooses (the seed is the fit's)
            with tempfile.TemporaryDirectory(prefix="raydp-refuse-") as tmp:
                ledger = raydp.Ledger.create(os.path.join(tmp, "budget.json"), epsilon_total=10.0, delta_total=1e-3)
                refused, message = False, None
                try:
                    PrivateEstimator(_line(name), oracle=oracle, **common, **extra, options=options, estimate=estimate,
                                     on_useless="refuse", ledger=ledger).fit(Xtr, ytr)
                except UtilityError as exc:
                    refused, message = True, str(exc)
                again = raydp.Ledger(os.path.join(tmp, "budget.json"))
                report["refuse"].append(dict(data=name, line=line, split=r, refused=refused,
                                             spent=list(again.spent()), entries=len(again.entries()),
                                             message=message))
        _common.say(a, f"  {name}: done at {time.perf_counter() - t_start:.0f} s")

    if a.spread_seeds:
        for name in sets:
            public, Xtr, _, _, _ = _one_liner_split(name, a.seed, 0)
            oracle = oracles.bootstrap(public)
            for s in range(a.spread_seeds):
                options = _common.options(a, seed=1000 + s)
                row = dict(data=name, seed=1000 + s, n=len(Xtr))
                # before: ℓ2 at the fewest pairs; after: the line as written (tune=True: the
                # pilot picks the model and the mechanism, the rest of the budget goes to its Δ̂); after_l2: the
                # model as given with the whole budget and mechanism="gaussian" (one norm, one model, to compare)
                for variant, extra in (("before", FEWEST_PAIRS), ("after", {"tune": True}),
                                       ("after_l2", {"mechanism": "gaussian"})):
                    pe = PrivateEstimator(_line(name), oracle=oracle, **common, **extra, options=options)
                    t0 = time.perf_counter()
                    pe.preview(len(Xtr))
                    est = pe.preview_estimate_
                    row[variant] = dict(seconds=time.perf_counter() - t0, mechanism=est.mechanism["name"],
                                        sensitivity=float(est.sensitivity), m=int(est.plan.m), k=int(est.plan.k),
                                        pilot=None if not pe.preview_choice_ else {
                                            k: float(v["sensitivity"]) for k, v in pe.preview_choice_["previews"].items()},
                                        tuned=None if variant != "after" else _printable(
                                            pe.preview_tuning_["params"]))
                report["spread"].append(row)
                _common.say(a, f"  Δ̂ spread {name} seed {row['seed']}: fewest pairs ℓ2 {row['before']['sensitivity']:.4g}, "
                               f"as written {row['after']['mechanism']} {row['after']['sensitivity']:.4g} "
                               f"(m={row['after']['m']}), budget ℓ2 {row['after_l2']['sensitivity']:.4g} "
                               f"(m={row['after_l2']['m']})")

    if a.wall_time_repeats:
        _wall_times(a, report)
    report["seconds"] = time.perf_counter() - t_start
    _summarise(report, sets)
    md = _one_liner_markdown(report, sets)
    _report.write(a.out, "sklearn_one_liner", report, md)
    print(md)
    return 0


def _summarise(report: dict, sets: list[str]) -> None:
    """The table's cells, the spread, the calibration and the goals, from the per-fit records."""
    fits, splits = report["fits"], report["splits"]
    table = {}
    for name in sets:
        mine = [s for s in splits if s["data"] == name]
        row = {"n": mine[0]["n"], "trivial": _stats([s["trivial"] for s in mine]),
               "nonprivate": _stats([s["nonprivate"] for s in mine])}
        for line in LINES:
            recs = [f for f in fits if f["data"] == name and f["line"] == line]
            row[line] = dict(_stats([f["score"] for f in recs]), warned=sum(f["warned"] for f in recs),
                             useless=sum(f["useless"] for f in recs))
        for variant in DPL_VARIANTS:
            got = [s[f"diffprivlib_{variant}"] for s in mine if f"diffprivlib_{variant}" in s]
            row[f"diffprivlib_{variant}"] = _stats(got) if got else None
        table[name] = row
    report["table"] = table

    spread = {}
    for name in sets:
        rows = [s for s in report["spread"] if s["data"] == name]
        if not rows:
            continue
        before = _stats([s["before"]["sensitivity"] for s in rows])
        after_l2 = _stats([s["after_l2"]["sensitivity"] for s in rows])
        chose = {s["after"]["mechanism"] for s in rows}
        # the line as written: its spread is comparable (sd/mean is scale-free) when every seed chose one mechanism
        written = _stats([s["after"]["sensitivity"] for s in rows]) if len(chose) == 1 else None
        spread[name] = {"seeds": len(rows), "before_l2": before, "after_l2": after_l2, "as_written": written,
                        "as_written_cv_ratio": written["cv"] / before["cv"] if written and before["cv"] else None,
                        "after": [(s["after"]["mechanism"], s["after"]["sensitivity"]) for s in rows],
                        "after_m": sorted({s["after"]["m"] for s in rows}),
                        "after_l2_m": sorted({s["after_l2"]["m"] for s in rows}),
                        "after_tuned": sorted({", ".join(f"{k.split('__')[-1]}={v}" for k, v in
                                                         sorted((s["after"].get("tuned") or {}).items()))
                                                for s in rows} - {""}),
                        "after_mechanisms": {m: sum(s["after"]["mechanism"] == m for s in rows)
                                             for m in ("gaussian", "laplace")},
                        "sd_ratio": after_l2["sd"] / before["sd"] if before["sd"] else None,
                        "cv_ratio": after_l2["cv"] / before["cv"] if before["cv"] else None,
                        "range_ratio": ((after_l2["max"] - after_l2["min"]) / (before["max"] - before["min"])
                                        if before["max"] > before["min"] else None)}
    report["spread_summary"] = spread

    releases = []
    for f in fits:
        for score in [f["score"], *f["more_releases"]]:
            releases.append({"data": f["data"], "line": f["line"], "score": score, "preview_scores": f["preview_scores"]})
    firsts = [{"data": f["data"], "line": f["line"], "score": f["score"], "preview_scores": f["preview_scores"]}
              for f in fits]
    report["calibration"] = {"all": _coverage(releases), "first release of each fit": _coverage(firsts),
                             **{f"line {line}": _coverage([r for r in releases if r["line"] == line]) for line in LINES},
                             **{f"data {name}": _coverage([r for r in releases if r["data"] == name]) for name in sets}}
    report["calibration_bias"] = {name: _stats([r["score"] - _stats(r["preview_scores"])["mean"]
                                                for r in releases if r["data"] == name]) for name in sets}

    goals = []
    for name in sets:
        row = table[name]
        gap = row["nonprivate"]["mean"] - row["tuned"]["mean"]
        goals.append({"goal": "within 0.1 of non-private (100+ private records)", "data": name,
                      "applies": row["n"] >= 100, "met": bool(row["n"] >= 100 and gap <= 0.1),
                      "figure": f"gap {gap:.3f} (mean over splits), worst split "
                                f"{max(s['nonprivate'] - f['score'] for s in splits for f in fits if s['data'] == name and f['data'] == name and f['line'] == 'tuned' and f['split'] == s['split']):.3f}"})
    silent = [f for f in fits if f["line"] in ("after", "tuned") and f["below_trivial"] and not f["warned"]]
    unjudged = [f for f in fits if f["line"] in ("after", "tuned") and f["below_trivial"] and not f["useless"]]
    goals.append({"goal": "never below the trivial predictor without a warning", "data": "all", "applies": True,
                  "met": not silent,
                  "figure": f"{sum(f['below_trivial'] for f in fits if f['line'] in ('after', 'tuned'))} of "
                            f"{sum(f['line'] in ('after', 'tuned') for f in fits)} releases of the line (tune=False "
                            f"and as written) below trivial; {len(silent)} of them "
                            f"without a warning seen, {len(unjudged)} not judged useless by the preview"})
    for chk in report["refuse"]:
        goals.append({"goal": 'on_useless="refuse" refuses before any charge', "data": chk["data"], "applies": True,
                      "met": chk["refused"] and chk["entries"] == 0 and chk["spent"] == [0.0, 0.0],
                      "figure": f"{chk['line']} line, split {chk['split']}: refused={chk['refused']}, ledger entries "
                                f"{chk['entries']}, spent {chk['spent']}"})
    for name, sp in spread.items():
        ratio = sp["as_written_cv_ratio"]
        l2 = (f"; with mechanism=\"gaussian\" (ℓ2, the whole budget, m {', '.join(map(str, sp['after_l2_m']))}) "
              f"{sp['after_l2']['cv']:.3f} (×{sp['cv_ratio']:.2f})" if sp["cv_ratio"] is not None else "")
        goals.append({"goal": "Δ̂'s spread across seeds at least halves (sd/mean, the line as written)", "data": name,
                      "applies": True, "met": ratio is not None and ratio <= 0.5,
                      "figure": (f"sd/mean {sp['before_l2']['cv']:.3f} → {sp['as_written']['cv']:.3f} (×{ratio:.2f}, "
                                 f"{'/'.join(k for k, v in sp['after_mechanisms'].items() if v)}, m "
                                 f"{', '.join(map(str, sp['after_m']))}){l2}")
                      if ratio is not None else "the line chose different mechanisms across seeds: no one spread" + l2})
    for name in sets:
        row = table[name]
        dpl = [row[f"diffprivlib_{v}"]["mean"] for v in DPL_VARIANTS if row[f"diffprivlib_{v}"]]
        if dpl:
            goals.append({"goal": "PrivateSearchCV ahead of diffprivlib", "data": name, "applies": True,
                          "met": row["search"]["mean"] > max(dpl),
                          "figure": f"{_num(row['search']['mean'])} vs diffprivlib's best {_num(max(dpl))}"})
    report["goals"] = goals


def _one_liner_markdown(report: dict, sets: list[str]) -> str:
    table, fits = report["table"], report["fits"]
    dpl_present = [v for v in DPL_VARIANTS if any(table[s][f"diffprivlib_{v}"] for s in sets)]
    head = (["data (private train n)", "trivial", "non-private"] + [LINE_TITLES[x] for x in LINES]
            + [DPL_VARIANTS[v] for v in dpl_present])
    rows = []
    for name in sets:
        t = table[name]
        metric = "R²" if name in REGRESSION_SETS else "accuracy"
        rows.append([f"{name}, {metric} ({t['n']})", _num(t["trivial"]["mean"]), _num(t["nonprivate"]["mean"])]
                    + [_cell([f["score"] for f in fits if f["data"] == name and f["line"] == x], t[x]["warned"])
                       + _refused_note([f for f in fits if f["data"] == name and f["line"] == x])
                       for x in LINES]
                    + [_cell([s[f"diffprivlib_{v}"] for s in report["splits"] if s["data"] == name]) for v in dpl_present])
    detail = []
    for f in fits:
        if f["line"] in ("search", "tuned"):
            what = ", ".join(f"{k.split('__')[-1]}={v}" for k, v in f["best_params"].items())
        else:
            what = "—" if f["suggestion"] is None else f"{f['suggestion']:.3f}"
        detail.append([f["data"], f["split"], LINE_SHORT[f["line"]], f["mechanism"], f"{f['m']} / {f['k']}", f"{f['sensitivity']:.4g}",
                       f"{f['preview']:.3f} [{f['interval'][0]:.3f}, {f['interval'][1]:.3f}]", f"{f['score']:.3f}",
                       f"{f['trivial']:.3f}", "yes" if f["useless"] else "no",
                       ("may be worse" if f.get("warned_may_be_worse") else "yes") if f["warned"] else "no", what,
                       f"{f['seconds']:.0f}"])
    parts = [
        _report.header("The README's scikit-learn line on raw public data: as written, as given, at the fewest pairs",
                       report),
        f"\n`PrivateEstimator(make_pipeline(StandardScaler(), LogisticRegression()), oracle=oracles.bootstrap("
        f"public_rows), epsilon={report['epsilon']:g}, delta={report['delta']:g}, gamma={report['gamma']:g}, "
        "tune=True)` "
        f"(`Ridge()` for the regression), on every raw column of three data sets bundled with scikit-learn: "
        + "; ".join(f"**{k}**: {v}" for k, v in report["sets"].items())
        + f". Each of {report['repeats']} splits (seeds fixed) shuffles the set: the public half is the oracle "
        "(`oracles.bootstrap` of its rows), the private half is split 70/30 into train and test. *Fewest pairs, Gaussian*: "
        "the same line with `time_budget=None` (the fewest pairs, m = k = 1305 at γ = 0.05) and "
        "`mechanism=\"gaussian\"`. *tune=False*: the line with the model as given (C = 1 or alpha = 1; a 20 s sampling "
        "budget; the mechanism chosen by previews at stand-in Δ̂s read off public pilot pairs, then the budget spent "
        "on its Δ̂). *As written* (`tune=True`): the regularisation (C × {0.01, 0.1, 1} or alpha × {1, 10, 100}) and "
        "`PublicClip(3)` or none after the public scaler chosen with the mechanism by the same kind of previews on "
        "public pilot pairs (a quarter of the budget), the rest of the budget spent on the chosen model's Δ̂. The search is the line a warning suggests (C × {0.01, 0.1, 1} or alpha × {1, 10, 100}, "
        "with or without `PublicClip(3)` after the public scaler), with the same 20 s budget: where that budget "
        "cannot buy the fewest pairs of all its candidates the search refuses before it samples (\"budget refused\" "
        "in its cell) and the job runs it again with `time_budget=None`. diffprivlib 0.6.6 runs in its own environment, "
        "given the public half's bounds (`data_norm` = the largest public row norm; `bounds_X`, `bounds_y` = the "
        "public min and max), on the public half's standardisation and on raw columns. Cells: mean ± sd over "
        "the splits, min; warned: fits that raised a UtilityWarning.\n\n",
        _report.table(head, rows),
        "\n\n## Every private fit\n\nmechanism and (m, k) as chosen; preview: the mean of the release's 20 "
        "previews on public records and their central 80%; useless: the preview's own judgement (the fit must warn); "
        "warned: a UtilityWarning was seen (\"may be worse\": the warning that the stated interval reaches below the "
        "trivial predictor, for a release not judged useless); last column: the suggested search's previewed score "
        "(fewest pairs, tune=False) or the choice (as written, search).\n\n",
        _report.table(["data", "split", "line", "mechanism", "m / k", "Δ̂", "preview [80%]", "realised", "trivial",
                       "useless", "warned", "suggestion / choice", "s"], detail),
    ]
    if report["spread_summary"]:
        srows = []
        for name, sp in report["spread_summary"].items():
            b, l2 = sp["before_l2"], sp["after_l2"]
            srows.append([name, sp["seeds"],
                          f"{b['median']:.4g} [{b['min']:.4g}–{b['max']:.4g}], sd/mean {b['cv']:.3f}",
                          f"{l2['median']:.4g} [{l2['min']:.4g}–{l2['max']:.4g}], sd/mean {l2['cv']:.3f}",
                          ", ".join(map(str, sp["after_l2_m"])),
                          ", ".join(f"{'ℓ2' if mech == 'gaussian' else 'ℓ1'} {v:.4g}" for mech, v in sp["after"]),
                          ", ".join(map(str, sp["after_m"])),
                          (f"{sp['as_written']['cv']:.3f} (×{sp['as_written_cv_ratio']:.2f})"
                           if sp.get("as_written_cv_ratio") is not None else "—"),
                          f"×{sp['cv_ratio']:.2f}" if sp["cv_ratio"] is not None else "—",
                          f"×{sp['sd_ratio']:.2f}" if sp["sd_ratio"] is not None else "—",
                          f"×{sp['range_ratio']:.2f}" if sp["range_ratio"] is not None else "—",
                          ", ".join(f"{k} {v}" for k, v in sp["after_mechanisms"].items() if v)
                          + "".join(f"; {t}" for t in sp.get("after_tuned", []))])
        parts += [f"\n\n## Δ̂ across sampler seeds\n\nSplit 0's public data and n, seeds 1000…; fewest pairs: ℓ2 Δ̂ "
                  "at the fewest pairs; budget ℓ2: the model as given (`tune=False`) with `mechanism=\"gaussian\"` and the "
                  "default budget (one norm and one model to compare), with the m the budget chose; as written: the line "
                  "itself (`tune=True`), whose public pilot picks the model and the mechanism before the rest of the "
                  "budget goes to its Δ̂ (per seed, with m; its sd/mean ÷ the fewest pairs' when every seed "
                  "chose one mechanism — sd/mean has no scale, so an ℓ1 spread compares with an ℓ2 one). Other ratios: "
                  "budget ℓ2 ÷ fewest pairs.\n\n",
                  _report.table(["data", "seeds", "fewest pairs ℓ2 Δ̂ median [range]", "budget ℓ2 Δ̂", "budget ℓ2 m",
                                 "as written, per seed", "as written m", "as written sd/mean (ratio)",
                                 "ℓ2 sd/mean ratio", "ℓ2 sd ratio", "ℓ2 range ratio", "as written chose"], srows)]
    crows = []
    for group, rows_ in report["calibration"].items():
        for c in rows_:
            if c["releases"]:
                crows.append([group, c["interval"], f"{c['inside']}/{c['releases']}", f"{c['share']:.2f}",
                              f"[{c['ci95'][0]:.2f}, {c['ci95'][1]:.2f}]"])
    bias = "; ".join(f"{k} {v['mean']:+.3f} (sd {v['sd']:.3f})" for k, v in report["calibration_bias"].items())
    parts += [f"\n\n## Does a release land in its preview's interval?\n\nEvery fit above released once, then "
              f"{report['releases_per_fit']} more times at the same Δ̂ (fresh noise; `sample_then_respond`), each scored "
              "on the split's test records; share inside intervals read off the fit's 20 previews, with a 95% "
              "Clopper–Pearson interval (the releases of one fit share its Δ̂ and split, so the interval of \"all\" "
              f"is too narrow; \"first release of each fit\" has independent releases). Realised minus previewed mean: {bias}.\n\n",
              _report.table(["releases", "interval", "inside", "share", "95% CI"], crows)]
    if report.get("wall_time"):
        wt = report["wall_time"]
        wrows = [[s["where"], LINE_SHORT[s["variant"]], _report.spread_text(s["fit_seconds"]["values"], "{:.1f}"),
                  _report.spread_text(s["sampling_seconds"]["values"], "{:.1f}"),
                  _report.spread_text(s["process_seconds"]["values"], "{:.1f}"), ", ".join(map(str, s["m"])),
                  f"{s['useless']}/{s['runs']}", f"{s['warned']}/{s['runs']}"] for s in wt["summary"]]
        loads = [r["load"] for r in wt["runs"]]
        parts += [f"\n\n## Wall time of one fit\n\n{wt['set']}, split 0, each fit in a fresh process, "
                  f"{wt['repeats']} rounds interleaved (each line first in turn); cluster: "
                  "`raydp.local_cluster.LocalCluster(workers=1, cpus_per_node=1)` (a head and a worker, token auth, "
                  f"RAY_ADDRESS set for the fit). Median [min–max]. A fit the preview judges useless also runs the "
                  "suggested search on public data (its candidates at the fewest pairs) before it warns. Load average during the runs: "
                  f"{min(loads):.1f}–{max(loads):.1f} on {os.cpu_count()} cores.\n\n",
                  _report.table(["where", "line", "fit s", "sampling s (kept mechanism)", "process s", "m",
                                 "useless (a suggestion searched)", "warned"], wrows)]
    grows = [[g["goal"], g["data"], ("met" if g["met"] else "NOT met") if g["applies"] else "n/a (under 100 records)",
              g["figure"]] for g in report["goals"]]
    parts += ["\n\n## Goals\n\n", _report.table(["goal", "data", "", "figure"], grows)]
    if report["diffprivlib_versions"]:
        parts.append("\n\ndiffprivlib environment: " + ", ".join(f"{k} {v}" for k, v in
                                                                report["diffprivlib_versions"].items()))
    for fail in report["diffprivlib_failures"]:
        parts.append(f"\n\ndiffprivlib failed on {fail}")
    parts.append(f"\n\nTotal {report['seconds']:.0f} s.\n")
    return "".join(parts)


if __name__ == "__main__":
    sys.exit(_common.run_main(main))
