"""SensitivitySampler (Algorithm 1): the one orchestrator over an engine, a store and a reducer.

:func:`estimate_sensitivity` validates the request, probes the target once, fixes the run identity,
then streams blocks: those a store already holds are read from it, the rest are run by the engine
(in process or on Ray) and written to the store as they finish; every block goes through one
reducer, which reads off Δ̂ = G_(k). :func:`load_estimate` is the same reduction over a store alone.
Nothing below this module calls back into it.

>>> import raydp
>>> from raydp import oracles, targets
>>> est = raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), n=100,
...                                  gamma=0.1, seed=7, progress=False)
>>> est.plan.m, est.failures
(285, 0)
"""

from __future__ import annotations

import logging
import os
import time

import numpy as np

from .engine.backends import AutoBackend, as_backend
from .engine.blocks import BlockLayout, PairJob, check_timeout, default_block_size, probe_output_dim
from .engine.progress import Progress
from .engine.reduce import Reducer
from .errors import InvalidArgumentError, PlanError, StoreError
from .estimate import SensitivityEstimate
from .identity import RunIdentity, check_reusable, describe
from .plan import Plan, plan as make_plan
from .store import Store
from .validation import check_bool, check_int

log = logging.getLogger("raydp.sampler")

# Store options that may ride along with a store URI (``store="path", flush_rows=...``).
STORE_OPTIONS = ("flush_rows", "flush_seconds")

__all__ = ["estimate_sensitivity", "load_estimate", "SensitivityEstimate", "resolve_seed"]


def _default_mechanism():
    from .mechanisms import Laplace

    # The norm is all the sampler needs; ε is chosen at release time. Laplace(1) measures in ℓ1.
    return Laplace(1.0)


def resolve_seed(seed) -> int:
    if seed is None:
        return int(np.random.SeedSequence().entropy)
    return check_int(seed, "seed", min_value=0, expected="a non-negative integer or None")


def _open_store(store, options: dict) -> Store | None:
    """The store object for ``store`` (a URI or a :class:`Store`), with any store options given beside it."""
    if store is None:
        return None
    if isinstance(store, Store):
        if options:
            raise InvalidArgumentError(f"option(s) {', '.join(sorted(options))} given next to a Store object; "
                                       "set them on the object (Store(uri, ...)) instead")
        return store
    return Store(store, **options)


def estimate_sensitivity(
    target,
    oracle,
    n: int,
    *,
    mechanism=None,
    gamma=None,
    m=None,
    k=None,
    seed=None,
    block_size=None,
    backend="auto",
    store=None,
    resume: bool = False,
    strict: bool = False,
    keep_sample: bool = False,
    progress: bool = True,
    pair_timeout: float | None = None,
    **options,
) -> SensitivityEstimate:
    """SensitivitySampler(n, f, m, k, P): Δ̂ = G_(k) over m neighbouring pairs drawn from ``oracle``.

    ``mechanism`` fixes the norm G is measured in (default: Laplace, ℓ1). The plan comes from any
    admissible combination of ``gamma``, ``m``, ``k`` (see :func:`raydp.plan`). ``seed`` and
    ``block_size`` fix every random draw (see :mod:`raydp.engine.blocks`); ``seed=None`` draws a
    fresh seed and records it.

    ``backend`` is a backend object (:class:`~raydp.engine.LocalBackend`, :class:`~raydp.engine.RayBackend`,
    :class:`~raydp.engine.AutoBackend`) or a shortcut string, ``"local"``, ``"ray"`` or ``"auto"`` (the
    default: in process for a small run, on Ray for a large one or when a cluster is at hand; see
    :mod:`raydp.engine.backends`; ``estimate.backend`` says what was chosen and why). With a string,
    ``options`` are that backend's fields (``backend="ray", address=..., task_timeout=...``). The
    result is the same bit for bit whatever runs it.

    ``store`` (a path, a URI or a :class:`~raydp.store.Store`) streams the whole G sample to a
    resumable Parquet store (with a URI, ``flush_rows=``/``flush_seconds=`` are the store's options);
    ``resume=True`` continues or extends the run it holds. ``keep_sample=True`` keeps all m G values
    (needed to re-derive Δ̂ for a smaller γ). ``pair_timeout`` (seconds) turns a pair whose
    evaluation overruns it into a counted failure (G = +∞); ``strict=True`` stops at the first
    failing pair instead.
    """
    from .oracles import as_oracle
    from .targets import as_target

    target = as_target(target)
    oracle = as_oracle(oracle)
    n = check_int(n, "n", min_value=1)
    p = make_plan(gamma=gamma, m=m, k=k)
    mechanism = _default_mechanism() if mechanism is None else mechanism
    for attr in ("embed", "distance", "norm"):
        if not hasattr(mechanism, attr):
            raise InvalidArgumentError(f"mechanism must be a raydp mechanism (missing .{attr}), got {mechanism!r}")
    seed = None if seed is None else resolve_seed(seed)
    for flag, value in (("strict", strict), ("progress", progress), ("keep_sample", keep_sample), ("resume", resume)):
        check_bool(value, flag)
    store_options = {key: options.pop(key) for key in STORE_OPTIONS if key in options and store is not None}
    st = _open_store(store, store_options)
    if st is not None:  # a store is for resuming and reusing: its run must name what it computed
        check_reusable(describe(target), "target", StoreError, "a stored run")
        check_reusable(describe(oracle), "oracle", StoreError, "a stored run")
    if st is not None and resume and (seed is None or block_size is None):
        stored_seed, stored_bs = st.stored()  # resuming/extending keeps the stored run's seed and blocks
        seed = stored_seed if seed is None else seed
        block_size = stored_bs if block_size is None else block_size
    if block_size is None:
        bs = default_block_size(n, p.m, batched=callable(getattr(target, "batch", None)))
    else:
        bs = check_int(block_size, "block_size", min_value=1)
    seed = resolve_seed(seed)
    engine = as_backend(backend, options)
    if st is None and resume:
        raise InvalidArgumentError("resume=True needs a store")
    if bs * (n + 1) > 2**63 - 1:  # records drawn per block: numpy's largest array
        raise InvalidArgumentError(f"block_size * (n + 1) must be at most 2**63 - 1, got n={n}, block_size={bs}")
    pair_timeout = check_timeout("pair_timeout", pair_timeout)
    out_dim = probe_output_dim(target, oracle, mechanism, n, seed, timeout=pair_timeout)
    identity = RunIdentity(n=n, seed=seed, block_size=bs, mechanism=describe(mechanism), norm=str(mechanism.norm),
                           target=describe(target), oracle=describe(oracle), output_dim=out_dim)
    job = PairJob(target=target, oracle=oracle, mechanism=mechanism, n=n, m=p.m, seed=seed, block_size=bs,
                  out_dim=out_dim, strict=bool(strict), pair_timeout=pair_timeout)
    check_fits(p, job.layout, keep_sample=keep_sample)
    t0 = time.perf_counter()
    reducer = Reducer(job.layout, p.keep, keep_sample=keep_sample)
    sink = None
    if st is not None:
        st.begin(identity, p, resume=resume)
        stored = 0
        for result in st.blocks(job.layout):
            reducer.add(result)
            stored += 1
        sink = st.writer()
    todo = reducer.missing()
    if st is not None and stored:
        log.info("resuming %s: %d blocks stored, %d to run", st.display, stored, len(todo))
    # Blocks that only feed Δ̂ are cut to their m − k + 1 largest G where they are computed; a store
    # or the full sample needs every value.
    compact = None if (keep_sample or st is not None) else p.keep
    bar = Progress(total=job.layout.pairs_in(todo), enabled=progress,
                   status=lambda: (reducer.failures, reducer.bound()))

    def consume(result):
        if sink is not None:
            sink.write(result)
        reducer.add(result)
        bar.update(result.pairs)

    try:
        if isinstance(engine, AutoBackend):  # may run the first block(s) here to time them
            engine, todo, chosen = engine.choose(job, todo, compact=compact, consume=consume)
        else:
            chosen = engine.name
        for result in engine.run(job, todo, compact=compact):
            consume(result)
        if sink is not None:
            sink.flush()
    except BaseException:
        bar.close(ok=False)
        raise
    bar.close()
    reducer.finish()
    sensitivity = reducer.order_statistic()
    if st is not None:
        st.finish(identity, p, {"sensitivity": sensitivity if np.isfinite(sensitivity) else "inf",
                                "failures": reducer.failures, "failure_kinds": reducer.failure_kinds,
                                "plan": p.to_dict()})
    return _estimate(identity, p, reducer, sensitivity, seconds=time.perf_counter() - t0, backend=chosen)


