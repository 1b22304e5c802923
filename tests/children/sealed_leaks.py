"""Child: the private evaluation tried in every way it leaked before it ran in a sealed process.

Run with stdout and stderr on pipes (as under a job runner) and a log file of the user's; prints
``OK <scenario>`` after each scenario and ``FLAG <scenario> <bool>`` where a leak shows inside this
process (a warning in the caller's record list, the marker in an exception's chain). The marker is
planted in the private data only; the public oracle never draws it, so any trace of it is a leak.

    python sealed_leaks.py LOGFILE
"""

from __future__ import annotations

import atexit
import logging
import sys
import threading
import time
import traceback
import warnings

import numpy as np

import raydp
from raydp import oracles

MARK = 61803.39887
MARKER = "PRIVATE-61803.39887"
N = 40


def private(x):
    return np.any(np.abs(np.asarray(x, dtype=float) - MARK) < 1e-6)


def data():
    d = np.random.default_rng(5).normal(size=N)
    d[3] = MARK
    return d


def estimate(target):
    return raydp.estimate_sensitivity(target, oracles.normal(0, 1), N, m=40, seed=1, progress=False, backend="local")


def release(target, est):
    return raydp.sample_then_respond(data(), target, raydp.Laplace(1.0), estimate=est)


# ---- a plain joblib target: the pool is started by the public evaluations, then reused ----------------

def _chunk_mean(chunk):
    if private(chunk):
        print(MARKER + "-joblib", flush=True)
        sys.stderr.write(MARKER + "-joblib\n")
    return float(np.mean(chunk))


def joblib_mean(d):
    from joblib import Parallel, delayed

    parts = Parallel(n_jobs=2, backend="loky")(delayed(_chunk_mean)(c) for c in np.array_split(np.asarray(d), 2))
    return np.array([float(np.mean(parts))])


# ---- logging above CRITICAL and through Logger.handle ------------------------------------------------

def logging_mean(d):
    if private(d):
        log = logging.getLogger("target")
        log.log(60, MARKER + "-logging-above-critical")
        log.handle(log.makeRecord("target", logging.CRITICAL, __file__, 1, MARKER + "-logging-handle", None, None))
    return np.array([float(np.mean(d))])


# ---- a warning the target re-enables inside its own catch_warnings -----------------------------------

def warning_mean(d):
    if private(d):
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn(MARKER)
    return np.array([float(np.mean(d))])


# ---- a thread that prints after the release; an atexit print -----------------------------------------

def _late():
    time.sleep(0.5)
    print(MARKER + "-thread", flush=True)


def thread_mean(d):
    if private(d):
        threading.Thread(target=_late, daemon=False).start()
    return np.array([float(np.mean(d))])


def atexit_mean(d):
    if private(d):
        atexit.register(print, MARKER + "-atexit")
    return np.array([float(np.mean(d))])


# ---- an exception whose message quotes the data -------------------------------------------------------

def raising_mean(d):
    if private(d):
        raise ValueError(f"{MARKER}: {np.max(d)}")
    return np.array([float(np.mean(d))])


def gridsearch():
    """``PrivateEstimator(GridSearchCV(Ridge(), ..., n_jobs=2, verbose=3))``: the CV scores of the private
    fit were printed by loky workers spawned during the public estimation."""
    from sklearn.linear_model import Ridge
    from sklearn.model_selection import GridSearchCV

    from raydp.sklearn import PrivateEstimator

    rng = np.random.default_rng(0)

    def rows(k):
        X = rng.normal(size=(k, 2))
        return np.column_stack([X, X @ [1.0, -1.0] + 0.1 * rng.normal(size=k)])

    def scorer(est, X, y):
        if private(X):
            print(MARKER + "-gridsearch", flush=True)
        return -float(np.mean((est.predict(X) - y) ** 2))

    search = GridSearchCV(Ridge(), {"alpha": [0.1, 1.0]}, cv=2, n_jobs=2, verbose=3, scoring=scorer)
    model = PrivateEstimator(search, oracle=oracles.bootstrap(rows(300)), epsilon=1.0, m=20,
                             params=["best_estimator_.coef_", "best_estimator_.intercept_"],
                             options=raydp.SamplerOptions(seed=0, backend="local", progress=False))
    X = rows(60)
    X[5, 0] = MARK
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(X[:, :2], X[:, 2])


def main(logfile: str) -> None:
    logging.basicConfig(filename=logfile, level=logging.DEBUG)  # the user's own FileHandler
    for name, target in (("joblib", joblib_mean), ("logging", logging_mean), ("thread", thread_mean),
                         ("atexit", atexit_mean)):
        release(target, estimate(target))
        print(f"OK {name}", flush=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        release(warning_mean, estimate(warning_mean))
    print(f"FLAG warning {any(MARKER in str(w.message) for w in caught)}", flush=True)
    print("OK warning", flush=True)
    try:
        release(raising_mean, estimate(raising_mean))
    except raydp.TargetError as exc:
        chain = "".join(traceback.format_exception(exc)) + repr(exc.__context__) + repr(exc.__cause__)
        print(f"FLAG context {MARKER in chain or exc.__context__ is not None}", flush=True)
        print("OK context", flush=True)
    gridsearch()
    print("OK gridsearch", flush=True)
    time.sleep(1.5)  # the thread's late print would come now
    print("OK end", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
