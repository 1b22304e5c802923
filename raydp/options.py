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
from dataclasses import dataclass, fields, replace

from .engine.backends import as_backend, backend_option_names
from .engine.blocks import check_timeout
from .errors import InvalidArgumentError
from .store import STORE_OPTIONS, Store
from .validation import check_bool, check_int

__all__ = ["SamplerOptions"]


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
    keep_sample : bool
        Keep all m G values in the estimate (to re-derive Δ̂ for a smaller γ without a store).
    progress : bool
        Show progress (a bar on a terminal or in a notebook, a line every 30 s elsewhere).
    pair_timeout : float or None
        Seconds one pair may take; a pair that overruns it counts as a failure, G = +∞.
    """

    seed: int | None = None
    block_size: int | None = None
    backend: object = "auto"
    store: object = None
    resume: bool = False
    strict: bool = False
    keep_sample: bool = False
    progress: bool = True
    pair_timeout: float | None = None

    def __post_init__(self):
        if self.seed is not None:
            object.__setattr__(self, "seed", check_int(self.seed, "seed", min_value=0,
                                                       expected="a non-negative integer or None"))
        if self.block_size is not None:
            object.__setattr__(self, "block_size", check_int(self.block_size, "block_size", min_value=1))
        object.__setattr__(self, "backend", as_backend(self.backend))
        if self.store is not None and not isinstance(self.store, (str, os.PathLike, Store)):
            raise InvalidArgumentError(f"store must be a path, a URI or a raydp Store, got {type(self.store).__name__}")
        if isinstance(self.store, os.PathLike):
            object.__setattr__(self, "store", os.fspath(self.store))
        for name in ("resume", "strict", "keep_sample", "progress"):
            object.__setattr__(self, name, check_bool(getattr(self, name), name))
        object.__setattr__(self, "pair_timeout", check_timeout("pair_timeout", self.pair_timeout))
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
            raise InvalidArgumentError(f"options must be a raydp.SamplerOptions, got {type(base).__name__}")
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
