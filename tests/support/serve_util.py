"""A real ``raydp serve`` process for the service's tests: started on 127.0.0.1 and a free port, its token and
URL read from its first lines, killed with everything it started at the end."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from paths import REPO, SUPPORT

RAYDP = [sys.executable, "-m", "raydp.cli"]


def state_root(prefix: str) -> Path:
    """A directory outside /tmp when one can be had: the sandbox's /tmp is its own anyway, so a service
    directory under /tmp would be hidden from a target whatever raydp did (``hide`` would go untested)."""
    for base in ("/var/tmp", None):
        try:
            return Path(tempfile.mkdtemp(prefix=prefix, dir=base))
        except OSError:
            continue
    raise RuntimeError("no temporary directory")


def env(**extra) -> dict:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "RAYDP_"))}
    e["PYTHONPATH"] = os.pathsep.join([str(SUPPORT), str(REPO)] + [p for p in e.get("PYTHONPATH", "").split(os.pathsep)
                                                                  if p])
    e.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    e.update(extra)
    return e


@dataclass
class Server:
    dir: Path
    proc: subprocess.Popen
    url: str
    token: str | None
    lines: list[str] = field(default_factory=list)
    log: Path | None = None

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def stop(self, sig=signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=15)
        _kill_group(self.proc.pid)

    def stderr(self) -> str:
        return self.log.read_text(errors="replace") if self.log is not None and self.log.exists() else ""

    def call(self, method: str, path: str, body=None, token: str | None = None, raw: bytes | None = None,
             headers: dict | None = None, timeout: float = 120) -> tuple[int, dict, dict]:
        """(status, JSON body, headers) of one request; ``token`` None: the curator's, "" none at all."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        h = {"Content-Type": "application/json"} | (headers or {})
        tok = self.token if token is None else token
        if tok:
            h["Authorization"] = f"Bearer {tok}"
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        try:
            conn.request(method, path, body=data, headers=h)
            resp = conn.getresponse()
            text = resp.read()
            return resp.status, (json.loads(text) if text else {}), dict(resp.getheaders())
        finally:
            conn.close()


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def start(directory: Path, *flags: str, extra_env: dict | None = None, timeout: float = 90) -> Server:
    """``raydp serve DIRECTORY --port 0 FLAGS``; returns once it printed its URL (it is then listening)."""
    log = directory.parent / f"{directory.name}.stderr"
    err = open(log, "ab")
    proc = subprocess.Popen([*RAYDP, "serve", str(directory), "--port", "0", *flags], stdout=subprocess.PIPE,
                            stderr=err, stdin=subprocess.DEVNULL, text=True, env=env(**(extra_env or {})),
                            cwd=str(REPO), start_new_session=True)
    err.close()
    lines, token, url = [], None, None
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
        if line.startswith("admin token "):
            token = line.split()[2]
        if line.startswith("url "):
            url = line.split()[1]
            break
    if url is None:
        _kill_group(proc.pid)
        proc.wait(timeout=15)
        raise RuntimeError(f"raydp serve did not start: {lines} {log.read_text(errors='replace')[-2000:]}")
    return Server(dir=directory, proc=proc, url=url, token=token, lines=lines, log=log)


def cli(*args: str, token: str | None = None, url: str | None = None, timeout: float = 120,
        extra_env: dict | None = None) -> subprocess.CompletedProcess:
    e = env(**(extra_env or {}))
    if token is not None:
        e["RAYDP_TOKEN"] = token
    if url is not None:
        e["RAYDP_URL"] = url
    return subprocess.run([*RAYDP, *args], capture_output=True, text=True, env=e, timeout=timeout, cwd=str(REPO))


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (through /proc/PID/task/*/children)."""
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{p}/task/{t}/children") as f:
                    kids = [int(x) for x in f.read().split()]
            except OSError:
                continue
            for k in kids:
                if k not in out:
                    out.add(k)
                    todo.append(k)
    return out


def alive(pids) -> set[int]:
    live = set()
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                    live.add(p)
        except OSError:
            pass
    return live
