"""Child: releases whose outcome depends on what this process was started with (the template of the
sandbox is started once per process, with the environment it has then).

    python sandbox_child.py env   # a credential in os.environ before the first release
    python sandbox_child.py off   # RAYDP_SANDBOX=off (set by the caller): sealed, not sandboxed

Prints one JSON object: for each release, "ok" or the raydp error's class name; for ``off`` also the
statements and how many SandboxUnavailableWarning were emitted. Needs tests/support on PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import sys
import warnings

SECRET = "raydp-test-secret-8f1e2d"


def _release(target, data, est):
    import raydp

    try:
        r = raydp.sample_then_respond(data, target, raydp.Laplace(1.0), estimate=est)
    except raydp.RaydpError as exc:
        return type(exc).__name__, None
    return "ok", r


def main(mode: str) -> None:
    if mode == "env":
        os.environ["AWS_SECRET_ACCESS_KEY"] = SECRET  # before the first release of this process

    import hostile_targets as h
    import raydp
    from raydp import oracles

    def estimate(target):
        return raydp.estimate_sensitivity(target, oracles.normal(0, 1), h.N, m=40, seed=1, progress=False,
                                          backend="local")

    out = {}
    if mode == "env":
        for name, target in (("environ", h.env_checker), ("proc_environ", h.proc_environ_checker)):
            out[name] = _release(target, h.private_data(), estimate(target))[0]
    else:
        data = h.private_data()
        data[3] = 0.5  # any target: on data without the marker it is the mean
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            est = estimate(h.forge_nan)
            results = [_release(h.forge_nan, data, est) for _ in range(2)]
        out["releases"] = [kind for kind, _ in results]
        out["statements"] = [r.statement() if r is not None else None for _, r in results]
        out["isolation"] = [getattr(r, "isolation", None) for _, r in results]
        out["warnings"] = sum(type(w.message).__name__ == "SandboxUnavailableWarning" for w in caught)
        out["warnings_total"] = len(caught)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
