"""SensitivitySampler (Algorithm 1): the one orchestrator over an engine, a store and a reducer.

Two steps. :func:`resolve_run` turns the question (target, oracle, n, mechanism, plan) and the
:class:`~raydp.options.SamplerOptions` into a :class:`Run`: everything is checked, the target is
probed once, the run identity (what fixes every G) is written down and the store is opened — before
any pair is evaluated. :func:`execute` then streams blocks: those a store already holds are read
from it, the rest are run by the backend (in process or on Ray) and written to the store as they
finish; every block goes through one reducer, which reads off Δ̂ = G_(k).
:func:`estimate_sensitivity` is the two in a row; :func:`load_estimate` is the same reduction over a
store alone. Nothing below this module calls back into it.

>>> import raydp
>>> from raydp import oracles, targets
>>> est = raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), n=100,
...                                  gamma=0.1, seed=7, progress=False)
>>> est.plan.m, est.failures
(285, 0)
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass

import numpy as np

from .engine.blocks import BlockLayout, PairJob, default_block_size, is_batched, probe_output_dim, set_up_here
from .engine.progress import Progress
from .engine.protocol import Backend
from .engine.reduce import Reducer
from .engine.witness import Replay, Witnesses, compare, pick, records_of, seeded_pairs, trimmed
from .errors import InvalidArgumentError, PlanError, StoreError
from .estimate import SensitivityEstimate, drawing_job
from .identity import RunIdentity, check_reusable, describe
from .mechanisms.base import check_mechanism
from .options import SamplerOptions
from .plan import Plan, make_plan
from .store import Store
from .validation import check_int

log = logging.getLogger("raydp.sampler")

__all__ = ["estimate_sensitivity", "load_estimate", "resolve_run", "execute", "Run", "SensitivityEstimate",
           "resolve_seed", "TimeBudgetError", "price_pairs", "over_budget"]


class TimeBudgetError(PlanError):
    """A time budget that cannot buy the pairs the plan needs — not even the fewest γ allows: raised before
    any pair of the sample is drawn, with the estimate and what would fit (a larger budget, a larger γ, a
    cluster, or ``time_budget=None`` to sample the fewest pairs whatever they take)."""


def _sampling_mechanism(mechanism, epsilon=None, delta=None):
    """The mechanism whose norm G is measured in: a name or an object (:func:`raydp.mechanisms.as_mechanism`),
    Laplace (ℓ1) when None. The norm is all the sampler needs; ε and δ are spent at release time."""
    from .mechanisms.spec import as_mechanism

    return as_mechanism("laplace" if mechanism is None else mechanism, epsilon, delta, budget=False)


def resolve_seed(seed: int | None) -> int:
    """``seed``, or a fresh one from the OS for None. A given seed was checked where it came from
    (:class:`SamplerOptions`, or the store a resumed run's seed is read from)."""
    return int(np.random.SeedSequence().entropy) if seed is None else seed


def estimate_sensitivity(target, oracle, n: int, *, mechanism=None, epsilon=None, delta=None, gamma=None, m=None,
                         k=None, options: SamplerOptions | None = None, **keywords) -> SensitivityEstimate:
    """SensitivitySampler(n, f, m, k, P): Δ̂ = G_(k) over m neighbouring pairs drawn from ``oracle``.

    ``mechanism`` fixes the norm G is measured in (default: Laplace, ℓ1): a name (``"laplace"``,
    ``"gaussian"``, ...) or a mechanism object, as everywhere (:mod:`raydp.mechanisms.spec`). ``epsilon`` and
    ``delta`` are optional here (they do not change how G is measured); given with an object they must agree
    with its own. The plan comes from any admissible combination of ``gamma``, ``m``, ``k`` (see
    :func:`raydp.make_plan`).

    How the run is carried out — seed, block size, backend, store, resume, failures, progress, pair
    timeout — is a :class:`~raydp.options.SamplerOptions` (``options=``), or the same fields as
    keywords (``seed=1, backend="ray", address=..., store="s3://...", flush_rows=...``): see
    :meth:`SamplerOptions.of <raydp.options.SamplerOptions.of>`. The result is the same bit for bit
    whatever backend runs it.
    """
    options = SamplerOptions.of(options, **keywords)
    mechanism = _sampling_mechanism(mechanism, epsilon, delta)
    run = resolve_run(target, oracle, n, mechanism=mechanism, plan=make_plan(gamma=gamma, m=m, k=k),
                      options=options, sizable=gamma is not None and m is None and k is None)
    return execute(run)


@dataclass(frozen=True)
class Run:
    """A sampling run, resolved: what it computes (``job``, ``plan``, ``identity``) and where (``backend``,
    ``store``), checked and probed, nothing evaluated yet. :func:`execute` carries it out."""

    job: PairJob
    plan: Plan
    identity: RunIdentity
    backend: Backend
    store: Store | None
    options: SamplerOptions
    sizing: dict | None = None  # how a time budget chose m (None: the plan as asked)
    keep_sample: bool = False  # the whole G sample is kept in the estimate (options.keep_sample, resolved)

    @property
    def compact(self) -> int | None:
        """Blocks that only feed Δ̂ are cut to their m − k + 1 largest G where they are computed; a
        store or the full sample needs every value."""
        return None if (self.keep_sample or self.store is not None) else self.plan.keep


def resolve_run(target, oracle, n: int, *, mechanism=None, plan: Plan, options: SamplerOptions,
                sizable: bool = False) -> Run:
    """Check the question and the options, probe the target once, fix the run identity; run nothing.

    ``sizable``: the plan was asked for by γ alone, so ``options.time_budget`` may raise its m
    (:func:`raydp.plan.plan_for`), from the probe's timing — before any G is drawn.
    """
    from .oracles import as_oracle
    from .targets import as_target

    target = as_target(target)
    oracle = as_oracle(oracle)
    n = check_int(n, "n", min_value=1)
    mechanism = check_mechanism(_sampling_mechanism(mechanism))
    store = None if options.store is None else Store.open(options.store)
    seed, block_size = options.seed, options.block_size
    stored_plan = None
    if store is not None:  # a store is for resuming and reusing: its run must name what it computed
        check_reusable(describe(target), "target", StoreError, "a stored run", replay=options.replay)
        check_reusable(describe(oracle), "oracle", StoreError, "a stored run", replay=options.replay)
        if options.resume and (seed is None or block_size is None):
            stored_seed, stored_bs = store.stored()  # resuming/extending keeps the stored run's seed and blocks
            stored = SamplerOptions(seed=stored_seed, block_size=stored_bs)  # checked as given ones are
            seed = stored.seed if seed is None else seed
            block_size = stored.block_size if block_size is None else block_size
        if options.resume and sizable and options.time_budget is not None:
            stored_plan = store.stored_plan()  # a sized run is resumed at the size it was given
    seed = resolve_seed(seed)
    batched = is_batched(target)
    # Records drawn per block must fit numpy's largest array; checked before the probe draws anything (a
    # time budget only makes m larger, which never makes the default block larger than 1 here).
    if (block_size or default_block_size(n, plan.m, batched=batched)) * (n + 1) > 2**63 - 1:
        raise InvalidArgumentError(f"block_size * (n + 1) must be at most 2**63 - 1, got n={n}, "
                                   f"block_size={block_size or default_block_size(n, plan.m, batched=batched)}")
    key, probe = set_up_here(target)  # a target's setup() runs before the probe, once in this process
    t0 = time.perf_counter()
    out_dim = probe_output_dim(probe, oracle, mechanism, n, seed, timeout=options.pair_timeout)
    probe_seconds = time.perf_counter() - t0
    sizing = None
    backend = options.backend
    if options.time_budget is not None:  # a budget is a cap: sized within it (γ alone), or refused before sampling
        timings = [probe_seconds, *_warm_timings(probe, oracle, n, seed, probe_seconds, options)]
        pair_seconds = price_pairs(probe, oracle, mechanism, n, seed, out_dim, timings, options)
        try:
            plan, sizing = _sized(plan, stored_plan, pair_seconds, timings, options, sizable=sizable)
        except TimeBudgetError:
            if len(timings) > CONFIRM_EVALUATIONS:
                raise
            # the cold probe and few warm calls were timed (they ate the warm share; in a fresh process the first
            # calls pay imports and caches for a while): a refusal is confirmed on more warm calls
            timings = [probe_seconds, *_warm_timings(probe, oracle, n, seed, probe_seconds, options,
                                                     at_least=CONFIRM_EVALUATIONS)]
            pair_seconds = price_pairs(probe, oracle, mechanism, n, seed, out_dim, timings, options)
            plan, sizing = _sized(plan, stored_plan, pair_seconds, timings, options, sizable=sizable)
        if not sizable:
            sizing = None  # the plan asked for (checked against the budget): nothing was sized
        elif sizing["where"] == "in process":  # what the budget was sized for is where it runs
            from .engine import LocalBackend

            backend = LocalBackend()
    if block_size is None:
        block_size = default_block_size(n, plan.m, batched=batched)
    identity = RunIdentity(n=n, seed=seed, block_size=block_size, mechanism=describe(mechanism),
                           norm=str(mechanism.norm), target=describe(target), oracle=describe(oracle),
                           output_dim=out_dim)
    job = PairJob(target=target, oracle=oracle, mechanism=mechanism, n=n, m=plan.m, seed=seed,
                  block_size=block_size, out_dim=out_dim, strict=options.strict, pair_timeout=options.pair_timeout,
                  setup_key=key, probe_seconds=probe_seconds, witness_pairs=seeded_pairs(seed, plan.m))
    keep_sample = options.keep_sample
    if keep_sample is None:  # by default, whenever the sample is small enough to hold beside the rest
        keep_sample = 8 * plan.m <= SAMPLE_MAX_BYTES and _fits(plan, job.layout, keep_sample=True)
    check_fits(plan, job.layout, keep_sample=keep_sample)
    return Run(job=job, plan=plan, identity=identity, backend=backend, store=store, options=options,
               sizing=sizing, keep_sample=keep_sample)


def _budget_slots(backend: Backend, budget: float, pair_seconds: float, gamma: float) -> tuple[int, float, str]:
    """``(slots, seconds, where)`` a time budget buys pairs with: a cluster's slots when one is at hand (Ray
    is used then); for ``auto`` without one, an embedded Ray on this machine's free cores only when what is
    left of the budget after starting it buys a larger plan than one core in process does — both judged on
    this machine's load now (:func:`raydp.engine.backends.free_cores`, :func:`~raydp.engine.backends.ray_start_seconds`:
    on a loaded machine Ray starts slower and finds fewer idle cores) — else one core in process, and the run
    then stays in process (``where``), so the budget is spent where it was sized for."""
    from .engine import AutoBackend, LocalBackend, RayBackend
    from .engine.backends import free_cores, ray_start_seconds
    from .plan import plan_for

    if isinstance(backend, RayBackend):
        return backend.slots(), budget, "ray"
    if isinstance(backend, AutoBackend):
        if backend.cluster_reason() is not None:
            return backend.ray.slots(), budget, "ray"
        cores = free_cores(backend.ray.num_cpus)
        start = ray_start_seconds()
        local = plan_for(gamma, int(budget / pair_seconds))
        embedded = plan_for(gamma, int(max(budget - start, 0.0) * cores / pair_seconds))
        local_fits = local.m * pair_seconds <= budget
        embedded_fits = embedded.m * pair_seconds <= max(budget - start, 0.0) * cores
        if embedded_fits and (embedded.m > local.m or not local_fits):
            return max(1, int(cores)), budget - start, "embedded ray"
        return 1, budget, "in process"
    return 1, budget, "in process" if isinstance(backend, LocalBackend) else backend.name


#: Warm evaluations timed after the probe to size a budgeted run (at most, and at most
#: WARM_SHARE of the budget): the fastest one prices a pair, steadier on a shared machine than one cold call.
WARM_EVALUATIONS = 4
WARM_SHARE = 0.05
#: Warm evaluations timed, whatever their share of the budget, before a plan is refused as too costly.
CONFIRM_EVALUATIONS = 3
#: A target with a block form (``batch``/``pair_batch``) is priced on a block of public probe pairs as large as a
#: run of this many pairs has (the smallest sized plan's), or fewer when a share of the budget cannot pay for it.
PRICE_AT_M = 2_000
# Spawn key of the public stream the warm timings and the block pricing draw from (under PROBE_KEY).
_WARM_KEY, _PRICE_KEY = 1, 2


def _warm_timings(target, oracle, n: int, seed: int, cold: float, options: SamplerOptions,
                  at_least: int = 0) -> list[float]:
    """Seconds of up to :data:`WARM_EVALUATIONS` more evaluations of the target, each on its own database
    from the probe's stream (public oracle draws, none of the sample's pairs: the plan stays independent of
    every G). Stops when the next would take the total past :data:`WARM_SHARE` of the budget, unless fewer
    than ``at_least`` were timed (a refusal is confirmed on a warm call, not on the cold probe alone)."""
    from .engine.blocks import PROBE_KEY, PairTimeout, _alarm
    from .oracles import check_records

    # a stream of its own (spawn key (PROBE_KEY, 1)): neither the probe's database nor any block's
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(PROBE_KEY, _WARM_KEY))))
    spent, out = cold, []
    for _ in range(WARM_EVALUATIONS):
        if len(out) >= at_least and spent + min([cold, *out]) > WARM_SHARE * options.time_budget:
            break
        try:
            records = check_records(oracle.sample(rng, n), n)
            t0 = time.perf_counter()
            with _alarm(options.pair_timeout):
                target(records)
        except (Exception, SystemExit, PairTimeout):  # noqa: BLE001 - the probe vouched for the target; a timing is optional
            break
        out.append(time.perf_counter() - t0)
        spent += out[-1]
    return out


