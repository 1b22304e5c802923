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
