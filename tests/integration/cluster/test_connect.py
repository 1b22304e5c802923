"""A wrong cluster address is one line within connect_timeout, never a hang (issue 19, item 4).

Before: ``raydp estimate ... --backend ray --address 127.0.0.1:1`` retried for 328 s until killed
(``ray.init`` alone: over 400 s here). Each case runs the real command line in a fresh process (so
no Ray is left in the test process) with ``--connect-timeout 3`` and measures its wall time: the
process's own start-up (imports, the probe of the target) is a few seconds on this 2-core VM, so the
bound asserted is the timeout plus 20 s — against minutes before.
"""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

import raydp
from raydp.engine.reach import DEFAULT_CONNECT_TIMEOUT, check_reachable, parse_address
from raydp.errors import EngineError

TIMEOUT = 3
SLACK = 20.0
ARGS = ["estimate", "--target", "raydp.targets:mean", "--oracle", "raydp.oracles:exponential", "--oracle-args",
        '{"rate": 1}', "--n", "100", "--gamma", "0.1", "--backend", "ray", "--quiet"]


def _cli(address: str, timeout: float = TIMEOUT) -> tuple[subprocess.CompletedProcess, float]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "raydp.cli", *ARGS, "--address", address,
                        "--connect-timeout", str(timeout)], capture_output=True, text=True, env=env, timeout=300)
    return p, time.monotonic() - t0


def _one_line(p: subprocess.CompletedProcess) -> str:
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("raydp: error: cannot reach a Ray cluster at "), p.stderr[-2000:]
    return lines[0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def silent_listener():
    """A TCP port that accepts connections and never says a word."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    held, stop = [], threading.Event()

    def accept():
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    stop.set()
    t.join(5)
    for c in held:
        c.close()
    srv.close()


@pytest.fixture
def http_server():
    """An HTTP/1.1 server on loopback, as the dashboard's port 8265 would be."""
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


def test_a_closed_port_is_refused_quickly():
    p, wall = _cli(f"127.0.0.1:{_free_port()}")
    line = _one_line(p)
    assert "connection refused: nothing listens there" in line and "--connect-timeout" in line
    assert wall < TIMEOUT + SLACK, wall


def test_an_unknown_host_name_is_refused_at_once():
    p, wall = _cli("no-such-host.invalid:6379")
    assert "does not resolve" in _one_line(p)
    assert wall < TIMEOUT + SLACK, wall


def test_a_port_that_never_answers_is_given_up_after_the_timeout(silent_listener):
    p, wall = _cli(f"127.0.0.1:{silent_listener}")
    line = _one_line(p)
    assert "accepts connections but does not answer like a Ray cluster" in line and "tried for 3 s" in line
    assert TIMEOUT <= wall < TIMEOUT + SLACK, wall


def test_an_http_server_is_named_as_one(http_server):
    p, wall = _cli(f"127.0.0.1:{http_server}")
    line = _one_line(p)
    assert "an HTTP/1 server (the dashboard?), not Ray's GCS" in line
    assert wall < TIMEOUT + SLACK, wall


def test_the_api_raises_engine_error_and_starts_no_ray():
    t0 = time.monotonic()
    with pytest.raises(EngineError, match="cannot reach a Ray cluster at '127.0.0.1:1'"):
        raydp.estimate_sensitivity(raydp.targets.mean(), raydp.oracles.exponential(1.0), 50, gamma=0.2, seed=1,
                                   backend=raydp.RayBackend(address="127.0.0.1:1", connect_timeout=1))
    assert time.monotonic() - t0 < 10
    assert "ray" not in sys.modules or not sys.modules["ray"].is_initialized()


def test_the_check_itself_and_its_default():
    assert DEFAULT_CONNECT_TIMEOUT == 30.0 == raydp.RayBackend().connect_timeout
    assert parse_address("auto") is None and parse_address("[::1]:6379") == ("::1", 6379)
    with pytest.raises(EngineError, match="is not host:port"):
        parse_address("6379")
    with pytest.raises(raydp.InvalidArgumentError, match="connect_timeout"):
        raydp.RayBackend(connect_timeout=0)


def test_a_real_cluster_answers(ray_session):
    """The embedded Ray's GCS passes the check (a gRPC server answers the HTTP/2 preface)."""
    check_reachable(ray_session.get_runtime_context().gcs_address, timeout=5)


# ----------------------------------------------------------------------------- auto and the port range
# Before: `--address auto --connect-timeout 5` went straight to ray.init, which took 23.7 s and printed 22
# lines of GCS errors; a port outside 1-65535 was "connection refused" (the socket layer takes it modulo
# 65536: 70000 is port 4464).


def _cli_with(address: str, env: dict, timeout: float = TIMEOUT) -> tuple[subprocess.CompletedProcess, float]:
    """The command line with ``env`` (no RAY_ADDRESS unless given); a hang fails at 90 s, not minutes."""
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "raydp.cli", *ARGS, "--address", address, "--connect-timeout",
                        str(timeout)], capture_output=True, text=True, env=env, timeout=90)
    return p, time.monotonic() - t0


