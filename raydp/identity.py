"""Provenance: a stable, JSON-able description of an oracle, target or mechanism, and of a run.

A stored estimate is refused for a release whose target, oracle or mechanism differs, so the
description must be the same in every process for the same object. Objects may define
``identity() -> dict`` (``{"name": ..., "params": {...}}``); plain functions are described by
their import path.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._version import __version__


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
    """Return ``{"name": str, "params": dict}`` for ``obj``."""
    ident = getattr(obj, "identity", None)
    if callable(ident):
        d = ident()
        return {"name": str(d.get("name")), "params": _jsonable(d.get("params", {}))}
    cls = obj if isinstance(obj, type) else type(obj)
    if callable(obj) and hasattr(obj, "__qualname__"):
        return {"name": f"{getattr(obj, '__module__', '?')}:{obj.__qualname__}", "params": {}}
    return {"name": f"{cls.__module__}:{cls.__qualname__}", "params": {}}


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
    plan = dict(prov.get("plan") or {})
    for key in ORDER_STATISTIC_FIELDS:
        plan.pop(key, None)
    prov["plan"] = plan
    return hashlib.sha256(_canonical(prov)).hexdigest()


def run_fingerprint(identity: RunIdentity) -> str:
    """SHA-256 of a run's :meth:`RunIdentity.sample_key`: what every shard of its store carries."""
    return hashlib.sha256(_canonical(identity.sample_key())).hexdigest()