def price_pairs(target, oracle, mechanism, n: int, seed: int, out_dim: int, timings: list[float],
                options: SamplerOptions) -> float:
    """Seconds one pair costs in a block, from public probe data only (never a pair of the sample).

    A target evaluated database by database costs two evaluations a pair: twice the fastest of
    ``timings`` (the first call pays one-off imports and caches, and a busy neighbour only ever adds time).
    A target with a block form (``batch``, ``pair_batch``) is timed on a block of public pairs (as large as a
    sized run's smallest, :data:`PRICE_AT_M`) evaluated as a block would evaluate them (the draw included;
    the faster of two tries): far less than two evaluations when the form pays, never more than the
    pair-by-pair price."""
    from .engine.blocks import PROBE_KEY, PairJob, PairTimeout, _alarm, is_batched
    from .oracles import check_records

    single = max(2.0 * min(timings), 1e-6)
    # the block of the smallest sized plan (its fixed costs shared as a sized run shares them), at most what a
    # share of the budget pays for at the pair-by-pair price
    pairs = min(default_block_size(n, PRICE_AT_M, batched=True),
                int(WARM_SHARE * options.time_budget / (2 * single)))
    if not is_batched(target) or pairs < 4:
        return single
    job = PairJob(target=target, oracle=oracle, mechanism=mechanism, n=n, m=pairs, seed=seed, block_size=pairs,
                  out_dim=out_dim)
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(PROBE_KEY, _PRICE_KEY))))
    best = math.inf
    for _ in range(2):
        try:
            t0 = time.perf_counter()
            records = check_records(oracle.sample(rng, pairs * (n + 1)), pairs * (n + 1))
            records = records.reshape((pairs, n + 1) + records.shape[1:])
            with _alarm(None if options.pair_timeout is None else options.pair_timeout * pairs):
                job.evaluate(records, 0)
            best = min(best, (time.perf_counter() - t0) / pairs)
        except (Exception, SystemExit, PairTimeout):  # noqa: BLE001 - pricing is optional: the pair-by-pair price stands
            break
    return max(min(best, single), 1e-7)


