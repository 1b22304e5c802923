"""A first run in a fresh process: ``python first_run.py [BACKEND]`` (a Python expression such as
``'"local"'`` or ``raydp.AutoBackend(local_seconds=0.0)``, evaluated with ``raydp`` in scope) prints, as JSON, which backend auto
chose, Δ̂, the sample's hash, the seconds from before ``import raydp``, and whether Ray was started."""

import hashlib
import json
import sys
import time

t0 = time.perf_counter()
import raydp  # noqa: E402 - timed from before the import
from raydp import oracles, targets  # noqa: E402

backend = eval(sys.argv[1], {"raydp": raydp}) if len(sys.argv) > 1 else None  # noqa: S307 - a test child
est = raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), 100, gamma=0.05, seed=0,
                                 keep_sample=True, progress=False, **({} if backend is None else {"backend": backend}))
ray = sys.modules.get("ray")
print(json.dumps(dict(backend=est.backend, delta=est.sensitivity.hex(), seconds=time.perf_counter() - t0,
                      sample=hashlib.sha256(est.sample.tobytes()).hexdigest(),
                      ray_started=bool(ray is not None and ray.is_initialized()))))
