"""Node helpers: small programs a local cluster runs in processes of their own.

Run by path in isolated mode (``python -I helpers.py VERB ...``): the script's own directory is then
not put on ``sys.path`` (its siblings would shadow top-level modules), and nothing of raydp is
imported — a helper process stays as small as a plain ``ray start``. Standard library and ``ray`` only.

    _ray-start-worker ARGS...                   ``ray start ARGS`` for a worker node on loopback
    _wait-nodes ADDRESS N|- exact|at-least TIMEOUT [DEAD_NODE_ID...] [--report]
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence

PATH = __file__


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


HELPERS = {"_ray-start-worker": _ray_start_worker, "_wait-nodes": _wait_nodes}


if __name__ == "__main__":
    sys.exit(HELPERS[sys.argv[1]](sys.argv[2:]) or 0)
