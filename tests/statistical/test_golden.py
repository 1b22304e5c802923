"""Every golden run (``tests/golden_runs.py``) gives the recorded Δ̂, failures and G sample.

The table was recorded before the architecture step of issue 11; a refactor must not move a single
bit of it. Exact runs are compared bit for bit on any CPU; the two runs whose last bits depend on the
CPU's SIMD kernels (``golden_runs.TOLERANT``, with the measurements behind the tolerances) are compared
bit for bit in everything but Δ̂ (within 1e-12 relative of the recorded one) and the G values (within
1e-8 relative of ``golden_values.npz``). On one machine, local and Ray runs are identical bit for bit
in every case. The Ray rows use a real embedded Ray on 127.0.0.1.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

import golden_runs

RECORDED = json.loads(golden_runs.GOLDEN.read_text())
VALUES = np.load(golden_runs.VALUES)
CASES = [(name, backend) for name, backend, _ in golden_runs.cases()]
HASHES = ("sample", "top", "sensitivity")


def test_the_table_covers_every_case_and_both_backends():
    assert sorted(f"{n}@{b}" for n, b in CASES) == sorted(RECORDED)
    assert {b for _, b in CASES} == {"local", "ray"} and len(CASES) >= 12
    assert set(golden_runs.TOLERANT) <= {n for n, _ in CASES}
    assert {k.split("|")[0] for k in VALUES.files} == set(golden_runs.TOLERANT)


def close(got: np.ndarray, want: np.ndarray) -> bool:
    """Same shape, the same infinities, finite values within G_RTOL relative (G_ATOL near zero)."""
    if got.shape != want.shape or not np.array_equal(np.isinf(got), np.isinf(want)):
        return False
    fin = np.isfinite(want)
    return bool(np.all(np.abs(got[fin] - want[fin])
                       <= golden_runs.G_RTOL * np.abs(want[fin]) + golden_runs.G_ATOL))


def check(name: str, est) -> None:
    want = RECORDED[f"{name}@local"]
    got = golden_runs.row(est)
    if name not in golden_runs.TOLERANT:
        assert got == want
        return
    assert {k: v for k, v in got.items() if k not in HASHES} == {k: v for k, v in want.items() if k not in HASHES}
    assert float(got["sensitivity"]) == pytest.approx(float(want["sensitivity"]), rel=golden_runs.DELTA_RTOL, abs=0)
    for part, value in golden_runs.values(est).items():
        assert close(value, VALUES[f"{name}|{part}"]), f"{name}: {part} moved beyond G_RTOL={golden_runs.G_RTOL:g}"


@pytest.mark.parametrize("name,backend", [c for c in CASES if c[1] == "local"])
def test_golden_local(name, backend):
    check(name, golden_runs.estimate_one(name, backend))


@pytest.mark.parametrize("name,backend", [c for c in CASES if c[1] == "ray"])
@pytest.mark.ray
def test_golden_ray_and_bit_identical_to_local(name, backend, ray_session):
    import ray

    ray.cloudpickle.register_pickle_by_value(sys.modules["golden_runs"])
    on_ray = golden_runs.estimate_one(name, backend)
    check(name, on_ray)
    assert golden_runs.row(on_ray) == golden_runs.compute_one(name, "local")  # every bit, on any one machine


def test_the_tolerance_check_is_not_vacuous():
    """A G moved by ten times the tolerance is caught; one moved within it is not."""
    name = sorted(golden_runs.TOLERANT)[0]
    want = VALUES[f"{name}|top"]
    moved = want.copy()
    i = int(np.argmax(np.isfinite(moved) & (moved > 0)))
    moved[i] *= 1 + 10 * golden_runs.G_RTOL
    assert not close(moved, want)
    moved[i] = want[i] * (1 + golden_runs.G_RTOL / 10)
    assert close(moved, want)
