"""Is a Ray cluster answering at an address? Decided within a bounded time, before ``ray.init``.

``ray.init(address="127.0.0.1:1")`` does not fail: Ray retries "Failed to get cluster ID from GCS
server" for many minutes (measured: killed after 328 s and after 400 s). :func:`check_reachable`
answers first, within ``timeout`` seconds:

1. the host name resolves;
2. something accepts a TCP connection on the port (a refused connection is retried for up to
   ``REFUSED_RETRY`` = 5 s, as a head node may still be starting; then it is an error);
3. it speaks HTTP/2, as Ray's GCS (a gRPC server) and Ray Client do: the HTTP/2 client preface and an
   empty SETTINGS frame are answered by a SETTINGS frame. The dashboard (HTTP/1.1) answers with
   ``HTTP/1.1 400``; a port that accepts and stays silent answers nothing.

``auto`` is resolved first, as ``ray.init(address="auto")`` documents it: ``RAY_ADDRESS`` when set,
else the address the last ``ray start`` recorded in ``ray_current_cluster`` under Ray's temp dir
(``/tmp/ray`` unless ``RAY_TMPDIR`` or ``TMPDIR`` says otherwise); that address is then checked as above
and is what ``ray.init`` is given. With neither, it is one line saying that no cluster is recorded. Ray
2.60 would also fall back to any GCS named on the command line of a raylet running on this machine,
picking one at random when there are several; that is not followed: on a machine with several
clusters it can join one nobody named. ``local`` (a new local Ray) is left to Ray.

What it does not bound: a gRPC server that is not a Ray cluster (``ray.init`` may then still wait),
and ``ray.init`` itself once the address has answered.

>>> parse_address("ray://10.0.0.5:10001")
('10.0.0.5', 10001)
"""

from __future__ import annotations

import errno
import os
import socket
import time
from pathlib import Path

from ..errors import EngineError

__all__ = ["check_reachable", "parse_address", "resolve_auto", "ray_address_file", "DEFAULT_CONNECT_TIMEOUT"]

DEFAULT_CONNECT_TIMEOUT = 30.0
REFUSED_RETRY = 5.0

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_EMPTY_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # length 0, type SETTINGS, no flags, stream 0
_SETTINGS = 0x04


def parse_address(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of ``host:port``, ``[v6]:port`` or ``ray://host:port``; None for ``auto``/``local``."""
    text = address.strip()
    for scheme in ("ray://", "gcs://"):
        if text.startswith(scheme):
            text = text[len(scheme):]
    text = text.rstrip("/")
    if text in ("auto", "local", ""):
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise EngineError(f"Ray address {address!r} is not host:port (e.g. 127.0.0.1:6379), ray://host:port or auto")
    # the socket layer takes a port modulo 65536 (70000 would reach 4464) and refuses 0 as if closed
    if not 1 <= int(port) <= 65535:
        raise EngineError(f"Ray address {address!r} has port {int(port)}: a port must be 1-65535")
    return host.strip("[]"), int(port)


def ray_address_file() -> Path:
    """Where ``ray start`` records the address of the cluster it started or joined on this machine."""
    from ray._common.utils import get_ray_address_file  # Ray's own rule for its temp dir

    return Path(get_ray_address_file(None))


def resolve_auto() -> tuple[str, str]:
    """``(address, where it was found)`` for ``auto``: ``RAY_ADDRESS``, else the recorded address."""
    env = os.environ.get("RAY_ADDRESS", "").strip()
    if env and env != "auto":
        return env, "RAY_ADDRESS"
    path = ray_address_file()
    try:
        recorded = path.read_text().strip()
    except FileNotFoundError:
        recorded = ""
    except OSError as exc:
        raise EngineError(f"cannot read the Ray cluster address recorded in {path} for address 'auto' "
                          f"({exc.strerror or type(exc).__name__}); pass the head's address instead") from None
    if not recorded:
        raise EngineError(f"no Ray cluster to connect to for address 'auto': RAY_ADDRESS is not set and none is "
                          f"recorded in {path} (`ray start` records its cluster there; with --temp-dir DIR, in "
                          "DIR/ray_current_cluster); start one with `ray start --head` or pass the head's address "
                          "(host:port)")
    return recorded, str(path)


def _answer(sock: socket.socket, deadline: float) -> bytes:
    """Up to the first 9 bytes the peer sends back, or what it sent before closing or the deadline."""
    got = b""
    while len(got) < 9:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        sock.settimeout(left)
        try:
            chunk = sock.recv(9 - len(got))
        except socket.timeout:
            break
        except OSError:
            break
        if not chunk:
            break
        got += chunk
    return got


def check_reachable(address: str, timeout: float = DEFAULT_CONNECT_TIMEOUT) -> str:
    """The address to give ``ray.init`` once a gRPC (HTTP/2) server answers there: ``address`` itself, or
    for ``auto`` the address it stands for; else :class:`EngineError` within ``timeout`` s."""
    start = time.monotonic()
    named = repr(address)
    target = parse_address(address)
    if target is None:
        if address.strip() != "auto":
            return address  # "local": a new local Ray, nothing to reach
        address, source = resolve_auto()
        named = f"'auto' ({address}, from {source})"
        target = parse_address(address)
        if target is None:
            return address
    host, port = target
    deadline = start + timeout
    where = f"{host}:{port}"
    hint = (f"check the address (the head node's GCS port: `ray start --head --port` or 6379; not the dashboard's "
            f"8265) and that the cluster is running, or raise connect_timeout (--connect-timeout, now {timeout:g} s)")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise EngineError(f"cannot reach a Ray cluster at {named}: the host name {host!r} does not resolve "
                          f"({exc.strerror}); {hint}") from None
    last, refused = "no reply", False
    while True:
        for family, kind, proto, _, sockaddr in infos:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            sock = socket.socket(family, kind, proto)
            try:
                sock.settimeout(min(left, 5.0))
                sock.connect(sockaddr)
            except OSError as exc:
                sock.close()
                refused = getattr(exc, "errno", None) == errno.ECONNREFUSED
                last = "connection refused: nothing listens there" if refused else (
                    f"{exc.strerror or type(exc).__name__}")
                continue
            refused = False
            try:
                sock.sendall(_PREFACE + _EMPTY_SETTINGS)
                reply = _answer(sock, deadline)
            except OSError as exc:
                reply, last = b"", f"{exc.strerror or type(exc).__name__}"
            finally:
                sock.close()
            if len(reply) >= 4 and reply[3] == _SETTINGS:
                return address  # an HTTP/2 server: Ray's GCS or Ray Client
            if reply and all(9 <= b < 127 for b in reply):  # "HTTP/1.1 400", or an HTTP/0.9 body: text
                raise EngineError(f"cannot reach a Ray cluster at {named}: {where} answers in text, an "
                                  f"HTTP/1 server (the dashboard?), not Ray's GCS; {hint}")
            last = ("it accepts connections but does not answer like a Ray cluster" if not reply else
                    "it answers, but not like a Ray cluster (no HTTP/2)")
            if reply:
                raise EngineError(f"cannot reach a Ray cluster at {named}: {last}; {hint}")
        if time.monotonic() >= deadline or (refused and time.monotonic() - start >= REFUSED_RETRY):
            break
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
    waited = time.monotonic() - start
    raise EngineError(f"cannot reach a Ray cluster at {named} (tried for {waited:.0f} s): {last}; {hint}")
