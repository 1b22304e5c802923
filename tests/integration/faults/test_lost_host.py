"""A host that stops answering without closing its connections, on a real 2-node cluster.

A cut network link or a frozen machine leaves every TCP connection open: Ray's GCS marks such a node
dead only after its health checks have failed for a while, and a task running there fails only when
the connection's keepalive gives up (~7 min measured). The test freezes processes with SIGSTOP,
which has the same effect (the kernel keeps their sockets open):

1. one task worker of the worker node is frozen (its node stays healthy): the task runs far past
   what its blocks take, a backup copy runs on the head, the progress display says meanwhile what is
   outstanding and where, and the result is the clean one, every pair stored once;
2. the whole worker node is frozen for good: Ray marks it dead (health checks here: ~9 s instead of
   ~65 s) and raydp says so in one line naming the node and what it starts again.

Both runs print ``--json`` while Ray prints on the driver (the task workers' own lines, and
"(raylet) ... marked dead"): stdout must still be the one JSON document, Ray's lines on stderr.

Both runs are the command line a user runs (``raydp estimate --backend ray --address ...``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import raydp
from raydp import oracles
from raydp.local_cluster.procs import cluster_procs, proc_table
from raydp.store import Store

import stall_targets  # noqa: E402
from cluster_util import local_cluster  # noqa: E402
from paths import SUPPORT  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.ray, pytest.mark.subprocess]
pytest.importorskip("ray")

# Death of a silent node noticed after ~3 × (1 s + 2 s); a busy node still answers within 2 s.
HEALTH = {"RAY_health_check_period_ms": "1000", "RAY_health_check_timeout_ms": "2000",
          "RAY_health_check_failure_threshold": "3"}
N, SEED = 20, 11


@pytest.fixture(scope="module")
def cluster():
    """Head + 1 worker node, 1 CPU each; task workers import stall_targets."""
    with local_cluster(workers=1, cpus_per_node=1, extra_env=dict(HEALTH, PYTHONPATH=str(SUPPORT))) as c:
        yield c


def _reference(m: int):
    return raydp.estimate_sensitivity(stall_targets.traced_sleep(0.0), oracles.exponential(1.0), N, m=m,
                                      seed=SEED, block_size=1, backend="local", keep_sample=True, progress=False)


def _stored_pairs(uri) -> np.ndarray:
    """The pair index of every row in the store's shards (a pair stored twice appears twice)."""
    st = Store.open(str(uri))
    st.load()
    rows = [st.read_shard(p.name)[2] for p in sorted((Path(uri) / "shards").glob("shard-*.parquet"))]
    return np.concatenate(rows) if rows else np.empty(0, np.int64)


def _busy_worker(trace: Path, node_id: str, calls: int = 1) -> int | None:
    """A task worker of node ``node_id`` that started its ``calls``-th evaluation (or a later one) within
    the last 0.3 s (its pid)."""
    for f in trace.glob("node-*"):
        pid = int(f.name.split("-", 1)[1])
        try:
            made = trace / f"calls-{pid}"
            if (f.read_text() == node_id and time.time() - made.stat().st_mtime < 0.3
                    and made.stat().st_size >= calls):
                return pid
        except OSError:
            continue
    return None


def _estimate(cluster, tmp_path: Path, m: int, delay: float, freeze,
              calls: int = 1) -> tuple[subprocess.CompletedProcess, float]:
    """``raydp estimate --json`` on the cluster; ``freeze(pid)`` is called once a task worker of the
    worker node starts its ``calls``-th evaluation and returns the pids it stopped (continued again at
    the end)."""
    trace, store = tmp_path / "trace", tmp_path / "store"
    trace.mkdir()
    env = dict(cluster.env, PYTHONPATH=str(SUPPORT), RAYDP_PROGRESS_INTERVAL="2")
    cmd = [sys.executable, "-m", "raydp.cli", "estimate", "--target", "stall_targets:traced_sleep",
           "--target-args", json.dumps({"delay": delay, "trace_dir": str(trace)}), "--oracle",
           "raydp.oracles:exponential", "--oracle-args", '{"rate": 1.0}', "--n", str(N), "--m", str(m),
           "--seed", str(SEED), "--block-size", "1", "--backend", "ray", "--address", cluster.address,
           "--store", str(store), "--json"]
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    stopped: list[int] = []
    t0 = time.monotonic()
    with open(out, "w") as fo, open(err, "w") as fe:
        proc = subprocess.Popen(cmd, env=env, stdout=fo, stderr=fe, start_new_session=True)
    try:
        while proc.poll() is None and time.monotonic() - t0 < 240:
            if not stopped:
                pid = _busy_worker(trace, cluster.worker_node_ids[0], calls)
                if pid is not None:
                    stopped = freeze(pid)
            time.sleep(0.05)
        assert proc.poll() is not None, "the run did not end in 240 s"
        assert stopped, "no task ran on the worker node: nothing was frozen"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
    wall = time.monotonic() - t0
    done = subprocess.CompletedProcess(cmd, proc.returncode, out.read_text(), err.read_text(errors="replace"))
    return done, wall


