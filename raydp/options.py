"""How a sampling run is carried out: one frozen, self-validating object for every layer.

:class:`SamplerOptions` holds everything about *running* the Sensitivity Sampler that is not the
question itself (target, oracle, n, mechanism, plan): the seed and block size that fix the draws,
where the pairs run (the backend), where the G sample is kept (the store), and how failures and
progress are handled. It is checked once, when it is made, and then passed unchanged through the
API, the release, :class:`raydp.sklearn.PrivateEstimator`, the command line and the jobs — the one
place where an option is named, defaulted and validated.

The keyword form of the functions (``estimate_sensitivity(..., seed=1, backend="ray",
address=..., store="s3://...", flush_rows=...)``) is a thin shim: :meth:`SamplerOptions.of`
turns the keywords into this object, backend fields into the backend object and store fields into
the store object.

The command line is made from the same definitions: each field names its flag, help and argparse
type in its ``metadata`` (a :class:`Flag`, or why it has none), and :data:`RAY_FLAGS` does the same
for the Ray backend's fields; :func:`raydp.cli.add_sampler_flags` writes no flag of its own.

>>> SamplerOptions(seed=7, backend="local").backend
LocalBackend(group_size=1, shuffle_seed=None)
>>> SamplerOptions.of(backend="ray", task_timeout=30, seed=1).backend.task_timeout
30.0
>>> SamplerOptions(seed=-1)
Traceback (most recent call last):
...
raydp.errors.InvalidArgumentError: seed must be a non-negative integer or None, got -1
"""

from __future__ import annotations

import os
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Callable

from .engine.backends import BACKENDS, as_backend, backend_option_names
from .engine.blocks import check_timeout
from .engine.ray import RayBackend
from .errors import InvalidArgumentError, InvalidTypeError
from .store import STORE_OPTIONS, Store
from .validation import check_bool, check_int

__all__ = ["SamplerOptions", "Flag", "RAY_FLAGS", "option_flags", "ray_flags", "not_on_command_line"]


@dataclass(frozen=True)
class Flag:
    """How one option appears on the command line (``raydp estimate`` and every job).

    With a ``type`` the flag takes a value (``--seed 3``); without one it is a switch that sets the
    option to the opposite of its default (``--strict``; ``--no-replay`` for ``replay=False``).
    ``dest`` is where argparse keeps it when that is not the option's own name; a switch kept there
    is True when given (``--quiet`` keeps ``quiet``, and means ``progress=False``). ``{default}`` in
    ``help`` is filled with the option's default.
    """

    name: str
    help: str
    type: Callable | None = None
    metavar: str | None = None
    choices: tuple | None = None
    dest: str | None = None

    def value(self, parsed, default):
        """The option's value from what argparse kept under :attr:`dest`; None is the option's default."""
        if self.type is None and self.dest is not None:
            return (not default) if parsed else default
        return default if parsed is None else parsed


def _flag(*args, **keywords) -> dict:
    return {"flag": Flag(*args, **keywords)}


def _no_flag(why: str) -> dict:
    return {"flag": None, "no_flag": why}


