"""Where things are, for every test: the repository, the tests' data, child scripts and jobs.

``tests/support`` is on pytest's ``pythonpath`` (pyproject.toml): test modules import these helpers by
name, and a subprocess that needs them gets ``PYTHONPATH=SUPPORT``.
"""

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
TESTS = SUPPORT.parent
REPO = TESTS.parent
DATA = TESTS / "data"
CHILDREN = TESTS / "children"
JOBS = REPO / "jobs"
