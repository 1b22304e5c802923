"""GPUs, custom resources and a once-per-worker ``setup()`` on a real loopback node (issue 20).

The node is a ``ray start --num-gpus 2 --resources '{"widget": 3}'`` that has no GPU: Ray only
counts declared resources, so what is tested is raydp's side — the tasks ask for them, slots are
counted from the scarcest one, each task sees its own ``ray.get_gpu_ids()``, and a target's
``setup()`` runs once per worker process, not once per task.
"""

from __future__ import annotations

import json
import subprocess
import sys


import pytest

import raydp
from raydp.errors import InvalidArgumentError
from cluster_util import local_cluster
from paths import CHILDREN


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("resources")
    with local_cluster(workers=0, cpus_per_node=4, gpus_per_node=2, resources_per_node={"widget": 3}) as c:
        p = subprocess.run([sys.executable, str(CHILDREN / "resources_run.py"), str(out)], env=c.env,
                           capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1]), out


def test_slots_are_counted_from_the_scarcest_requested_resource(run):
    slots = run[0]["slots"]
    assert slots == {"cpu": 4, "gpu": 2, "half_gpu": 4, "widget": 3, "two_widgets": 1, "gpu_and_2_widgets": 1}


def test_two_one_gpu_tasks_at_a_time_each_with_its_own_gpu(run):
    every = [json.loads(p.read_text()) for p in (run[1] / "gpu").glob("eval-*.json")]
    evals = [e for e in every if e["gpus"]]
    # the driver's one probe (output shape, before any task) sees no GPU; the m = 8 pairs, two
    # evaluations each, ran in tasks that each saw exactly one
    assert len(every) == 17 and len(evals) == 16
    assert all(len(e["gpus"]) == 1 for e in evals)
    # at every evaluation's midpoint: at most two running, and those on different GPUs
    most = 0
    for e in evals:
        mid = (e["t0"] + e["t1"]) / 2
        running = [x for x in evals if x["t0"] <= mid <= x["t1"]]
        most = max(most, len(running))
        assert len(running) <= 2
        assert len({x["gpus"][0] for x in running}) == len(running)
    assert most == 2  # both GPUs were used at once
    assert {e["gpus"][0] for e in evals} == {"0", "1"}


def test_where_it_ran_does_not_change_the_result(run):
    assert run[0]["gpu_delta"] == run[0]["local_delta"]


def test_setup_runs_once_per_worker_process_not_once_per_task(run):
    calls = [p.name.split("-")[1] for p in (run[1] / "setup").glob("setup-*")]
    processes = set(calls)
    assert len(calls) == len(processes)  # never twice in one process
    assert len(calls) <= 1 + 4  # the driver's (before its probe) and at most one per slot's worker
    assert run[0]["setup_tasks"] > len(calls)  # more tasks than set-ups: reused across tasks
    assert run[0]["setup_delta"] > 0


@pytest.mark.parametrize("kw,match", [
    (dict(gpus_per_task=0), "gpus_per_task"), (dict(gpus_per_task=-1), "gpus_per_task"),
    (dict(resources_per_task={"widget": 0}), "widget"), (dict(resources_per_task=["widget"]), "dict"),
    (dict(resources_per_task={"CPU": 2}), "cpus_per_task"), (dict(resources_per_task={"": 1}), "dict"),
])
def test_bad_resource_requests_are_one_line(kw, match):
    with pytest.raises(InvalidArgumentError, match=match):
        raydp.RayBackend(**kw)


def test_a_gpu_no_node_has_is_refused_not_waited_for(ray_session):
    from raydp import oracles, targets
    from raydp.errors import EngineError

    with pytest.raises(EngineError, match="gpus_per_task=1 but the largest node has 0 GPUs"):
        raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), 10, m=50, k=50, seed=0, progress=False,
                                   backend=raydp.RayBackend(gpus_per_task=1))


def test_setup_in_process_once_and_before_the_probe(tmp_path):
    from raydp import oracles

    class Model:
        def __init__(self):
            self.w = None

        def setup(self):
            try:
                (tmp_path / f"s{len(list(tmp_path.iterdir()))}").touch()
            except OSError:  # in the release's sandbox: the caller's /tmp is not there, the files are read-only
                pass
            self.w = 3.0

        def __call__(self, d):
            return [self.w * float(d.mean())]  # fails (None * float) without setup

    target = Model()
    est = raydp.estimate_sensitivity(target, oracles.exponential(1.0), 10, m=40, k=40, seed=0, progress=False,
                                     backend="local")
    assert est.failures == 0 and len(list(tmp_path.iterdir())) == 1
    assert target.w is None  # the copy was set up, not the caller's object (what a cluster would be sent)
    r = raydp.sample_then_respond([1.0] * 10, target, raydp.Laplace(1.0), estimate=est)
    # the release runs in the sandbox (raydp.seal), which sets its copy up there (setup() sees no data; the
    # replayed pairs use that copy, then the private data): the value is w * mean, so setup ran there, and
    # what it tried to write never reached the caller's files
    sandboxed = raydp.seal.sandbox_status()[0]
    assert len(list(tmp_path.iterdir())) == (1 if sandboxed else 2) and r.value.shape == (1,) and target.w is None
    assert r.replay.ok


def test_a_setup_that_raises_stops_the_run_with_its_message():
    from raydp import oracles
    from raydp.errors import TargetError

    class Broken:
        def setup(self):
            raise OSError("model file missing")

        def __call__(self, d):
            return [0.0]

    with pytest.raises(TargetError, match="setup.*OSError: model file missing"):
        raydp.estimate_sensitivity(Broken(), oracles.exponential(1.0), 10, m=40, k=40, seed=0, progress=False,
                                   backend="local")


