"""A real multi-node Ray cluster on this machine for tests: ``cluster/local.sh`` driven from Python.

    from cluster_util import local_cluster

    with local_cluster(workers=2, cpus_per_node=1) as c:
        c.submit(["python", "jobs/svm_sensitivity.py"], working_dir=REPO)   # ray job submit
        subprocess.run([...], env=c.env)      # any Ray client: token + address already set
        c.kill_worker(0)                      # SIGKILL worker node 0 (its raylet and workers)
        c.wait_for_alive_nodes(2)

Every node is its own ``ray start`` (separate raylet, object store and agents), all on 127.0.0.1,
with token authentication on and a fresh random token per cluster. Ports are picked free, the state
dir is a fresh temp dir, and the cluster is always torn down (only its own processes: by recorded
session ids, never ``ray stop``) when the ``with`` block exits.

Talking to the cluster needs, in the client's environment: ``RAY_AUTH_MODE=token`` *and*
``RAY_AUTH_TOKEN`` (the token alone is not sent), and -- because the cluster lives on loopback --
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (otherwise Ray rewrites 127.0.0.1 to the primary interface
address for ray.init / ray status). ``LocalCluster.env`` has all three plus ``RAY_ADDRESS`` and
``RAY_API_SERVER_ADDRESS``. ``LocalCluster.connect()`` attaches the *current* process.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

REPO = Path(__file__).resolve().parents[1]
LOCAL_SH = REPO / "cluster" / "local.sh"

# Ray's default worker port range (raylets pick worker ports there); keep our fixed ports out of it.
_RAY_WORKER_PORTS = range(10002, 20000)


def _free_ports(n: int) -> list[int]:
    """n distinct currently-free TCP ports on 127.0.0.1, outside Ray's worker port range."""
    ports: list[int] = []
    socks = []
    try:
        while len(ports) < n:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
            socks.append(s)  # keep it bound until all are chosen, so they are distinct
            if port not in _RAY_WORKER_PORTS and port not in ports:
                ports.append(port)
    finally:
        for s in socks:
            s.close()
    return ports


def _venv_path_env(base: dict[str, str]) -> dict[str, str]:
    """base with the bin dir of this interpreter first on PATH (so `ray` is the same install)."""
    env = dict(base)
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    return env


@dataclass
class NodeRecord:
    name: str  # "head", "worker1", "worker2", ...
    sid: int  # session id shared by all processes of this node
    raylet_pid: int | None
    node_id: str | None  # Ray node id (hex)

    def raylet_alive(self) -> bool:
        if self.raylet_pid is None:
            return False
        try:  # a SIGKILLed raylet may linger as a zombie (empty cmdline) until init reaps it
            return bool(Path(f"/proc/{self.raylet_pid}/cmdline").read_bytes())
        except OSError:
            return False


