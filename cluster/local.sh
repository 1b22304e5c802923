#!/usr/bin/env bash
# A throw-away multi-node Ray cluster on this one machine, with token auth on.
#
#   cluster/local.sh up [WORKERS]     start a head node + WORKERS (default 1) worker nodes
#   cluster/local.sh status           `ray status` for our cluster + the recorded processes
#   cluster/local.sh env              print `export ...` lines for a client shell (contains the token)
#   cluster/local.sh kill-worker I    SIGKILL worker node I (1-based) -- fault injection
#   cluster/local.sh down             stop everything `up` started (idempotent)
#
# Every node is a separate `ray start` (own raylet, object store, agents) in its own
# session (setsid), so `down` and `kill-worker` signal exactly the processes of our
# cluster -- by recorded session id -- and never touch other Ray instances on the
# machine. (`ray stop` is deliberately NOT used: it kills every Ray process on the
# machine, including e.g. a test's `ray.init()`.)
#
# Environment (all optional):
#   RAYDP_CLUSTER_DIR          state dir (default $HOME/.raydp/local-cluster)
#   RAYDP_PORT                 GCS port (default 6390; not Ray's 6379, to stay clear of ray.init)
#   RAYDP_DASHBOARD_PORT       dashboard / job-submission HTTP port (default 8265)
#   RAYDP_CLIENT_PORT          Ray Client server port (default RAYDP_PORT+1)
#   RAYDP_CPUS_PER_NODE        --num-cpus of every node (default 1)
#   RAYDP_OBJECT_STORE_BYTES   --object-store-memory of every node (default 200000000)
#   RAYDP_RAY_TEMP_DIR         Ray --temp-dir (default $RAYDP_CLUSTER_DIR/ray, or /tmp/raydp-ray-PORT
#                              when that path is too long for Unix socket names)
#   RAYDP_UP_TIMEOUT           seconds to wait for all nodes to register (default 90)
#   RAYDP_STOP_GRACE           seconds between SIGTERM and SIGKILL in `down` (default 3)
#   RAYDP_KEEP_LOGS=1          `down` keeps the Ray temp dir (logs) instead of deleting it
#   RAY_AUTH_TOKEN             use this token instead of generating/reusing $RAYDP_CLUSTER_DIR/token
#   RAYDP_RAY                  the `ray` CLI to use (default: `ray` on PATH)
#   RAYDP_LOOPBACK             1 (default): every node advertises and binds 127.0.0.1 (see below);
#                              0: Ray's stock behaviour (advertise the primary interface address)
# Any other RAY_* variables (e.g. RAY_health_check_period_ms) are passed through to the nodes.
#
# Token auth (Ray >= 2.52): servers and clients read RAY_AUTH_MODE=token and the token from
# RAY_AUTH_TOKEN, else the file named by RAY_AUTH_TOKEN_PATH, else ~/.ray/auth_token.
# A client needs BOTH RAY_AUTH_MODE=token and the token: with the token alone it sends nothing.
#
# Addresses (RAYDP_LOOPBACK=1, the default): on Linux Ray rewrites a loopback --node-ip-address /
# --address to the host's primary interface address (ray._private.services.
# resolve_ip_for_localhost) unless RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, which makes
# get_node_ip_address() return 127.0.0.1; with it GCS, raylets, object managers and agents bind
# and advertise 127.0.0.1 only. `ray start --address` (a worker node) refuses to run when that
# variable is 0, so worker nodes are started through a tiny wrapper that passes that one guard and
# pins the node IP to 127.0.0.1; their child processes still see the variable = 0.
# CLIENTS MUST ALSO SET RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 (env.sh / `local.sh env` do): without
# it ray.init(address="127.0.0.1:PORT") and `ray status` rewrite the address to the primary
# interface, where nothing listens, and hang (~2 min) before failing. `ray job submit` (HTTP to the
# dashboard) does not care.
set -euo pipefail

STATE="${RAYDP_CLUSTER_DIR:-$HOME/.raydp/local-cluster}"
PORT="${RAYDP_PORT:-6390}"
DASH_PORT="${RAYDP_DASHBOARD_PORT:-8265}"
CLIENT_PORT="${RAYDP_CLIENT_PORT:-$((PORT + 1))}"
CPUS="${RAYDP_CPUS_PER_NODE:-1}"
OBJ_BYTES="${RAYDP_OBJECT_STORE_BYTES:-200000000}"
UP_TIMEOUT="${RAYDP_UP_TIMEOUT:-90}"
STOP_GRACE="${RAYDP_STOP_GRACE:-3}"
LOOPBACK="${RAYDP_LOOPBACK:-1}"
HOST=127.0.0.1
ADDRESS="$HOST:$PORT"
DASHBOARD="http://$HOST:$DASH_PORT"

