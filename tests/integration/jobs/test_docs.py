"""The documentation site builds with warnings as errors, covers every module, and runs its tutorial.

One build per test run (about 30 s): the API reference from the docstrings, the guides, the reports
the jobs wrote to ``jobs/results/``, and ``docs/tutorial.ipynb`` executed from scratch. The build runs
with ``RAYDP_PROGRESS_DELAY=0`` — every sampling run would show its progress — so that a tutorial page
that shows progress bars fails here, not only on a slow machine. Also here, without a build: every
report is stamped, the reports older than the engine are the ones the site marks, and no product file
refers to anything outside the repository; each table of the README and the guides lives in one file, the
docs say what is rather than what changed, and every job records its machine in every report it writes.
"""

from __future__ import annotations

import html
import importlib.util
import json
import os
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
    env = dict(os.environ, RAYDP_PROGRESS_DELAY="0")
    p = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS),
                        str(out)], capture_output=True, text=True, timeout=900, cwd=ROOT, env=env)
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    return out


def _text(page) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", page.read_text()))


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


def test_the_tutorial_page_shows_no_progress_bars(site):
    """Built with every run's progress on (RAYDP_PROGRESS_DELAY=0), the page still shows results only."""
    text = _text(site / "tutorial.html")
    for trace in ("pairs/s", "pair/s", "it/s", "raydp:"):
        assert trace not in text, trace


def test_the_method_page_states_theorem_15_and_cites_the_paper(site):
    text = _text(site / "method.html")
    assert "Pain-Free Random Differential Privacy with Sensitivity Sampling" in text
    for word in ("Theorem 15", "Table 1", "Laplace", "Bernstein", "Balle"):
        assert word in text, word
    assert "method.html" in (site / "index.html").read_text()


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


# ----------------------------------------------------------------------------- reports: stamps and age

STAMP = re.compile(r"^Made (\d{4}-\d\d-\d\dT[\d:]+\+00:00) from commit ([0-9a-f]{7,40}|unknown)\b.* on \d+ cores "
                   r".*\n\nCommand: `python jobs/[\w]+\.py[^`]*`$", re.M)


def _conf():
    spec = importlib.util.spec_from_file_location("raydp_docs_conf", DOCS / "conf.py")
    conf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conf)
    return conf


def test_every_report_is_stamped_with_date_commit_machine_and_command():
    for report in sorted((ROOT / "jobs" / "results").glob("*.md")):
        head = "\n".join(report.read_text().splitlines()[:6])
        m = STAMP.search(head)
        assert m and m.group(2) != "unknown", (report.name, head)


def _git(*args) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=60)


def test_the_site_marks_exactly_the_reports_older_than_the_engine(site):
    if _git("rev-parse", "HEAD").returncode != 0:
        pytest.skip("not a git checkout: report ages are unknown")
    engine = _git("log", "-1", "--format=%H", "--", "raydp/engine").stdout.strip()
    index = _text(site / "reports" / "index.html")
    for report in sorted((ROOT / "jobs" / "results").glob("*.md")):
        commit = STAMP.search(report.read_text()).group(2)
        older = _git("merge-base", "--is-ancestor", engine, commit).returncode == 1
        page = _text(site / "reports" / f"{report.stem}.html")
        assert ("older than the engine" in page) == older, report.name
    assert ("Older than the engine" in index) == any(
        "older than the engine" in _text(p) for p in (site / "reports").glob("*.html") if p.stem != "index")


def test_report_age_reads_the_stamp():
    conf = _conf()
    engine = conf.engine_change()
    first = _git("rev-list", "--max-parents=0", "HEAD").stdout.split()
    if engine is None or not first:
        pytest.skip("not a git checkout")
    assert conf.report_age(f"Made 2026-01-01T00:00:00+00:00 from commit {first[0][:12]} on 2 cores", engine) == "older"
    assert conf.report_age(f"Made 2026-01-01T00:00:00+00:00 from commit {engine} on 2 cores", engine) == "current"
    assert conf.report_age("a report without a stamp", engine) == "unknown"
    assert conf.report_age("Made … from commit 0123456789ab on 2 cores", engine) == "unknown"  # not in this clone


# ----------------------------------------------------------------------------- the product speaks of itself

# Pointers to things outside the repository: the project's issue history, design documents kept
# elsewhere, the source material's extracted text. Published work is cited by its title instead.
OUTSIDE = re.compile(r"(?i:issue[- ]?\d|\bissues? \d|\.\./shared|shared/docs|lecture seeds?|\bseed (text|0\d\d)|"
                     r"seeds? 00\d|design card)|METHOD\.md|DESIGN\.md")
PRODUCT = ["raydp", "docs", "jobs", "cluster", "README.md"]
SKIP_DIRS = {"_build", "jupyter_execute", "reports", "__pycache__", ".venv-diffprivlib"}
SUFFIXES = {".py", ".md", ".ipynb", ".yaml", ".yml", ".sh", ".json", ".txt", ".toml", ""}


