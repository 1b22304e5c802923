"""Choosing a backend: an object (:class:`LocalBackend`, :class:`RayBackend`, :class:`AutoBackend`) or a
string shortcut.

Every backend is a :class:`~raydp.engine.protocol.Backend`: a ``name``, ``choose`` (called once before
the run: which backend runs which blocks) and ``run(job, blocks, *, compact=None) -> iterator of
BlockResult``. The sampler calls the two the same way whatever the backend. The strings are shortcuts: ``"local"`` is ``LocalBackend()``, ``"ray"`` is
``RayBackend()``, ``"auto"`` is ``AutoBackend()``. Options given next to a string are the fields of
the backend it names (``backend="ray", address=...`` is ``RayBackend(address=...)``; with ``"auto"``
they are the Ray backend's, used if it goes to Ray); anything else is refused with the list of what
is allowed.

``auto`` decides from the run itself, never from anything that could change a result (the block
size depends only on n, m and the target kind):

- a cluster at hand — ``address=``, ``RAY_ADDRESS`` (set inside ``ray job submit``), or Ray already
  initialised in this process — or a ``task_timeout`` (which only Ray can enforce): Ray;
- otherwise it runs the first block in process and times it; when the pairs left would take less
  than ``local_seconds`` in process (default: the ~7 s an embedded Ray takes to start, divided by
  the share of time the other cores would save, 14 s on 2 idle cores — on a loaded machine the cores
  other processes keep busy are not counted and the start takes longer, and with no idle core but
  this process's own it never pays: :func:`default_local_seconds`), it finishes in process, else on
  Ray. The timed block is part of the run either way: nothing is computed twice. An embedded Ray
  that fails to start (its processes are stopped, :func:`raydp.engine.ray.stop_failed_start`) leaves the
  run in process, with a warning: the blocks are the same wherever they run.

>>> as_backend("local")
LocalBackend(group_size=1, shuffle_seed=None)
>>> as_backend("ray", {"task_timeout": 30}).task_timeout
30.0
>>> as_backend("auto").name
'auto'
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import time
from dataclasses import dataclass, field, fields
from typing import Callable, Sequence

from ..errors import EngineError, InvalidArgumentError
from ..validation import check_real
from .local import LocalBackend
from .protocol import Backend
from .ray import RayBackend

log = logging.getLogger("raydp.engine")

BACKENDS = ("local", "ray", "auto")
# Seconds an embedded Ray takes to start on a laptop (measured: 5-8 s, jobs/bench.py "overheads").
RAY_START_SECONDS = 7.0


def machine_load() -> float:
    """This machine's load average over the last minute (0 where the system does not say)."""
    try:
        return float(os.getloadavg()[0])
    except (OSError, AttributeError):  # pragma: no cover - not POSIX
        return 0.0


def free_cores(cores: int | None = None, load: float | None = None) -> float:
    """Cores an embedded Ray would find idle: this machine's (or ``cores``) less what other processes keep
    busy — the load average less the one core this process's own sampling accounts for — at least 1.

    >>> free_cores(2, load=0.0), free_cores(2, load=1.0), free_cores(2, load=4.5), free_cores(8, load=3.0)
    (2.0, 2.0, 1.0, 6.0)
    """
    cores = (os.cpu_count() or 1) if cores is None else cores
    load = machine_load() if load is None else load
    return float(max(1.0, cores - max(0.0, load - 1.0)))


def ray_start_seconds(cores: int | None = None, load: float | None = None) -> float:
    """What starting an embedded Ray costs now: :data:`RAY_START_SECONDS` on an idle machine, stretched by
    how oversubscribed its cores are (its dozen processes wait for a core like everything else)."""
    cores = (os.cpu_count() or 1) if cores is None else cores
    load = machine_load() if load is None else load
    return RAY_START_SECONDS * max(1.0, load / max(cores, 1))


def default_local_seconds(cores: int | None = None, load: float | None = None) -> float:
    """Work (seconds in process) below which starting Ray cannot pay off: start / (1 − 1/cores), with the
    cores an embedded Ray would find idle and its start stretched by the load (:func:`free_cores`,
    :func:`ray_start_seconds`). ``cores`` given without ``load``: an idle machine of that many cores."""
    if cores is not None and load is None:
        load = 0.0
    free = free_cores(cores, load)
    return float("inf") if free <= 1 else ray_start_seconds(cores, load) / (1.0 - 1.0 / free)


