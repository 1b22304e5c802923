"""Provenance: a stable, JSON-able description of an oracle, target or mechanism.

A stored estimate is refused for a release whose target, oracle or mechanism differs, so the
description must be the same in every process for the same object. Objects may define
``identity() -> dict`` (``{"name": ..., "params": {...}}``); plain functions are described by
their import path.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np


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
