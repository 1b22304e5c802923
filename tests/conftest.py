"""Shared fixtures: one embedded loopback Ray per test module that asks for it, a moto S3 server, a
small stored estimate.

The tests are organised by behaviour: ``unit/`` (one module or concern at a time, in process),
``integration/`` (``cli/``, ``cluster/`` — real multi-node clusters on loopback —, ``faults/`` — killed
processes, hostile files, private output —, ``jobs/`` — the jobs and the documentation site run as a
user runs them), ``statistical/`` (the guarantee, property-based inputs, the golden table). Helpers are
in ``support/`` (on pytest's ``pythonpath``), data in ``data/``, child processes' scripts in ``children/``.

Tiers (``tests/README.md``): a test that starts Ray is marked ``ray``, one that starts any other process
``subprocess``, one that takes more than a few seconds ``slow`` (``pyproject.toml``). The unit tier leaves
those out, and the guard at the end of this file fails any test of it that starts Ray or a process anyway.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def ray_session():
    """A real embedded Ray (2 CPUs) bound to 127.0.0.1, started for the module and shut down after."""
    ray = pytest.importorskip("ray")
    from raydp.engine.loopback import LOOPBACK_HOST, loopback_only

    if ray.is_initialized():  # pragma: no cover - another module left a session behind
        ray.shutdown()
    with pytest.MonkeyPatch.context() as mp, loopback_only():
        mp.delenv("RAY_ADDRESS", raising=False)  # start our own, never join an ambient cluster
        ray.init(num_cpus=2, include_dashboard=False, _node_ip_address=LOOPBACK_HOST, log_to_driver=False)
    assert ray.get_runtime_context().gcs_address.startswith("127.0.0.1:")
    yield ray
    ray.shutdown()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_AWS = dict(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")


def start_moto(bucket: str = "raydp") -> tuple[int, subprocess.Popen]:
    """Start a moto S3 server on 127.0.0.1 with ``bucket``; return (port, process). The caller stops it."""
    port = _free_port()
    exe = Path(sys.executable).with_name("moto_server")
    proc = subprocess.Popen([str(exe), "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("moto S3 server did not start")
    os.environ.update(_AWS)  # moto accepts any credentials; pyarrow and boto3 need some
    import boto3

    boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1").create_bucket(Bucket=bucket)
    return port, proc


@pytest.fixture(scope="module")
def s3_server():
    """A moto S3 server on 127.0.0.1 with a bucket 'raydp'; yields its port."""
    pytest.importorskip("moto")
    old = {k: os.environ.get(k) for k in _AWS}
    port, proc = start_moto()
    yield port
    proc.terminate()
    proc.wait(10)
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture
def small_store(tmp_path):
    """A stored estimate (mean of n = 50 Exp(1) records, γ = 0.1) and a private .npy of 50 records."""
    import numpy as np

    import raydp
    from raydp import oracles, targets

    store = tmp_path / "est"
    raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), 50, gamma=0.1, seed=1, store=str(store),
                               progress=False)
    data = tmp_path / "data.npy"
    np.save(data, np.random.default_rng(0).exponential(1.0, 50))
    return store, data


# ----------------------------------------------------------------------------- the unit tier's guard
#
# A run in which no selected test is marked ``ray`` or ``subprocess`` and none lies under ``integration/``
# (the unit tier, or any file or ``-k`` of in-process tests) promises that nothing leaves this process. The
# guard holds every test of such a run to it: one that starts Ray or a child process fails, naming the
# marker it needs, so the tier stays fast and honest as tests are added. Runs that mix tiers (the full
# suite, CI) are not watched: there a module's shared Ray session outlives the test that asked for it, and
# what the full suite runs must not depend on this file.

OUT_OF_PROCESS = ("ray", "subprocess")
INTEGRATION = Path(__file__).resolve().parent / "integration"
# the launches the interpreter reports to audit hooks; multiprocessing's spawn and forkserver and joblib's
# workers call ``_posixsubprocess.fork_exec`` directly, which reports nothing, so that is watched too
_LAUNCH_EVENTS = frozenset({"subprocess.Popen", "os.system", "os.fork", "os.forkpty", "os.posix_spawn",
                            "os.posix_spawnp", "os.exec"})
_GUARD = pytest.StashKey["_UnitTierGuard"]()
# Helpers started once per process and then reused, which only the first test to need one would be blamed
# for: joblib's count of physical cores, platform's processor name, and the template that raydp forks every
# release's sealed evaluation from (raydp/seal.py), its one probe of bubblewrap and ctypes' search for
# libseccomp (ldconfig) — how a release works,
# not a job the test starts.
_ONCE_PER_PROCESS = ("lscpu", "uname", "ldconfig", "from raydp.seal import _template_main",
                     "RAYDP_PROBE raydp-sandbox-probe")
# fixtures that start something out of process: a test that asks for one is marked for it
_FIXTURE_MARKS = {"ray_session": "ray", "s3_server": "subprocess"}


def _out_of_process(item: pytest.Item) -> bool:
    return any(item.get_closest_marker(m) for m in OUT_OF_PROCESS) or item.path.is_relative_to(INTEGRATION)


def _children() -> set[int]:
    """Live children of this process (all its threads); empty where neither /proc nor psutil tells."""
    try:
        pids: set[int] = set()
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/children") as f:
                pids.update(int(p) for p in f.read().split())
        return pids
    except OSError:
        try:
            import psutil
        except ImportError:
            return set()
        return {p.pid for p in psutil.Process().children()}


def _once_per_process(what: str) -> bool:
    command = os.path.basename(what.split(" ", 1)[0])
    return command in _ONCE_PER_PROCESS or any(" " in h and h in what for h in _ONCE_PER_PROCESS)


def _argv(args) -> str:
    if isinstance(args, (str, bytes, os.PathLike)):
        args = [args]
    return " ".join(os.fsdecode(a) for a in args)  # whole: the once-per-process test reads all of it


def _short(text: str) -> str:
    return text if len(text) <= 160 else text[:157] + "..."


class _UnitTierGuard:
    """Records what the running test launches and reports it after each phase (setup, call, teardown)."""

    def __init__(self) -> None:
        spec = importlib.util.find_spec("ray")
        self.ray_dir = str(Path(spec.origin).parent) if spec is not None and spec.origin else None
        self.watching = False
        self.launches: dict[str, None] = {}  # ordered, without repeats
        self.known: set[int] = set()
        sys.addaudithook(self._audit)  # stays for the process; it does nothing unless watching
        import _posixsubprocess

        self._fork_exec = _posixsubprocess.fork_exec
        _posixsubprocess.fork_exec = self._watched_fork_exec
        # with RAY_ADDRESS set, the default backend would send every run to that cluster (a developer's)
        self.env = pytest.MonkeyPatch()
        self.env.delenv("RAY_ADDRESS", raising=False)

    def restore(self) -> None:
        import _posixsubprocess

        _posixsubprocess.fork_exec = self._fork_exec
        self.env.undo()
        self.watching = False

    def _audit(self, event: str, args: tuple) -> None:
        if self.watching and event in _LAUNCH_EVENTS:
            if event == "subprocess.Popen":
                self.launches[_argv(args[1])] = None
            elif event in ("os.fork", "os.forkpty"):
                self.launches["a fork of this process (os.fork, multiprocessing)"] = None
            else:
                self.launches[f"{event} {_argv(args[1] if event == 'os.exec' else args[0])}"] = None

    def _watched_fork_exec(self, args, *rest):
        if self.watching and args:
            self.launches[_argv(args)] = None
        return self._fork_exec(args, *rest)

    def begin(self) -> None:
        self.launches.clear()
        self.known = _children()
        self.watching = True

    def problems(self) -> list[str]:
        """What left this process since the last call, as lines naming the marker each needs."""
        found = []
        ray = sys.modules.get("ray")
        if ray is not None and ray.is_initialized():
            found.append('Ray is initialised in this process: mark the test ray, or, if the default backend '
                         '"auto" chose Ray for a run it timed as long, give the run backend="local" or fewer pairs')
            ray.shutdown()  # so that the next test is judged on what it does itself
        launched = list(self.launches)
        self.launches.clear()
        for what in launched:
            if _once_per_process(what):
                continue
            marker = "ray" if self.ray_dir and self.ray_dir in what else "subprocess"
            found.append(f"it started {_short(what)}: mark the test {marker}")
        now = _children()
        if now - self.known and not launched:  # a child that no launch above explains (C code, a fork server)
            found.append(f"child processes {sorted(now - self.known)} appeared: mark the test subprocess")
        self.known |= now
        return found


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    for item in items:
        for fixture, marker in _FIXTURE_MARKS.items():
            if fixture in getattr(item, "fixturenames", ()) and not item.get_closest_marker(marker):
                item.add_marker(marker)


def pytest_collection_finish(session):
    config = session.config
    if config.option.collectonly or not session.items or any(_out_of_process(i) for i in session.items):
        return
    config.stash[_GUARD] = _UnitTierGuard()
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("unit tier: a test that starts Ray or a child process fails (tests/README.md)")


def pytest_unconfigure(config):
    guard = config.stash.get(_GUARD, None)
    if guard is not None:
        guard.restore()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    guard = item.config.stash.get(_GUARD, None)
    if guard is not None:
        guard.begin()  # before any fixture: a fixture's launches are its test's


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    guard = item.config.stash.get(_GUARD, None)
    if guard is None:
        return report
    found = guard.problems()
    if call.when == "teardown":
        guard.watching = False
    if found:
        text = (f"{item.nodeid} ({call.when}) left the process in the unit tier, which stays in process:\n  "
                + "\n  ".join(found) + "\n(markers: pyproject.toml; tiers: tests/README.md)")
        if report.failed:
            report.sections.append(("unit tier", text))
        else:
            report.outcome, report.longrepr = "failed", text
    return report
