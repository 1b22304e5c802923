"""Ray backend: the same block function as the local backend, as Ray tasks.

Map: one task per group of consecutive blocks; the :class:`~raydp.engine.blocks.PairJob` (oracle,
target, mechanism) is put in the object store once and passed by reference. The driver keeps a
bounded number of tasks in flight with ``ray.wait`` and yields results as they finish. When only Δ̂
is needed, each task compacts its blocks to their m − k + 1 largest values before returning (the
first level of the reduce tree); the driver merges those (the second level).

Faults: Ray retries a task whose worker died (``max_retries``); application errors are not
retried (they are deterministic). A task lost for good raises :class:`raydp.errors.EngineError`;
the run never finishes with fewer than m pairs.

Hanging targets: with ``task_timeout`` (seconds) a task that has not returned that long after it
was submitted is cancelled with ``force=True`` (Ray kills its worker, which stops even a target
stuck in C code) and every pair of its blocks counts as a failure, G = +∞, kind "task timed out"
— unless a backup copy of the task (below) still runs: then that copy decides. Failures only raise
Δ̂, so this is safe; it is never a stuck job. The clock starts at submission, so with a timeout the
driver keeps at most one task per CPU slot in flight (no task waits in a queue while its clock
runs). For a finer grain use ``pair_timeout`` (per pair, in the worker).

Lost hosts. A node that stops answering without closing its connections (a cut link, a frozen
machine) is invisible to Ray for minutes: its GCS marks the node dead after ~65 s of missed health
checks, a task running there fails only when the connection's keepalive gives up (~7 min
measured), and Ray's scheduler, which still counts the node's last report of free resources, sends
it requests for workers that never return, so tasks queued meanwhile wait too (measured: ~2.5 min,
with two other nodes idle). Block results are deterministic — a block's G depends only on (seed,
block size, index) — so a second copy of a task is always safe. With ``backup_tasks`` (on by
default when the cluster has more than one node) the driver starts a copy of a task on another node
when

- the task has run :data:`~raydp.engine.grouping.BACKUP_FACTOR` times what its blocks are expected
  to take (the running mean of block seconds) plus :data:`~raydp.engine.grouping.BACKUP_SLACK`
  seconds (:class:`~raydp.engine.grouping.Deadlines`), or it was never seen running that long after
  its submission (plus :data:`UNSEEN_SECONDS` for a worker's start, unless a node already looks
  lost): it may be waiting for a worker from the silent node; or
- Ray marks its node dead (every task never seen running is started again too).

When tasks wait for a worker that long and no node is known to be lost, the driver greets every
node's raylet (an HTTP/2 handshake, :data:`PROBE_SECONDS`); one that does not answer is lost too.
Such a node is *suspect*: from then on every new task and copy is sent to a node named by the
driver (node affinity, the node with the fewest of the run's tasks per slot), as a new function for
Ray (:func:`_tracked`'s epoch: its own queue and worker requests), until a task finishes on the
suspect node again. The first copy to finish is yielded, once per group, so the reducer and the
store see every block exactly once; a later copy's result is compared with it and dropped. A task
whose copies all fail is lost as before. To know where a task runs, a tracked task writes one key
to Ray's internal key-value store when it starts and deletes it when it ends (:func:`_tracked`).
These are the backup tasks of Dean & Ghemawat, "MapReduce: Simplified Data Processing on Large
Clusters" (OSDI 2004), used for stragglers at any point of a run; copying the last wave's tasks
onto idle slots, as that paper does, did not pay on the 64-slot simulated cluster and is off
(:data:`LAST_WAVE_FACTOR`).

Never silent: about once a second the driver polls the nodes and the task starts and gives the
progress display (:mod:`raydp.engine.progress`) a heartbeat: while nothing comes back it still
prints, and says how many blocks are outstanding, on which hosts, for how long; a host Ray marks
dead gets one line naming it and saying what is redone. Ray's own driver lines (worker output,
"(raylet) ... marked dead", "Task ... will be retried") go to stderr, never to stdout
(:func:`_ray_lines_to_stderr`).

:meth:`RayBackend.imap` is the generic part (a function over groups of items, one shared object put
once, bounded tasks in flight, errors unwrapped); the sampler's blocks and the baselines'
sample-and-aggregate both run through it.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from ..errors import EngineError, InvalidArgumentError, TargetError
from ..validation import check_int, check_real
from . import progress as _progress
from .blocks import BlockResult, PairJob, check_timeout
from .grouping import Deadlines, FixedGroups, GuidedGroups, task_seconds
from .protocol import Backend
from .reach import DEFAULT_CONNECT_TIMEOUT, check_reachable
from .loopback import LOOPBACK_HOST, loopback_only

_remote_cache: dict = {}
log = logging.getLogger("raydp.engine")

# How often the driver looks at what it has not heard from (nodes, task starts, deadlines, heartbeat).
WATCH_SECONDS = 1.0
# The original and at most two backup copies of a task.
MAX_COPIES = 3
# How long a node's raylet may take to answer the driver's greeting before the node counts as silent,
# and how often the driver asks (only while tasks wait for a worker and no node is known to be lost).
PROBE_SECONDS = 2.0
PROBE_EVERY = 10.0
# A task never seen running gets this much longer than its deadline (a worker's start on a loaded
# host) before it counts as stuck on its way to a node that does not answer — unless a node already
# looks lost (a task of it late, or Ray marked it dead): the tasks queued for it do not start either.
UNSEEN_SECONDS = 10.0
# Backup copies for the last wave (the MapReduce rule: once nothing is left to hand out, copy the
# tasks still running on idle slots), here those past this many times their expected time. None: off —
# on the 64-slot simulated cluster they did not pay (jobs/scale_sim.py --wide-case).
LAST_WAVE_FACTOR: float | None = None
LAST_WAVE_WATCH = 0.05


class _Listed(FixedGroups):
    """Groups given as a list of lists, submitted in order."""

    def __init__(self, groups):
        super().__init__([list(g) for g in groups], 1)

    def take(self) -> list:
        return super().take()[0]


@dataclass
class DriverStats:
    """Where the driver's time went in one :meth:`RayBackend.imap` call (diagnostics for tuning and
    ``jobs/scale_sim.py``; a few clock reads per task). ``last_stats()`` returns the latest one.

    Wall time splits into ``submit_s`` (``task.remote``), ``wait_s`` (blocked in ``ray.wait``: the
    driver idle), ``get_s`` (``ray.get``: fetching and deserialising results) and ``consumer_s`` (the
    caller's work between two results: reducer, store, progress); the rest is loop bookkeeping.
    ``submitted`` / ``done`` are per-task times (seconds from the start, in submission and completion
    order), ``busy_s`` the block seconds reported by the tasks (the sampler's blocks only).
    ``backups`` copies of late tasks were started and ``backups_won`` of them finished first;
    ``duplicates`` results of a task came after its first (dropped; ``duplicates_differ`` of them
    differed from it); ``expired`` copies were killed past ``task_timeout``; ``lost_nodes`` are the
    nodes Ray marked dead during the run; ``deadline_factor`` is the factor of the deadlines at the end
    (:class:`~raydp.engine.grouping.Deadlines`).
    """

    slots: int = 0
    in_flight_cap: int = 0
    groups: int = 0
    results: int = 0
    wall_s: float = 0.0
    submit_s: float = 0.0
    wait_s: float = 0.0
    wait_calls: int = 0
    get_s: float = 0.0
    consumer_s: float = 0.0
    busy_s: float = 0.0
    submitted: list = field(default_factory=list)
    done: list = field(default_factory=list)
    backups: int = 0
    backups_won: int = 0
    duplicates: int = 0
    duplicates_differ: int = 0
    expired: int = 0
    lost_nodes: list = field(default_factory=list)
    deadline_factor: float = 0.0

    def to_dict(self, timeline: bool = False) -> dict:
        d = {k: getattr(self, k) for k in ("slots", "in_flight_cap", "groups", "results", "wall_s", "submit_s",
                                           "wait_s", "wait_calls", "get_s", "consumer_s", "busy_s", "backups",
                                           "backups_won", "duplicates", "duplicates_differ", "expired",
                                           "deadline_factor")}
        d["lost_nodes"] = list(self.lost_nodes)
        if timeline:
            d.update(submitted=list(self.submitted), done=list(self.done))
        return d


_last_stats: list = [None]


def last_stats() -> DriverStats | None:
    """The :class:`DriverStats` of the latest ``imap``/``run`` in this process (None before any)."""
    return _last_stats[0]


def _remote(fn: Callable, epoch: int = 0):
    """``ray.remote`` of ``fn`` behind :func:`_tracked`, made once per function, epoch and process."""
    import ray

    if (fn, epoch) not in _remote_cache:
        _remote_cache[fn, epoch] = ray.remote(_tracked(fn, epoch))
    return _remote_cache[fn, epoch]


# ---- where a task runs ----------------------------------------------------------------------
# A task that the driver tracks writes one key to Ray's internal key-value store (in the GCS) when it
# starts and deletes it when it ends: <prefix><copy>/<node id>/<wall-clock start>. One listing of the
# prefix tells the driver which node runs which task and since when, for every task at once (~0.4 ms;
# the worker pays two GCS calls per task, ~1 ms). Ray itself says where a task runs only through its
# state API, which needs the dashboard.
_KV_NAMESPACE = "raydp"


def _tracked(fn: Callable, epoch: int = 0) -> Callable:
    """``fn`` that tells the driver where and when it starts. Each ``epoch`` is a function of its own
    for Ray (its code is pickled with the number), so its tasks are queued and leased apart: Ray
    keeps only a few worker requests in flight per kind of task, and a request it sent to a node that
    stopped answering waits for ever, holding up every task of that kind."""

    def call(key, shared, group, *args):
        key = _register(key) if key is not None else None
        try:
            return fn(shared, group, *args)
        finally:
            if key is not None:
                _unregister(key)

    call.__name__ = getattr(fn, "__name__", "task")  # the name Ray's own messages give the task
    call.__qualname__ = getattr(fn, "__qualname__", call.__name__)
    call.raydp_epoch = epoch  # pickled with the function: another function for Ray
    return call


def _register(prefix: str) -> bytes | None:
    try:
        import ray
        from ray.experimental import internal_kv

        key = f"{prefix}/{ray.get_runtime_context().get_node_id()}/{time.time():.3f}".encode()
        internal_kv._internal_kv_put(key, b"", namespace=_KV_NAMESPACE)
        return key
    except Exception:  # tracking is best effort: a task never fails for it
        return None


def _unregister(key: bytes) -> None:
    try:
        from ray.experimental import internal_kv

        internal_kv._internal_kv_del(key, namespace=_KV_NAMESPACE)
    except Exception:
        pass


def _ray_lines_to_stderr() -> None:
    """Send what Ray's driver prints — its workers' output, "(raylet) ... marked dead", "Task ... will
    be retried" — to stderr: Ray prints them on stdout, where raydp's results go (``--json``).

    Ray picks the stream in ``print_to_stdstream`` (by the line's ``is_err``), which it looks up when
    ``ray.init`` connects and whenever its error listener prints; it is replaced before ``ray.init``.
    """
    try:
        from ray._private import worker
    except Exception:  # pragma: no cover - private module moved: Ray prints as it always did
        return
    original = getattr(worker, "print_to_stdstream", None)
    if original is None or getattr(original, "raydp_stderr", False):
        return

    def print_to_stderr(data, ignore_prefix, _print=original):
        return _print(dict(data, is_err=True), ignore_prefix)

    print_to_stderr.raydp_stderr = True
    worker.print_to_stdstream = print_to_stderr


@dataclass(eq=False)
class _Copy:
    """One submission of a task: the original or a backup copy."""

    ref: Any
    task: "_Task"
    seq: int
    submitted: float  # time.monotonic()
    backup: bool
    deadline: float | None = None  # task_timeout: killed after this
    node: str | None = None  # where it runs, once its start is seen
    started: float | None = None
    late: bool = False  # ran far past its time
    lost: bool = False  # its node was marked dead
    dropped: bool = False  # never seen running and given up for a new copy
    klass: str | None = None  # its options beyond the plain ones (Ray queues each kind apart)
    target: str | None = None  # the node it was sent to by name


@dataclass(eq=False)
class _Task:
    """A group of items and its copies; done once one copy's result was yielded."""

    group: list
    copies: list = field(default_factory=list)
    done: bool = False
    winner: Any = None

    def live(self, refs: dict) -> list:
        return [c for c in self.copies if c.ref in refs]


class _Watch:
    """The driver's view of the cluster during one ``imap``: which nodes are alive, where each task
    runs (when tracked), and the user-facing lines about them."""

    def __init__(self, backend: "RayBackend"):
        import uuid

        self.backend = backend
        self.prefix = f"raydp/{uuid.uuid4().hex[:12]}/"
        self.nodes: dict[str, dict] = {}  # id -> {"address", "port", "alive", "resources"}
        self.track = self.backups = self.many = False
        self.used_kv = False
        self.lost: set[str] = set()  # nodes alive at some point of the run and dead now
        self.poll_nodes()

    # ---- nodes --------------------------------------------------------------------------------
    def poll_nodes(self) -> list[str]:
        """Refresh the node table; return the ids of nodes alive before and dead (or gone) now."""
        import ray

        try:
            table = ray.nodes()
        except Exception:  # the GCS did not answer this time: keep the last view
            return []
        seen, lost = set(), []
        for n in table:
            nid = n.get("NodeID")
            if not nid:
                continue
            seen.add(nid)
            was = self.nodes.get(nid, {}).get("alive")
            alive = bool(n.get("Alive"))
            self.nodes[nid] = {"address": n.get("NodeManagerAddress") or "?", "port": n.get("NodeManagerPort"),
                               "alive": alive, "resources": n.get("Resources") or {}}
            if was and not alive:
                lost.append(nid)
        for nid, info in self.nodes.items():
            if nid not in seen and info["alive"]:
                info["alive"] = False
                lost.append(nid)
        self.lost.update(lost)
        # once the cluster had two nodes this run stays tracked: the last node left is "another node"
        self.many = self.many or sum(1 for info in self.nodes.values() if info["alive"]) > 1
        choice = self.backend.backup_tasks
        self.backups = bool(choice) if choice is not None else self.many
        self.track = self.backups or self.many
        return lost

    def silent(self, nids: set[str], timeout: float = PROBE_SECONDS) -> set[str]:
        """Those of ``nids`` whose raylet does not answer an HTTP/2 greeting within ``timeout`` seconds
        (:func:`raydp.engine.reach.check_reachable`): a cut link, a frozen machine. Asked in parallel."""
        from concurrent.futures import ThreadPoolExecutor

        def answers(nid: str) -> bool:
            info = self.nodes.get(nid, {})
            if not info.get("port"):
                return True  # nothing to ask: assume it answers
            try:
                check_reachable(f"{info['address']}:{info['port']}", timeout)
            except EngineError:
                return False
            return True

        nids = sorted(nids)
        if not nids:
            return set()
        with ThreadPoolExecutor(max_workers=min(32, len(nids))) as pool:
            return {nid for nid, ok in zip(nids, pool.map(answers, nids)) if not ok}

    def slots_of(self, nid: str) -> int:
        """How many of this run's tasks node ``nid`` holds at once (from what it has in all)."""
        have = self.nodes.get(nid, {}).get("resources", {})
        return int(min(have.get(name, 0.0) // q for name, q in self.backend.requested().items()))

    def alive(self) -> set[str]:
        return {nid for nid, info in self.nodes.items() if info["alive"]}

    def can_run(self, nid: str) -> bool:
        """A node that could hold one task (what it has in all, not what is free now)."""
        have = self.nodes.get(nid, {}).get("resources", {})
        return all(have.get(name, 0.0) >= q for name, q in self.backend.requested().items())

    def host(self, nid: str | None) -> str:
        """A node as the user knows it: its address, with the node id's start when nodes share one."""
        if nid is None:
            return "a node not known yet"
        address = self.nodes.get(nid, {}).get("address", "?")
        if sum(1 for info in self.nodes.values() if info["address"] == address) > 1 or address == "?":
            return f"{address} (node {nid[:8]})"
        return address

    # ---- starts -------------------------------------------------------------------------------
    def key(self, seq: int) -> str | None:
        if not self.track:
            return None
        self.used_kv = True
        return f"{self.prefix}{seq}"

    def poll_starts(self, copies: dict[int, _Copy]) -> None:
        """Where and since when the tracked copies in ``copies`` (by seq) run."""
        if not self.used_kv or not copies:
            return
        try:
            from ray.experimental import internal_kv

            keys = internal_kv._internal_kv_list(self.prefix, namespace=_KV_NAMESPACE)
        except Exception:
            return
        now, offset = time.monotonic(), time.time() - time.monotonic()
        for raw in keys:
            try:
                seq, nid, wall = raw.decode()[len(self.prefix):].split("/")
                copy = copies.get(int(seq))
                start = float(wall) - offset
            except (ValueError, UnicodeDecodeError):
                continue
            if copy is None or (copy.node == nid and copy.started is not None):
                continue
            # another host's clock: kept between the submission and the first sight of it
            copy.node, copy.started = nid, min(max(start, copy.submitted), now)

    def close(self) -> None:
        if self.used_kv:
            try:
                from ray.experimental import internal_kv

                internal_kv._internal_kv_del(self.prefix, del_by_prefix=True, namespace=_KV_NAMESPACE)
            except Exception:
                pass

    # ---- backups ------------------------------------------------------------------------------
    def placement(self, exclude: set[str], load: dict) -> dict | None:
        """``.options(...)`` that put a copy on a node outside ``exclude``: the one with the fewest of this
        run's copies per slot (``load``: node -> copies running or sent there); {} when nothing is to
        be avoided; None when no live node that could hold it is left.

        The node is named (node affinity), not merely the silent ones excluded: Ray's scheduler still
        counts a silent node's last report of free resources and sends it requests for workers that
        wait for ever, for any kind of task (measured: a label selector excluding the node did not
        keep tasks from waiting ~2 min for such requests).
        """
        alive = self.alive()
        others = [nid for nid in alive - exclude if self.can_run(nid)]
        if not others:
            return None
        if not (exclude & alive) and not self.lost:
            return {}
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        pick = min(others, key=lambda nid: (load.get(nid, 0) / max(1, self.slots_of(nid)), self.nodes[nid]["address"]))
        load[pick] = load.get(pick, 0) + 1
        return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=pick, soft=False)}


def _klass(placement: dict | None) -> str | None:
    """The kind of a copy's options beyond the plain ones: Ray queues and leases each kind apart."""
    if not placement:
        return None
    return str(getattr(placement.get("scheduling_strategy"), "node_id", placement))


def _span(tasks: list, what: str) -> str:
    """"3 tasks (24 blocks: 100..115, 140..147)": the tasks, their items and, when they are numbers,
    which (at most three runs of consecutive ones, then how many more)."""
    items = sorted(i for t in tasks for i in t.group if isinstance(i, int))
    n = sum(len(t.group) for t in tasks)
    where = ""
    if items and len(items) == n:
        runs: list = []
        for i in items:
            if runs and i == runs[-1][1] + 1:
                runs[-1][1] = i
            else:
                runs.append([i, i])
        shown = ", ".join(f"{a}" if a == b else f"{a}..{b}" for a, b in runs[:3])
        where = ": " + shown + (f" and {len(runs) - 3} more runs" if len(runs) > 3 else "")
    return f"{len(tasks)} task{'s' if len(tasks) != 1 else ''} ({n} {what.rstrip('s') if n == 1 else what}{where})"


def _same_results(a: list, b: list) -> bool:
    """Two copies of a task gave the same block results (index, pairs and, where both carry them, every
    G value bit for bit)."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x.index != y.index or x.pairs != y.pairs:
            return False
        gx, gy = getattr(x, "g", None), getattr(y, "g", None)
        if gx is not None and gy is not None and np.asarray(gx).tobytes() != np.asarray(gy).tobytes():
            return False
    return True


def _run_group(job: PairJob, blocks: list[int], compact: int | None) -> list[BlockResult]:
    results = job.run_blocks(blocks)
    if compact is not None:
        results = [r.compacted(compact) for r in results]
    return results


def ensure_ray(address: str | None = None, num_cpus: int | None = None,
               connect_timeout: float = DEFAULT_CONNECT_TIMEOUT) -> None:
    """Connect to a Ray cluster, or start an embedded one bound to 127.0.0.1.

    ``address`` (or ``RAY_ADDRESS``, set inside ``ray job submit``) selects a running cluster; within
    ``connect_timeout`` seconds something must answer there like a Ray cluster, else
    :class:`EngineError` (:func:`raydp.engine.reach.check_reachable`; ``ray.init`` alone would retry
    for many minutes). Without one, an embedded Ray is started in this process with ``num_cpus`` CPUs
    (default: all).
    """
    import ray

    if ray.is_initialized():
        if address:
            current = ray.get_runtime_context().gcs_address or ""
            port = re.search(r":(\d+)/?$", str(address))
            if port and current and current.rsplit(":", 1)[-1] != port.group(1):
                raise EngineError(f"Ray is already connected to {current}; cannot also use address {address!r} "
                                  "in this process")
        return
    address = address or os.environ.get("RAY_ADDRESS") or None
    kwargs = dict(log_to_driver=True, configure_logging=False)
    _ray_lines_to_stderr()
    if address:
        address = check_reachable(address, connect_timeout)  # `auto` comes back as the address it stands for
        try:
            ray.init(address=address, **kwargs)
        except Exception as exc:
            raise EngineError(f"cannot connect to the Ray cluster at {address!r}: {exc}".splitlines()[0]) from exc
        return
    # ray.init turns token auth on for a new local cluster, and says so each time; an embedded Ray is
    # raydp's own (started for one run, bound to 127.0.0.1), so that notice is not the user's news.
    notice = logging.getLogger("ray._private.authentication.authentication_token_setup")
    quiet = _DropNotice("Token authentication is enabled for this Ray cluster")
    notice.addFilter(quiet)
    before = _descendants(os.getpid())
    try:
        with loopback_only():
            # worker_niceness 0: an embedded Ray's workers run at this process's priority. Ray's default (15,
            # added to the raylet's, which is ours) starves them on a busy machine: the run is one user's,
            # and its pairs are the work the user is waiting for.
            ray.init(num_cpus=num_cpus, include_dashboard=False, _node_ip_address=LOOPBACK_HOST,
                     _system_config={"worker_niceness": EMBEDDED_WORKER_NICENESS}, **kwargs)
    except BaseException as exc:
        stopped = stop_failed_start(before)
        if not isinstance(exc, Exception):
            raise
        raise EngineError(f"starting an embedded Ray failed ({type(exc).__name__}: "
                          f"{str(exc).strip().splitlines()[0] if str(exc).strip() else 'no message'}); "
                          f"the {stopped} process{'es' * (stopped != 1)} it had started {'were' if stopped != 1 else 'was'} "
                          "stopped. backend=\"local\" runs the pairs in this process") from exc
    finally:
        notice.removeFilter(quiet)


#: Ray's ``worker_niceness`` for an embedded Ray: added to the niceness the workers inherit from this process.
EMBEDDED_WORKER_NICENESS = 0


def _children() -> dict[int, list[int]]:
    """``{parent pid: [child pids]}`` of every process this user can see (Linux ``/proc``)."""
    kids: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:  # pragma: no cover - not Linux
        return kids
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
            ppid = int(stat.rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        kids.setdefault(ppid, []).append(int(entry))
    return kids


def _descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (children, their children, ...)."""
    kids, out, todo = _children(), set(), [pid]
    while todo:
        for child in kids.get(todo.pop(), ()):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _is_ray_process(cmdline: str, session: str | None) -> bool:
    return (cmdline.startswith("ray::") or f"{os.sep}ray{os.sep}" in cmdline
            or (session is not None and session in cmdline))


def stop_failed_start(before: set[int], grace: float = 3.0) -> int:
    """After a ``ray.init`` of an embedded Ray that raised: stop every process it started. Returns how many.

    ``ray.init`` starts the GCS server, the raylet, the dashboard, the monitor and the log monitor as children
    of this process one after the other; when a later step fails (the raylet does not register, the driver
    cannot connect) it raises and leaves the earlier ones running. ``ray.shutdown()`` stops what Ray itself
    still knows of; then every Ray process that is new below this process since ``before`` (by parentage), or
    that names the session's directory, gets SIGTERM, and SIGKILL after ``grace`` seconds."""
    import signal

    session = None
    try:
        from ray._private import worker

        node = getattr(worker, "_global_node", None)
        session = node.get_session_dir_path() if node is not None else None
    except Exception:  # noqa: BLE001 - private module moved: parentage alone finds them
        pass
    mine = os.getpid()

    def left() -> list[int]:
        found = {p for p in _descendants(mine) - before if _is_ray_process(_cmdline(p), session)}
        if session:
            found |= {int(e) for e in os.listdir("/proc") if e.isdigit() and int(e) != mine
                      and session in _cmdline(int(e))}
        return sorted(found)

    targets = left()
    for pid in targets:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        _reap(targets)
        if not [p for p in targets if _alive(p)]:
            break
        time.sleep(0.05)
    for pid in targets:
        if _alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    time.sleep(0.05)
    _reap(targets)
    try:  # Ray's own state in this process (a later ray.init starts afresh); its processes are gone by now
        import ray

        ray.shutdown()
    except Exception:  # noqa: BLE001 - a half-started Ray may fail to shut down: its processes are stopped
        pass
    return len(targets)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def _reap(pids) -> None:
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except (ChildProcessError, OSError):
            pass


class _DropNotice(logging.Filter):
    """Drops log records whose message starts with ``prefix``."""

    def __init__(self, prefix: str):
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.getMessage()).startswith(self.prefix)


def cluster_cpus() -> int:
    import ray

    return max(1, int(ray.cluster_resources().get("CPU", 1)))


def largest_node_resource(name: str = "CPU") -> float:
    """The most of resource ``name`` any live node has (0 when none has it)."""
    import ray

    return max((n.get("Resources", {}).get(name, 0.0) for n in ray.nodes() if n.get("Alive")), default=0.0)


@dataclass(frozen=True)
class RayBackend(Backend):
    """Run blocks as Ray tasks on a cluster (``address`` or ``RAY_ADDRESS``) or on an embedded local Ray.

    - ``address``: a running cluster; default ``RAY_ADDRESS`` (set inside ``ray job submit``), else
      an embedded Ray is started in this process, bound to 127.0.0.1, with ``num_cpus`` CPUs
      (default: every core).
    - ``cpus_per_task`` / ``gpus_per_task`` / ``memory_per_task`` (bytes) / ``resources_per_task``
      (Ray custom resources, e.g. ``{"TPU": 1}``): what each task asks of a node (raise
      ``cpus_per_task`` for multi-threaded targets; a GPU fit asks ``gpus_per_task=1`` and sees its own
      device in ``ray.get_gpu_ids()``). Slots are counted from the scarcest of them.
    - ``group_size``: blocks per task (default: :class:`~raydp.engine.grouping.GuidedGroups` —
      guided self-scheduling: remaining blocks / slots per task, at most about 5 s of them (longer past
      1 250 slots: :func:`~raydp.engine.grouping.task_seconds`), shrinking to one block at the end; the
      cost of a block is first guessed from the probe; an expensive per-pair target gets one block per
      task).
    - ``max_in_flight``: tasks submitted and not yet collected (default: two per slot, one with a
      ``task_timeout``).
    - ``max_retries``: Ray's retries of a task whose worker died.
    - ``task_timeout`` (seconds): a task still running that long after submission is killed and every
      pair of its blocks counts as a failure, G = +∞ (unless a backup copy of it still runs).
    - ``backup_tasks``: when a task runs far past what its blocks are expected to take (3× plus 5 s,
      :class:`~raydp.engine.grouping.Deadlines`) or Ray marks its node dead, start a copy of it on
      another node; the first copy to finish is used, each block once. None (default): on when the
      cluster has more than one node; False: never (each task runs where Ray put it until Ray gives
      up on it); True: also on a single node (a copy may then run on the same node).
    - ``connect_timeout`` (seconds, default 30): with an address, something must answer there like a
      Ray cluster within that time, else :class:`~raydp.errors.EngineError` — a wrong address is one
      line, never a hang (:mod:`raydp.engine.reach`: what it bounds and what it does not).

    >>> RayBackend(num_cpus=2).num_cpus
    2
    """

    address: str | None = None
    num_cpus: int | None = None
    cpus_per_task: float = 1
    gpus_per_task: float | None = None
    resources_per_task: dict | None = None
    memory_per_task: int | None = None
    group_size: int | None = None
    max_in_flight: int | None = None
    max_retries: int = 3
    task_timeout: float | None = None
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    backup_tasks: bool | None = None
    # seconds per block when already measured (AutoBackend passes what it timed in process)
    block_seconds: float | None = field(default=None, init=False, repr=False, compare=False)

    name = "ray"

    def __post_init__(self):
        if self.address is not None and (not isinstance(self.address, str) or not self.address):
            raise InvalidArgumentError(f"address must be a Ray address string or None, got {self.address!r}")
        if self.num_cpus is not None:
            check_int(self.num_cpus, "num_cpus", min_value=1)
        check_real(self.cpus_per_task, "cpus_per_task", min_value=0, include_min=False)
        if self.gpus_per_task is not None:
            check_real(self.gpus_per_task, "gpus_per_task", min_value=0, include_min=False)
        if self.resources_per_task is not None:
            if not isinstance(self.resources_per_task, dict) or not all(
                    isinstance(k, str) and k for k in self.resources_per_task):
                raise InvalidArgumentError("resources_per_task must be a dict of Ray resource names to amounts, "
                                           f"got {self.resources_per_task!r}")
            for k, v in self.resources_per_task.items():
                if k in ("CPU", "GPU", "memory"):
                    raise InvalidArgumentError(f"resources_per_task[{k!r}]: use cpus_per_task, gpus_per_task or "
                                               "memory_per_task")
                check_real(v, f"resources_per_task[{k!r}]", min_value=0, include_min=False)
            object.__setattr__(self, "resources_per_task", dict(self.resources_per_task))
        for name in ("memory_per_task", "group_size", "max_in_flight"):
            if getattr(self, name) is not None:
                check_int(getattr(self, name), name, min_value=1)
        check_int(self.max_retries, "max_retries", min_value=0)
        if self.backup_tasks is not None and not isinstance(self.backup_tasks, bool):
            raise InvalidArgumentError(f"backup_tasks must be True, False or None (on when the cluster has more "
                                       f"than one node), got {self.backup_tasks!r}")
        object.__setattr__(self, "task_timeout", check_timeout("task_timeout", self.task_timeout))
        object.__setattr__(self, "connect_timeout", check_real(self.connect_timeout, "connect_timeout", min_value=0,
                                                               include_min=False))

    # ---- the cluster ------------------------------------------------------------------------
    def connect(self) -> None:
        """Join the cluster, or start the embedded Ray (idempotent)."""
        ensure_ray(self.address, self.num_cpus, self.connect_timeout)

    def requested(self) -> dict[str, float]:
        """What one task asks of a node, by Ray resource name ("CPU", "GPU", custom ones)."""
        need = {"CPU": float(self.cpus_per_task)}
        if self.gpus_per_task:
            need["GPU"] = float(self.gpus_per_task)
        need.update({k: float(v) for k, v in (self.resources_per_task or {}).items() if v})
        return need

    def slots(self) -> int:
        """How many tasks fit on the cluster at once: counted from the scarcest requested resource
        (connects first)."""
        import ray

        self.connect()
        total = ray.cluster_resources()
        return max(1, min(int(total.get(name, 0.0) // q) for name, q in self.requested().items()))

    def task_options(self) -> dict:
        """The ``.options(...)`` of every task: its resources and retries."""
        options = dict(num_cpus=self.cpus_per_task, max_retries=self.max_retries, retry_exceptions=False)
        if self.gpus_per_task:
            options["num_gpus"] = self.gpus_per_task
        if self.resources_per_task:
            options["resources"] = dict(self.resources_per_task)
        if self.memory_per_task is not None:
            options["memory"] = self.memory_per_task
        return options

    def check_fits(self) -> None:
        """Refuse a task no live node can hold: Ray would wait forever for a node that never comes."""
        if os.environ.get("RAYDP_ALLOW_AUTOSCALE"):
            return
        for name, q in self.requested().items():
            biggest = largest_node_resource(name)
            if q > biggest:
                what = {"CPU": "cpus_per_task", "GPU": "gpus_per_task"}.get(name, f"resources_per_task[{name!r}]")
                unit = {"CPU": "CPUs", "GPU": "GPUs"}.get(name, name)
                raise EngineError(f"{what}={q:g} but the largest node has {biggest:g} {unit}; "
                                  f"ask for less or add bigger nodes (set RAYDP_ALLOW_AUTOSCALE=1 if an "
                                  "autoscaler will)")

    # ---- generic map ------------------------------------------------------------------------
    def imap(self, fn: Callable, shared: Any, groups: Sequence[list], *args,
             expired: Callable[[list], Any] | None = None, what: str = "items",
             same: Callable[[Any, Any], bool] | None = None) -> Iterator[tuple[list, Any]]:
        """``fn(shared, group, *args)`` as one Ray task per group; yield ``(group, result)`` as tasks finish.

        ``shared`` is put in the object store once. An application error in a task is re-raised here
        with its own type (not retried: it is deterministic). A task lost for good (its worker died
        more than ``max_retries`` times and no copy of it is left) raises :class:`EngineError`. With
        ``task_timeout``, a copy of a task past its deadline is killed; when no other copy of the task
        runs, ``expired(group)`` is yielded as its result (or raises).

        A task that runs far past what its items are expected to take, or whose node Ray marks dead,
        gets a backup copy on another node (``backup_tasks``; module docstring). Every group is yielded
        exactly once, with the result of its first copy to finish; a later copy's result is dropped,
        after ``same(first, later)`` checked that they agree (when given).
        """
        import ray
        from ray.exceptions import RayTaskError

        pending = groups if isinstance(groups, FixedGroups) else _Listed(groups)
        if not pending:
            return
        self.connect()
        self.check_fits()
        slots = self.slots()
        in_flight_cap = self.max_in_flight
        if in_flight_cap is None:
            in_flight_cap = slots if self.task_timeout is not None else 2 * slots
        options = self.task_options()
        plain = _remote(fn).options(**options)
        shared_ref = ray.put(shared)

        stats = DriverStats(slots=slots, in_flight_cap=in_flight_cap)
        _last_stats[0] = stats
        clock = time.perf_counter
        t_start = clock()
        watch = _Watch(self)
        deadlines = Deadlines()
        seen = [0, 0.0]  # items and seconds of finished tasks as the driver saw them (when no block times)
        live: dict = {}  # ref -> _Copy, every copy still awaited
        open_tasks: dict = {}  # _Task -> None, in submission order: groups not yielded yet
        seqs = itertools.count()
        suspect: set = set()  # nodes with a late or lost copy: new tasks keep off them while one is left
        epoch = [0, frozenset()]  # tasks are submitted as a new function for Ray whenever `suspect` grows
        probed = [-PROBE_EVERY]  # when the nodes' raylets were last asked whether they answer
        last_result = time.monotonic()
        next_watch = last_result + WATCH_SECONDS
        said: set = set()  # lines said once per run

        def per_item() -> float | None:
            """Seconds an item takes: the groups' running mean when they keep one, else as the driver saw
            tasks take. None until a task has finished (a guess from the probe sets no deadline)."""
            if not seen[0]:
                return None
            s = getattr(pending, "block_seconds", None)
            return s if s is not None else seen[1] / seen[0]

        def submit(t: _Task, backup: bool = False, placement: dict | None = None) -> None:
            now = time.monotonic()
            seq = next(seqs)
            if not epoch[1] >= suspect:  # a node newly suspect: from now on a new kind of task for Ray
                epoch[0], epoch[1] = epoch[0] + 1, frozenset(suspect | epoch[1])
            if not backup and suspect:
                placement = watch.placement(suspect, load())
            if epoch[0] == 0 and not placement:
                runner = plain
            else:
                runner = _remote(fn, epoch[0]).options(**options, **(placement or {}))
            ref = runner.remote(watch.key(seq), shared_ref, t.group, *args)
            copy = _Copy(ref, t, seq, now, backup,
                         deadline=None if self.task_timeout is None else now + self.task_timeout,
                         klass=f"{epoch[0]} {_klass(placement)}",
                         target=getattr((placement or {}).get("scheduling_strategy"), "node_id", None))
            t.copies.append(copy)
            live[ref] = copy
            if backup:
                stats.backups += 1

        def load() -> dict:
            """Copies of this run on each node: running there, or sent there by name."""
            out: dict = {}
            for c in live.values():
                nid = c.node if c.node is not None else c.target
                if nid is not None:
                    out[nid] = out.get(nid, 0) + 1
            return out

        def back_up(t: _Task, avoid: set) -> str | None:
            """Start a copy of ``t`` off its own nodes (and off ``avoid`` when that leaves a node); None,
            else why not."""
            if sum(not c.dropped for c in t.copies) >= MAX_COPIES:
                return "it has all its copies"
            own = {c.node for c in t.copies if c.node}
            placement = watch.placement(own | avoid, load())
            if placement is None and avoid - own:
                placement = watch.placement(own, load())
            if placement is None and self.backup_tasks:  # asked for even where no other node is left
                placement = {}
            if placement is None:
                return "no other node can run a copy"
            stuck = [c for c in t.live(live) if c.late and c.started is None]
            if not epoch[1] >= suspect:
                epoch[0], epoch[1] = epoch[0] + 1, frozenset(suspect | epoch[1])
            if stuck and all(c.klass == f"{epoch[0]} {_klass(placement)}" for c in t.live(live)):
                return "a copy would wait in the same queue"
            for c in stuck:  # a late copy never seen running is replaced, not joined: it may be
                c.dropped = True  # waiting for a worker on a node that does not answer
                del live[c.ref]
                ray.cancel(c.ref, force=False)
            submit(t, backup=True, placement=placement)
            return None

        def settle(t: _Task) -> None:
            """``t`` has its result: cancel its other copies, but keep waiting for those that run late
            on a node that does not answer or was lost (they cannot be reached; if one answers, its
            result is compared and dropped)."""
            for c in t.copies:
                if c.ref in live and not (c.lost or (c.late and c.started is not None)):
                    del live[c.ref]
                    ray.cancel(c.ref, force=False)

        def finish(t: _Task, copy: _Copy | None, value: Any = None) -> None:
            del open_tasks[t]
            t.done = True
            now = time.monotonic()
            if copy is not None:
                began = copy.started if copy.started is not None else copy.submitted
                seen[0] += len(t.group)
                seen[1] += now - began
                if copy.started is not None:
                    deadlines.observe(now - copy.started, len(t.group), per_item())
                if copy.backup:
                    stats.backups_won += 1
                if same is not None and any(c.ref in live for c in t.copies if c is not copy):
                    t.winner = value
                settle(t)
            stats.done.append(clock() - t_start)
            stats.results += 1

        def lost_nodes(nodes: list[str]) -> None:
            for nid in nodes:
                stats.lost_nodes.append(nid)
                suspect.add(nid)
                there = [c for c in live.values() if c.node == nid]
                for c in there:
                    c.lost = True
                tasks = list({c.task: None for c in there if not c.task.done})
                # a task never seen running may be waiting for a worker on that node (Ray fails such a
                # wait only when the connection's keepalive gives up): it is started again as well
                unseen = [t for t in open_tasks if t not in tasks and all(c.started is None for c in t.live(live))]
                redone, covered, stuck = [], [], []
                for t in tasks + unseen:
                    if any(not (c.lost or c.late) and c.started is not None for c in t.live(live)):
                        covered.append(t)
                    elif watch.backups and back_up(t, {nid}) is None:
                        redone.append(t)
                    elif t in tasks:
                        stuck.append(t)
                parts = []
                if redone:
                    parts.append(f"{_span(redone, what)} started again on other nodes"
                                 + (f" ({len(unseen)} of them not seen running anywhere yet)" if unseen else ""))
                if covered:
                    parts.append(f"{_span(covered, what)} already have a copy running elsewhere")
                if stuck:
                    why = ("no other node can run them" if watch.backups else
                           f"Ray retries them (up to {self.max_retries} times) once it notices")
                    parts.append(f"{_span(stuck, what)} running there wait: {why}")
                copies = f"{len(there)} cop{'y' if len(there) == 1 else 'ies'} of this run's tasks"
                _progress.note(f"Ray marked node {watch.host(nid)} dead ({copies} were running there); "
                               + ("; ".join(parts) if parts else "nothing to redo"))

        def late_tasks(now: float) -> None:
            s = per_item()
            if s is None:
                return  # nothing measured yet: no deadline
            limits = {t: deadlines.limit(len(t.group), s) for t in open_tasks}
            for t, limit in limits.items():
                for c in t.live(live):
                    if c.started is not None and not c.lost and now - c.started > limit:
                        c.late = True
            # a copy never seen running may wait for a worker on a node that does not answer: once a
            # node is suspect, past its deadline; else only after a worker's start would surely be over
            unseen_grace = 0.0 if suspect or any(c.late and c.started is not None for c in live.values()) \
                else UNSEEN_SECONDS
            late: dict = {}
            for t, limit in limits.items():
                fine, worst = False, None
                for c in t.live(live):
                    if c.lost:
                        continue
                    if c.started is not None:
                        over = c.late
                    else:  # queued far longer than a task takes: Ray waits for a worker it will not get
                        over = now - c.submitted > limit + unseen_grace
                        c.late = c.late or over
                    if over:
                        worst = c
                    else:
                        fine = True
                if not fine and worst is not None and sum(not c.dropped for c in t.copies) < MAX_COPIES:
                    late.setdefault(worst.node, []).append((t, worst))
            if not late:
                return
            suspect.update(nid for nid in late if nid is not None)
            if None in late and not suspect and now >= probed[0] + PROBE_EVERY:
                # tasks wait for a worker and no node is known to be lost: ask every node's raylet
                probed[0] = now
                silent = watch.silent(watch.alive())
                if silent:
                    suspect.update(silent)
                    _progress.note(f"{', '.join(sorted(watch.host(nid) for nid in silent))} "
                                   f"{'does' if len(silent) == 1 else 'do'} not answer: new tasks keep off "
                                   f"{'it' if len(silent) == 1 else 'them'}")
            avoid = set(suspect)
            for nid, pairs in late.items():
                why = {t: back_up(t, avoid) for t, _ in pairs}
                started = [t for t, _ in pairs if why[t] is None]
                if not started:
                    key = ("stuck", nid)
                    if key not in said:
                        said.add(key)
                        where = f"on {watch.host(nid)} run" if nid is not None else "waiting for a worker have waited"
                        reason = next(iter(why.values()))
                        _progress.note(f"{_span([t for t, _ in pairs], what)} {where} far past their time, but "
                                       f"{reason}: waiting for them (Ray gives a node up after missing health "
                                       "checks for ~1 min)")
                    continue
                oldest = max(now - (c.started if c.started is not None else c.submitted) for _, c in pairs)
                expected = deadlines.expected(sum(len(t.group) for t in started), s) / len(started)
                where = (f"on {watch.host(nid)} ran {oldest:.0f} s" if nid is not None else
                         f"waited {oldest:.0f} s for a worker")
                _progress.note(f"{_span(started, what)} {where}, past {deadlines.factor:g}x the "
                               f"{expected:.3g} s expected + {deadlines.slack:g} s: a copy of each started on another "
                               "node; the first copy to finish is used"
                               + (f"; new tasks keep off {watch.host(nid)}" if nid is not None else ""))

        def last_wave(now: float) -> None:
            s = per_item()
            idle = slots - len(live)
            if LAST_WAVE_FACTOR is None or pending or idle <= 0 or s is None:
                return
            ready = [t for t in open_tasks if len(t.live(live)) == 1 and t.live(live)[0].started is not None
                     and now - t.live(live)[0].started > LAST_WAVE_FACTOR * len(t.group) * s]
            ready.sort(key=lambda t: t.live(live)[0].started)
            for t in ready[:idle]:
                back_up(t, set())  # when it cannot, the task just runs on

        def outstanding(now: float, quiet: float) -> str:
            """What has not come back, where and for how long."""
            alive = watch.alive()
            only = next(iter(alive)) if len(alive) == 1 else None
            where: dict = {}  # (node, running) -> [tasks, longest, lost]
            for t in open_tasks:
                copies = t.live(live)
                hopeful = [c for c in copies if not (c.lost or c.late)]
                copies = hopeful or copies  # the copy the task waits for: a backup once there is one
                running = [c for c in copies if c.started is not None]
                if running:
                    c = min(running, key=lambda c: c.started)
                    key, since = (c.node, True), c.started
                else:  # untracked (one node) or not seen running yet: the time since it was submitted
                    c = min(copies, key=lambda c: c.submitted)
                    key, since = (None if watch.track else only, False), c.submitted
                w = where.setdefault(key, [0, 0.0, False])
                w[0] += 1
                w[1] = max(w[1], now - since)
                w[2] = w[2] or c.lost
            parts = []
            for (nid, running), (n, longest, lost) in sorted(where.items(), key=lambda kv: -kv[1][1]):
                tasks = f"{n} task{'s' if n != 1 else ''}"
                if nid is None:
                    parts.append(f"{tasks} not seen running yet, submitted {longest:.0f} s ago")
                else:
                    parts.append(f"{watch.host(nid)}{' (lost)' if lost else ''}: {tasks} "
                                 f"{'running' if running else 'submitted'} {longest:.0f} s")
            items = sum(len(t.group) for t in open_tasks)
            return (f"nothing back for {quiet:.0f} s: {items} {what.rstrip('s') if items == 1 else what} "
                    f"outstanding in {len(open_tasks)} task{'s' if len(open_tasks) != 1 else ''}; " + "; ".join(parts))

        def look(now: float) -> None:
            lost = watch.poll_nodes()
            watch.poll_starts({c.seq: c for c in live.values()})
            if lost:
                lost_nodes(lost)
            if watch.backups:
                late_tasks(now)
                last_wave(now)
            display = _progress.current()
            if display is not None and open_tasks:
                quiet = now - last_result
                display.waiting(quiet, lambda: outstanding(now, quiet))

        try:
            while pending or open_tasks:
                if pending and len(open_tasks) < in_flight_cap:
                    t0 = clock()
                    while pending and len(open_tasks) < in_flight_cap:
                        t = _Task(pending.take())
                        open_tasks[t] = None
                        submit(t)
                        stats.groups += 1
                        stats.submitted.append(clock() - t_start)
                    stats.submit_s += clock() - t0
                now = time.monotonic()
                wake = next_watch
                if self.task_timeout is not None:
                    wake = min(wake, min((c.deadline for c in live.values()), default=wake))
                t0 = clock()
                done, _ = ray.wait(list(live), num_returns=1, timeout=max(0.0, wake - now))
                stats.wait_s += clock() - t0
                stats.wait_calls += 1
                if done and len(live) > len(done):
                    # Collect every other task already finished in the same pass: one scan of the
                    # pending refs and one ray.get for all of them instead of one each.
                    t0 = clock()
                    more, _ = ray.wait([r for r in live if r not in done], num_returns=len(live) - len(done),
                                       timeout=0)
                    stats.wait_s += clock() - t0
                    done = done + more
                if done:
                    t0 = clock()
                    try:
                        outcomes = [(True, r) for r in ray.get(done)]
                    except ray.exceptions.RayError:  # one of them failed: fetch them one by one to name it
                        outcomes = [self._fetch(ref) for ref in done]
                    stats.get_s += clock() - t0
                    for ref, (ok, value) in zip(done, outcomes):
                        copy = live.pop(ref, None)
                        if copy is None:
                            continue
                        t = copy.task
                        if ok and copy.node in suspect and not copy.lost:
                            suspect.discard(copy.node)  # it answers again
                        if not ok:
                            if isinstance(value, RayTaskError) and not t.done:
                                cause = getattr(value, "cause", None)
                                raise (cause if isinstance(cause, Exception) else value) from None
                            if t.done or t.live(live):
                                continue  # a copy lost while another one finished or still runs
                            raise EngineError(
                                f"{what} {t.group[0]}..{t.group[-1]} were lost ({type(value).__name__}; Ray "
                                f"retries a dead worker's task up to {self.max_retries} times); the run stops "
                                "rather than return fewer than m pairs. Rerun with a store and resume=True to keep "
                                "finished blocks.") from value
                        if t.done:
                            stats.duplicates += 1
                            if same is not None and t.winner is not None and not same(t.winner, value):
                                stats.duplicates_differ += 1
                                if "differ" not in said:
                                    said.add("differ")
                                    log.warning("two copies of %s %s..%s gave different results (the first is "
                                                "kept): the target does not give the same value for the same "
                                                "input every time", what, t.group[0], t.group[-1])
                            if not any(c.ref in live for c in t.copies):
                                t.winner = None
                            continue
                        finish(t, copy, value)
                        last_result = time.monotonic()
                        t1 = clock()
                        yield t.group, value
                        stats.consumer_s += clock() - t1
                now = time.monotonic()
                if self.task_timeout is not None:
                    for copy in [c for c in live.values() if c.deadline is not None and c.deadline <= now]:
                        del live[copy.ref]
                        ray.cancel(copy.ref, force=True)
                        stats.expired += 1
                        t = copy.task
                        if t.done or t.live(live):
                            continue
                        if expired is None:
                            raise EngineError(f"{what} {t.group[0]}..{t.group[-1]}: task ran over "
                                              f"task_timeout={self.task_timeout:g} s")
                        finish(t, None)
                        t0 = clock()
                        yield t.group, expired(t.group)
                        stats.consumer_s += clock() - t0
                if now >= next_watch:
                    next_watch = now + (WATCH_SECONDS if pending or LAST_WAVE_FACTOR is None else LAST_WAVE_WATCH)
                    look(now)
        finally:
            stats.wall_s = clock() - t_start
            stats.deadline_factor = deadlines.factor
            for ref in live:
                ray.cancel(ref, force=False)
            watch.close()

    def _fetch(self, ref) -> tuple[bool, Any]:
        """``(True, value)`` of a finished task, or ``(False, the error)``."""
        import ray

        try:
            return True, ray.get(ref)
        except ray.exceptions.RayError as exc:
            return False, exc

    # ---- the sampler's blocks ---------------------------------------------------------------
    def run(self, job: PairJob, blocks: Sequence[int], *, compact: int | None = None) -> Iterator[BlockResult]:
        """Run ``blocks`` as Ray tasks; yield each block's result as its task finishes."""
        blocks = list(blocks)
        if not blocks:  # e.g. a resumed store that is already complete: no need to start Ray
            return
        self.connect()
        if self.group_size is not None:
            groups = FixedGroups(blocks, self.group_size)
        else:
            # The first tasks are sized from what a block costs: timed in process by AutoBackend, else
            # guessed from the driver's probe (one block per task until a block comes back without either).
            seconds = self.block_seconds if self.block_seconds is not None else job.block_seconds_guess()
            slots = self.slots()
            groups = GuidedGroups(blocks, slots, task_seconds=task_seconds(slots, self.task_timeout),
                                  block_seconds=seconds)

        def timed_out(group: list[int]) -> list[BlockResult]:
            if job.strict:
                raise TargetError(f"blocks {group[0]}..{group[-1]}: task ran over task_timeout="
                                  f"{self.task_timeout:g} s (strict mode)")
            layout = job.layout
            failed = [BlockResult.failed(b, layout.start(b), layout.pairs(b), "task timed out",
                                         seconds=self.task_timeout) for b in group]
            return failed if compact is None else [r.compacted(compact) for r in failed]

        for _, results in self.imap(_run_group, job, groups, compact, expired=timed_out, what="blocks",
                                    same=_same_results):
            stats = _last_stats[0]
            busy = sum(r.seconds for r in results)
            stats.busy_s += busy
            groups.observe(len(results), busy)
            yield from results
