"""The driver of every Ray run in integration/faults/test_faults.py: ``python fault_driver.py CONFIG_JSON``.

It connects (or starts an embedded Ray) first, so it can report its node and session dir before the
run; estimate_sensitivity then finds Ray initialised and uses it as is (what RayBackend(address=...,
num_cpus=...) does itself). Needs ``tests/support`` on PYTHONPATH (slow_targets).
"""

import json, os, sys
import ray, raydp, slow_targets
from raydp import oracles
from raydp.engine.ray import ensure_ray

cfg = json.loads(sys.argv[1])
ensure_ray(cfg["address"], cfg["cpus"])
node = ray._private.worker._global_node
print("DRIVER " + json.dumps({"node": ray.get_runtime_context().get_node_id(),
                              "session_dir": node.get_session_dir_path(), "pid": os.getpid()}), flush=True)
options = {"address": cfg["address"]} if cfg["address"] else {"num_cpus": cfg["cpus"]}
options.update(cfg.get("engine", {}))
est = raydp.estimate_sensitivity(
    slow_targets.traced_slow_mean(cfg["delay"], cfg["trace"]), oracles.exponential(1.0), cfg["n"],
    m=cfg["m"], gamma=cfg["gamma"], seed=cfg["seed"], block_size=cfg["block_size"], backend="ray",
    store=cfg["store"], resume=cfg["resume"], flush_rows=1, progress=False, **options)
print("RESULT " + json.dumps({"delta": est.sensitivity.hex(), "failures": est.failures,
                              "m": est.plan.m, "replayed": 0 if est.replay is None else est.replay.pairs}),
      flush=True)
