"""A release whose target shouts on the private data in every way a process can: run as a child
process by tests/test_silence.py, which reads its stdout and stderr (pipes, as under a job runner).

    python noisy_release.py direct | fail | sklearn | ray

Only the private data (every record 7.0; the oracle never draws it) makes the target print the
marker, so lines printed on oracle data are allowed (they are public) and tell the test that the
target's output would be seen at all.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
import time
import warnings

import numpy as np

import raydp
from raydp import SamplerOptions, oracles

MARKER = "PRIVATE-73519.86420753"
N = 50
PRIVATE = np.full(N, 7.0)


class Noisy:
    """Mean of the records; on the private data it first prints, writes, logs and warns the marker."""

    def __init__(self, fail: bool = False):
        self.fail = fail

    def __call__(self, d):
        d = np.asarray(d, dtype=np.float64)
        if np.all(d == 7.0):
            print(MARKER, "print")
            sys.stderr.write(MARKER + " sys.stderr\n")
            sys.__stdout__.write(MARKER + " sys.__stdout__ (buffered)\n")
            os.write(1, (MARKER + " fd 1\n").encode())
            os.write(2, (MARKER + " fd 2\n").encode())
            ctypes.CDLL(None).printf((MARKER + " C printf (buffered on a pipe)\n").encode())
            logging.getLogger("target").error("%s logging", MARKER)
            warnings.warn(MARKER + " warning")
            if self.fail:
                raise ValueError(MARKER)
        return np.array([float(np.mean(d))])


def after(tag: str) -> None:
    """Every channel works again after the release."""
    print(f"AFTER-{tag} print", flush=True)
    os.write(1, f"AFTER-{tag} fd 1\n".encode())
    os.write(2, f"AFTER-{tag} fd 2\n".encode())
    logging.getLogger("caller").error("AFTER-%s logging", tag)


def estimate(target=None):
    target = Noisy() if target is None else target
    return raydp.estimate_sensitivity(target, oracles.exponential(1.0), N, gamma=0.2, seed=3, progress=False)


def direct() -> None:
    est = estimate()
    raydp.sample_then_respond(PRIVATE, Noisy(), raydp.Laplace(1.0), estimate=est)
    after("RELEASE")


def fail() -> None:
    est = estimate(Noisy(fail=True))
    try:
        raydp.sample_then_respond(PRIVATE, Noisy(fail=True), raydp.Laplace(1.0), estimate=est)
    except raydp.TargetError as exc:
        print("REFUSED", type(exc).__name__, flush=True)
    after("FAIL")


def sklearn() -> None:
    """liblinear's own C-level progress lines (verbose=1) on the public fits, none on the private one."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.svm import LinearSVC

    from raydp.sklearn import PrivateEstimator

    rng = np.random.default_rng(0)

    def rows(k):
        y = rng.integers(0, 2, k)
        return np.column_stack([rng.normal(y[:, None] - 0.5, 0.5, (k, 2)), y])

    public, private = rows(300), rows(120)
    for est in (LinearSVC(verbose=1, max_iter=200), LogisticRegression(solver="liblinear", verbose=1)):
        model = PrivateEstimator(est, oracle=oracles.bootstrap(public), epsilon=1.0, gamma=0.3, m=40, options=SamplerOptions(seed=0, backend="local")).fit(private[:, :2], private[:, 2])
        sys.stdout.flush()
        ctypes.CDLL(None).fflush(None)
        # The private evaluation PrivateEstimator.fit made, once more, between two fences.
        os.write(1, b"BEGIN-PRIVATE\n")
        raydp.sample_then_respond(private, model.target_, raydp.Laplace(1.0), estimate=model.estimate_)
        os.write(1, b"END-PRIVATE\n")
    after("SKLEARN")


def in_ray() -> None:
    import ray

    from raydp.engine.loopback import LOOPBACK_HOST, loopback_only

    est = estimate()

    @ray.remote
    def release_in_worker(est):
        raydp.sample_then_respond(PRIVATE, Noisy(), raydp.Laplace(1.0), estimate=est)
        after("WORKER")
        return os.getpid()

    with loopback_only():
        ray.init(num_cpus=1, include_dashboard=False, _node_ip_address=LOOPBACK_HOST, log_to_driver=True)
    try:
        pid = ray.get(release_in_worker.remote(est))
        time.sleep(3)  # Ray forwards worker output to the driver with a delay
        print("SESSION", ray._private.worker._global_node.get_session_dir_path(), pid, flush=True)
    finally:
        ray.shutdown()


if __name__ == "__main__":
    logging.basicConfig(level=logging.DEBUG)  # as a user's script would: logging reaches stderr
    {"direct": direct, "fail": fail, "sklearn": sklearn, "ray": in_ray}[sys.argv[1]]()
