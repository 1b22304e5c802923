"""Sphinx configuration of raydp's documentation site.

Built by the test suite (``tests/integration/jobs/test_docs.py``) with warnings as errors:

    python -m sphinx -W --keep-going -b html docs docs/_build/html

The API reference comes from the docstrings (autodoc, NumPy-style sections through napoleon); the
guides are Markdown (MyST); the tutorial notebook is executed at every build (myst-nb); the dated
benchmark and results reports are the files the jobs write in ``jobs/results/``, included as they are.
"""

from __future__ import annotations

import os
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
# build, so the site shows exactly what is committed there — dated, with the command that made it.

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
    "scale_sim_wide": ("The issue-20 case: expensive targets on 64 slots", "scale_sim.py --wide-case"),
}


def write_reports(app) -> None:
    out = os.path.join(app.srcdir, "reports")
    os.makedirs(out, exist_ok=True)
    pages = []
    for stem, (title, job) in REPORTS.items():
        if not os.path.exists(os.path.join(RESULTS, f"{stem}.md")):
            continue
        text = [f"# {title}", "", f"Written by `python jobs/{job}` to `jobs/results/{stem}.md` (the date and the",
                "machine are in its first lines).", ""]
        if os.path.exists(os.path.join(RESULTS, f"{stem}.png")):
            text += [f"```{{image}} ../../jobs/results/{stem}.png", f":alt: {title}", "```", ""]
        text += [f"```{{include}} ../../jobs/results/{stem}.md", ":heading-offset: 1", "```", ""]
        with open(os.path.join(out, f"{stem}.md"), "w") as f:
            f.write("\n".join(text))
        pages.append(stem)
    with open(os.path.join(out, "index.md"), "w") as f:
        f.write("# Reports\n\nThe dated reports the jobs wrote to `jobs/results/`, as committed.\n\n"
                "```{toctree}\n:maxdepth: 1\n\n" + "\n".join(pages) + "\n```\n")


def setup(app):
    app.connect("builder-inited", write_reports)
