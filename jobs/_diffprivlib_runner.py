"""Fit diffprivlib's private models for ``sklearn_utility.py``, in diffprivlib's own environment.

diffprivlib 0.6.6 (its latest release) does not import with scikit-learn 1.8 or later (1.9: ``cannot
import name 'DOUBLE' from 'sklearn.tree._tree'``; 1.8: ``LogisticRegression`` no longer takes
``multi_class``), so it runs in a separate virtual environment with scikit-learn 1.7.2, never in
raydp's. This script imports neither raydp nor the job; it reads one ``.npz`` and writes one:

    python _diffprivlib_runner.py IN.npz OUT.npz

IN holds ``spec`` (JSON: ``model`` "logistic" | "linear_regression" and its keyword arguments
``params``), ``epsilons`` (E,), and per repeat r the arrays ``X_train_r``, ``y_train_r``, ``X_test_r``,
``y_test_r`` and, optionally, ``spec_r`` (that repeat's own model, e.g. bounds from its own public half). OUT holds ``scores`` (R, E): accuracy (logistic) or R² (linear regression) of the
diffprivlib model fitted with each ε on the test split, and ``versions`` (JSON). Nothing is printed
but errors (their messages never include the data).
"""

from __future__ import annotations

import json
import sys
import warnings


def main(argv: list[str]) -> int:
    import numpy as np

    if len(argv) != 2:
        print("usage: _diffprivlib_runner.py IN.npz OUT.npz", file=sys.stderr)
        return 2
    import diffprivlib
    import sklearn
    from diffprivlib.models import LinearRegression, LogisticRegression

    with np.load(argv[0], allow_pickle=False) as f:
        data = {k: f[k] for k in f.files}
    epsilons = [float(e) for e in data["epsilons"]]
    repeats = int(data["repeats"])
    scores = np.empty((repeats, len(epsilons)))
    for r in range(repeats):
        spec = json.loads(str(data.get(f"spec_{r}", data["spec"])))
        model = {"logistic": LogisticRegression, "linear_regression": LinearRegression}[spec["model"]]
        params = {k: tuple(v) if isinstance(v, list) else v for k, v in spec["params"].items()}  # bounds are tuples
        Xtr, ytr, Xte, yte = (data[f"{k}_{r}"] for k in ("X_train", "y_train", "X_test", "y_test"))
        for j, eps in enumerate(epsilons):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # convergence and "privacy leak" notes; bounds are given
                fitted = model(epsilon=eps, **params).fit(Xtr, ytr)
                scores[r, j] = fitted.score(Xte, yte)
    versions = {"diffprivlib": diffprivlib.__version__, "scikit-learn": sklearn.__version__,
                "numpy": np.__version__, "python": sys.version.split()[0]}
    np.savez(argv[1], scores=scores, versions=np.array(json.dumps(versions)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
