"""The cluster: :class:`LocalCluster`, a head node and worker nodes on this machine, with token auth.

``LocalCluster(...)`` made directly is isolated by default: a fresh temp state dir, free ports and a
fresh token, all removed again on exit. :meth:`LocalCluster.from_env` is what the command line uses:
the state dir, ports and knobs from RAYDP_* variables (see :mod:`raydp.local_cluster`).

``LocalCluster(netns=True)`` puts every node in a network namespace of its own
(:class:`~raydp.local_cluster.net.Fabric`); drivers then run in the head's namespace
(:meth:`LocalCluster.client_command`) and :meth:`LocalCluster.cut` / :meth:`LocalCluster.restore`
take a node off the network and back.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

from ..engine.loopback import LOOPBACK_ENV, LOOPBACK_HOST
from . import helpers
from .net import (MAX_NODES, Fabric, NetError, free_ports, netns_unavailable, new_net_id, port_in_use,
                  remove as remove_net)
from .procs import cluster_procs, cmdline, proc_table, stop_sessions
from .state import Node, StateDir

__all__ = ["LocalCluster", "ClusterError", "UsageError"]

DEFAULT_PORT = 6390
DEFAULT_DASHBOARD_PORT = 8265
DEFAULT_CPUS_PER_NODE = 1
DEFAULT_OBJECT_STORE_BYTES = 200_000_000
DEFAULT_UP_TIMEOUT = 90.0
DEFAULT_STOP_GRACE = 3.0
# Namespace mode: every node has a network of its own, so Ray's own default ports are free
NETNS_PORT, NETNS_DASHBOARD_PORT, NETNS_CLIENT_PORT = 6379, 8265, 10001

# Unix socket paths are limited to 107 bytes; Ray adds
# "/session_YYYY-MM-DD_HH-MM-SS_UUUUUU_PID/sockets/plasma_store.N" (~65 bytes) to the temp dir.
_MAX_TEMP_DIR_LEN = 40
_READY = b"Ray runtime started"  # what `ray start` prints once its node is up


class ClusterError(RuntimeError):
    """The cluster could not be started, found or stopped (the message is one line)."""


class UsageError(ClusterError):
    """A bad command-line argument or RAYDP_* setting (exit code 2)."""


class LocalCluster:
    """A head node + ``workers`` worker nodes on this machine; a context manager (up / down).

    Every argument left as None is chosen for isolation: ``state_dir`` a fresh temp dir (deleted on
    exit unless the block failed), ports free ones, ``token`` the one in the state dir or a fresh
    random one, ``ray`` the CLI next to this Python (else the one on PATH). ``env`` (default
    os.environ) is the environment the nodes and clients start from; ``extra_env`` is added to it
    (e.g. ``RAY_health_check_period_ms``, ``PYTHONPATH`` for task workers).

    ``netns=True``: each node in a network namespace of its own on its own address in 198.18.0.0/15
    (root only; ports default to Ray's own, 6379 / 8265 / 10001, as every node has a network of its own).
    """

    def __init__(self, workers: int = 1, cpus_per_node: int = DEFAULT_CPUS_PER_NODE, *,
                 gpus_per_node: int = 0, resources_per_node: Mapping[str, float] | None = None,
                 extra_env: Mapping[str, str] | None = None,
                 state_dir: str | os.PathLike | None = None,
                 port: int | None = None, dashboard_port: int | None = None,
                 client_port: int | None = None,
                 object_store_bytes: int = DEFAULT_OBJECT_STORE_BYTES,
                 ray_temp_dir: str | os.PathLike | None = None,
                 up_timeout: float = DEFAULT_UP_TIMEOUT, stop_grace: float = DEFAULT_STOP_GRACE,
                 keep_logs: bool = False, token: str | None = None, ray: str | None = None,
                 loopback: bool = True, netns: bool = False, env: Mapping[str, str] | None = None,
                 prog: str = "python -m raydp.local_cluster"):
        self.workers = workers
        self.cpus_per_node = cpus_per_node
        self.gpus_per_node = gpus_per_node  # declared, not probed: a test node may "have" GPUs it does not
        self.resources_per_node = dict(resources_per_node or {})
        self._own_dir = state_dir is None
        self._state = None if state_dir is None else str(state_dir)
        self.port, self.dashboard_port, self.client_port = port, dashboard_port, client_port
        self.object_store_bytes = object_store_bytes
        self.ray_temp_dir = None if ray_temp_dir is None else str(ray_temp_dir)
        self.up_timeout, self.stop_grace, self.keep_logs = up_timeout, stop_grace, keep_logs
        self._token = token
        self._ray = ray
        self.loopback = loopback and not netns
        self.netns = netns
        self._fabric: Fabric | None = None
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
                 prog: str = "python -m raydp.local_cluster", netns: bool = False) -> LocalCluster:
        """The cluster the command line manages: state dir, ports and knobs from RAYDP_* (see the
        module docstring), the token from RAY_AUTH_TOKEN if set, `ray` from RAYDP_RAY or PATH.
        ``netns``: what ``up --netns`` starts (the other commands read the mode from the state dir)."""
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
        port = num("RAYDP_PORT", NETNS_PORT if netns else DEFAULT_PORT)
        ray = env.get("RAYDP_RAY") or shutil.which("ray", path=env.get("PATH", os.defpath)) or ""
        return cls(workers, num("RAYDP_CPUS_PER_NODE", DEFAULT_CPUS_PER_NODE), state_dir=state,
                   port=port, dashboard_port=num("RAYDP_DASHBOARD_PORT", DEFAULT_DASHBOARD_PORT),
                   client_port=num("RAYDP_CLIENT_PORT", NETNS_CLIENT_PORT if netns else port + 1),
                   object_store_bytes=num("RAYDP_OBJECT_STORE_BYTES", DEFAULT_OBJECT_STORE_BYTES),
                   ray_temp_dir=env.get("RAYDP_RAY_TEMP_DIR") or None,
                   up_timeout=num("RAYDP_UP_TIMEOUT", DEFAULT_UP_TIMEOUT, float),
                   stop_grace=num("RAYDP_STOP_GRACE", DEFAULT_STOP_GRACE, float),
                   keep_logs=env.get("RAYDP_KEEP_LOGS", "0") == "1",
                   token=env.get("RAY_AUTH_TOKEN") or None, ray=ray,
                   loopback=env.get("RAYDP_LOOPBACK", "1") == "1", netns=netns, env=env, prog=prog)

    @property
    def state_dir(self) -> Path:
        if self._state is None:  # isolated: a fresh, short temp dir (Unix socket path limit)
            self._state = tempfile.mkdtemp(prefix="raydp-")
        return Path(self._state)

    @property
    def _recorded(self) -> dict[str, str]:
        return self._files.recorded()

    @property
    def host(self) -> str:
        """The head's address: 127.0.0.1, or in namespace mode 198.18.S.1."""
        fabric = self.fabric
        return fabric.ip(0) if fabric is not None else LOOPBACK_HOST

    @property
    def fabric(self) -> Fabric | None:
        """The namespace network (None in loopback mode, or before `up` has chosen its address)."""
        if self._fabric is None:
            rec = self._files.net() if self._state is not None else None
            if rec is not None and rec[1] is not None:
                self._fabric = Fabric(*rec)
        return self._fabric

    def netns_on(self) -> bool:
        """Whether this cluster's nodes are in network namespaces (as recorded by `up`, else as configured)."""
        if self._state is not None and self._files.net() is not None:
            return True
        rec = self._recorded.get("NETNS") if self._state is not None else None
        return self.netns if rec is None else rec == "1"

    @property
    def address(self) -> str:
        """GCS address "HOST:PORT" (as recorded by `up`, else as configured)."""
        return self._recorded.get("ADDRESS") or f"{self.host}:{self.port}"

    @property
    def dashboard(self) -> str:
        """Dashboard / job API "http://HOST:PORT"."""
        return self._recorded.get("DASHBOARD") or f"http://{self.host}:{self.dashboard_port}"

    @property
    def session_dir(self) -> Path | None:
        """This cluster's Ray session dir (shared by all its nodes; logs in ./logs), or None."""
        s = self._recorded.get("RAY_SESSION_DIR")
        return Path(s) if s else None

    @property
    def token(self) -> str:
        """The running cluster's token: the state dir's token file, else the configured one."""
        return self._files.token() or self._token or ""

    @property
    def _files(self) -> StateDir:
        return StateDir(self.state_dir)

    def _loopback_on(self) -> bool:
        rec = self._recorded.get("LOOPBACK")
        return self.loopback if rec is None else rec == "1"

    def _base(self) -> dict[str, str]:
        """The base environment; in namespace mode without the loopback switch, which would pin
        every node and driver to 127.0.0.1."""
        if not self.netns_on():
            return dict(self._base_env)
        return {k: v for k, v in self._base_env.items() if k not in LOOPBACK_ENV}

    def client_vars(self) -> dict[str, str]:
        """What a node or a client process needs to talk to this cluster (auth + loopback)."""
        out = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token}
        if self._loopback_on():
            out.update(LOOPBACK_ENV)
        return out

    @property
    def env(self) -> dict[str, str]:
        """A complete environment for a client subprocess: the base environment, the auth and
        loopback variables, RAY_ADDRESS and RAY_API_SERVER_ADDRESS (what env.sh exports)."""
        return dict(self._base(), **self.client_vars(), RAY_ADDRESS=self.address,
                    RAY_API_SERVER_ADDRESS=self.dashboard)

    def client_command(self, args: Sequence[str]) -> list[str]:
        """``args`` as a command that can be a driver of this cluster: unchanged on loopback; in
        namespace mode run in the head's network namespace (``ip netns exec``).

        Why there: a driver attaches to a raylet of the machine it runs on (Ray finds one among the
        local processes) and takes that node's address as its own; the tasks' workers call it back
        there (to fetch what it put in the object store, to report results). In the root namespace
        that address is not its own: tasks that need nothing from the driver succeed, the others hang.
        In the head's namespace the address is its own, as for a driver on a cluster's head machine.
        """
        if not self.netns_on():
            return list(args)
        fabric = self.fabric
        if fabric is None:
            raise ClusterError(f"no namespace cluster recorded in {self.state_dir}")
        return ["ip", "netns", "exec", fabric.netns("head"), *args]

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
        if self.netns and self._fabric is not None:  # a dir per cluster, one below it per node
            return f"/tmp/raydp-{self._fabric.net_id}"
        d = os.path.join(str(self.state_dir), "ray")
        return f"/tmp/raydp-ray-{self.port}" if len(d) > _MAX_TEMP_DIR_LEN else d

    def _log(self, msg: str) -> None:
        print(f"{self._tag}: {msg}", file=sys.stderr, flush=True)

    # ------------------------------------------------------------------ bookkeeping

    def nodes(self) -> list[Node]:
        """The recorded nodes (head first), from ``state_dir/nodes``."""
        return self._files.nodes()

    def _pgids(self) -> set[int]:
        return {n.pgid for n in self.nodes()}

    def processes(self) -> list[int]:
        """Live PIDs of this cluster (every node this object started or the state dir records,
        and their descendants): what `down` stops."""
        return sorted(cluster_procs(self._pgids() | self._started, proc_table()))

    def _reap(self) -> None:
        for p in self._popens.values():
            p.poll()

    def _stop(self, pgids: Collection[int], grace: float) -> tuple[bool, list[int]]:
        """Stop the nodes ``pgids`` (:func:`~raydp.local_cluster.procs.stop_sessions`)."""
        return stop_sessions(pgids, grace, reap=self._reap, log=self._log)

    # ------------------------------------------------------------------ up

    def _node_env(self) -> dict[str, str]:
        env = dict(self._base(), **self.client_vars(), RAY_USAGE_STATS_ENABLED="0")
        env.setdefault("RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S", "0")  # see the module docstring
        return env

    def _write_env_files(self, tmp: str, tmp_ours: bool) -> None:
        fields: dict[str, object] = {
            "ADDRESS": f"{self.host}:{self.port}",
            "DASHBOARD": f"http://{self.host}:{self.dashboard_port}",
            "PORT": self.port, "DASHBOARD_PORT": self.dashboard_port,
            "CLIENT_PORT": self.client_port, "CPUS_PER_NODE": self.cpus_per_node,
            "WORKERS": self.workers, "RAY_TEMP_DIR": tmp, "RAY_TEMP_DIR_OURS": int(tmp_ours),
            "TOKEN_FILE": self.state_dir / "token", "LOOPBACK": int(self.loopback)}
        note = ""
        if self.netns:
            fabric = self._fabric
            fields.update(NETNS=1, NET_ID=fabric.net_id, BRIDGE=fabric.bridge, GATEWAY=fabric.gateway,
                          HEAD_NETNS=fabric.netns("head"))
            note = ("# nodes in network namespaces: `ray job submit` and `ray status` work from here; a driver\n"
                    f"# (ray.init, raydp estimate --backend ray) must run in the head's: {self.prog} exec -- CMD\n")
        self._files.write_env(token=self.token, address=self.address, dashboard=self.dashboard,
                              loopback_env=LOOPBACK_ENV if self.loopback else None, fields=fields, note=note)

    def _record(self, name: str, pgid: int, raylet: int | None = None, node_id: str | None = None):
        self._files.record(Node(name, pgid, raylet, node_id))

    def _start_node(self, name: str, args: Sequence[str], ray: str, py: str) -> None:
        logf = self.state_dir / "logs" / f"{name}.log"
        if self.netns:  # `ip netns exec` enters the namespace and execs: the PID stays the node's
            cmd = ["ip", "netns", "exec", self._fabric.netns(name), ray, "start", *args]
        elif self.loopback and name != "head":
            cmd = [py, "-I", helpers.PATH, "_ray-start-worker", *args]  # see _ray_start_worker
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
            raylet = next((p.pid for p in proc_table().values()
                           if p.sid == pgid and p.comm == "raylet" and p.alive), None)
            if raylet is not None or popen.poll() is not None:
                break
            time.sleep(0.1)
        if raylet is None:
            self._log(f"no raylet found for {name} (see {logf})")
            raise ClusterError(f"no raylet found for {name}")
        node_id = next((a.split("=", 1)[1] for a in cmdline(raylet).decode(errors="replace").split("\0")
                        if a.startswith("--node_id=")), None)
        self._record(name, pgid, raylet, node_id)

    def _check_netns(self) -> None:
        """Refuse namespace mode before anything is made when it cannot work here."""
        why = netns_unavailable()
        if why:
            raise UsageError(why)
        if self.workers > MAX_NODES - 1:
            raise UsageError(f"--netns allows at most {MAX_NODES - 1} workers (one /24 per cluster), "
                             f"got {self.workers}")

    def up(self) -> LocalCluster:
        """Start the head node and the worker nodes; return once all are registered in the GCS.

        Refuses (ClusterError) when a cluster recorded in the state dir still runs or a port is
        taken; removes the state of a recorded cluster that is no longer running. On failure
        everything started is stopped again (namespace mode: and every link and namespace made is
        deleted), keeping the logs. Namespace mode without root: UsageError, nothing made.
        """
        if not isinstance(self.workers, int) or self.workers < 0:
            raise UsageError(f"WORKERS must be a non-negative integer, got '{self.workers}'")
        if self.netns:
            self._check_netns()
        ray, py = self._find_ray()
        state = self.state_dir
        (state / "logs").mkdir(parents=True, exist_ok=True)
        os.chmod(state, 0o700)
        if (state / "nodes").exists() or self._files.net() is not None:
            if cluster_procs(self._pgids(), proc_table()):
                raise ClusterError(f"a cluster recorded in {state} is still running; "
                                   f"run '{self.prog} down' first")
            self._log("removing stale state of a cluster that is no longer running")
            self._remove_network()
            self._files.remove_files()
        if self.netns:  # a fresh network of its own: Ray's default ports are free there
            self.port = self.port or NETNS_PORT
            self.dashboard_port = self.dashboard_port or NETNS_DASHBOARD_PORT
            self.client_port = self.client_port or NETNS_CLIENT_PORT
        else:
            if self.port is None or self.dashboard_port is None or self.client_port is None:
                free = iter(free_ports(3, self.host))
                self.port = self.port or next(free)
                self.dashboard_port = self.dashboard_port or next(free)
                self.client_port = self.client_port or next(free)
            for p in (self.port, self.dashboard_port, self.client_port):
                if port_in_use(p, self.host):
                    raise ClusterError(f"port {p} on {self.host} is already in use "
                                       "(set RAYDP_PORT / RAYDP_DASHBOARD_PORT / RAYDP_CLIENT_PORT)")
        self._token = self._files.load_token(self._token)
        (state / "nodes").write_text("")
        t0 = time.monotonic()
        try:
            if self.netns:
                net_id = new_net_id()
                self._files.record_net(net_id, None)  # before the first link: `down` finds it after any failure
                self._fabric = Fabric.allocate(net_id)
                self._files.record_net(net_id, self._fabric.subnet)
            tmp = self._temp_dir()
            tmp_ours = not os.path.exists(tmp)  # `down` deletes the whole temp dir only if we made it
            os.makedirs(tmp, exist_ok=True)
            self._write_env_files(tmp, tmp_ours)
            names = ["head", *(f"worker{i}" for i in range(1, self.workers + 1))]
            if self.netns:
                for i, name in enumerate(names):
                    self._fabric.add_node(i, name)

            def common(i: int) -> list[str]:
                return [f"--node-ip-address={self.fabric.ip(i) if self.netns else self.host}",
                        f"--num-cpus={self.cpus_per_node}", f"--num-gpus={self.gpus_per_node}",
                        *([f"--resources={json.dumps(self.resources_per_node)}"] if self.resources_per_node else []),
                        f"--object-store-memory={self.object_store_bytes}", "--dashboard-agent-listen-port=0"]

            # Namespace mode: a temp dir per node, as on separate machines
            head_tmp = os.path.join(tmp, "head") if self.netns else tmp
            self._start_node("head", ["--head", f"--port={self.port}", f"--temp-dir={head_tmp}",
                                      f"--dashboard-host={self.host}",
                                      f"--dashboard-port={self.dashboard_port}",
                                      f"--ray-client-server-port={self.client_port}", *common(0)], ray, py)
            # our session dir inside the temp dir (what `down` deletes when the temp dir is not ours)
            self._files.append("RAY_SESSION_DIR", os.path.realpath(os.path.join(head_tmp, "session_latest")))
            for i in range(1, self.workers + 1):
                if self.netns:
                    self._start_node(names[i], [f"--address={self.address}",
                                                f"--temp-dir={os.path.join(tmp, names[i])}", *common(i)], ray, py)
                else:
                    # Worker nodes on the same host share the head's temp/session dir (Ray picks
                    # distinct socket names raylet.N / plasma_store.N); node-manager, object-manager,
                    # agent and metrics ports are all random (0), worker ports from Ray's default range.
                    self._start_node(names[i], [f"--address={self.address}", "--include-log-monitor=False",
                                                *common(i)], ray, py)
            try:
                alive = self.wait_for_nodes(self.workers + 1, exact=False, timeout=self.up_timeout,
                                            report=True, python=py)
            except ClusterError as e:
                self._log(f"nodes did not come up; logs in {state / 'logs'} and "
                          f"{os.path.join(head_tmp, 'session_latest', 'logs')}")
                raise ClusterError(f"nodes did not come up: {e}") from None
            if self.netns:
                seen = sorted({nd["NodeManagerAddress"] for nd in alive})
                want = sorted(self.fabric.ip(i) for i in range(len(names)))
                if seen != want:
                    raise ClusterError(f"the nodes registered as {', '.join(seen)}, not {', '.join(want)}")
        except NetError as e:
            self._down_quietly()
            raise ClusterError(str(e)) from None
        except BaseException:
            self._down_quietly()
            raise
        self._log(f"up in {time.monotonic() - t0:.0f}s")
        return self

    def summary(self) -> str:
        """What `up` prints on the command line."""
        st, tmp = self.state_dir, self._recorded.get("RAY_TEMP_DIR", self._temp_dir())
        if self.netns_on():
            return self._netns_summary(st, tmp)
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

    def _netns_summary(self, st: Path, tmp: str) -> str:
        fabric = self.fabric
        names = ["head", *(f"worker{i}" for i in range(1, self.workers + 1))]
        nodes = "\n".join(f"    {name:<8} {fabric.ip(i):<15} netns {fabric.netns(name)}"
                          for i, name in enumerate(names))
        return (
            f"Ray cluster up: 1 head + {self.workers} worker node(s), each in its own network namespace, "
            f"{self.cpus_per_node} CPU(s) each, token auth on.\n"
            f"  GCS address : {self.address}\n"
            f"  dashboard   : {self.dashboard}   (job API, reachable from here; every request needs "
            "'Authorization: Bearer <token>')\n"
            f"  this host   : {fabric.gateway} on bridge {fabric.bridge}\n"
            f"  nodes       :\n{nodes}\n"
            f"  token file  : {st}/token   (mode 0600)\n"
            f"  logs        : {tmp}/NODE/session_latest/logs\n"
            "\n"
            "Run a driver in the head's namespace (a driver must be on a node's own network; exec sets "
            "RAY_ADDRESS and the token):\n"
            f"  {self.prog} exec -- raydp estimate --target raydp.targets:svm "
            "--oracle raydp.oracles:svm_two_class --n 1000 --m 1500 --gamma 0.05 --backend ray\n"
            "Submit a job from here:\n"
            f"  source {st}/env.sh && ray job submit --working-dir . -- python jobs/svm_sensitivity.py\n"
            f"Cut / restore a node's link: {self.prog} cut 1  |  {self.prog} restore 1\n"
            f"Status / stop:     {self.prog} status  |  {self.prog} down")

    # ------------------------------------------------------------------ queries

    def wait_for_nodes(self, n: int | None = None, *, exact: bool = True, dead: Sequence[str] = (),
                       timeout: float = 60, report: bool = False, python: str | None = None) -> list[dict]:
        """Poll the GCS (from a short-lived client subprocess) until ``n`` nodes are alive (exactly,
        or at least with ``exact=False``; None: any number) and none of the node ids in ``dead`` is;
        return the alive nodes' ``NodeID``, ``NodeManagerAddress`` and ``Resources``.
        Raises ClusterError on timeout."""
        py = python or self._find_ray()[1]
        cmd = [py, "-I", helpers.PATH, "_wait-nodes", self.address, "-" if n is None else str(n),
               "exact" if exact else "at-least", str(timeout), *dead]
        if report:
            cmd.append("--report")
        try:
            p = subprocess.run(self.client_command(cmd), env=dict(self._base(), **self.client_vars()), text=True,
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
        fabric = self.fabric if self.netns_on() else None
        more = " address link" if fabric else ""
        print(f"recorded nodes ({self.state_dir / 'nodes'}: name pgid raylet_pid node_id alive{more}):", file=w)
        for nd in self.nodes():
            extra = ""
            if fabric is not None:
                i = self._node_index(nd.name)
                link = fabric.link_up(i)
                extra = f" {fabric.ip(i)} {'-' if link is None else 'up' if link else 'cut'}"
            print(f"  {nd.name} {nd.pgid} {nd.raylet_pid or '-'} {nd.node_id or '-'} "
                  f"{'yes' if nd.raylet_alive() else 'no'}{extra}", file=w)
        print(file=w, flush=True)
        cmd = [ray, "status", "--address", self.address]
        env = dict(self._base(), **self.client_vars())
        if out is None:
            return subprocess.run(cmd, env=env).returncode
        p = subprocess.run(cmd, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        out.write(p.stdout)
        return p.returncode

    def env_sh(self) -> str:
        """The contents of env.sh (`export` lines for a client shell, with the token)."""
        text = self._files.env_sh()
        if text is None:
            raise ClusterError(f"no local cluster recorded in {self.state_dir}")
        return text

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
        found, _ = self._stop([node.pgid], 0)
        if not found:
            raise ClusterError(f"{name} is not running (already stopped or killed); `{self.prog} status` lists the "
                               "nodes")
        if wait_dead and node.node_id:
            self.wait_for_nodes(None, dead=[node.node_id], timeout=timeout)
        return node.pgid

    @staticmethod
    def _node_index(name: str) -> int:
        return 0 if name == "head" else int(name[len("worker"):])

    def _link(self, node: int | str, up: bool) -> str:
        """Cut or restore a node's link (namespace mode); ``node``: a 0-based worker index, "head" or
        "workerN". Returns the node's name and address."""
        fabric = self.fabric if self.netns_on() else None
        verb = "restore" if up else "cut"
        if fabric is None:
            raise UsageError(f"{verb} needs a cluster started with 'up --netns' (on loopback all nodes share "
                             "one network)")
        name = f"worker{node + 1}" if isinstance(node, int) else node
        if not any(nd.name == name for nd in self.nodes()) or (isinstance(node, int) and node < 0):
            raise ClusterError(f"no {name} recorded in {self.state_dir / 'nodes'}")
        i = self._node_index(name)
        if fabric.link_up(i) is None:
            raise ClusterError(f"the link of {name} ({fabric.veth(i)}) does not exist")
        try:
            fabric.set_link(i, up)
        except NetError as e:
            raise ClusterError(str(e)) from None
        return f"{name} ({fabric.ip(i)})"

    def cut(self, node: int | str) -> str:
        """Take a node off the network for good or until :meth:`restore`: its veth goes down, every
        packet to and from it is dropped, no connection is reset (a lost machine, not a dead process).
        ``node``: a 0-based worker index (the command line's ``cut I`` is 1-based), "head" or "workerN"."""
        return self._link(node, False)

    def restore(self, node: int | str) -> str:
        """Put a cut node back on the network (its connections resume where TCP left them)."""
        return self._link(node, True)

    def _remove_network(self) -> list[str]:
        """Delete the recorded namespace network (nothing in loopback mode); what is left."""
        rec = self._files.net()
        if rec is None:
            return []
        left = remove_net(rec[0])
        if not left:
            self._files.forget_net()
        return left

    def down(self, *, keep_logs: bool | None = None) -> str:
        """Stop every process of this cluster (never anything else); idempotent. Deletes the Ray
        temp dir if `up` created it, else only this cluster's session dir in it (unless
        ``keep_logs``, default the configured RAYDP_KEEP_LOGS), the state files but the token, and in
        namespace mode every link and namespace `up` made (after the processes, which keep a
        namespace alive). Returns a one-line report."""
        keep = self.keep_logs if keep_logs is None else keep_logs
        if self._state is None:
            return f"{self._tag}: no cluster started (nothing to do)"
        st = self.state_dir
        pgids = self._pgids()
        net = self._files.net()
        if not pgids and net is None:
            self._reap()
            return f"{self._tag}: no running cluster recorded in {st} (nothing to do)"
        t0 = time.monotonic()
        if pgids:
            self._stop(pgids, self.stop_grace)
        left = self._remove_network()
        if left:
            raise ClusterError(f"could not remove {', '.join(left)} (still in use?); delete them with "
                               "'ip link del NAME' / 'ip netns del NAME'")
        rec = self._recorded
        if rec and not keep:
            tmp, session = rec.get("RAY_TEMP_DIR", ""), rec.get("RAY_SESSION_DIR", "")
            if rec.get("RAY_TEMP_DIR_OURS") == "1" and tmp and os.path.isdir(tmp):
                shutil.rmtree(tmp, ignore_errors=True)
            elif rec.get("NETNS") == "1" and tmp:  # a temp dir per node below one that is not ours
                for nd in self.nodes():
                    shutil.rmtree(os.path.join(tmp, nd.name), ignore_errors=True)
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
        self._files.remove_files()
        net_note = f", its namespaces and links (rdp{net[0]}*) removed" if net else ""
        return (f"{self._tag}: cluster in {st} stopped in {time.monotonic() - t0:.0f}s{net_note} "
                f"(token kept in {st / 'token'})")

    def _down_quietly(self) -> None:
        """After a failed `up`: stop what was started and remove the network, keep the logs, say
        nothing but what could not be removed."""
        saved, self._log = self._log, lambda msg: None
        try:
            self.down(keep_logs=True)
        except Exception as e:  # noqa: BLE001 - the failure of `up` is what the caller reports
            saved(str(e))
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
