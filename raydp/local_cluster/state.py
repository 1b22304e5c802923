"""The files a local cluster keeps in its state dir (mode 0700), and the nodes they record.

``token`` (0600), ``env.sh`` (0600, ``source`` it: the client variables), ``cluster.env`` (address,
ports, temp and session dir), ``nodes`` (one line per node: ``name pgid raylet_pid node_id``; the pgid
is also the node's session id), ``netns`` (namespace mode: ``NET_ID SUBNET``, written before the first
link or namespace is made, so that a ``down`` after any failure finds them) and ``logs/NAME.log`` (each
node's ``ray start`` output). ``down`` keeps only the token (and, with ``keep_logs`` or after a failed
``up``, the logs).
"""

from __future__ import annotations

import contextlib
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from .procs import cmdline

__all__ = ["Node", "StateDir", "write_private"]


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read (umask 077 + chmod 600)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)


@dataclass(frozen=True)
class Node:
    """One line of the ``nodes`` file."""

    name: str  # "head", "worker1", "worker2", ...
    pgid: int  # process group id (= session id = PID of its `ray start --block`)
    raylet_pid: int | None
    node_id: str | None  # Ray node id (hex)

    def raylet_alive(self) -> bool:
        if self.raylet_pid is None:
            return False
        # (a SIGKILLed process may linger as a zombie until its parent reaps it: empty cmdline)
        return bool(cmdline(self.raylet_pid))

    def line(self) -> str:
        return f"{self.name} {self.pgid} {self.raylet_pid or '-'} {self.node_id or '-'}"


@dataclass(frozen=True)
class StateDir:
    """A cluster's state dir and its files."""

    path: Path

    @property
    def nodes_file(self) -> Path:
        return self.path / "nodes"

    @property
    def logs(self) -> Path:
        return self.path / "logs"

    def recorded(self) -> dict[str, str]:
        """``cluster.env`` as a dict (empty when there is none)."""
        try:
            lines = (self.path / "cluster.env").read_text().splitlines()
        except OSError:
            return {}
        return dict(line.split("=", 1) for line in lines if "=" in line)

    def nodes(self) -> list[Node]:
        """The recorded nodes (head first)."""
        try:
            lines = self.nodes_file.read_text().splitlines()
        except OSError:
            return []
        out = []
        for line in lines:
            f = line.split()
            if len(f) == 4:
                out.append(Node(f[0], int(f[1]), None if f[2] == "-" else int(f[2]), None if f[3] == "-" else f[3]))
        return out

    def record(self, node: Node) -> None:
        """Add or replace a node's line."""
        lines = [x for x in self.nodes_file.read_text().splitlines() if x.split()[:1] != [node.name]]
        self.nodes_file.write_text("".join(f"{x}\n" for x in [*lines, node.line()]))

    def token(self) -> str:
        """The token file's first line ('' when there is none)."""
        try:
            with open(self.path / "token") as f:
                return f.readline().rstrip("\n")
        except OSError:
            return ""

    def load_token(self, configured: str | None) -> str:
        """Precedence: the configured token (RAY_AUTH_TOKEN) > the state dir's token > a new one."""
        path = self.path / "token"
        token = configured or self.token() or secrets.token_hex(32)
        if token != self.token():
            write_private(path, token + "\n")
        os.chmod(path, 0o600)
        return token

    def write_env(self, *, token: str, address: str, dashboard: str, loopback_env: dict[str, str] | None,
                  fields: dict[str, object], note: str = "") -> None:
        """``env.sh`` (for a client shell; ``note``: comment lines after the first) and ``cluster.env``
        (``fields``, one KEY=value a line)."""
        loop = "" if not loopback_env else "\n".join(f"export {k}={v}" for k, v in loopback_env.items())
        write_private(self.path / "env.sh", (
            "# source this file to talk to the local raydp Ray cluster (contains the auth token)\n"
            f"{note}"
            "export RAY_AUTH_MODE=token\n"
            f"export RAY_AUTH_TOKEN='{token}'\n"
            f"export RAY_ADDRESS='{address}'\n"
            f"export RAY_API_SERVER_ADDRESS='{dashboard}'\n"
            f"{loop}\n"))
        (self.path / "cluster.env").write_text("".join(f"{k}={v}\n" for k, v in fields.items()))

    def append(self, key: str, value: str) -> None:
        with open(self.path / "cluster.env", "a") as f:
            f.write(f"{key}={value}\n")

    def env_sh(self) -> str | None:
        try:
            return (self.path / "env.sh").read_text()
        except OSError:
            return None

    def net(self) -> tuple[str, int | None] | None:
        """The recorded namespace network ``(net_id, subnet)`` (subnet None until it was chosen), or None."""
        try:
            f = (self.path / "netns").read_text().split()
        except OSError:
            return None
        if not f:
            return None
        return f[0], int(f[1]) if len(f) > 1 and f[1].isdigit() else None

    def record_net(self, net_id: str, subnet: int | None) -> None:
        (self.path / "netns").write_text(f"{net_id} {'-' if subnet is None else subnet}\n")

    def forget_net(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.path / "netns").unlink()

    def remove_files(self) -> None:
        """Everything but the token, the logs and the namespace record (removed once the network is)."""
        for f in [self.nodes_file, self.path / "cluster.env", self.path / "env.sh", *self.path.glob("*.sid")]:
            with contextlib.suppress(FileNotFoundError):
                f.unlink()
