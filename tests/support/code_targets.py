"""Analysts' own functions for ``tests/integration/serve/test_serve_own_code.py``: submitted with
``raydp.client.Client.release_code``, which pickles this module by value (the server imports none of it).

Each is the mean of the records on public data. A hostile one (:func:`act`) does its act on every database
(``when="always"``: during the sampling of Δ̂, on oracle records) or only on the private data (``when="private"``:
the private records hold :data:`MARK`, which the oracle never draws, so sampling and the replay see a mean).
What the act got (bytes read, connections made, files written, children started) is its value on the private
data; during sampling it raises when it got more than ``allowance``, so a release that succeeds shows it got
nothing there.
"""

from __future__ import annotations

import os
import time

import numpy as np

MARK = 61803.39887
N = 40


def private_data(seed: int = 5) -> np.ndarray:
    d = np.random.default_rng(seed).normal(size=N)
    d[3] = MARK
    return d


def _tcp(port) -> float:
    import socket

    try:
        with socket.create_connection(("127.0.0.1", int(port)), timeout=0.5) as s:
            s.sendall(b"PRIVATE-" + str(MARK).encode())
        return 1.0
    except OSError:
        return 0.0


def _read(paths) -> float:
    got = 0
    for p in paths:
        try:
            if os.path.isdir(p):
                got += len(os.listdir(p))
            else:
                with open(p, "rb") as f:
                    got += len(f.read())
        except OSError:
            pass
    return float(got)


def _write(paths) -> float:
    done = 0
    for p in paths:
        try:
            with open(p, "w") as f:
                f.write("written from the sandbox")
            done += 1
        except OSError:
            pass
    return float(done)


def _detach(marker) -> float:
    import subprocess

    try:
        subprocess.Popen(["sleep", marker], start_new_session=True, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        pid = os.fork()
        if pid == 0:  # double fork: the grandchild is re-parented, in a session of its own
            try:
                os.setsid()
                if os.fork() == 0:
                    os.execvp("sleep", ["sleep", marker])
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
    except OSError:
        pass
    return 0.0


def _memory(nbytes) -> float:
    x = np.ones(int(nbytes) // 8)  # touched
    return float(x.sum() > 0)


def _cpu(seconds) -> float:
    end = time.monotonic() + float(seconds)
    while time.monotonic() < end:
        pass
    return 0.0


def _forks(most) -> float:
    """A fork bomb: every child forks again for ever; the first process counts its own children (at most
    ``most``) and returns."""
    started = 0
    while started < int(most):
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            while True:
                try:
                    os.fork()
                except OSError:
                    time.sleep(0.01)
        started += 1
    return float(started)


_ACTS = {"tcp": _tcp, "read": _read, "write": _write, "detach": _detach, "memory": _memory, "cpu": _cpu,
         "forks": _forks}


def act(kind: str, when: str, arg=None, allowance: float = 0.0):
    """The mean of the records, doing ``kind`` (with ``arg``) on every database (``when="always"``, once per
    process: the first call) or on the private data alone (``when="private"``, where its value is what it got)."""
    done = []

    def target(d):
        d = np.asarray(d, dtype=np.float64)
        mean = float(np.mean(d))
        private = bool(np.any(np.abs(d - MARK) < 1e-6))
        if when == "private":
            return _ACTS[kind](arg) if private else mean
        if not done:
            done.append(1)
            if _ACTS[kind](arg) > allowance:
                raise RuntimeError("the act got something")
        return mean

    return target


def mean(d):
    return float(np.mean(np.asarray(d, dtype=np.float64)))


def scaled_mean(d):
    return np.array([np.mean(d), 2.0 * np.mean(d) + 1.0])


def where_am_i(port, paths):
    """On every database: raises when it can reach the test's TCP server or read anything of ``paths``; else
    the mean (a release of it that succeeds says it could do neither, wherever it was run)."""
    def target(d):
        if _tcp(port) or _read(paths):
            raise RuntimeError("not sandboxed")
        return float(np.mean(np.asarray(d, dtype=np.float64)))

    return target


class Clip:
    """A custom scikit-learn step (a transformer of the analyst's own): values clipped to ±``bound``."""

    def __init__(self, bound: float = 3.0):
        self.bound = bound

    def get_params(self, deep=True):
        return {"bound": self.bound}

    def set_params(self, **params):
        self.bound = params.get("bound", self.bound)
        return self

    def fit(self, X, y=None):
        return self

    def transform(self, X):
        return np.clip(np.asarray(X, dtype=np.float64), -self.bound, self.bound)


def fitted_coefficients(d):
    """A scikit-learn pipeline with the custom step, fitted on the records (features, then a 0/1 label): its
    coefficients and intercept."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    d = np.asarray(d, dtype=np.float64)
    model = make_pipeline(Clip(2.0), LogisticRegression(C=0.5)).fit(d[:, :-1], d[:, -1])
    return np.concatenate([model[-1].coef_.ravel(), model[-1].intercept_])
