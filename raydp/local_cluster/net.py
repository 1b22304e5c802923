"""Ports on loopback: is one taken, and a few free ones for an isolated cluster."""

from __future__ import annotations

import socket

__all__ = ["port_in_use", "free_ports", "RAY_WORKER_PORTS"]

# Ray's default worker port range (raylets pick worker ports there): free ports picked for an
# isolated cluster stay out of it.
RAY_WORKER_PORTS = range(10002, 20000)


def port_in_use(port: int, host: str) -> bool:
    """True if something accepts TCP connections on host:port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(2.0)
        return s.connect_ex((host, port)) == 0


def free_ports(n: int, host: str) -> list[int]:
    """n distinct currently free TCP ports on host, outside Ray's worker port range."""
    ports: list[int] = []
    socks = []
    try:
        while len(ports) < n:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(s)  # stays bound until all are chosen, so they are distinct
            s.bind((host, 0))
            port = s.getsockname()[1]
            if port not in RAY_WORKER_PORTS:
                ports.append(port)
    finally:
        for s in socks:
            s.close()
    return ports
