"""Targets used by subprocess tests (importable as ``slow_targets`` with tests/ on PYTHONPATH)."""

import time

import numpy as np


class SlowMean:
    """Mean of the records after a short sleep: slow enough to kill a run halfway."""

    def __init__(self, delay=0.002):
        self.delay = delay

    def __call__(self, db):
        time.sleep(self.delay)
        return float(np.mean(db))

    def identity(self):
        return {"name": "slow_mean", "params": {}}  # delay does not change values


def slow_mean(delay=0.002):
    return SlowMean(delay)


def db_digest(db) -> str:
    """16 hex digits identifying a database (its float64 bytes)."""
    import hashlib

    return hashlib.sha1(np.ascontiguousarray(db, dtype=np.float64).tobytes()).hexdigest()[:16]


TRACE_LINE = 17  # bytes per call in a calls-<pid> file: db_digest + newline


class TracedSlowMean(SlowMean):
    """SlowMean that leaves a trace of where and on what it ran, for fault-injection tests.

    With ``trace_dir`` set, every call appends ``db_digest(db) + "\n"`` to
    ``<trace_dir>/calls-<pid>`` (one line per call, appended atomically; the file's mtime is the
    last call), and the first call in a process writes ``<trace_dir>/node-<pid>`` with the Ray node
    id it runs on ("-" outside Ray). Values and identity are those of SlowMean: a traced run, an
    untraced run and a resumed run are the same run.
    """

    def __init__(self, delay=0.002, trace_dir=None):
        super().__init__(delay)
        self.trace_dir = trace_dir

    def _trace(self, db):
        import os

        pid = os.getpid()
        node_file = os.path.join(self.trace_dir, f"node-{pid}")
        if not os.path.exists(node_file):
            node = "-"
            try:
                import ray

                if ray.is_initialized():
                    node = ray.get_runtime_context().get_node_id()
            except Exception:  # pragma: no cover - tracing must never fail the target
                pass
            with open(node_file, "w") as f:
                f.write(node)
        fd = os.open(os.path.join(self.trace_dir, f"calls-{pid}"), os.O_CREAT | os.O_APPEND | os.O_WRONLY)
        try:
            os.write(fd, (db_digest(db) + "\n").encode())
        finally:
            os.close(fd)

    def __call__(self, db):
        if self.trace_dir:
            self._trace(db)
        return super().__call__(db)


def traced_slow_mean(delay=0.002, trace_dir=None):
    return TracedSlowMean(delay, trace_dir)


class RejectsNegative:
    """Mean of scalar records that raises ``ValueError`` *naming the offending record* when the
    database's last record is negative -- a careless target whose error messages carry data, for
    tests that check raydp keeps such messages out of its output and logs."""

    def __call__(self, db):
        db = np.asarray(db, dtype=np.float64)
        if db[-1] < 0:
            raise ValueError(f"record {db[-1]!r} ({float(db[-1])}) rejected")
        return float(np.mean(db))

    def identity(self):
        return {"name": "rejects_negative_mean", "params": {}}