def _product_files():
    for top in PRODUCT:
        path = ROOT / top
        files = [path] if path.is_file() else path.rglob("*")
        for f in files:
            if f.is_file() and f.suffix in SUFFIXES and not SKIP_DIRS & set(f.relative_to(ROOT).parts):
                yield f


def test_no_product_file_refers_outside_the_repository():
    hits = []
    for f in _product_files():
        rel = str(f.relative_to(ROOT))
        for no, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            if OUTSIDE.search(line):
                hits.append(f"{rel}:{no}: {line.strip()[:100]}")
    assert not hits, hits
    assert OUTSIDE.search("see issue 20") and OUTSIDE.search("METHOD.md §4") and not OUTSIDE.search("seed=0")


# ----------------------------------------------------------------------------- each table in one place

# Each table by its header row (its first cells), and the one Markdown file that holds it; the others link
# to it. The sklearn results also by a row of figures, so a copy under another header is found too.
TABLES = {
    "concepts": ("| word | meaning |", "docs/guides/concepts.md"),
    "jobs": ("| job | what it does |", "docs/guides/cluster.md"),
    "scikit-learn results": ("| data (private train n) |", "docs/guides/sklearn.md"),
    "scikit-learn results, a row": ("| breast cancer", "docs/guides/sklearn.md"),
}
README_LINKS = ["docs/guides/concepts.md#concepts", "docs/guides/cluster.md",
                "docs/guides/sklearn.md#how-well-it-works"]


def _doc_pages():
    """README.md and the Markdown of docs/, without what the build writes there."""
    yield ROOT / "README.md"
    for page in sorted(DOCS.rglob("*.md")):
        if not SKIP_DIRS & set(page.relative_to(DOCS).parts):
            yield page


def _holders(head: str, pages) -> list[str]:
    return sorted(str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else p.name for p in pages
                  if any(line.startswith(head) for line in p.read_text().splitlines()))


def test_each_table_lives_in_one_place():
    for name, (head, owner) in TABLES.items():
        holders = _holders(head, _doc_pages())
        assert holders == [owner], (name, holders)
    readme = (ROOT / "README.md").read_text()
    for link in README_LINKS:
        path, _, anchor = link.partition("#")
        assert f"]({link})" in readme, link
        assert (ROOT / path).exists(), link
        if anchor:  # GitHub's anchor of a heading: lower case, spaces to dashes
            headings = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
                        for h in re.findall(r"^#+ (.+)$", (ROOT / path).read_text(), re.M)}
            assert anchor in headings, (link, sorted(headings))


def test_the_table_check_sees_a_copy(tmp_path):
    """A page that repeats a table's header row is a second holder; a table under another header is not."""
    head, owner = TABLES["concepts"]
    copy = tmp_path / "copy.md"
    copy.write_text("text\n\n" + head + "\n|---|---|\n| target | a callable |\n")
    assert _holders(head, [ROOT / owner, copy]) == sorted([owner, "copy.md"])
    assert _holders(TABLES["jobs"][0], [copy]) == []


# ----------------------------------------------------------------------------- what is, not what changed

# The product says what it is and does, not how it came to be: no "old defaults", "previously", "now" as
# against before, a commit hash naming a variant. Reports say which commit made them in their stamp (the
# docs build dates them by it); they are not in this check.
HISTORY = re.compile(r"(?i)\bold defaults?\b|\bolder defaults?\b|\bpreviously\b|\bused to\b|\bno longer\b|\blanded\b|"
                     r"\bsince (version|v?\d)|\bformerly\b|\bpredates?\b|\bdue to be\b|before and after|"
                     r"\bnew defaults?\b|\bthe earlier ones?\b|\bhung \d|\bnow\b|\bany ?more\b|\bthis change\b|"
                     r"\bcommit [0-9a-f]{7,40}\b|\bwas changed\b|\bchanged (from|to)\b")
# Uses that describe an order or a state, not a history: (page, the words around the match).
NOT_HISTORY = [
    ("README.md", "replayed with the target as it is now"),
    ("docs/guides/reliability.md", "with the target as it is now"),
    ("docs/guides/reliability.md", "for the target as it is now"),
    ("docs/guides/reliability.md", "28.771039336361 now"),           # the refusal's own message, quoted
    ("docs/guides/serve.md", "the next row no longer follows"),
    ("docs/guides/performance.md", "`uptime` before and after"),
    ("docs/guides/cluster.md", "which copies of a task are running now"),
]

def _history(rel: str, line: str) -> list[str]:
    for page, words in NOT_HISTORY:
        if page == rel:
            line = line.replace(words, "")
    return [m.group(0) for m in HISTORY.finditer(line)]


