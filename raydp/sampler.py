"""SensitivitySampler (Algorithm 1) and the estimate it returns.

>>> import raydp
>>> from raydp import oracles, targets
>>> est = raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), n=100,
...                                  gamma=0.1, seed=7, progress=False)
>>> est.plan.m, est.failures
(285, 0)
"""

from __future__ import annotations

import inspect
import numbers
import time
from dataclasses import dataclass, field, replace
from typing import Iterable

import numpy as np

from ._version import __version__
from .blocks import BlockResult, PairJob, check_timeout, default_block_size, num_blocks, probe_output_dim
from .errors import EngineError, InvalidArgument, PlanError
from .identity import describe
from .plan import Plan, plan as make_plan
from .reduce import TopK, kth_smallest

BACKENDS = ("local", "ray", "auto")


@dataclass(frozen=True)
class SensitivityEstimate:
    """Δ̂ and everything needed to trust and reuse it (plan and provenance).

    ``sensitivity`` is G_(k); ``top`` the m − k + 1 largest G (descending); ``sample`` the whole G
    sample in pair order when it was kept. ``failures`` counts pairs whose target failed (each
    counted as G = +∞).
    """

    sensitivity: float
    plan: Plan
    n: int
    seed: int
    block_size: int
    failures: int
    mechanism: dict
    norm: str
    target: dict
    oracle: dict
    output_dim: int
    version: str = __version__
    top: np.ndarray = field(default=None, repr=False, compare=False)
    sample: np.ndarray | None = field(default=None, repr=False, compare=False)
    failure_kinds: dict = field(default_factory=dict, compare=False)
    seconds: float = field(default=0.0, compare=False)

    @property
    def gamma(self) -> float:
        return self.plan.gamma

    def provenance(self) -> dict:
        """The run identity: what Δ̂ was computed for (not the result)."""
        return {
            "plan": self.plan.to_dict(),
            "n": self.n,
            "seed": str(self.seed),
            "block_size": self.block_size,
            "mechanism": self.mechanism,
            "norm": self.norm,
            "target": self.target,
            "oracle": self.oracle,
            "output_dim": self.output_dim,
            "version": self.version,
        }

    def to_dict(self) -> dict:
        d = self.provenance()
        d.update(sensitivity=self.sensitivity, failures=self.failures, failure_kinds=dict(self.failure_kinds))
        return d

    def for_gamma(self, gamma: float) -> "SensitivityEstimate":
        """Re-derive Δ̂ for another γ from the same m pairs (Table 1, mode k) without sampling.

        Theorem 15 holds for the new (m, k, γ) because the G sample is the same iid sample; only
        the order statistic changes. Needs the full sample unless the new k is at least the old k.
        """
        new = make_plan(m=self.plan.m, gamma=gamma)
        if new.k >= self.plan.k and self.top is not None:
            top_sorted = np.sort(self.top)[::-1]
            value = float(top_sorted[self.plan.m - new.k])
        elif self.sample is not None:
            value = kth_smallest(self.sample, new.k)
        else:
            raise PlanError(
                f"gamma={gamma} needs k={new.k} < {self.plan.k}: the full G sample is required "
                "(run with keep_sample=True or a store)"
            )
        keep = new.m - new.k + 1
        top = None
        if self.sample is not None:
            top = np.sort(self.sample)[::-1][:keep]
        elif self.top is not None:
            top = np.sort(self.top)[::-1][:keep]
        return replace(self, sensitivity=value, plan=new, top=top)


