"""Nothing a target prints on the private data reaches the output (issue 19, item 2).

The target of ``tests/children/noisy_release.py`` writes a marker in every way a process can —
``print``, ``sys.stderr``, a buffered ``sys.__stdout__``, ``os.write`` to descriptors 1 and 2, C's
``printf`` (buffered when stdout is a pipe, so it would come out *after* the release unless flushed
into /dev/null), ``logging`` after ``basicConfig`` and a warning — but only when it sees the private
data. The child runs with its stdout and stderr on pipes, as under a job runner, and the test reads
both: no marker, and every channel works again afterwards (the ``AFTER-`` lines), so the test would
see a leak if there were one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from paths import CHILDREN, REPO

pytestmark = pytest.mark.subprocess  # every test runs tests/children/noisy_release.py

CHILD = CHILDREN / "noisy_release.py"
MARKER = "PRIVATE-73519.86420753"
ROOT = REPO


def run_child(mode: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, str(CHILD), mode], capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=str(ROOT))


def _after(out: str, err: str, tag: str) -> None:
    assert f"AFTER-{tag} print" in out and f"AFTER-{tag} fd 1" in out, (out[-2000:], err[-2000:])
    assert f"AFTER-{tag} fd 2" in err and f"AFTER-{tag} logging" in err, err[-2000:]


def test_every_channel_is_silenced_during_the_release_and_restored_after():
    r = run_child("direct")
    assert r.returncode == 0, r.stderr[-3000:]
    assert MARKER not in r.stdout and MARKER not in r.stderr, (r.stdout[-2000:], r.stderr[-2000:])
    _after(r.stdout, r.stderr, "RELEASE")


def test_restored_also_when_the_target_raises():
    r = run_child("fail")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "REFUSED TargetError" in r.stdout
    assert MARKER not in r.stdout and MARKER not in r.stderr, (r.stdout[-2000:], r.stderr[-2000:])
    _after(r.stdout, r.stderr, "FAIL")


def test_liblinear_verbose_lines_of_the_private_fit_never_reach_stdout():
    """``LinearSVC(verbose=1)`` and ``LogisticRegression(solver="liblinear", verbose=1)`` print from C.
    Their public fits (the sampler's pairs) do print — which shows the output would be seen — and
    between the fences around the private evaluation nothing appears."""
    r = run_child("sklearn")
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert sum("LibLinear" in line or line.startswith("iter") for line in lines) > 20, r.stdout[-2000:]
    fences = [i for i, line in enumerate(lines) if line in ("BEGIN-PRIVATE", "END-PRIVATE")]
    assert len(fences) == 4, r.stdout[-2000:]
    for begin, end in zip(fences[::2], fences[1::2]):
        assert end == begin + 1, lines[begin: end + 1][:20]
    _after(r.stdout, r.stderr, "SKLEARN")


@pytest.mark.slow
@pytest.mark.ray
def test_a_release_inside_a_ray_worker_prints_nothing_private():
    """The same release run as a Ray task: the worker's descriptors are its log files, which Ray streams
    to the driver. The worker's ``AFTER-`` lines reach the driver (forwarding works); the marker reaches
    neither the driver nor any file of the Ray session."""
    r = run_child("ray", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert MARKER not in r.stdout and MARKER not in r.stderr, (r.stdout[-2000:], r.stderr[-2000:])
    both = r.stdout + r.stderr
    assert "AFTER-WORKER print" in both and "AFTER-WORKER fd 1" in both and "AFTER-WORKER fd 2" in both, both[-3000:]
    session = next(line.split()[1] for line in r.stdout.splitlines() if line.startswith("SESSION "))
    logs = [p for p in Path(session).rglob("*") if p.is_file()]
    assert logs, f"no files in the Ray session {session}"
    leaked = [str(p) for p in logs if MARKER.encode() in p.read_bytes()]
    assert not leaked, leaked
    assert any(b"AFTER-WORKER fd 1" in p.read_bytes() for p in logs), "the worker's log files were not found"
