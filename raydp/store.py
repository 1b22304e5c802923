"""The Δ store: a run's G sample as Parquet shards plus a metadata record, resumable.

Layout under a store URI (a local path or any pyarrow filesystem URI such as
``s3://bucket/run?endpoint_override=127.0.0.1:9000&scheme=http``)::

    meta.json                  run identity (n, seed, block size, mechanism measure, target,
                               oracle, output dim, version), its fingerprint, and the plan of the
                               last complete run (an extension updates it only when it completes)
    shards/shard-*.parquet     columns block, pair, g; key-value metadata "raydp" holds the run's
                               fingerprint and, per block, its pair count and failures, plus a
                               SHA-256 over all of it and the data
    quarantine/                shards that failed verification (kept for inspection, never read)
    result.json                summary written when the run completes
    witnesses.npz              the run's witness pairs (pair index, G, oracle records), written when
                               it completes and replayed whenever its Δ̂ is reused

A :class:`Store` is a sink and a source of block results and never runs anything itself: the
sampler (:mod:`raydp.sampler`) reads the blocks it holds, runs the missing ones and writes them back.

What it refuses, so that no Δ̂ is ever read off a mixture or a forgery by accident:

- a new store only in an absent or empty location: a directory with files but no ``meta.json``
  (a "reset" store, a user's own folder) is refused, never adopted or overwritten;
- creation is exclusive: on a local disk ``meta.json`` appears by an atomic link (create-if-absent);
  elsewhere (S3 and other object stores) the creator writes it with a random token, waits
  ``create_wait`` seconds and reads it back — of two creators only the later writer finds its token,
  the earlier one stops before any work (each checks that its own check-to-write gap was well under
  ``create_wait``);
- a shard must carry the run's fingerprint, pass its SHA-256 (which covers the failure counts too),
  hold G ≥ 0 or +∞ only, and count exactly its +∞ values as failures; a shard that cannot be read
  is quarantined and its blocks recomputed, any other violation stops the run;
- two shards for one block must hold the same values, or the run stops.

The hash is unkeyed: it catches accidents and torn writes, not someone who can write to the store
and recompute it. Against that, a keyed MAC (an HMAC with a key the writer of the store does not
have) would be needed; raydp does not add one — protect the store's location instead.

Every filesystem error becomes a :class:`StoreError` of one line; a URI's credentials (user
info, ``secret_key=``/``access_key=``/``session_token=`` parameters) never appear in a message.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Iterator
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ._version import __version__
from .engine.blocks import BlockLayout, BlockResult
from .engine.witness import Witnesses
from .errors import StoreError
from .identity import RunIdentity, difference, run_fingerprint
from .plan import Plan
from .validation import check_int, check_real

log = logging.getLogger("raydp.store")

FORMAT = 2
WITNESSES = "witnesses.npz"  # the run's witness pairs: index, G, role and oracle records (numpy .npz, no pickle)
# Identity fields that must match for a resume or an extension; the plan may grow (larger m).
IDENTITY_FIELDS = ("n", "seed", "block_size", "measure", "norm", "target", "oracle", "output_dim")
# Temporary files older than this are left-overs of a crashed writer and are removed on open.
STALE_TMP_SECONDS = 60.0
_SECRET_WORDS = ("secret", "key", "token", "password", "credential", "signature")


def redact(uri: str) -> str:
    """``uri`` without credentials: user info and secret-looking query parameters become ``***``.

    >>> redact("s3://AK:SECRET@bucket/run?endpoint_override=h:9000&secret_key=S&scheme=http")
    's3://***@bucket/run?endpoint_override=h%3A9000&secret_key=%2A%2A%2A&scheme=http'
    """
    text = str(uri)
    if "://" not in text:
        return text
    try:
        parts = urlsplit(text)
    except ValueError:
        return "<store URI>"
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rsplit("@", 1)[1]
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, "***" if any(w in k.lower() for w in _SECRET_WORDS) else v) for k, v in pairs])
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _secrets(uri: str) -> list[str]:
    """The credential strings inside ``uri`` (to scrub from error texts)."""
    text = str(uri)
    if "://" not in text:
        return []
    try:
        parts = urlsplit(text)
    except ValueError:
        return [text]
    out = []
    if "@" in parts.netloc:
        out += [s for s in parts.netloc.rsplit("@", 1)[0].split(":") if s]
    out += [v for k, v in parse_qsl(parts.query, keep_blank_values=True)
            if v and any(w in k.lower() for w in _SECRET_WORDS)]
    return out


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
        raise StoreError(f"cannot open store {redact(uri)!r}: {_reason(exc, uri)}") from None
    return fs, path.rstrip("/")


def _reason(exc: BaseException, uri: str = "") -> str:
    """One line saying why an I/O call failed, without credentials."""
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    text = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    for secret in _secrets(uri):
        text = text.replace(secret, "***")
    return text[:300]


def _canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


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


# The fields of Store that may ride along with a store URI (``store="path", flush_rows=...``).
STORE_OPTIONS = ("flush_rows", "flush_seconds", "create_wait")


@dataclass
class Store:
    """A Δ store at ``uri``, with its writing options.

    ``flush_rows`` / ``flush_seconds``: rows and seconds between two shard writes. ``create_wait``:
    seconds a creator waits before reading back ``meta.json`` on a filesystem without an atomic
    create-if-absent (object stores); see the module docstring.
    """

    uri: str
    flush_rows: int = 1 << 16
    flush_seconds: float = 5.0
    create_wait: float = 2.0
    _run: str | None = field(default=None, init=False, repr=False)

    def __post_init__(self):
        self.fs, self.root = open_fs(self.uri)
        self.uri = str(self.uri)
        self.flush_rows = check_int(self.flush_rows, "flush_rows", min_value=1)
        self.flush_seconds = check_real(self.flush_seconds, "flush_seconds", min_value=0)
        self.create_wait = check_real(self.create_wait, "create_wait", min_value=0)

    def __repr__(self) -> str:
        return f"Store({self.display!r})"

    @property
    def display(self) -> str:
        """The URI as it may be printed (credentials removed)."""
        return redact(self.uri)

    @property
    def local(self) -> bool:
        return isinstance(self.fs, pafs.LocalFileSystem)

    @classmethod
    def open(cls, uri) -> "Store":
        return uri if isinstance(uri, Store) else cls(uri)

    # ---- small files ---------------------------------------------------------------------
    @contextlib.contextmanager
    def _io(self, what: str):
        """Turn any filesystem error into one StoreError line naming the store and what failed."""
        try:
            yield
        except StoreError:
            raise
        except (OSError, pa.ArrowException) as exc:
            raise StoreError(f"cannot {what} in store {self.display!r}: {_reason(exc, self.uri)}") from None

    def _path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def _info(self, *parts: str):
        with self._io("look up " + ("/".join(parts) or "the store")):
            return self.fs.get_file_info(self._path(*parts))

    def exists(self, *parts: str) -> bool:
        return self._info(*parts).type != pafs.FileType.NotFound

    def read_json(self, name: str) -> dict:
        try:
            with self.fs.open_input_stream(self._path(name)) as f:
                doc = json.loads(f.read().decode())
        except (OSError, ValueError, pa.ArrowException) as exc:
            raise StoreError(f"cannot read {name} of store {self.display!r}: {_reason(exc, self.uri)}") from None
        if not isinstance(doc, dict):
            raise StoreError(f"{name} of store {self.display!r} is not a JSON object; it was not written by raydp")
        return doc

    def _write_tmp(self, name: str, data: bytes) -> str:
        tmp = self._path(f".{name}.{uuid.uuid4().hex}.tmp")
        with self._io(f"write {name}"):
            self.fs.create_dir(self.root, recursive=True)
            try:
                with self.fs.open_output_stream(tmp) as f:
                    f.write(data)
            except BaseException:
                self._remove_quietly(tmp)
                raise
        return tmp

    def write_bytes(self, name: str, data: bytes) -> None:
        """``name`` written whole or not at all: a temporary file, then a move into place."""
        tmp = self._write_tmp(name, data)
        with self._io(f"write {name}"):
            try:
                self.fs.move(tmp, self._path(name))
            except BaseException:
                self._remove_quietly(tmp)
                raise

    def write_json(self, name: str, obj: dict) -> None:
        self.write_bytes(name, json.dumps(obj, indent=1, sort_keys=True).encode())

    def _remove_quietly(self, path: str) -> None:
        with contextlib.suppress(Exception):
            self.fs.delete_file(path)

    # ---- the run's metadata --------------------------------------------------------------
    def _meta(self) -> dict | None:
        return self.read_json("meta.json") if self.exists("meta.json") else None

    def stored(self) -> tuple[int | None, int | None]:
        """(seed, block size) of the run held here, (None, None) when there is none yet.

        A resumed or extended run keeps both: a pair's G depends on (seed, block size, index).
        """
        meta = self._meta()
        if meta is None:
            return None, None
        try:
            return int(meta["identity"]["seed"]), int(meta["identity"]["block_size"])
        except (KeyError, TypeError, ValueError) as exc:
            raise StoreError(f"store {self.display!r} has a meta.json without a seed or block size; it was not "
                             "written by raydp") from exc

    def stored_plan(self) -> Plan | None:
        """The plan of the run held here (None when there is none yet)."""
        meta = self._meta()
        if meta is None:
            return None
        try:
            return Plan.from_dict(meta["plan"])
        except (KeyError, TypeError, ValueError) as exc:
            raise StoreError(f"store {self.display!r} has a malformed meta.json (no plan)") from exc

    def stored_block_size(self) -> int | None:
        return self.stored()[1]

    def begin(self, identity: RunIdentity, plan: Plan, *, resume: bool) -> None:
        """Claim the store for this run (a new store) or check that it holds this run (a resume).

        Nothing is written on a resume: an extension to a larger m updates ``meta.json`` only when it
        completes (:meth:`finish`), so the smaller complete estimate stays readable meanwhile.
        """
        self._run = run_fingerprint(identity)
        meta = self._meta()
        if meta is not None:
            if not resume:
                raise StoreError(f"store {self.display!r} already holds a run; pass resume=True (--resume) to "
                                 "continue or extend it, or choose a new URI")
            self._check_same_run(meta, identity, plan)
            self._clean_stale_tmp()
            return
        self._check_empty()
        self._create(identity, plan)

    def _check_empty(self) -> None:
        """A new store goes only where nothing is: never adopt shards, never overwrite a user's files."""
        with self._io("list the store location"):
            info = self.fs.get_file_info(self.root)
            if info.type == pafs.FileType.NotFound:
                return
            if info.type != pafs.FileType.Directory:
                raise StoreError(f"store {self.display!r} is a file; a store is a directory")
            entries = self.fs.get_file_info(pafs.FileSelector(self.root, allow_not_found=True))
        if entries:
            names = sorted(e.base_name for e in entries)[:3]
            raise StoreError(f"store {self.display!r} is not a raydp store (no meta.json) but is not empty "
                             f"({', '.join(names)}{', ...' if len(entries) > 3 else ''}); choose a new or empty "
                             "location — raydp never adopts shards it cannot vouch for, nor overwrites other files")

    def _meta_doc(self, identity: RunIdentity, plan: Plan, token: str | None = None) -> dict:
        doc = {"format": FORMAT, "identity": identity.sample_key(), "run": run_fingerprint(identity),
               "plan": plan.to_dict(), "provenance": identity.to_dict(version=False), "version": __version__}
        if token is not None:
            doc["token"] = token
        return doc

    def _create(self, identity: RunIdentity, plan: Plan) -> None:
        token = uuid.uuid4().hex
        doc = self._meta_doc(identity, plan, token)
        raced = StoreError(f"store {self.display!r} was created by another run at the same moment; this one "
                           "stops before any work (use another URI, or resume=True for the same run)")
        if self.local:
            tmp = self._write_tmp("meta.json", json.dumps(doc, indent=1, sort_keys=True).encode())
            try:
                with self._io("create meta.json"):
                    os.link(tmp, self._path("meta.json"))  # atomic create-if-absent
            except StoreError as exc:
                if self.exists("meta.json"):
                    raise raced from None
                raise exc
            finally:
                self._remove_quietly(tmp)
            return
        # no atomic create-if-absent on object stores: write, wait, read back (see the module docstring)
        t0 = time.monotonic()
        if self.exists("meta.json"):
            raise raced
        self.write_json("meta.json", doc)
        gap = time.monotonic() - t0
        if gap > self.create_wait / 2:
            raise StoreError(f"store {self.display!r}: writing meta.json took {gap:.2f} s, too long to be sure no "
                             f"other run created it meanwhile (create_wait={self.create_wait:g} s); raise create_wait")
        time.sleep(self.create_wait)
        if self.read_json("meta.json").get("token") != token:
            raise raced

    def _check_same_run(self, meta: dict, identity: RunIdentity, plan: Plan) -> None:
        if meta.get("format") != FORMAT:
            raise StoreError(f"store {self.display!r} has format {meta.get('format')}, this raydp reads and writes "
                             f"{FORMAT}; compute the estimate again in a new store")
        ident = identity.sample_key()
        stored = meta.get("identity") if isinstance(meta.get("identity"), dict) else {}
        diffs = [f for f in IDENTITY_FIELDS if stored.get(f) != ident.get(f)]
        if diffs:
            detail = "; ".join(f"{f}: {difference(stored[f], ident[f])}" if isinstance(stored.get(f), dict)
                               and isinstance(ident.get(f), dict) and f in ("target", "oracle")
                               else f"{f}: stored {stored.get(f)!r}, asked {ident.get(f)!r}" for f in diffs)
            raise StoreError(f"store {self.display!r} holds a different run ({detail}); use a new store URI")
        try:
            stored_m = int(meta["plan"]["m"])
        except (KeyError, TypeError, ValueError):
            raise StoreError(f"store {self.display!r} has a malformed meta.json (no plan)") from None
        if plan.m < stored_m:
            raise StoreError(
                f"store {self.display!r} holds m={stored_m} pairs; a run with m={plan.m} cannot reuse it. "
                "Use raydp.load_estimate(store, gamma=...) to re-derive Δ̂ from the stored sample"
            )

    def load(self) -> tuple[RunIdentity, Plan]:
        """The stored run's identity and plan, checked; :class:`StoreError` if there is none or it is malformed."""
        meta = self._meta()
        if meta is None:
            raise StoreError(f"no raydp store at {self.display!r} (meta.json not found)")
        fmt = meta.get("format")
        if fmt != FORMAT:
            raise StoreError(f"store {self.display!r} has format {fmt}, this raydp reads {FORMAT}")
        try:  # a hand-edited or foreign meta.json must not surface as a KeyError deep inside
            plan = Plan.from_dict(meta["plan"])
            identity = RunIdentity.from_dict(meta["provenance"], version=meta.get("version", "?"))
        except (KeyError, TypeError, ValueError, OverflowError, AttributeError) as exc:
            raise StoreError(f"store {self.display!r} has a malformed meta.json ({type(exc).__name__}: {exc})") from None
        sizes = {"block_size": identity.block_size, "n": identity.n, "seed": identity.seed,
                 "output_dim": identity.output_dim}
        if (not plan.satisfies_theorem15() or identity.seed < 0
                or min(identity.block_size, identity.n, identity.output_dim) < 1):
            raise StoreError(f"store {self.display!r} holds an invalid run (plan {plan.to_dict()}, {sizes}); "
                             "it was not written by raydp")
        if meta.get("identity") != identity.sample_key() or meta.get("run") != run_fingerprint(identity):
            raise StoreError(f"store {self.display!r}: the provenance in meta.json does not match the run identity "
                             "it was stored with; the store was edited and is not used")
        self._run = run_fingerprint(identity)
        return identity, plan

    def finish(self, identity: RunIdentity, plan: Plan, summary: dict, witnesses: Witnesses | None = None) -> None:
        """Mark the run complete: its witness pairs are written, ``meta.json`` takes this run's plan, then
        ``result.json`` is written."""
        if witnesses is not None and len(witnesses):
            buf = io.BytesIO()
            np.savez(buf, **witnesses.to_arrays())
            self.write_bytes(WITNESSES, buf.getvalue())
        self.write_json("meta.json", self._meta_doc(identity, plan))
        self.write_json("result.json", dict(summary, completed=time.time()))

    def witnesses(self, identity: RunIdentity, sample: np.ndarray) -> Witnesses | None:
        """The witness pairs stored with the run, checked against its G sample; None when the store was
        written before witnesses were kept (or by a run that had none)."""
        if not self.exists(WITNESSES):
            return None
        try:
            with self.fs.open_input_file(self._path(WITNESSES)) as f:
                with np.load(io.BytesIO(f.read()), allow_pickle=False) as arrays:
                    w = Witnesses.from_arrays({k: arrays[k] for k in arrays.files})
        except Exception as exc:
            raise StoreError(f"store {self.display!r}: {WITNESSES} cannot be read ({type(exc).__name__}); "
                             "the store is not used") from None
        pairs = np.asarray(w.pairs, dtype=np.int64)
        bad = None
        if pairs.size == 0 or pairs.min() < 0 or pairs.max() >= sample.size:
            bad = "its pairs are not pairs of the run"
        elif not np.array_equal(np.asarray(w.g), sample[pairs]):
            bad = "its G values differ from the shards'"
        elif w.records is None or w.records.shape[0] != len(w) or w.records.shape[1:2] != (identity.n + 1,):
            bad = "its records are not (n + 1) records per pair"
        if bad is not None:
            raise StoreError(f"store {self.display!r}: {WITNESSES} does not match the stored run ({bad}); "
                             "the store was edited and is not used")
        return w

    def _clean_stale_tmp(self) -> None:
        """Remove temporary files a crashed writer left behind (older than STALE_TMP_SECONDS)."""
        now = time.time()
        for where in ((), ("shards",)):
            with self._io("list temporary files"):
                infos = self.fs.get_file_info(pafs.FileSelector(self._path(*where), allow_not_found=True))
            for info in infos:
                if info.base_name.startswith(".") and info.base_name.endswith(".tmp") and info.mtime is not None \
                        and now - info.mtime.timestamp() > STALE_TMP_SECONDS:
                    log.info("removing a stale temporary file %s", info.base_name)
                    self._remove_quietly(info.path)

    # ---- shards: the sink ------------------------------------------------------------------
    def writer(self) -> ShardWriter:
        return ShardWriter(self)

    def write_shard(self, results: list[BlockResult]) -> str:
        if self._run is None:
            raise StoreError("internal: a shard is written before the store was claimed (begin) or loaded")
        blocks = np.concatenate([np.full(r.g.size, r.index, dtype=np.int64) for r in results])
        pairs = np.concatenate([np.arange(r.start, r.start + r.g.size, dtype=np.int64) for r in results])
        g = np.concatenate([r.g for r in results]).astype(np.float64)
        per_block = {str(r.index): {"pairs": int(r.g.size), "failures": int(r.failures),
                                    "kinds": r.failure_kinds} for r in results}
        meta = {"format": FORMAT, "run": self._run, "blocks": per_block,
                "sha256": _digest(self._run, per_block, blocks, pairs, g)}
        table = pa.table({"block": blocks, "pair": pairs, "g": g})
        table = table.replace_schema_metadata({"raydp": json.dumps(meta)})
        name = f"shard-{results[0].index:010d}-{uuid.uuid4().hex[:12]}.parquet"
        tmp = self._path("shards", "." + name + ".tmp")
        with self._io("write a shard"):
            self.fs.create_dir(self._path("shards"), recursive=True)
            try:
                with self.fs.open_output_stream(tmp) as f:
                    pq.write_table(table, f, write_page_checksum=True)
                self.fs.move(tmp, self._path("shards", name))
            except BaseException:
                self._remove_quietly(tmp)
                raise
        return name

    # ---- shards: the source ----------------------------------------------------------------
    def shard_names(self) -> list[str]:
        with self._io("list the shards"):
            sel = pafs.FileSelector(self._path("shards"), allow_not_found=True)
            infos = self.fs.get_file_info(sel)
        names = [i.base_name for i in infos if i.type == pafs.FileType.File]
        return sorted(n for n in names if n.startswith("shard-") and n.endswith(".parquet"))

    def read_shard(self, name: str) -> tuple[dict, np.ndarray, np.ndarray, np.ndarray]:
        """(per-block meta, block, pair, g) of a verified shard; raises StoreError if damaged.

        Raises FileNotFoundError when the shard is gone (moved away by a concurrent resumer).
        """
        try:
            with self.fs.open_input_file(self._path("shards", name)) as f:
                table = pq.read_table(f, page_checksum_verification=True)
            meta = json.loads(table.schema.metadata[b"raydp"].decode())
            blocks = table.column("block").to_numpy()
            pairs = table.column("pair").to_numpy()
            g = table.column("g").to_numpy()
            run, per_block = meta["run"], meta["blocks"]
        except FileNotFoundError:
            raise
        except Exception as exc:
            raise StoreError(f"shard {name} is damaged ({type(exc).__name__})") from None
        if meta.get("sha256") != _digest(run, per_block, blocks, pairs, g):
            raise StoreError(f"shard {name} fails its SHA-256 check")
        if run != self._run:
            raise _Foreign(f"store {self.display!r}: shard {name} belongs to another run (its run fingerprint "
                           "differs from meta.json's); the store is not used — it holds a mixture")
        return per_block, blocks, pairs, g

    def quarantine(self, name: str) -> None:
        """Move a damaged shard aside (a concurrent resumer may have done it already)."""
        try:
            self.fs.create_dir(self._path("quarantine"), recursive=True)
            try:
                self.fs.move(self._path("shards", name), self._path("quarantine", name))
            except FileNotFoundError:
                return
            except OSError:
                self.fs.delete_file(self._path("shards", name))
        except FileNotFoundError:
            return
        except (OSError, pa.ArrowException) as exc:
            raise StoreError(f"cannot quarantine a damaged shard in store {self.display!r}: "
                             f"{_reason(exc, self.uri)}") from None

    def blocks(self, layout: BlockLayout, *, quarantine: bool = True) -> Iterator[BlockResult]:
        """Every verified, complete block of ``layout`` held here, once each, as a full BlockResult.

        Reads one shard at a time. A shard that cannot be read is skipped (and moved to
        ``quarantine/`` when ``quarantine``); a block past m or a partial block from a smaller m is
        ignored. A shard of another run, invalid G values, failure counts that do not match the +∞
        values, or two shards that disagree on a block raise :class:`StoreError`.
        """
        if self._run is None:
            raise StoreError("internal: the store is read before it was claimed (begin) or loaded")
        seen = np.zeros(layout.count, dtype=bool)
        digest = np.zeros(layout.count, dtype=np.uint64)
        for name in self.shard_names():
            try:
                bmeta, blocks, pairs, g = self.read_shard(name)
            except FileNotFoundError:
                continue  # moved to quarantine by a concurrent resumer
            except _Foreign:
                raise
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
                if not 0 <= b < layout.count or hi - lo != layout.pairs(b):
                    continue  # past m, or a partial block from a smaller m: not part of this layout
                info = bmeta.get(str(b))
                result = _checked_block(self, name, b, info, pairs[lo:hi], g[lo:hi], layout)
                d = _block_digest(result)
                if seen[b]:
                    if digest[b] != d:
                        raise StoreError(f"store {self.display!r}: two shards disagree on block {b}; a store must "
                                         "hold one value per pair — it was written by two different runs or edited")
                    continue
                seen[b], digest[b] = True, d
                yield result


