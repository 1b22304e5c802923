"""A throw-away multi-node Ray cluster on this one machine, with token auth on.

Command line (``cluster/local.sh`` is a thin wrapper around it)::

    python -m raydp.local_cluster up [WORKERS]    start a head node + WORKERS (default 1) worker nodes
    python -m raydp.local_cluster status          `ray status` for our cluster + the recorded processes
    python -m raydp.local_cluster env             print `export ...` lines for a client shell (contains the token)
    python -m raydp.local_cluster kill-worker I   SIGKILL worker node I (1-based) -- fault injection
    python -m raydp.local_cluster down            stop everything `up` started (idempotent)

From Python (tests)::

    with LocalCluster(workers=2, cpus_per_node=1, extra_env={"RAY_health_check_period_ms": "500"}) as c:
        subprocess.run([...], env=c.env)      # any Ray client: token, address, loopback switch set
        c.kill_worker(0)                      # SIGKILL worker node 0 (0-based here)

``LocalCluster(...)`` made directly is isolated by default: a fresh temp state dir, free ports and a
fresh token, all removed again on exit. :meth:`LocalCluster.from_env` is what the command line uses:
the state dir, ports and knobs below, read from the environment.

Processes. Every node is one ``ray start --block`` (own raylet, object store, agents), started with
``start_new_session=True``: its PID is the process group id *and* the session id of the node, and is
recorded in ``$RAYDP_CLUSTER_DIR/nodes``. ``down`` and ``kill-worker`` ``os.killpg`` that group
(SIGTERM, then SIGKILL after RAYDP_STOP_GRACE seconds; kill-worker: SIGKILL at once). A killpg alone
does not reach everything a node runs (measured with Ray 2.60): the raylet puts every task worker
(``ray::IDLE``, actors, the job supervisor) into a process group of its own -- still in the node's
session -- and a submitted job's driver runs in a session of its own (child of the job supervisor).
So the processes to stop are: those of the node's session whose command line mentions "ray" (the
check that guards against a recycled id of a cluster long gone) plus all their descendants, found in
/proc (snapshotted before the first signal: a job driver is re-parented to init once its supervisor
dies). Those outside the node's process group are signalled one by one. ``ray stop`` is deliberately
NOT used: it kills every Ray process on the machine, including e.g. a test's ``ray.init()``.

Environment (all optional; command line / :meth:`LocalCluster.from_env`):
  RAYDP_CLUSTER_DIR          state dir (default $HOME/.raydp/local-cluster)
  RAYDP_PORT                 GCS port (default 6390; not Ray's 6379, to stay clear of ray.init)
  RAYDP_DASHBOARD_PORT       dashboard / job-submission HTTP port (default 8265)
  RAYDP_CLIENT_PORT          Ray Client server port (default RAYDP_PORT+1)
  RAYDP_CPUS_PER_NODE        --num-cpus of every node (default 1)
  RAYDP_OBJECT_STORE_BYTES   --object-store-memory of every node (default 200000000)
  RAYDP_RAY_TEMP_DIR         Ray --temp-dir (default $RAYDP_CLUSTER_DIR/ray, or /tmp/raydp-ray-PORT
                             when that path is too long for Unix socket names)
  RAYDP_UP_TIMEOUT           seconds to wait for a node to start and for all to register (default 90)
  RAYDP_STOP_GRACE           seconds between SIGTERM and SIGKILL in `down` (default 3)
  RAYDP_KEEP_LOGS=1          `down` keeps the Ray temp dir (logs) instead of deleting it
  RAY_AUTH_TOKEN             use this token instead of generating/reusing $RAYDP_CLUSTER_DIR/token
  RAYDP_RAY                  the `ray` CLI to use (default: `ray` on PATH)
  RAYDP_LOOPBACK             1 (default): every node advertises and binds 127.0.0.1 (see below);
                             0: Ray's stock behaviour (advertise the primary interface address)
Any other RAY_* variables (e.g. RAY_health_check_period_ms) are passed through to the nodes.
``RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S`` defaults to 0 for the nodes: ``ray start --block`` would
otherwise drain for up to 30 s on SIGTERM; 0 gives the immediate teardown of a plain ``ray start``.

State ($RAYDP_CLUSTER_DIR, mode 0700): ``token`` (0600), ``env.sh`` (0600, `source` it: the client
variables below), ``cluster.env`` (address, ports, temp/session dir), ``nodes`` (one line per node:
``name pgid raylet_pid node_id``; the pgid is also the node's session id), ``logs/NAME.log`` (the
output of each node's ``ray start``). ``down`` keeps only the token (and, with RAYDP_KEEP_LOGS=1 or
after a failed ``up``, the logs). The Ray temp dir is deleted by ``down`` if ``up`` created it;
otherwise only this cluster's session dir in it.

Token auth (Ray >= 2.52): servers and clients read RAY_AUTH_MODE=token and the token from
RAY_AUTH_TOKEN, else the file named by RAY_AUTH_TOKEN_PATH, else ~/.ray/auth_token.
A client needs BOTH RAY_AUTH_MODE=token and the token: with the token alone it sends nothing.

Addresses (RAYDP_LOOPBACK=1, the default): see :mod:`raydp.engine.loopback`. With
RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 GCS, raylets, object managers and agents bind and advertise
127.0.0.1 only. `ray start --address` (a worker node) refuses to run with that setting, so worker
nodes are started through :func:`_ray_start_worker`, which passes that one guard and pins the node
IP in its own process; their child processes still see the variable = 0.
CLIENTS MUST ALSO SET RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 (env.sh / `env` do): without it
ray.init(address="127.0.0.1:PORT") and `ray status` rewrite the address to the primary interface,
where nothing listens, and hang (~2 min) before failing. `ray job submit` (HTTP) does not care.

Imports: the standard library; ``ray`` only inside the helper subcommands; and
:mod:`raydp.engine.loopback` only where the loopback switch is needed (lazily, so that the node
helper processes, started as ``python <this file>``, stay as small as a plain ``ray start``).
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__" and not __package__:  # pragma: no cover - exercised by the node helpers
    # Started by path (`python .../raydp/local_cluster.py`, how the node helper processes run):
    # Python put raydp/ itself first on sys.path, where its modules would shadow top-level names.
    # Put the directory that holds the raydp package there instead.
    _here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or os.curdir) == _here:
        sys.path[0] = os.path.dirname(_here)

import contextlib
import fnmatch
import json
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ClusterError", "LocalCluster", "Node", "UsageError", "main", "session_pids"]

DEFAULT_STATE_DIR = os.path.join("~", ".raydp", "local-cluster")
DEFAULT_PORT = 6390
DEFAULT_DASHBOARD_PORT = 8265
DEFAULT_CPUS_PER_NODE = 1
DEFAULT_OBJECT_STORE_BYTES = 200_000_000
DEFAULT_UP_TIMEOUT = 90.0
DEFAULT_STOP_GRACE = 3.0

# Ray's default worker port range (raylets pick worker ports there): free ports picked for an
# isolated cluster stay out of it.
_RAY_WORKER_PORTS = range(10002, 20000)
# Unix socket paths are limited to 107 bytes; Ray adds
# "/session_YYYY-MM-DD_HH-MM-SS_UUUUUU_PID/sockets/plasma_store.N" (~65 bytes) to the temp dir.
_MAX_TEMP_DIR_LEN = 40
_READY = b"Ray runtime started"  # what `ray start` prints once its node is up
_THIS_FILE = os.path.abspath(__file__)

USAGE = """\
{prog} up [WORKERS]     start a head node + WORKERS (default 1) worker nodes
{prog} status           `ray status` for our cluster + the recorded processes
{prog} env              print `export ...` lines for a client shell (contains the token)
{prog} kill-worker I    SIGKILL worker node I (1-based) -- fault injection
{prog} down             stop everything `up` started (idempotent)"""


class ClusterError(RuntimeError):
    """The cluster could not be started, found or stopped (the message is one line)."""


class UsageError(ClusterError):
    """A bad command-line argument or RAYDP_* setting (exit code 2)."""


# ----------------------------------------------------------------------------- /proc


@dataclass(frozen=True)
class _Proc:
    pid: int
    ppid: int
    pgid: int
    sid: int
    state: str
    start: int  # start time (clock ticks after boot): tells a recycled PID apart
    comm: str

    @property
    def alive(self) -> bool:
        return self.state not in ("Z", "X")  # a zombie is dead, only not reaped yet


def _proc_table() -> dict[int, _Proc]:
    """Every process of the machine, from /proc/<pid>/stat."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:  # gone meanwhile
            continue
        # pid (comm) state ppid pgrp session ... starttime (field 22); comm may hold spaces/parens
        left, right = stat.index("("), stat.rindex(")")
        rest = stat[right + 2:].split()
        out[int(name)] = _Proc(int(name), int(rest[1]), int(rest[2]), int(rest[3]), rest[0],
                               int(rest[19]), stat[left + 1:right])
    return out


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def _cluster_procs(sids: Collection[int], table: Mapping[int, _Proc]) -> dict[int, _Proc]:
    """Live processes of the sessions ``sids`` whose command line mentions "ray", plus all their
    live descendants (job drivers run in sessions of their own)."""
    found = {p.pid: p for p in table.values()
             if p.sid in sids and p.alive and b"ray" in _cmdline(p.pid).lower()}
    children: dict[int, list[_Proc]] = {}
    for p in table.values():
        children.setdefault(p.ppid, []).append(p)
    todo = list(found)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child.alive and child.pid not in found:
                found[child.pid] = child
                todo.append(child.pid)
    return found


