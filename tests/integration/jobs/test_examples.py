"""Every code block of the README and the guides runs as printed.

The blocks of ``README.md``, ``docs/index.md`` and ``docs/guides/*.md`` are taken from the Markdown as it
is: a ``python`` block runs in a fresh interpreter (``python block.py``), a ``bash`` block under
``bash -euo pipefail``, each in a temporary directory of its own, with this virtualenv's ``python``,
``raydp`` and ``ray`` first on PATH, a throw-away HOME, BLAS on one thread (the machine has two cores),
no ``RAY_ADDRESS`` and a short ``RAY_TMPDIR`` of its own. A block that names ``jobs/`` or ``cluster/``
gets a copy of those scripts, as in a checkout. ``text`` blocks are output, not code, and are not run.

A block that cannot run in CI says so in the Markdown, on the line before it::

    <!-- notest: why -->

and :func:`test_the_blocks_not_run_are_few_and_say_why` lists them. A block may start Ray only when it is
about Ray (it starts a cluster with ``raydp cluster up`` or ``cluster/local.sh up``, submits a job with
``ray job submit``, or calls ``ray.init``):
for every other block the test checks that its ``RAY_TMPDIR`` is still empty afterwards. Some blocks also
print what they claim (the scikit-learn example's accuracy against the majority class, a ledger's
refusal): those outputs are checked too.

The selected blocks run two at a time (the machine has two cores and a block mostly uses one), the
longest — the local cluster — first; each test then checks its block's result.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from paths import REPO

pytestmark = [pytest.mark.subprocess, pytest.mark.slow]

SOURCES = [REPO / "README.md", REPO / "docs" / "index.md", *sorted((REPO / "docs" / "guides").glob("*.md"))]
RUN = {"python", "bash"}
NOT_CODE = {"text"}                      # shown output
FENCE = re.compile(r"^(`{3,}|~{3,})\s*([^\s`]*)(.*)$")
NOTEST = re.compile(r"^<!--\s*notest:\s*(.*?)\s*-->$")
ABOUT_RAY = ("raydp cluster up", "cluster/local.sh up", "ray job submit", "ray.init(")
MOST_NOT_RUN = 4
BLOCK_TIMEOUT = 300
AT_ONCE = 2


@dataclass(frozen=True)
class Block:
    source: Path
    line: int            # of the opening fence, 1-based
    lang: str
    code: str
    notest: str | None   # the reason, when the block is marked

    @property
    def id(self) -> str:
        return f"{self.source.relative_to(REPO)}:{self.line}"

    @property
    def about_ray(self) -> bool:
        return any(word in self.code for word in ABOUT_RAY)


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown file (MyST directives such as ``{toctree}`` are not code)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, lang = m.group(1), m.group(2)
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith(fence[0] * len(fence)))
        before = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        mark = NOTEST.match(before)
        if not lang.startswith("{"):
            found.append(Block(path, i + 1, lang, "\n".join(lines[i + 1:end]) + "\n", mark and mark.group(1)))
        i = end + 1
    return found


ALL = [b for path in SOURCES for b in blocks(path)]
CODE = [b for b in ALL if b.lang not in NOT_CODE]


def test_every_block_is_python_bash_or_output():
    """A block in another language could not be run: it must be marked, or shown as ``text``."""
    odd = [f"{b.id} ({b.lang or 'no language'})" for b in CODE if b.lang not in RUN and b.notest is None]
    assert not odd, odd
    assert len([b for b in CODE if b.notest is None]) >= 10  # the parser still finds the blocks


def test_the_blocks_not_run_are_few_and_say_why():
    skipped = [(b.id, b.notest) for b in CODE if b.notest is not None]
    print("\nblocks not run in CI:\n" + "\n".join(f"  {where}: {why}" for where, why in skipped))
    assert all(len(why) >= 20 for _, why in skipped), skipped
    assert len(skipped) <= MOST_NOT_RUN, skipped


def _env(home: Path, ray_tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "RAYDP_"))}
    env.update(PATH=str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", ""), HOME=str(home),
               RAY_TMPDIR=str(ray_tmp), MPLBACKEND="Agg", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               MKL_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    from raydp.local_cluster.net import free_ports

    gcs, dash, client = free_ports(3, "127.0.0.1")  # never the default ports another cluster may hold
    env.update(RAYDP_PORT=str(gcs), RAYDP_DASHBOARD_PORT=str(dash), RAYDP_CLIENT_PORT=str(client))
    return env


def _checkout(block: Block, where: Path) -> None:
    """The scripts a block runs from a checkout (jobs/*.py, cluster/*), copied next to it."""
    for folder, pattern in (("jobs", "*.py"), ("cluster", "*")):
        if f"{folder}/" in block.code:
            (where / folder).mkdir()
            for f in (REPO / folder).glob(pattern):
                if f.is_file():
                    shutil.copy2(f, where / folder / f.name)


def run_block(block: Block) -> subprocess.CompletedProcess:
    base = Path(tempfile.mkdtemp(prefix="rdx"))   # short: Ray's socket paths live under RAY_TMPDIR
    where, home, ray_tmp = base / "w", base / "h", base / "r"
    for d in (where, home, ray_tmp):
        d.mkdir()
    env = _env(home, ray_tmp)
    _checkout(block, where)
    if block.lang == "python":
        (where / "block.py").write_text(block.code, encoding="utf-8")
        argv = [sys.executable, "block.py"]
    else:
        (where / "block.sh").write_text(block.code, encoding="utf-8")
        argv = ["bash", "-euo", "pipefail", "block.sh"]
    try:
        p = subprocess.run(argv, cwd=where, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT)
        if not block.about_ray:
            started = sorted(str(q.relative_to(ray_tmp)) for q in ray_tmp.rglob("*"))[:5]
            assert not started, f"{block.id} started Ray but is not about Ray: {started}"
        return p
    finally:
        if (home / ".raydp" / "local-cluster").exists():  # a cluster block that stopped half-way
            subprocess.run([sys.executable, "-m", "raydp.local_cluster", "down"], env=env, cwd=where,
                           capture_output=True, timeout=120)
        shutil.rmtree(base, ignore_errors=True)


# What some blocks print, checked: (file, a line only that block has) -> a check of its stdout.
def _sklearn_is_useful(out: str) -> None:
    m = re.search(r"accuracy (\d\.\d+), majority class (\d\.\d+)", out)
    assert m, out
    # tune=True chose a smaller C on public data (C as given, 1, previews near 0.7 on these raw columns; which
    # of 0.01 and 0.1 previews best can depend on how many pilot pairs the machine's speed buys)
    assert re.search(r"'logisticregression__C': 0\.(01|1)\b", out), out
    # One release, with OpenDP's unseeded noise. Its score has a heavy left tail: 200 real releases of this
    # model at m = 2000 scored 0.72-0.97 (mean 0.90); 10^5 simulated ones at the smallest plan the budget may
    # buy on a slow machine (m = 1305, Δ̂ 0.055) had mean 0.876, 0.4% at or below the majority class (0.64),
    # a 10^-4 quantile of 0.35 and a 10^-5 quantile of 0.23. So the bound is 0.25 (fails about once in 10^5
    # runs); the choice above and the preview (below, the guide's block) are what is deterministic.
    assert float(m.group(1)) > 0.25, out
    assert float(m.group(2)) == 0.640, out


def _says(*texts: str):
    def check(out: str) -> None:
        assert all(t in out for t in texts), (texts, out)
    return check


EXPECT = {
    ("README.md", "release = raydp.sample_then_respond("): _says("(0.5, 0, 0.05)-random differential privacy"),
    ("README.md", "majority class {max("): _sklearn_is_useful,
    ("docs/guides/sklearn.md", "majority class {max("): _sklearn_is_useful,
    ("docs/guides/sklearn.md", "search.fit("): _says("logisticregression__C", "random differential privacy"),
    ("docs/guides/ledger.md", "raydp ledger show"): _says("refused with exit status 2", "remaining epsilon=0.4"),
    ("docs/guides/ledger.md", "except raydp.BudgetError"): _says("privacy budget exceeded"),
    ("docs/guides/quickstart.md", "on_cluster = "): _says("True local"),
    ("README.md", "raydp remote release"): _says("(0.1, 0, 0.05)-random differential privacy", "remaining 0.4",
                                                 "audit log intact"),
}


def test_every_expected_output_belongs_to_one_block():
    for source, marker in EXPECT:
        owners = [b.id for b in CODE if b.id.startswith(source + ":") and marker in b.code and b.notest is None]
        assert len(owners) == 1, (source, marker, owners)


def _params():
    for b in CODE:
        marks = [pytest.mark.ray] if b.about_ray else []
        if b.notest is not None:
            marks.append(pytest.mark.skip(reason=f"marked notest: {b.notest}"))
        yield pytest.param(b, id=b.id, marks=marks)


@pytest.fixture(scope="module")
def results(request):
    """The selected blocks, run AT_ONCE at a time, the ones about Ray first: block id -> its future."""
    chosen = [item.callspec.params["block"] for item in request.session.items
              if item.originalname == "test_block_runs_as_printed" and item.module is request.module
              and item.callspec.params["block"].notest is None]
    chosen.sort(key=lambda b: not b.about_ray)
    with ThreadPoolExecutor(max_workers=AT_ONCE) as pool:
        yield {b.id: pool.submit(run_block, b) for b in chosen}


@pytest.mark.parametrize("block", list(_params()))
def test_block_runs_as_printed(block: Block, results):
    p = results[block.id].result()
    assert p.returncode == 0, (block.id, p.stdout[-3000:], p.stderr[-3000:])
    assert "Traceback" not in p.stderr, (block.id, p.stderr[-3000:])
    for (source, marker), check in EXPECT.items():
        if block.id.startswith(source + ":") and marker in block.code:
            check(p.stdout)
