"""Provenance: a stable, JSON-able description of an oracle, target or mechanism, and of a run.

A stored estimate is refused for a release whose target, oracle or mechanism differs, so the
description must be the same in every process for the same object. Objects may define
``identity() -> dict`` (``{"name": ..., "params": {...}}``) naming everything that changes what they
compute. Anything else — a function, a lambda, a ``functools.partial``, a callable object — is
described by its name *and* a content fingerprint (:mod:`raydp.fingerprint`: code, constants,
closure cells, defaults, partial arguments, instance state), so two functions that compute different
things never share a description. One whose content cannot be read (it holds a lock, an open file,
a compiled function whose code is out of reach) is described with ``"unfingerprintable"`` — not
statically verifiable: a stored or earlier Δ̂ is matched to it only after its witness pairs were
replayed (:func:`check_reusable`, :mod:`raydp.engine.witness`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._version import __version__
from .fingerprint import content_digest, why_not


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return describe(value)


def describe(obj: Any) -> dict:
    """``{"name": str, "params": dict}`` from ``obj.identity()``; else its name and ``"content"`` digest.

    Without ``identity()``: ``{"name": "module:qualname", "params": {}, "content": "<sha256>"}``, or
    ``"content": None`` with ``"unfingerprintable": "<why>"`` when the content cannot be read.
    """
    ident = getattr(obj, "identity", None)
    if callable(ident) and not isinstance(obj, type):
        d = ident()
        return {"name": str(d.get("name")), "params": _jsonable(d.get("params", {}))}
    cls = obj if isinstance(obj, type) else type(obj)
    if callable(obj) and hasattr(obj, "__qualname__"):
        name = f"{getattr(obj, '__module__', '?')}:{obj.__qualname__}"
    else:
        name = f"{cls.__module__}:{cls.__qualname__}"
    return {"name": name, "params": {}, **content_fields(obj)}


def content_fields(obj: Any) -> dict:
    """``{"content": digest}``, or ``{"content": None, "unfingerprintable": why}`` (see :func:`describe`)."""
    digest = content_digest(obj)
    if digest is not None:
        return {"content": digest}
    return {"content": None, "unfingerprintable": why_not(obj) or "its content cannot be read"}


def label(description: dict) -> str:
    """A description in a message: its name, params and (if any) the head of its content digest."""
    text = f"{description.get('name')} {json.dumps(description.get('params', {}), sort_keys=True, default=str)}"
    content = description.get("content")
    return text + (f" (content {content[:12]})" if isinstance(content, str) else "")


def _diff_paths(a: Any, b: Any, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b), key=str):
            out += _diff_paths(a.get(key), b.get(key), f"{path}.{key}" if path else str(key))
        return out
    return [] if a == b else [path or "(value)"]


def difference(stored: dict, given: dict) -> str:
    """``stored`` vs ``given`` descriptions in words: both labels, or (same name) where they differ."""
    if stored.get("name") != given.get("name"):
        return f"{label(stored)}, not {label(given)}"
    paths = [p.replace("params.", "", 1) for p in _diff_paths(stored, given)]
    shown = ", ".join(paths[:4]) + (", ..." if len(paths) > 4 else "")
    if paths == ["content"]:
        return (f"{stored.get('name')} with other code, constants, arguments or state (content "
                f"{str(stored.get('content'))[:12]}, not {str(given.get('content'))[:12]})")
    return f"{stored.get('name')} with other parameters (they differ in: {shown})"


def unfingerprintable(description: Any) -> str | None:
    """Why a description (or anything nested in it) has no content fingerprint; None if it has one."""
    if isinstance(description, dict):
        if "unfingerprintable" in description:
            return str(description["unfingerprintable"])
        values = description.values()
    elif isinstance(description, (list, tuple)):
        values = description
    else:
        return None
    for value in values:
        why = unfingerprintable(value)
        if why is not None:
            return why
    return None


def check_reusable(description: dict, what: str, error: type[Exception], use: str, *, replay: bool = False) -> None:
    """Refuse to match a Δ̂ to a target or oracle that nothing can vouch for.

    A description without a content fingerprint ("not statically verifiable": the walk met an object
    it cannot read) would be the same for another object of the same name that computes something
    else. With ``replay`` the estimate's witness pairs are recomputed before the Δ̂ is used, which
    decides; without it, the reuse is refused. ``use`` says what was attempted.
    """
    why = unfingerprintable(description)
    if why is not None and not replay:
        raise error(
            f"the {what} {description.get('name')} is not statically verifiable ({why}) and replay is off, so "
            f"{use} cannot be matched to it. Leave replay on (its witness pairs are then recomputed), sample and "
            f"release in one call, or give the {what} an identity() method returning "
            "{'name': ..., 'params': {...}} that names everything that changes what it computes"
        )


def fingerprint(obj: Any) -> str:
    """Canonical JSON of ``describe(obj)``; equal strings mean the same configured object."""
    return json.dumps(describe(obj), sort_keys=True)


# Mechanism parameters that do not change how G is measured: an estimate made under one value
# serves releases under any other.
BUDGET_PARAMS = frozenset({"epsilon", "delta", "calibration"})


def measurement(mechanism_identity: dict) -> dict:
    """The part of a mechanism's identity that fixes its norm (name and e.g. lattice, responses)."""
    params = {k: v for k, v in mechanism_identity.get("params", {}).items() if k not in BUDGET_PARAMS}
    return {"name": mechanism_identity.get("name"), "params": params}


