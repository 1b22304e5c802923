"""The cluster's network: free ports on loopback, and the network namespaces of a ``--netns`` cluster.

Loopback mode needs only ports (:func:`free_ports`, :func:`port_in_use`). Namespace mode gives every
node a network of its own, as separate machines have (:class:`Fabric`)::

    root namespace                       node namespaces (one per node)
    bridge rdpXXXXXXbr 198.18.S.254/24 ──veth rdpXXXXXXv0 ── eth0 198.18.S.1   rdpXXXXXX-head
                                       ──veth rdpXXXXXXv1 ── eth0 198.18.S.2   rdpXXXXXX-worker1
                                       ── ...

Every address is in 198.18.0.0/15 (RFC 2544's benchmarking range, never routed on the Internet).
``XXXXXX`` is a random id per cluster and ``S`` a /24 of its own, chosen under a lock among those no
address of the root namespace uses: two clusters at once never share a name or an address, and the
tool only ever deletes names that begin with its own ``rdpXXXXXX``. Nothing is forwarded or NATed:
a node reaches the other nodes and the root namespace's bridge address, nothing else.

A link is cut by setting the root-side veth down: the node's ``eth0`` loses its carrier, its packets
and those sent to it are dropped, and no TCP connection is reset — a machine that drops off the
network, not a process that dies. Setting it up again restores it with the connections intact.

Deleting a namespace is asynchronous in the kernel (its veth lingers for a moment), so
:meth:`Fabric.remove` deletes the veths itself, then the namespaces and the bridge, and waits until
nothing with its prefix is left.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import re
import secrets
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass

__all__ = ["port_in_use", "free_ports", "RAY_WORKER_PORTS", "NETNS_RANGE", "NetError", "Fabric",
           "netns_unavailable", "new_net_id", "leftovers", "remove"]

# Ray's default worker port range (raylets pick worker ports there): free ports picked for an
# isolated cluster stay out of it.
RAY_WORKER_PORTS = range(10002, 20000)

NETNS_RANGE = ipaddress.ip_network("198.18.0.0/15")
NAME_PREFIX = "rdp"
GATEWAY_HOST = 254  # the root namespace's address on a cluster's bridge: 198.18.S.254
MAX_NODES = 253  # 198.18.S.1 .. 198.18.S.253
_LOCK = "/run/lock/raydp-netns.lock"


def port_in_use(port: int, host: str) -> bool:
    """True if something accepts TCP connections on host:port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(2.0)
        return s.connect_ex((host, port)) == 0


