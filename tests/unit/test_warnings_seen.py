"""DeprecationWarnings are seen (issue 38, point 4): the suite does not ignore them wholesale, and raydp's own
sources (the package, its tests and jobs) compile without a warning — an invalid escape sequence is a
DeprecationWarning today and an error in a later Python."""

from __future__ import annotations

import re
import warnings

from paths import REPO


def test_the_suite_does_not_ignore_deprecation_warnings_wholesale():
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    # a filter "ignore::DeprecationWarning" with no module after it: every library's, and raydp's own, hidden
    assert not re.search(r"""["']ignore::DeprecationWarning(:\s*)?["']""", text)


def test_our_sources_compile_without_a_warning():
    found = []
    for folder in ("raydp", "tests", "jobs"):
        for path in sorted((REPO / folder).rglob("*.py")):
            if any(part.startswith(".") for part in path.relative_to(REPO).parts):  # a venv (jobs/.venv-*), a cache
                continue
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                compile(path.read_text(encoding="utf-8"), str(path), "exec")
            found += [f"{path.relative_to(REPO)}:{w.lineno}: {w.message}" for w in caught]
    assert found == []


def test_without_posix_file_locks_importing_raydp_says_what_it_runs_on(monkeypatch):
    """Where ``fcntl`` does not exist (Windows), ``import raydp`` fails with one sentence naming the platform and
    why, not a bare ``No module named 'fcntl'``."""
    import importlib
    import sys

    import pytest

    import raydp.ledger  # noqa: F401 - loaded first, so that the module put back at the end is this one

    monkeypatch.setitem(sys.modules, "fcntl", None)  # import fcntl now raises ImportError, as on Windows
    monkeypatch.delitem(sys.modules, "raydp.ledger")  # restored (the original module) when the test ends
    with pytest.raises(ImportError, match=r"raydp runs on Linux .* not on \w+: its privacy ledger .* \(fcntl\)"):
        importlib.import_module("raydp.ledger")