@dataclass
class LocalCluster:
    state_dir: Path
    address: str  # GCS "127.0.0.1:PORT"
    dashboard: str  # "http://127.0.0.1:PORT" (job submission / state API)
    token: str
    env: dict[str, str]  # os.environ + PATH + everything a Ray client needs for this cluster
    workers: int
    cpus_per_node: int
    script_env: dict[str, str] = field(repr=False)  # environment for cluster/local.sh

    # ------------------------------------------------------------------ bookkeeping

    def nodes_table(self) -> list[NodeRecord]:
        """The nodes local.sh started (from <state_dir>/nodes), head first."""
        out = []
        path = self.state_dir / "nodes"
        if not path.exists():
            return out
        for line in path.read_text().splitlines():
            name, sid, raylet, node_id = line.split()
            out.append(NodeRecord(name, int(sid), None if raylet == "-" else int(raylet),
                                  None if node_id == "-" else node_id))
        return out

    def _worker(self, i: int) -> NodeRecord:
        if not 0 <= i < self.workers:
            raise IndexError(f"worker index {i} out of range 0..{self.workers - 1}")
        name = f"worker{i + 1}"
        for rec in self.nodes_table():
            if rec.name == name:
                return rec
        raise LookupError(f"{name} not recorded in {self.state_dir / 'nodes'}")

    @property
    def head(self) -> NodeRecord:
        return next(r for r in self.nodes_table() if r.name == "head")

    @property
    def worker_raylet_pids(self) -> list[int]:
        """PIDs of the worker nodes' raylets; index i is worker node i (0-based)."""
        return [self._worker(i).raylet_pid for i in range(self.workers)]

    @property
    def worker_node_ids(self) -> list[str]:
        """Ray node ids (hex) of the worker nodes; index i is worker node i (0-based)."""
        return [self._worker(i).node_id for i in range(self.workers)]

    # ------------------------------------------------------------------ actions

    def local_sh(self, *args: str, timeout: float = 180, check: bool = True):
        return subprocess.run(["bash", str(LOCAL_SH), *args], env=self.script_env, text=True,
                              capture_output=True, timeout=timeout, check=check)

    def status(self) -> str:
        """`cluster/local.sh status`: recorded nodes + `ray status` (with the token)."""
        return self.local_sh("status", timeout=60).stdout

    def kill_worker(self, i: int, *, wait_dead: bool = False, timeout: float = 60) -> None:
        """SIGKILL worker node i (0-based): its raylet, object store, agents and task workers.

        Returns once those processes are gone. With ``wait_dead`` also waits until the GCS has
        marked the node dead (health checks: ~period x threshold; pass
        ``extra_env={"RAY_health_check_period_ms": "500", "RAY_health_check_failure_threshold":
        "3"}`` to ``local_cluster`` to make that ~2 s instead of ~15 s).
        """
        rec = self._worker(i)
        self.local_sh("kill-worker", str(i + 1), timeout=60)
        deadline = time.monotonic() + 10
        while rec.raylet_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if rec.raylet_alive():
            raise RuntimeError(f"raylet {rec.raylet_pid} of worker {i} survived SIGKILL")
        if wait_dead:
            self.wait_for_alive_nodes(None, timeout=timeout, dead=[rec.node_id])

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
        return self.run(cmd, timeout=timeout, check=check,
                        cwd=working_dir if working_dir is not None else None)

    def alive_nodes(self, timeout: float = 60) -> list[dict]:
        """ray.nodes() entries with Alive=True, read by a short-lived client subprocess."""
        code = textwrap.dedent("""
            import json, logging, sys, ray
            ray.init(address=sys.argv[1], logging_level=logging.ERROR, log_to_driver=False)
            print(json.dumps([{k: n[k] for k in ("NodeID", "NodeManagerAddress", "Resources")}
                              for n in ray.nodes() if n["Alive"]]))
        """)
        p = self.run([sys.executable, "-c", code, self.address], timeout=timeout)
        if p.returncode != 0:
            raise RuntimeError(f"ray.nodes() failed:\n{p.stderr[-3000:]}")
        return json.loads(p.stdout.strip().splitlines()[-1])

    def wait_for_alive_nodes(self, n: int | None = None, *, timeout: float = 60,
                             dead: Sequence[str] = ()) -> list[dict]:
        """Poll (in one client subprocess) until exactly n nodes are alive and/or the node ids in
        ``dead`` are no longer alive; returns the alive nodes."""
        code = textwrap.dedent("""
            import json, logging, sys, time, ray
            address, n, dead, timeout = sys.argv[1], json.loads(sys.argv[2]), set(json.loads(sys.argv[3])), float(sys.argv[4])
            ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
            deadline = time.time() + timeout
            while True:
                alive = [n_ for n_ in ray.nodes() if n_["Alive"]]
                ids = {a["NodeID"] for a in alive}
                if (n is None or len(alive) == n) and not (ids & dead):
                    break
                if time.time() > deadline:
                    sys.exit(f"timeout: {len(alive)} alive, still alive from dead={sorted(ids & dead)}")
                time.sleep(0.2)
            print(json.dumps([{k: a[k] for k in ("NodeID", "NodeManagerAddress")} for a in alive]))
        """)
        p = self.run([sys.executable, "-c", code, self.address, json.dumps(n),
                      json.dumps(list(dead)), str(timeout)], timeout=timeout + 60)
        if p.returncode != 0:
            raise TimeoutError(f"nodes did not reach the expected state:\n{p.stderr[-3000:]}")
        return json.loads(p.stdout.strip().splitlines()[-1])

    @contextlib.contextmanager
    def connect(self, **init_kwargs) -> Iterator[None]:
        """ray.init() the current process as a driver of this cluster; ray.shutdown() on exit.

        Sets the auth/loopback variables in os.environ for the duration (restored afterwards) and
        resets Ray's cached token, so this works even after an earlier local ``ray.init()`` in the
        same process (whose token would otherwise stay cached).
        """
        import ray
        from ray._private import ray_constants
        from ray._raylet import AuthenticationTokenLoader, Config

        keys = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")
        saved_env = {k: os.environ.get(k) for k in keys}
        saved_flag = ray_constants.ENABLE_RAY_CLUSTER
        os.environ.update({k: self.env[k] for k in keys})
        ray_constants.ENABLE_RAY_CLUSTER = False  # what RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 means
        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()
        try:
            init_kwargs.setdefault("log_to_driver", False)
            ray.init(address=self.address, **init_kwargs)
            yield
        finally:
            ray.shutdown()
            for k, v in saved_env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            ray_constants.ENABLE_RAY_CLUSTER = saved_flag
            Config.initialize("")
            AuthenticationTokenLoader.instance().reset_cache()

    def down(self) -> subprocess.CompletedProcess:
        return self.local_sh("down", timeout=120, check=False)

    def our_live_pids(self) -> list[int]:
        """Live (non-zombie) processes still in any of the sessions of the nodes started by up."""
        return _live_pids_in_sessions(set(self._sids_seen))

    _sids_seen: tuple[int, ...] = ()  # session ids of all nodes, recorded right after `up`

    @property
    def session_dir(self) -> Path | None:
        """The Ray session dir of this cluster (head and worker nodes share it; logs in ./logs),
        from RAY_SESSION_DIR in <state_dir>/cluster.env; None if not recorded."""
        env_file = self.state_dir / "cluster.env"
        if not env_file.exists():
            return None
        for line in env_file.read_text().splitlines():
            if line.startswith("RAY_SESSION_DIR="):
                return Path(line.split("=", 1)[1])
        return None

    def listening_sockets(self) -> list[ListenSocket]:
        """TCP LISTEN sockets held by the live processes of this cluster's nodes."""
        return listening_sockets(self.our_live_pids())