def session_pids(sids: Iterable[int], *, descendants: bool = False) -> list[int]:
    """Live PIDs whose session id is in ``sids``; with ``descendants``, only those whose command line
    mentions "ray", plus all their descendants (what :meth:`LocalCluster.down` stops)."""
    sids = set(sids)
    table = _proc_table()
    if descendants:
        return sorted(_cluster_procs(sids, table))
    return sorted(p.pid for p in table.values() if p.sid in sids and p.alive)


def _port_in_use(port: int, host: str) -> bool:
    """True if something accepts TCP connections on host:port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(2.0)
        return s.connect_ex((host, port)) == 0


def _free_ports(n: int, host: str) -> list[int]:
    """n distinct currently free TCP ports on host, outside Ray's worker port range."""
    ports: list[int] = []
    socks = []
    try:
        while len(ports) < n:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(s)  # stays bound until all are chosen, so they are distinct
            s.bind((host, 0))
            port = s.getsockname()[1]
            if port not in _RAY_WORKER_PORTS:
                ports.append(port)
    finally:
        for s in socks:
            s.close()
    return ports


def _read_kv(path: Path) -> dict[str, str]:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {}
    return dict(line.split("=", 1) for line in lines if "=" in line)


def _write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read (umask 077 + chmod 600)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)


