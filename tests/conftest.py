"""Shared fixtures: one embedded loopback Ray per test module that asks for it."""

from __future__ import annotations


import pytest


@pytest.fixture(scope="module")
def ray_session():
    """A real embedded Ray (2 CPUs) bound to 127.0.0.1, started for the module and shut down after."""
    ray = pytest.importorskip("ray")
    from raydp.engine.loopback import LOOPBACK_HOST, loopback_only

    if ray.is_initialized():  # pragma: no cover - another module left a session behind
        ray.shutdown()
    with pytest.MonkeyPatch.context() as mp, loopback_only():
        mp.delenv("RAY_ADDRESS", raising=False)  # start our own, never join an ambient cluster
        ray.init(num_cpus=2, include_dashboard=False, _node_ip_address=LOOPBACK_HOST, log_to_driver=False)
    assert ray.get_runtime_context().gcs_address.startswith("127.0.0.1:")
    yield ray
    ray.shutdown()
