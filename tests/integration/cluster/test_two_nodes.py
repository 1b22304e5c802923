"""A real `ray job submit` of the SVM job to a 2-node cluster started by raydp.local_cluster
(token authentication on, everything on 127.0.0.1); its stored G sample must equal a local run's,
bit for bit."""

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import raydp
from raydp import oracles, targets
from cluster_util import REPO, local_cluster

pytestmark = [pytest.mark.slow, pytest.mark.ray, pytest.mark.subprocess]


def test_svm_job_submitted_to_two_nodes_equals_local(tmp_path):
    out = tmp_path / "job"
    with local_cluster(workers=1, cpus_per_node=1) as cluster:
        nodes = cluster.alive_nodes()
        assert len(nodes) == 2 and {n["NodeManagerAddress"] for n in nodes} == {"127.0.0.1"}
        done = cluster.submit(["python", "jobs/svm_sensitivity.py", "--dims", "2", "--m", "150",
                               "--gammas", "0.15", "--backend", "ray", "--out", str(out), "--quiet",
                               "--no-plot"], working_dir=REPO, timeout=400)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        # a job's progress is visible in `ray job logs`: a line per interval (1 s here, 30 s by default)
        job_id = "raydp-progress-test"
        done = cluster.submit(["python", "jobs/svm_sensitivity.py", "--dims", "8", "--m", "600",
                               "--gammas", "0.15", "--out", str(tmp_path / "progress"), "--no-plot"],
                              working_dir=REPO, timeout=400,
                              extra_args=["--submission-id", job_id, "--runtime-env-json",
                                          json.dumps({"env_vars": {"RAYDP_PROGRESS_INTERVAL": "1"}})])
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        logs = cluster.run([str(Path(sys.executable).parent / "ray"), "job", "logs", "--address", cluster.dashboard,
                            job_id], timeout=60)
        assert logs.returncode == 0, logs.stderr[-2000:]
        progress = [ln for ln in logs.stdout.splitlines() if re.match(r"raydp: [\d,]+/600 pairs \(", ln)]
        assert len(progress) >= 2, logs.stdout[-3000:]  # at least one line while running, one at the end
        assert re.search(r"pairs/s, ETA [\d:?]+, 0 failed", progress[0]) and "/600 pairs (100.0%)" in progress[-1]
    stored = raydp.load_estimate(str(out / "d=2"))
    local = raydp.estimate_sensitivity(targets.svm(C=3.0), oracles.svm_two_class(2), 1000, m=150, seed=0,
                                       keep_sample=True, progress=False)
    assert stored.provenance() == local.provenance()
    assert np.array_equal(stored.sample, local.sample)
    assert stored.sensitivity == local.sensitivity
    assert (out / "svm_sensitivity.parquet").exists()
