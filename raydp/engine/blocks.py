"""The block function: the only code that draws databases and evaluates the target.

Every backend (in-process, Ray) calls :meth:`PairJob.run_block`, so a result never depends on
where or in which order blocks run.

Randomness. Pair ``i`` belongs to block ``b = i // block_size``. Block ``b`` draws its records from
``numpy.random.Generator(PCG64(SeedSequence(seed, spawn_key=(b,))))``, always a full block's worth
(``block_size · (n + 1)`` records) even when the block is the last, partial one. So the G of pair
``i`` is a function of ``(seed, block_size, i)`` alone: it does not change with m, with how blocks
are grouped into tasks, or with the order they run in — and a stored run can be extended to a
larger m by computing new block indices. The block size is therefore part of a run's identity.

Failures. A pair whose target raises, returns a non-finite value or an output of the wrong shape
gets G = +∞ and is counted; it is never dropped (dropping would bias Δ̂ down). With
``strict=True`` the first failure raises :class:`raydp.errors.TargetError` instead.

Hanging targets. With ``pair_timeout`` (seconds) every evaluation of a pair runs under a
``SIGALRM`` interval timer; a pair that overruns it gets G = +∞, counted as "timed out". The timer
interrupts Python code (loops, sleeps, I/O waits), not a C extension that never returns to the
interpreter; for those the Ray backend's ``task_timeout`` kills the worker instead (see
:mod:`raydp.engine.ray`). Which pairs time out depends on the machine, so a run with
timeouts is reproducible only when none fire.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import signal
import sys
import threading
from dataclasses import dataclass, field

import numpy as np

from ..errors import OracleError, TargetError
from ..validation import check_real

# Spawn key of the probe database used to learn the target's output shape; no block has it.
PROBE_KEY = 2**64 - 1

# Default block sizing: at most this many records drawn per block ...
_RECORDS_PER_BLOCK = 2**16
# ... and at least about this many blocks per run: one pair per block up to m = 2048, so a per-pair
# target (the expensive kind) can spread over as many slots as there are pairs (with 256, m = 1305
# would be 218 blocks of 6 pairs: 4 waves on 64 slots and a fifth of a 1 000-core cluster). A block
# costs ~40-90 µs of bookkeeping and seeding, so a run pays at most ~0.2 s for it in all.
_MIN_BLOCKS = 2048
# A target with a vectorised ``batch`` form evaluates a whole block in a few numpy calls, so a
# block costs a fixed ~40 µs of bookkeeping plus its records; such runs use bigger blocks.
_RECORDS_PER_BATCHED_BLOCK = 2**17
_MIN_BATCHED_BLOCKS = 16


def default_block_size(n: int, m: int, batched: bool = False) -> int:
    """Pairs per block when the caller does not choose.

    Per-pair targets: ``max(1, min(⌊65536 / (n + 1)⌋, ⌈m / 2048⌉))`` — a block's records fit in
    ~0.5 MB of float64 scalars, a run of up to 2048 pairs has one pair per block (it can spread
    over as many slots as there are pairs), and a larger one about 2048 blocks.
    Batched targets (``target.batch`` or ``target.pair_batch``): ``max(1, min(⌊131072 / (n + 1)⌋, ⌈m / 16⌉))`` — the
    fixed cost per block is then under 10% of the numpy work (measured by ``jobs/bench.py``).

    It depends only on (n, m, batched), never on the machine, so a default run is reproducible;
    the block size is recorded in the run's identity.
    """
    if batched:
        return max(1, min(_RECORDS_PER_BATCHED_BLOCK // (n + 1), math.ceil(m / _MIN_BATCHED_BLOCKS)))
    return max(1, min(_RECORDS_PER_BLOCK // (n + 1), math.ceil(m / _MIN_BLOCKS)))


def is_batched(target) -> bool:
    """The target evaluates a whole block at once: a ``batch(databases)`` or ``pair_batch(D, D′)`` form."""
    return callable(getattr(target, "batch", None)) or callable(getattr(target, "pair_batch", None))


def block_rng(seed: int, block_index: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(block_index,))))


@dataclass(frozen=True)
class BlockLayout:
    """How m pairs are cut into blocks of ``block_size``: the one place that knows which pairs a block holds.

    >>> layout = BlockLayout(m=10, block_size=4)
    >>> layout.count, layout.start(2), layout.pairs(2), layout.pairs_in([0, 2])
    (3, 8, 2, 6)
    """

    m: int
    block_size: int

    @property
    def count(self) -> int:
        """Number of blocks, ⌈m / block_size⌉ (the last one may be partial)."""
        return -(-self.m // self.block_size)

    def blocks(self) -> range:
        return range(self.count)

    def start(self, block: int) -> int:
        """Index of the block's first pair."""
        return block * self.block_size

    def pairs(self, block: int) -> int:
        """How many pairs the block holds (``block_size``, or fewer for the last block)."""
        return min(self.block_size, self.m - block * self.block_size)

    def pairs_in(self, blocks) -> int:
        return sum(self.pairs(b) for b in blocks)


