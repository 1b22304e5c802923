"""Every golden run (``tests/golden_runs.py``) gives the recorded Δ̂, failures and G sample, bit for bit.

The table was recorded before the architecture step of issue 11; a refactor must not move a single
bit of it. On both backends: the Ray rows use a real embedded Ray on 127.0.0.1.
"""

from __future__ import annotations

import json
import sys

import pytest

import golden_runs

RECORDED = json.loads(golden_runs.GOLDEN.read_text())
CASES = [(name, backend) for name, backend, _ in golden_runs.cases()]


def test_the_table_covers_every_case_and_both_backends():
    assert sorted(f"{n}@{b}" for n, b in CASES) == sorted(RECORDED)
    assert {b for _, b in CASES} == {"local", "ray"} and len(CASES) >= 12


@pytest.mark.parametrize("name,backend", [c for c in CASES if c[1] == "local"])
def test_golden_local(name, backend):
    assert golden_runs.compute_one(name, backend) == RECORDED[f"{name}@{backend}"]


@pytest.mark.parametrize("name,backend", [c for c in CASES if c[1] == "ray"])
def test_golden_ray(name, backend, ray_session):
    import ray

    ray.cloudpickle.register_pickle_by_value(sys.modules["golden_runs"])
    assert golden_runs.compute_one(name, backend) == RECORDED[f"{name}@{backend}"]