def _sized(plan: Plan, stored: Plan | None, pair_seconds: float, timings: list[float], options: SamplerOptions,
           sizable: bool = True) -> tuple[Plan, dict]:
    """The plan a time budget affords: pairs = seconds · slots / pair_seconds, rounded down to a plan size
    (:func:`raydp.plan.plan_for`) when only γ was asked for (``sizable``). A plan that costs more than the
    budget — the fewest pairs γ allows, or the m asked for — is refused with :class:`TimeBudgetError`,
    before any pair of the sample is drawn."""
    from .plan import plan_for

    slots, seconds, where = _budget_slots(options.backend, options.time_budget, pair_seconds, plan.gamma)
    affordable = int(seconds * slots / pair_seconds)
    if not sizable:
        sized = plan
    elif stored is not None and math.isclose(stored.gamma, plan.gamma):
        sized = stored
    else:
        sized = plan_for(plan.gamma, affordable)
    sizing = {"budget_seconds": options.time_budget, "slots": slots, "where": where,
              "pair_seconds": pair_seconds, "timed_evaluations": len(timings),
              "fewest_pairs": plan.m, "m": sized.m, "k": sized.k, "estimated_seconds": sized.m * pair_seconds / slots,
              **({"resumed": True} if sized is stored else {})}
    if sized.m > affordable and sized is not stored:
        raise TimeBudgetError(over_budget(sized.m, pair_seconds, options.time_budget, slots, plan.gamma, sizable,
                                          what="sampling"))
    return sized, sizing


