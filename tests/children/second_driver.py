"""A second driver joining a running cluster: ``python second_driver.py GCS_ADDRESS RUN_JSON`` runs
``targets.mean()`` with the run's settings (n, m, gamma, seed, block_size) on that cluster and prints, as
JSON, the GCS address it joined, Δ̂ and the sample's hash."""

import hashlib
import json
import sys

import ray

import raydp
from raydp import oracles, targets
from raydp.engine.loopback import loopback_only

gcs, run = sys.argv[1], json.loads(sys.argv[2])
with loopback_only():
    est = raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), run["n"], m=run["m"],
                                     gamma=run["gamma"], seed=run["seed"], block_size=run["block_size"],
                                     backend="ray", address=gcs, keep_sample=True, progress=False)
print(json.dumps(dict(gcs=ray.get_runtime_context().gcs_address, delta=est.sensitivity.hex(),
                      sample=hashlib.sha256(est.sample.tobytes()).hexdigest())))
