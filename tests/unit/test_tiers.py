"""The unit tier's guard (``tests/conftest.py``): in a run of unmarked in-process tests, a test that
starts a child process fails and names the marker it needs; in a run that mixes tiers nothing is
watched, so the full suite runs as it always did.

Each case runs pytest in a child process on a scratch directory holding a copy of the real conftest,
so the guard under test is the one every run uses."""

from __future__ import annotations

import pytest
from paths import TESTS

pytest_plugins = ("pytester",)
pytestmark = pytest.mark.subprocess  # the cases are pytest runs in child processes

INI = """[pytest]
markers =
    ray: starts Ray
    subprocess: starts another process
    slow: slow
"""

IN_PROCESS = """
import multiprocessing, os, subprocess, sys

def test_nothing_leaves():
    assert sum(range(10)) == 45

def test_a_command():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

def test_a_forked_worker():
    p = multiprocessing.get_context("fork").Process(target=os.getpid)
    p.start(); p.join()

def test_a_spawned_worker():
    p = multiprocessing.get_context("spawn").Process(target=os.getpid)
    p.start(); p.join()

def test_a_library_probe_once_per_process():
    subprocess.run(["uname", "-p"], capture_output=True)
"""

MARKED = """
import subprocess, sys
import pytest

@pytest.mark.subprocess
def test_declared():
    subprocess.run([sys.executable, "-c", "pass"], check=True)
"""


@pytest.fixture
def scratch(pytester):
    pytester.makeconftest((TESTS / "conftest.py").read_text())
    pytester.makeini(INI)
    pytester.makepyfile(test_in_process=IN_PROCESS, test_marked=MARKED)
    return pytester


def test_a_run_of_in_process_tests_fails_each_one_that_starts_a_process(scratch):
    result = scratch.runpytest_subprocess("test_in_process.py", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=3)
    out = result.stdout.str()
    assert "unit tier: a test that starts Ray or a child process fails" in out
    for name in ("test_a_command", "test_a_forked_worker", "test_a_spawned_worker"):
        assert f"FAILED test_in_process.py::{name}" in out
    assert "a fork of this process" in out and "mark the test subprocess" in out
    assert "-c pass: mark the test subprocess" in out  # names what it started


def test_the_marker_takes_a_test_out_of_the_tier_and_a_mixed_run_is_not_watched(scratch):
    tier = scratch.runpytest_subprocess("-m", "not ray and not subprocess and not slow", "-p", "no:cacheprovider")
    tier.assert_outcomes(passed=2, failed=3, deselected=1)
    mixed = scratch.runpytest_subprocess("-p", "no:cacheprovider")
    mixed.assert_outcomes(passed=6)
    assert "unit tier:" not in mixed.stdout.str()