def over_budget(m: int, pair_seconds: float, budget: float, slots: int, gamma: float, sizable: bool, *,
                what: str, fixed: float = 0.0) -> str:
    """Why a budget cannot buy ``m`` pairs at ``pair_seconds`` on ``slots`` (besides ``fixed`` seconds of other
    work), and what would: the budget that would, the smallest γ whose fewest pairs fit, the slots that would
    sample them in time, or ``time_budget=None``."""
    from .plan import make_plan

    need = fixed + m * pair_seconds / slots
    left = budget - fixed
    words = [f"the time budget of {budget:g} s cannot buy the {m:,} pairs {'γ=' + format(gamma, 'g') if sizable else 'asked for'} "
             f"needs{' at the fewest' if sizable else ''}: at about {pair_seconds:.3g} s a pair on {slots} "
             f"slot{'s' * (slots != 1)}, {what} would take about {need:,.1f} s"
             + (f" ({fixed:,.1f} s of it besides the pairs)" if fixed > 0 else "")
             + "; nothing was sampled. What would fit:"]
    words.append(f"a time budget of at least {math.ceil(need * 1.1):,} s")
    affordable = int(max(left, 0.0) * slots / pair_seconds)
    if sizable and affordable >= 2:
        lo, hi = gamma, 1.0
        if make_plan(gamma=min(0.999, hi * 0.999)).m <= affordable:
            for _ in range(60):
                mid = (lo + hi) / 2
                if make_plan(gamma=mid).m <= affordable:
                    hi = mid
                else:
                    lo = mid
            words.append(f"gamma={math.ceil(hi * 1000) / 1000:g} (its fewest pairs fit the budget here)")
    if left > 0:
        words.append(f"about {math.ceil(m * pair_seconds / left):,} slots (a Ray cluster: backend=\"ray\", "
                     "address=... or RAY_ADDRESS)")
    words.append("or time_budget=None, to sample them whatever they take")
    return words[0] + " " + "; ".join(words[1:])


