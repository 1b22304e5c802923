"""A real `ray job submit` of the SVM job to a 2-node cluster started by raydp.local_cluster
(token authentication on, everything on 127.0.0.1); its stored G sample must equal a local run's,
bit for bit."""

import numpy as np
import pytest

import raydp
from raydp import oracles, targets
from cluster_util import REPO, local_cluster

pytestmark = pytest.mark.slow


def test_svm_job_submitted_to_two_nodes_equals_local(tmp_path):
    out = tmp_path / "job"
    with local_cluster(workers=1, cpus_per_node=1) as cluster:
        nodes = cluster.alive_nodes()
        assert len(nodes) == 2 and {n["NodeManagerAddress"] for n in nodes} == {"127.0.0.1"}
        done = cluster.submit(["python", "jobs/svm_sensitivity.py", "--dims", "2", "--m", "150",
                               "--gammas", "0.15", "--backend", "ray", "--out", str(out), "--quiet",
                               "--no-plot"], working_dir=REPO, timeout=400)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    stored = raydp.load_estimate(str(out / "d=2"))
    local = raydp.estimate_sensitivity(targets.svm(C=3.0), oracles.svm_two_class(2), 1000, m=150, seed=0,
                                       keep_sample=True, progress=False)
    assert stored.provenance() == local.provenance()
    assert np.array_equal(stored.sample, local.sample)
    assert stored.sensitivity == local.sensitivity
    assert (out / "svm_sensitivity.parquet").exists()
