"""The Δ store: a run's G sample as Parquet shards plus a metadata record, resumable.

Layout under a store URI (a local path or any pyarrow filesystem URI such as
``s3://bucket/run?endpoint_override=127.0.0.1:9000&scheme=http``)::

    meta.json                  run identity (n, seed, block size, mechanism measure, target,
                               oracle, output dim, version) and the current plan
    shards/shard-*.parquet     columns block, pair, g; key-value metadata "raydp" holds, per
                               block, its pair count and failures, plus a SHA-256 of the data
    quarantine/                shards that failed verification (kept for inspection, never read)
    result.json                summary written when the run completes

A :class:`Store` is a sink and a source of block results and never runs anything itself: the
sampler (:mod:`raydp.sampler`) reads the blocks it holds, runs the missing ones and writes them back.

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
import os
import time
import uuid
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ._version import __version__
from .engine.blocks import BlockLayout, BlockResult
from .errors import StoreError
from .identity import RunIdentity
from .plan import Plan
from .validation import check_int, check_real

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


class ShardWriter:
    """A sink of block results: buffers them and writes a shard every ``flush_rows`` rows or ``flush_seconds``."""

    def __init__(self, store: "Store"):
        self.store = store
        self._buf: list[BlockResult] = []
        self._rows = 0
        self._last = time.monotonic()

    def write(self, result: BlockResult) -> None:
        self._buf.append(result)
        self._rows += result.g.size
        if self._rows >= self.store.flush_rows or time.monotonic() - self._last >= self.store.flush_seconds:
            self.flush()

    def flush(self) -> None:
        if self._buf:
            self.store.write_shard(self._buf)
        self._buf, self._rows, self._last = [], 0, time.monotonic()


@dataclass
class Store:
    """A Δ store at ``uri``, with its writing options (rows and seconds between two shard writes)."""

    uri: str
    flush_rows: int = 1 << 16
    flush_seconds: float = 5.0

    def __post_init__(self):
        self.fs, self.root = open_fs(self.uri)
        self.uri = str(self.uri)
        self.flush_rows = check_int(self.flush_rows, "flush_rows", min_value=1)
        self.flush_seconds = check_real(self.flush_seconds, "flush_seconds", min_value=0)

    @classmethod
    def open(cls, uri) -> "Store":
        return uri if isinstance(uri, Store) else cls(uri)

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

    # ---- the run's metadata --------------------------------------------------------------
    def stored_block_size(self) -> int | None:
        """The block size of the run held here (None when there is none yet).

        A resumed or extended run must keep it: a pair's G depends on (seed, block size, index).
        """
        if not self.exists("meta.json"):
            return None
        try:
            return int(self.read_json("meta.json")["identity"]["block_size"])
        except (KeyError, TypeError, ValueError) as exc:
            raise StoreError(f"store {self.uri!r} has a meta.json without a block size; it was not written by "
                             "raydp") from exc

    def begin(self, identity: RunIdentity, plan: Plan, *, resume: bool) -> None:
        """Claim the store for this run: refuse another run's store, then (re)write ``meta.json``."""
        if self.exists("meta.json"):
            if not resume:
                raise StoreError(f"store {self.uri!r} already holds a run; pass resume=True (--resume) to continue "
                                 "or extend it, or choose a new URI")
            self._check_same_run(self.read_json("meta.json"), identity, plan)
        self.write_json("meta.json", {"format": FORMAT, "identity": identity.sample_key(), "plan": plan.to_dict(),
                                      "provenance": identity.to_dict(version=False), "version": __version__})

    def _check_same_run(self, meta: dict, identity: RunIdentity, plan: Plan) -> None:
        if meta.get("format") != FORMAT:
            raise StoreError(f"store {self.uri!r} has format {meta.get('format')}, this raydp writes {FORMAT}")
        ident = identity.sample_key()
        diffs = [f for f in IDENTITY_FIELDS if meta["identity"].get(f) != ident.get(f)]
        if diffs:
            detail = "; ".join(f"{f}: stored {meta['identity'].get(f)!r}, asked {ident.get(f)!r}" for f in diffs)
            raise StoreError(f"store {self.uri!r} holds a different run ({detail}); use a new store URI")
        stored_m = int(meta["plan"]["m"])
        if plan.m < stored_m:
            raise StoreError(
                f"store {self.uri!r} holds m={stored_m} pairs; a run with m={plan.m} cannot reuse it. "
                "Use raydp.load_estimate(store, gamma=...) to re-derive Δ̂ from the stored sample"
            )

    def load(self) -> tuple[RunIdentity, Plan]:
        """The stored run's identity and plan, checked; :class:`StoreError` if there is none or it is malformed."""
        if not self.exists("meta.json"):
            raise StoreError(f"no raydp store at {self.uri!r} (meta.json not found)")
        meta = self.read_json("meta.json")
        fmt = meta.get("format") if isinstance(meta, dict) else None
        if fmt != FORMAT:
            raise StoreError(f"store {self.uri!r} has format {fmt}, this raydp reads {FORMAT}")
        try:  # a hand-edited or foreign meta.json must not surface as a KeyError deep inside
            plan = Plan.from_dict(meta["plan"])
            identity = RunIdentity.from_dict(meta["provenance"], version=meta.get("version", "?"))
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise StoreError(f"store {self.uri!r} has a malformed meta.json ({type(exc).__name__}: {exc})") from None
        sizes = {"block_size": identity.block_size, "n": identity.n, "seed": identity.seed,
                 "output_dim": identity.output_dim}
        if (not plan.satisfies_theorem15() or identity.seed < 0
                or min(identity.block_size, identity.n, identity.output_dim) < 1):
            raise StoreError(f"store {self.uri!r} holds an invalid run (plan {plan.to_dict()}, {sizes}); "
                             "it was not written by raydp")
        return identity, plan

    def finish(self, summary: dict) -> None:
        """Mark the run complete (``result.json``)."""
        self.write_json("result.json", dict(summary, completed=time.time()))

    # ---- shards: the sink ------------------------------------------------------------------
    def writer(self) -> ShardWriter:
        return ShardWriter(self)

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

    # ---- shards: the source ----------------------------------------------------------------
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

    def blocks(self, layout: BlockLayout, *, quarantine: bool = True) -> Iterator[BlockResult]:
        """Every verified, complete block of ``layout`` held here, once each, as a full BlockResult.

        Reads one shard at a time. A damaged shard is skipped (and moved to ``quarantine/`` when
        ``quarantine``); a block past m, a partial block from a smaller m, or a duplicate is ignored.
        """
        done: set[int] = set()
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
                if b in done or not 0 <= b < layout.count or hi - lo != layout.pairs(b):
                    continue  # duplicate, past m, or a partial block from a smaller m: ignore
                if bmeta[str(b)]["pairs"] != hi - lo or pairs[lo] != layout.start(b):
                    continue
                info = bmeta[str(b)]
                done.add(b)
                yield BlockResult(index=b, start=int(pairs[lo]), g=g[lo:hi], failures=int(info["failures"]),
                                  failure_kinds=dict(info["kinds"]))


def _digest(blocks: np.ndarray, pairs: np.ndarray, g: np.ndarray) -> str:
    h = hashlib.sha256()
    for a in (blocks, pairs, g):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()