def live_pids_in_sessions(sids) -> list[int]:
    """Live (non-zombie) PIDs whose session id is one of ``sids``."""
    return _live_pids_in_sessions(set(sids))


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


def _live_pids_in_sessions(sids: set[int]) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp session ...; comm may contain spaces/parens
        rest = stat[stat.rindex(")") + 2:].split()
        state, session = rest[0], int(rest[3])
        if session in sids and state not in ("Z", "X"):
            out.append(int(d.name))
    return out


@contextlib.contextmanager
def local_cluster(workers: int = 1, cpus_per_node: int = 1, *,
                  extra_env: dict[str, str] | None = None,
                  state_dir: str | os.PathLike | None = None,
                  keep_state: bool = False, up_timeout: float = 90) -> Iterator[LocalCluster]:
    """Start ``cluster/local.sh up WORKERS`` on free loopback ports; yield a LocalCluster; down it.

    extra_env: passed to every node (e.g. ``RAY_health_check_period_ms``) and to clients.
    state_dir: default a fresh short temp dir (Unix socket paths must stay < 108 bytes).
    On an exception in the block the state dir and Ray logs are kept and their path is printed.
    """
    own_dir = state_dir is None
    sdir = Path(tempfile.mkdtemp(prefix="raydp-")) if own_dir else Path(state_dir)
    gcs, dash, client = _free_ports(3)
    token = secrets.token_hex(32)
    base = _venv_path_env(os.environ)
    for k in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS", "RAY_AUTH_TOKEN_PATH"):
        base.pop(k, None)
    base.update(extra_env or {})
    script_env = dict(base, RAYDP_CLUSTER_DIR=str(sdir), RAYDP_PORT=str(gcs),
                      RAYDP_DASHBOARD_PORT=str(dash), RAYDP_CLIENT_PORT=str(client),
                      RAYDP_CPUS_PER_NODE=str(cpus_per_node), RAYDP_UP_TIMEOUT=str(up_timeout),
                      RAY_AUTH_TOKEN=token, RAYDP_LOOPBACK="1")
    client_env = dict(base, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token,
                      RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_ADDRESS=f"127.0.0.1:{gcs}",
                      RAY_API_SERVER_ADDRESS=f"http://127.0.0.1:{dash}")
    cluster = LocalCluster(state_dir=sdir, address=f"127.0.0.1:{gcs}",
                           dashboard=f"http://127.0.0.1:{dash}", token=token, env=client_env,
                           workers=workers, cpus_per_node=cpus_per_node, script_env=script_env)
    failed = False
    try:
        p = cluster.local_sh("up", str(workers), timeout=up_timeout + 120, check=False)
        if p.returncode != 0:
            logs = "".join(f"\n--- {f.name}\n{f.read_text()[-2000:]}"
                           for f in sorted((sdir / "logs").glob("*.log")))
            raise RuntimeError(f"cluster/local.sh up {workers} failed (rc={p.returncode})\n"
                               f"{p.stdout}\n{p.stderr}{logs}")
        cluster._sids_seen = tuple(r.sid for r in cluster.nodes_table())
        yield cluster
    except BaseException:
        failed = True
        raise
    finally:
        keep = keep_state or failed
        if keep:
            cluster.script_env["RAYDP_KEEP_LOGS"] = "1"
        d = cluster.down()
        leftover = _live_pids_in_sessions(set(cluster._sids_seen))
        if leftover:  # should not happen; do not leave processes behind whatever the cause
            for pid in leftover:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        if keep:
            print(f"[cluster_util] kept cluster state and Ray logs in {sdir} "
                  f"(down: rc={d.returncode} {d.stdout.strip()} {d.stderr.strip()})", file=sys.stderr)
        elif own_dir:
            shutil.rmtree(sdir, ignore_errors=True)
