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
* ``raydp_laplace``: ``PrivateEstimator(model, oracle=..., epsilon=ε, gamma=γ)`` — Laplace on ℓ1 Δ̂:
  (ε, 0, γ)-random DP;
* ``raydp_gaussian``: the same with ``delta=δ`` — analytic Gaussian on ℓ2 Δ̂: (ε, δ, γ)-random DP;
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
    python jobs/sklearn_utility.py --one-liner         # the README's one-liner on raw data (≈ 2 min)

``--one-liner`` runs the README's line itself, ``PrivateEstimator(make_pipeline(StandardScaler(),
LogisticRegression()), oracle=oracles.bootstrap(public_rows), epsilon=1.0, delta=1e-5, gamma=0.05)``,
on RAW features of very different scales, penguins-like (wine: alcohol %, flavanoids, colour intensity,
proline in mg/l up to 1 680, 3 cultivars; breast cancer: radius, texture, area up to 2 500 µm²,
smoothness). Each set is shuffled and halved: the public half is the oracle, the private half is split
70/30 into train and test --repeats times. Rows: the trivial (majority) predictor, the non-private
pipeline, the one-liner as it behaved before public preprocessing (``public_steps=None``: the
scaler's statistics sampled and released with noise), the one-liner now (the scaler fitted on public
records and frozen), and ``PrivateSearchCV`` over C; each private row with its public preview (no
private record read) next to the realised score. Writes ``sklearn_one_liner.{md,json}`` in --out.

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
                    help="only the README's one-liner on raw penguins-like data (wine, breast cancer): before/after "
                         "public preprocessing, preview vs realised, PrivateSearchCV; --epsilons default 1")
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


def run_diffprivlib(python: str, spec: dict, splits: list, epsilons: list[float]):
    """diffprivlib's scores (repeats × ε) and versions, from its own environment."""
    import numpy as np

    with tempfile.TemporaryDirectory(prefix="raydp-dpl-") as tmp:
        arrays = {"spec": np.array(json.dumps(spec)), "epsilons": np.asarray(epsilons, dtype=np.float64),
                  "repeats": np.array(len(splits))}
        for r, (Xtr, ytr, Xte, yte) in enumerate(splits):
            arrays.update({f"X_train_{r}": Xtr, f"y_train_{r}": ytr, f"X_test_{r}": Xte, f"y_test_{r}": yte})
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
    plan = raydp.plan(gamma=a.gamma)
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
            first = PrivateEstimator(model, oracle=oracle, epsilon=epsilons[0], delta=delta, gamma=a.gamma,
                                     options=options).fit(Xtr, ytr)
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
ONE_LINER_SETS = {  # raw features on very different scales, like the penguins' bill (mm) and body mass (g)
    "wine": ("load_wine", [0, 6, 9, 12], "alcohol, flavanoids, colour intensity, proline"),
    "breast_cancer": ("load_breast_cancer", [0, 1, 3, 4], "mean radius, texture, area, smoothness"),
}
SEARCH_C = (0.03, 0.1, 0.3, 1.0)


