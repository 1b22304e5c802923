"""The Δ store: a run's G sample as Parquet shards plus a metadata record, resumable.

Layout under a store URI (a local path or any pyarrow filesystem URI such as
``s3://bucket/run?endpoint_override=127.0.0.1:9000&scheme=http``)::

    meta.json                  run identity (n, seed, block size, mechanism measure, target,
                               oracle, output dim, version) and the current plan
    shards/shard-*.parquet     columns block, pair, g; key-value metadata "raydp" holds, per
                               block, its pair count and failures, plus a SHA-256 of the data
    quarantine/                shards that failed verification (kept for inspection, never read)
    result.json                summary written when the run completes

Shards are written to a temporary name and moved into place, so a crash leaves either a whole
shard or none on a local disk. On any filesystem a torn or corrupted shard fails the Parquet read
or the SHA-256 check: it is quarantined and its blocks are recomputed on resume — never read as
data. A block counts as done only when a verified shard holds exactly the pairs the plan expects
for it; duplicates (identical by construction) are counted once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import time
import uuid
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ._version import __version__
from .blocks import BlockResult, PairJob, num_blocks
from .errors import StoreError
from .identity import measurement
from .plan import Plan
from .reduce import TopK, kth_smallest

log = logging.getLogger("raydp.store")

FORMAT = 1
# Identity fields that must match for a resume or an extension; the plan may grow (larger m).
IDENTITY_FIELDS = ("n", "seed", "block_size", "measure", "norm", "target", "oracle", "output_dim")


def open_fs(uri: str) -> tuple[pafs.FileSystem, str]:
    if not isinstance(uri, (str, os.PathLike)) or not str(uri):
        raise StoreError(f"store must be a path or URI string, got {uri!r}")
    uri = str(uri)
    if "://" not in uri:
        if os.path.exists(uri) and not os.path.isdir(uri):
            raise StoreError(f"store {uri!r} is a file; a store is a directory (a new or an existing store path)")
        return pafs.LocalFileSystem(), os.path.abspath(uri)
    try:
        fs, path = pafs.FileSystem.from_uri(uri)
    except Exception as exc:
        raise StoreError(f"cannot open store {uri!r}: {exc}") from None
    return fs, path.rstrip("/")


def run_identity(identity: dict) -> dict:
    """The fields of a run that fix every G value (JSON-able, comparable)."""
    return {
        "n": identity["n"],
        "seed": str(identity["seed"]),
        "block_size": identity["block_size"],
        "measure": measurement(identity["mechanism"]),
        "norm": identity["norm"],
        "target": identity["target"],
        "oracle": identity["oracle"],
        "output_dim": identity["output_dim"],
    }


@dataclass
class Store:
    fs: pafs.FileSystem
    root: str
    uri: str

    @classmethod
    def open(cls, uri: str) -> "Store":
        fs, root = open_fs(uri)
        return cls(fs, root, str(uri))

    # ---- small files ---------------------------------------------------------------------
    def _path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def exists(self, *parts: str) -> bool:
        return self.fs.get_file_info(self._path(*parts)).type != pafs.FileType.NotFound

    def read_json(self, name: str) -> dict:
        try:
            with self.fs.open_input_stream(self._path(name)) as f:
                return json.loads(f.read().decode())
        except (OSError, ValueError) as exc:
            raise StoreError(f"cannot read {name} of store {self.uri!r}: {exc}") from None

    def write_json(self, name: str, obj: dict) -> None:
        self.fs.create_dir(self.root, recursive=True)
        tmp = self._path(f".{name}.{uuid.uuid4().hex}.tmp")
        with self.fs.open_output_stream(tmp) as f:
            f.write(json.dumps(obj, indent=1, sort_keys=True).encode())
        self.fs.move(tmp, self._path(name))

    # ---- shards --------------------------------------------------------------------------
    def write_shard(self, results: list[BlockResult]) -> str:
        blocks = np.concatenate([np.full(r.g.size, r.index, dtype=np.int64) for r in results])
        pairs = np.concatenate([np.arange(r.start, r.start + r.g.size, dtype=np.int64) for r in results])
        g = np.concatenate([r.g for r in results]).astype(np.float64)
        meta = {
            "format": FORMAT,
            "blocks": {str(r.index): {"pairs": int(r.g.size), "failures": int(r.failures),
                                      "kinds": r.failure_kinds} for r in results},
            "sha256": _digest(blocks, pairs, g),
        }
        table = pa.table({"block": blocks, "pair": pairs, "g": g})
        table = table.replace_schema_metadata({"raydp": json.dumps(meta)})
        self.fs.create_dir(self._path("shards"), recursive=True)
        name = f"shard-{results[0].index:010d}-{uuid.uuid4().hex[:12]}.parquet"
        tmp = self._path("shards", "." + name + ".tmp")
        with self.fs.open_output_stream(tmp) as f:
            pq.write_table(table, f, write_page_checksum=True)
        self.fs.move(tmp, self._path("shards", name))
        return name

    def shard_names(self) -> list[str]:
        sel = pafs.FileSelector(self._path("shards"), allow_not_found=True)
        names = [i.base_name for i in self.fs.get_file_info(sel) if i.type == pafs.FileType.File]
        return sorted(n for n in names if n.startswith("shard-") and n.endswith(".parquet"))

    def read_shard(self, name: str) -> tuple[dict, np.ndarray, np.ndarray, np.ndarray]:
        """(per-block meta, block, pair, g) of a verified shard; raises StoreError if damaged."""
        try:
            with self.fs.open_input_file(self._path("shards", name)) as f:
                table = pq.read_table(f, page_checksum_verification=True)
            meta = json.loads(table.schema.metadata[b"raydp"].decode())
            blocks = table.column("block").to_numpy()
            pairs = table.column("pair").to_numpy()
            g = table.column("g").to_numpy()
        except Exception as exc:
            raise StoreError(f"shard {name} is damaged ({type(exc).__name__})") from None
        if meta.get("sha256") != _digest(blocks, pairs, g):
            raise StoreError(f"shard {name} fails its SHA-256 check")
        return meta["blocks"], blocks, pairs, g

    def quarantine(self, name: str) -> None:
        self.fs.create_dir(self._path("quarantine"), recursive=True)
        try:
            self.fs.move(self._path("shards", name), self._path("quarantine", name))
        except OSError:
            self.fs.delete_file(self._path("shards", name))

    def scan(self, plan: Plan, block_size: int, *, want_sample: bool, quarantine: bool = True):
        """Verified complete blocks: ({block: (failures, kinds)}, TopK, sample or None).

        Reads one shard at a time, so memory is O(shard + m − k + 1) unless the sample is wanted.
        """
        expected = {b: min(block_size, plan.m - b * block_size) for b in range(num_blocks(plan.m, block_size))}
        done: dict[int, tuple[int, dict]] = {}
        top = TopK(plan.keep)
        sample = np.full(plan.m, np.nan) if want_sample else None
        for name in self.shard_names():
            try:
                bmeta, blocks, pairs, g = self.read_shard(name)
            except StoreError as exc:
                log.warning("%s; it is quarantined and its blocks will be recomputed", exc)
                if quarantine:
                    self.quarantine(name)
                continue
            order = np.argsort(blocks, kind="stable")
            blocks, pairs, g = blocks[order], pairs[order], g[order]
            bounds = np.flatnonzero(np.diff(blocks)) + 1
            for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, blocks.size]):
                b = int(blocks[lo])
                if b in done or b not in expected or hi - lo != expected[b]:
                    continue  # duplicate, past m, or a partial block from a smaller m: ignore
                if bmeta[str(b)]["pairs"] != hi - lo or pairs[lo] != b * block_size:
                    continue
                info = bmeta[str(b)]
                done[b] = (int(info["failures"]), dict(info["kinds"]))
                top.add(g[lo:hi])
                if sample is not None:
                    sample[pairs[lo]:pairs[hi - 1] + 1] = g[lo:hi]
        return done, top, sample


def _failure_totals(done: dict) -> tuple[int, dict]:
    """Total failures and failures by kind over the stored blocks."""
    kinds: dict = {}
    for _, block_kinds in done.values():
        for key, v in block_kinds.items():
            kinds[key] = kinds.get(key, 0) + v
    return sum(f for f, _ in done.values()), kinds


def _digest(blocks: np.ndarray, pairs: np.ndarray, g: np.ndarray) -> str:
    h = hashlib.sha256()
    for a in (blocks, pairs, g):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def _check_identity(store: Store, meta: dict, ident: dict, plan: Plan) -> None:
    if meta.get("format") != FORMAT:
        raise StoreError(f"store {store.uri!r} has format {meta.get('format')}, this raydp writes {FORMAT}")
    diffs = [f for f in IDENTITY_FIELDS if meta["identity"].get(f) != ident.get(f)]
    if diffs:
        detail = "; ".join(f"{f}: stored {meta['identity'].get(f)!r}, asked {ident.get(f)!r}" for f in diffs)
        raise StoreError(f"store {store.uri!r} holds a different run ({detail}); use a new store URI")
    stored_m = int(meta["plan"]["m"])
    if plan.m < stored_m:
        raise StoreError(
            f"store {store.uri!r} holds m={stored_m} pairs; a run with m={plan.m} cannot reuse it. "
            "Use raydp.load_estimate(uri, gamma=...) to re-derive Δ̂ from the stored sample"
        )


def stored_block_size(uri: str) -> int | None:
    """The block size of the run held at ``uri`` (None when there is none yet).

    A resumed or extended run must keep it: a pair's G depends on (seed, block size, index).
    """
    store = Store.open(uri)
    if not store.exists("meta.json"):
        return None
    try:
        return int(store.read_json("meta.json")["identity"]["block_size"])
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreError(f"store {uri!r} has a meta.json without a block size; it was not written by raydp") from exc


def run_with_store(job: PairJob, plan: Plan, identity: dict, uri: str, *, resume: bool, backend: str,
                   progress: bool, keep_sample: bool, flush_rows: int = 1 << 16,
                   flush_seconds: float = 5.0, **engine_options):
    """Run (or resume, or extend) a sampling run that streams its G sample into ``uri``."""
    from .sampler import SensitivityEstimate, collect, run_engine

    t0 = time.perf_counter()
    store = Store.open(uri)
    ident = run_identity(identity)
    if store.exists("meta.json"):
        if not resume:
            raise StoreError(f"store {uri!r} already holds a run; pass resume=True (--resume) to continue "
                             "or extend it, or choose a new URI")
        meta = store.read_json("meta.json")
        _check_identity(store, meta, ident, plan)
    meta = {"format": FORMAT, "identity": ident, "plan": plan.to_dict(), "provenance": _jsonable_identity(identity),
            "version": __version__}
    store.write_json("meta.json", meta)

    done, top, _ = store.scan(plan, job.block_size, want_sample=False)
    failures, kinds = _failure_totals(done)
    todo = [b for b in range(num_blocks(plan.m, job.block_size)) if b not in done]
    if done:
        log.info("resuming %s: %d blocks stored, %d to run", uri, len(done), len(todo))

    def stream():
        buf: list[BlockResult] = []
        rows, last = 0, time.monotonic()
        for r in run_engine(job, todo, backend=backend, progress=progress, **engine_options):
            buf.append(r)
            rows += r.g.size
            if rows >= flush_rows or time.monotonic() - last >= flush_seconds:
                store.write_shard(buf)
                buf, rows, last = [], 0, time.monotonic()
            yield r
        if buf:
            store.write_shard(buf)

    top, failures, kinds, _ = collect(stream(), plan, job.block_size, keep_sample=False, expected_blocks=todo,
                                      top=top, failures=failures, kinds=kinds)
    sensitivity = top.order_statistic()
    store.write_json("result.json", {"sensitivity": sensitivity if math.isfinite(sensitivity) else "inf",
                                     "failures": failures, "failure_kinds": kinds, "plan": plan.to_dict(),
                                     "completed": time.time()})
    sample = None
    if keep_sample:
        _, _, sample = store.scan(plan, job.block_size, want_sample=True)
    return SensitivityEstimate(sensitivity=sensitivity, plan=plan, top=top.sorted_desc(), failures=failures,
                               failure_kinds=kinds, sample=sample, seconds=time.perf_counter() - t0, **identity)


def _jsonable_identity(identity: dict) -> dict:
    d = dict(identity)
    d["seed"] = str(d["seed"])
    return d


def load_estimate(uri: str, *, gamma: float | None = None):
    """The estimate stored at ``uri`` (with its full G sample); ``gamma`` re-derives Δ̂ (mode k)."""
    from .sampler import SensitivityEstimate

    store = Store.open(uri)
    if not store.exists("meta.json"):
        raise StoreError(f"no raydp store at {uri!r} (meta.json not found)")
    meta = store.read_json("meta.json")
    fmt = meta.get("format") if isinstance(meta, dict) else None
    if fmt != FORMAT:
        raise StoreError(f"store {uri!r} has format {fmt}, this raydp reads {FORMAT}")
    try:  # a hand-edited or foreign meta.json must not surface as a KeyError deep inside
        plan = Plan.from_dict(meta["plan"])
        prov = meta["provenance"]
        sizes = {f: int(prov[f]) for f in ("block_size", "n", "seed", "output_dim")}
        missing = {"mechanism", "norm", "target", "oracle"} - set(prov)
        if missing:
            raise KeyError(sorted(missing)[0])
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise StoreError(f"store {uri!r} has a malformed meta.json ({type(exc).__name__}: {exc})") from None
    if (not plan.satisfies_theorem15() or sizes["seed"] < 0
            or min(sizes["block_size"], sizes["n"], sizes["output_dim"]) < 1):
        raise StoreError(f"store {uri!r} holds an invalid run (plan {plan.to_dict()}, {sizes}); "
                         "it was not written by raydp")
    done, top, sample = store.scan(plan, int(prov["block_size"]), want_sample=True, quarantine=False)
    total = num_blocks(plan.m, int(prov["block_size"]))
    if len(done) != total:
        raise StoreError(f"store {uri!r} is incomplete: {len(done)} of {total} blocks verified; "
                         "finish it with resume=True (raydp estimate ... --out URI --resume)")
    failures, kinds = _failure_totals(done)
    est = SensitivityEstimate(
        sensitivity=kth_smallest(sample, plan.k), plan=plan, n=int(prov["n"]), seed=int(prov["seed"]),
        block_size=int(prov["block_size"]), failures=failures, failure_kinds=kinds, mechanism=prov["mechanism"],
        norm=prov["norm"], target=prov["target"], oracle=prov["oracle"], output_dim=int(prov["output_dim"]),
        version=meta.get("version", "?"), top=top.sorted_desc(), sample=sample,
    )
    return est.for_gamma(gamma) if gamma is not None else est
