"""Shared fixtures: one embedded loopback Ray per test module that asks for it, a moto S3 server, a
small stored estimate.

The tests are organised by behaviour: ``unit/`` (one module or concern at a time, in process),
``integration/`` (``cli/``, ``cluster/`` — real multi-node clusters on loopback —, ``faults/`` — killed
processes, hostile files, private output —, ``jobs/`` — the jobs and the documentation site run as a
user runs them), ``statistical/`` (the guarantee, property-based inputs, the golden table). Helpers are
in ``support/`` (on pytest's ``pythonpath``), data in ``data/``, child processes' scripts in ``children/``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def ray_session():
    """A real embedded Ray (2 CPUs) bound to 127.0.0.1, started for the module and shut down after."""
    ray = pytest.importorskip("ray")
    from raydp.engine.loopback import LOOPBACK_HOST, loopback_only

    if ray.is_initialized():  # pragma: no cover - another module left a session behind
        ray.shutdown()
    with pytest.MonkeyPatch.context() as mp, loopback_only():
        mp.delenv("RAY_ADDRESS", raising=False)  # start our own, never join an ambient cluster
        ray.init(num_cpus=2, include_dashboard=False, _node_ip_address=LOOPBACK_HOST, log_to_driver=False)
    assert ray.get_runtime_context().gcs_address.startswith("127.0.0.1:")
    yield ray
    ray.shutdown()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_AWS = dict(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")


def start_moto(bucket: str = "raydp") -> tuple[int, subprocess.Popen]:
    """Start a moto S3 server on 127.0.0.1 with ``bucket``; return (port, process). The caller stops it."""
    port = _free_port()
    exe = Path(sys.executable).with_name("moto_server")
    proc = subprocess.Popen([str(exe), "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("moto S3 server did not start")
    os.environ.update(_AWS)  # moto accepts any credentials; pyarrow and boto3 need some
    import boto3

    boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1").create_bucket(Bucket=bucket)
    return port, proc


@pytest.fixture(scope="module")
def s3_server():
    """A moto S3 server on 127.0.0.1 with a bucket 'raydp'; yields its port."""
    pytest.importorskip("moto")
    old = {k: os.environ.get(k) for k in _AWS}
    port, proc = start_moto()
    yield port
    proc.terminate()
    proc.wait(10)
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture
def small_store(tmp_path):
    """A stored estimate (mean of n = 50 Exp(1) records, γ = 0.1) and a private .npy of 50 records."""
    import numpy as np

    import raydp
    from raydp import oracles, targets

    store = tmp_path / "est"
    raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), 50, gamma=0.1, seed=1, store=str(store),
                               progress=False)
    data = tmp_path / "data.npy"
    np.save(data, np.random.default_rng(0).exponential(1.0, 50))
    return store, data