# ---------------------------------------------------------------------------------------------------
# The run identity: the one description of what a sampling run computed


@dataclass(frozen=True)
class RunIdentity:
    """What fixes every G value of a sampling run, and what a Δ̂ was computed for.

    One object, several views: :meth:`provenance` (the estimate's, the ledger's fingerprints),
    :meth:`to_dict` (a store's ``meta.json``), :meth:`sample_key` (what a resume or an extension must
    match: the mechanism enters only through the norm it measures in). ``seed`` is an arbitrary-size
    integer, written as a decimal string in JSON.
    """

    n: int
    seed: int
    block_size: int
    mechanism: dict
    norm: str
    target: dict
    oracle: dict
    output_dim: int
    version: str = __version__

    @property
    def measure(self) -> dict:
        """The mechanism's identity without its budget parameters (ε, δ, calibration)."""
        return measurement(self.mechanism)

    def to_dict(self, *, version: bool = True) -> dict:
        d = {"n": self.n, "seed": str(self.seed), "block_size": self.block_size, "mechanism": self.mechanism,
             "norm": self.norm, "target": self.target, "oracle": self.oracle, "output_dim": self.output_dim}
        if version:
            d["version"] = self.version
        return d

    def provenance(self, plan) -> dict:
        """The run identity and its plan: what an estimate was computed for (not its result)."""
        return {"plan": plan.to_dict(), **self.to_dict()}

    def sample_key(self) -> dict:
        """The fields that must match for a stored run to be resumed or extended."""
        return {"n": self.n, "seed": str(self.seed), "block_size": self.block_size, "measure": self.measure,
                "norm": self.norm, "target": self.target, "oracle": self.oracle, "output_dim": self.output_dim}

    @classmethod
    def from_dict(cls, d: dict, *, version: str | None = None) -> "RunIdentity":
        """The inverse of :meth:`to_dict`; raises ``KeyError``/``TypeError``/``ValueError`` on a bad dict."""
        missing = {"mechanism", "norm", "target", "oracle"} - set(d)
        if missing:
            raise KeyError(sorted(missing)[0])
        return cls(n=int(d["n"]), seed=int(d["seed"]), block_size=int(d["block_size"]), mechanism=d["mechanism"],
                   norm=d["norm"], target=d["target"], oracle=d["oracle"], output_dim=int(d["output_dim"]),
                   version=d.get("version", version if version is not None else "?"))


# Provenance fields of the plan that only choose the order statistic: estimates that differ only in
# these come from the same G sample (store re-derivations for another γ).
ORDER_STATISTIC_FIELDS = ("k", "gamma", "rho", "mode")


def _canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False, default=str).encode()


def estimate_fingerprint(provenance: dict, sensitivity: float) -> str:
    """SHA-256 of an estimate's provenance and Δ̂: names the exact Δ̂ a release used."""
    return hashlib.sha256(_canonical({"provenance": provenance, "sensitivity": repr(float(sensitivity))})).hexdigest()


def sample_fingerprint(provenance: dict) -> str:
    """SHA-256 of the provenance without the order-statistic choice: names the G sample."""
    prov = dict(provenance)
    prov.pop("sizing", None)  # how m was chosen, not what was sampled
    plan = dict(prov.get("plan") or {})
    for key in ORDER_STATISTIC_FIELDS:
        plan.pop(key, None)
    prov["plan"] = plan
    return hashlib.sha256(_canonical(prov)).hexdigest()


def run_fingerprint(identity: RunIdentity) -> str:
    """SHA-256 of a run's :meth:`RunIdentity.sample_key`: what every shard of its store carries."""
    return hashlib.sha256(_canonical(identity.sample_key())).hexdigest()