def _loopback():
    from raydp.engine import loopback  # the one switch; lazily: see the module docstring

    return loopback


# ----------------------------------------------------------------------------- the cluster


@dataclass(frozen=True)
class Node:
    """One line of ``$RAYDP_CLUSTER_DIR/nodes``."""

    name: str  # "head", "worker1", "worker2", ...
    pgid: int  # process group id (= session id = PID of its `ray start --block`)
    raylet_pid: int | None
    node_id: str | None  # Ray node id (hex)

    def raylet_alive(self) -> bool:
        if self.raylet_pid is None:
            return False
        # (a SIGKILLed process may linger as a zombie until its parent reaps it: empty cmdline)
        return bool(_cmdline(self.raylet_pid))


class LocalCluster:
    """A head node + ``workers`` worker nodes on this machine; a context manager (up / down).

    Every argument left as None is chosen for isolation: ``state_dir`` a fresh temp dir (deleted on
    exit unless the block failed), ports free ones, ``token`` the one in the state dir or a fresh
    random one, ``ray`` the CLI next to this Python (else the one on PATH). ``env`` (default
    os.environ) is the environment the nodes and clients start from; ``extra_env`` is added to it
    (e.g. ``RAY_health_check_period_ms``, ``PYTHONPATH`` for task workers).
    """

    def __init__(self, workers: int = 1, cpus_per_node: int = DEFAULT_CPUS_PER_NODE, *,
                 extra_env: Mapping[str, str] | None = None,
                 state_dir: str | os.PathLike | None = None,
                 port: int | None = None, dashboard_port: int | None = None,
                 client_port: int | None = None,
                 object_store_bytes: int = DEFAULT_OBJECT_STORE_BYTES,
                 ray_temp_dir: str | os.PathLike | None = None,
                 up_timeout: float = DEFAULT_UP_TIMEOUT, stop_grace: float = DEFAULT_STOP_GRACE,
                 keep_logs: bool = False, token: str | None = None, ray: str | None = None,
                 loopback: bool = True, env: Mapping[str, str] | None = None,
                 prog: str = "python -m raydp.local_cluster"):
        self.workers = workers
        self.cpus_per_node = cpus_per_node
        self._own_dir = state_dir is None
        self._state = None if state_dir is None else str(state_dir)
        self.port, self.dashboard_port, self.client_port = port, dashboard_port, client_port
        self.object_store_bytes = object_store_bytes
        self.ray_temp_dir = None if ray_temp_dir is None else str(ray_temp_dir)
        self.up_timeout, self.stop_grace, self.keep_logs = up_timeout, stop_grace, keep_logs
        self._token = token
        self._ray = ray
        self.loopback = loopback
        base = dict(os.environ if env is None else env)
        for k in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS", "RAY_AUTH_TOKEN_PATH"):
            base.pop(k, None)  # never join some other cluster, never read another token
        base.update(extra_env or {})
        self._base_env = base
        self.prog = prog
        self._tag = os.path.basename(prog.split()[-1]) if prog.split() else "local_cluster"
        self._popens: dict[int, subprocess.Popen] = {}  # pgid -> `ray start --block` we started
        self._started: set[int] = set()  # every pgid this object started (for processes())

    # ------------------------------------------------------------------ configuration

    @classmethod
    def from_env(cls, workers: int = 1, env: Mapping[str, str] | None = None, *,
                 prog: str = "python -m raydp.local_cluster") -> LocalCluster:
        """The cluster the command line manages: state dir, ports and knobs from RAYDP_* (see the
        module docstring), the token from RAY_AUTH_TOKEN if set, `ray` from RAYDP_RAY or PATH."""
        env = dict(os.environ if env is None else env)

        def num(name, default, kind=int):
            raw = env.get(name, "")
            if raw == "":
                return default
            try:
                value = kind(raw)
            except ValueError:
                raise UsageError(f"{name} must be a number, got {raw!r}") from None
            if value < 0:
                raise UsageError(f"{name} must not be negative, got {raw!r}")
            return value

        home = env.get("HOME") or os.path.expanduser("~")
        state = env.get("RAYDP_CLUSTER_DIR") or os.path.join(home, ".raydp", "local-cluster")
        port = num("RAYDP_PORT", DEFAULT_PORT)
        ray = env.get("RAYDP_RAY") or shutil.which("ray", path=env.get("PATH", os.defpath)) or ""
        return cls(workers, num("RAYDP_CPUS_PER_NODE", DEFAULT_CPUS_PER_NODE), state_dir=state,
                   port=port, dashboard_port=num("RAYDP_DASHBOARD_PORT", DEFAULT_DASHBOARD_PORT),
                   client_port=num("RAYDP_CLIENT_PORT", port + 1),
                   object_store_bytes=num("RAYDP_OBJECT_STORE_BYTES", DEFAULT_OBJECT_STORE_BYTES),
                   ray_temp_dir=env.get("RAYDP_RAY_TEMP_DIR") or None,
                   up_timeout=num("RAYDP_UP_TIMEOUT", DEFAULT_UP_TIMEOUT, float),
                   stop_grace=num("RAYDP_STOP_GRACE", DEFAULT_STOP_GRACE, float),
                   keep_logs=env.get("RAYDP_KEEP_LOGS", "0") == "1",
                   token=env.get("RAY_AUTH_TOKEN") or None, ray=ray,
                   loopback=env.get("RAYDP_LOOPBACK", "1") == "1", env=env, prog=prog)

    @property
    def state_dir(self) -> Path:
        if self._state is None:  # isolated: a fresh, short temp dir (Unix socket path limit)
            self._state = tempfile.mkdtemp(prefix="raydp-")
        return Path(self._state)

    @property
    def _recorded(self) -> dict[str, str]:
        return _read_kv(self.state_dir / "cluster.env")

    @property
    def host(self) -> str:
        return _loopback().LOOPBACK_HOST

    @property
    def address(self) -> str:
        """GCS address "127.0.0.1:PORT" (as recorded by `up`, else as configured)."""
        return self._recorded.get("ADDRESS") or f"{self.host}:{self.port}"

    @property
    def dashboard(self) -> str:
        """Dashboard / job API "http://127.0.0.1:PORT"."""
        return self._recorded.get("DASHBOARD") or f"http://{self.host}:{self.dashboard_port}"

    @property
    def session_dir(self) -> Path | None:
        """This cluster's Ray session dir (shared by all its nodes; logs in ./logs), or None."""
        s = self._recorded.get("RAY_SESSION_DIR")
        return Path(s) if s else None

    @property
    def token(self) -> str:
        """The running cluster's token: the state dir's token file, else the configured one."""
        try:
            with open(self.state_dir / "token") as f:
                first = f.readline().rstrip("\n")
            if first:
                return first
        except OSError:
            pass
        return self._token or ""

    def _loopback_on(self) -> bool:
        rec = self._recorded.get("LOOPBACK")
        return self.loopback if rec is None else rec == "1"

    def client_vars(self) -> dict[str, str]:
        """What a node or a client process needs to talk to this cluster (auth + loopback)."""
        out = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token}
        if self._loopback_on():
            out.update(_loopback().LOOPBACK_ENV)
        return out

    @property
    def env(self) -> dict[str, str]:
        """A complete environment for a client subprocess: the base environment, the auth and
        loopback variables, RAY_ADDRESS and RAY_API_SERVER_ADDRESS (what env.sh exports)."""
        return dict(self._base_env, **self.client_vars(), RAY_ADDRESS=self.address,
                    RAY_API_SERVER_ADDRESS=self.dashboard)

    def _find_ray(self) -> tuple[str, str]:
        """(the `ray` CLI, the Python of the same installation)."""
        ray = self._ray
        if ray is None:  # Python API: the Ray of this interpreter, else PATH
            nxt = os.path.join(os.path.dirname(sys.executable), "ray")
            ray = nxt if os.access(nxt, os.X_OK) else shutil.which(
                "ray", path=self._base_env.get("PATH", os.defpath)) or ""
        if not ray or not os.path.isfile(ray) or not os.access(ray, os.X_OK):
            raise ClusterError("no 'ray' CLI found (activate the venv or set RAYDP_RAY)")
        py = os.path.join(os.path.dirname(ray), "python")
        return ray, py if os.access(py, os.X_OK) else sys.executable

    def _temp_dir(self) -> str:
        if self.ray_temp_dir:
            return self.ray_temp_dir
        d = os.path.join(str(self.state_dir), "ray")
        return f"/tmp/raydp-ray-{self.port}" if len(d) > _MAX_TEMP_DIR_LEN else d

    def _log(self, msg: str) -> None:
        print(f"{self._tag}: {msg}", file=sys.stderr, flush=True)

    # ------------------------------------------------------------------ bookkeeping

    def nodes(self) -> list[Node]:
        """The recorded nodes (head first), from ``state_dir/nodes``."""
        try:
            lines = (self.state_dir / "nodes").read_text().splitlines()
        except OSError:
            return []
        out = []
        for line in lines:
            f = line.split()
            if len(f) == 4:
                out.append(Node(f[0], int(f[1]), None if f[2] == "-" else int(f[2]),
                                None if f[3] == "-" else f[3]))
        return out

    def _pgids(self) -> set[int]:
        return {n.pgid for n in self.nodes()}

    def processes(self) -> list[int]:
        """Live PIDs of this cluster (every node this object started or the state dir records,
        and their descendants): what `down` stops."""
        return sorted(_cluster_procs(self._pgids() | self._started, _proc_table()))

    def _reap(self) -> None:
        for p in self._popens.values():
            p.poll()

    def _stop(self, pgids: Collection[int], grace: float) -> list[int]:
        """Stop the nodes ``pgids``: killpg + the rest of their processes (see the module
        docstring); SIGTERM, then SIGKILL after ``grace`` seconds (0: SIGKILL at once). Returns
        once they are gone (or, with a warning, the PIDs still alive 5 s after SIGKILL)."""
        sids = set(pgids)
        seen: dict[int, int] = {}  # pid -> start time: everything found to be ours so far

        def alive() -> list[_Proc]:
            table = _proc_table()
            for p in _cluster_procs(sids, table).values():
                seen[p.pid] = p.start
            return [table[pid] for pid, start in seen.items()
                    if pid in table and table[pid].start == start and table[pid].alive]

        def send(sig: int, procs: list[_Proc]) -> None:
            for pgid in sids & {p.pgid for p in procs}:  # only groups with a verified live member
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, sig)
            for p in procs:
                if p.pgid not in sids:  # task workers' own groups, job drivers' sessions
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(p.pid, sig)

        procs = alive()
        if not procs:
            return []
        if grace > 0:
            send(signal.SIGTERM, procs)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline:
                time.sleep(0.2)
                self._reap()
                if not alive():
                    return []
        for _ in range(50):
            procs = alive()
            if not procs:
                return []
            send(signal.SIGKILL, procs)
            time.sleep(0.1)
            self._reap()
        left = [p.pid for p in alive()]
        if left:
            self._log(f"warning: still alive after SIGKILL: {' '.join(map(str, sorted(left)))}")
        return left

    # ------------------------------------------------------------------ up

    def _load_token(self) -> str:
        """Precedence: the configured token (RAY_AUTH_TOKEN) > the state dir's token > a new one."""
        path = self.state_dir / "token"
        if self._token:
            token = self._token
            _write_private(path, token + "\n")
        else:
            token = ""
            if path.exists() and path.stat().st_size > 0:
                token = path.read_text().split("\n", 1)[0]
            if not token:
                token = secrets.token_hex(32)
                _write_private(path, token + "\n")
        os.chmod(path, 0o600)
        return token

    def _node_env(self) -> dict[str, str]:
        env = dict(self._base_env, **self.client_vars(), RAY_USAGE_STATS_ENABLED="0")
        env.setdefault("RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S", "0")  # see the module docstring
        return env

    def _write_env_files(self, tmp: str, tmp_ours: bool) -> None:
        loop = "\n".join(f"export {k}={v}" for k, v in _loopback().LOOPBACK_ENV.items())
        _write_private(self.state_dir / "env.sh", (
            "# source this file to talk to the local raydp Ray cluster (contains the auth token)\n"
            "export RAY_AUTH_MODE=token\n"
            f"export RAY_AUTH_TOKEN='{self.token}'\n"
            f"export RAY_ADDRESS='{self.address}'\n"
            f"export RAY_API_SERVER_ADDRESS='{self.dashboard}'\n"
            f"{loop if self.loopback else ''}\n"))
        (self.state_dir / "cluster.env").write_text(
            f"ADDRESS={self.host}:{self.port}\n"
            f"DASHBOARD=http://{self.host}:{self.dashboard_port}\n"
            f"PORT={self.port}\n"
            f"DASHBOARD_PORT={self.dashboard_port}\n"
            f"CLIENT_PORT={self.client_port}\n"
            f"CPUS_PER_NODE={self.cpus_per_node}\n"
            f"WORKERS={self.workers}\n"
            f"RAY_TEMP_DIR={tmp}\n"
            f"RAY_TEMP_DIR_OURS={int(tmp_ours)}\n"
            f"TOKEN_FILE={self.state_dir / 'token'}\n"
            f"LOOPBACK={int(self.loopback)}\n")

    def _record(self, name: str, pgid: int, raylet: int | None = None, node_id: str | None = None):
        path = self.state_dir / "nodes"
        line = f"{name} {pgid} {raylet or '-'} {node_id or '-'}"
        lines = [x for x in path.read_text().splitlines() if x.split()[:1] != [name]]
        path.write_text("".join(f"{x}\n" for x in [*lines, line]))

    def _start_node(self, name: str, args: Sequence[str], ray: str, py: str) -> None:
        logf = self.state_dir / "logs" / f"{name}.log"
        if self.loopback and name != "head":
            cmd = [py, _THIS_FILE, "_ray-start-worker", *args]  # see _ray_start_worker
        else:
            cmd = [ray, "start", *args]
        with open(logf, "wb") as out:
            popen = subprocess.Popen([*cmd, "--block", "--disable-usage-stats"], stdin=subprocess.DEVNULL,
                                     stdout=out, stderr=subprocess.STDOUT, env=self._node_env(),
                                     start_new_session=True)  # pid = pgid = sid of the whole node
        pgid = popen.pid
        self._popens[pgid] = popen
        self._started.add(pgid)
        self._record(name, pgid)  # recorded at once: a failed or interrupted `up` is still stoppable

        def failed(why: str) -> ClusterError:
            self._log(f"{why}; last lines of {logf}:")
            with contextlib.suppress(OSError):
                sys.stderr.write("".join(logf.read_text(errors="replace").splitlines(True)[-25:]))
            return ClusterError(f"{why} (see {logf})")

        deadline = time.monotonic() + self.up_timeout
        while _READY not in logf.read_bytes():
            if popen.poll() is not None:
                raise failed(f"'ray start' for {name} failed (exit code {popen.returncode})")
            if time.monotonic() > deadline:
                raise failed(f"'ray start' for {name} did not finish in {self.up_timeout:g}s")
            time.sleep(0.1)
        raylet = None
        for _ in range(100):
            raylet = next((p.pid for p in _proc_table().values()
                           if p.sid == pgid and p.comm == "raylet" and p.alive), None)
            if raylet is not None or popen.poll() is not None:
                break
            time.sleep(0.1)
        if raylet is None:
            self._log(f"no raylet found for {name} (see {logf})")
            raise ClusterError(f"no raylet found for {name}")
        node_id = next((a.split("=", 1)[1] for a in _cmdline(raylet).decode(errors="replace").split("\0")
                        if a.startswith("--node_id=")), None)
        self._record(name, pgid, raylet, node_id)

    def up(self) -> LocalCluster:
        """Start the head node and the worker nodes; return once all are registered in the GCS.

        Refuses (ClusterError) when a cluster recorded in the state dir still runs or a port is
        taken; removes the state of a recorded cluster that is no longer running. On failure
        everything started is stopped again, keeping the logs.
        """
        if not isinstance(self.workers, int) or self.workers < 0:
            raise UsageError(f"WORKERS must be a non-negative integer, got '{self.workers}'")
        ray, py = self._find_ray()
        state = self.state_dir
        (state / "logs").mkdir(parents=True, exist_ok=True)
        os.chmod(state, 0o700)
        if (state / "nodes").exists():
            if _cluster_procs(self._pgids(), _proc_table()):
                raise ClusterError(f"a cluster recorded in {state} is still running; "
                                   f"run '{self.prog} down' first")
            self._log("removing stale state of a cluster that is no longer running")
            self._remove_state_files()
        if self.port is None or self.dashboard_port is None or self.client_port is None:
            free = iter(_free_ports(3, self.host))
            self.port = self.port or next(free)
            self.dashboard_port = self.dashboard_port or next(free)
            self.client_port = self.client_port or next(free)
        for p in (self.port, self.dashboard_port, self.client_port):
            if _port_in_use(p, self.host):
                raise ClusterError(f"port {p} on {self.host} is already in use "
                                   "(set RAYDP_PORT / RAYDP_DASHBOARD_PORT / RAYDP_CLIENT_PORT)")
        self._token = self._load_token()
        tmp = self._temp_dir()
        tmp_ours = not os.path.exists(tmp)  # `down` deletes the whole temp dir only if we made it
        os.makedirs(tmp, exist_ok=True)
        (state / "nodes").write_text("")
        self._write_env_files(tmp, tmp_ours)

        t0 = time.monotonic()
        common = [f"--node-ip-address={self.host}", f"--num-cpus={self.cpus_per_node}", "--num-gpus=0",
                  f"--object-store-memory={self.object_store_bytes}", "--dashboard-agent-listen-port=0"]
        try:
            self._start_node("head", ["--head", f"--port={self.port}", f"--temp-dir={tmp}",
                                      f"--dashboard-host={self.host}",
                                      f"--dashboard-port={self.dashboard_port}",
                                      f"--ray-client-server-port={self.client_port}", *common], ray, py)
            # our session dir inside the temp dir (what `down` deletes when the temp dir is not ours)
            with open(state / "cluster.env", "a") as f:
                f.write(f"RAY_SESSION_DIR={os.path.realpath(os.path.join(tmp, 'session_latest'))}\n")
            for i in range(1, self.workers + 1):
                # Worker nodes on the same host share the head's temp/session dir (Ray picks
                # distinct socket names raylet.N / plasma_store.N); node-manager, object-manager,
                # agent and metrics ports are all random (0), worker ports from Ray's default range.
                self._start_node(f"worker{i}", [f"--address={self.address}", "--include-log-monitor=False",
                                                *common], ray, py)
            try:
                self.wait_for_nodes(self.workers + 1, exact=False, timeout=self.up_timeout,
                                    report=True, python=py)
            except ClusterError as e:
                self._log(f"nodes did not come up; logs in {state / 'logs'} and "
                          f"{os.path.join(tmp, 'session_latest', 'logs')}")
                raise ClusterError(f"nodes did not come up: {e}") from None
        except BaseException:
            self._down_quietly()
            raise
        self._log(f"up in {time.monotonic() - t0:.0f}s")
        return self

    def summary(self) -> str:
        """What `up` prints on the command line."""
        st, tmp = self.state_dir, self._recorded.get("RAY_TEMP_DIR", self._temp_dir())
        loop = (", plus RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 which loopback needs"
                if self._loopback_on() else "")
        return (
            f"Ray cluster up: 1 head + {self.workers} worker node(s), {self.cpus_per_node} CPU(s) each, "
            "token auth on.\n"
            f"  GCS address : {self.address}\n"
            f"  dashboard   : {self.dashboard}   (job API; every request needs "
            "'Authorization: Bearer <token>')\n"
            f"  token file  : {st}/token   (mode 0600)\n"
            f"  nodes       : {st}/nodes   (name pgid raylet_pid node_id)\n"
            f"  logs        : {tmp}/session_latest/logs\n"
            "\n"
            "Submit a job (a client needs BOTH RAY_AUTH_MODE=token and the token):\n"
            f"  RAY_AUTH_MODE=token RAY_AUTH_TOKEN=\"$(cat {st}/token)\" ray job submit --address "
            f"{self.dashboard} --working-dir . -- python jobs/svm_sensitivity.py\n"
            "or\n"
            f"  source {st}/env.sh && ray job submit --working-dir . -- python jobs/svm_sensitivity.py\n"
            f"Connect a driver (env.sh sets RAY_ADDRESS and the auth variables{loop}):\n"
            f"  source {st}/env.sh && python -c \"import ray; ray.init(); print(ray.cluster_resources())\"\n"
            f"Status / stop:     {self.prog} status  |  {self.prog} down")

    # ------------------------------------------------------------------ queries

    def wait_for_nodes(self, n: int | None = None, *, exact: bool = True, dead: Sequence[str] = (),
                       timeout: float = 60, report: bool = False, python: str | None = None) -> list[dict]:
        """Poll the GCS (from a short-lived client subprocess) until ``n`` nodes are alive (exactly,
        or at least with ``exact=False``; None: any number) and none of the node ids in ``dead`` is;
        return the alive nodes' ``NodeID``, ``NodeManagerAddress`` and ``Resources``.
        Raises ClusterError on timeout."""
        py = python or self._find_ray()[1]
        cmd = [py, _THIS_FILE, "_wait-nodes", self.address, "-" if n is None else str(n),
               "exact" if exact else "at-least", str(timeout), *dead]
        if report:
            cmd.append("--report")
        try:
            p = subprocess.run(cmd, env=dict(self._base_env, **self.client_vars()), text=True,
                               capture_output=True, timeout=timeout + 120)
        except subprocess.TimeoutExpired:
            raise ClusterError(f"the Ray client waiting for the nodes hung for {timeout + 120:g}s") from None
        if report:
            sys.stderr.write(p.stderr)
        if p.returncode != 0:
            err = p.stderr.strip().splitlines()
            raise ClusterError(err[-1] if err else f"waiting for the nodes failed (exit code {p.returncode})")
        return json.loads(p.stdout.strip().splitlines()[-1])

    def alive_nodes(self, timeout: float = 60) -> list[dict]:
        """The nodes the GCS lists as alive right now."""
        return self.wait_for_nodes(None, timeout=timeout)

    def status(self, out=None) -> int:
        """Print the recorded nodes (and whether their raylets live) and `ray status` (with the
        token) to ``out`` (default: stdout, `ray status` writing to it directly); its exit code."""
        ray, _ = self._find_ray()
        if not (self.state_dir / "nodes").exists():
            print(f"no local cluster recorded in {self.state_dir}", file=out or sys.stdout)
            return 1
        w = out or sys.stdout
        print(f"recorded nodes ({self.state_dir / 'nodes'}: name pgid raylet_pid node_id alive):", file=w)
        for nd in self.nodes():
            print(f"  {nd.name} {nd.pgid} {nd.raylet_pid or '-'} {nd.node_id or '-'} "
                  f"{'yes' if nd.raylet_alive() else 'no'}", file=w)
        print(file=w, flush=True)
        cmd = [ray, "status", "--address", self.address]
        env = dict(self._base_env, **self.client_vars())
        if out is None:
            return subprocess.run(cmd, env=env).returncode
        p = subprocess.run(cmd, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        out.write(p.stdout)
        return p.returncode

    def env_sh(self) -> str:
        """The contents of env.sh (`export` lines for a client shell, with the token)."""
        try:
            return (self.state_dir / "env.sh").read_text()
        except OSError:
            raise ClusterError(f"no local cluster recorded in {self.state_dir}") from None

    # ------------------------------------------------------------------ faults and down

    def kill_worker(self, i: int, *, wait_dead: bool = False, timeout: float = 60) -> int:
        """SIGKILL worker node ``i`` (0-based; the command line's ``kill-worker I`` is 1-based): its
        raylet, object store, agents and task workers. Returns its pgid once they are gone; with
        ``wait_dead`` also waits until the GCS has marked the node dead (health checks: ~period x
        threshold; set RAY_health_check_period_ms / RAY_health_check_failure_threshold to make that
        ~2 s instead of ~15 s)."""
        if not (self.state_dir / "nodes").exists():
            raise ClusterError(f"no local cluster recorded in {self.state_dir}")
        name = f"worker{i + 1}"
        node = next((nd for nd in self.nodes() if nd.name == name), None)
        if i < 0 or node is None:
            raise ClusterError(f"no {name} recorded in {self.state_dir / 'nodes'}")
        self._stop([node.pgid], 0)
        if wait_dead and node.node_id:
            self.wait_for_nodes(None, dead=[node.node_id], timeout=timeout)
        return node.pgid

    def _remove_state_files(self) -> None:
        st = self.state_dir
        for f in [st / "nodes", st / "cluster.env", st / "env.sh", *st.glob("*.sid")]:
            with contextlib.suppress(FileNotFoundError):
                f.unlink()

    def down(self, *, keep_logs: bool | None = None) -> str:
        """Stop every process of this cluster (never anything else); idempotent. Deletes the Ray
        temp dir if `up` created it, else only this cluster's session dir in it (unless
        ``keep_logs``, default the configured RAYDP_KEEP_LOGS), and the state files but the token.
        Returns a one-line report."""
        keep = self.keep_logs if keep_logs is None else keep_logs
        if self._state is None:
            return f"{self._tag}: no cluster started (nothing to do)"
        st = self.state_dir
        pgids = self._pgids()
        if not pgids:
            self._reap()
            return f"{self._tag}: no running cluster recorded in {st} (nothing to do)"
        t0 = time.monotonic()
        self._stop(pgids, self.stop_grace)
        rec = self._recorded
        if rec and not keep:
            tmp, session = rec.get("RAY_TEMP_DIR", ""), rec.get("RAY_SESSION_DIR", "")
            if rec.get("RAY_TEMP_DIR_OURS") == "1" and tmp and os.path.isdir(tmp):
                shutil.rmtree(tmp, ignore_errors=True)
            elif session and fnmatch.fnmatchcase(session, f"{tmp}/session_*") and os.path.isdir(session):
                shutil.rmtree(session, ignore_errors=True)
                latest = os.path.join(tmp, "session_latest")
                if os.path.islink(latest) and os.path.realpath(latest) == session:
                    os.unlink(latest)
                current = os.path.join(tmp, "ray_current_cluster")
                with contextlib.suppress(OSError):
                    with open(current) as f:
                        if any(line.rstrip("\n").endswith(f":{rec.get('PORT')}") for line in f):
                            os.unlink(current)
        self._remove_state_files()
        return (f"{self._tag}: cluster in {st} stopped in {time.monotonic() - t0:.0f}s "
                f"(token kept in {st / 'token'})")

    def _down_quietly(self) -> None:
        """After a failed `up`: stop what was started, keep the logs, say nothing."""
        with contextlib.suppress(Exception):
            saved, self._log = self._log, lambda msg: None
            try:
                self.down(keep_logs=True)
            finally:
                self._log = saved

    # ------------------------------------------------------------------ context manager

    def __enter__(self) -> LocalCluster:
        try:
            return self.up()
        except BaseException:
            if self._own_dir and self._state is not None:
                self._log(f"kept cluster state and Ray logs in {self._state}")
            raise

    def __exit__(self, exc_type, exc, tb) -> None:
        failed = exc_type is not None
        self.down(keep_logs=self.keep_logs or failed)
        if failed:
            self._log(f"kept cluster state and Ray logs in {self.state_dir}")
        elif self._own_dir:
            shutil.rmtree(self.state_dir, ignore_errors=True)


# ----------------------------------------------------------------------------- node helpers


def _ray_start_worker(args: Sequence[str]) -> int:
    """`ray start ARGS` for a worker node on loopback (run in the node's own process).

    `ray start --address` aborts when RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 ("multi-node clusters are
    not supported on Windows and OSX"), and with any other value Ray rewrites the node IP 127.0.0.1
    to the primary interface address (services.resolve_ip_for_localhost). So in this one process
    only: pass that guard (ENABLE_RAY_CLUSTER=True) and pin the node IP to 127.0.0.1. The processes
    it starts (raylet, agents, workers) still see the variable = 0 in their environment.
    """
    import ray._private.ray_constants as ray_constants
    import ray._private.services as services
    from ray.scripts.scripts import main as ray_main

    ray_constants.ENABLE_RAY_CLUSTER = True
    ips = [a.split("=", 1)[1] for a in args if a.startswith("--node-ip-address=")]
    if ips:  # what resolve_ip_for_localhost / update_if_absent get instead of the interface address
        services.get_node_ip_address = lambda address=None: ips[-1]
    sys.argv = ["ray", "start", *args]
    return ray_main()


def _wait_nodes(args: Sequence[str]) -> int:
    """`_wait-nodes ADDRESS N|- exact|at-least TIMEOUT [DEAD_NODE_ID...] [--report]`: a Ray client
    that polls ray.nodes() until the condition holds; prints the alive nodes as JSON."""
    import logging

    import ray

    report = "--report" in args
    args = [a for a in args if a != "--report"]
    address, n, mode, timeout, dead = args[0], args[1], args[2], float(args[3]), set(args[4:])
    want = None if n == "-" else int(n)
    ray.init(address=address, logging_level=logging.WARNING if report else logging.ERROR,
             log_to_driver=False)
    deadline = time.time() + timeout
    while True:
        alive = [nd for nd in ray.nodes() if nd["Alive"]]
        ids = {nd["NodeID"] for nd in alive}
        count_ok = want is None or (len(alive) == want if mode == "exact" else len(alive) >= want)
        if count_ok and not ids & dead:
            break
        if time.time() > deadline:
            if not count_ok:
                print(f"only {len(alive)}/{want} nodes alive after {timeout:.0f}s", file=sys.stderr)
            else:
                print(f"nodes {sorted(ids & dead)} still alive after {timeout:.0f}s", file=sys.stderr)
            return 1
        time.sleep(0.25 if report else 0.2)
    if report:
        print(f"{len(alive)} nodes alive; resources: {ray.cluster_resources()}", file=sys.stderr)
    print(json.dumps([{k: nd[k] for k in ("NodeID", "NodeManagerAddress", "Resources")} for nd in alive]))
    return 0


_HELPERS = {"_ray-start-worker": _ray_start_worker, "_wait-nodes": _wait_nodes}


# ----------------------------------------------------------------------------- command line


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module docstring); returns the exit code: 0 ok, 1 failed,
    2 usage error. Errors are one line on stderr. ``--prog NAME`` (first) names the program in
    messages (cluster/local.sh passes its own path)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in _HELPERS:
        return _HELPERS[args[0]](args[1:]) or 0
    prog = "python -m raydp.local_cluster"
    if len(args) >= 2 and args[0] == "--prog":
        prog, args = args[1], args[2:]
    tag = os.path.basename(prog.split()[-1])
    verb, rest = (args[0], args[1:]) if args else ("", [])
    if verb in ("-h", "--help", "help"):
        print(USAGE.format(prog=prog))
        return 0
    arity = {"up": 1, "down": 0, "status": 0, "env": 0, "kill-worker": 1}
    if verb not in arity:
        print(USAGE.format(prog=prog))
        return 2
    try:
        if len(rest) > arity[verb]:
            raise UsageError(f"too many arguments for '{verb}': {' '.join(rest)}")
        if verb == "up":
            w = rest[0] if rest else "1"
            if not w.isdigit() or not w.isascii():
                raise UsageError(f"WORKERS must be a non-negative integer, got '{w}'")
            cluster = LocalCluster.from_env(int(w), prog=prog)
            cluster.up()
            print(cluster.summary(), flush=True)
            return 0
        cluster = LocalCluster.from_env(prog=prog)
        if verb == "down":
            print(cluster.down(), flush=True)
            return 0
        if verb == "status":
            return cluster.status()
        if verb == "env":
            sys.stdout.write(cluster.env_sh())
            return 0
        i = rest[0] if rest else ""
        if not (i.isascii() and i.isdigit() and not i.startswith("0")):
            raise UsageError(f"usage: {prog} kill-worker I   (I = 1-based worker index)")
        pgid = cluster.kill_worker(int(i) - 1)
        print(f"{tag}: killed worker{i} (process group {pgid})", file=sys.stderr)
        return 0
    except UsageError as e:
        print(f"{tag}: {e}", file=sys.stderr)
        return 2
    except (ClusterError, OSError) as e:  # OSError: e.g. a state dir we may not write
        print(f"{tag}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{tag}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
