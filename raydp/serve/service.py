"""What the service does with a request: build the allow-listed target, find or sample Δ̂, reserve, release.

A release request runs as a *job* on a small thread pool; the HTTP handler waits for it up to the request's
``wait`` seconds and otherwise answers with the job's id (``GET /v1/jobs/{id}``). A job goes through:

1. **public work** — the allow-listed target (or scikit-learn estimator) built from the analyst's JSON, the
   mechanism, the data set's public oracle, and Δ̂: a stored one that fits (same target, oracle, n and
   measurement; re-derived for the asked γ from the stored sample when it can be), else sampled now from the
   oracle alone and stored under ``DIR/stores``. Its errors are public and are shown.
2. **the reservation** (:meth:`raydp.serve.db.Database.reserve`): (ε, δ, γ) against the data set's total and the
   analyst's cap, in one transaction, before anything private is touched. A refusal ends the job.
3. **the private part** — :func:`raydp.release.respond` (the same code as ``raydp.sample_then_respond``): the
   target is loaded and the estimate's pairs replayed in the sandbox, then, at the library's charge point, the
   target runs on the private data. The service's ledger (:class:`ReservationLedger`) is the library's
   :class:`~raydp.ledger.Ledger` interface over the reservation: the library's charge point marks the job
   *charged*. The answer leaves ``respond_after`` seconds after the data was sent, whatever the target did.
4. **settlement** — ``released``; ``failed`` once the charge point was passed (counted: the evaluation may
   have run) with one fixed message whatever the reason; ``cancelled`` (not counted) when it failed before
   any private value was read — its message then says what failed, public things only, and the data set's
   file is named by kind alone.

An analyst's own code (``target: {"code", "source"}``, on a data set whose curator allows it: :meth:`Service.check_code`)
is a :class:`raydp.seal.Submitted`: the bytes are checked as a pickle stream without being unpickled, Δ̂ is
sampled with ``strict`` in sandbox sessions (its first failure ends the job uncharged, :data:`CODE_FAILED`), and
the private part is the same as above under the data set's limits for code.

A scikit-learn request is :class:`raydp.sklearn.PrivateEstimator` with the same ledger; its private values are
read in this process just before the fit, so everything from that point on is counted.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import math
import os
import threading
import time
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

import numpy as np

from ..errors import BudgetError, InvalidArgumentError, RaydpError, TargetError
from ..identity import describe, estimate_fingerprint, measurement, sample_fingerprint
from ..ledger import Ledger, _exact
from . import db as _db

log = logging.getLogger("raydp.serve")

#: What an analyst is told when a release failed after its charge point: one line, whatever the reason.
FAILED = ("the release failed on the private data; why is withheld because it may depend on the data "
          "(the reservation stays counted)")
#: ... and when the data set's file could not be used (its kind, schema or header), before anything was charged.
UNUSABLE = ("the data set's file cannot be used for this release (its format, columns or row count do not fit "
            "the target's records); nothing was charged — the curator can check it")
MECHANISMS = ("laplace", "gaussian", "exponential", "bernstein")
#: ... when an analyst's own code failed on public oracle records while Δ̂ was sampled (nothing private was touched).
CODE_FAILED = ("the submitted code failed on public oracle records while Δ̂ was sampled in the sandbox (it raised, was "
               "stopped at a limit, or answered something other than finite numbers); what it did is withheld; nothing "
               "was charged")
#: The largest submitted code (its pickle bytes) and source text (characters) a release request may carry.
MAX_CODE = 512 << 10
MAX_SOURCE = 256 << 10
#: The sandbox's limits for analysts' own code where the curator gave none (``raydp admin allow-code``): for each
#: session of Δ̂ sampling in one process, and for the private evaluation.
CODE_LIMITS = {"memory": 3 << 30, "cpu_seconds": 300, "processes": 32, "wall_seconds": 60.0}


@dataclass
class Settings:
    """How the service runs (``raydp serve``'s flags)."""

    root: str
    respond_after: float | None = 2.0
    backend: str = "auto"
    address: str | None = None
    workers: int = 8
    seed: int | None = None  # Δ̂ sampled by the service: None = a fresh seed each time (recorded in the store)
    lease: float = 30.0  # seconds this server's heartbeat stays good for (its database row: db.Database.register)


@dataclass
class _Job:
    id: str
    owner: _db.Principal
    reservation: _db.Reservation | None = None
    charged: bool = False  # the library's charge point was passed (or private values were read here)
    data_phase: bool = False  # the data set's file is being opened (schema/header)


class ServiceError(InvalidArgumentError):
    """A request the service refuses before running it (its ``status`` is the HTTP status to answer)."""

    def __init__(self, message: str, status: int = 422):
        super().__init__(message)
        self.status = status


# ---------------------------------------------------------------------------------------------- builders


def _resolve(name: str, what: str):
    if not isinstance(name, str) or ":" not in name:
        raise ServiceError(f"{what} must look like MODULE:ATTRIBUTE, got {name!r}")
    mod, attr = name.split(":", 1)
    try:
        obj = importlib.import_module(mod)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except Exception as exc:  # noqa: BLE001 - the curator's allow-list names something that is not there
        raise ServiceError(f"{what} {name} cannot be imported on the server ({type(exc).__name__})", 500) from None
    return obj


def build_target(spec: dict):
    """``{"name": "module:function", "args": {...} or None}`` -> the target (called with ``args`` when given,
    or when it is a raydp factory), as ``raydp estimate --target`` builds one."""
    obj = _resolve(spec["name"], "target")
    args = spec.get("args")
    if args is not None or spec["name"].startswith("raydp."):
        if not callable(obj):
            raise ServiceError(f"target {spec['name']} is not a callable factory")
        try:
            obj = obj(**(args or {}))
        except RaydpError as exc:
            raise ServiceError(str(exc).splitlines()[0]) from None
        except Exception as exc:  # noqa: BLE001 - public arguments: the message may be shown
            raise ServiceError(f"target {spec['name']}(**args) raised {type(exc).__name__}: {exc}".splitlines()[0]) \
                from None
    if not callable(obj):
        raise ServiceError(f"target {spec['name']} is not callable")
    return obj


def build_mechanism(name: str, args: dict | None, epsilon: float, delta: float):
    from .. import mechanisms

    if name not in MECHANISMS:
        raise ServiceError(f"mechanism must be one of {', '.join(MECHANISMS)}, got {name!r}")
    kwargs = dict(args or {})
    if set(kwargs) & {"epsilon", "delta"}:
        raise ServiceError("give epsilon and delta as the request's own fields, not in mechanism_args")
    kwargs["epsilon"] = epsilon
    if name == "gaussian":
        kwargs["delta"] = delta
        kwargs.setdefault("calibration", "analytic")
    elif delta != 0:
        raise ServiceError(f"delta applies to the gaussian mechanism only; {name} is pure ε-DP (give delta 0)")
    cls = {"laplace": mechanisms.Laplace, "gaussian": mechanisms.Gaussian, "exponential": mechanisms.Exponential,
           "bernstein": mechanisms.Bernstein}[name]
    try:
        return cls(**kwargs)
    except RaydpError as exc:
        raise ServiceError(str(exc).splitlines()[0]) from None
    except TypeError as exc:
        raise ServiceError(f"mechanism_args do not fit the {name} mechanism: {exc}".splitlines()[0]) from None


def build_oracle(spec: dict):
    """A data set's public oracle: ``{"name": <a raydp.oracles function>, "args": {...}}`` or
    ``{"public_file": PATH}`` (bootstrap resampling of a public Parquet/CSV file)."""
    from .. import oracles

    try:
        if "public_file" in spec:
            return oracles.bootstrap(spec["public_file"])
        fn = getattr(oracles, spec["name"], None)
        if spec["name"].startswith("_") or not callable(fn) or spec["name"] in ("as_oracle", "check_records", "rebuild"):
            raise ServiceError(f"no oracle named {spec['name']!r} in raydp.oracles")
        return fn(**(spec.get("args") or {}))
    except ServiceError:
        raise
    except RaydpError as exc:
        raise ServiceError(str(exc).splitlines()[0]) from None
    except TypeError as exc:
        raise ServiceError(f"the oracle's arguments do not fit: {exc}".splitlines()[0]) from None


def build_estimator(spec: dict, is_allowed):
    """``{"class": "module:Class", "params": {...}}`` or ``{"steps": [such, ...]}`` (a pipeline), every class
    on the allow-list (``is_allowed(name)``)."""
    from sklearn.pipeline import make_pipeline

    steps = spec.get("steps") or [{"class": spec.get("class"), "params": spec.get("params") or {}}]
    made = []
    for step in steps:
        name = step.get("class")
        if not isinstance(name, str) or not is_allowed(name):
            raise ServiceError(f"estimator {name!r} is not on the allow-list", 404)
        cls = _resolve(name, "estimator")
        try:
            made.append(cls(**(step.get("params") or {})))
        except Exception as exc:  # noqa: BLE001 - public parameters
            raise ServiceError(f"{name}(**params) raised {type(exc).__name__}: {exc}".splitlines()[0]) from None
    return made[0] if len(made) == 1 else make_pipeline(*made)


# ---------------------------------------------------------------------------------------------- the ledger


class _Charge:
    def __init__(self, seq: int, guarantee):
        self.id = seq
        self.guarantee = guarantee


class ReservationLedger(Ledger):
    """The library's ledger interface over one job's reservation in the database.

    :func:`raydp.release.respond` calls :meth:`charge` right before the target sees the private data: the
    reservation (made before) must cover what it charges, the job is marked charged, and — for a path that
    has no deadline of its own (``quantum``) — the answer is held to the next multiple of ``quantum`` seconds
    after that point.
    """

    def __init__(self, service: "Service", job: _Job, quantum: float | None = None):  # noqa: D107 - no file
        self.service = service
        self.job = job
        self.quantum = quantum
        self.path = f"raydp serve job {job.id}"
        self.epsilon_total = job.reservation.epsilon
        self.delta_total = job.reservation.delta

    @contextlib.contextmanager
    def charge(self, epsilon, delta, gamma, *, mechanism, sensitivity, estimate=None, label=None, calibration=None):
        res = self.job.reservation
        if (_exact(epsilon) > _exact(res.epsilon) or _exact(delta) > _exact(res.delta)
                or float(gamma) > res.gamma * (1 + 1e-12)):
            raise BudgetError(f"the release would charge (ε {epsilon:g}, δ {delta:g}, γ {gamma:g}), more than its "
                              f"reservation (ε {res.epsilon:g}, δ {res.delta:g}, γ {res.gamma:g}); nothing was charged")
        self.job.charged = True
        self.service.progress(self.job.id, "evaluating on the private data")
        t0 = time.monotonic()
        try:
            yield _Charge(res.seq, res.guarantee)
        finally:
            if self.quantum:
                elapsed = time.monotonic() - t0
                time.sleep(max(0.0, math.ceil(elapsed / self.quantum) * self.quantum - elapsed))


# ---------------------------------------------------------------------------------------------- the service


class Service:
    """The releases and precomputations of one ``raydp serve`` process, on its database."""

    def __init__(self, database: _db.Database, settings: Settings):
        self.db = database
        self.settings = settings
        self.root = os.path.realpath(settings.root)
        self.stores = os.path.join(self.root, "stores")
        os.makedirs(self.stores, mode=0o700, exist_ok=True)
        self.pool = ThreadPoolExecutor(max_workers=settings.workers, thread_name_prefix="raydp-job")
        self.futures: dict[str, Future] = {}
        self._lock = threading.Lock()
        # scikit-learn fits one at a time: each collects its UtilityWarnings with warnings.catch_warnings, which
        # is process-wide — two at once could hand one analyst the other's warning
        self._fits = threading.Lock()
        self._cache: dict = {}
        self.live: dict[str, str] = {}
        self.hide()
        self._stopping = threading.Event()
        self._lease = None
        if self.db.instance is not None:  # registered: keep the lease and fail the jobs of servers that are gone
            self._lease = threading.Thread(target=self._keep_lease, name="raydp-lease", daemon=True)
            self._lease.start()

    def _keep_lease(self) -> None:
        """Every third of a lease: renew this server's lease, then fail the unfinished jobs of servers whose lease
        ran out (:meth:`raydp.serve.db.Database.reap`)."""
        while not self._stopping.wait(self.db.lease / 3):
            try:
                self.db.heartbeat()
                failed = self.db.reap()
                if failed:
                    log.warning("failed %d job(s) of a server whose lease ran out (reservations stay counted)",
                                len(failed))
            except Exception as exc:  # noqa: BLE001 - the database is away for a while: try again next time
                log.warning("lease not renewed: %s", type(exc).__name__)

    def progress(self, job_id: str, text: str) -> None:
        """A running job's progress line: kept in memory (it is not state: after a stop the job fails anyway), so a
        release costs no database write for it; :meth:`view` shows it. Another server of a shared database shows
        the job's status and its last progress written with it (``queued``, ``reserved``), not this line."""
        with self._lock:
            self.live[job_id] = text

    def view(self, row: dict) -> dict:
        """A job's row with its live progress while it runs."""
        if row["status"] not in _db.FINAL:
            with self._lock:
                text = self.live.get(row["id"])
            if text is not None:
                row = {**row, "progress": text}
        return row

    def hide(self) -> None:
        """Every sandbox of this process shows DIR, the other servers' store directories and the data sets' files
        empty (:func:`raydp.seal.hide_always`). Read again before every job: on a shared database another server
        may have registered a data set since."""
        from ..seal import hide_always

        stores = [d for d in self.db.store_dirs() if not d.startswith(self.root + os.sep) and os.path.isdir(d)]
        hide_always([self.root, *stores, *[p for p in self.db.dataset_paths() if os.path.exists(p)]])

    def close(self) -> None:
        self._stopping.set()
        self.pool.shutdown(wait=False, cancel_futures=True)

    # ---- cached public objects -------------------------------------------------------------------------
    def _cached(self, key, make):
        with self._lock:
            if key in self._cache:
                return self._cache[key]
        value = make()
        with self._lock:
            return self._cache.setdefault(key, value)

    def target(self, spec: dict):
        return self._cached(("target", _db.canonical(spec)), lambda: build_target(spec))

    def oracle(self, ds: dict):
        return self._cached(("oracle", _db.canonical(ds["oracle"])), lambda: build_oracle(ds["oracle"]))

    def options(self, **changes):
        from ..options import SamplerOptions

        keywords = {"backend": self.settings.backend, "progress": False, "seed": self.settings.seed}
        if self.settings.address is not None:
            keywords["address"] = self.settings.address
        keywords.update(changes)
        return SamplerOptions.of(**keywords)

    # ---- requests ---------------------------------------------------------------------------------------
    def check_target(self, spec: dict) -> dict:
        """The target spec an analyst may use: on the allow-list, with the pinned arguments if it has some."""
        entry = self.db.allowed("target", spec["name"])
        if entry is None:
            raise ServiceError(f"target {spec['name']!r} is not on the allow-list", 404)
        if entry["args"] is not None:
            if spec.get("args") not in (None, entry["args"]):
                raise ServiceError(f"target {spec['name']!r} is allowed with its curator's arguments only "
                                   f"({_db.canonical(entry['args'])}); omit args or give those", 403)
            spec = {"name": spec["name"], "args": entry["args"]}
        return {"name": spec["name"], "args": spec.get("args")}

    def check_code(self, ds: dict, target: dict):
        """An analyst's own code on ``ds``, checked without running it: the data set takes code (the curator's
        ``allow-code``; else 403), the sandbox is there (else 403), ``code`` is base64 of at most :data:`MAX_CODE`
        bytes holding one whole pickle stream (read opcode by opcode, never unpickled). Returns the
        :class:`raydp.seal.Submitted`, with the curator's limits and this server's hidden paths."""
        import base64
        import binascii

        from ..seal import Limits, Submitted, check_pickle, hidden_always, sandbox_status

        entry = self.db.allowed("code", ds["name"])
        if entry is None:
            raise ServiceError(f"the data set {ds['name']!r} does not take analysts' own code (its curator allows it "
                               f"with: raydp admin allow-code {ds['name']})", 403)
        if not sandbox_status()[0]:
            raise ServiceError("analysts' own code runs only in the sandbox, and this server has none", 403)
        text = target.get("code")
        source = target.get("source") or ""
        if not isinstance(text, str) or len(text) > 4 * ((MAX_CODE + 2) // 3):
            raise ServiceError(f"target.code must be base64 of at most {MAX_CODE} bytes")
        if not isinstance(source, str) or len(source) > MAX_SOURCE:
            raise ServiceError(f"target.source must be text of at most {MAX_SOURCE} characters")
        try:
            payload = base64.b64decode(text.encode("ascii"), validate=True)
        except (binascii.Error, ValueError, UnicodeEncodeError):
            raise ServiceError("target.code is not base64 (standard alphabet, with padding)") from None
        if not payload or len(payload) > MAX_CODE:
            raise ServiceError(f"target.code must hold 1 to {MAX_CODE} bytes, it holds {len(payload)}")
        try:
            check_pickle(payload)
        except InvalidArgumentError as exc:
            raise ServiceError(str(exc)) from None
        limits = Limits(**{**CODE_LIMITS, **(entry["args"] or {})})
        self.hide()
        return Submitted(payload, source, limits=limits, hide=hidden_always())

    def dataset_for(self, who: _db.Principal, name: str) -> dict:
        """A data set ``who`` may use (an analyst: one with a cap; the curator: any)."""
        try:
            ds = self.db.dataset(name)
        except _db.NotFound:
            raise ServiceError(f"no data set named {name!r}", 404) from None
        if who.role == "analyst" and self.db.cap(who.id, ds["id"]) is None:
            raise ServiceError(f"no data set named {name!r}", 404)  # the same answer: its existence is not told
        return ds

    def submit_release(self, who: _db.Principal, body: dict) -> tuple[dict, bool]:
        """Check a release request, record it as a job (or find the first one of a retry) and run it. A request
        refused here (an unknown data set or target, arguments the target refuses) is audited as ``reject``."""
        try:
            return self._submit_release(who, body)
        except ServiceError as exc:
            what = (body.get("target") or {}).get("name") or ("submitted code" if "code" in (body.get("target") or {})
                                                              else _db.canonical(body.get("estimator")))
            self.db.note(who.name, "reject", outcome=f"refused ({exc.status})", analyst_id=who.id, target=what,
                         epsilon=_db.amount(body["epsilon"]), delta=_db.amount(body["delta"]),
                         gamma=_db.amount(body["gamma"]),
                         detail={"dataset": body["dataset"], "request_id": body["request_id"], "why": str(exc)})
            raise

    def _submit_release(self, who: _db.Principal, body: dict) -> tuple[dict, bool]:
        ds = self.dataset_for(who, body["dataset"])
        code = None
        if body.get("target") is not None and "code" in body["target"]:
            code = self.check_code(ds, body["target"])
            build_mechanism(body["mechanism"], body.get("mechanism_args"), body["epsilon"], body["delta"])
            spec = {"name": "code", "sha256": code.sha256}
            what = f"code sha256:{code.sha256}"
            # kept: the payload's hash and the source text (the audit row of the request), not the payload itself
            body = {**body, "target": {"code_sha256": code.sha256, "source": code.source}}
        elif body.get("target") is not None:
            spec = self.check_target(body["target"])
            build_mechanism(body["mechanism"], body.get("mechanism_args"), body["epsilon"], body["delta"])
            self.target(spec)  # public: a bad argument is answered now, before anything is recorded
            what = spec["name"]
        else:
            build_estimator(body["estimator"], lambda name: self.db.allowed("estimator", name) is not None)
            spec = body["estimator"]
            what = _db.canonical(spec)
        stored = {k: v for k, v in body.items() if k != "wait"}
        detail = {"target": what, "epsilon": body["epsilon"], "delta": body["delta"], "gamma": body["gamma"],
                  "mechanism": body.get("mechanism"), "dataset": ds["name"]}
        if code is not None:
            detail |= {"code_sha256": code.sha256, "source": code.source}
        row, created = self.db.create_job(who, "release", body["request_id"], stored, ds["id"], detail)
        if created:
            job = _Job(row["id"], who)
            if code is not None:
                self._submit(row["id"], self._run_target, job, ds, body, spec, code)
            else:
                run = self._run_target if body.get("target") is not None else self._run_estimator
                self._submit(row["id"], run, job, ds, body, spec)
        return row, created

    def submit_estimate(self, who: _db.Principal, body: dict) -> dict:
        """The curator's precomputation of a Δ̂ for (target, data set, mechanism, γ)."""
        ds = self.dataset_for(who, body["dataset"])
        spec = self.check_target(body["target"])
        mech = build_mechanism(body["mechanism"], body.get("mechanism_args"), 1.0,
                               1e-6 if body["mechanism"] == "gaussian" else 0.0)
        self.target(spec)
        detail = {"target": spec["name"], "gamma": body["gamma"], "mechanism": body["mechanism"], "dataset": ds["name"]}
        row, _ = self.db.create_job(who, "estimate", None, body, ds["id"], detail)
        self._submit(row["id"], self._run_estimate, _Job(row["id"], who), ds, body, spec, mech)
        return row

    def _submit(self, job_id: str, fn, *args) -> None:
        self.hide()
        fut = self.pool.submit(fn, *args)
        with self._lock:
            self.futures[job_id] = fut
        fut.add_done_callback(lambda _f: self._forget(job_id))

    def _forget(self, job_id: str) -> None:
        with self._lock:
            self.futures.pop(job_id, None)
            self.live.pop(job_id, None)

    def wait(self, job_id: str, seconds: float) -> dict | None:
        """The job after at most ``seconds`` (sooner when it ends)."""
        with self._lock:
            fut = self.futures.get(job_id)
        if fut is not None and seconds > 0:
            with contextlib.suppress(FutureTimeout, Exception):
                fut.result(timeout=seconds)
        return self.db.job(job_id)

    # ---- Δ̂ -----------------------------------------------------------------------------------------------
    def _load(self, path: str, gamma: float, oracle):
        from ..sampler import load_estimate

        return self._cached(("estimate", path, repr(float(gamma))), lambda: load_estimate(path, gamma=gamma,
                                                                                          oracle=oracle))

    def estimate_for(self, job: _Job, spec: dict, target, ds: dict, oracle, mech, gamma: float):
        """A stored Δ̂ that fits, or one sampled now from the public oracle (and stored). Returns (estimate,
        reused, where): where = {"store": id, "how": ...}."""
        from ..release import check_estimate_fits
        from ..sampler import estimate_sensitivity

        key = {"target": spec, "oracle": ds["oracle"], "n": ds["n"], "measure": measurement(describe(mech))}
        rows = self.db.find_estimates(**key)
        rows.sort(key=lambda r: float(r["gamma"]) != float(gamma))  # the γ it was made for first
        for row in rows:
            try:
                est = self._load(row["path"], gamma, oracle)
                check_estimate_fits(est, target, mech, ds["n"], reused=True, replay=True, gamma=gamma)
                return est, True, {"store": row["id"], "how": "precomputed" if float(row["gamma"]) == float(gamma)
                                   else f"re-derived for this γ from a store made for γ = {float(row['gamma']):g}"}
            except RaydpError:
                continue
        self.progress(job.id, "sampling Δ̂ from the public oracle")
        sid = _db.new_id()
        path = os.path.join(self.stores, sid)
        est = estimate_sensitivity(target, oracle, ds["n"], mechanism=mech, gamma=gamma,
                                   options=self.options(store=path, **({"strict": True} if spec.get("name") == "code"
                                                                       else {})))
        prov = est.provenance()
        eid = self.db.add_estimate(job.owner.name, target=spec, oracle=ds["oracle"], n=ds["n"], measure=key["measure"],
                                   gamma=est.gamma, path=path, sensitivity=est.sensitivity, job=job.id,
                                   sample=sample_fingerprint(prov), estimate=estimate_fingerprint(prov, est.sensitivity),
                                   dataset_id=ds["id"])
        return est, False, {"store": eid, "how": "sampled for this request from the public oracle"}

    # ---- the jobs -----------------------------------------------------------------------------------------
    def _run_target(self, job: _Job, ds: dict, body: dict, spec: dict, code=None) -> None:
        """A release of an allow-listed target, or of an analyst's own ``code`` (a :class:`raydp.seal.Submitted`:
        its Δ̂ sampled with ``strict`` — its first failure stops the sampling and the release, uncharged)."""
        from ..release import respond
        from ..seal import close_sessions
        from ..tables import PrivateTable

        try:
            self.progress(job.id, "choosing Δ̂")
            target = self.target(spec) if code is None else code
            mech = build_mechanism(body["mechanism"], body.get("mechanism_args"), body["epsilon"], body["delta"])
            oracle = self.oracle(ds)
            if code is None:
                est, reused, where = self.estimate_for(job, spec, target, ds, oracle, mech, body["gamma"])
            else:
                try:
                    est, reused, where = self.estimate_for(job, spec, target, ds, oracle, mech, body["gamma"])
                except Exception:  # noqa: BLE001 - whatever it was (a pair, the probe, a Ray task): one message
                    log.warning("job %s: the submitted code failed while Δ̂ was sampled", job.id)
                    raise TargetError(CODE_FAILED) from None
                finally:
                    close_sessions(code)  # the sessions of this process: whatever the code left running goes
            prov = est.provenance()
            job.reservation = self.db.reserve(
                job.id, job.owner, ds["id"], epsilon=body["epsilon"], delta=mech.privacy()[1], gamma=est.gamma,
                sensitivity=est.sensitivity, sample=sample_fingerprint(prov),
                estimate=estimate_fingerprint(prov, est.sensitivity), target=_db.canonical(spec),
                detail={"mechanism": describe(mech), "estimate": {**where, "m": est.plan.m, "k": est.plan.k,
                                                                  "seed": str(est.seed), "n": est.n,
                                                                  "oracle": est.oracle, "version": est.version}})
            job.data_phase = True
            data = self._private_data(ds)
            if isinstance(data, PrivateTable):
                data.check_fields(PrivateTable.record_shape(est, oracle))
                if data.rows is not None and data.rows != ds["n"]:
                    raise InvalidArgumentError("rows")
            elif int(np.shape(data)[0]) != ds["n"]:
                raise InvalidArgumentError("rows")
            job.data_phase = False
            self.progress(job.id, "replaying Δ̂'s pairs in the sandbox")
            r = respond(data, target, mech, est, reused=reused, replay=True, gamma=body["gamma"],
                        ledger=ReservationLedger(self, job), respond_after=self.settings.respond_after,
                        limits=None if code is None else code.limits)
            value = r.value.tolist() if hasattr(r.value, "tolist") else r.value
            result = {"value": value, "epsilon": r.epsilon, "delta": r.delta, "gamma": r.gamma,
                      "sensitivity": r.sensitivity, "mechanism": r.mechanism, "statement": r.statement(),
                      "estimate": where, "replay": None if r.replay is None else r.replay.to_dict(),
                      "isolation": r.isolation, "composed": job.reservation.guarantee.to_dict()}
            self.db.settle(job.id, job.owner.name, "released", result=result,
                           detail={"sensitivity": r.sensitivity, "isolation": r.isolation})
        except BaseException as exc:  # noqa: BLE001 - every way out settles the job
            self._failed(job, exc)

    def _run_estimator(self, job: _Job, ds: dict, body: dict, spec: dict) -> None:
        self.progress(job.id, "waiting for the fit before it")
        with self._fits:
            self._fit(job, ds, body, spec)

    def _fit(self, job: _Job, ds: dict, body: dict, spec: dict) -> None:
        from ..sklearn import PrivateEstimator
        from ..sklearn.inputs import is_supervised
        from ..sklearn.utility import UtilityWarning

        try:
            self.progress(job.id, "building the estimator")
            model = build_estimator(spec, lambda name: self.db.allowed("estimator", name) is not None)
            oracle = self.oracle(ds)
            mechanism = spec.get("mechanism")
            if mechanism is None:
                mechanism = "auto" if body["delta"] > 0 else "laplace"
            budget = spec.get("time_budget", "auto")
            job.reservation = self.db.reserve(
                job.id, job.owner, ds["id"], epsilon=body["epsilon"], delta=body["delta"], gamma=body["gamma"],
                sensitivity=None, sample=None, estimate=None, target=_db.canonical(spec),
                detail={"estimator": spec, "mechanism": mechanism, "estimate": {"how": "sampled by the fit"}})
            # From here the private values are read in this process: everything after is counted.
            job.charged = True
            self.progress(job.id, "sampling Δ̂ of the parameters on public data, then the private fit")
            records = self._private_values(ds)
            if records.shape[0] != ds["n"]:
                raise InvalidArgumentError("rows")
            supervised = is_supervised(model)
            X, y = (records[:, :-1], records[:, -1]) if supervised else (records, None)
            est = PrivateEstimator(model, oracle=oracle, epsilon=body["epsilon"], delta=body["delta"],
                                   gamma=body["gamma"], tune=bool(spec.get("tune", False)), mechanism=mechanism,
                                   time_budget=budget, options=self.options(),
                                   ledger=ReservationLedger(self, job, quantum=self.settings.respond_after))
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", UtilityWarning)
                est.fit(X, y)
            r = est.release_
            params = {}
            for path, value in zip(est.released_params_, _split(r.value, est.target_.shapes)):
                params[path] = value
            statement = est.statement()
            if self.settings.respond_after:
                statement += (f"; answered at the next multiple of {self.settings.respond_after:g} s after the private "
                              "fit began")
            result = {"params": params, "value": np.asarray(r.value).tolist(), "epsilon": r.epsilon,
                      "delta": r.delta, "gamma": r.gamma, "sensitivity": r.sensitivity, "mechanism": r.mechanism,
                      "statement": statement, "isolation": r.isolation,
                      "classes": None if getattr(est, "classes_", None) is None else np.asarray(est.classes_).tolist(),
                      "tuned_params": getattr(est, "tuned_params_", None),
                      "warnings": [str(w.message).splitlines()[0] for w in caught
                                   if issubclass(w.category, UtilityWarning)],
                      "composed": job.reservation.guarantee.to_dict()}
            prov = est.estimate_.provenance()
            self.db.settle(job.id, job.owner.name, "released", result=_jsonable(result),
                           detail={"sensitivity": r.sensitivity, "sample": sample_fingerprint(prov),
                                   "estimate": estimate_fingerprint(prov, r.sensitivity), "m": est.estimate_.plan.m,
                                   "k": est.estimate_.plan.k, "isolation": r.isolation})
        except BaseException as exc:  # noqa: BLE001
            self._failed(job, exc)

    def _run_estimate(self, job: _Job, ds: dict, body: dict, spec: dict, mech) -> None:
        from ..sampler import estimate_sensitivity

        try:
            self.progress(job.id, "sampling Δ̂ from the public oracle")
            target, oracle = self.target(spec), self.oracle(ds)
            sid = _db.new_id()
            path = os.path.join(self.stores, sid)
            est = estimate_sensitivity(target, oracle, ds["n"], mechanism=mech, gamma=body["gamma"],
                                       options=self.options(store=path, **({} if body.get("seed") is None
                                                                            else {"seed": body["seed"]})))
            prov = est.provenance()
            eid = self.db.add_estimate(job.owner.name, target=spec, oracle=ds["oracle"], n=ds["n"],
                                       measure=measurement(describe(mech)), gamma=est.gamma, path=path,
                                       sensitivity=est.sensitivity, job=job.id, sample=sample_fingerprint(prov),
                                       estimate=estimate_fingerprint(prov, est.sensitivity), dataset_id=ds["id"])
            self.db.finish_job(job.id, job.owner.name, "done", result={
                "store": eid, "sensitivity": est.sensitivity, "m": est.plan.m, "k": est.plan.k, "gamma": est.gamma,
                "seed": str(est.seed), "failures": est.failures, "seconds": round(est.seconds, 3)})
        except BaseException as exc:  # noqa: BLE001
            msg = str(exc).splitlines()[0] if isinstance(exc, RaydpError) else f"internal error ({type(exc).__name__})"
            log.warning("precompute job %s failed: %s", job.id, type(exc).__name__)
            self.db.finish_job(job.id, job.owner.name, "failed", error=msg)

    def _failed(self, job: _Job, exc: BaseException) -> None:
        """Settle a job that raised: see the module docstring for which message and whether it counts."""
        if isinstance(exc, BudgetError) and job.reservation is None:
            return  # refused: the reservation's transaction recorded it
        public = str(exc).splitlines()[0] if isinstance(exc, RaydpError) and str(exc) else \
            f"internal error ({type(exc).__name__})"
        # Logged by type only: a message after the data was touched could quote it.
        log.warning("job %s: %s (%s)", job.id, type(exc).__name__,
                    "charged" if job.charged else "data file" if job.data_phase else "public")
        if job.reservation is None:
            self.db.finish_job(job.id, job.owner.name, "failed", error=public, detail={"phase": "public"})
        elif job.charged:
            self.db.settle(job.id, job.owner.name, "failed", error=FAILED, detail={"phase": "private"})
        elif job.data_phase:
            self.db.settle(job.id, job.owner.name, "cancelled", error=UNUSABLE, detail={"phase": "data file"})
        else:
            self.db.settle(job.id, job.owner.name, "cancelled", error=public + " (nothing was charged)",
                           detail={"phase": "public"})

    # ---- the private data ------------------------------------------------------------------------------------
    def _private_data(self, ds: dict):
        """What :func:`respond` takes: a :class:`~raydp.tables.PrivateTable` (schema only) or a .npy array."""
        from ..tables import PrivateTable

        if ds["path"].endswith(".npy"):
            return _read_npy(ds["path"])
        return PrivateTable(ds["path"], error=InvalidArgumentError, what="the data set's file")

    def _private_values(self, ds: dict) -> np.ndarray:
        from ..tables import PrivateTable

        data = _read_npy(ds["path"]) if ds["path"].endswith(".npy") else \
            PrivateTable(ds["path"], error=InvalidArgumentError, what="the data set's file").load()
        data = np.asarray(data, dtype=np.float64)
        if not np.all(np.isfinite(data)):
            raise InvalidArgumentError("values")
        return data if data.ndim == 2 else data.reshape(-1, 1)


def _read_npy(path: str) -> np.ndarray:
    from ..tables import open_regular

    with open_regular(path, InvalidArgumentError, "the data set's file") as fh:
        data = np.load(fh, allow_pickle=False)
    if data.dtype.kind not in "biuf" or data.ndim < 1:
        raise InvalidArgumentError("the data set's .npy file is not a numeric array")
    return data


def _split(value, shapes) -> list:
    flat = np.asarray(value, dtype=np.float64).ravel()
    out, at = [], 0
    for shape in shapes:
        size = int(np.prod(shape)) if len(shape) else 1
        out.append(flat[at:at + size].reshape(shape).tolist())
        at += size
    return out


def _jsonable(obj):
    return json.loads(json.dumps(obj, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o)))


__all__ = ["Service", "Settings", "ServiceError", "ReservationLedger", "build_target", "build_mechanism",
           "build_oracle", "build_estimator", "FAILED", "UNUSABLE", "CODE_FAILED", "CODE_LIMITS", "MAX_CODE",
           "MAX_SOURCE"]
