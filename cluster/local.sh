#!/usr/bin/env bash
# A throw-away multi-node Ray cluster on this one machine, with token auth on.
#
#   cluster/local.sh up [WORKERS]     start a head node + WORKERS (default 1) worker nodes
#   cluster/local.sh up 2 --netns     the same, each node in its own network namespace (root only)
#   cluster/local.sh status           `ray status` for our cluster + the recorded processes
#   cluster/local.sh env              print `export ...` lines for a client shell (contains the token)
#   cluster/local.sh exec -- CMD      run CMD as a client (--netns: in the head's namespace, as a driver must)
#   cluster/local.sh cut I            take node I (1-based worker, or "head") off the network (--netns)
#   cluster/local.sh restore I        put it back on
#   cluster/local.sh kill-worker I    SIGKILL worker node I (1-based) -- fault injection
#   cluster/local.sh down             stop everything `up` started (idempotent)
#
# A thin wrapper around `python -m raydp.local_cluster` (the package raydp/local_cluster/), whose docstring
# lists every RAYDP_* setting, the state files, token auth and loopback. Python: $RAYDP_PYTHON,
# else the one next to `ray` on PATH (the same venv), else python3.
set -euo pipefail
PY="${RAYDP_PYTHON:-}"
if [[ -z "$PY" ]]; then
    RAY_CLI="$(command -v ray || true)"
    if [[ -n "$RAY_CLI" && -x "$(dirname "$RAY_CLI")/python" ]]; then PY="$(dirname "$RAY_CLI")/python"; else PY=python3; fi
fi
exec "$PY" -m raydp.local_cluster --prog "$0" "$@"
