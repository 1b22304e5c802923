"""A throw-away multi-node Ray cluster on this one machine, with token auth on.

Command line (``cluster/local.sh`` and ``raydp cluster`` are thin wrappers around it)::

    python -m raydp.local_cluster up [WORKERS]    start a head node + WORKERS (default 1) worker nodes
    python -m raydp.local_cluster up 2 --netns    the same, each node on its own network (root; below)
    python -m raydp.local_cluster status          `ray status` for our cluster + the recorded processes
    python -m raydp.local_cluster env             print `export ...` lines for a client shell (contains the token)
    python -m raydp.local_cluster exec -- CMD     run CMD as a client (with --netns: in the head's namespace)
    python -m raydp.local_cluster cut I           take node I (1-based worker, or "head") off the network (--netns)
    python -m raydp.local_cluster restore I       put it back on
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
recorded in ``$RAYDP_CLUSTER_DIR/nodes``. ``down`` and ``kill-worker`` stop that session's processes
(:mod:`~raydp.local_cluster.procs`: SIGTERM, then SIGKILL after RAYDP_STOP_GRACE seconds;
kill-worker: SIGKILL at once). ``ray stop`` is deliberately NOT used: it kills every Ray process on the
machine, including e.g. a test's ``ray.init()``.

Environment (all optional; command line / :meth:`LocalCluster.from_env`)::

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

State ($RAYDP_CLUSTER_DIR, mode 0700): see :mod:`~raydp.local_cluster.state`. The Ray temp dir is
deleted by ``down`` if ``up`` created it; otherwise only this cluster's session dir in it.

Token auth (Ray >= 2.52): servers and clients read RAY_AUTH_MODE=token and the token from
RAY_AUTH_TOKEN, else the file named by RAY_AUTH_TOKEN_PATH, else ~/.ray/auth_token.
A client needs BOTH RAY_AUTH_MODE=token and the token: with the token alone it sends nothing.

Addresses (RAYDP_LOOPBACK=1, the default): see :mod:`raydp.engine.loopback`. With
RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 GCS, raylets, object managers and agents bind and advertise
127.0.0.1 only. `ray start --address` (a worker node) refuses to run with that setting, so worker
nodes are started through the ``_ray-start-worker`` helper (:mod:`~raydp.local_cluster.helpers`),
which passes that one guard and pins the node
IP in its own process; their child processes still see the variable = 0.
CLIENTS MUST ALSO SET RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 (env.sh / `env` do): without it
ray.init(address="127.0.0.1:PORT") and `ray status` rewrite the address to the primary interface,
where nothing listens, and hang (~2 min) before failing. `ray job submit` (HTTP) does not care.

Namespace mode (``up --netns``, root only): a rehearsal of a cluster of separate machines. Every node
runs in a network namespace of its own with an address of its own in 198.18.0.0/15 (RFC 2544's
benchmarking range): the head at 198.18.S.1, workers at .2, .3, ..., joined by a Linux bridge on which
this machine's root namespace has 198.18.S.254 (:mod:`~raydp.local_cluster.net`). Nodes reach each
other only over those links, so a node can be lost the way a machine is lost::

    raydp cluster up 2 --netns                # head 198.18.0.1, workers .2 and .3 (the first free /24)
    raydp cluster exec -- raydp estimate --target raydp.targets:svm \\
        --oracle raydp.oracles:svm_two_class --n 1000 --m 1500 --gamma 0.05 --backend ray
    raydp cluster cut 1                       # worker1's link down: its packets are dropped, nothing reset
    raydp cluster restore 1                   # back, its connections intact if Ray has not given up
    raydp cluster status                      # processes, addresses, links (up / cut), `ray status`
    raydp cluster down                        # processes, namespaces, veths, bridge, temp dirs: all gone

Ports are Ray's own (GCS 6379, dashboard 8265), as no node shares a network. What runs where:

* a *driver* (``ray.init``, ``raydp estimate --backend ray``, a job script) must run in the head's
  namespace, which ``exec`` does (``ip netns exec rdpXXXXXX-head``, with RAY_ADDRESS and the token set).
  Ray attaches a driver to a raylet of its own machine (found among the local processes) and takes
  that node's address as its own; workers call the driver back there, to fetch what it put in the
  object store and to return results. From the root namespace that address is not the driver's own:
  it connects, tiny tasks even succeed, and a real run hangs. In the head's namespace it is its own,
  as for a driver on a cluster's head machine;
* ``ray job submit`` (HTTP to the dashboard at 198.18.S.1:8265) and ``ray status`` (the GCS) work from
  the root namespace, through the bridge: ``source env.sh`` and go.

What a cut looks like: the node's TCP connections neither close nor reset. Ray's GCS marks it dead
after about a minute of missed health checks, and to Ray alone a task that was running there fails
only when the connection's keepalive gives up, minutes later (how raydp's Ray backend does not wait
for that: :mod:`raydp.engine.ray`). A cut of a few seconds is invisible to Ray: the connections
resume. Kernels without netem cannot add latency; ``tc qdisc ... tbf`` on a node's veth still limits
its bandwidth.

Names begin with ``rdpXXXXXX`` (a random id per cluster): namespaces ``rdpXXXXXX-head``,
``rdpXXXXXX-worker1``, ...; veths ``rdpXXXXXXv0``, ...; the bridge ``rdpXXXXXXbr``; Ray's temp dirs
``/tmp/raydp-XXXXXX/NODE``. The id is in the state dir (``netns``) before anything is made, so a
``down`` after any failure finds everything; a failed ``up`` removes it itself. Two clusters at once
(two state dirs) get two ids and two /24s. Without root: one line, exit 2, nothing made.

The package's modules, one job each: :mod:`~raydp.local_cluster.cluster` (:class:`LocalCluster`),
:mod:`~raydp.local_cluster.procs` (the processes of a node in /proc, and stopping them),
:mod:`~raydp.local_cluster.state` (the state dir's files), :mod:`~raydp.local_cluster.net` (ports and
the namespaces' network),
:mod:`~raydp.local_cluster.helpers` (programs run in the nodes' own processes) and
:mod:`~raydp.local_cluster.command` (the command line).
"""

from .cluster import ClusterError, LocalCluster, UsageError
from .command import main
from .procs import session_pids
from .state import Node

__all__ = ["ClusterError", "LocalCluster", "Node", "UsageError", "main", "session_pids"]
