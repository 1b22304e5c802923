"""``jobs/serve_throughput.py`` end to end at a tiny size: it starts a real ``raydp serve``, releases through it and
in process, then (``--postgres auto``) through one and two servers on a real PostgreSQL it starts, and writes its
stamped report."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import serve_util as su
from paths import JOBS

pytestmark = [pytest.mark.subprocess, pytest.mark.slow]


def test_the_throughput_job_writes_its_report(tmp_path):
    p = subprocess.run([sys.executable, str(JOBS / "serve_throughput.py"), "--releases", "6", "--clients", "1,3",
                        "--postgres", "auto", "--out", str(tmp_path)], capture_output=True, text=True, env=su.env(),
                       timeout=300)
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-2000:])
    report = json.loads((tmp_path / "serve_throughput.json").read_text())
    assert [f["clients"] for f in report["figures"]] == [1, 3]
    for f in report["figures"]:
        for side in ("service", "in_process"):
            assert f[side]["releases"] == 6 and f[side]["per_second"] > 0 and f[side]["p99"] >= f[side]["p50"] > 0
    assert report["audit_ok"] and report["served_releases"] == 16
    assert report["spent_epsilon"] == pytest.approx(16 * 0.01, abs=1e-12)
    md = (tmp_path / "serve_throughput.md").read_text()
    assert md.startswith("# raydp serve: releases per second\n\nMade ") and "Command: `python jobs/serve_throughput.py" in md
    pg = report["postgres"]
    assert [f["clients"] for f in pg["figures"]] == [1, 3]
    for f in pg["figures"]:
        for side in ("one", "two"):
            assert f[side]["releases"] == 6 and f[side]["per_second"] > 0 and f[side]["p99"] >= f[side]["p50"] > 0
    assert pg["audit_ok"] and pg["served_releases"] == 32
    assert pg["spent_epsilon"] == pytest.approx(32 * 0.01, abs=1e-12)
    assert "## On PostgreSQL: one server, two servers" in md and "| clients | one server /s |" in md