def _ephemeral_ports() -> range:
    """The kernel's range for ports bound to 0 (``net.ipv4.ip_local_port_range``)."""
    try:
        lo, hi = (int(v) for v in open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
        return range(lo, hi + 1)
    except (OSError, ValueError):
        return range(32768, 61000)  # Linux's default


def free_ports(n: int, host: str) -> list[int]:
    """n distinct currently free TCP ports on host, outside Ray's worker port range and, where there
    is room, outside the kernel's ephemeral range.

    A port the kernel handed out for a bind to 0 is one it may hand out again at once: Ray's own
    servers (GCS, raylet, agents) bind to 0, and one of them took the dashboard's port between the
    choice and the dashboard's bind, which left a head waiting a minute and then dying. Ports are
    drawn at random between Ray's worker ports and the ephemeral range instead, where nothing is
    assigned without asking for it by number.
    """
    eph = _ephemeral_ports()
    pool = [p for p in range(RAY_WORKER_PORTS.stop, 32768) if p not in eph and p not in RAY_WORKER_PORTS]
    rng = secrets.SystemRandom()
    ports: list[int] = []
    socks = []
    try:
        tries = 0
        while len(ports) < n:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(s)  # stays bound until all are chosen, so they are distinct
            if len(pool) >= 100 * n and tries < 200 * n:
                tries += 1
                try:
                    s.bind((host, rng.choice(pool)))
                except OSError:  # taken: draw another
                    continue
            else:  # no room outside the ephemeral range on this machine: the kernel's choice
                s.bind((host, 0))
            port = s.getsockname()[1]
            if port not in RAY_WORKER_PORTS and port not in ports:
                ports.append(port)
    finally:
        for s in socks:
            s.close()
    return ports


# ---------------------------------------------------------------------------- namespaces


class NetError(RuntimeError):
    """An ``ip`` command failed (the message is one line)."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(["ip", *args], capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60)
    if check and p.returncode != 0:
        why = (p.stderr.strip().splitlines() or [f"exit code {p.returncode}"])[-1]
        raise NetError(f"'ip {' '.join(args)}' failed: {why}")
    return p


def netns_unavailable() -> str | None:
    """Why this process cannot make network namespaces (None when it can)."""
    if os.geteuid() != 0:
        return "--netns needs root (it creates network namespaces, a bridge and veth links); run it as root"
    if shutil.which("ip") is None:
        return "--netns needs the 'ip' command (iproute2), which is not on PATH"
    try:
        p = _ip("netns", "list", check=False)
    except (OSError, subprocess.SubprocessError) as e:
        return f"--netns needs 'ip netns', which failed here: {e}"
    if p.returncode != 0:
        why = (p.stderr.strip().splitlines() or [f"exit code {p.returncode}"])[-1]
        return f"--netns needs 'ip netns', which failed here: {why}"
    return None


def _links() -> list[str]:
    """Names of the links of the root namespace."""
    out = []
    for line in _ip("-o", "link", "show").stdout.splitlines():
        m = re.match(r"\d+:\s+([^:@\s]+)", line)
        if m:
            out.append(m.group(1))
    return out


def _namespaces() -> list[str]:
    return [line.split()[0] for line in _ip("netns", "list").stdout.splitlines() if line.strip()]


def leftovers(net_id: str) -> list[str]:
    """Links and namespaces whose names begin with this cluster's prefix (empty once it is gone)."""
    prefix = NAME_PREFIX + net_id
    return ([f"link {n}" for n in _links() if n.startswith(prefix)]
            + [f"netns {n}" for n in _namespaces() if n.startswith(prefix)])


def new_net_id() -> str:
    """A random id no link or namespace of this machine uses as a prefix yet."""
    taken = " ".join(_links() + _namespaces())
    while True:
        net_id = secrets.token_hex(3)
        if NAME_PREFIX + net_id not in taken:
            return net_id


def _used_subnets() -> set[int]:
    """Indices of the /24s of 198.18.0.0/15 that an address of the root namespace is in."""
    used = set()
    for m in re.finditer(r"\binet (\d+\.\d+\.\d+\.\d+)/", _ip("-4", "-o", "addr", "show").stdout):
        addr = ipaddress.ip_address(m.group(1))
        if addr in NETNS_RANGE:
            used.add((int(addr) - int(NETNS_RANGE.network_address)) >> 8)
    return used


@dataclass(frozen=True)
class Fabric:
    """The network of one namespace cluster (module docstring). Node ``i`` (0: the head, 1..: the
    workers) is named ``name`` in its cluster and lives in namespace :meth:`netns` at :meth:`ip`."""

    net_id: str  # six hex digits; every name this cluster makes begins with "rdp" + net_id
    subnet: int  # which /24 of 198.18.0.0/15

    @property
    def prefix(self) -> str:
        return NAME_PREFIX + self.net_id

    @property
    def bridge(self) -> str:
        return f"{self.prefix}br"

    def veth(self, i: int) -> str:
        """The root-side end of node i's veth pair (the node's end is ``eth0`` in its namespace)."""
        return f"{self.prefix}v{i}"

    def netns(self, name: str) -> str:
        return f"{self.prefix}-{name}"

    def _addr(self, host: int) -> str:
        return str(ipaddress.ip_address(int(NETNS_RANGE.network_address) + (self.subnet << 8) + host))

    def ip(self, i: int) -> str:
        return self._addr(i + 1)

    @property
    def gateway(self) -> str:
        """The root namespace's address on the bridge (what clients here reach the nodes from)."""
        return self._addr(GATEWAY_HOST)

    # ---- making and removing

    @classmethod
    def allocate(cls, net_id: str) -> Fabric:
        """Pick a free /24 and make the bridge with the root namespace's address on it, under a lock
        (the address is what marks the /24 as taken for the next cluster)."""
        os.makedirs(os.path.dirname(_LOCK), exist_ok=True)
        with open(_LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            used = _used_subnets()
            free = next((s for s in range(NETNS_RANGE.num_addresses >> 8) if s not in used), None)
            if free is None:
                raise NetError("every /24 of 198.18.0.0/15 is in use by an address of this machine")
            fabric = cls(net_id, free)
            _ip("link", "add", fabric.bridge, "type", "bridge")
            _ip("link", "set", fabric.bridge, "addrgenmode", "none")  # IPv4 only: no link-local IPv6
            _ip("link", "set", fabric.bridge, "up")
            _ip("addr", "add", f"{fabric.gateway}/24", "dev", fabric.bridge)
        return fabric

    def add_node(self, i: int, name: str) -> None:
        """Namespace ``name``'s, its veth pair on the bridge, ``eth0`` at :meth:`ip` and ``lo`` up."""
        ns = self.netns(name)
        _ip("netns", "add", ns)
        _ip("link", "add", self.veth(i), "type", "veth", "peer", "name", "eth0", "netns", ns)
        _ip("link", "set", self.veth(i), "addrgenmode", "none")
        _ip("-n", ns, "link", "set", "eth0", "addrgenmode", "none")
        _ip("link", "set", self.veth(i), "master", self.bridge, "up")
        _ip("-n", ns, "addr", "add", f"{self.ip(i)}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("-n", ns, "link", "set", "lo", "up")

    def remove(self, timeout: float = 10.0) -> list[str]:
        """Delete every link and namespace with this cluster's prefix (processes inside must be gone
        first, or their namespace outlives its name); returns what is still there after ``timeout``."""
        return remove(self.net_id, timeout)

    # ---- faults

    def set_link(self, i: int, up: bool) -> None:
        """Cut (``up=False``) or restore node i's link."""
        _ip("link", "set", self.veth(i), "up" if up else "down")

    def link_up(self, i: int) -> bool | None:
        """Whether node i's link is up (None: there is no such link)."""
        p = _ip("-o", "link", "show", self.veth(i), check=False)
        if p.returncode != 0:
            return None
        flags = re.search(r"<([^>]*)>", p.stdout)
        return bool(flags) and "UP" in flags.group(1).split(",")


def remove(net_id: str, timeout: float = 10.0) -> list[str]:
    """:meth:`Fabric.remove` for a cluster known only by its id (e.g. one whose ``up`` died early)."""
    prefix = NAME_PREFIX + net_id
    links = [n for n in _links() if n.startswith(prefix)]
    for name in sorted(links, key=lambda n: n == f"{prefix}br"):  # veths first, the bridge last
        _ip("link", "del", name, check=False)
    for ns in _namespaces():
        if ns.startswith(prefix):
            _ip("netns", "del", ns, check=False)
    deadline = time.monotonic() + timeout
    while True:
        left = leftovers(net_id)
        if not left or time.monotonic() > deadline:
            return left
        for entry in left:  # a link re-listed while its namespace is torn down: try once more
            kind, name = entry.split(" ", 1)
            with contextlib.suppress(NetError):
                _ip(*(("link", "del", name) if kind == "link" else ("netns", "del", name)))
        time.sleep(0.2)