die() { echo "local.sh: $*" >&2; exit 1; }
log() { echo "local.sh: $*" >&2; }

find_ray() {
    RAY="${RAYDP_RAY:-$(command -v ray || true)}"
    [[ -n "$RAY" && -x "$RAY" ]] || die "no 'ray' CLI found (activate the venv or set RAYDP_RAY)"
    # The python that belongs to that ray CLI (same venv).
    if [[ -x "$(dirname "$RAY")/python" ]]; then PY="$(dirname "$RAY")/python"; else PY="$(command -v python3)"; fi
}

ray_temp_dir() {
    if [[ -n "${RAYDP_RAY_TEMP_DIR:-}" ]]; then echo "$RAYDP_RAY_TEMP_DIR"; return; fi
    # Unix socket paths are limited to 107 bytes; Ray adds
    # "/session_YYYY-MM-DD_HH-MM-SS_UUUUUU_PID/sockets/plasma_store.N" (~65 bytes).
    local d="$STATE/ray"
    if (( ${#d} > 40 )); then d="/tmp/raydp-ray-$PORT"; fi
    echo "$d"
}

port_in_use() {  # true if something accepts TCP connections on 127.0.0.1:$1
    (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null
}

load_token() {
    # Sets TOKEN. Precedence: RAY_AUTH_TOKEN env > existing $STATE/token > new random token.
    mkdir -p "$STATE"; chmod 700 "$STATE"
    if [[ -n "${RAY_AUTH_TOKEN:-}" ]]; then
        TOKEN="$RAY_AUTH_TOKEN"
        (umask 077; printf '%s\n' "$TOKEN" > "$STATE/token")
    elif [[ -s "$STATE/token" ]]; then
        TOKEN="$(head -n1 "$STATE/token")"
    else
        TOKEN="$("$PY" -c 'import secrets; print(secrets.token_hex(32))')"
        (umask 077; printf '%s\n' "$TOKEN" > "$STATE/token")
    fi
    chmod 600 "$STATE/token"
    set_client_env
}

read_token() {  # for status/down/env: token of the running cluster
    if [[ -s "$STATE/token" ]]; then TOKEN="$(head -n1 "$STATE/token")"; else TOKEN="${RAY_AUTH_TOKEN:-}"; fi
    set_client_env
}

set_client_env() {  # CLIENT_ENV: what a node or a client process needs to talk to our cluster
    CLIENT_ENV=(RAY_AUTH_MODE=token "RAY_AUTH_TOKEN=$TOKEN")
    if [[ "$LOOPBACK" == 1 ]]; then CLIENT_ENV+=(RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0); fi
}

# --- process bookkeeping -----------------------------------------------------------------
# $STATE/nodes has one line per node: "<name> <sid> <raylet_pid> <node_id>"
# (name = head, worker1, worker2, ...). sid = session id of that node's `ray start`.

# PIDs in the given sessions (only processes whose command line mentions "ray", to be safe
# against PID reuse) plus all their descendants (e.g. job drivers, which Ray runs in a
# session of their own).
pids_of_sessions() {
    [[ $# -gt 0 ]] || return 0
    local table roots="" pid sid
    table="$(ps -eo pid=,ppid=,sid=)"
    while read -r pid sid; do
        [[ "$pid" == "$$" ]] && continue
        if grep -qia ray "/proc/$pid/cmdline" 2>/dev/null; then
            roots+="$pid "
        fi
    done < <(awk -v sids="$*" 'BEGIN { n = split(sids, a, " "); for (i = 1; i <= n; i++) S[a[i]] = 1 }
                               ($3 in S) { print $1, $3 }' <<< "$table")
    [[ -n "$roots" ]] || return 0
    awk -v roots="$roots" -v self="$$" '
        BEGIN { n = split(roots, a, " "); for (i = 1; i <= n; i++) K[a[i]] = 1 }
        { pid[NR] = $1; pp[NR] = $2 }
        END {
            do { ch = 0
                 for (i = 1; i <= NR; i++) if (!(pid[i] in K) && (pp[i] in K)) { K[pid[i]] = 1; ch = 1 }
            } while (ch)
            for (p in K) if (p != self) print p
        }' <<< "$table"
}

kill_sessions() {  # kill_sessions GRACE SID...   (GRACE=0: SIGKILL at once)
    local grace="$1"; shift
    local pids; pids="$(pids_of_sessions "$@")"
    [[ -n "$pids" ]] || return 0
    if (( grace > 0 )); then
        # shellcheck disable=SC2086
        kill -TERM $pids 2>/dev/null || true
        local deadline=$((SECONDS + grace))
        while (( SECONDS < deadline )); do
            pids="$(pids_of_sessions "$@")"
            [[ -n "$pids" ]] || return 0
            sleep 0.2
        done
    fi
    pids="$(pids_of_sessions "$@")"
    # shellcheck disable=SC2086
    [[ -z "$pids" ]] || kill -KILL $pids 2>/dev/null || true
    local i
    for i in $(seq 50); do [[ -z "$(pids_of_sessions "$@")" ]] && return 0; sleep 0.1; done
    log "warning: still alive after SIGKILL: $(pids_of_sessions "$@" | tr '\n' ' ')"
}

recorded_sids() { [[ -f "$STATE/nodes" ]] && awk '{print $2}' "$STATE/nodes" | tr '\n' ' ' || true; }

# Start one node: start_node NAME ray-start-args...
start_node() {
    local name="$1"; shift
    local sidfile="$STATE/$name.sid" logf="$STATE/logs/$name.log"
    rm -f "$sidfile"
    local ray_start=("$RAY" start)
    if [[ "$LOOPBACK" == 1 && "$name" != head ]]; then
        # `ray start --address` aborts when RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0; pass that guard
        # in this one process and pin the node IP instead (children keep the variable = 0).
        ray_start=("$PY" -c 'import sys
import ray._private.ray_constants as c, ray._private.services as s
c.ENABLE_RAY_CLUSTER = True
s.get_node_ip_address = lambda address=None: "127.0.0.1"
from ray.scripts.scripts import main
sys.argv[0] = "ray"
sys.exit(main())' start)
    fi
    # setsid + exec: the session id of every process of this node is the PID written here.
    if ! setsid bash -c 'echo $$ > "$1"; shift; exec "$@"' _ "$sidfile" \
            env -u RAY_ADDRESS -u RAY_API_SERVER_ADDRESS -u RAY_AUTH_TOKEN_PATH \
                "${CLIENT_ENV[@]}" RAY_USAGE_STATS_ENABLED=0 \
            "${ray_start[@]}" "$@" --disable-usage-stats >"$logf" 2>&1 </dev/null; then
        local sid; sid="$(cat "$sidfile" 2>/dev/null || true)"
        [[ -n "$sid" ]] && echo "$name $sid - -" >> "$STATE/nodes"
        log "'ray start' for $name failed; last lines of $logf:"
        tail -n 25 "$logf" >&2
        return 1
    fi
    local sid; sid="$(cat "$sidfile")"
    local raylet="" i
    for i in $(seq 100); do
        raylet="$(ps -eo pid=,sid=,comm= | awk -v s="$sid" '$2 == s && $3 == "raylet" {print $1; exit}')"
        [[ -n "$raylet" ]] && break
        sleep 0.1
    done
    if [[ -z "$raylet" ]]; then
        echo "$name $sid - -" >> "$STATE/nodes"
        log "no raylet found for $name (see $logf)"
        return 1
    fi
    local node_id
    node_id="$(tr '\0' '\n' < "/proc/$raylet/cmdline" | sed -n 's/^--node_id=//p' | head -n1)"
    echo "$name $sid $raylet ${node_id:--}" >> "$STATE/nodes"
}

wait_for_nodes() {  # wait_for_nodes N: until N alive nodes are registered in the GCS
    env "${CLIENT_ENV[@]}" "$PY" - "$ADDRESS" "$1" "$UP_TIMEOUT" <<'EOF'
import sys, time, logging
import ray
address, want, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
deadline = time.time() + timeout
while True:
    alive = [n for n in ray.nodes() if n["Alive"]]
    if len(alive) >= want:
        break
    if time.time() > deadline:
        sys.exit(f"only {len(alive)}/{want} nodes alive after {timeout:.0f}s")
    time.sleep(0.25)
print(f"{len(alive)} nodes alive; resources: {ray.cluster_resources()}", file=sys.stderr)
EOF
}

write_env_files() {
    (umask 077; cat > "$STATE/env.sh" <<EOF
# source this file to talk to the local raydp Ray cluster (contains the auth token)
export RAY_AUTH_MODE=token
export RAY_AUTH_TOKEN='$TOKEN'
export RAY_ADDRESS='$ADDRESS'
export RAY_API_SERVER_ADDRESS='$DASHBOARD'
$( [[ "$LOOPBACK" == 1 ]] && echo "export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0" )
EOF
)
    cat > "$STATE/cluster.env" <<EOF
ADDRESS=$ADDRESS
DASHBOARD=$DASHBOARD
PORT=$PORT
DASHBOARD_PORT=$DASH_PORT
CLIENT_PORT=$CLIENT_PORT
CPUS_PER_NODE=$CPUS
WORKERS=$1
RAY_TEMP_DIR=$2
RAY_TEMP_DIR_OURS=$3
TOKEN_FILE=$STATE/token
LOOPBACK=$LOOPBACK
EOF
}

cluster_alive() { [[ -n "$(pids_of_sessions $(recorded_sids))" ]]; }

cmd_up() {
    local workers="${1:-1}"
    [[ "$workers" =~ ^[0-9]+$ ]] || die "WORKERS must be a non-negative integer, got '$workers'"
    find_ray
    mkdir -p "$STATE/logs"; chmod 700 "$STATE"
    if [[ -f "$STATE/nodes" ]]; then
        if cluster_alive; then
            die "a cluster recorded in $STATE is still running; run '$0 down' first"
        fi
        log "removing stale state of a cluster that is no longer running"
        rm -f "$STATE/nodes" "$STATE/cluster.env" "$STATE/env.sh" "$STATE"/*.sid
    fi
    local p
    for p in "$PORT" "$DASH_PORT" "$CLIENT_PORT"; do
        port_in_use "$p" && die "port $p on $HOST is already in use (set RAYDP_PORT / RAYDP_DASHBOARD_PORT / RAYDP_CLIENT_PORT)"
    done
    load_token
    local tmp tmp_ours=0; tmp="$(ray_temp_dir)"
    [[ -e "$tmp" ]] || tmp_ours=1   # `down` deletes the whole temp dir only if `up` created it
    mkdir -p "$tmp"
    : > "$STATE/nodes"
    write_env_files "$workers" "$tmp" "$tmp_ours"

    local t0=$SECONDS
    local common=(--node-ip-address="$HOST" --num-cpus="$CPUS" --num-gpus=0
                  --object-store-memory="$OBJ_BYTES" --dashboard-agent-listen-port=0)
    if ! start_node head --head --port="$PORT" --temp-dir="$tmp" \
            --dashboard-host="$HOST" --dashboard-port="$DASH_PORT" \
            --ray-client-server-port="$CLIENT_PORT" "${common[@]}"; then
        cmd_down_quiet; exit 1
    fi
    # our session dir inside the temp dir (what `down` deletes when the temp dir is not ours)
    echo "RAY_SESSION_DIR=$(readlink -f "$tmp/session_latest")" >> "$STATE/cluster.env"
    local i
    for i in $(seq 1 "$workers"); do
        # Worker nodes on the same host share the head's temp/session dir (Ray picks distinct
        # socket names raylet.N / plasma_store.N); node-manager, object-manager, agent and
        # metrics ports are all random (0), worker ports come from Ray's default range.
        if ! start_node "worker$i" --address="$ADDRESS" --include-log-monitor=False "${common[@]}"; then
            cmd_down_quiet; exit 1
        fi
    done
    if ! wait_for_nodes $((workers + 1)); then
        log "nodes did not come up; logs in $STATE/logs and $tmp/session_latest/logs"
        cmd_down_quiet; exit 1
    fi
    log "up in $((SECONDS - t0))s"

    cat <<EOF
Ray cluster up: 1 head + $workers worker node(s), $CPUS CPU(s) each, token auth on.
  GCS address : $ADDRESS
  dashboard   : $DASHBOARD   (job API; every request needs 'Authorization: Bearer <token>')
  token file  : $STATE/token   (mode 0600)
  nodes       : $STATE/nodes   (name sid raylet_pid node_id)
  logs        : $tmp/session_latest/logs

Submit a job (a client needs BOTH RAY_AUTH_MODE=token and the token):
  RAY_AUTH_MODE=token RAY_AUTH_TOKEN="\$(cat $STATE/token)" ray job submit --address $DASHBOARD --working-dir . -- python jobs/svm_sensitivity.py
or
  source $STATE/env.sh && ray job submit --working-dir . -- python jobs/svm_sensitivity.py
Connect a driver (env.sh sets RAY_ADDRESS and the auth variables$( [[ "$LOOPBACK" == 1 ]] && echo ", plus RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 which loopback needs" )):
  source $STATE/env.sh && python -c "import ray; ray.init(); print(ray.cluster_resources())"
Status / stop:     $0 status  |  $0 down
EOF
}

cmd_status() {
    find_ray
    [[ -f "$STATE/nodes" ]] || { echo "no local cluster recorded in $STATE"; return 1; }
    read_token
    echo "recorded nodes ($STATE/nodes: name sid raylet_pid node_id alive):"
    local name sid raylet node_id
    while read -r name sid raylet node_id; do
        local alive=no
        # (a SIGKILLed process may linger as a zombie until init reaps it: empty cmdline)
        [[ "$raylet" != "-" ]] && grep -qa . "/proc/$raylet/cmdline" 2>/dev/null && alive=yes
        echo "  $name $sid $raylet $node_id $alive"
    done < "$STATE/nodes"
    echo
    env "${CLIENT_ENV[@]}" "$RAY" status --address "$ADDRESS"
}

cmd_env() {
    [[ -f "$STATE/env.sh" ]] || die "no local cluster recorded in $STATE"
    cat "$STATE/env.sh"
}

cmd_kill_worker() {
    local i="${1:-}"
    [[ "$i" =~ ^[1-9][0-9]*$ ]] || die "usage: $0 kill-worker I   (I = 1-based worker index)"
    [[ -f "$STATE/nodes" ]] || die "no local cluster recorded in $STATE"
    local sid; sid="$(awk -v n="worker$i" '$1 == n {print $2}' "$STATE/nodes")"
    [[ -n "$sid" ]] || die "no worker$i recorded in $STATE/nodes"
    kill_sessions 0 "$sid"
    log "killed worker$i (session $sid)"
}

cmd_down_quiet() { RAYDP_KEEP_LOGS=1 cmd_down >/dev/null 2>&1 || true; }  # after a failed up: keep logs

cmd_down() {
    local sids; sids="$(recorded_sids)"
    if [[ -z "${sids// /}" ]]; then
        echo "local.sh: no running cluster recorded in $STATE (nothing to do)"
        return 0
    fi
    local t0=$SECONDS
    # shellcheck disable=SC2086
    kill_sessions "$STOP_GRACE" $sids
    if [[ -f "$STATE/cluster.env" && "${RAYDP_KEEP_LOGS:-0}" != 1 ]]; then
        local tmp ours session
        tmp="$(sed -n 's/^RAY_TEMP_DIR=//p' "$STATE/cluster.env")"
        ours="$(sed -n 's/^RAY_TEMP_DIR_OURS=//p' "$STATE/cluster.env")"
        session="$(sed -n 's/^RAY_SESSION_DIR=//p' "$STATE/cluster.env")"
        if [[ "$ours" == 1 && -n "$tmp" && -d "$tmp" ]]; then
            rm -rf "$tmp"
        elif [[ -n "$session" && "$session" == "$tmp"/session_* && -d "$session" ]]; then
            rm -rf "$session"
            [[ "$(readlink -f "$tmp/session_latest" 2>/dev/null)" == "$session" ]] && rm -f "$tmp/session_latest"
            local port; port="$(sed -n 's/^PORT=//p' "$STATE/cluster.env")"
            grep -qs ":$port\$" "$tmp/ray_current_cluster" && rm -f "$tmp/ray_current_cluster"
        fi
    fi
    rm -f "$STATE/nodes" "$STATE/cluster.env" "$STATE/env.sh" "$STATE"/*.sid
    echo "local.sh: cluster in $STATE stopped in $((SECONDS - t0))s (token kept in $STATE/token)"
}

usage() {
    sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
}

case "${1:-}" in
    up) shift; cmd_up "$@" ;;
    down) cmd_down ;;
    status) cmd_status ;;
    env) cmd_env ;;
    kill-worker) shift; cmd_kill_worker "$@" ;;
    *) usage ;;
esac
