"""Targets for the lost-host and backup-task tests (importable as ``stall_targets`` with tests/support on
PYTHONPATH). Their values are the mean of the records, whatever they wait: a run that waited, stalled
or was copied is the same run as one that did not."""

from __future__ import annotations

import os
import sys
import time

import numpy as np


class TracedSleep:
    """Mean of the records after ``delay`` seconds per evaluation. With ``trace_dir``, every process
    leaves ``node-<pid>`` (the Ray node it runs on, "-" outside Ray) and ``calls-<pid>`` (one byte per
    call; its mtime is the last call), and a Ray task worker prints one line on its stdout when it
    starts evaluating (Ray shows it on the driver). Ray is never imported for it: the driver's probe
    stays as cheap as the target."""

    def __init__(self, delay: float = 0.0, trace_dir: str | None = None):
        self.delay, self.trace_dir = float(delay), trace_dir

    def _trace(self) -> None:
        pid = os.getpid()
        node_file = os.path.join(self.trace_dir, f"node-{pid}")
        if not os.path.exists(node_file):
            ray = sys.modules.get("ray")
            node = ray.get_runtime_context().get_node_id() if ray is not None and ray.is_initialized() else "-"
            with open(node_file, "w") as f:
                f.write(node)
            if node != "-":
                print(f"traced sleep evaluating in task worker {pid}", flush=True)
        fd = os.open(os.path.join(self.trace_dir, f"calls-{pid}"), os.O_CREAT | os.O_APPEND | os.O_WRONLY)
        try:
            os.write(fd, b".")
        finally:
            os.close(fd)

    def __call__(self, db):
        if self.trace_dir:
            self._trace()
        if self.delay:
            time.sleep(self.delay)
        return float(np.mean(db))

    def identity(self):
        return {"name": "traced_sleep_mean", "params": {}}  # delay and tracing do not change values


def traced_sleep(delay: float = 0.0, trace_dir: str | None = None) -> TracedSleep:
    return TracedSleep(delay, trace_dir)


class StallsOnce:
    """Mean of the records after ``delay`` seconds per evaluation; the first evaluation of a database
    whose last record is in ``stall_on`` (in any process: a marker file in ``marker_dir`` says it
    happened) first sleeps ``stall`` seconds — a task stuck on a slow or frozen machine, which a copy
    elsewhere finishes in the usual time."""

    def __init__(self, delay: float, stall: float, stall_on: tuple, marker_dir: str):
        self.delay, self.stall, self.stall_on, self.marker_dir = float(delay), float(stall), tuple(stall_on), marker_dir

    def __call__(self, db):
        db = np.asarray(db, dtype=np.float64)
        last = float(db[-1])
        if last in self.stall_on:
            marker = os.path.join(self.marker_dir, f"stalled-{last!r}")
            try:
                os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                time.sleep(self.stall)
            except FileExistsError:
                pass
        if self.delay:
            time.sleep(self.delay)
        return float(np.mean(db))

    def identity(self):
        return {"name": "traced_sleep_mean", "params": {}}

