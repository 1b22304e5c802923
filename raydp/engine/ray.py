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
stuck in C code) and every pair of its blocks counts as a failure, G = +∞, kind "task timed out".
Failures only raise Δ̂, so this is safe; it is never a stuck job. The clock starts at submission,
so with a timeout the driver keeps at most one task per CPU slot in flight (no task waits in a
queue while its clock runs). For a finer grain use ``pair_timeout`` (per pair, in the worker).

:meth:`RayBackend.imap` is the generic part (a function over groups of items, one shared object put
once, bounded tasks in flight, errors unwrapped); the sampler's blocks and the baselines'
sample-and-aggregate both run through it.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

from ..errors import EngineError, InvalidArgumentError, TargetError
from ..validation import check_int, check_real
from .blocks import BlockResult, PairJob, check_timeout
from .grouping import FixedGroups, GuidedGroups, task_seconds
from .protocol import Backend
from .reach import DEFAULT_CONNECT_TIMEOUT, check_reachable
from .loopback import LOOPBACK_HOST, loopback_only

_remote_cache: dict = {}


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

    def to_dict(self, timeline: bool = False) -> dict:
        d = {k: getattr(self, k) for k in ("slots", "in_flight_cap", "groups", "results", "wall_s", "submit_s",
                                           "wait_s", "wait_calls", "get_s", "consumer_s", "busy_s")}
        if timeline:
            d.update(submitted=list(self.submitted), done=list(self.done))
        return d


_last_stats: list = [None]


def last_stats() -> DriverStats | None:
    """The :class:`DriverStats` of the latest ``imap``/``run`` in this process (None before any)."""
    return _last_stats[0]


def _remote(fn: Callable):
    """``ray.remote(fn)``, made once per function and process."""
    import ray

    if fn not in _remote_cache:
        _remote_cache[fn] = ray.remote(fn)
    return _remote_cache[fn]


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
    if address:
        check_reachable(address, connect_timeout)
        try:
            ray.init(address=address, **kwargs)
        except Exception as exc:
            raise EngineError(f"cannot connect to the Ray cluster at {address!r}: {exc}".splitlines()[0]) from exc
        return
    with loopback_only():
        ray.init(num_cpus=num_cpus, include_dashboard=False, _node_ip_address=LOOPBACK_HOST, **kwargs)


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
      pair of its blocks counts as a failure, G = +∞.
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
             expired: Callable[[list], Any] | None = None, what: str = "items") -> Iterator[tuple[list, Any]]:
        """``fn(shared, group, *args)`` as one Ray task per group; yield ``(group, result)`` as tasks finish.

        ``shared`` is put in the object store once. An application error in a task is re-raised here
        with its own type (not retried: it is deterministic). A task lost for good (its worker died
        more than ``max_retries`` times) raises :class:`EngineError`. With ``task_timeout``, a task past
        its deadline is killed and ``expired(group)`` is yielded as its result (or raises).
        """
        import ray

        pending = groups if isinstance(groups, FixedGroups) else _Listed(groups)
        if not pending:
            return
        self.connect()
        self.check_fits()
        slots = self.slots()
        in_flight_cap = self.max_in_flight
        if in_flight_cap is None:
            in_flight_cap = slots if self.task_timeout is not None else 2 * slots
        task = _remote(fn).options(**self.task_options())
        shared_ref = ray.put(shared)

        in_flight: dict = {}
        deadline: dict = {}
        stats = DriverStats(slots=slots, in_flight_cap=in_flight_cap)
        _last_stats[0] = stats
        clock = time.perf_counter
        t_start = clock()
        try:
            while pending or in_flight:
                if pending and len(in_flight) < in_flight_cap:
                    t0 = clock()
                    while pending and len(in_flight) < in_flight_cap:
                        group = pending.take()
                        ref = task.remote(shared_ref, group, *args)
                        in_flight[ref] = group
                        stats.groups += 1
                        stats.submitted.append(clock() - t_start)
                        if self.task_timeout is not None:
                            deadline[ref] = time.monotonic() + self.task_timeout
                    stats.submit_s += clock() - t0
                wait = None if self.task_timeout is None else max(0.0, min(deadline.values()) - time.monotonic())
                t0 = clock()
                done, _ = ray.wait(list(in_flight), num_returns=1, timeout=wait)
                stats.wait_s += clock() - t0
                stats.wait_calls += 1
                if not done:
                    now = time.monotonic()
                    for ref in [r for r, t in deadline.items() if t <= now]:
                        group = in_flight.pop(ref)
                        del deadline[ref]
                        ray.cancel(ref, force=True)
                        if expired is None:
                            raise EngineError(f"{what} {group[0]}..{group[-1]}: task ran over "
                                              f"task_timeout={self.task_timeout:g} s")
                        stats.done.append(clock() - t_start)
                        t0 = clock()
                        yield group, expired(group)
                        stats.consumer_s += clock() - t0
                    continue
                if len(in_flight) > len(done):
                    # Collect every other task already finished in the same pass: one scan of the
                    # pending refs and one ray.get for all of them instead of one each.
                    t0 = clock()
                    more, _ = ray.wait([r for r in in_flight if r not in done], num_returns=len(in_flight) - len(done),
                                       timeout=0)
                    stats.wait_s += clock() - t0
                    done = done + more
                t0 = clock()
                try:
                    results = ray.get(done)
                except ray.exceptions.RayError:
                    results = None  # one of them failed: fetch them one by one to name it
                stats.get_s += clock() - t0
                for i, ref in enumerate(done):
                    group = in_flight.pop(ref)
                    deadline.pop(ref, None)
                    if results is not None:
                        result = results[i]
                    else:
                        t0 = clock()
                        result = self._get_one(ref, group, what)
                        stats.get_s += clock() - t0
                    t1 = clock()
                    stats.done.append(t1 - t_start)
                    stats.results += 1
                    yield group, result
                    stats.consumer_s += clock() - t1
        finally:
            stats.wall_s = clock() - t_start
            for ref in in_flight:
                ray.cancel(ref, force=False)

    def _get_one(self, ref, group: list, what: str):
        """``ray.get(ref)`` with the task's own error re-raised, or EngineError for a lost task."""
        import ray
        from ray.exceptions import RayTaskError

        try:
            return ray.get(ref)
        except RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            raise (cause if isinstance(cause, Exception) else exc) from None
        except ray.exceptions.RayError as exc:
            raise EngineError(
                f"{what} {group[0]}..{group[-1]} were lost ({type(exc).__name__}; Ray retries a dead "
                f"worker's task up to {self.max_retries} times); the run stops rather than return "
                "fewer than m pairs. Rerun with a store and resume=True to keep finished blocks."
            ) from exc

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

        for _, results in self.imap(_run_group, job, groups, compact, expired=timed_out, what="blocks"):
            stats = _last_stats[0]
            busy = sum(r.seconds for r in results)
            stats.busy_s += busy
            groups.observe(len(results), busy)
            yield from results
