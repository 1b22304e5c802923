"""What a release costs: the sandbox it runs in, and the replay of the estimate's pairs.

Since the private evaluation runs in a sandbox (:mod:`raydp.seal`; "sealed, not sandboxed" where
bubblewrap is unavailable, and the report says which) and every release first replays 30 or more of
its estimate's pairs there (:mod:`raydp.engine.witness`), a release does more than evaluate the target
once and add noise. This job measures how much more, for three targets:

* ``mean``: the built-in mean of n = 1000 Exp(1) records (a cheap target);
* ``svm``: the paper's linear SVM, n = 1000 records of dimension 8 (``raydp.targets.svm(C=3)``);
* ``pipeline``: ``StandardScaler`` + ``LogisticRegression`` through ``raydp.sklearn.PrivateEstimator``
  (its ``target_`` and ``estimate_``), n = 1000 records of 8 features.

For each, in turn and ``--repeats`` times (interleaved, so the machine's noise falls on all alike):

* ``in process``: the target evaluated here and the mechanism's noise added, no sandbox, no replay;
* ``sealed`` (the sandbox): ``sample_then_respond(..., replay=False)`` — the sandbox, no replay;
* ``sealed + replay``: ``sample_then_respond(...)`` as a user calls it.

The replay's cost is the difference of the last two: two evaluations per replayed pair. The first
release of a process also starts the template the evaluations fork from (``first release``,
measured in fresh interpreters): ``sample_then_respond`` and ``PrivateEstimator.fit`` start it while
Δ̂ is sampled, so it is hidden behind any sampling longer than that.

    python jobs/release_cost.py                 # 7 repeats, ~1 min
    python jobs/release_cost.py --repeats 3 --out /tmp/rc
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _report  # noqa: E402

import raydp  # noqa: E402
from raydp import oracles, targets  # noqa: E402

N = 1000
FIRST = """
import time, numpy as np, raydp
from raydp import oracles, targets
est = raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), 1000, gamma=0.1, seed=1, progress=False)
data = np.random.default_rng(1).exponential(1.0, 1000)
t0 = time.perf_counter()
raydp.sample_then_respond(data, targets.mean(), raydp.Laplace(1.0), estimate=est)
t1 = time.perf_counter()
raydp.sample_then_respond(data, targets.mean(), raydp.Laplace(1.0), estimate=est)
print(t1 - t0, time.perf_counter() - t1)
"""


def _cases():
    """(name, target, mechanism, estimate, private data) for each target."""
    rng = np.random.default_rng(7)
    mech = raydp.Laplace(1.0)
    mean_est = raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), N, gamma=0.1, seed=1,
                                          progress=False)
    svm = targets.svm(C=3)
    svm_oracle = oracles.svm_two_class(8)
    svm_est = raydp.estimate_sensitivity(svm, svm_oracle, N, gamma=0.1, seed=1, progress=False, mechanism=mech)
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from raydp.sklearn import PrivateEstimator

    def rows(k):
        X = rng.normal(size=(k, 8)) * 10 + 50
        y = (X @ np.linspace(-1, 1, 8) + rng.normal(size=k) > 0).astype(float)
        return np.column_stack([X, y])

    private = rows(N)
    model = PrivateEstimator(make_pipeline(StandardScaler(), LogisticRegression()), oracle=oracles.bootstrap(rows(3000)),
                             epsilon=1.0, gamma=0.1, options=raydp.SamplerOptions(seed=1, progress=False))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(private[:, :8], private[:, 8])
    return [("mean", targets.mean(), mech, mean_est, rng.exponential(1.0, N)),
            ("svm", svm, mech, svm_est, svm_oracle.sample(rng, N)),
            ("pipeline", model.target_, mech, model.estimate_, private)]


def _time(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--first", type=int, default=3, help="fresh interpreters timing their first release")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    a = ap.parse_args(argv)
    report = _report.start("release_cost", argv)
    cases = _cases()
    raydp.sample_then_respond(cases[0][4], cases[0][1], cases[0][2], estimate=cases[0][3])  # the template is up
    times = {(name, kind): [] for name, *_ in cases for kind in ("in process", "sealed", "sealed + replay", "eval")}
    pairs = {}
    for _ in range(a.repeats):
        for name, target, mech, est, data in cases:
            times[(name, "eval")].append(_time(lambda: target(data)))
            times[(name, "in process")].append(_time(lambda: mech.release(target(data), est.sensitivity)))
            times[(name, "sealed")].append(_time(lambda: raydp.sample_then_respond(
                data, target, mech, estimate=est, replay=False)))
            r = None

            def sealed_replay():
                nonlocal r
                r = raydp.sample_then_respond(data, target, mech, estimate=est)

            times[(name, "sealed + replay")].append(_time(sealed_replay))
            pairs[name] = r.replay.pairs
    first = []
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    for _ in range(a.first):
        out = subprocess.run([sys.executable, "-c", FIRST], capture_output=True, text=True, env=env, timeout=600)
        if out.returncode == 0:
            first.append([float(x) for x in out.stdout.split()])
    rows, figures = [], {}
    for name, *_ in cases:
        med = {k: _report.spread(times[(name, k)])["median"] for k in ("in process", "sealed", "sealed + replay", "eval")}
        figures[name] = {k: _report.spread(times[(name, k)]) for k in ("in process", "sealed", "sealed + replay", "eval")}
        figures[name]["witness_pairs"] = pairs[name]
        rows.append([name, _report.spread_text(times[(name, "eval")], "{:.4f}"),
                     _report.spread_text(times[(name, "in process")], "{:.4f}"),
                     _report.spread_text(times[(name, "sealed")], "{:.4f}"),
                     _report.spread_text(times[(name, "sealed + replay")], "{:.4f}"),
                     f"{pairs[name]} pairs = {2 * pairs[name]} evaluations, "
                     f"{max(med['sealed + replay'] - med['sealed'], 0.0):.4f} s",
                     f"{med['sealed + replay'] / med['in process']:.1f}×"])
    report.update(repeats=a.repeats, figures=figures, first_release=first)
    isolation = "sandboxed (bubblewrap)" if raydp.seal.sandbox_status()[0] else "sealed, not sandboxed"
    report.update(isolation=isolation)
    md = _report.header("What a release costs: the sandbox and replay", report)
    md += ("\nSeconds per release, median [min–max] of the repeats, taken in turn. *in process*: the target "
           f"evaluated here plus the noise (no sandbox, no replay). *{isolation}*: `replay=False`. *+ replay*: "
           "the default. The replay column is the difference of the medians.\n\n")
    md += _report.table(["target", "one evaluation", "in process", isolation, "+ replay (default)", "replay",
                         "default / in process"], rows)
    if first:
        md += (f"\n\nThe first release of a process also starts the template the evaluations fork from: "
               f"{_report.spread_text([f[0] for f in first], '{:.2f}')} s for the first release against "
               f"{_report.spread_text([f[1] for f in first], '{:.3f}')} s for the second ({len(first)} fresh "
               "interpreters). `sample_then_respond` and `PrivateEstimator.fit` start it while Δ̂ is sampled.\n")
    _report.publish(a.out, "release_cost", report, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