@dataclass(frozen=True)
class SamplerOptions:
    """How to run the Sensitivity Sampler (module docstring). Every field has a safe default.

    Parameters
    ----------
    seed : int or None
        Fixes every random draw together with ``block_size`` (see :mod:`raydp.engine.blocks`). None
        draws a fresh seed for each run and records it in the estimate (with ``resume=True``: the
        stored run's seed).
    block_size : int or None
        Pairs per block. None: a default that depends only on n, m and the kind of target, never on
        the machine, so a default run is reproducible (with ``resume=True``: the stored run's).
    backend : "auto", "local", "ray" or a backend object
        Where the pairs run: :class:`~raydp.engine.LocalBackend`, :class:`~raydp.engine.RayBackend`
        or :class:`~raydp.engine.AutoBackend` (the default: in process for a small run, Ray for a large
        one or when a cluster is at hand). Every choice gives the same sample bit for bit.
    store : path, URI, :class:`~raydp.store.Store` or None
        Stream the whole G sample to a resumable Parquet store.
    resume : bool
        Continue or extend the run the store holds.
    strict : bool
        Stop at the first failing pair instead of counting it as G = +∞.
    keep_sample : bool or None
        Keep all m G values in the estimate: a reuse then replays pairs drawn at random from all of them
        (:mod:`raydp.engine.witness`), and Δ̂ can be re-derived for a smaller γ without a store. None (the
        default): kept when they take at most ``SAMPLE_MAX_BYTES`` (1 GiB, 8 bytes a pair) and fit in this
        machine's memory beside the rest; ``False``: never (a reuse replays the few fixed witness pairs).
    progress : bool
        Show progress (a bar on a terminal or in a notebook, a line every 30 s elsewhere).
    pair_timeout : float or None
        Seconds one pair may take; a pair that overruns it counts as a failure, G = +∞.
    time_budget : float or None
        Seconds of sampling to spend, a cap. When only γ is given the target is probed, and m is raised
        above the fewest pairs Theorem 15 allows as far as the budget affords on the resources at hand (a
        cluster's slots; with ``auto`` and no cluster, this machine's idle cores on an embedded Ray when
        what is left after starting it buys a larger plan, else one core, and the run then stays in
        process), k following from Theorem 15 — a smaller, steadier Δ̂ at the same γ
        (:func:`raydp.plan.plan_for`). Fixed from the fastest of a few timed evaluations on public probe
        data (a block of pairs for a target with a block form), before any G is drawn. A plan the budget
        cannot buy — the fewest pairs γ allows, or the m given — is refused before any pair is sampled
        (:class:`raydp.sampler.TimeBudgetError`, saying what would fit). None (the default here): the
        plan asked for, whatever it takes. ``PrivateEstimator`` spends a budget by default.
    replay : bool
        Before stored G values are reused (a store's resume, an ``estimate=``, a stored Δ̂ released),
        recompute the estimate's witness pairs with the target as it is now and refuse when a G
        differs (:mod:`raydp.engine.witness`). On by default; ``False`` trusts the stored values, and a
        release's statement then says so.
    """

    seed: int | None = field(default=None, metadata=_flag(
        "--seed", "fixes every G value with the block size", int))
    block_size: int | None = field(default=None, metadata=_flag(
        "--block-size", "pairs per block (default: from n, m and the target kind)", int))
    backend: object = field(default="auto", metadata=_flag(
        "--backend", "auto (default): in process for a small run, Ray for a large one or when a cluster is at hand "
                     "(--address, RAY_ADDRESS); local; ray. Every choice gives the same sample",
        str, choices=tuple(sorted(BACKENDS))))
    store: object = field(default=None, metadata=_flag(
        "--store", "store URI: local path or pyarrow filesystem URI (s3://...)", str))
    resume: bool = field(default=False, metadata=_flag("--resume", "continue the run stored at --store"))
    strict: bool = field(default=False, metadata=_flag("--strict", "stop on the first failing pair"))
    keep_sample: bool | None = field(default=None, metadata=_no_flag(
        "the command line prints Δ̂ only; a run whose whole G sample is wanted writes it to --store"))
    progress: bool = field(default=True, metadata=_flag("--quiet", "no progress display", dest="quiet"))
    pair_timeout: float | None = field(default=None, metadata=_flag(
        "--pair-timeout", "a pair whose evaluation takes longer counts as a failure (G = +inf)", float,
        metavar="SECONDS"))
    time_budget: float | None = field(default=None, metadata=_flag(
        "--time-budget", "seconds of sampling to spend, a cap: with --gamma alone m is raised above the fewest "
                         "pairs Theorem 15 allows as far as the budget affords (probed before any G is drawn), for a "
                         "smaller, steadier Δ̂ at the same γ; a plan it cannot buy is refused before sampling "
                         "(default: the plan asked for, whatever it takes)", float, metavar="SECONDS"))
    replay: bool = field(default=True, metadata=_flag(
        "--no-replay", "reuse stored G values without recomputing their witness pairs first (not advised)"))

    def __post_init__(self):
        if self.seed is not None:
            object.__setattr__(self, "seed", check_int(self.seed, "seed", min_value=0,
                                                       expected="a non-negative integer or None"))
        if self.block_size is not None:
            object.__setattr__(self, "block_size", check_int(self.block_size, "block_size", min_value=1))
        object.__setattr__(self, "backend", as_backend(self.backend))
        if self.store is not None and not isinstance(self.store, (str, os.PathLike, Store)):
            raise InvalidTypeError(f"store must be a path, a URI or a raydp Store, got {type(self.store).__name__}")
        if isinstance(self.store, os.PathLike):
            object.__setattr__(self, "store", os.fspath(self.store))
        for name in ("resume", "strict", "progress", "replay"):
            object.__setattr__(self, name, check_bool(getattr(self, name), name))
        if self.keep_sample is not None:
            try:
                object.__setattr__(self, "keep_sample", check_bool(self.keep_sample, "keep_sample"))
            except InvalidTypeError:
                raise InvalidTypeError(f"keep_sample must be True or False (or None: kept when it fits), got "
                                       f"{self.keep_sample!r}") from None
        object.__setattr__(self, "pair_timeout", check_timeout("pair_timeout", self.pair_timeout))
        object.__setattr__(self, "time_budget", check_timeout("time_budget", self.time_budget))
        if self.resume and self.store is None:
            raise InvalidArgumentError("resume=True needs a store")

    @classmethod
    def names(cls) -> list[str]:
        """The fields, in order."""
        return [f.name for f in fields(cls)]

    @classmethod
    def of(cls, options: "SamplerOptions | None" = None, **keywords) -> "SamplerOptions":
        """``options`` with ``keywords`` applied: the keyword shim of every function that takes options.

        Keywords are this object's fields, the chosen backend's fields next to a backend *name*
        (``backend="ray", address=...``; with ``"auto"`` the Ray backend's) and the store's fields next
        to a store *URI* (``store="s3://...", flush_rows=...``). Anything else is refused with the list
        of what is allowed.
        """
        base = cls() if options is None else options
        if not isinstance(base, cls):
            raise InvalidTypeError(f"options must be a raydp.SamplerOptions, got {type(base).__name__}")
        if not keywords:
            return base
        own = {k: keywords.pop(k) for k in list(keywords) if k in cls.names()}
        store_opts = {k: keywords.pop(k) for k in list(keywords) if k in STORE_OPTIONS}
        backend = own.get("backend", base.backend if options is not None else "auto")
        if keywords:  # the backend's own fields, next to its name
            if not isinstance(backend, str):
                unknown = sorted(keywords)
                if set(unknown) <= set(backend_option_names()):
                    raise InvalidArgumentError(f"option(s) {', '.join(unknown)} given next to a backend object; set "
                                               f"them on the object ({type(backend).__name__}(...)) instead")
                raise InvalidArgumentError(_unknown(unknown))
            own["backend"] = as_backend(backend, keywords)
        if store_opts:
            store = own.get("store", base.store)
            if store is None:
                raise InvalidArgumentError(f"option(s) {', '.join(sorted(store_opts))} need store=")
            if isinstance(store, Store):
                raise InvalidArgumentError(f"option(s) {', '.join(sorted(store_opts))} given next to a Store object; "
                                           "set them on the object (Store(uri, ...)) instead")
            own["store"] = Store(os.fspath(store), **store_opts)
        return replace(base, **own)

    def summary(self) -> dict:
        """The options as plain data (for a log line or a report; the backend and store by their repr)."""
        return {name: (getattr(self, name) if name not in ("backend", "store") else
                       (None if getattr(self, name) is None else repr(getattr(self, name)))) for name in self.names()}


