"""The one switch that keeps Ray on 127.0.0.1.

Ray 2.x rewrites a loopback ``--node-ip-address`` / ``_node_ip_address="127.0.0.1"`` to the machine's
routable address (``ray._private.services.resolve_ip_for_localhost``) and binds GCS, raylet, object
manager and agents there. It keeps 127.0.0.1 only while ``ray_constants.ENABLE_RAY_CLUSTER`` is false,
which is what the environment variable ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` sets in a fresh process.

- :func:`loopback_only` flips the constant in *this* process for the duration of a ``ray.init`` that
  starts or joins a loopback instance (the processes it starts get the node IP on their command line).
- :data:`LOOPBACK_ENV` is the same switch for *other* processes (``ray start``, a client shell, a job
  driver): put it in their environment.

Every place in raydp, its tests and its cluster tooling that needs loopback uses one of these two.
"""

from __future__ import annotations

import contextlib

LOOPBACK_HOST = "127.0.0.1"
LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


@contextlib.contextmanager
def loopback_only():
    """Within this block, Ray in this process keeps 127.0.0.1 as the node address.

    Best effort: a Ray without the private constant is left alone (and would then bind as it does).
    """
    try:
        from ray._private import ray_constants
    except Exception:  # pragma: no cover - private module moved
        yield
        return
    if not hasattr(ray_constants, "ENABLE_RAY_CLUSTER"):  # pragma: no cover
        yield
        return
    saved = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved
