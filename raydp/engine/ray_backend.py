"""Ray backend: the same block function as the local backend, as Ray tasks.

Map: one task per group of consecutive blocks; the :class:`~raydp.blocks.PairJob` (oracle, target,
mechanism) is put in the object store once and passed by reference. The driver keeps a bounded
number of tasks in flight with ``ray.wait`` and yields results as they finish. When only Δ̂ is
needed, each task compacts its blocks to their m − k + 1 largest values before returning (the
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
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from typing import Iterator, Sequence

from ..blocks import BlockResult, PairJob, check_timeout
from ..errors import EngineError
from .local import groups_of

_remote_cache: dict = {}


def _run_group(job: PairJob, blocks: list[int], compact: int | None) -> list[BlockResult]:
    results = job.run_blocks(blocks)
    if compact is not None:
        results = [r.compacted(compact) for r in results]
    return results


def _remote():
    import ray

    if "run_group" not in _remote_cache:
        _remote_cache["run_group"] = ray.remote(_run_group)
    return _remote_cache["run_group"]


def ensure_ray(address: str | None = None, num_cpus: int | None = None) -> None:
    """Connect to a Ray cluster, or start an embedded one bound to 127.0.0.1.

    ``address`` (or ``RAY_ADDRESS``, set inside ``ray job submit``) selects a running cluster.
    Without one, ``backend="auto"`` and ``"ray"`` both start a local Ray in this process.
    """
    import ray

    if ray.is_initialized():
        if address:
            import re

            current = ray.get_runtime_context().gcs_address or ""
            port = re.search(r":(\d+)/?$", str(address))
            if port and current and current.rsplit(":", 1)[-1] != port.group(1):
                raise EngineError(f"Ray is already connected to {current}; cannot also use address {address!r} "
                                  "in this process")
        return
    address = address or os.environ.get("RAY_ADDRESS") or None
    kwargs = dict(log_to_driver=True, configure_logging=False)
    if address:
        try:
            ray.init(address=address, **kwargs)
        except Exception as exc:
            raise EngineError(f"cannot connect to the Ray cluster at {address!r}: {exc}".splitlines()[0]) from exc
        return
    with _loopback_only():
        ray.init(num_cpus=num_cpus, include_dashboard=False, _node_ip_address="127.0.0.1", **kwargs)


@contextlib.contextmanager
def _loopback_only():
    """Keep an embedded Ray on 127.0.0.1.

    Ray (2.x) rewrites ``_node_ip_address="127.0.0.1"`` to the machine's routable address
    (``services.resolve_ip_for_localhost``) and then binds GCS, raylet and workers to it. It only
    keeps the loopback address when ``ray_constants.ENABLE_RAY_CLUSTER`` is false, so that is
    switched off while the local instance starts (the started processes get the node IP from
    their command line, so nothing else changes). Best effort: a Ray without the constant is left
    alone.
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


def cluster_cpus() -> int:
    import ray

    return max(1, int(ray.cluster_resources().get("CPU", 1)))


def largest_node_cpus() -> float:
    import ray

    return max((n.get("Resources", {}).get("CPU", 0.0) for n in ray.nodes() if n.get("Alive")), default=0.0)