def execute(run: Run) -> SensitivityEstimate:
    """Carry out a resolved run: stored blocks from the store, the rest on the backend, all through one reducer."""
    t0 = time.perf_counter()
    job, plan, store = run.job, run.plan, run.store
    reducer = Reducer(job.layout, plan.keep, keep_sample=run.keep_sample, witness_pairs=job.witness_pairs)
    sink = None
    work = [0.0, 0]  # seconds the blocks computed here took (each in one process), and how many
    replayed = None
    if store is not None:
        store.begin(run.identity, plan, resume=run.options.resume)
        stored = 0
        for result in store.blocks(job.layout):
            reducer.add(result)
            stored += 1
        sink = store.writer()
        if stored:
            log.info("resuming %s: %d blocks stored, %d to run", store.display, stored, len(reducer.missing()))
            replayed = _replay_stored(run, reducer)
    todo = reducer.missing()
    bar = Progress(total=job.layout.pairs_in(todo), enabled=run.options.progress,
                   status=lambda: (reducer.failures, reducer.bound()))

    def consume(result):
        if sink is not None:
            sink.write(result)
        reducer.add(result)
        bar.update(result.pairs)
        work[0] += result.seconds
        work[1] += 1

    try:
        # AutoBackend may run the first block(s) here to time them; any backend says what runs the rest.
        engine, todo, chosen = run.backend.choose(job, todo, compact=run.compact, consume=consume)
        started = getattr(run.backend, "started", None)
        if callable(started):  # auto: an embedded Ray that fails to start leaves the run in process
            engine, todo, chosen = started(engine, todo, chosen)
        for result in engine.run(job, todo, compact=run.compact):
            consume(result)
        if sink is not None:
            sink.flush()
    except BaseException:
        bar.close(ok=False)
        raise
    bar.close()
    reducer.finish()
    sensitivity = reducer.order_statistic()
    witnesses = _witnesses(reducer)
    if len(witnesses):
        witnesses = trimmed(witnesses, records_of(job, witnesses.pairs))
    seconds = time.perf_counter() - t0
    block_seconds = work[0] / work[1] if work[1] and work[0] > 0 else None
    if store is not None:
        store.finish(run.identity, plan, {"sensitivity": sensitivity if np.isfinite(sensitivity) else "inf",
                                          "failures": reducer.failures, "failure_kinds": reducer.failure_kinds,
                                          "plan": plan.to_dict(), "seconds": seconds,
                                          "block_seconds": block_seconds}, witnesses=witnesses)
    return _estimate(run.identity, plan, reducer, sensitivity, seconds=seconds, backend=chosen,
                     witnesses=witnesses, replay=replayed, sizing=run.sizing, block_seconds=block_seconds,
                     redraw=drawing_job(job.oracle, run.identity, plan.m))


