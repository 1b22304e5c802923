"""The service's state: every table and every query of ``raydp serve``, and nothing else (SQLAlchemy Core).

No other module writes SQL; they call the functions of :class:`Database`. The default database is one
SQLite file in the service's directory, served by one process; a PostgreSQL database (a ``postgresql://``
URL, the psycopg 3 driver) is shared by any number of server processes.

**Writes are serialised.** Every write is one transaction that starts by taking the write lock:
``BEGIN IMMEDIATE`` on SQLite (set by the ``begin`` event below: the pysqlite driver's own ``BEGIN`` is
turned off), and on another database ``SELECT ... FOR UPDATE`` of the audit head row, which every write
also updates (:meth:`Database._locked`, the one place that lock is taken). So a budget check and the
reservation that follows it see no other write in between, whatever the number of threads or processes.

**The audit log is the ledger.** Each release request appends rows to the ``audit`` table: ``request``,
then ``reserve`` (its ε, δ, γ, Δ̂ and the fingerprints of Δ̂'s provenance) or ``refuse``, then ``settle``
(released, failed, or cancelled when nothing private was touched). The budget a request is checked
against, and every budget shown to anyone, is computed from these rows — Σε and Σδ over the ``reserve``
rows of a data set (and of one analyst) that were not cancelled, exactly as :mod:`raydp.ledger` does it:
each amount is the shortest decimal that round-trips its float, summed as a :class:`fractions.Fraction`
(so ten releases of ε = 0.1 fit a total of 1.0, and anything past a total is refused); the composed γ
is :mod:`raydp.ledger`'s rule (Σ over G samples of the largest γ), by the ledger's own function.

**The chain.** Every audit row holds the hash of the row before it (``prev``) and its own
(``hash`` = SHA-256 of ``prev`` and the row's canonical JSON); the ``audit_head`` row keeps the count and
the last hash. :meth:`Database.verify` recomputes the chain: an edited row (its hash), an inserted or
deleted one (the next row's ``prev``, the numbering) and deleted last rows (the head) are found. Triggers
refuse an ``UPDATE`` or ``DELETE`` of the audit table (on PostgreSQL a ``TRUNCATE`` too: trigger functions)
from any client of the database. What the chain
cannot stop: someone who can write the database file can drop the triggers and rewrite the chain from
any row on, head included; only a head hash kept elsewhere (``raydp admin audit verify`` prints it; its
``--expect ROWS:HASH`` checks it) shows that.

**Several servers.** Each server process is a row of ``servers`` (:meth:`Database.register`): an id, a
lease in seconds and its last heartbeat on the *database's* clock (one clock for every host), renewed by
:meth:`Database.heartbeat`; each job records the server that runs it. A job not yet final whose server's
lease ran out is failed by whichever server looks next (:meth:`Database.reap`, in one write transaction, so
two servers that look at once fail it once), its reservation still counted. On SQLite, where one process
serves a directory, :meth:`Database.recover` at start fails every unfinished job at once, as after a crash.
Tables, triggers, the genesis row and the curator are made under a PostgreSQL advisory lock
(:meth:`Database.init`): servers that start together on an empty database make them once.

**Tokens.** A token is 32 random bytes from :mod:`secrets`; only its SHA-256 is stored. A plain,
unsalted hash suffices for a value with 256 bits of entropy (nothing to guess, no dictionary to try), and
it makes the lookup one indexed equality: the hash is computed first and looked up whatever the token,
so a missing, a wrong and a revoked token cost the same.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as _dt
import hashlib
import json
import os
import secrets
import socket
from dataclasses import dataclass
from fractions import Fraction

import sqlalchemy as sa

from ..errors import BudgetError, InvalidArgumentError
from ..ledger import Guarantee, _compose, _exact  # the ledger's rules, used here, not copied

SCHEMA = 2  # 2: jobs.server and the servers table (a schema-1 SQLite file is moved on at start)
INIT_LOCK = 0x7261796470  # the PostgreSQL advisory lock key held while init() makes the tables and the curator
GENESIS = "0" * 64
FINAL = ("released", "failed", "refused", "cancelled", "done")  # job statuses that never change again

metadata = sa.MetaData()

principals = sa.Table(
    "principals", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("name", sa.String(200), nullable=False, unique=True),
    sa.Column("role", sa.String(16), nullable=False),  # admin | analyst
    sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
    sa.Column("created", sa.String(40), nullable=False),
    sa.Column("revoked", sa.String(40)),
)
datasets = sa.Table(
    "datasets", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("name", sa.String(200), nullable=False, unique=True),
    sa.Column("path", sa.Text, nullable=False),
    sa.Column("oracle", sa.Text, nullable=False),  # canonical JSON: {"name", "args"} or {"public_file"}
    sa.Column("n", sa.Integer, nullable=False),
    sa.Column("epsilon_total", sa.String(40), nullable=False),  # decimal text (repr of the float)
    sa.Column("delta_total", sa.String(40), nullable=False),
    sa.Column("created", sa.String(40), nullable=False),
)
caps = sa.Table(
    "caps", metadata,
    sa.Column("analyst_id", sa.Integer, sa.ForeignKey("principals.id"), primary_key=True),
    sa.Column("dataset_id", sa.Integer, sa.ForeignKey("datasets.id"), primary_key=True),
    sa.Column("epsilon", sa.String(40), nullable=False),
    sa.Column("delta", sa.String(40), nullable=False),
)
allowed = sa.Table(
    "allowed", metadata,
    sa.Column("kind", sa.String(16), primary_key=True),  # target | estimator | code (analysts' own code on a data set)
    sa.Column("name", sa.String(300), primary_key=True),  # module:attribute (code: the data set's name)
    sa.Column("args", sa.Text),  # a target's pinned JSON arguments, or NULL (the analyst's); code: its sandbox limits
)
estimates = sa.Table(
    "estimates", metadata,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("target", sa.Text, nullable=False),  # canonical JSON of {"name", "args"}
    sa.Column("oracle", sa.Text, nullable=False),  # the data set's oracle, canonical JSON
    sa.Column("n", sa.Integer, nullable=False),
    sa.Column("measure", sa.Text, nullable=False),  # the mechanism's measurement, canonical JSON
    sa.Column("gamma", sa.String(40), nullable=False),
    sa.Column("path", sa.Text, nullable=False),
    sa.Column("sensitivity", sa.String(40), nullable=False),
    sa.Column("created", sa.String(40), nullable=False),
    sa.Index("estimates_key", "target", "oracle", "n", "measure"),
)
jobs = sa.Table(
    "jobs", metadata,
    sa.Column("id", sa.String(40), primary_key=True),  # 128 random bits: not guessable
    sa.Column("owner_id", sa.Integer, nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),  # release | estimate
    sa.Column("request_id", sa.String(200)),
    sa.Column("body_hash", sa.String(64), nullable=False),
    sa.Column("body", sa.Text, nullable=False),
    sa.Column("dataset_id", sa.Integer),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("progress", sa.Text),
    sa.Column("result", sa.Text),
    sa.Column("error", sa.Text),
    sa.Column("reserved", sa.Integer),  # the audit row of its reservation
    sa.Column("created", sa.String(40), nullable=False),
    sa.Column("updated", sa.String(40), nullable=False),
    sa.Column("server", sa.String(40)),  # the servers row of the process that runs it
    sa.UniqueConstraint("owner_id", "request_id", name="one_answer_per_request_id"),
)
servers = sa.Table(
    "servers", metadata,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("host", sa.String(200), nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("started", sa.String(40), nullable=False),
    sa.Column("lease", sa.Float, nullable=False),  # seconds its heartbeat stays good for
    sa.Column("beat", sa.Float, nullable=False),  # its last heartbeat, seconds since the epoch on the database's clock
)
audit = sa.Table(
    "audit", metadata,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("time", sa.String(40), nullable=False),
    sa.Column("actor", sa.String(200), nullable=False),
    sa.Column("action", sa.String(40), nullable=False),
    sa.Column("dataset_id", sa.Integer),
    sa.Column("analyst_id", sa.Integer),
    sa.Column("job", sa.String(40)),
    sa.Column("target", sa.Text),
    sa.Column("epsilon", sa.String(40)),
    sa.Column("delta", sa.String(40)),
    sa.Column("gamma", sa.String(40)),
    sa.Column("sensitivity", sa.String(40)),
    sa.Column("sample", sa.String(64)),
    sa.Column("estimate", sa.String(64)),
    sa.Column("outcome", sa.Text),
    sa.Column("detail", sa.Text),
    sa.Column("prev", sa.String(64), nullable=False),
    sa.Column("hash", sa.String(64), nullable=False),
    sa.Index("audit_budget", "dataset_id", "action"),
    sa.Index("audit_job", "job"),
)
audit_head = sa.Table(
    "audit_head", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("rows", sa.Integer, nullable=False),
    sa.Column("hash", sa.String(64), nullable=False),
)
meta = sa.Table(
    "meta", metadata,
    sa.Column("key", sa.String(40), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)

_AUDIT_FIELDS = [c.name for c in audit.columns if c.name != "hash"]
_TRIGGERS = [  # the audit table is append-only for every client of the database (an owner can drop these)
    "CREATE TRIGGER IF NOT EXISTS audit_no_update BEFORE UPDATE ON audit "
    "BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END",
    "CREATE TRIGGER IF NOT EXISTS audit_no_delete BEFORE DELETE ON audit "
    "BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END",
]
_PG_FUNCTION = ("CREATE OR REPLACE FUNCTION raydp_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RAISE EXCEPTION 'the audit log is append-only'; END $$")
_PG_TRIGGERS = {name: f"CREATE TRIGGER {name} BEFORE {what} ON audit FOR EACH {each} "
                      "EXECUTE FUNCTION raydp_audit_append_only()"
                for name, what, each in (("audit_no_update", "UPDATE", "ROW"), ("audit_no_delete", "DELETE", "ROW"),
                                         ("audit_no_truncate", "TRUNCATE", "STATEMENT"))}


def database_url(url: str) -> str:
    """The SQLAlchemy URL of a database given as ``sqlite:///FILE`` or ``postgresql://USER@HOST:PORT/DB``
    (driven by psycopg 3: ``postgresql+psycopg://``)."""
    for scheme in ("postgresql://", "postgres://"):
        if url.startswith(scheme):
            return "postgresql+psycopg://" + url[len(scheme):]
    return url


def masked(url: str) -> str:
    """``url`` with its password, if it has one, shown as ``***`` (what a server prints of its database)."""
    try:
        return sa.engine.make_url(database_url(url)).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - not a URL SQLAlchemy reads: nothing of it is printed
        return "(a database URL SQLAlchemy cannot read)"


class Conflict(InvalidArgumentError):
    """A request id used before with another body, or a name that exists."""


class NotFound(InvalidArgumentError):
    """No such data set, analyst, target, estimator or job (for this caller)."""


@dataclass(frozen=True)
class Principal:
    """Who a token belongs to."""

    id: int
    name: str
    role: str  # admin | analyst


@dataclass(frozen=True)
class Reservation:
    """A reservation that is in the audit log (status ``reserved`` until settled)."""

    seq: int
    epsilon: float
    delta: float
    gamma: float
    guarantee: Guarantee  # the data set's composed guarantee with this reservation counted


# ---------------------------------------------------------------------------------------------- helpers


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def amount(x) -> str:
    """An ε, δ, γ or Δ̂ as stored: the shortest decimal that round-trips the float (the ledger's rule)."""
    return repr(float(x))


def canonical(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def new_token() -> str:
    """32 random bytes from :mod:`secrets`, URL-safe base64 (43 characters)."""
    return base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode()


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def new_id() -> str:
    """A job or store id: 128 random bits."""
    return secrets.token_urlsafe(16)


def row_hash(prev: str, row: dict) -> str:
    """SHA-256 of the previous hash and the row's canonical JSON (every column but ``hash``)."""
    body = canonical({k: row.get(k) for k in _AUDIT_FIELDS})
    return hashlib.sha256(prev.encode() + b"\n" + body.encode()).hexdigest()


def _sums(rows) -> tuple[Fraction, Fraction]:
    return (sum((_exact(float(r["epsilon"])) for r in rows), Fraction(0)),
            sum((_exact(float(r["delta"])) for r in rows), Fraction(0)))


def _entries(rows) -> list[dict]:
    """Counted reservations as ledger entries (the shape :func:`raydp.ledger._compose` reads)."""
    return [{"id": r["seq"], "status": "reserved", "epsilon": float(r["epsilon"]), "delta": float(r["delta"]),
             "gamma": float(r["gamma"]), "sample": r["sample"], "estimate": r["estimate"]} for r in rows]


# ---------------------------------------------------------------------------------------------- the database


class Database:
    """The service's database at ``url`` (``sqlite:///DIR/raydp.db`` by default). Thread-safe."""

    def __init__(self, url: str):
        url = database_url(url)
        self.url = url
        self.sqlite = url.startswith("sqlite")
        self.instance: str | None = None  # this process's servers row, once registered
        self.lease = 0.0
        if self.sqlite:
            self.engine = sa.create_engine(url, connect_args={"timeout": 60, "check_same_thread": False},
                                           pool_size=16, max_overflow=32)
            sa.event.listen(self.engine, "connect", _sqlite_connect)
            sa.event.listen(self.engine, "begin", _sqlite_begin)
        else:
            self.engine = sa.create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)

    # ---- transactions ----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _write(self):
        """One write transaction holding the write lock from its first statement (module docstring)."""
        with self.engine.connect() as c:
            c = c.execution_options(raydp_write=True)
            with c.begin():
                head = self._locked(c)
                yield c, head

    def _locked(self, c) -> dict:
        """The audit head, locked: ``BEGIN IMMEDIATE`` holds SQLite's write lock already; elsewhere this
        ``SELECT ... FOR UPDATE`` of the one head row serialises every write (each appends to the log)."""
        row = c.execute(sa.select(audit_head).where(audit_head.c.id == 1).with_for_update()).mappings().first()
        if row is None:
            return {"rows": 0, "hash": GENESIS, "missing": True}
        return dict(row)

    @contextlib.contextmanager
    def _read(self):
        with self.engine.connect() as c:
            with c.begin():
                yield c

    def _append(self, c, head: dict, **row) -> int:
        """Append one audit row (in the caller's write transaction) and move the head."""
        seq = head["rows"] + 1
        row = {k: row.get(k) for k in _AUDIT_FIELDS if k not in ("seq", "prev", "time")} | {
            "seq": seq, "prev": head["hash"], "time": row.get("time") or now()}
        row["hash"] = row_hash(head["hash"], row)
        c.execute(sa.insert(audit).values(**row))
        c.execute(sa.update(audit_head).where(audit_head.c.id == 1).values(rows=seq, hash=row["hash"]))
        head.update(rows=seq, hash=row["hash"])
        return seq

    # ---- set-up ----------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _init_lock(self):
        """PostgreSQL: a session advisory lock (:data:`INIT_LOCK`) held while :meth:`init` runs. SQLite: nothing
        (its first write's ``BEGIN IMMEDIATE`` serialises starts on one file)."""
        if self.sqlite:
            yield
            return
        with self.engine.connect() as c:
            c.exec_driver_sql(f"SELECT pg_advisory_lock({INIT_LOCK})")
            c.commit()
            try:
                yield
            finally:
                c.exec_driver_sql(f"SELECT pg_advisory_unlock({INIT_LOCK})")
                c.commit()

    def _triggers(self, c) -> list[str]:
        """The statements that make the append-only triggers that are missing."""
        if self.sqlite:
            return _TRIGGERS
        have = set(c.exec_driver_sql("SELECT tgname FROM pg_trigger WHERE tgrelid = 'audit'::regclass").scalars())
        return [_PG_FUNCTION] + [sql for name, sql in _PG_TRIGGERS.items() if name not in have]

    def init(self, admin_name: str = "curator") -> str | None:
        """Create the tables (once) and, on the first start, the curator's token: returned once, stored hashed.
        On PostgreSQL under an advisory lock: of servers that start at once on an empty database, one makes the
        tables, the genesis row and the curator; the others find them (and return None)."""
        with self._init_lock():
            return self._init(admin_name)

    def _init(self, admin_name: str) -> str | None:
        metadata.create_all(self.engine)
        with self.engine.connect() as c:
            with c.begin():
                for t in self._triggers(c):
                    c.exec_driver_sql(t)
        with self._write() as (c, head):
            if head.pop("missing", False):
                c.execute(sa.insert(audit_head).values(id=1, rows=0, hash=GENESIS))
                c.execute(sa.insert(meta).values(key="schema", value=str(SCHEMA)))
                c.execute(sa.insert(meta).values(key="created", value=now()))
            version = c.execute(sa.select(meta.c.value).where(meta.c.key == "schema")).scalar()
            if version == "1":  # schema 1 -> 2: a job records its server (the servers table is new: made above)
                c.exec_driver_sql("ALTER TABLE jobs ADD COLUMN server VARCHAR(40)")
                c.execute(sa.update(meta).where(meta.c.key == "schema").values(value=str(SCHEMA)))
                version = str(SCHEMA)
            if version != str(SCHEMA):
                raise InvalidArgumentError(f"the database has schema {version}, this raydp reads {SCHEMA}")
            if c.execute(sa.select(principals.c.id).where(principals.c.role == "admin")).first() is not None:
                return None
            token = new_token()
            c.execute(sa.insert(principals).values(name=admin_name, role="admin", token_hash=token_hash(token),
                                                   created=now()))
            self._append(c, head, actor=admin_name, action="create curator", outcome="ok")
            return token

    def integrity(self) -> str:
        """SQLite's ``PRAGMA integrity_check``; on PostgreSQL, that the audit table's append-only triggers are
        there and enabled. ``ok`` when intact, else what is wrong."""
        if not self.sqlite:
            with self._read() as c:
                have = dict(c.exec_driver_sql("SELECT tgname, tgenabled FROM pg_trigger "
                                              "WHERE tgrelid = 'audit'::regclass").all())
            problems = [f"the trigger {name} is {'missing' if name not in have else 'disabled'}"
                        for name in _PG_TRIGGERS if have.get(name, "D") == "D"]
            return "; ".join(problems) or "ok"
        with self.engine.connect() as c:
            return str(c.exec_driver_sql("PRAGMA integrity_check").scalar())

    # ---- principals ------------------------------------------------------------------------------------
    def principal(self, token: str) -> Principal | None:
        """The holder of ``token``, or None (missing, wrong or revoked alike: hashed first, one lookup)."""
        h = token_hash(token or "")
        with self._read() as c:
            row = c.execute(sa.select(principals.c.id, principals.c.name, principals.c.role)
                            .where(principals.c.token_hash == h, principals.c.revoked.is_(None))).first()
        return None if row is None else Principal(id=row.id, name=row.name, role=row.role)

    def add_analyst(self, actor: str, name: str) -> str:
        token = new_token()
        with self._write() as (c, head):
            if c.execute(sa.select(principals.c.id).where(principals.c.name == name)).first() is not None:
                raise Conflict(f"a principal named {name!r} exists; choose another name")
            c.execute(sa.insert(principals).values(name=name, role="analyst", token_hash=token_hash(token),
                                                   created=now()))
            self._append(c, head, actor=actor, action="add analyst", outcome="ok", detail=canonical({"name": name}))
        return token

    def revoke(self, actor: str, name: str) -> None:
        with self._write() as (c, head):
            row = c.execute(sa.select(principals).where(principals.c.name == name)).mappings().first()
            if row is None or row["role"] != "analyst":
                raise NotFound(f"no analyst named {name!r}")
            c.execute(sa.update(principals).where(principals.c.id == row["id"]).values(revoked=now()))
            self._append(c, head, actor=actor, action="revoke", analyst_id=row["id"], outcome="ok",
                         detail=canonical({"name": name}))

    def _analyst(self, c, name: str) -> dict:
        row = c.execute(sa.select(principals).where(principals.c.name == name,
                                                    principals.c.role == "analyst")).mappings().first()
        if row is None:
            raise NotFound(f"no analyst named {name!r}")
        return dict(row)

    # ---- data sets, caps, allow-lists ---------------------------------------------------------------------
    def add_dataset(self, actor: str, name: str, path: str, oracle: dict, n: int, epsilon_total: float,
                    delta_total: float) -> int:
        with self._write() as (c, head):
            if c.execute(sa.select(datasets.c.id).where(datasets.c.name == name)).first() is not None:
                raise Conflict(f"a data set named {name!r} exists; a data set's totals are fixed when it is "
                               "registered (register another name)")
            did = c.execute(sa.insert(datasets).values(
                name=name, path=path, oracle=canonical(oracle), n=n, epsilon_total=amount(epsilon_total),
                delta_total=amount(delta_total), created=now())).inserted_primary_key[0]
            self._append(c, head, actor=actor, action="add data set", dataset_id=did, outcome="ok",
                         epsilon=amount(epsilon_total), delta=amount(delta_total),
                         detail=canonical({"name": name, "oracle": oracle, "n": n}))
        return did

    def dataset(self, name: str) -> dict:
        with self._read() as c:
            row = c.execute(sa.select(datasets).where(datasets.c.name == name)).mappings().first()
        if row is None:
            raise NotFound(f"no data set named {name!r}")
        return _dataset(row)

    def dataset_name(self, dataset_id: int) -> str | None:
        with self._read() as c:
            return c.execute(sa.select(datasets.c.name).where(datasets.c.id == dataset_id)).scalar()

    def dataset_paths(self) -> list[str]:
        with self._read() as c:
            return [r[0] for r in c.execute(sa.select(datasets.c.path).order_by(datasets.c.id))]

    def store_dirs(self) -> list[str]:
        """The directories the stored Δ̂s are in (each server's ``DIR/stores``), in a stable order."""
        with self._read() as c:
            paths = [r[0] for r in c.execute(sa.select(estimates.c.path).order_by(estimates.c.created))]
        return list(dict.fromkeys(os.path.dirname(p) for p in paths))

    def set_cap(self, actor: str, analyst: str, dataset: str, epsilon: float, delta: float) -> None:
        with self._write() as (c, head):
            a = self._analyst(c, analyst)
            d = c.execute(sa.select(datasets.c.id).where(datasets.c.name == dataset)).first()
            if d is None:
                raise NotFound(f"no data set named {dataset!r}")
            values = {"epsilon": amount(epsilon), "delta": amount(delta)}
            done = c.execute(sa.update(caps).where(caps.c.analyst_id == a["id"], caps.c.dataset_id == d.id)
                             .values(**values))
            if done.rowcount == 0:
                c.execute(sa.insert(caps).values(analyst_id=a["id"], dataset_id=d.id, **values))
            self._append(c, head, actor=actor, action="set cap", analyst_id=a["id"], dataset_id=d.id, outcome="ok",
                         epsilon=values["epsilon"], delta=values["delta"])

    def cap(self, analyst_id: int, dataset_id: int) -> dict | None:
        with self._read() as c:
            row = c.execute(sa.select(caps).where(caps.c.analyst_id == analyst_id,
                                                  caps.c.dataset_id == dataset_id)).mappings().first()
        return None if row is None else dict(row)

    def allow(self, actor: str, kind: str, name: str, args: dict | None) -> None:
        with self._write() as (c, head):
            pinned = None if args is None else canonical(args)
            done = c.execute(sa.update(allowed).where(allowed.c.kind == kind, allowed.c.name == name)
                             .values(args=pinned))
            if done.rowcount == 0:
                c.execute(sa.insert(allowed).values(kind=kind, name=name, args=pinned))
            self._append(c, head, actor=actor, action=f"allow {kind}", target=name, outcome="ok", detail=pinned)

    def disallow(self, actor: str, kind: str, name: str) -> None:
        """Take ``name`` off the allow-list of ``kind`` (kind ``code``: the data set ``name`` takes no analyst's own
        code). Audited."""
        with self._write() as (c, head):
            done = c.execute(sa.delete(allowed).where(allowed.c.kind == kind, allowed.c.name == name))
            self._append(c, head, actor=actor, action=f"disallow {kind}", target=name,
                         outcome="ok" if done.rowcount else "was not allowed")

    def allowed(self, kind: str, name: str) -> dict | None:
        """The allow-list entry (``{"args": pinned or None}``), or None when ``name`` is not allowed."""
        with self._read() as c:
            row = c.execute(sa.select(allowed).where(allowed.c.kind == kind, allowed.c.name == name)).first()
        if row is None:
            return None
        return {"args": None if row.args is None else json.loads(row.args)}

    # ---- stored estimates ---------------------------------------------------------------------------------
    def add_estimate(self, actor: str, *, target: dict, oracle: dict, n: int, measure: dict, gamma: float,
                     path: str, sensitivity: float, job: str | None, sample: str, estimate: str,
                     dataset_id: int | None) -> str:
        eid = new_id()
        with self._write() as (c, head):
            c.execute(sa.insert(estimates).values(
                id=eid, target=canonical(target), oracle=canonical(oracle), n=n, measure=canonical(measure),
                gamma=amount(gamma), path=path, sensitivity=amount(sensitivity), created=now()))
            self._append(c, head, actor=actor, action="store estimate", job=job, dataset_id=dataset_id,
                         target=canonical(target), gamma=amount(gamma), sensitivity=amount(sensitivity),
                         sample=sample, estimate=estimate, outcome="ok",
                         detail=canonical({"store": eid, "measure": measure, "n": n}))
        return eid

    def find_estimates(self, *, target: dict, oracle: dict, n: int, measure: dict) -> list[dict]:
        """Stored Δ̂s made for this target, oracle, n and measurement, newest first."""
        with self._read() as c:
            rows = c.execute(sa.select(estimates).where(
                estimates.c.target == canonical(target), estimates.c.oracle == canonical(oracle),
                estimates.c.n == n, estimates.c.measure == canonical(measure))
                .order_by(estimates.c.created.desc())).mappings().all()
        return [dict(r) for r in rows]

    # ---- jobs ------------------------------------------------------------------------------------------
    def create_job(self, owner: Principal, kind: str, request_id: str | None, body: dict,
                   dataset_id: int | None, detail: dict) -> tuple[dict, bool]:
        """A new job, or — for a request id this caller used before with the same body — the first one
        (``created`` False). The same request id with another body: :class:`Conflict`. Audited."""
        text = canonical(body)
        digest = hashlib.sha256(text.encode()).hexdigest()
        conflict = False
        with self._write() as (c, head):  # nothing raised inside: the audit row of a refusal must commit
            if request_id is not None:
                old = c.execute(sa.select(jobs).where(jobs.c.owner_id == owner.id,
                                                      jobs.c.request_id == request_id)).mappings().first()
                if old is not None:
                    conflict = old["body_hash"] != digest
                    self._append(c, head, actor=owner.name, action="retry", job=old["id"],
                                 dataset_id=old["dataset_id"], analyst_id=owner.id if owner.role == "analyst" else None,
                                 outcome="conflict: another body" if conflict else
                                 "answered with the first job; nothing charged")
            if request_id is None or old is None:
                jid, stamp = new_id(), now()
                row = {"id": jid, "owner_id": owner.id, "kind": kind, "request_id": request_id, "body_hash": digest,
                       "body": text, "dataset_id": dataset_id, "status": "queued", "progress": "queued",
                       "created": stamp, "updated": stamp, "server": self.instance}
                c.execute(sa.insert(jobs).values(**row))
                self._append(c, head, actor=owner.name, action="request", job=jid, dataset_id=dataset_id,
                             analyst_id=owner.id if owner.role == "analyst" else None,
                             target=detail.get("target"), epsilon=_opt(detail.get("epsilon")),
                             delta=_opt(detail.get("delta")), gamma=_opt(detail.get("gamma")), outcome="accepted",
                             detail=canonical({k: v for k, v in detail.items()
                                               if k not in ("target", "epsilon", "delta", "gamma")}))
        if conflict:
            raise Conflict(f"request_id {request_id!r} was used before with another body; a retry must repeat the "
                           "first request exactly (use a new request_id for a new request)")
        if request_id is not None and old is not None:
            return dict(old), False
        return row, True

    def note(self, actor: str, action: str, *, outcome: str, analyst_id: int | None = None, detail: dict | None = None,
             **fields) -> int:
        """One audit row on its own (a request refused before it became a job, ...)."""
        with self._write() as (c, head):
            return self._append(c, head, actor=actor, action=action, outcome=outcome, analyst_id=analyst_id,
                                detail=None if detail is None else canonical(detail), **fields)

    def job(self, job_id: str) -> dict | None:
        with self._read() as c:
            row = c.execute(sa.select(jobs).where(jobs.c.id == job_id)).mappings().first()
        return None if row is None else dict(row)

    def jobs_of(self, owner_id: int | None = None, limit: int = 100) -> list[dict]:
        q = sa.select(jobs.c.id, jobs.c.owner_id, jobs.c.kind, jobs.c.request_id, jobs.c.dataset_id, jobs.c.status,
                      jobs.c.progress, jobs.c.created, jobs.c.updated).order_by(jobs.c.created.desc()).limit(limit)
        if owner_id is not None:
            q = q.where(jobs.c.owner_id == owner_id)
        with self._read() as c:
            return [dict(r) for r in c.execute(q).mappings()]

    def finish_job(self, job_id: str, actor: str, status: str, *, result: dict | None = None,
                   error: str | None = None, action: str = "finish", detail: dict | None = None) -> None:
        """A job that never reserved anything ends (precompute jobs, refusals before a reservation)."""
        with self._write() as (c, head):
            c.execute(sa.update(jobs).where(jobs.c.id == job_id).values(
                status=status, progress=status, result=None if result is None else canonical(result), error=error,
                updated=now()))
            row = c.execute(sa.select(jobs.c.dataset_id, jobs.c.owner_id).where(jobs.c.id == job_id)).first()
            self._append(c, head, actor=actor, action=action, job=job_id, dataset_id=row.dataset_id if row else None,
                         outcome=status, detail=None if detail is None else canonical(detail))

    # ---- the budget -------------------------------------------------------------------------------------
    def _counted(self, c, dataset_id: int):
        """The data set's reservations that count: every ``reserve`` row whose job was not cancelled."""
        s = audit.alias("s")
        cancelled = sa.exists().where(s.c.action == "settle", s.c.job == audit.c.job, s.c.outcome == "cancelled")
        q = (sa.select(audit.c.seq, audit.c.analyst_id, audit.c.epsilon, audit.c.delta, audit.c.gamma,
                       audit.c.sample, audit.c.estimate)
             .where(audit.c.action == "reserve", audit.c.dataset_id == dataset_id, ~cancelled))
        return [dict(r) for r in c.execute(q).mappings()]

    def reserve(self, job_id: str, analyst: Principal, dataset_id: int, *, epsilon: float, delta: float, gamma: float,
                sensitivity: float | None, sample: str | None, estimate: str | None, target: str,
                detail: dict) -> Reservation:
        """Reserve (ε, δ, γ) for a job, or raise :class:`BudgetError` (audited as ``refuse``, job ``refused``).

        One write transaction: the data set's total and the analyst's cap are checked against exact sums of
        the audit's counted reservations, then the ``reserve`` row is appended. Nothing else writes between.
        """
        eps, dlt = _exact(epsilon), _exact(delta)
        with self._write() as (c, head):
            status = c.execute(sa.select(jobs.c.status).where(jobs.c.id == job_id)).scalar()
            if status in FINAL:  # ended meanwhile (its server's lease ran out and another server failed it)
                raise Conflict(f"job {job_id} already ended ({status}); nothing was reserved")
            ds = c.execute(sa.select(datasets).where(datasets.c.id == dataset_id)).mappings().one()
            cap = c.execute(sa.select(caps).where(caps.c.analyst_id == analyst.id,
                                                  caps.c.dataset_id == dataset_id)).mappings().first()
            rows = self._counted(c, dataset_id)
            spent = _sums(rows)
            mine = _sums([r for r in rows if r["analyst_id"] == analyst.id])
            problems = []
            if spent[0] + eps > _exact(float(ds["epsilon_total"])) or spent[1] + dlt > _exact(float(ds["delta_total"])):
                problems.append(f"the data set's total (ε {float(ds['epsilon_total']):g}, δ {float(ds['delta_total']):g}; "
                                f"spent ε {float(spent[0]):g}, δ {float(spent[1]):g})")
            if cap is None:
                problems.append("your cap on this data set (none set)")
            elif mine[0] + eps > _exact(float(cap["epsilon"])) or mine[1] + dlt > _exact(float(cap["delta"])):
                problems.append(f"your cap (ε {float(cap['epsilon']):g}, δ {float(cap['delta']):g}; spent ε "
                                f"{float(mine[0]):g}, δ {float(mine[1]):g})")
            common = dict(actor=analyst.name, dataset_id=dataset_id, analyst_id=analyst.id, job=job_id, target=target,
                          epsilon=amount(epsilon), delta=amount(delta), gamma=amount(gamma),
                          sensitivity=None if sensitivity is None else amount(sensitivity), sample=sample,
                          estimate=estimate, detail=canonical(detail))
            why = None
            if problems:  # recorded, committed, then raised (nothing raised inside the transaction)
                why = (f"privacy budget exceeded: ε {epsilon:g}, δ {delta:g} would pass " + " and ".join(problems)
                       + "; nothing was released or charged")
                self._append(c, head, action="refuse", outcome="budget", **common)
                c.execute(sa.update(jobs).where(jobs.c.id == job_id).values(
                    status="refused", progress="refused", error=why, updated=now()))
            else:
                seq = self._append(c, head, action="reserve", outcome="reserved", **common)
                c.execute(sa.update(jobs).where(jobs.c.id == job_id).values(
                    status="running", progress="reserved", reserved=seq, updated=now()))
                rows.append({"seq": seq, "analyst_id": analyst.id, "epsilon": amount(epsilon), "delta": amount(delta),
                             "gamma": amount(gamma), "sample": sample, "estimate": estimate})
        if why is not None:
            raise BudgetError(why)
        return Reservation(seq=seq, epsilon=float(epsilon), delta=float(delta), gamma=float(gamma),
                           guarantee=_compose(_entries(rows)))

    def settle(self, job_id: str, actor: str, outcome: str, *, result: dict | None = None, error: str | None = None,
               detail: dict | None = None) -> None:
        """End a reserved job: ``released``, ``failed`` (both stay counted) or ``cancelled`` (nothing private was
        touched: not counted). Idempotent: a job settled once is left alone."""
        if outcome not in ("released", "failed", "cancelled"):
            raise InvalidArgumentError(f"unknown outcome {outcome!r}")
        with self._write() as (c, head):
            row = c.execute(sa.select(jobs).where(jobs.c.id == job_id)).mappings().first()
            if row is None or row["status"] in FINAL:
                return
            c.execute(sa.update(jobs).where(jobs.c.id == job_id).values(
                status=outcome, progress=outcome, result=None if result is None else canonical(result), error=error,
                updated=now()))
            if row["reserved"] is not None:
                self._append(c, head, actor=actor, action="settle", job=job_id, dataset_id=row["dataset_id"],
                             analyst_id=row["owner_id"], outcome=outcome,
                             detail=None if detail is None else canonical(detail))

    def budget(self, dataset_id: int, analyst_id: int | None = None) -> dict:
        """Totals, spent, remaining and the composed guarantee of a data set (and of one analyst's cap on it),
        computed from the audit rows."""
        with self._read() as c:
            ds = c.execute(sa.select(datasets).where(datasets.c.id == dataset_id)).mappings().one()
            rows = self._counted(c, dataset_id)
            cap = None if analyst_id is None else c.execute(
                sa.select(caps).where(caps.c.analyst_id == analyst_id, caps.c.dataset_id == dataset_id)).mappings().first()
        out = {"dataset": _account(rows, ds["epsilon_total"], ds["delta_total"])}
        if analyst_id is not None:
            mine = [r for r in rows if r["analyst_id"] == analyst_id]
            out["analyst"] = (_account(mine, cap["epsilon"], cap["delta"]) if cap is not None else None)
        return out

    def datasets_for(self, analyst_id: int) -> list[dict]:
        """The data sets an analyst has a cap on, with both budgets."""
        with self._read() as c:
            rows = c.execute(sa.select(datasets).join(caps, caps.c.dataset_id == datasets.c.id)
                             .where(caps.c.analyst_id == analyst_id).order_by(datasets.c.name)).mappings().all()
        out = []
        for r in rows:
            d = _dataset(r)
            out.append({"name": d["name"], "n": d["n"], "oracle": d["oracle"], **self.budget(d["id"], analyst_id)})
        return out

    # ---- servers and recovery -----------------------------------------------------------------------------
    def _clock(self, c) -> float:
        """Seconds since the epoch on the database's clock (one clock for every server of a shared database)."""
        sql = ("SELECT (julianday('now') - 2440587.5) * 86400.0" if self.sqlite
               else "SELECT extract(epoch FROM clock_timestamp())")
        return float(c.exec_driver_sql(sql).scalar())

    def register(self, lease: float) -> str:
        """This process as a server of the database, its lease ``lease`` seconds long: the jobs it creates
        carry the id returned; :meth:`heartbeat` renews the lease."""
        if not (lease > 0):
            raise InvalidArgumentError(f"a server's lease must be > 0 seconds, got {lease!r}")
        self.instance, self.lease = new_id(), float(lease)
        self.heartbeat()
        return self.instance

    def heartbeat(self) -> None:
        """Renew this server's lease. A row removed meanwhile (the lease ran out and another server failed its
        jobs) is made again: the jobs that were failed stay failed."""
        with self.engine.connect() as c:
            c = c.execution_options(raydp_write=True)
            with c.begin():
                clock = self._clock(c)
                done = c.execute(sa.update(servers).where(servers.c.id == self.instance).values(beat=clock))
                if done.rowcount == 0:
                    c.execute(sa.insert(servers).values(id=self.instance, host=socket.gethostname()[:200],
                                                        pid=os.getpid(), started=now(), lease=self.lease, beat=clock))

    def recover(self) -> list[str]:
        """At a server's start: fail the unfinished jobs of servers that are gone — on SQLite (one process per
        directory) every unfinished job but this process's own, on a shared database those whose server's
        lease ran out (:meth:`reap`). A reservation stays counted (the private evaluation may have run); a job
        that reserved nothing charged nothing. Audited. Returns the failed jobs' ids."""
        return self._reap(everyone=self.sqlite, why="server restarted")

    def reap(self) -> list[str]:
        """Fail the unfinished jobs of every server whose lease ran out, and forget those servers (every server
        calls this now and then). Returns the failed jobs' ids."""
        return self._reap(everyone=False, why="its server stopped")

    def _live(self, c, everyone: bool) -> list[str]:
        """The servers taken as alive: this one and, unless ``everyone`` is to go, those whose lease holds."""
        mine = [self.instance] if self.instance else []
        if everyone:
            return mine
        clock = self._clock(c)
        return list(dict.fromkeys(mine + [r[0] for r in c.execute(
            sa.select(servers.c.id).where(servers.c.beat + servers.c.lease >= clock))]))

    def _gone(self, c, live: list[str]) -> tuple[list[dict], int]:
        """Unfinished jobs whose server is not in ``live`` (or unknown), and how many servers rows are not."""
        q = sa.select(jobs).where(jobs.c.status.notin_(FINAL))
        stale = sa.select(sa.func.count()).select_from(servers)
        if live:
            q = q.where(sa.or_(jobs.c.server.is_(None), jobs.c.server.notin_(live)))
            stale = stale.where(servers.c.id.notin_(live))
        return [dict(r) for r in c.execute(q).mappings()], int(c.execute(stale).scalar())

    def _reap(self, everyone: bool, why: str) -> list[str]:
        with self._read() as c:  # most of the time nothing is gone: no write, no lock
            orphans, stale = self._gone(c, self._live(c, everyone))
        if not orphans and not stale:
            return []
        message = "the server stopped before this job finished"
        with self._write() as (c, head):  # again under the write lock: two servers reaping fail a job once
            live = self._live(c, everyone)
            orphans, _ = self._gone(c, live)
            c.execute(sa.delete(servers).where(servers.c.id.notin_(live)) if live else sa.delete(servers))
            for j in orphans:
                counted = j["reserved"] is not None
                c.execute(sa.update(jobs).where(jobs.c.id == j["id"]).values(
                    status="failed", progress="failed", updated=now(),
                    error=message + ("; its reservation stays counted" if counted else "; nothing was charged")))
                self._append(c, head, actor="raydp serve", action="settle" if counted else "abandon", job=j["id"],
                             dataset_id=j["dataset_id"], analyst_id=j["owner_id"] if counted else None,
                             outcome="failed", detail=canonical({"why": why, "server": j["server"]}))
        return [j["id"] for j in orphans]

    # ---- the audit log ----------------------------------------------------------------------------------
    def audit_rows(self, after: int = 0, limit: int = 1000) -> list[dict]:
        with self._read() as c:
            return [dict(r) for r in c.execute(sa.select(audit).where(audit.c.seq > after)
                                               .order_by(audit.c.seq).limit(limit)).mappings()]

    def verify(self, expect: tuple[int, str] | None = None) -> dict:
        """Recompute the chain. ``problems`` lists each break; ``expect`` = (rows, hash) seen earlier (kept
        outside the database) is checked too: a rewritten history does not have that row any more."""
        problems: list[str] = []
        prev, count, at = GENESIS, 0, {}
        with self._read() as c:
            head = c.execute(sa.select(audit_head).where(audit_head.c.id == 1)).mappings().first()
            for r in c.execute(sa.select(audit).order_by(audit.c.seq)).mappings():
                count += 1
                r = dict(r)
                if r["seq"] != count:
                    problems.append(f"row {r['seq']} is number {count} in the log: a row was deleted or inserted before it")
                if r["prev"] != prev:
                    problems.append(f"row {r['seq']} does not follow the row before it (a row was deleted or "
                                    "inserted there, or that row was rewritten)")
                if row_hash(r["prev"], r) != r["hash"]:
                    problems.append(f"row {r['seq']} was edited: its content does not match its hash")
                prev = r["hash"]
                if expect is not None and r["seq"] == expect[0]:
                    at = r
        if head is None:
            problems.append("the audit head is missing")
        else:
            if head["rows"] != count:
                problems.append(f"the head records {head['rows']} rows and the log has {count}: "
                                + ("the last rows were deleted" if head["rows"] > count else "rows were appended "
                                   "without the head"))
            elif head["hash"] != prev:
                problems.append("the head's hash is not the last row's: the last row was replaced")
        if expect is not None:
            if not at:
                problems.append(f"row {expect[0]}, whose hash was recorded, is not in the log")
            elif at["hash"] != expect[1]:
                problems.append(f"row {expect[0]} is not the one recorded earlier (its hash differs): the log was "
                                "rewritten from there or before")
        return {"ok": not problems, "rows": count, "head": prev, "problems": problems}

    # ---- the curator's view -------------------------------------------------------------------------------
    def overview(self) -> dict:
        with self._read() as c:
            ds = [_dataset(r) for r in c.execute(sa.select(datasets).order_by(datasets.c.name)).mappings()]
            people = [dict(r) for r in c.execute(sa.select(principals.c.id, principals.c.name, principals.c.role,
                                                           principals.c.created, principals.c.revoked)
                                                 .order_by(principals.c.id)).mappings()]
            cap_rows = [dict(r) for r in c.execute(sa.select(caps)).mappings()]
            allow_rows = [dict(r) for r in c.execute(sa.select(allowed).order_by(allowed.c.kind, allowed.c.name))
                          .mappings()]
            est_rows = [dict(r) for r in c.execute(sa.select(estimates).order_by(estimates.c.created)).mappings()]
        names = {p["id"]: p["name"] for p in people}
        dnames = {d["id"]: d["name"] for d in ds}
        for d in ds:
            d.update(self.budget(d["id"]))
        caps_out = []
        for r in cap_rows:
            b = self.budget(r["dataset_id"], r["analyst_id"])["analyst"]
            caps_out.append({"analyst": names.get(r["analyst_id"]), "dataset": dnames.get(r["dataset_id"]), **b})
        return {"datasets": ds, "principals": people, "caps": caps_out,
                "allowed": [{"kind": a["kind"], "name": a["name"],
                             "args": None if a["args"] is None else json.loads(a["args"])} for a in allow_rows],
                "estimates": [{"id": e["id"], "target": json.loads(e["target"]), "oracle": json.loads(e["oracle"]),
                               "n": e["n"], "measure": json.loads(e["measure"]), "gamma": float(e["gamma"]),
                               "sensitivity": float(e["sensitivity"]), "created": e["created"]} for e in est_rows]}

    def spending(self, analyst_id: int | None = None) -> list[dict]:
        """ε and δ spent over time: per analyst (every analyst, or ``analyst_id`` alone), the counted
        reservations in the audit's order, each with the running sums over all of that analyst's data sets
        (exact, as the budgets are; a cancelled reservation is not counted, as in the budgets)."""
        s = audit.alias("s")
        cancelled = sa.exists().where(s.c.action == "settle", s.c.job == audit.c.job, s.c.outcome == "cancelled")
        q = (sa.select(audit.c.seq, audit.c.time, audit.c.analyst_id, audit.c.epsilon, audit.c.delta,
                       principals.c.name.label("analyst"), datasets.c.name.label("dataset"))
             .join(principals, principals.c.id == audit.c.analyst_id)
             .join(datasets, datasets.c.id == audit.c.dataset_id)
             .where(audit.c.action == "reserve", ~cancelled).order_by(audit.c.seq))
        if analyst_id is not None:
            q = q.where(audit.c.analyst_id == analyst_id)
        with self._read() as c:
            rows = [dict(r) for r in c.execute(q).mappings()]
        series: dict[int, dict] = {}
        for r in rows:
            one = series.setdefault(r["analyst_id"], {"analyst": r["analyst"], "points": [],
                                                      "sums": [Fraction(0), Fraction(0)]})
            one["sums"][0] += _exact(float(r["epsilon"]))
            one["sums"][1] += _exact(float(r["delta"]))
            one["points"].append({"seq": r["seq"], "time": r["time"], "dataset": r["dataset"],
                                  "epsilon": float(r["epsilon"]), "delta": float(r["delta"]),
                                  "spent_epsilon": float(one["sums"][0]), "spent_delta": float(one["sums"][1])})
        return [{"analyst": v["analyst"], "points": v["points"]}
                for v in sorted(series.values(), key=lambda v: v["analyst"])]

    def releases(self, owner_id: int | None = None, limit: int = 20) -> list[dict]:
        """The latest release jobs that ended released or failed (both counted), newest first: who, on which
        data set, what was asked, and for a release its value and statement (for a failure its one fixed line).
        Every analyst's, or those of ``owner_id`` alone."""
        q = (sa.select(jobs.c.id, jobs.c.body, jobs.c.status, jobs.c.result, jobs.c.error, jobs.c.created,
                       jobs.c.updated, principals.c.name.label("analyst"), datasets.c.name.label("dataset"))
             .join(principals, principals.c.id == jobs.c.owner_id)
             .join(datasets, datasets.c.id == jobs.c.dataset_id)
             .where(jobs.c.kind == "release", jobs.c.status.in_(("released", "failed")))
             .order_by(jobs.c.updated.desc(), jobs.c.id).limit(limit))
        if owner_id is not None:
            q = q.where(jobs.c.owner_id == owner_id)
        with self._read() as c:
            rows = [dict(r) for r in c.execute(q).mappings()]
        out = []
        for r in rows:
            body = json.loads(r["body"])
            result = None if r["result"] is None else json.loads(r["result"])
            asked = body.get("target") or body.get("estimator") or {}
            out.append({"job": r["id"], "analyst": r["analyst"], "dataset": r["dataset"], "status": r["status"],
                        "request_id": body.get("request_id"),
                        "what": asked.get("name") or asked.get("class") or "pipeline",
                        "args": asked.get("args") if "name" in asked else asked.get("params"),
                        "mechanism": body.get("mechanism") if "name" in asked else asked.get("mechanism"),
                        "epsilon": body.get("epsilon"), "delta": body.get("delta"), "gamma": body.get("gamma"),
                        "value": None if result is None else result.get("value"),
                        "statement": None if result is None else result.get("statement"),
                        "error": r["error"], "created": r["created"], "updated": r["updated"]})
        return out


def _opt(x):
    return None if x is None else amount(x)


def _dataset(row) -> dict:
    d = dict(row)
    d["oracle"] = json.loads(d["oracle"])
    d["epsilon_total"], d["delta_total"] = float(d["epsilon_total"]), float(d["delta_total"])
    return d


def _account(rows, epsilon_total, delta_total) -> dict:
    eps, dlt = _sums(rows)
    te, td = _exact(float(epsilon_total)), _exact(float(delta_total))
    return {"epsilon_total": float(epsilon_total), "delta_total": float(delta_total),
            "spent": {"epsilon": float(eps), "delta": float(dlt)},
            "remaining": {"epsilon": float(te - eps), "delta": float(td - dlt)},
            "guarantee": _compose(_entries(rows)).to_dict()}


def _sqlite_connect(dbapi_connection, _record) -> None:
    dbapi_connection.isolation_level = None  # no implicit BEGIN: the begin event below says which
    cur = dbapi_connection.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=FULL")  # a reservation that was answered is on disk
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=60000")
    cur.close()


def _sqlite_begin(conn) -> None:
    conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("raydp_write") else "BEGIN")
