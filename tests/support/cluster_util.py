"""A real multi-node Ray cluster on this machine for tests: :class:`raydp.local_cluster.LocalCluster`
plus a few test conveniences.

    from cluster_util import local_cluster

    with local_cluster(workers=2, cpus_per_node=1) as c:
        c.submit(["python", "jobs/svm_sensitivity.py"], working_dir=REPO)   # ray job submit
        subprocess.run([...], env=c.env)      # any Ray client: token + address already set
        c.kill_worker(0)                      # SIGKILL worker node 0 (its raylet and workers)
        c.wait_for_alive_nodes(2)

Every node is its own ``ray start`` (separate raylet, object store and agents), all on 127.0.0.1,
with token authentication on and a fresh random token per cluster. Ports are picked free, the state
dir is a fresh temp dir, and the cluster is always torn down (only its own processes, never
``ray stop``) when the ``with`` block exits; on an exception the state dir and Ray logs are kept.

``netns_cluster(...)`` is the same with every node in a network namespace of its own on its own
address in 198.18.0.0/15 (root only; ``netns_skip_reason()`` says why not): drivers run through
``Cluster.client`` / ``client_popen`` (in the head's namespace), ``cut`` / ``restore`` take a node off the
network and back, ``running_task`` tells whether a node runs a task right now and ``task_rows`` where
tasks ran (Ray's state API).

``Cluster.env`` has what a client needs: ``RAY_AUTH_MODE=token`` *and* ``RAY_AUTH_TOKEN`` (the token
alone is not sent), ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (loopback), ``RAY_ADDRESS`` and
``RAY_API_SERVER_ADDRESS``; the venv's bin dir is first on PATH for nodes and clients alike.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from raydp.local_cluster import LocalCluster, Node, session_pids
from raydp.local_cluster.net import leftovers as net_leftovers, netns_unavailable
from raydp.local_cluster.procs import cluster_procs, cmdline, proc_table

from paths import CHILDREN, REPO  # noqa: E402
LOCAL_SH = REPO / "cluster" / "local.sh"


def venv_path_env(base=None) -> dict[str, str]:
    """base (default os.environ) with the bin dir of this interpreter first on PATH (so `ray` and
    `python` in a job's entrypoint are the same install)."""
    env = dict(os.environ if base is None else base)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


class Cluster(LocalCluster):
    """LocalCluster with what the tests ask of it."""

    def nodes_table(self) -> list[Node]:
        return self.nodes()

    def _worker(self, i: int) -> Node:
        if not 0 <= i < self.workers:
            raise IndexError(f"worker index {i} out of range 0..{self.workers - 1}")
        return next(n for n in self.nodes() if n.name == f"worker{i + 1}")

    @property
    def head(self) -> Node:
        return next(n for n in self.nodes() if n.name == "head")

    @property
    def worker_raylet_pids(self) -> list[int]:
        """PIDs of the worker nodes' raylets; index i is worker node i (0-based)."""
        return [self._worker(i).raylet_pid for i in range(self.workers)]

    @property
    def worker_node_ids(self) -> list[str]:
        """Ray node ids (hex) of the worker nodes; index i is worker node i (0-based)."""
        return [self._worker(i).node_id for i in range(self.workers)]

    def status_text(self) -> str:
        """What `status` prints: recorded nodes + `ray status` (with the token)."""
        buf = io.StringIO()
        self.status(buf)
        return buf.getvalue()

    def kill_worker(self, i: int, *, wait_dead: bool = False, timeout: float = 60) -> int:
        """SIGKILL worker node i (0-based); returns once its processes are gone (checked here too)."""
        rec = self._worker(i)
        pgid = super().kill_worker(i, wait_dead=wait_dead, timeout=timeout)
        if rec.raylet_alive():
            raise RuntimeError(f"raylet {rec.raylet_pid} of worker {i} survived SIGKILL")
        return pgid

    def wait_for_alive_nodes(self, n: int | None = None, *, timeout: float = 60,
                             dead: Sequence[str] = ()) -> list[dict]:
        return self.wait_for_nodes(n, dead=dead, timeout=timeout)

    def run(self, args: Sequence[str], *, timeout: float = 300, check: bool = False,
            cwd: str | os.PathLike | None = None) -> subprocess.CompletedProcess:
        """Run a command as a client of this cluster (self.env), capturing text output."""
        return subprocess.run(list(args), env=self.env, cwd=cwd, text=True, capture_output=True,
                              timeout=timeout, check=check)

    def submit(self, entrypoint: Sequence[str] | str, *, working_dir: str | os.PathLike | None = None,
               extra_args: Sequence[str] = (), timeout: float = 600,
               check: bool = False) -> subprocess.CompletedProcess:
        """`ray job submit --address <dashboard> [--working-dir D] -- ENTRYPOINT`, waiting for it.

        The return code is the job's success (0) or failure (non-zero); stdout has its logs.
        """
        if isinstance(entrypoint, str):
            entrypoint = ["bash", "-c", entrypoint]
        cmd = [str(Path(sys.executable).parent / "ray"), "job", "submit", "--address", self.dashboard]
        if working_dir is not None:
            working_dir = Path(working_dir).resolve()
            cmd += ["--working-dir", str(working_dir)]
        cmd += [*extra_args, "--", *entrypoint]
        return self.run(cmd, timeout=timeout, check=check, cwd=working_dir)

    def our_live_pids(self) -> list[int]:
        """Live processes of every node this cluster started (and their descendants)."""
        return self.processes()

    def listening_sockets(self) -> list[ListenSocket]:
        """TCP LISTEN sockets held by the live processes of this cluster's nodes."""
        return listening_sockets(self.processes())


    # ---- namespace mode (``netns_cluster``)

    def client(self, args: Sequence[str], *, timeout: float = 300, check: bool = False,
               cwd: str | os.PathLike | None = None) -> subprocess.CompletedProcess:
        """Run a command where a driver of this cluster can run (the head's namespace in namespace mode)."""
        return subprocess.run(self.client_command(list(args)), env=self.env, cwd=cwd, text=True,
                              capture_output=True, timeout=timeout, check=check)

    def client_popen(self, args: Sequence[str], **kw) -> subprocess.Popen:
        """:meth:`client` without waiting: a Popen in a session of its own (kill it with os.killpg)."""
        return subprocess.Popen(self.client_command(list(args)), env=self.env, start_new_session=True, **kw)

    def running_task(self, node: str, name: str = "_run_group") -> list[int]:
        """PIDs of node ``node``'s task workers executing a task named ``name`` right now: a Ray worker
        titles itself ``ray::NAME`` while it runs one (``ray::IDLE`` between tasks)."""
        pgid = next(n.pgid for n in self.nodes() if n.name == node)
        title = f"ray::{name}".encode()
        return sorted(pid for pid in cluster_procs({pgid}, proc_table()) if cmdline(pid).startswith(title))

    def task_rows(self, name: str = "_run_group", timeout: float = 60) -> list[dict]:
        """Every task named ``name`` Ray's state API knows of: job, state, node address, start, end
        (``tests/children/task_hosts.py``, run here with the token)."""
        p = self.run([sys.executable, str(CHILDREN / "task_hosts.py"), self.dashboard, name], timeout=timeout)
        if p.returncode != 0:
            raise RuntimeError(f"task_hosts.py failed: {p.stderr[-2000:]}")
        return json.loads(p.stdout.strip().splitlines()[-1])

    def net_leftovers(self) -> list[str]:
        """Links and namespaces of this cluster's network still there (empty after ``down``)."""
        return net_leftovers(self.fabric.net_id) if self.fabric is not None else []


def netns_skip_reason() -> str | None:
    """Why namespace-mode clusters cannot run here (not root, no ``ip netns``), or None."""
    return netns_unavailable()


def netns_cluster(workers: int = 2, cpus_per_node: int = 1, *, extra_env: dict[str, str] | None = None,
                  keep_state: bool = False, up_timeout: float = 90, **node) -> Cluster:
    """Like :func:`local_cluster`, each node in a network namespace of its own on its own address in
    198.18.0.0/15 (root only): drivers run through ``client``/``client_popen`` (the head's namespace),
    ``cut``/``restore`` take a node off the network and back."""
    return Cluster(workers, cpus_per_node, extra_env=extra_env, up_timeout=up_timeout, keep_logs=keep_state,
                   env=venv_path_env(), netns=True, **node)


def local_cluster(workers: int = 1, cpus_per_node: int = 1, *,
                  extra_env: dict[str, str] | None = None,
                  state_dir: str | os.PathLike | None = None,
                  keep_state: bool = False, up_timeout: float = 90, **node) -> Cluster:
    """An isolated cluster to use as ``with local_cluster(...) as c``: free loopback ports, a fresh
    token, a fresh temp state dir (unless ``state_dir``), the venv first on PATH.

    extra_env: passed to every node (e.g. ``RAY_health_check_period_ms``) and to clients.
    keep_state: keep the Ray logs after the block (they are always kept when it fails).
    node: ``gpus_per_node``, ``resources_per_node`` (declared to Ray, not probed).
    """
    return Cluster(workers, cpus_per_node, extra_env=extra_env, state_dir=state_dir,
                   up_timeout=up_timeout, keep_logs=keep_state, env=venv_path_env(), **node)


def live_pids_in_sessions(sids) -> list[int]:
    """Live (non-zombie) PIDs whose session id is one of ``sids``."""
    return session_pids(sids)


@dataclass(frozen=True)
class ListenSocket:
    pid: int
    comm: str  # /proc/<pid>/comm, e.g. "raylet", "gcs_server", "ray::DashboardA"
    ip: str  # as bound: "127.0.0.1", "0.0.0.0", "::", "::ffff:127.0.0.1", ...
    port: int

    @property
    def loopback_v4(self) -> bool:
        """Bound to 127.0.0.1 (also as the IPv4-mapped IPv6 address ::ffff:127.0.0.1)."""
        return self.ip in ("127.0.0.1", "::ffff:127.0.0.1")


def _proc_net_addr(hexaddr: str, v6: bool) -> tuple[str, int]:
    ip, port = hexaddr.split(":")
    raw = bytes.fromhex(ip)
    if v6:  # four host-order 32-bit words
        raw = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
        return socket.inet_ntop(socket.AF_INET6, raw), int(port, 16)
    return socket.inet_ntop(socket.AF_INET, raw[::-1]), int(port, 16)


def listening_sockets(pids) -> list[ListenSocket]:
    """Every TCP LISTEN socket (IPv4 and IPv6) that one of ``pids`` holds open, from /proc (no
    psutil needed): /proc/net/tcp{,6} rows in state 0A, matched by inode to /proc/<pid>/fd links.
    Sockets are listed once per (pid, inode)."""
    listen: dict[str, tuple[str, int]] = {}
    for name, v6 in (("tcp", False), ("tcp6", True)):
        try:
            rows = Path(f"/proc/net/{name}").read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            if len(f) > 9 and f[3] == "0A":  # TCP_LISTEN
                listen[f[9]] = _proc_net_addr(f[1], v6)
    out = []
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:  # gone, or not ours to read
            continue
        seen = set()
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:[") and link[8:-1] in listen and link not in seen:
                seen.add(link)
                ip, port = listen[link[8:-1]]
                out.append(ListenSocket(pid, comm, ip, port))
    return out


def wait_gone(pids, timeout: float = 10) -> list[int]:
    """Wait until none of ``pids`` is a live (non-zombie) process; return those still alive."""
    deadline = time.monotonic() + timeout
    while True:
        left = [p for p in pids if _alive(p)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


@contextlib.contextmanager
def _raises(kind):
    """``pytest.raises`` without pytest: the error is handed over in ``.value``."""
    class Box:
        value = None
    box = Box()
    try:
        yield box
    except kind as exc:
        box.value = exc
        return
    raise AssertionError(f"{kind.__name__} was not raised")


def check_locked_down(cluster) -> None:
    """Every listening socket of the cluster is on 127.0.0.1, and the job API refuses a request without
    the token (401) and serves one with it."""
    socks = cluster.listening_sockets()
    table = ", ".join(f"{s.comm}[{s.pid}]={s.ip}:{s.port}" for s in sorted(socks, key=lambda s: (s.comm, s.port)))
    print(f"\n[sockets] {len(socks)} listening: {table}")
    ports = {s.port for s in socks}
    gcs_port = int(cluster.address.rsplit(":", 1)[1])
    dash_port = int(cluster.dashboard.rsplit(":", 1)[1])
    assert {gcs_port, dash_port} <= ports, "the scan missed the GCS or dashboard socket"
    live_nodes = sum(r.raylet_alive() for r in cluster.nodes_table())
    assert len({s.pid for s in socks if s.comm == "raylet"}) == live_nodes >= 2  # every node scanned
    bad = [s for s in socks if not s.loopback_v4]
    assert not bad, f"listening beyond 127.0.0.1: {bad}"

    # the job API over raw HTTP (test_cluster.py checks the `ray job` CLI): no token -> 401
    with _raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"{cluster.dashboard}/api/jobs/", timeout=30)
    assert err.value.code == 401
    req = urllib.request.Request(f"{cluster.dashboard}/api/jobs/", data=b'{"entrypoint": "true"}',
                                 headers={"Content-Type": "application/json"}, method="POST")
    with _raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=30)
    assert err.value.code == 401
    ok = urllib.request.Request(f"{cluster.dashboard}/api/jobs/",
                                headers={"Authorization": f"Bearer {cluster.token}"})
    with urllib.request.urlopen(ok, timeout=30) as r:
        assert r.status == 200 and isinstance(json.loads(r.read()), list)