@dataclass
class BlockResult:
    """G values of the pairs of one block, in pair order, and how many of them failed.

    A compacted result (:meth:`compacted`) carries only the largest G, with their pair indices in
    ``positions``; ``witnessed`` holds the G of the job's witness pairs in this block (see
    :mod:`raydp.engine.witness`), kept whatever the compaction drops.
    """

    index: int
    start: int
    g: np.ndarray
    failures: int
    failure_kinds: dict = field(default_factory=dict)
    seconds: float = 0.0
    pairs: int = -1  # pairs evaluated; g may be compacted to the largest values only
    positions: np.ndarray | None = field(default=None, repr=False)  # pair indices of g when compacted
    witnessed: dict | None = field(default=None, repr=False)  # {pair index: G} of witness pairs

    def __post_init__(self):
        if self.pairs < 0:
            self.pairs = int(self.g.size)

    @property
    def complete(self) -> bool:
        """True when ``g`` holds every pair's G (not only the largest)."""
        return self.g.size == self.pairs

    def pair_indices(self) -> np.ndarray:
        """The pair index of every value in ``g``."""
        if self.positions is not None:
            return self.positions
        return np.arange(self.start, self.start + self.g.size, dtype=np.int64)

    @classmethod
    def failed(cls, index: int, start: int, pairs: int, kind: str, seconds: float = 0.0) -> "BlockResult":
        """A block none of whose pairs produced a G (e.g. its task was killed): every G is +∞."""
        return cls(index, start, np.full(pairs, math.inf), pairs, {kind: pairs}, seconds, pairs)

    def compacted(self, keep: int) -> "BlockResult":
        """The same result carrying only the ``keep`` largest G (with their pair indices): enough for
        Δ̂ = G_(k) and for knowing which pair set it."""
        from .reduce import largest_at

        if self.g.size <= keep:
            return self
        g, at = largest_at(self.g, self.pair_indices(), keep)
        return BlockResult(self.index, self.start, g, self.failures, dict(self.failure_kinds), self.seconds,
                           self.pairs, positions=at, witnessed=self.witnessed)


