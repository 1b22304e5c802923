"""Bad input's raw material, shared by the API and CLI tables: misbehaving targets and oracles
(importable by name from the command line as ``bad_inputs:ATTR``) and a directory of broken files and
stores (:func:`make_files`).
"""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import raydp
from raydp import oracles, targets

NAN, INF = float("nan"), float("inf")
HUGE = 2**70


# Module-level so the CLI can name them as test_bad_input:ATTR (pytest puts tests/ on sys.path).


class _Oracle:
    def __init__(self, draw):
        self.draw = draw

    def sample(self, rng, size):
        return self.draw(rng, size)


def _raise(exc):
    raise exc


nan_oracle = _Oracle(lambda rng, size: np.full(size, np.nan))
inf_oracle = _Oracle(lambda rng, size: np.full(size, np.inf))
list_oracle = _Oracle(lambda rng, size: [0.0] * size)
short_oracle = _Oracle(lambda rng, size: np.zeros(size - 1))
transposed_oracle = _Oracle(lambda rng, size: np.zeros((1, size)))
scalar_oracle = _Oracle(lambda rng, size: np.float64(1.0))
none_oracle = _Oracle(lambda rng, size: None)
str_oracle = _Oracle(lambda rng, size: np.array(["a"] * size))
complex_oracle = _Oracle(lambda rng, size: np.ones(size, dtype=complex))
raising_oracle = _Oracle(lambda rng, size: _raise(RuntimeError("no data today")))


class ChangingShape:
    """A target whose output has 1 coordinate, then 2, then 1, ... (never a fixed shape)."""

    def __init__(self):
        self.calls = 0

    def __call__(self, db):
        self.calls += 1
        return np.zeros(1 + self.calls % 2)


def changing_shape():
    return ChangingShape()


def returns_str(db):
    return "a string"


def returns_none(db):
    return None


def returns_empty(db):
    return np.zeros(0)


def returns_dict(db):
    return {"mean": 1.0}


def raises(db):
    raise ZeroDivisionError("boom")


def raising_factory(**kwargs):
    raise KeyError("factory failed")


NOT_CALLABLE = 3.0



def make_files(tmp) -> SimpleNamespace:
    """In ``tmp``: a plain file, a small store (n=5, m=50), private data, broken .npy/.csv/.parquet files
    and stores whose meta.json is broken in every way the tables need."""
    c = SimpleNamespace(tmp=str(tmp))
    c.file = str(tmp / "a_file")
    with open(c.file, "w") as f:
        f.write("not a store")
    c.store = str(tmp / "store")  # n=5, m=50, mean of Exp(1), Laplace (ℓ1)
    c.est = raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), 5, m=50, seed=1,
                                       progress=False, store=c.store)
    c.data = str(tmp / "data.npy")
    np.save(c.data, np.random.default_rng(0).exponential(1.0, 5))
    c.bad_npy = str(tmp / "garbage.npy")
    with open(c.bad_npy, "wb") as f:
        f.write(b"garbage")
    c.obj_npy = str(tmp / "objects.npy")
    np.save(c.obj_npy, np.array([{}] * 5, dtype=object), allow_pickle=True)
    c.text_csv = str(tmp / "text.csv")
    with open(c.text_csv, "w") as f:
        f.write("x,name\n1,a\n2,b\n")
    c.gaps_csv = str(tmp / "gaps.csv")
    with open(c.gaps_csv, "w") as f:
        f.write("x,y\n1,2\n3,\n")
    c.empty_parquet = str(tmp / "empty.parquet")
    pq.write_table(pa.table({"x": pa.array([], pa.float64())}), c.empty_parquet)
    with open(os.path.join(c.store, "meta.json")) as f:
        meta = json.load(f)

    def store_with(name, content):
        os.makedirs(tmp / name)
        with open(tmp / name / "meta.json", "w") as f:
            f.write(content if isinstance(content, str) else json.dumps(content))
        return str(tmp / name)

    c.meta_not_json = store_with("meta_not_json", "{bad")
    c.meta_list = store_with("meta_list", "[1, 2]")
    c.meta_no_plan = store_with("meta_no_plan", {"format": meta["format"]})
    c.meta_bad_m = store_with("meta_bad_m", {**meta, "plan": {**meta["plan"], "m": "many"}})
    c.meta_inf_m = store_with("meta_inf_m", '{"format": %d, "plan": {"m": Infinity, "k": 1, "gamma": 0.5, '
                                            '"rho": 0.1, "mode": "manual"}, "provenance": {}}' % meta["format"])
    # a plan that breaks Theorem 15 (γ far below what m = 50 pairs can certify)
    c.meta_bad_plan = store_with("meta_bad_plan", {**meta, "plan": {**meta["plan"], "gamma": 0.001, "rho": 0.0005}})
    c.meta_no_oracle = store_with("meta_no_oracle", {**meta, "provenance": {k: v for k, v in meta["provenance"].items()
                                                                            if k != "oracle"}})
    return c


