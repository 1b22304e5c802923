"""What ``raydp serve`` refuses before it serves anything, and what the core install does without its extra."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
import serve_util as su

pytestmark = [pytest.mark.subprocess]


def _one_line(p: subprocess.CompletedProcess) -> str:
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("raydp: error: ") and "Traceback" not in p.stderr, p.stderr
    return lines[0]


def test_another_host_than_loopback_is_refused(tmp_path):
    for host in ("0.0.0.0", "localhost"):
        line = _one_line(su.cli("serve", str(tmp_path / "s"), "--host", host, "--port", "0"))
        assert "binds 127.0.0.1 only" in line
    assert not (tmp_path / "s").exists()  # refused before anything was made


def test_no_sandbox_no_service_unless_told(tmp_path):
    line = _one_line(su.cli("serve", str(tmp_path / "s"), "--port", "0", extra_env={"RAYDP_SANDBOX": "off"}))
    assert "refuses to start without the sandbox" in line and "--allow-unsandboxed" in line
    assert not (tmp_path / "s").exists()
    s = su.start(tmp_path / "s", "--allow-unsandboxed", extra_env={"RAYDP_SANDBOX": "off"})
    try:
        assert any("sandbox: off" in line for line in s.lines), s.lines
        assert s.call("GET", "/v1/whoami")[1] == {"name": "curator", "role": "admin"}
    finally:
        s.stop()
        shutil.rmtree(tmp_path / "s", ignore_errors=True)


def test_the_core_install_needs_no_server_libraries(tmp_path):
    code = ("import sys, raydp, raydp.cli, raydp.client, raydp.serve, raydp.serve.commands; raydp.cli.make_parser(); "
            "print(sorted(m for m in ('fastapi', 'uvicorn', 'sqlalchemy', 'starlette', 'httpx') if m in sys.modules))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=su.env(), timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "[]", (p.stdout, p.stderr)
    # without the [serve] extra, `raydp serve` says how to get it, in one line
    code = ("import sys; sys.modules['fastapi'] = None; from raydp.cli import main; "
            f"sys.exit(main(['serve', {str(tmp_path / 's')!r}]))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=su.env(), timeout=120)
    line = _one_line(p)
    assert "pip install 'raydp-sensitivity[serve]'" in line