@dataclass(frozen=True)
class AutoBackend(Backend):
    """In process when the run is small, on Ray when it is large or a cluster is at hand (module docstring)."""

    ray: RayBackend = field(default_factory=RayBackend)
    local_seconds: float | None = None

    name = "auto"

    def __post_init__(self):
        if not isinstance(self.ray, RayBackend):
            raise InvalidArgumentError(f"AutoBackend(ray=) must be a RayBackend, got {self.ray!r}")
        if self.local_seconds is not None:
            check_real(self.local_seconds, "local_seconds", min_value=0, finite=False)

    def cluster_reason(self) -> str | None:
        """Why Ray must be used whatever the size of the run (None: the size decides)."""
        if self.ray.address:
            return f"address {self.ray.address}"
        if os.environ.get("RAY_ADDRESS"):
            return "RAY_ADDRESS is set (a cluster, e.g. inside ray job submit)"
        ray = sys.modules.get("ray")
        if ray is not None and getattr(ray, "is_initialized", lambda: False)():
            return "Ray is already initialised in this process"
        if self.ray.task_timeout is not None:
            return "task_timeout needs Ray"
        return None

    def run(self, job, blocks: Sequence[int], *, compact: int | None = None):
        """Choose, then run: the timed blocks first, then the rest on the chosen backend."""
        timed: list = []
        backend, left, _ = self.started(*self.choose(job, blocks, compact=compact, consume=timed.append))
        yield from timed
        yield from backend.run(job, left, compact=compact)

    def started(self, backend, blocks, why: str):
        """``(backend, blocks, why)`` of :meth:`choose` with an embedded Ray it chose started now: when that start
        fails (its processes are stopped, :func:`raydp.engine.ray.stop_failed_start`) the run stays in process,
        with a warning — the blocks are the same wherever they run."""
        if not isinstance(backend, RayBackend) or self.cluster_reason() is not None:
            return backend, blocks, why
        try:
            backend.connect()
        except EngineError as exc:
            log.warning("%s; the run continues in this process", str(exc).split("; ")[0])
            return LocalBackend(), blocks, f"local (auto: the embedded Ray did not start: {str(exc).splitlines()[0]})"
        return backend, blocks, why

    def choose(self, job, blocks: Sequence[int], *, compact: int | None,
               consume: Callable) -> tuple[Backend, list[int], str]:
        """``(backend, blocks left, why)``. May run up to two blocks in process (handed to ``consume``)."""
        blocks = list(blocks)
        if not blocks:
            return LocalBackend(), blocks, "local (nothing left to run)"
        reason = self.cluster_reason()
        if reason is not None:
            return self.ray, blocks, f"ray ({reason})"
        limit = default_local_seconds() if self.local_seconds is None else self.local_seconds
        per_pair = float("inf")
        for _ in range(2):  # a second block when the first looks slow: it may have paid one-off imports
            b = blocks.pop(0)
            t0 = time.perf_counter()
            result = job.prepared().run_block(b)
            per_pair = min(per_pair, (time.perf_counter() - t0) / max(result.pairs, 1))
            consume(result if compact is None else result.compacted(compact))
            left = per_pair * job.layout.pairs_in(blocks)
            if not blocks or left <= limit:
                return LocalBackend(), blocks, f"local (auto: about {left:.2g} s of work left in process)"
        ray = dataclasses.replace(self.ray)
        object.__setattr__(ray, "block_seconds", per_pair * job.block_size)  # sizes its first tasks
        return ray, blocks, (f"ray (auto: about {left:.3g} s of work left in process, above {limit:.3g} s: "
                                  "worth starting Ray)")


def option_names(backend) -> list[str]:
    cls = backend if isinstance(backend, type) else type(backend)
    return [f.name for f in fields(cls) if f.init]


def backend_option_names() -> list[str]:
    """Every field a backend shortcut string may carry (the local and the Ray backend's)."""
    return sorted(set(option_names(LocalBackend)) | set(option_names(RayBackend)))


def _is_backend(obj) -> bool:
    return isinstance(obj, Backend) or (callable(getattr(obj, "run", None)) and callable(getattr(obj, "choose", None)))


def as_backend(backend, options: dict | None = None) -> Backend:
    """The backend object for ``backend`` (an object, or one of :data:`BACKENDS` plus its ``options``)."""
    options = dict(options or {})
    if _is_backend(backend):
        if options:
            raise InvalidArgumentError(f"option(s) {', '.join(sorted(options))} given next to a backend object; "
                                       f"set them on the object ({type(backend).__name__}(...)) instead")
        return backend
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise InvalidArgumentError(f"backend must be one of {', '.join(BACKENDS)} or a backend object "
                                   f"(LocalBackend(), RayBackend(...), AutoBackend(), or a raydp.engine.Backend); "
                                   f"got {backend!r}")
    cls = LocalBackend if backend == "local" else RayBackend
    if cls is LocalBackend and "task_timeout" in options:
        raise InvalidArgumentError("task_timeout needs the Ray backend (it kills the worker running the task); "
                                   "in process use pair_timeout")
    allowed = option_names(cls)
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise InvalidArgumentError(f"unknown option(s) {', '.join(unknown)} for the {backend} backend; "
                                   f"allowed: {', '.join(sorted(allowed))}")
    return AutoBackend(ray=RayBackend(**options)) if backend == "auto" else cls(**options)