def test_the_docs_say_what_is_not_what_changed():
    hits = []
    for page in _doc_pages():
        rel = str(page.relative_to(ROOT))
        for no, line in enumerate(page.read_text().splitlines(), 1):
            for word in _history(rel, line):
                where = f"{rel}:{no}: [{word}] {line.strip()[:120]}"
                hits.append(where)
    assert not hits, hits
    # the check finds what it is for, and lets through an order and a quoted state
    assert _history("README.md", "line, old defaults") == ["old defaults"]
    assert _history("README.md", "it hung 328 s before") == ["hung 3"]
    assert _history("README.md", "0 in 20 now") == ["now"]
    assert _history("README.md", "`0ed1578` = the layout of commit 0ed1578") == ["commit 0ed1578"]
    assert _history("README.md", "refused before any charge") == []
    assert _history("docs/guides/reliability.md", "for the target as it is now") == []


def test_no_job_names_a_variant_by_a_commit_or_an_age():
    """What a job prints and writes names each configuration by what it is ("coarse blocks", "fewest pairs"),
    never by a commit hash or as the old and the new one."""
    label = re.compile(r"[\"'`][0-9a-f]{7,12}[\"'`]|\bcommit [0-9a-f]{7,40}\b|(?i:\bold defaults?\b|before and after|"
                       r"\bnew defaults?\b|\bthe old ones?\b|\bnew/old\b|\brule of before\b)")
    hits = [f"{job.name}:{no}: {line.strip()[:100]}" for job, text in _job_sources()
            for no, line in enumerate(text.splitlines(), 1) if label.search(line)]
    assert not hits, hits
    assert label.search('WIDE_KINDS = ("default", "0ed1578")') and label.search('"block new/old"')
    assert not label.search('"default", "m/256-blocks"')


# ----------------------------------------------------------------------------- every report records its machine

sys.path.insert(0, str(ROOT / "jobs"))
import _report  # noqa: E402  (the jobs' shared report helper)

MACHINE = ("cores", "cpu", "memory_gib", "os", "python", "load_at_start")


def _assert_machine(m: dict) -> None:
    assert set(MACHINE) <= set(m), m
    assert m["cores"] >= 1 and m["cpu"] and m["memory_gib"] > 0 and m["os"] and m["load_at_start"] >= 0, m


def test_the_report_helper_records_the_machine_in_both_files(tmp_path):
    report = _report.start("example6", ["--quick"])
    _assert_machine(report["machine"])
    json_path, md_path = _report.write(str(tmp_path), "r", report, _report.header("A report", report))
    _assert_machine(json.loads(open(json_path).read())["machine"])
    head = open(md_path).read()
    assert STAMP.search(head), head
    m = report["machine"]
    for figure in (f"{m['cores']} cores", m["cpu"], f"{m['memory_gib']} GiB", m["os"], f"Python {m['python']}",
                   f"load average {m['load_at_start']} at the start"):
        assert figure in head, (figure, head)
    # a job that writes its own Markdown and JSON stamps the Markdown with the record its JSON holds
    assert _report.stamped("example6", [], "# T\n\nbody\n", report).startswith("# T\n\n" + _report.stamp(report))


# Every job that writes a report (Markdown or JSON) takes its record from _report.start (directly, or
# through _report.stamped, which calls it), so its machine is recorded.
def _job_sources():
    for job in sorted((ROOT / "jobs").glob("*.py")):
        if not job.name.startswith("_"):
            yield job, job.read_text()


def test_every_job_that_writes_a_report_records_its_machine():
    writers = 0
    for job, text in _job_sources():
        writes = re.search(r"\.md\b|_report\.(write|publish)\(|json\.dump\(report|json\.dump\(_finite\(payload", text)
        if not writes:
            continue
        writers += 1
        assert re.search(r"_report\.(start|stamped)\(", text), job.name
        if re.search(r"json\.dump\(_finite\(payload", text):  # a JSON document built by hand holds the record
            assert re.search(r"\*\*report\b", text), job.name
    assert writers >= 12, writers


@pytest.mark.subprocess
def test_the_audit_job_writes_its_machine_in_both_reports(tmp_path):
    """A tiny run of a job that writes a JSON document of its own, not through _report.write."""
    p = subprocess.run([sys.executable, str(ROOT / "jobs" / "audit.py"), "--scale", "0.01", "--runs", "20",
                        "--out", str(tmp_path), "--quiet"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode in (0, 1), (p.stdout[-2000:], p.stderr[-2000:])  # 1: a tiny run may not be "as expected"
    payload = json.loads((tmp_path / "audit.json").read_text())
    _assert_machine(payload["machine"])
    assert payload["command"].startswith("python jobs/audit.py") and payload["commit"]
    head = (tmp_path / "audit.md").read_text()
    assert STAMP.search(head) and payload["machine"]["os"] in head and payload["date"] in head, head[:600]