def one_liner(a, argv) -> int:
    """The README's one-liner on raw data: before/after public preprocessing, preview vs realised, search."""
    import warnings

    import numpy as np
    from sklearn import datasets
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.base import clone
    from sklearn.preprocessing import FunctionTransformer, StandardScaler

    import _report
    from raydp import oracles
    from raydp.errors import InvalidArgumentError
    from raydp.sklearn import PrivateEstimator, PrivateSearchCV, UtilityWarning

    epsilons = sorted(dict.fromkeys(a.epsilons)) if "--epsilons" in (argv or sys.argv) else [1.0]
    if any(not (e > 0 and math.isfinite(e)) for e in epsilons):
        raise InvalidArgumentError(f"--epsilons must be finite and > 0, got {epsilons}")
    repeats = a.repeats if "--repeats" in (argv or sys.argv) else 5
    if repeats < 2:
        raise InvalidArgumentError(f"--repeats must be >= 2 (a spread is reported), got {repeats}")
    os.makedirs(a.out, exist_ok=True)
    report = dict(_report.start("sklearn_utility", sys.argv[1:] if argv is None else argv), gamma=a.gamma,
                  delta=a.delta, repeats=repeats, epsilons=epsilons, rows=[])
    t_start = time.perf_counter()

    def pipe(C=1.0):
        return make_pipeline(StandardScaler(), LogisticRegression(C=C))

    # the search's space: C, and whether standardised features are clipped to ±3 (a public, per-record map)
    clip = FunctionTransformer(np.clip, kw_args={"a_min": -3.0, "a_max": 3.0})
    space = make_pipeline(StandardScaler(), clip, LogisticRegression())
    grid = {"logisticregression__C": list(SEARCH_C), "functiontransformer": ["passthrough", clip]}

    for name, (loader, cols, described) in ONE_LINER_SETS.items():
        X, y = getattr(datasets, loader)(return_X_y=True)
        X = X[:, cols].astype(np.float64)
        order = np.random.default_rng([a.seed, 21]).permutation(len(X))
        X, y = X[order], y[order].astype(np.float64)
        half = len(X) // 2
        oracle = oracles.bootstrap(np.column_stack([X[:half], y[:half]]))
        Xp, yp = X[half:], y[half:]
        n = int(round(len(Xp) * (1 - TEST_FRACTION)))
        splits = []
        for r in range(repeats):
            o = np.random.default_rng([a.seed, 21, r]).permutation(len(Xp))
            splits.append((Xp[o[:n]], yp[o[:n]], Xp[o[n:]], yp[o[n:]]))
        _common.say(a, f"  {name} ({described}): n={n} private training records, {len(Xp) - n} test, "
                       f"{half} public records")

        def realised(make, estimate=None):
            out, warned = [], 0
            for Xtr, ytr, Xte, yte in splits:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always", UtilityWarning)
                    pe = make(estimate).fit(Xtr, ytr)
                warned += any(issubclass(w.category, UtilityWarning) for w in caught)
                estimate = pe.estimate_  # sampled once (public data), reused by every later split
                out.append(pe.score(Xte, yte))
            return out, warned, estimate

        base = dict(data=name, n=n)
        trivial = [float(np.mean(yte == np.bincount(ytr.astype(int)).argmax())) for Xtr, ytr, Xte, yte in splits]
        plain = [pipe().fit(Xtr, ytr).score(Xte, yte) for Xtr, ytr, Xte, yte in splits]
        report["rows"] += [dict(base, method="trivial (majority)", epsilon=None, scores=trivial),
                           dict(base, method="non-private pipeline", epsilon=None, scores=plain)]
        for eps in epsilons:
            opts = _common.options(a)
            common = dict(oracle=oracle, epsilon=eps, delta=a.delta, gamma=a.gamma, options=opts)
            # public_steps=None: the scaler's statistics sampled and released with noise
            before = PrivateEstimator(pipe(), public_steps=None, **common)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UtilityWarning)
                prev_before = before.preview(n, repeats=5)
            scores, warned, est = realised(lambda e: PrivateEstimator(pipe(), public_steps=None, estimate=e,
                                                                      **common), before.preview_estimate_)
            report["rows"].append(dict(base, method="one-liner before (public_steps=None)", epsilon=eps,
                                       scores=scores, warned=warned, sensitivity=est.sensitivity,
                                       preview=prev_before.rows[0]["mean"], preview_sd=prev_before.rows[0]["sd"]))
            # the one-liner now: the scaler fitted on public records, frozen
            now = PrivateEstimator(pipe(), **common)
            prev_now = now.preview(n, repeats=5)
            scores, warned, est = realised(lambda e: PrivateEstimator(pipe(), estimate=e, **common),
                                           now.preview_estimate_)
            report["rows"].append(dict(base, method="one-liner now (scaler public)", epsilon=eps, scores=scores,
                                       warned=warned, sensitivity=est.sensitivity,
                                       preview=prev_now.rows[0]["mean"], preview_sd=prev_now.rows[0]["sd"]))
            # model selection on public data, then one release per split
            search = PrivateSearchCV(space, grid, repeats=5, **common)
            search.fit(*splits[0][:2])
            best = search.best_params_
            chosen = f"C={best['logisticregression__C']:g}" + (
                ", clipped" if best["functiontransformer"] is clip else "")
            first = search.best_estimator_
            scores = [first.score(*splits[0][2:])]
            rest, warned, est = realised(lambda e: PrivateEstimator(clone(space).set_params(**best), estimate=e,
                                                                    **common), first.estimate_)
            report["rows"].append(dict(base, method=f"PrivateSearchCV (C, clip ±3) → {chosen}", epsilon=eps,
                                       scores=scores + rest[1:], warned=warned, sensitivity=est.sensitivity,
                                       preview=search.best_score_,
                                       preview_sd=search.cv_results_["std_private_score"][search.best_index_],
                                       search=search.table().replace(repr(clip), "clip ±3")))
        for r in report["rows"]:
            if r["data"] == name:
                _common.say(a, f"    {r['method']:40s} ε={r['epsilon']}: {np.mean(r['scores']):.3f}")
    table_rows = []
    for r in report["rows"]:
        sc = np.asarray(r["scores"], dtype=float)
        r["mean"], r["sd"] = float(sc.mean()), float(sc.std(ddof=1))
        table_rows.append([r["data"], r["n"], r["method"], "—" if r["epsilon"] is None else f"{r['epsilon']:g}",
                           "—" if "sensitivity" not in r else f"{r['sensitivity']:.3g}",
                           "—" if "preview" not in r else f"{r['preview']:.3f} ± {r['preview_sd']:.3f}",
                           f"{r['mean']:.3f} ± {r['sd']:.3f}", r.get("warned", "—")])
    report["seconds"] = time.perf_counter() - t_start
    md = (_report.header("The README's scikit-learn one-liner on raw data", report)
          + f"\n`PrivateEstimator(make_pipeline(StandardScaler(), LogisticRegression()), oracle=oracles.bootstrap("
            f"public_rows), epsilon=ε, delta={a.delta:g}, gamma={a.gamma:g})` on raw features (wine: "
            f"{ONE_LINER_SETS['wine'][2]}; breast cancer: {ONE_LINER_SETS['breast_cancer'][2]}). Each set shuffled "
            f"(seed {a.seed}) and halved: public half = oracle; private half split 70/30, {repeats} times. "
            "Preview: expected accuracy of the release from public records only (5 public draws, no private record "
            "read); realised: test accuracy on the private half, mean ± sd over the splits; warned: fits that "
            "raised UtilityWarning. Δ̂: ℓ2 (Gaussian, δ > 0).\n\n"
          + _report.table(["data", "n", "model", "ε", "Δ̂", "preview (public)", "realised accuracy", "warned"],
                          table_rows)
          + f"\n\nTotal {report['seconds']:.0f} s.\n")
    _report.write(a.out, "sklearn_one_liner", report, md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(_common.run_main(main))
