"""Helpers for tests that run jobs/ as subprocesses or import them as modules."""

import importlib.util
import os
import subprocess
import sys

from paths import JOBS


def run_job(name, *args, cwd, timeout=180, env_extra=None):
    """Run ``jobs/<name>`` in a fresh process; never joins a Ray cluster named by RAY_ADDRESS."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(env_extra or {})
    proc = subprocess.run([sys.executable, str(JOBS / name), *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


def load_job(name):
    """Import ``jobs/<name>.py`` as ``python jobs/<name>.py`` would see it: with its own directory first on
    ``sys.path`` (for ``_common``, ``_plots``, ...) while it is imported, and only then — the jobs are
    not a package the tests can import otherwise (they are not on pytest's ``pythonpath``)."""
    spec = importlib.util.spec_from_file_location(f"job_{name}", JOBS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(JOBS))
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(JOBS))
    return mod
