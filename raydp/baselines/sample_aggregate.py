"""Sample-and-aggregate with a widened Winsorized mean (Nissim, Raskhodnikova & Smith 2007, §4;
Smith, STOC 2011, "Privacy-preserving statistical estimation with optimal convergence rates").

1. Split the n records into k disjoint blocks — record i goes to block ``i mod k``, a partition
   that does not look at the data — and evaluate the (non-private, black-box) statistic f on each:
   ``z_j = f(block_j)``. The blocks run where the sampler's pairs would (the same ``backend``
   choices, default ``"auto"``): as Ray tasks, several blocks per task (``"ray"``), in this
   process (``"local"``), or in process unless the work is worth starting Ray (``"auto"``). The
   values are the same either way.
2. Aggregate the k values with a DP aggregator, the *widened Winsorized mean* (Smith 2011; also
   Machanavajjhala's lecture "Smooth Sensitivity and Sampling", slide "Widened Windsor Mean"):

   a. ``â, b̂``: the 1/4 and 3/4 quantiles of z by the exponential mechanism on a public grid
      of ``[L, U]`` (:func:`raydp.baselines.exponential_quantile`), ε/4 each;
   b. widen: ``c = (â + b̂)/2``, ``r = max(b̂ − â, grid step)``, interval
      ``[a, b] = [c − w·r, c + w·r] ∩ [L, U]`` (w = ``widen``);
   c. release ``mean(clamp(z, a, b)) + Lap((b − a)/(k·ε/2))`` — the Winsorized mean moves by at
      most ``(b − a)/k`` when one z changes.

Privacy: replacing one record changes one block, hence one z_j; the three steps are ε/4-, ε/4-
and ε/2-DP in z, so the release is **ε-DP** by basic composition (the interval is a DP output, so
calibrating step c to it is post-processing + composition). Block values outside [L, U] are
clamped into it first (f may be any black box).

Reconstruction note: Smith's paper widens the private interquartile range by a constant factor
before Winsorizing; the exact constant and budget split used here (w = 2 by default; ε/4, ε/4,
ε/2) are our choices, stated rather than quoted.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np

from raydp import noise
from raydp.engine import AutoBackend, LocalBackend, RayBackend, as_backend
from raydp.engine import backends
from raydp.errors import InvalidArgumentError, InvalidTypeError, TargetError
from raydp.validation import check_int, check_real

from ._common import (
    EPS_DP,
    BaselineRelease,
    check_bounds,
    check_data,
    check_epsilon,
    clamp,
    default_grid,
)
from .selection import DEFAULT_GRID_SIZE, exponential_quantile

__all__ = ["block_values", "widened_winsorized_mean", "sample_and_aggregate"]


def _eval_blocks(x: np.ndarray, f: Callable, k: int, blocks: list[int]) -> list[float]:
    out = []
    for j in blocks:
        try:
            v = float(np.asarray(f(x[j::k]), dtype=np.float64).reshape(()))
        except Exception as exc:
            raise TargetError(f"the statistic failed on block {j}: {type(exc).__name__}: {exc}") from exc
        if not math.isfinite(v):
            raise TargetError(f"the statistic returned {v} on block {j}; it must return a finite scalar")
        out.append(v)
    return out


def _eval_blocks_of(x: np.ndarray, blocks: list[int], f: Callable, k: int) -> list[float]:
    return _eval_blocks(x, f, k, blocks)


def block_values(x, f: Callable, blocks: int, *, backend="auto", tasks: int | None = None) -> np.ndarray:
    """``[f(x[j::k]) for j in range(k)]``: the statistic on each of the k = ``blocks`` disjoint blocks.

    ``backend`` is one of :data:`raydp.engine.BACKENDS` or a backend object, as for the sampler.
    On Ray the blocks run as tasks (``tasks`` of them, default two per CPU of the cluster, at most
    one per block) through :meth:`raydp.engine.RayBackend.imap`, starting an embedded loopback Ray
    if none is connected; ``"local"`` runs them here; ``"auto"`` (the default) uses Ray when a
    cluster is at hand, else times the first block here and finishes here when the rest would take
    less than starting Ray (:class:`~raydp.engine.AutoBackend`'s rule). ``f`` must map a 1-D array
    to a finite scalar and be picklable for Ray.
    """
    return _block_values(x, f, blocks, backend=backend, tasks=tasks)[0]


def _block_values(x, f: Callable, blocks: int, *, backend, tasks: int | None) -> tuple[np.ndarray, str]:
    """The block values and the name of the backend that computed them (``"local"`` or ``"ray"``)."""
    arr = check_data(x)
    k = check_int(blocks, "blocks", min_value=1)
    if k > arr.size:
        raise InvalidArgumentError(f"blocks={k} exceeds the number of records n={arr.size}; every block needs a record")
    if not callable(f):
        raise InvalidTypeError(f"f must be callable as f(block) -> scalar, got {type(f).__name__}")
    engine = as_backend(backend)
    if tasks is not None:
        tasks = check_int(tasks, "tasks", min_value=1)
    done: list[float] = []
    if isinstance(engine, AutoBackend):
        if engine.cluster_reason() is not None:
            engine = engine.ray
        else:
            limit = backends.default_local_seconds() if engine.local_seconds is None else engine.local_seconds
            t0 = time.perf_counter()
            done = _eval_blocks(arr, f, k, [0])
            engine = LocalBackend() if (time.perf_counter() - t0) * (k - 1) <= limit else engine.ray
    rest = list(range(len(done), k))
    if isinstance(engine, LocalBackend):
        return np.asarray(done + _eval_blocks(arr, f, k, rest), dtype=np.float64), "local"
    if not isinstance(engine, RayBackend):
        raise InvalidArgumentError(f"sample-and-aggregate runs on the local, ray or auto backend, "
                                   f"got {type(engine).__name__}")
    from raydp.engine.ray import cluster_cpus

    engine.connect()
    values = np.empty(k, dtype=np.float64)
    values[:len(done)] = done
    t = min(2 * cluster_cpus() if tasks is None else tasks, len(rest))
    groups = [g.tolist() for g in np.array_split(np.asarray(rest), t)]
    for group, part in engine.imap(_eval_blocks_of, arr, groups, f, k, what="blocks"):
        values[group] = part
    return values, "ray"


def widened_winsorized_mean(z, epsilon: float, lower: float, upper: float, *, widen: float = 2.0,
                            grid=None, grid_size: int = DEFAULT_GRID_SIZE) -> BaselineRelease:
    """DP aggregator of k values in ``[lower, upper]`` (Smith 2011; module docstring): **ε-DP** in z.

    Values outside the range are clamped into it. ``widen`` (w > 0) scales the private
    interquartile range; the quantiles are taken on ``grid`` (default ``grid_size`` equally spaced
    points of the range). The release is clamped to the range.
    """
    eps = check_epsilon(epsilon)
    lo, hi = check_bounds(lower, upper)
    vals = np.clip(check_data(z), lo, hi)
    w = check_real(widen, "widen", min_value=0, include_min=False, expected="a finite real number > 0")
    g = default_grid(lo, hi, grid_size) if grid is None else grid
    qa = exponential_quantile(vals, 0.25, eps / 4.0, lo, hi, grid=g).value
    qb = exponential_quantile(vals, 0.75, eps / 4.0, lo, hi, grid=g).value
    a0, b0 = min(qa, qb), max(qa, qb)
    step = float(np.min(np.diff(np.asarray(g, dtype=np.float64))))
    centre, radius = (a0 + b0) / 2.0, max(b0 - a0, step)
    a, b = max(lo, centre - w * radius), min(hi, centre + w * radius)
    k = vals.size
    wins = float(np.mean(np.clip(vals, a, b)))
    scale = (b - a) / (k * eps / 2.0)
    value = clamp(float(noise.laplace(np.array([wins]), scale)[0]), lo, hi)
    return BaselineRelease(value=value, epsilon=eps, delta=0.0, notion=EPS_DP, method="widened_winsorized_mean",
                           scale=scale, info={"interval": (a, b), "quartiles": (qa, qb), "blocks": k})


def sample_and_aggregate(x, f: Callable, epsilon: float, lower: float, upper: float, *,
                         blocks: int | None = None, backend="auto", tasks: int | None = None,
                         widen: float = 2.0, grid=None, grid_size: int = DEFAULT_GRID_SIZE) -> BaselineRelease:
    """Sample-and-aggregate of a black-box statistic ``f`` with a widened Winsorized mean: **ε-DP**.

    ``blocks`` defaults to ``max(1, n // 10)`` (blocks of about 10 records). Records may lie
    anywhere f accepts; the block values are clamped into the public range ``[lower, upper]``.
    ``backend`` and ``tasks``: :func:`block_values`; ``info["backend"]`` says which one ran.
    """
    lo, hi = check_bounds(lower, upper)
    arr = check_data(x)
    k = max(1, arr.size // 10) if blocks is None else check_int(blocks, "blocks", min_value=1)
    z, ran = _block_values(arr, f, k, backend=backend, tasks=tasks)
    r = widened_winsorized_mean(z, epsilon, lo, hi, widen=widen, grid=grid, grid_size=grid_size)
    return BaselineRelease(value=r.value, epsilon=r.epsilon, delta=0.0, notion=EPS_DP, method="sample_and_aggregate",
                           scale=r.scale, info=dict(r.info, backend=ran))