@dataclass
class PairJob:
    """Everything a worker needs to evaluate blocks. Picklable; shipped to Ray once."""

    target: object
    oracle: object
    mechanism: object
    n: int
    m: int
    seed: int
    block_size: int
    out_dim: int
    strict: bool = False
    pair_timeout: float | None = None
    setup_key: str | None = None  # the target has setup(): run once per process (see prepared())
    # seconds the driver's probe took (one draw and one evaluation); sizes the first Ray tasks
    probe_seconds: float | None = None
    # pairs whose G every result reports in ``witnessed`` even when compacted (raydp.engine.witness)
    witness_pairs: tuple = ()

    def block_seconds_guess(self) -> float | None:
        """About what a block costs, from the probe: a pair is two evaluations. None for a batched
        target (its pairs cost far less than an evaluation each) or without a probe time."""
        if self.probe_seconds is None or is_batched(self.target):
            return None
        return 2.0 * self.probe_seconds * self.block_size

    @property
    def layout(self) -> BlockLayout:
        return BlockLayout(self.m, self.block_size)

    # ---- databases -------------------------------------------------------------------------
    def draw(self, block_index: int) -> tuple[np.ndarray, int]:
        """Records of a block, shaped ``(pairs_in_block, n + 1, *record_shape)``."""
        start, pairs = self.layout.start(block_index), self.layout.pairs(block_index)
        if pairs <= 0:
            raise ValueError(f"block {block_index} is past m={self.m}")
        size = self.block_size * (self.n + 1)
        try:
            records = np.asarray(self.oracle.sample(block_rng(self.seed, block_index), size))
        except Exception as exc:  # an oracle failure is not a pair's failure: the run stops
            raise OracleError(f"the oracle raised {type(exc).__name__} drawing block {block_index} "
                              "(its message is withheld: it may quote records)") from None
        if records.ndim < 1 or records.shape[0] != size:
            raise OracleError(
                f"oracle.sample(rng, {size}) returned shape {records.shape}; "
                f"the first axis must have {size} records"
            )
        if records.dtype.kind not in "biuf":  # the probe checks this too, but an oracle may change its mind
            raise OracleError(f"oracle.sample returned dtype {records.dtype} drawing block {block_index} "
                              "(complex or non-numeric); records must be real numbers")
        records = records[: pairs * (self.n + 1)]
        return records.reshape((pairs, self.n + 1) + records.shape[1:]), start

    def neighbours(self, records: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """D = (x_1..x_n), D′ = (x_1..x_{n−1}, x_{n+1}) for every pair of the block.

        D is a view of the records; D′ is a C-contiguous copy, written in two slice assignments
        (a fancy index would return a transposed layout, over which numpy sums the other way
        round — a different last bit than the same database evaluated on its own). The copy goes
        into this thread's scratch buffer when nothing kept the previous block's (see
        :func:`_scratch`): writing fresh pages cost 3-4× the copy itself.
        """
        n = self.n
        d = records[:, :n]
        d_prime = _scratch(d.shape, records.dtype)
        d_prime[:, : n - 1] = records[:, : n - 1]
        d_prime[:, n - 1] = records[:, n]
        return d, d_prime

    # ---- evaluation ------------------------------------------------------------------------
    def _fail(self, kinds: dict, kind: str, pair_index: int, detail: str = "") -> float:
        if self.strict:
            # from None: the target's exception (whose message may quote records) is not chained
            # into the traceback that Ray ships back and prints.
            raise TargetError(f"pair {pair_index}: {kind}{': ' + detail if detail else ''} (strict mode)") from None
        kinds[kind] = kinds.get(kind, 0) + 1
        return math.inf

    def _embed(self, value) -> np.ndarray:
        e = np.asarray(self.mechanism.embed(value), dtype=np.float64)
        if e.shape != (self.out_dim,):
            raise _ShapeError(f"output has {e.size} coordinates, expected {self.out_dim}")
        return e

    def _g_batched(self, d, d_prime, start, kinds) -> np.ndarray | None:
        pair_batch = getattr(self.target, "pair_batch", None)
        batch = getattr(self.target, "batch", None)
        if batch is None and pair_batch is None:
            return None
        pairs = d.shape[0]
        budget = None if self.pair_timeout is None else self.pair_timeout * pairs
        try:  # D and D′ separately: no stacked copy of the block
            with _alarm(budget):
                if pair_batch is not None:  # D′ from D's solution: the pairs' n − 1 shared records
                    outs_a, outs_b = pair_batch(d, d_prime)
                    outs_a, outs_b = np.asarray(outs_a), np.asarray(outs_b)
                else:
                    outs_a = np.asarray(batch(d))
                    outs_b = np.asarray(batch(d_prime))
            if outs_a.dtype.kind not in "biuf" or outs_b.dtype.kind not in "biuf":
                return None  # complex or objects: never cast away (an imaginary part would vanish)
            outs_a, outs_b = outs_a.astype(np.float64, copy=False), outs_b.astype(np.float64, copy=False)
        except (Exception, SystemExit, PairTimeout):
            return None  # fall back to pair-by-pair so one bad (or hanging) database fails only its pair
        if outs_a.shape[:1] != (pairs,) or outs_b.shape != outs_a.shape:
            return None
        a = _embed_rows(self.mechanism, outs_a)
        b = _embed_rows(self.mechanism, outs_b)
        if a is None or b is None or a.shape != (pairs, self.out_dim) or b.shape != a.shape:
            return None
        g = np.asarray(self.mechanism.distance(a, b), dtype=np.float64)
        if np.isfinite(g).all():  # a finite norm of a − b needs finite a and b
            return g
        bad = ~(np.isfinite(a).all(axis=1) & np.isfinite(b).all(axis=1) & np.isfinite(g))
        if bad.any():
            for j in np.flatnonzero(bad):
                g[j] = self._fail(kinds, "non-finite output", start + int(j))
        return g

    def _g_pairwise(self, d, d_prime, start, kinds) -> np.ndarray:
        pairs = d.shape[0]
        g = np.empty(pairs, dtype=np.float64)
        pair_eval = getattr(self.target, "pair", None)
        for j in range(pairs):
            i = start + j
            try:
                with _alarm(self.pair_timeout):
                    if pair_eval is not None:
                        fa, fb = pair_eval(d[j], d_prime[j])
                    else:
                        fa, fb = self.target(d[j]), self.target(d_prime[j])
                a, b = self._embed(fa), self._embed(fb)
            except PairTimeout:
                g[j] = self._fail(kinds, "timed out", i, f"over {self.pair_timeout:g} s")
                continue
            except _ShapeError as exc:
                g[j] = self._fail(kinds, "wrong output shape", i, str(exc))
                continue
            except TargetError:
                if self.strict:
                    raise
                g[j] = self._fail(kinds, "target raised", i)
                continue
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # any error of a black-box target (SystemExit too) is a failed pair
                g[j] = self._fail(kinds, "target raised", i, type(exc).__name__)
                continue
            if not (np.isfinite(a).all() and np.isfinite(b).all()):
                g[j] = self._fail(kinds, "non-finite output", i)
                continue
            gj = float(self.mechanism.distance(a[None, :], b[None, :])[0])
            g[j] = gj if math.isfinite(gj) else self._fail(kinds, "non-finite output", i)
        return g

    def evaluate(self, records: np.ndarray, start: int) -> tuple[np.ndarray, dict]:
        """G of every pair of ``records`` (shaped ``(pairs, n + 1, *record_shape)``, the first pair
        numbered ``start``) and the failure kinds: the one evaluation every block and every replayed
        witness goes through."""
        d, d_prime = self.neighbours(records)
        kinds: dict = {}
        g = self._g_batched(d, d_prime, start, kinds)
        if g is None:
            kinds = {}
            g = self._g_pairwise(d, d_prime, start, kinds)
        return g, kinds

    def run_block(self, block_index: int) -> BlockResult:
        import time

        t0 = time.perf_counter()
        records, start = self.draw(block_index)
        g, kinds = self.evaluate(records, start)
        witnessed = None
        if self.witness_pairs:
            end = start + g.size
            witnessed = {i: float(g[i - start]) for i in self.witness_pairs if start <= i < end} or None
        return BlockResult(
            index=block_index,
            start=start,
            g=g,
            failures=int(sum(kinds.values())),
            failure_kinds=kinds,
            seconds=time.perf_counter() - t0,
            witnessed=witnessed,
        )

    def run_blocks(self, block_indices) -> list[BlockResult]:
        job = self.prepared()
        return [job.run_block(int(b)) for b in block_indices]

    def prepared(self) -> "PairJob":
        """This job with its target set up in this process: ``target.setup()`` runs once per process
        (per Ray worker, not per task) and the set-up target is reused by every later task there."""
        if self.setup_key is None:
            return self
        target = set_up(self.target, self.setup_key)
        return self if target is self.target else dataclasses.replace(self, target=target)


# Targets already set up in this process, by setup key (most recent last; a few kept).
_SET_UP: dict = {}
_SET_UP_KEEP = 4


def set_up(target, key: str):
    """The target of ``key`` after its ``setup()``: this process's earlier one when there is one,
    else ``target`` itself, set up now. A ``setup()`` that raises stops the run (it saw no data)."""
    done = _SET_UP.pop(key, None)
    if done is None:
        try:
            target.setup()
        except Exception as exc:
            raise TargetError(f"target.setup() raised {type(exc).__name__}: {exc}") from None
        done = target
    _SET_UP[key] = done
    while len(_SET_UP) > _SET_UP_KEEP:
        _SET_UP.pop(next(iter(_SET_UP)))
    return done


def set_up_here(target) -> tuple[str | None, object]:
    """Set up a target with ``setup()`` in this process, before any block runs: ``(setup key, the
    set-up target)``, or ``(None, target)`` for a target without ``setup()``.

    The key names the target by content (the SHA-256 of its pickled bytes before set-up), so equal
    targets share one set-up per process, across runs too. What is set up is a copy: the target
    itself stays as it was, and that is what a backend ships to its workers (each sets up its own,
    once; a loaded model is never pickled and sent).
    """
    if not callable(getattr(target, "setup", None)):
        return None, target
    import hashlib

    try:
        import cloudpickle

        blob = cloudpickle.dumps(target)
    except Exception:  # cannot be pickled, so it can only run in this process: set it up in place
        import uuid

        key = f"unpicklable-{uuid.uuid4().hex}"
        return key, set_up(target, key)
    key = hashlib.sha256(blob).hexdigest()
    ready = _SET_UP.get(key)
    return key, set_up(cloudpickle.loads(blob) if ready is None else ready, key)


# D′ scratch buffers: one per thread, reused block after block. A fresh 1 MB array is fresh pages
# (glibc gives a freed block back to the kernel, so every block faulted its D′ in again): at
# n = 1000 that page-faulting cost 3-4× the copy itself. Buffers above this size are not kept.
_SCRATCH_MAX_BYTES = 32 << 20
_scratch_state = threading.local()


def _scratch(shape: tuple, dtype) -> np.ndarray:
    """An uninitialised C-contiguous array: this thread's buffer from the previous block when it has
    the same shape and dtype and nothing else refers to it any more, else a new array.

    "Nothing else" is checked with the reference count: a target that kept its input, or a view of
    it (a view holds its base), raises the count and the next block gets a new array, so a kept
    database is never overwritten. Only the memory is reused, never a value: D′ is written in full.
    """
    st = _scratch_state.__dict__
    buf = st.get("buf")
    if (buf is not None and buf.shape == shape and buf.dtype == dtype
            and sys.getrefcount(buf) <= st["free_refs"]):
        return buf
    buf = np.empty(shape, dtype=dtype)
    if buf.nbytes <= _SCRATCH_MAX_BYTES:
        st["buf"] = buf
        st["free_refs"] = sys.getrefcount(buf)  # held by st and this frame only, counted as above
    return buf


class _ShapeError(Exception):
    pass


class PairTimeout(BaseException):
    """Raised inside a target that overran ``pair_timeout``.

    A BaseException, so that a target's own ``except Exception`` cannot swallow it.
    """


def _on_alarm(signum, frame):
    raise PairTimeout()


def check_timeout(name: str, seconds) -> float | None:
    """A timeout in seconds: None, or a finite number > 0 (else ``InvalidTypeError`` for a wrong type,
    ``InvalidArgumentError`` for a wrong value)."""
    if seconds is None:
        return None
    return check_real(seconds, name, min_value=0, include_min=False, expected="a positive number of seconds or None")


def check_alarm_usable() -> None:
    """``pair_timeout`` uses SIGALRM: only on a POSIX process's main thread."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        from ..errors import EngineError

        raise EngineError("pair_timeout needs to run on a process's main thread on a POSIX system "
                          "(it uses SIGALRM); run the sampler from the main thread, or use the Ray "
                          "backend's task_timeout")


@contextlib.contextmanager
def _alarm(seconds: float | None):
    """Raise :class:`PairTimeout` in this thread after ``seconds`` (None: no limit)."""
    if seconds is None:
        yield
        return
    check_alarm_usable()
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _embed_rows(mechanism, outs: np.ndarray) -> np.ndarray | None:
    rows = getattr(mechanism, "embed_batch", None)
    try:
        if rows is not None:
            return np.asarray(rows(outs), dtype=np.float64)
        return np.stack([np.asarray(mechanism.embed(o), dtype=np.float64) for o in outs])
    except Exception:
        return None


def probe_output_dim(target, oracle, mechanism, n: int, seed: int, timeout: float | None = None) -> int:
    """Evaluate the target once on a public probe database to learn its output dimension."""
    from ..errors import RaydpError
    from ..oracles import check_records

    # The oracle must honour its protocol before any pair is drawn: NaN records would turn every
    # pair into a failure, complex ones would silently lose their imaginary part.
    try:
        records = oracle.sample(block_rng(seed, PROBE_KEY), n)
    except RaydpError:
        raise
    except Exception as exc:
        raise OracleError(f"oracle.sample(rng, {n}) raised {type(exc).__name__}: {exc}") from exc
    records = check_records(records, n)
    if timeout is not None:
        check_alarm_usable()
    try:
        with _alarm(timeout):
            value = target(records)
    except PairTimeout:
        raise TargetError(f"the target did not finish within pair_timeout={timeout:g} s on a probe database "
                          "drawn from the oracle; a target that hangs on typical oracle data cannot be sampled") from None
    except (Exception, SystemExit) as exc:
        # The target's own message is not repeated: it may quote records, and an oracle can be a
        # bootstrap of a real dataset. Run the target on oracle data yourself to see it.
        raise TargetError(
            f"the target raised {type(exc).__name__} on a probe database drawn from the oracle (its message "
            "is withheld: it may quote records); a target that fails on typical oracle data cannot be sampled"
        ) from None
    try:
        e = np.asarray(mechanism.embed(value), dtype=np.float64)
    except Exception as exc:
        raise TargetError(
            f"the target's output does not fit the {getattr(mechanism, 'name', 'mechanism')} mechanism: {exc}"
        ) from exc
    if e.ndim != 1 or e.size == 0:
        raise TargetError(f"the mechanism embedded the target output as shape {e.shape}; expected a non-empty vector")
    if not np.isfinite(e).all():
        raise TargetError("the target returned a non-finite value (NaN or ±inf) on a probe database drawn from "
                          "the oracle; every pair would fail, so the run is refused")
    return int(e.size)