def _unknown(names: list[str]) -> str:
    allowed = sorted(set(SamplerOptions.names()) | set(backend_option_names()) | set(STORE_OPTIONS))
    return f"unknown option(s) {', '.join(names)}; allowed: {', '.join(allowed)}"


# The Ray backend's fields that have a flag (the class is the engine's; its other fields — resources and
# retries per task, tasks in flight, backup tasks — are set on a RayBackend object in Python).
RAY_FLAGS = {
    "address": Flag("--address", "Ray cluster address (default: RAY_ADDRESS, set by `ray job submit`)", str),
    "num_cpus": Flag("--num-cpus", "CPUs of the embedded Ray started when there is no cluster (default: all)", int,
                     metavar="N"),
    "task_timeout": Flag("--task-timeout", "ray backend: kill a task that runs longer; its pairs count as failures",
                         float, metavar="SECONDS"),
    "connect_timeout": Flag("--connect-timeout", "with --address or RAY_ADDRESS: fail in one line when no Ray cluster "
                                                 "answers there within this time (default: {default:g})",
                            float, metavar="SECONDS"),
}


def option_flags() -> list[tuple[str, Flag, object]]:
    """``(field, flag, default)`` of every :class:`SamplerOptions` field that has a flag, in field order."""
    return [(f.name, f.metadata["flag"], f.default) for f in fields(SamplerOptions) if f.metadata.get("flag")]


def not_on_command_line() -> dict[str, str]:
    """The :class:`SamplerOptions` fields without a flag, each with why."""
    return {f.name: f.metadata["no_flag"] for f in fields(SamplerOptions) if f.metadata.get("flag") is None}


def ray_flags() -> list[tuple[str, Flag, object]]:
    """``(field, flag, default)`` of the :class:`~raydp.engine.RayBackend` fields in :data:`RAY_FLAGS`."""
    defaults = {f.name: (None if f.default is MISSING else f.default) for f in fields(RayBackend)}
    return [(name, flag, defaults[name]) for name, flag in RAY_FLAGS.items()]
