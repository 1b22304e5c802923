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

- a copy has run :data:`~raydp.engine.grouping.BACKUP_FACTOR` times what its blocks are expected
  to take (the running mean of block seconds) plus :data:`~raydp.engine.grouping.BACKUP_SLACK`
  seconds since it started (:class:`~raydp.engine.grouping.Deadlines`), or it was never seen running
  that long (plus :data:`~raydp.engine.schedule.UNSEEN_SECONDS` for a worker's start, unless a node
  already looks lost) after its submission — and after the first result, which sets the expected
  time — while no copy of the run started within that limit either: it may be waiting for a worker
  from the silent node. A cold worker pool, or a queue behind busy slots, is no late task
  (:mod:`raydp.engine.schedule`); or
- Ray marks its node dead (every task never seen running is started again too).

When tasks wait for a worker that long and no node is known to be lost, the driver greets every
node's raylet (an HTTP/2 handshake, :data:`PROBE_SECONDS`); one that does not answer is lost too.
Such a node is *suspect*: from then on every new task and copy is sent to a node named by the
driver (node affinity, the node with the fewest of the run's tasks per slot), as a new function for
Ray (:func:`_tracked`'s epoch: its own queue and worker requests), until a task finishes on the
suspect node again. The first copy to finish is yielded, once per group, so the reducer and the
store see every block exactly once; a later copy's result is compared with it and dropped. A task
whose copies all fail is lost as before. To know where a task runs, a tracked task that has run
:data:`MARK_AFTER` seconds writes one key to Ray's internal key-value store (:func:`_tracked`); a
shorter task never calls the GCS.
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
sample-and-aggregate both run through it. Its state — tasks, copies, deadlines, suspect nodes — and
every decision about it are :class:`raydp.engine.schedule.Scheduler`'s; this module holds the Ray
calls around it (:func:`_drive`: ``ray.wait``, ``ray.get``, ``ray.cancel``, the node table).
"""

from __future__ import annotations

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
from .grouping import FixedGroups, GuidedGroups, task_seconds
from .protocol import Backend
from .reach import DEFAULT_CONNECT_TIMEOUT, check_reachable
from .schedule import DriverStats, Scheduler
from .loopback import LOOPBACK_HOST, loopback_only

_remote_cache: dict = {}
log = logging.getLogger("raydp.engine")

# How often the driver looks at what it has not heard from (nodes, task starts, deadlines, heartbeat).
WATCH_SECONDS = 1.0
# How long a node's raylet may take to answer the driver's greeting before the node counts as silent
# (how often it is asked, and when a copy is late: raydp.engine.schedule).
PROBE_SECONDS = 2.0
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
# A task that the driver tracks and that has run MARK_AFTER seconds writes one key to Ray's internal
# key-value store (in the GCS): <prefix><bucket>/<copy>/<node id>/<wall-clock start>. One listing of
# the prefix tells the driver which node runs which task and since when, for every such task at once
# (~0.4 ms). A shorter task never calls the GCS, and no task deletes its key: each call costs ~0.25 ms
# of the worker's CPU and as much of the GCS's — on a small host running many slots, a write and a
# delete per task took 2% of the wide case's efficiency with 1 s tasks (jobs/scale_sim.py), and on a
# wide cluster of short tasks they would be thousands of GCS calls a second. The driver ignores a
# finished copy's key and deletes the keys BUCKET copies at a time once none of them is awaited
# (:meth:`_Watch.forget`), and the run's prefix at its end. The key says when the task started, so a
# late task is judged from its start; it is seen at most MARK_AFTER s later (the driver looks every
# WATCH_SECONDS, and a deadline is seconds past the expected time). A copy that hangs before its key
# is written (a frozen process, a target holding the GIL) is never seen running: the scheduler judges
# it from its submission, and copies it once it is late and a slot is free (raydp.engine.schedule).
# Ray itself says where a task runs only through its state API, which needs the dashboard.
_KV_NAMESPACE = "raydp"
MARK_AFTER = 0.5
BUCKET = 256


def _tracked(fn: Callable, epoch: int = 0) -> Callable:
    """``fn`` that tells the driver where and when it starts (:class:`_StartMark`). Each ``epoch`` is a
    function of its own for Ray (its code is pickled with the number), so its tasks are queued and
    leased apart: Ray keeps only a few worker requests in flight per kind of task, and a request it
    sent to a node that stopped answering waits for ever, holding up every task of that kind."""

    def call(key, shared, group, *args):
        mark = _StartMark(key) if key is not None else None
        try:
            return fn(shared, group, *args)
        finally:
            if mark is not None:
                mark.end()

    call.__name__ = getattr(fn, "__name__", "task")  # the name Ray's own messages give the task
    call.__qualname__ = getattr(fn, "__qualname__", call.__name__)
    call.raydp_epoch = epoch  # pickled with the function: another function for Ray
    return call


class _StartMark:
    """One tracked copy's key in the internal key-value store, written (with the copy's own start time)
    once the copy has run :data:`MARK_AFTER` seconds by the worker process's one marking
    thread (:class:`_Marker`) — unless the copy has ended by then. Best effort: a task never fails for
    it."""

    def __init__(self, prefix: str):
        import threading

        self.prefix, self.start = prefix, time.time()
        self.ended = False
        self.lock = threading.Lock()
        try:
            import ray

            self.node = ray.get_runtime_context().get_node_id()
        except Exception:
            return
        _marker.add(self, time.monotonic() + MARK_AFTER)

    def write(self) -> None:
        with self.lock:  # end() waits for a write under way: no key is written after its copy ended
            if self.ended:
                return
            try:
                from ray.experimental import internal_kv

                key = f"{self.prefix}/{self.node}/{self.start:.3f}".encode()
                internal_kv._internal_kv_put(key, b"", namespace=_KV_NAMESPACE)
            except Exception:
                pass

    def end(self) -> None:
        with self.lock:
            self.ended = True


class _Marker:
    """The worker process's one thread that writes the start marks that fell due (a thread per task
    would cost more than most marks: a short copy ends before its mark is due and costs a heap entry)."""

    def __init__(self):
        import threading

        self.cond = threading.Condition()
        self.due: list = []  # heap of (when, n, mark)
        self.count = 0
        self.thread: Any = None

    def add(self, mark: _StartMark, when: float) -> None:
        import heapq
        import threading

        with self.cond:
            self.count += 1
            heapq.heappush(self.due, (when, self.count, mark))
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="raydp-start-marks", daemon=True)
                self.thread.start()
            elif self.due[0][2] is mark:
                self.cond.notify()

    def _run(self) -> None:
        import heapq

        while True:
            with self.cond:
                while True:
                    while self.due and self.due[0][2].ended:
                        heapq.heappop(self.due)
                    if not self.due:
                        self.cond.wait()
                        continue
                    wait = self.due[0][0] - time.monotonic()
                    if wait <= 0:
                        mark = heapq.heappop(self.due)[2]
                        break
                    self.cond.wait(wait)
            mark.write()


_marker = _Marker()


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
        self.forgotten = 0  # the buckets below this one are deleted
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
        return f"{self.prefix}{seq // BUCKET}/{seq}"

    def forget(self, live_seqs) -> None:
        """Delete the keys of the buckets below the lowest copy still awaited (copies are numbered in
        submission order, so none of theirs is awaited again): one GCS call per :data:`BUCKET` copies."""
        lowest = min(live_seqs, default=None)
        if not self.used_kv or lowest is None:
            return  # nothing awaited: the run ends, and close() deletes the prefix
        below = lowest // BUCKET
        if below <= self.forgotten:
            return
        try:
            from ray.experimental import internal_kv

            for bucket in range(self.forgotten, below):
                internal_kv._internal_kv_del(f"{self.prefix}{bucket}/", del_by_prefix=True,
                                             namespace=_KV_NAMESPACE)
            self.forgotten = below
        except Exception:
            pass

    def starts(self) -> list[tuple[int, str, float]]:
        """``(seq, node, start)`` of the tracked copies running now (``start`` on ``time.monotonic()``'s
        clock, from the worker's wall clock; :meth:`raydp.engine.schedule.Scheduler.seen_running`)."""
        if not self.used_kv:
            return []
        try:
            from ray.experimental import internal_kv

            keys = internal_kv._internal_kv_list(self.prefix, namespace=_KV_NAMESPACE)
        except Exception:
            return []
        offset = time.time() - time.monotonic()
        out = []
        for raw in keys:
            try:
                _, seq, nid, wall = raw.decode()[len(self.prefix):].split("/")
                out.append((int(seq), nid, float(wall) - offset))
            except (ValueError, UnicodeDecodeError):
                continue
        return out

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


class _Launcher:
    """The scheduler's Ray calls: submit one copy of a task (:func:`_tracked`'s epoch, a node by name)
    and cancel one. ``shared`` is put in the object store once."""

    def __init__(self, fn: Callable, options: dict, shared: Any, args: tuple):
        import ray

        self.fn, self.options, self.args = fn, options, args
        self.plain = _remote(fn).options(**options)
        self.shared_ref = ray.put(shared)
        self.watch: "_Watch | None" = None

    def launch(self, seq: int, group: list, epoch: int, placement: dict | None):
        if epoch == 0 and not placement:
            runner = self.plain
        else:
            runner = _remote(self.fn, epoch).options(**self.options, **(placement or {}))
        return runner.remote(self.watch.key(seq), self.shared_ref, group, *self.args)

    @staticmethod
    def cancel(ref, force: bool) -> None:
        import ray

        ray.cancel(ref, force=force)


def _drive(sched: Scheduler, watch: _Watch, expired: Callable | None, stats: DriverStats) -> Iterator[tuple[list, Any]]:
    """The driver's loop: submit, wait for results (``ray.wait``), hand them to the scheduler and yield
    what it returns, kill what ran past ``task_timeout``, and about once a second look at the nodes."""
    clock = time.perf_counter
    next_watch = time.monotonic() + WATCH_SECONDS
    while sched.busy:
        if sched.wants_more():
            t0 = clock()
            sched.fill()
            stats.submit_s += clock() - t0
        done = _wait(list(sched.live), max(0.0, sched.wake(next_watch) - time.monotonic()), stats)
        for group, value in _collect(sched, done, stats):
            t1 = clock()
            yield group, value
            stats.consumer_s += clock() - t1
        for t in sched.expire():
            t0 = clock()
            yield t.group, expired(t.group)
            stats.consumer_s += clock() - t0
        now = time.monotonic()
        if now >= next_watch:
            next_watch = now + (WATCH_SECONDS if sched.pending or LAST_WAVE_FACTOR is None else LAST_WAVE_WATCH)
            _look(sched, watch)


def _wait(refs: list, timeout: float, stats: DriverStats) -> list:
    """The refs among ``refs`` that finished: the first within ``timeout``, then every other one already
    finished (one scan of the pending refs and one ``ray.get`` for all of them instead of one each)."""
    import ray

    t0 = time.perf_counter()
    done, _ = ray.wait(refs, num_returns=1, timeout=timeout)
    stats.wait_calls += 1
    if done and len(refs) > len(done):
        more, _ = ray.wait([r for r in refs if r not in done], num_returns=len(refs) - len(done), timeout=0)
        done = done + more
    stats.wait_s += time.perf_counter() - t0
    return done


def _collect(sched: Scheduler, done: list, stats: DriverStats) -> Iterator[tuple[list, Any]]:
    """Fetch the finished refs (one ``ray.get``; one by one when one of them failed, to name it) and hand
    each to the scheduler; yield the results it says are new."""
    import ray
    from ray.exceptions import RayTaskError

    if not done:
        return
    t0 = time.perf_counter()
    try:
        outcomes = [(True, r) for r in ray.get(done)]
    except ray.exceptions.RayError:
        outcomes = [_fetch(ref) for ref in done]
    stats.get_s += time.perf_counter() - t0
    for ref, (ok, value) in zip(done, outcomes):
        if ok:
            out = sched.done(ref, value)
            if out is not None:
                yield out
            continue
        cause = getattr(value, "cause", None) if isinstance(value, RayTaskError) else None
        raised = (cause if isinstance(cause, Exception) else value) if isinstance(value, RayTaskError) else None
        sched.failed(ref, value, raised)


def _fetch(ref) -> tuple[bool, Any]:
    """``(True, value)`` of a finished task, or ``(False, the error)``."""
    import ray

    try:
        return True, ray.get(ref)
    except ray.exceptions.RayError as exc:
        return False, exc


def _look(sched: Scheduler, watch: _Watch) -> None:
    """About once a second: the nodes (lost ones), the copies' starts, late copies, the heartbeat."""
    lost = watch.poll_nodes()
    if sched.live:
        sched.seen_running(watch.starts())
        watch.forget(c.seq for c in sched.live.values())
    if lost:
        sched.hosts_lost(lost)
    if watch.backups:
        sched.check_late()
        sched.last_wave()
    display = _progress.current()
    if display is not None and sched.open:
        quiet = time.monotonic() - sched.last_result
        display.waiting(quiet, lambda: sched.outstanding(quiet))


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
        pending = groups if isinstance(groups, FixedGroups) else _Listed(groups)
        if not pending:
            return
        self.connect()
        self.check_fits()
        slots = self.slots()
        in_flight_cap = self.max_in_flight
        if in_flight_cap is None:
            in_flight_cap = slots if self.task_timeout is not None else 2 * slots
        edge = _Launcher(fn, self.task_options(), shared, args)
        stats = DriverStats(slots=slots, in_flight_cap=in_flight_cap)
        _last_stats[0] = stats
        clock = time.perf_counter
        t_start = clock()
        watch = _Watch(self)
        edge.watch = watch
        sched = Scheduler(pending, slots=slots, in_flight_cap=in_flight_cap, cluster=watch, launch=edge.launch,
                          cancel=edge.cancel, task_timeout=self.task_timeout, backup_tasks=self.backup_tasks,
                          max_retries=self.max_retries, what=what, same=same, expirable=expired is not None,
                          last_wave_factor=LAST_WAVE_FACTOR, stats=stats, elapsed=lambda: clock() - t_start)
        try:
            yield from _drive(sched, watch, expired, stats)
        finally:
            stats.wall_s = clock() - t_start
            stats.deadline_factor = sched.deadlines.factor
            sched.close()
            watch.close()

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
