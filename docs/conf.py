"""Sphinx configuration of raydp's documentation site.

Built by the test suite (``tests/integration/jobs/test_docs.py``) with warnings as errors:

    python -m sphinx -W --keep-going -b html docs docs/_build/html

The API reference comes from the docstrings (autodoc, NumPy-style sections through napoleon); the
guides are Markdown (MyST); the tutorial notebook is executed at every build (myst-nb); the stamped
benchmark and results reports are the files the jobs write in ``jobs/results/``, included as they are,
with a note on each report older than the engine it measured.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)

import raydp  # noqa: E402

project = "raydp"
author = "the raydp developers"
copyright = "2026, the raydp developers"
version = release = raydp.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "myst_nb",
]
source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "**.ipynb_checkpoints"]
root_doc = "index"

myst_enable_extensions = ["dollarmath", "colon_fence", "deflist"]
myst_heading_anchors = 3
suppress_warnings = ["myst.header"]   # the included reports start their sections at ###
nb_execution_mode = "force"        # the tutorial runs at every build: its output is never stale
# A progress bar executed into a static page is one stderr line per update: the page shows results only.
# The kernel inherits this environment; a reader running the notebook still gets the live bar.
os.environ["RAYDP_PROGRESS_DELAY"] = "1e9"
nb_execution_timeout = 300
nb_execution_raise_on_error = True

autodoc_member_order = "bysource"
autodoc_typehints = "none"         # signatures as written; types are in the docstrings
autodoc_default_options = {"members": True, "show-inheritance": False}
napoleon_numpy_docstring = True
napoleon_google_docstring = False

html_theme = "furo"
html_title = f"raydp {release}"
html_static_path: list[str] = []

# ---------------------------------------------------------------------------------------------------
# Reports: one page per report a job wrote to jobs/results/ (its Markdown and its figure), made at every
# build, so the site shows exactly what is committed there. Each report starts with its stamp ("Made DATE
# from commit HASH on MACHINE", then the command); a report whose commit comes before the last change to
# raydp/engine/ gets a note saying so, on its page and in the list on the Reports page, and the build
# prints that list. An old report is information, not an error: it never fails the build.

RESULTS = os.path.join(ROOT, "jobs", "results")
REPORTS = {  # stem in jobs/results -> (title, the job that writes it)
    "bench": ("Benchmark: where the time goes", "bench.py"),
    "bench_perpair": ("Benchmark: per-pair targets under the expensive-target defaults", "bench.py --sections perpair"),
    "scale_sim": ("Scale simulation: a wide cluster on one machine", "scale_sim.py"),
    "audit": ("Audit of the guarantee", "audit.py"),
    "fig4_example6": ("Figure 4 (Example 6): Δ̂ converges to the exact sensitivity", "example6.py"),
    "fig5_svm_sensitivity": ("Figure 5: sampled vs global sensitivity of a linear SVM", "svm_sensitivity.py --paper"),
    "fig6_svm_utility": ("Figure 6: private SVM error", "svm_utility.py"),
    "fig7_kde_bernstein": ("Figure 7: KDE with the Bernstein mechanism", "kde_bernstein.py"),
    "baselines_compare": ("Sampled Δ̂ vs the classic alternatives", "compare_baselines.py"),
    "sklearn_utility": ("scikit-learn models made private", "sklearn_utility.py"),
    "sklearn_one_liner": ("The scikit-learn one-liner on raw data", "sklearn_utility.py --one-liner"),
    "scale_sim_wide": ("Expensive targets on 64 slots", "scale_sim.py --wide-case"),
    "release_cost": ("What a release costs: the sandbox and replay", "release_cost.py"),
    "serve_throughput": ("raydp serve: releases per second", "serve_throughput.py"),
    "sklearn_pair_speed": ("Cheaper pairs for scikit-learn models", "sklearn_pair_speed.py"),
    "replay_power": ("Replay with measured power", "replay_power.py"),
}
ENGINE = "raydp/engine"   # what the reports measure; a change there can move every figure


def _git(*args: str) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None


def _commit_info(rev: str) -> tuple[str, str] | None:
    """(short hash, date) of a commit, or None when git or the commit is not at hand."""
    p = _git("log", "-1", "--format=%h|%cs", rev, "--")
    if p is None or p.returncode != 0 or "|" not in p.stdout:
        return None
    short, date = p.stdout.strip().split("|", 1)
    return short, date


def report_age(text: str, engine: str | None) -> str:
    """``"current"``, ``"older"`` (made before the engine's last change) or ``"unknown"``."""
    found = re.search(r"\bfrom commit ([0-9a-f]{7,40})\b", text)
    if found is None or engine is None:
        return "unknown"
    p = _git("merge-base", "--is-ancestor", engine, found.group(1))
    if p is None or p.returncode not in (0, 1):
        return "unknown"   # a commit this clone does not have
    return "current" if p.returncode == 0 else "older"


def engine_change() -> str | None:
    p = _git("log", "-1", "--format=%H", "--", ENGINE)
    if p is None or p.returncode != 0:
        return None
    return p.stdout.strip() or None


def write_reports(app) -> None:
    out = os.path.join(app.srcdir, "reports")
    os.makedirs(out, exist_ok=True)
    engine = engine_change()
    changed = _commit_info(engine) if engine else None
    pages, older, unknown = [], [], []
    for stem, (title, job) in REPORTS.items():
        if not os.path.exists(os.path.join(RESULTS, f"{stem}.md")):
            continue
        with open(os.path.join(RESULTS, f"{stem}.md"), encoding="utf-8") as f:
            age = report_age(f.read(), engine)
        text = [f"# {title}", "", f"Made by `python jobs/{job}`, committed as `jobs/results/{stem}.md`; its first",
                "lines say when, from which commit, on what machine and with which exact command.", ""]
        if age == "older" and changed:
            older.append(stem)
            text += [":::{note}", f"This report is older than the engine it measured: `{ENGINE}/` last changed in "
                     f"commit {changed[0]} ({changed[1]}), after the commit this report was made from. Its figures "
                     "may have moved; run its command again to refresh it.", ":::", ""]
        elif age == "unknown":
            unknown.append(stem)
        if os.path.exists(os.path.join(RESULTS, f"{stem}.png")):
            text += [f"```{{image}} ../../jobs/results/{stem}.png", f":alt: {title}", "```", ""]
        text += [f"```{{include}} ../../jobs/results/{stem}.md", ":heading-offset: 1", "```", ""]
        with open(os.path.join(out, f"{stem}.md"), "w") as f:
            f.write("\n".join(text))
        pages.append(stem)
    notes = []
    if older and changed:
        notes.append(f"Older than the engine (`{ENGINE}/` last changed in commit {changed[0]}, {changed[1]}): "
                     + ", ".join(f"{{doc}}`{s}`" for s in older) + ". Their figures may have moved since.")
        print(f"raydp docs: {len(older)} report(s) older than the last change to {ENGINE}/ ({changed[0]}): "
              + ", ".join(older))
    if unknown:
        notes.append("Of unknown age (no commit in their stamp, or git not at hand): "
                     + ", ".join(f"{{doc}}`{s}`" for s in unknown) + ".")
    with open(os.path.join(out, "index.md"), "w") as f:
        f.write("# Reports\n\nThe reports the jobs wrote to `jobs/results/`, as committed, each stamped with its "
                "date, code version (commit), machine and command. Measurements live here only; the guides say "
                "how to make them again.\n\n" + "".join(f"{n}\n\n" for n in notes)
                + "```{toctree}\n:maxdepth: 1\n\n" + "\n".join(pages) + "\n```\n")


def setup(app):
    app.connect("builder-inited", write_reports)