class _Foreign(StoreError):
    """A shard of another run: never data, never quarantined quietly."""


def _checked_block(store: Store, name: str, b: int, info, pairs: np.ndarray, g: np.ndarray,
                   layout: BlockLayout) -> BlockResult:
    bad = None
    if not isinstance(info, dict) or info.get("pairs") != g.size:
        bad = "its per-block record does not match its rows"
    elif pairs[0] != layout.start(b) or np.any(np.diff(pairs) != 1):
        bad = "its pair indices are not the block's"
    elif not np.all((g >= 0) | np.isposinf(g)):
        bad = "it holds G values that are negative or NaN (a G is a norm: >= 0, or +inf for a failed pair)"
    else:
        failures, kinds = info.get("failures"), info.get("kinds")
        if (not isinstance(failures, int) or not isinstance(kinds, dict)
                or failures != int(np.count_nonzero(np.isposinf(g)))
                or sum(v for v in kinds.values() if isinstance(v, int)) != failures):
            bad = "its failure counts do not match its +inf values"
    if bad is not None:
        raise StoreError(f"store {store.display!r}: shard {name}, block {b}: {bad}; the store is not used")
    return BlockResult(index=b, start=int(pairs[0]), g=g, failures=int(info["failures"]),
                       failure_kinds=dict(info["kinds"]))


def _block_digest(r: BlockResult) -> int:
    h = hashlib.blake2b(digest_size=8)
    h.update(np.ascontiguousarray(r.g).tobytes())
    h.update(_canonical([r.failures, r.failure_kinds]))
    return int.from_bytes(h.digest(), "little")


def _digest(run: str, per_block: dict, blocks: np.ndarray, pairs: np.ndarray, g: np.ndarray) -> str:
    h = hashlib.sha256()
    h.update(_canonical({"run": run, "blocks": per_block}))
    for a in (blocks, pairs, g):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()
