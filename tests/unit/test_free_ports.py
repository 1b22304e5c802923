"""Ports a local cluster picks for its head: free, distinct, and where the kernel does not hand out
ports on its own (Ray's servers bind to port 0 while the head starts; a port taken from the
ephemeral range could be handed to one of them before the dashboard binds it)."""

import socket

from raydp.local_cluster.net import RAY_WORKER_PORTS, _ephemeral_ports, free_ports


def test_free_ports_are_free_distinct_and_outside_the_kernels_and_rays_ranges():
    eph = _ephemeral_ports()
    room = sum(1 for p in range(RAY_WORKER_PORTS.stop, 32768) if p not in eph) >= 300
    seen = set()
    for _ in range(50):
        ports = free_ports(3, "127.0.0.1")
        assert len(set(ports)) == 3
        for p in ports:
            assert p not in RAY_WORKER_PORTS and 1024 < p < 65536
            assert p not in eph or not room  # a machine whose ephemeral range leaves no room: the kernel's
            with socket.socket() as s:  # free: it can be bound right now
                s.bind(("127.0.0.1", p))
        seen.update(ports)
    assert len(seen) > 100 or not room  # drawn at random, not one fixed triple (150 draws from ~12000 ports)


def test_a_taken_port_is_skipped(monkeypatch):
    """The draw offers ports that are in use first: each is skipped, a free one taken instead."""
    import itertools

    import pytest

    import raydp.local_cluster.net as net

    if sum(1 for p in range(RAY_WORKER_PORTS.stop, 32768) if p not in _ephemeral_ports()) < 300:
        pytest.skip("this machine's ephemeral port range leaves no room below it: ports come from the kernel")
    held = []
    try:
        for p in free_ports(5, "127.0.0.1"):
            s = socket.socket()
            s.bind(("127.0.0.1", p))
            s.listen()
            held.append(s)
        taken = [s.getsockname()[1] for s in held]

        class TakenFirst:
            def __init__(self):
                self.offers = itertools.chain(taken, iter(range(20000, 32768)))

            def choice(self, pool):
                return next(self.offers)

        monkeypatch.setattr(net.secrets, "SystemRandom", TakenFirst)
        got = free_ports(3, "127.0.0.1")
        assert len(got) == 3 and not set(got) & set(taken)
        assert all(20000 <= p < 32768 for p in got)  # from the offers, not the kernel's fallback
    finally:
        for s in held:
            s.close()
