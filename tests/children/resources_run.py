"""A driver on a cluster whose node declares 2 GPUs and 3 "widget": ``python resources_run.py DIR``.

Runs a target that records, per evaluation, its process, ``ray.get_gpu_ids()`` and its start and
end, with ``gpus_per_task=1``; then a target with a ``setup()`` that leaves one file per call. Prints
JSON: the slots counted for several requests, the Δ̂ of the GPU run and of the same run in process.
"""

import json
import os
import sys
import time

import numpy as np
import ray

import raydp
from raydp import oracles

OUT = sys.argv[1]


class GpuProbe:
    def __init__(self, out):
        self.out = out

    def __call__(self, d):
        t0 = time.time()
        time.sleep(0.3)
        with open(os.path.join(self.out, f"eval-{os.getpid()}-{time.monotonic_ns()}.json"), "w") as f:
            json.dump(dict(pid=os.getpid(), gpus=[str(g) for g in ray.get_gpu_ids()], t0=t0, t1=time.time()), f)
        return np.array([np.mean(d)])


class SetUp:
    def __init__(self, out):
        self.out = out
        self.scale = None

    def setup(self):
        time.sleep(0.5)
        self.scale = 2.0
        open(os.path.join(self.out, f"setup-{os.getpid()}-{time.monotonic_ns()}"), "w").close()

    def __call__(self, d):
        time.sleep(0.02)
        return np.array([self.scale * np.mean(d)])


address = os.environ["RAY_ADDRESS"]
slots = {name: raydp.RayBackend(address=address, **kw).slots() for name, kw in {
    "cpu": {}, "gpu": dict(gpus_per_task=1), "half_gpu": dict(gpus_per_task=0.5),
    "widget": dict(resources_per_task={"widget": 1}), "two_widgets": dict(resources_per_task={"widget": 2}),
    "gpu_and_2_widgets": dict(gpus_per_task=1, resources_per_task={"widget": 2})}.items()}
gpu_dir = os.path.join(OUT, "gpu")
os.makedirs(gpu_dir)
kw = dict(m=8, k=8, seed=3, progress=False)
on_gpus = raydp.estimate_sensitivity(GpuProbe(gpu_dir), oracles.exponential(1.0), 20,
                                     backend=raydp.RayBackend(address=address, gpus_per_task=1), **kw)
setup_dir = os.path.join(OUT, "setup")
os.makedirs(setup_dir)
with_setup = raydp.estimate_sensitivity(SetUp(setup_dir), oracles.exponential(1.0), 20, m=120, k=120, seed=4,
                                        progress=False, backend=raydp.RayBackend(address=address))
from raydp.engine.ray import last_stats  # noqa: E402

tasks = last_stats().groups
ray.shutdown()
local = raydp.estimate_sensitivity(GpuProbe(os.path.join(OUT, "local")), oracles.exponential(1.0), 20,
                                   backend="local", **kw) if os.makedirs(os.path.join(OUT, "local")) is None else None
print(json.dumps(dict(slots=slots, gpu_delta=on_gpus.sensitivity, local_delta=local.sensitivity,
                      setup_tasks=tasks, setup_delta=with_setup.sensitivity)))