def _check_int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise InvalidArgument(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _default_mechanism():
    from .mechanisms import Laplace

    # The norm is all the sampler needs; ε is chosen at release time. Laplace(1) measures in ℓ1.
    return Laplace(1.0)


def resolve_seed(seed) -> int:
    if seed is None:
        return int(np.random.SeedSequence().entropy)
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise InvalidArgument(f"seed must be a non-negative integer or None, got {seed!r}")
    return int(seed)


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
    backend: str = "local",
    strict: bool = False,
    progress: bool = True,
    keep_sample: bool = False,
    store=None,
    resume: bool = False,
    pair_timeout: float | None = None,
    **engine_options,
) -> SensitivityEstimate:
    """SensitivitySampler(n, f, m, k, P): Δ̂ = G_(k) over m neighbouring pairs drawn from ``oracle``.

    ``mechanism`` fixes the norm G is measured in (default: Laplace, ℓ1). The plan comes from any
    admissible combination of ``gamma``, ``m``, ``k`` (see :func:`raydp.plan`). ``seed`` and
    ``block_size`` fix every random draw (see :mod:`raydp.blocks`); ``seed=None`` draws a fresh
    seed and records it. ``backend`` is ``"local"`` (in process), ``"ray"`` or ``"auto"``.
    ``keep_sample=True`` keeps all m G values (needed to re-derive Δ̂ for a smaller γ).
    ``store`` (a path or URI) streams the sample to a resumable Parquet store.
    ``pair_timeout`` (seconds) turns a pair whose evaluation overruns it into a counted failure
    (G = +∞); with the Ray backend ``task_timeout=`` does the same for a whole task, killing its
    worker (for targets stuck in C code). See :mod:`raydp.blocks`.
    """
    from .oracles import as_oracle
    from .targets import as_target

    target = as_target(target)
    oracle = as_oracle(oracle)
    n = _check_int("n", n, 1)
    p = make_plan(gamma=gamma, m=m, k=k)
    mechanism = _default_mechanism() if mechanism is None else mechanism
    for attr in ("embed", "distance", "norm"):
        if not hasattr(mechanism, attr):
            raise InvalidArgument(f"mechanism must be a raydp mechanism (missing .{attr}), got {mechanism!r}")
    seed = resolve_seed(seed)
    for flag, value in (("strict", strict), ("progress", progress), ("keep_sample", keep_sample), ("resume", resume)):
        if not isinstance(value, (bool, np.bool_)):
            raise InvalidArgument(f"{flag} must be True or False, got {value!r}")
    if block_size is None and store is not None and resume:
        from .store import stored_block_size

        block_size = stored_block_size(store)  # resuming/extending keeps the stored run's blocks
    if block_size is None:
        bs = default_block_size(n, p.m, batched=callable(getattr(target, "batch", None)))
    else:
        bs = _check_int("block_size", block_size, 1)
    if backend not in BACKENDS:
        raise InvalidArgument(f"backend must be one of {', '.join(BACKENDS)}; got {backend!r}")
    if store is None and resume:
        raise InvalidArgument("resume=True needs a store")
    if bs * (n + 1) > 2**63 - 1:  # records drawn per block: numpy's largest array
        raise InvalidArgument(f"block_size * (n + 1) must be at most 2**63 - 1, got n={n}, block_size={bs}")
    from .engine import local, ray_backend  # neither imports ray at module level

    engine_run = (local if backend == "local" else ray_backend).run_blocks
    allowed = {name for name, prm in inspect.signature(engine_run).parameters.items()
               if prm.kind is prm.KEYWORD_ONLY and name != "backend"}
    allowed |= {"flush_rows", "flush_seconds"} if store is not None else set()
    unknown = sorted(set(engine_options) - allowed)
    if unknown:
        raise InvalidArgument(f"unknown option(s) {', '.join(unknown)} for the {backend} backend"
                              f"{' with a store' if store is not None else ''}; allowed: {', '.join(sorted(allowed))}")
    pair_timeout = check_timeout("pair_timeout", pair_timeout)
    out_dim = probe_output_dim(target, oracle, mechanism, n, seed, timeout=pair_timeout)
    job = PairJob(target=target, oracle=oracle, mechanism=mechanism, n=n, m=p.m, seed=seed,
                  block_size=bs, out_dim=out_dim, strict=bool(strict),
                  pair_timeout=pair_timeout)
    identity = dict(
        n=n, seed=seed, block_size=bs, mechanism=describe(mechanism), norm=str(mechanism.norm),
        target=describe(target), oracle=describe(oracle), output_dim=out_dim,
    )
    t0 = time.perf_counter()
    if store is not None:
        from .store import run_with_store

        return run_with_store(job, p, identity, store, resume=resume, backend=backend,
                              progress=progress, keep_sample=keep_sample, **engine_options)

    blocks = range(num_blocks(p.m, bs))
    if not keep_sample:
        engine_options.setdefault("compact", p.keep)
    results = run_engine(job, blocks, backend=backend, progress=progress, **engine_options)
    top, failures, kinds, sample = collect(results, p, bs, keep_sample=keep_sample)
    return SensitivityEstimate(
        sensitivity=top.order_statistic(), plan=p, top=top.sorted_desc(), failures=failures,
        failure_kinds=kinds, sample=sample, seconds=time.perf_counter() - t0, **identity,
    )


def run_engine(job: PairJob, blocks: Iterable[int], *, backend: str, progress: bool, **options):
    """Yield a BlockResult for every block, from the chosen backend."""
    from .progress import Progress

    blocks = list(blocks)
    pairs = sum(min(job.block_size, job.m - b * job.block_size) for b in blocks)
    bar = Progress(total=pairs, enabled=progress)
    if backend == "local":
        from .engine.local import run_blocks
    else:
        from .engine.ray_backend import run_blocks

        options["backend"] = backend
    try:
        for result in run_blocks(job, blocks, **options):
            bar.update(result.pairs)
            yield result
    finally:
        bar.close()


def collect(results: Iterable[BlockResult], p: Plan, block_size: int, *, keep_sample: bool,
            expected_blocks: Iterable[int] | None = None, top: TopK | None = None,
            failures: int = 0, kinds: dict | None = None, sample: np.ndarray | None = None):
    """Reduce block results: order statistic, failure counts, and (optionally) the full sample.

    Refuses to return unless every expected block arrived exactly once — a smaller m would void
    Theorem 15.
    """
    top = TopK(p.keep) if top is None else top
    kinds = dict(kinds or {})
    expected = set(range(num_blocks(p.m, block_size))) if expected_blocks is None else set(expected_blocks)
    if keep_sample and sample is None:
        sample = np.full(p.m, np.nan)
    seen: set[int] = set()
    for r in results:
        if r.index in seen:
            raise EngineError(f"block {r.index} was delivered twice; refusing to count its pairs twice")
        if r.index not in expected:
            raise EngineError(f"block {r.index} was not requested")
        seen.add(r.index)
        top.add(r.g, count=r.pairs)
        failures += r.failures
        for kk, v in r.failure_kinds.items():
            kinds[kk] = kinds.get(kk, 0) + v
        if keep_sample:
            if not r.complete:
                raise EngineError(f"block {r.index} arrived compacted but the full sample was asked for")
            sample[r.start : r.start + r.g.size] = r.g
    missing = expected - seen
    if missing:
        raise EngineError(f"{len(missing)} block(s) never finished (e.g. block {min(missing)}); "
                          "no estimate is returned from fewer than m pairs")
    if top.count != p.m:
        raise EngineError(f"{top.count} pairs evaluated, plan needs m={p.m}")
    return top, failures, kinds, sample