def check_fits(p: Plan, layout: BlockLayout, *, keep_sample: bool) -> None:
    """Refuse, before anything is written, a run whose bookkeeping cannot fit in this driver's memory.

    The driver holds about 24 bytes per kept G (the m − k + 1 largest, buffered up to twice), a few
    dozen bytes per block (which blocks are done, the engine's task groups), and 8 bytes per pair
    when the whole sample is kept. More than half of this machine's memory is refused.
    """
    need = 24 * p.keep + 48 * layout.count + (8 * p.m if keep_sample else 0)
    try:
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        have = 16 << 30
    if need > have // 2:
        raise PlanError(
            f"this run cannot fit: m={p.m:,} pairs with k={p.k:,} in {layout.count:,} blocks needs about "
            f"{need / 2**30:,.1f} GiB of driver memory (the m - k + 1 = {p.keep:,} largest G"
            f"{', the whole sample' if keep_sample else ''} and per-block bookkeeping); this machine has "
            f"{have / 2**30:,.1f} GiB. Use a larger gamma, a smaller m or a larger block_size"
        )


def _estimate(identity: RunIdentity, p: Plan, reducer: Reducer, sensitivity: float, *,
              seconds: float, backend: str | None = None) -> SensitivityEstimate:
    """The one place an estimate is made from a finished reduction."""
    return SensitivityEstimate(sensitivity=sensitivity, plan=p, identity=identity, failures=reducer.failures,
                               failure_kinds=reducer.failure_kinds, top=reducer.top.sorted_desc(),
                               sample=reducer.sample, seconds=seconds, backend=backend)


def load_estimate(store, *, gamma: float | None = None) -> SensitivityEstimate:
    """The estimate held in a store (with its full G sample); ``gamma`` re-derives Δ̂ for another γ (mode k).

    ``store`` is a path, a URI or a :class:`~raydp.store.Store`. The store must hold a complete run.
    """
    st = Store.open(store)
    identity, p = st.load()
    reducer = Reducer(BlockLayout(p.m, identity.block_size), p.keep, keep_sample=True)
    for result in st.blocks(reducer.layout, quarantine=False):
        reducer.add(result)
    if reducer.missing():
        raise StoreError(f"store {st.display!r} is incomplete: {reducer.done} of {reducer.layout.count} blocks "
                         "verified; finish it with resume=True (raydp estimate ... --store URI --resume)")
    reducer.finish()
    est = _estimate(identity, p, reducer, reducer.order_statistic(), seconds=0.0)
    return est.for_gamma(gamma) if gamma is not None else est