def _witnesses(reducer: Reducer) -> Witnesses:
    """The finished run's witnesses: the pair of G_(k), the pair of the largest G, the seeded pairs."""
    delta = (reducer.top.order_statistic_pair(), reducer.order_statistic())
    return pick(delta, reducer.top.largest_pair(), reducer.witnessed)


def _replay_stored(run: Run, reducer: Reducer) -> Replay:
    """Before a store's blocks are reused: recompute some of their pairs with this target.

    The run identity matched (same target name and content fingerprint), but a fingerprint misses
    what it cannot see (an edited helper module, an upgraded library, state outside the walk). The
    largest stored G and the seeded pairs among the stored blocks are evaluated again on their
    oracle records; a G that differs means the stored sample was made by a target that computes
    something else now, and mixing the two would give a wrong Δ̂.
    """
    if not run.options.replay:
        return Replay(skipped="replay=False")
    stored = pick((None, math.nan), reducer.top.largest_pair(), reducer.witnessed)
    if not len(stored):
        return Replay()
    job = run.job.prepared()
    records = records_of(job, stored.pairs)
    stored = trimmed(stored, records)
    now = [float(job.evaluate(records[i][None], p)[0][0]) for i, p in enumerate(stored.pairs)]
    result = compare(stored, np.asarray(now))
    if result.mismatch is not None:
        raise StoreError(
            f"store {run.store.display!r} was sampled with a target that computes something else now "
            f"({result.mismatch}): its stored G values do not describe this target. Use a new store URI "
            "(or, if you changed the target on purpose, that is what a new store is for)")
    return result


#: The most memory the whole G sample takes when ``keep_sample`` is left to its default (None): 8 bytes a
#: pair, so runs of up to 2**27 pairs keep it (a reuse then replays pairs drawn from all of them).
SAMPLE_MAX_BYTES = 1 << 30


def _need_have(p: Plan, layout: BlockLayout, keep_sample: bool) -> tuple[int, int]:
    need = 24 * p.keep + 48 * layout.count + (8 * p.m if keep_sample else 0)
    try:
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        have = 16 << 30
    return need, have


def _fits(p: Plan, layout: BlockLayout, *, keep_sample: bool) -> bool:
    need, have = _need_have(p, layout, keep_sample)
    return need <= have // 2


def check_fits(p: Plan, layout: BlockLayout, *, keep_sample: bool) -> None:
    """Refuse, before anything is written, a run whose bookkeeping cannot fit in this driver's memory.

    The driver holds about 24 bytes per kept G (the m − k + 1 largest, buffered up to twice), a few
    dozen bytes per block (which blocks are done, the engine's task groups), and 8 bytes per pair
    when the whole sample is kept. More than half of this machine's memory is refused.
    """
    need, have = _need_have(p, layout, keep_sample)
    if need > have // 2:
        raise PlanError(
            f"this run cannot fit: m={p.m:,} pairs with k={p.k:,} in {layout.count:,} blocks needs about "
            f"{need / 2**30:,.1f} GiB of driver memory (the m - k + 1 = {p.keep:,} largest G"
            f"{', the whole sample' if keep_sample else ''} and per-block bookkeeping); this machine has "
            f"{have / 2**30:,.1f} GiB. Use a larger gamma, a smaller m or a larger block_size"
        )