def _own_ray_tmpdir(tmp_path, recorded: str | None = None) -> dict:
    """An environment whose Ray temp dir is ``tmp_path`` (so no other cluster on this machine is recorded
    there), holding ``recorded`` as the address `ray start --head` writes, if given."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAY_TMPDIR"] = str(tmp_path)
    if recorded is not None:
        (tmp_path / "ray").mkdir()
        (tmp_path / "ray" / "ray_current_cluster").write_text(recorded + "\n")
    return env


def test_auto_with_no_cluster_recorded_is_one_line_within_the_timeout(tmp_path):
    p, wall = _cli_with("auto", _own_ray_tmpdir(tmp_path))
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and not p.stdout.strip(), p.stdout[-1000:] + p.stderr[-2000:]
    assert lines[0].startswith("raydp: error: no Ray cluster to connect to for address 'auto': RAY_ADDRESS is not "
                               f"set and none is recorded in {tmp_path / 'ray' / 'ray_current_cluster'} "), lines[0]
    assert "start one with `ray start --head` or pass the head's address" in lines[0]
    assert wall < TIMEOUT + SLACK, wall


def test_auto_goes_through_the_same_check_as_an_address(tmp_path):
    """The recorded cluster is gone (nothing listens at its port): one line naming the address `auto` stood
    for and where it was found, within the timeout (before: ray.init retried for minutes)."""
    port = _free_port()
    p, wall = _cli_with("auto", _own_ray_tmpdir(tmp_path, f"127.0.0.1:{port}"))
    line = _one_line(p)
    recorded = tmp_path / "ray" / "ray_current_cluster"
    assert line.startswith(f"raydp: error: cannot reach a Ray cluster at 'auto' (127.0.0.1:{port}, from {recorded})")
    assert "connection refused: nothing listens there" in line and not p.stdout.strip()
    assert wall < TIMEOUT + SLACK, wall


def test_auto_resolves_like_ray_and_is_checked(ray_session, tmp_path, monkeypatch, silent_listener):
    """In process: RAY_ADDRESS first, else the recorded address; what comes back is what ray.init gets."""
    gcs = ray_session.get_runtime_context().gcs_address
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "ray_current_cluster").write_text(gcs + "\n")
    assert check_reachable("auto", timeout=5) == gcs
    # RAY_ADDRESS wins over the file, as in ray.init(address="auto"); a silent port there is given up on
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{silent_listener}")
    t0 = time.monotonic()
    with pytest.raises(EngineError, match=rf"at 'auto' \(127\.0\.0\.1:{silent_listener}, from RAY_ADDRESS\) "
                                          r"\(tried for 1 s\): it accepts connections but does not answer"):
        check_reachable("auto", timeout=1)
    assert time.monotonic() - t0 < 1 + 2
    # an explicit address, and `local`, come back as given
    assert check_reachable(gcs, timeout=5) == gcs and check_reachable("local", timeout=1) == "local"


def test_a_port_outside_the_range_is_refused_as_such():
    p, wall = _cli("127.0.0.1:70000")
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert lines == ["raydp: error: Ray address '127.0.0.1:70000' has port 70000: a port must be 1-65535"], lines
    assert wall < TIMEOUT + SLACK, wall
    for bad in ("127.0.0.1:0", "ray://10.0.0.5:65536", "[::1]:99999"):
        with pytest.raises(EngineError, match=r"has port \d+: a port must be 1-65535"):
            parse_address(bad)
    assert parse_address("127.0.0.1:1") == ("127.0.0.1", 1) and parse_address("h:65535") == ("h", 65535)
