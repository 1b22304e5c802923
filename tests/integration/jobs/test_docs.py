"""The documentation site builds with warnings as errors, covers every module, and runs its tutorial.

One build per test run (about 30 s): the API reference from the docstrings, the guides, the reports
the jobs wrote to ``jobs/results/``, and ``docs/tutorial.ipynb`` executed from scratch.
"""

from __future__ import annotations

import html
import pkgutil
import re
import subprocess
import sys

import pytest

import raydp

from paths import REPO as ROOT
DOCS = ROOT / "docs"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    p = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS),
                        str(out)], capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    return out


def test_every_module_has_an_api_page(site):
    documented = set()
    for page in (DOCS / "api").glob("*.md"):
        documented |= set(re.findall(r"\.\. automodule:: ([\w.]+)", page.read_text()))
    modules = {m.name for m in pkgutil.walk_packages(raydp.__path__, "raydp.")
               if not any(part.startswith("_") for part in m.name.split("."))}
    assert modules <= documented, sorted(modules - documented)
    html = (site / "api" / "core.html").read_text()
    assert "SamplerOptions" in html and "estimate_sensitivity" in html


def test_the_tutorial_ran_and_shows_its_results(site):
    html = (site / "tutorial.html").read_text()
    assert html.count('class="cell_output') >= 8
    assert "random differential privacy" in html and "refused:" in html
    assert "Traceback" not in html


def test_every_job_report_has_a_page(site):
    for report in (ROOT / "jobs" / "results").glob("*.md"):
        page = site / "reports" / f"{report.stem}.html"
        assert page.exists(), report.name
        text = html.unescape(re.sub(r"<[^>]+>", " ", page.read_text()))
        words = re.findall(r"[A-Za-z]{4,}", report.read_text())[:12]  # the report's own first words
        assert words and all(w in text for w in words), (report.name, [w for w in words if w not in text])


def test_the_guides_are_linked_from_the_index(site):
    index = (site / "index.html").read_text()
    for guide in (DOCS / "guides").glob("*.md"):
        assert f"guides/{guide.stem}.html" in index, guide.name