def _estimate(identity: RunIdentity, p: Plan, reducer: Reducer, sensitivity: float, *,
              seconds: float, backend: str | None = None, witnesses: Witnesses | None = None,
              replay: Replay | None = None, sizing: dict | None = None, block_seconds: float | None = None,
              redraw=None) -> SensitivityEstimate:
    """The one place an estimate is made from a finished reduction."""
    return SensitivityEstimate(sensitivity=sensitivity, plan=p, identity=identity, failures=reducer.failures,
                               failure_kinds=reducer.failure_kinds, top=reducer.top.sorted_desc(),
                               sample=reducer.sample, seconds=seconds, backend=backend, witnesses=witnesses,
                               replay=replay, sizing=sizing, block_seconds=block_seconds, redraw=redraw)


def load_estimate(store, *, gamma: float | None = None, oracle=None) -> SensitivityEstimate:
    """The estimate held in a store (with its full G sample); ``gamma`` re-derives Δ̂ for another γ (mode k).

    ``store`` is a path, a URI or a :class:`~raydp.store.Store`. The store must hold a complete run.
    A reuse replays pairs drawn at random from all its G (:mod:`raydp.engine.witness`), their records
    drawn by ``oracle`` — which must be the oracle the store names; a built-in oracle is rebuilt from its
    description without it. Without either, a reuse replays the run's fixed witness pairs, whose oracle
    records come from the store (a store written before raydp kept them has none: its witnesses are read
    off its shards, and their records need the oracle too).
    """
    st = Store.open(store)
    identity, p = st.load()
    witness_pairs = seeded_pairs(identity.seed, p.m)
    reducer = Reducer(BlockLayout(p.m, identity.block_size), p.keep, keep_sample=True, witness_pairs=witness_pairs)
    for result in st.blocks(reducer.layout, quarantine=False):
        reducer.add(result)
    if reducer.missing():
        raise StoreError(f"store {st.display!r} is incomplete: {reducer.done} of {reducer.layout.count} blocks "
                         "verified; finish it with resume=True (raydp estimate ... --store URI --resume)")
    reducer.finish()
    redraw = _stored_oracle_job(identity, p, oracle, st)
    witnesses = st.witnesses(identity, reducer.sample)
    if witnesses is None:  # written before witnesses were kept: read them off the sample
        witnesses = _witnesses(reducer)
        if redraw is not None:
            witnesses = trimmed(witnesses, records_of(redraw, witnesses.pairs))
    seconds, block_seconds = _stored_seconds(st)
    est = _estimate(identity, p, reducer, reducer.order_statistic(), seconds=seconds, witnesses=witnesses,
                    block_seconds=block_seconds, redraw=redraw)
    return est.for_gamma(gamma) if gamma is not None else est


def _stored_seconds(st: Store) -> tuple[float, float | None]:
    """The sampling time a store's run recorded (``result.json``; 0 and None when it recorded none): what
    prices the pairs a reuse replays."""
    try:
        result = st.read_json("result.json")
        seconds = float(result.get("seconds") or 0.0)
        block = result.get("block_seconds")
        block = None if block is None else float(block)
    except Exception:  # noqa: BLE001 - a store of an earlier raydp, or no result: the fewest replayed pairs
        return 0.0, None
    ok = lambda x: x is not None and math.isfinite(x) and x > 0  # noqa: E731
    return (seconds if ok(seconds) else 0.0), (block if ok(block) else None)


def _stored_oracle_job(identity: RunIdentity, p: Plan, oracle, st: Store):
    """What draws a stored run's records: ``oracle`` (given: it must be the one the store names), or a
    built-in oracle rebuilt from the stored description; None without either."""
    from .oracles import as_oracle, rebuild

    if oracle is None:
        oracle = rebuild(identity.oracle)
        if oracle is None:
            return None
    else:
        oracle = as_oracle(oracle)
        if describe(oracle) != identity.oracle:
            from .identity import difference

            raise StoreError(f"store {st.display!r} was sampled from oracle "
                             f"{difference(identity.oracle, describe(oracle))}; its pairs cannot be drawn "
                             "from another oracle")
    return drawing_job(oracle, identity, p.m)
