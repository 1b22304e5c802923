"""The command line of the local cluster (``raydp cluster``, ``python -m raydp.local_cluster``).

    up [WORKERS]     start a head node + WORKERS (default 1) worker nodes
    status           `ray status` for our cluster + the recorded processes
    env              print `export ...` lines for a client shell (contains the token)
    kill-worker I    SIGKILL worker node I (1-based) -- fault injection
    down             stop everything `up` started (idempotent)

Exit status: 0 ok, 1 failed (one line on stderr), 2 usage error.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from .cluster import ClusterError, LocalCluster, UsageError

__all__ = ["main", "USAGE"]

USAGE = """\
{prog} up [WORKERS]     start a head node + WORKERS (default 1) worker nodes
{prog} status           `ray status` for our cluster + the recorded processes
{prog} env              print `export ...` lines for a client shell (contains the token)
{prog} kill-worker I    SIGKILL worker node I (1-based) -- fault injection
{prog} down             stop everything `up` started (idempotent)"""


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module docstring); returns the exit code: 0 ok, 1 failed,
    2 usage error. Errors are one line on stderr. ``--prog NAME`` (first) names the program in
    messages (cluster/local.sh passes its own path)."""
    args = list(sys.argv[1:] if argv is None else argv)
    prog = "python -m raydp.local_cluster"
    if len(args) >= 2 and args[0] == "--prog":
        prog, args = args[1], args[2:]
    tag = os.path.basename(prog.split()[-1])
    verb, rest = (args[0], args[1:]) if args else ("", [])
    if verb in ("-h", "--help", "help"):
        print(USAGE.format(prog=prog))
        return 0
    arity = {"up": 1, "down": 0, "status": 0, "env": 0, "kill-worker": 1}
    if verb not in arity:
        print(USAGE.format(prog=prog))
        return 2
    try:
        if len(rest) > arity[verb]:
            raise UsageError(f"too many arguments for '{verb}': {' '.join(rest)}")
        if verb == "up":
            w = rest[0] if rest else "1"
            if not w.isdigit() or not w.isascii():
                raise UsageError(f"WORKERS must be a non-negative integer, got '{w}'")
            cluster = LocalCluster.from_env(int(w), prog=prog)
            cluster.up()
            print(cluster.summary(), flush=True)
            return 0
        cluster = LocalCluster.from_env(prog=prog)
        if verb == "down":
            print(cluster.down(), flush=True)
            return 0
        if verb == "status":
            return cluster.status()
        if verb == "env":
            sys.stdout.write(cluster.env_sh())
            return 0
        i = rest[0] if rest else ""
        if not (i.isascii() and i.isdigit() and not i.startswith("0")):
            raise UsageError(f"usage: {prog} kill-worker I   (I = 1-based worker index)")
        pgid = cluster.kill_worker(int(i) - 1)
        print(f"{tag}: killed worker{i} (process group {pgid})", file=sys.stderr)
        return 0
    except UsageError as e:
        print(f"{tag}: {e}", file=sys.stderr)
        return 2
    except (ClusterError, OSError) as e:  # OSError: e.g. a state dir we may not write
        print(f"{tag}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{tag}: interrupted", file=sys.stderr)
        return 130
