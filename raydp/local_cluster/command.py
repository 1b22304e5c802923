"""The command line of the local cluster (``raydp cluster``, ``python -m raydp.local_cluster``)::

    up [WORKERS] [--netns]   start a head node + WORKERS (default 1) worker nodes; --netns: each node
                             in its own network namespace on its own 198.18.x.y address (root only)
    status                   `ray status` for our cluster + the recorded processes (and links)
    env                      print `export ...` lines for a client shell (contains the token)
    exec [--] CMD...         run CMD as a client of the cluster: the token and RAY_ADDRESS set, and in
                             namespace mode inside the head's namespace (where a driver must run)
    cut I | restore I        take node I (1-based worker index, or "head") off the network / back on
                             (namespace mode)
    kill-worker I            SIGKILL worker node I (1-based) -- fault injection
    down                     stop everything `up` started and remove what it made (idempotent)

Exit status: 0 ok, 1 failed (one line on stderr), 2 usage error; ``exec``: the command's own.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from .cluster import ClusterError, LocalCluster, UsageError
from .net import NetError

__all__ = ["main", "USAGE"]

USAGE = """\
{prog} up [WORKERS] [--netns]  start a head node + WORKERS (default 1) worker nodes (--netns: root only)
{prog} status                 `ray status` for our cluster + the recorded processes
{prog} env                    print `export ...` lines for a client shell (contains the token)
{prog} exec [--] CMD...       run CMD as a client (with --netns: in the head's namespace, as a driver must)
{prog} cut I                  take node I (1-based worker index, or "head") off the network (--netns)
{prog} restore I              put node I back on the network (--netns)
{prog} kill-worker I          SIGKILL worker node I (1-based) -- fault injection
{prog} down                   stop everything `up` started and remove what it made (idempotent)"""


def _node(arg: str, prog: str, verb: str) -> int | str:
    if arg == "head":
        return arg
    if not (arg.isascii() and arg.isdigit() and not arg.startswith("0")):
        raise UsageError(f"usage: {prog} {verb} I   (I = 1-based worker index, or 'head')")
    return int(arg) - 1


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
    arity = {"up": 2, "down": 0, "status": 0, "env": 0, "kill-worker": 1, "cut": 1, "restore": 1}
    if verb not in arity and verb != "exec":
        print(USAGE.format(prog=prog))
        return 2
    try:
        if verb == "exec":
            cmd = rest[1:] if rest[:1] == ["--"] else rest
            if not cmd:
                raise UsageError(f"usage: {prog} exec [--] CMD [ARGS...]")
            cluster = LocalCluster.from_env(prog=prog)
            cluster.env_sh()  # ClusterError when no cluster is recorded
            if cluster.netns_on() and os.geteuid() != 0:
                raise UsageError("exec into a node's network namespace needs root")
            full = cluster.client_command(cmd)
            sys.stdout.flush()
            os.execvpe(full[0], full, cluster.env)  # the command's exit status is exec's
        netns = verb == "up" and "--netns" in rest
        if netns:
            rest = [a for a in rest if a != "--netns"]
        if len(rest) > arity[verb] - (verb == "up"):
            raise UsageError(f"too many arguments for '{verb}': {' '.join(rest)}")
        if verb == "up":
            w = rest[0] if rest else "1"
            if not w.isdigit() or not w.isascii():
                raise UsageError(f"WORKERS must be a non-negative integer, got '{w}'")
            cluster = LocalCluster.from_env(int(w), prog=prog, netns=netns)
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
        if verb in ("cut", "restore"):
            node = _node(i, prog, verb)
            what = cluster.cut(node) if verb == "cut" else cluster.restore(node)
            print(f"{tag}: {what}: link {'down (cut)' if verb == 'cut' else 'up (restored)'}", file=sys.stderr)
            return 0
        if not (i.isascii() and i.isdigit() and not i.startswith("0")):
            raise UsageError(f"usage: {prog} kill-worker I   (I = 1-based worker index)")
        pgid = cluster.kill_worker(int(i) - 1)
        print(f"{tag}: killed worker{i} (process group {pgid})", file=sys.stderr)
        return 0
    except UsageError as e:
        print(f"{tag}: {e}", file=sys.stderr)
        return 2
    except (ClusterError, NetError, OSError) as e:  # OSError: e.g. a state dir we may not write
        print(f"{tag}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{tag}: interrupted", file=sys.stderr)
        return 130