def _check_result(done, tmp_path: Path, m: int) -> dict:
    assert done.returncode == 0, done.stderr[-4000:]
    printed = json.loads(done.stdout)  # stdout is the estimate's JSON and nothing else
    clean = _reference(m)
    stored = raydp.load_estimate(str(tmp_path / "store"))
    np.testing.assert_array_equal(stored.sample, clean.sample)  # bit for bit
    assert printed["sensitivity"] == clean.sensitivity == stored.sensitivity and printed["failures"] == 0
    pairs = _stored_pairs(tmp_path / "store")
    assert pairs.size == m and np.array_equal(np.sort(pairs), np.arange(m)), "a pair lost or stored twice"
    return printed


def test_a_frozen_task_gets_a_backup_on_the_other_node(cluster, tmp_path):
    """Two pairs of 2 s, one task each. The worker node's task worker is frozen in its second evaluation
    (1 s into the task: past ``MARK_AFTER``, so it has said where it runs): its task is copied to the
    head once it has run 3 × 2 s + 5 s; until then nothing comes back, and the progress lines say what
    is outstanding, where, for how long. (A copy frozen before it said so: tests/unit/test_scheduler.py.)"""
    wid = cluster.worker_node_ids[0]

    def freeze(pid):
        os.kill(pid, signal.SIGSTOP)
        return [pid]

    done, wall = _estimate(cluster, tmp_path, m=2, delay=1.0, freeze=freeze, calls=2)
    print(f"\n[frozen task] {wall:.1f} s; stderr:\n{done.stderr[-3000:]}")
    _check_result(done, tmp_path, 2)
    lines = done.stderr.splitlines()
    host = rf"127\.0\.0\.1 \(node {wid[:8]}\)"
    backup = [ln for ln in lines if re.search(rf"1 task \(1 block: \d\) on {host} ran \d+ s, past 3x", ln)]
    assert backup and "a copy of each started on another node" in backup[0], done.stderr[-3000:]
    waiting = [ln for ln in lines if re.search(rf"nothing back for \d+ s: \d+ blocks? outstanding in 1 task; {host}: "
                                               r"1 task running \d+ s", ln)]
    assert waiting, done.stderr[-3000:]
    assert lines.index(waiting[0]) < lines.index(backup[0])  # said while nothing came back, before the copy
    assert wall < 120  # without a backup the run would wait for the frozen worker for ever
    assert "traced sleep evaluating in task worker" in done.stderr  # a task worker's print: Ray's, on stderr


def test_a_frozen_node_is_named_when_ray_marks_it_dead(cluster, tmp_path):
    """The whole worker node frozen for good (last test of the module: the node stays dead). Tasks of
    5 s would be copied after 20 s; Ray marks the node dead after ~9 s first, and raydp starts its task
    again at once. Ray's own line about it goes to stderr: stdout stays one JSON document."""
    wid = cluster.worker_node_ids[0]
    pgid = next(n.pgid for n in cluster.nodes_table() if n.name == "worker1")

    def freeze(_pid):
        pids = sorted(cluster_procs({pgid}, proc_table()))
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        return pids

    done, wall = _estimate(cluster, tmp_path, m=48, delay=0.125, freeze=freeze)
    print(f"\n[frozen node] {wall:.1f} s; stderr:\n{done.stderr[-3000:]}")
    _check_result(done, tmp_path, 48)
    assert re.search(rf"\(raylet\).*node id: {wid}.*marked dead", done.stderr), done.stderr[-3000:]  # Ray's line
    named = [ln for ln in done.stderr.splitlines()
             if re.search(rf"^raydp: Ray marked node 127\.0\.0\.1 \(node {wid[:8]}\) dead", ln)]
    assert len(named) == 1, done.stderr[-3000:]
    assert re.search(r"\d+ tasks? \(\d+ blocks?: [\d., ]+\) (started again on other nodes|already have a copy)",
                     named[0]), named[0]
    assert wall < 120