def run_blocks(
    job: PairJob,
    blocks: Sequence[int],
    *,
    backend: str = "ray",
    address: str | None = None,
    group_size: int | None = None,
    max_in_flight: int | None = None,
    num_cpus: float = 1,
    memory: int | None = None,
    max_retries: int = 3,
    compact: int | None = None,
    ray_init_cpus: int | None = None,
    task_timeout: float | None = None,
) -> Iterator[BlockResult]:
    """Run ``blocks`` as Ray tasks; yield each block's result as its task finishes.

    ``num_cpus``/``memory`` are per task (raise ``num_cpus`` for multi-threaded targets).
    ``group_size`` blocks go to one task (default: about four tasks per CPU slot, two for batched targets).
    ``compact``: forward only that many largest G per block (Δ̂ only, no sample).
    ``task_timeout``: seconds after which a task is killed and its pairs count as failures.
    """
    import ray
    from ray.exceptions import RayTaskError

    task_timeout = check_timeout("task_timeout", task_timeout)
    blocks = list(blocks)
    if not blocks:  # e.g. a resumed store that is already complete: no need to start Ray
        return
    ensure_ray(address, ray_init_cpus)
    biggest = largest_node_cpus()
    if num_cpus > biggest and not os.environ.get("RAYDP_ALLOW_AUTOSCALE"):
        # Ray would wait forever for a node that never comes; say so instead of hanging.
        raise EngineError(f"num_cpus={num_cpus} per task but the largest node has {biggest:g} CPUs; lower "
                          "num_cpus or add bigger nodes (set RAYDP_ALLOW_AUTOSCALE=1 if an autoscaler will)")
    slots = max(1, int(cluster_cpus() // max(num_cpus, 1e-9)))
    if group_size is None:
        # About four tasks per slot balance the load of expensive per-pair targets; a batched
        # target's tasks are short, and the ~1-3 ms each task costs weighs more: two per slot.
        per_slot = 2 if callable(getattr(job.target, "batch", None)) else 4
        group_size = max(1, math.ceil(len(blocks) / (per_slot * slots)))
    if max_in_flight is None:
        max_in_flight = slots if task_timeout is not None else 2 * slots
    options = dict(num_cpus=num_cpus, max_retries=max_retries, retry_exceptions=False)
    if memory is not None:
        options["memory"] = memory
    task = _remote().options(**options)
    job_ref = ray.put(job)

    pending = groups_of(blocks, group_size)
    pending.reverse()  # pop() from the end submits groups in block order
    in_flight: dict = {}
    deadline: dict = {}
    try:
        while pending or in_flight:
            while pending and len(in_flight) < max_in_flight:
                group = pending.pop()
                ref = task.remote(job_ref, group, compact)
                in_flight[ref] = group
                if task_timeout is not None:
                    deadline[ref] = time.monotonic() + task_timeout
            wait = None if task_timeout is None else max(0.0, min(deadline.values()) - time.monotonic())
            done, _ = ray.wait(list(in_flight), num_returns=1, timeout=wait)
            if not done:
                yield from _expire(job, in_flight, deadline, task_timeout, compact)
                continue
            for ref in done:
                group = in_flight.pop(ref)
                deadline.pop(ref, None)
                try:
                    results = ray.get(ref)
                except RayTaskError as exc:
                    cause = getattr(exc, "cause", None)
                    raise (cause if isinstance(cause, Exception) else exc) from None
                except ray.exceptions.RayError as exc:
                    raise EngineError(
                        f"blocks {group[0]}..{group[-1]} were lost ({type(exc).__name__}; Ray retries a dead "
                        f"worker's task up to {max_retries} times); the run stops rather than return fewer "
                        "than m pairs. "
                        "Rerun with a store and resume=True to keep finished blocks."
                    ) from exc
                yield from results
    finally:
        for ref in in_flight:
            ray.cancel(ref, force=False)


def _expire(job: PairJob, in_flight: dict, deadline: dict, task_timeout: float, compact: int | None):
    """Kill the tasks past their deadline; every pair of their blocks is a counted failure."""
    import ray

    from ..errors import TargetError

    now = time.monotonic()
    for ref in [r for r, t in deadline.items() if t <= now]:
        group = in_flight.pop(ref)
        del deadline[ref]
        ray.cancel(ref, force=True)
        if job.strict:
            raise TargetError(f"blocks {group[0]}..{group[-1]}: task ran over task_timeout={task_timeout:g} s "
                              "(strict mode)")
        for b in group:
            start = b * job.block_size
            result = BlockResult.failed(b, start, min(job.block_size, job.m - start), "task timed out",
                                        seconds=task_timeout)
            yield result if compact is None else result.compacted(compact)
