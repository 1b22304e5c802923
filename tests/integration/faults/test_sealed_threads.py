"""A sandbox template started from a thread that then ends keeps serving the process.

bubblewrap's ``--die-with-parent`` follows the *thread* that started it: a template started by a pool's worker
thread was SIGKILLed when that thread ended — the next release paid a new template (about a second), and a
release of another thread that was using it failed. Templates are now started from one long-lived thread."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import raydp
import raydp.seal as seal
from raydp import oracles, targets

pytestmark = pytest.mark.subprocess


def test_a_template_outlives_the_thread_that_started_it():
    est = raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), 200, m=40, seed=0, progress=False,
                                     backend="local")
    data = np.random.default_rng(0).exponential(1.0, 200)
    pool = seal._the_pool()
    pool.close()  # none of this process's templates yet: the thread below starts the first
    out = []
    t = threading.Thread(target=lambda: out.append(raydp.sample_then_respond(data, targets.mean(), raydp.Laplace(1.0),
                                                                             estimate=est)))
    t.start()
    t.join()
    assert out and len(pool.templates) == 1
    first = pool.templates[0]
    time.sleep(1.0)  # the kernel's parent-death signal, if any, is delivered by now
    assert first.proc.poll() is None, f"the template died with its thread ({first.proc.poll()})"
    raydp.sample_then_respond(data, targets.mean(), raydp.Laplace(1.0), estimate=est)
    assert pool.templates == [first]
