"""The private evaluation runs in a bubblewrap sandbox, and nothing the target makes is trusted.

Every target here (``tests/support/hostile_targets.py``) is the mean of the records on public data and
tries a leak only when it sees a marker planted in the private data alone (the oracle never draws it).
Each test failed on the code before the sandbox (the evaluation then ran in a sealed process on the
host, and its answer came back as a pickle): a forged pickle on the evaluation's socket was released as
the records, an exception class named after the data was named in the error, the caller's descriptors
were writable through ``/proc/<pid>/fd``, a ``setsid`` grandchild outlived the release, the target
reached a listening socket, read the caller's credentials from its environment, and left files in
``/tmp`` for the next evaluation. The ``limits=`` and ``respond_after=`` tests could not run there (no
such keyword). The template of the sandbox is started once per process with the environment it then
has, so the environment and ``RAYDP_SANDBOX=off`` are tried in child processes.

Beyond what the sandbox's namespaces obviously cover, three ways out are tried as well: a Unix socket
bound at a path the sandbox shows read-only (a directory on ``sys.path``), the caller's credential in
any ``/proc/<pid>/environ`` the sandbox can read (its pid 1, bubblewrap, included), and a kernel key
(``add_key(2)``), which outlives the evaluation in its user namespace and is listed in the host's
``/proc/keys``.

Without bubblewrap (``raydp.seal.sandbox_status()[0]`` False) these tests fail when ``CI=true`` and are
skipped elsewhere.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import time
import traceback
import uuid

import hostile_targets as h
import numpy as np
import pytest
from cli_util import run_cli
from paths import CHILDREN, REPO, SUPPORT

import raydp
import raydp.seal
from raydp import oracles
from raydp.ledger import Ledger

pytestmark = pytest.mark.subprocess


def need_sandbox() -> None:
    """First line of every test: without the sandbox, fail on CI (it must test it) and skip elsewhere.
    (In the test's body, not a fixture, so that CI reports a failure rather than a setup error.)"""
    status = getattr(raydp.seal, "sandbox_status", None)
    if status is None:
        return  # a raydp without a sandbox at all: the test runs, and fails on what it checks
    ok, why = status()
    if not ok:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the sandbox is unavailable on CI ({why}); CI must test it: install bubblewrap",
                        pytrace=False)
        pytest.skip(f"the sandbox is unavailable here ({why})")


def estimate(target, **keywords):
    return raydp.estimate_sensitivity(target, oracles.normal(0, 1), h.N, m=40, seed=1, progress=False,
                                      backend="local", **keywords)


def release(target, est, data=None, mechanism=None, **keywords):
    data = h.private_data() if data is None else data
    return raydp.sample_then_respond(data, target, mechanism or raydp.Laplace(1.0), estimate=est, **keywords)


def assert_names_no_value(exc: BaseException) -> None:
    text = str(exc)
    assert "61803" not in text and not re.search(r"\d\.\d", text), text


def processes_running(*argv: str) -> list[int]:
    """Pids on the host whose command line is exactly ``argv`` (zombies have none)."""
    want = [a.encode() for a in argv]
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    cmd = f.read().split(b"\0")
            except OSError:
                continue
            if cmd[: len(want)] == want and cmd[len(want):] in ([], [b""]):
                found.append(int(name))
    return found


def gone_within(seconds: float, *argv: str) -> list[int]:
    """``argv``'s processes still running after up to ``seconds``; those are killed (the test's own)."""
    end = time.monotonic() + seconds
    while (left := processes_running(*argv)) and time.monotonic() < end:
        time.sleep(0.05)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return left


# ---------------------------------------------------------------------------------- 1. a forged answer


@pytest.mark.parametrize("forgery", list(h.FORGERS))
def test_a_forged_answer_is_refused_and_counted(forgery, tmp_path):
    """The target writes a message of its own on every socket it holds, then returns the mean: a pickled
    ``("released", records)``, or a well-framed value message of the wrong size, the wrong shape or NaN.
    The records never come back; the release fails as the target's (or returns a value of the mean's
    shape), and the ledger counts it either way."""
    need_sandbox()
    target = h.FORGERS[forgery]
    est = estimate(target)
    ledger = Ledger.create(tmp_path / "ledger.json", epsilon_total=10.0)
    try:
        r = release(target, est, ledger=ledger)
    except raydp.TargetError as exc:
        assert_names_no_value(exc)
        assert [e["status"] for e in ledger.entries()] == ["failed"]
    else:
        value = np.asarray(r.value, dtype=float)
        assert value.shape == (1,), f"the release returned {value.size} numbers"
        assert abs(value[0] - h.MARK) > 1.0
        assert [e["status"] for e in ledger.entries()] == ["released"]
    assert ledger.spent() == (1.0, 0.0)


# ---------------------------------------------------------------------------------- 2. an exception's name


def _hex_windows(data) -> set[str]:
    hexed = h.hex_name(data)[1:]
    return {hexed[i: i + 8] for i in range(len(hexed) - 7)}


def _traces(exc: BaseException, windows: set[str]) -> list[str]:
    """Where, in the exception chain (messages, args, notes, class names, the traceback frames' locals
    outside this file), any 8 hex digits of the data's bytes appear."""
    found: list[str] = []
    stack: list = [exc]

    def check(where: str, value, depth: int = 0) -> None:
        if isinstance(value, (str, bytes)):
            text = value if isinstance(value, str) else value.decode("latin-1")
            if any(w in text for w in windows):
                found.append(where)
        if any(w in type(value).__name__ for w in windows):
            found.append(f"{where}: an object of the target's class")
        if isinstance(value, BaseException):
            stack.append(value)
        elif depth < 3 and isinstance(value, dict):
            for k, v in value.items():
                check(where, k, depth + 1)
                check(where, v, depth + 1)
        elif depth < 3 and isinstance(value, (list, tuple, set, frozenset)):
            for v in value:
                check(where, v, depth + 1)

    seen: set[int] = set()
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        name = type(e).__name__
        check(f"{name}: class", name)
        check(f"{name}: message", str(e))
        check(f"{name}: args", e.args)
        check(f"{name}: notes", getattr(e, "__notes__", []))
        check(f"{name}: formatted", "".join(traceback.format_exception(e, chain=False)))
        for frame, _ in traceback.walk_tb(e.__traceback__):
            if frame.f_code.co_filename == __file__:
                continue
            for key, value in frame.f_locals.items():
                check(f"{name}: {frame.f_code.co_name}() local {key}", value)
        stack += [e.__context__, e.__cause__]
    return found


def test_an_exception_named_after_the_data_leaves_nothing_of_it():
    need_sandbox()
    data = h.private_data()
    windows = _hex_windows(data)
    est = estimate(h.hex_name_raiser)
    with pytest.raises(raydp.RaydpError) as info:
        release(h.hex_name_raiser, est, data)
    assert isinstance(info.value, raydp.TargetError), repr(info.value)
    assert _traces(info.value, windows) == []


def test_the_cli_prints_nothing_of_an_exception_named_after_the_data(tmp_path, capsys):
    need_sandbox()
    data = h.private_data()
    est = estimate(h.hex_name_raiser, store=str(tmp_path / "est"))
    np.save(tmp_path / "private.npy", data)
    code, out, err = run_cli(["release", "--store", tmp_path / "est", "--data", tmp_path / "private.npy",
                              "--target", "hostile_targets:hex_name_raiser", "--gamma", repr(est.gamma),
                              "--epsilon", "1"], capsys)
    assert code == 2 and err.startswith("raydp: error: "), (code, out, err)
    assert not [w for w in _hex_windows(data) if w in out + err], err


# ---------------------------------------------------------------------------------- 3. /proc of the caller


def test_the_callers_descriptors_are_out_of_reach(tmp_path):
    need_sandbox()
    held = tmp_path / "held.txt"
    with open(held, "w+") as f:
        f.write("the caller's own\n")
        f.flush()
        target = h.proc_fd_writer(os.getpid(), f.fileno())
        release(target, estimate(target))  # the target swallows its OSError: the release succeeds
    assert held.read_text() == "the caller's own\n"


# ---------------------------------------------------------------------------------- 4. setsid descendants


def test_a_descendant_that_left_the_session_dies_with_the_evaluation():
    """``Popen(start_new_session=True)`` and a double fork with ``setsid``: no ``sleep 31.4159`` runs on the
    host within 1 s of the release's return."""
    need_sandbox()
    assert processes_running("sleep", h.SLEEP_ARG) == []
    release(h.setsid_sleepers, estimate(h.setsid_sleepers))
    assert gone_within(1.0, "sleep", h.SLEEP_ARG) == []


# ---------------------------------------------------------------------------------- 5. the network


@pytest.mark.parametrize("kind", ["tcp", "abstract-unix"])
def test_nothing_reaches_a_listening_socket(kind):
    need_sandbox()
    if kind == "tcp":
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.bind(("127.0.0.1", 0))
        target = h.tcp_sender(srv.getsockname()[1])
    else:
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        name = f"\0raydp-test-{uuid.uuid4().hex}"
        srv.bind(name)
        target = h.unix_sender(name)
    with srv:
        srv.listen(8)
        release(target, estimate(target))  # the target swallows its OSError: the release succeeds
        _nothing_arrives(srv)


def _nothing_arrives(srv) -> None:
    """Fails if a connection reaches the listening ``srv`` within a second."""
    srv.settimeout(1.0)
    try:
        conn, _ = srv.accept()
    except socket.timeout:
        return
    with conn:
        conn.settimeout(1.0)
        got = conn.recv(100)
    pytest.fail(f"a connection from the evaluation arrived ({got!r})")


def test_nothing_reaches_a_unix_socket_at_a_path_the_sandbox_shows(tmp_path, monkeypatch):
    """A directory on sys.path (or the working directory) is shown read-only in the sandbox; a socket
    bound there must still be out of reach (connecting to a socket is no write to the filesystem)."""
    need_sandbox()
    monkeypatch.syspath_prepend(str(tmp_path))
    path = str(tmp_path / "s")
    target = h.unix_sender(path)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as srv:
        srv.bind(path)
        srv.listen(8)
        release(target, estimate(target))
        _nothing_arrives(srv)


# ---------------------------------------------------------------------------------- 6, 10. child processes


@pytest.fixture(scope="module")
def children():
    """``sandbox_child.py env`` (a credential in os.environ before its first release) and ``off``
    (RAYDP_SANDBOX=off), run at once: {mode: (exit status, parsed stdout or None, stderr)}; not run
    without the sandbox (the tests then skip, or fail on CI)."""
    status = getattr(raydp.seal, "sandbox_status", None)
    if status is not None and not status()[0]:
        return {}
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAYDP_SANDBOX", "AWS_SECRET_ACCESS_KEY")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(SUPPORT)])
    procs = {mode: subprocess.Popen([sys.executable, str(CHILDREN / "sandbox_child.py"), mode], cwd=str(REPO),
                                    env=dict(env, RAYDP_SANDBOX="off") if mode == "off" else env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for mode in ("env", "off")}
    results = {}
    for mode, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        lines = out.strip().splitlines()
        try:
            parsed = json.loads(lines[-1]) if lines else None
        except ValueError:
            parsed = None
        results[mode] = (proc.returncode, parsed, err)
    return results


def test_the_environment_is_scrubbed(children):
    need_sandbox()
    code, out, err = children["env"]
    assert code == 0 and out is not None, err[-3000:]
    assert out["environ"] == "ok", "the target saw the credential (or a variable off the allow-list)"


def test_no_credential_is_readable_through_proc(children):
    """Not in os.environ, nor in any /proc/<pid>/environ the sandbox shows (its pid 1 included)."""
    need_sandbox()
    code, out, err = children["env"]
    assert code == 0 and out is not None, err[-3000:]
    assert out["proc_environ"] == "ok", "the target read the credential in a /proc/<pid>/environ"


# ---------------------------------------------------------------------------------- 7. /tmp and the like


def test_nothing_an_evaluation_writes_is_found_by_the_next():
    """Release 1 writes the marker into /tmp and /dev/shm and fails if a write into the working directory
    succeeds; release 2 (same process, same pool) fails if either file exists. Neither is on the host."""
    need_sandbox()
    token = uuid.uuid4().hex[:12]
    host = [f"/tmp/leak-{token}", f"/dev/shm/leak-{token}", os.path.join(os.getcwd(), f"leak-{token}")]
    writer, checker = h.tmp_writer(token), h.tmp_checker(token)
    try:
        release(writer, estimate(writer))
        assert [p for p in host if os.path.exists(p)] == []
        release(checker, estimate(checker))
    finally:
        for p in host:
            if os.path.exists(p):
                os.unlink(p)


def test_a_kernel_key_is_neither_kept_for_the_next_evaluation_nor_shown_to_the_host():
    """Release 1 adds a key named after the marker to its user keyring (add_key(2)); release 2 fails if it
    finds it; the host's /proc/keys must not list it."""
    need_sandbox()
    if h.KEY_SYSCALLS is None or not os.path.exists("/proc/keys"):
        pytest.skip("no kernel keyrings here, or their system call numbers are not known for this machine")
    description = f"raydp-{uuid.uuid4().hex[:12]}-{h.MARKER}"
    adder, finder = h.key_adder(description), h.key_finder(description)
    problems = []
    try:
        release(adder, estimate(adder))
        with open("/proc/keys") as f:
            if h.MARKER in f.read():
                problems.append("the host's /proc/keys lists the key named after the private data")
        try:
            release(finder, estimate(finder))
        except raydp.TargetError:
            problems.append("the next evaluation found the key")
    finally:
        key = h.key_search(description)
        if key >= 0:  # added to this process's own keyring (no sandbox): removed
            ctypes, libc = h.keyctl()
            libc.syscall(h.KEY_SYSCALLS[1], ctypes.c_int(h.KEYCTL_INVALIDATE), ctypes.c_int(int(key)))
    assert problems == []


# ---------------------------------------------------------------------------------- 10. the fallback


def test_without_the_sandbox_the_release_says_so(children):
    need_sandbox()
    code, out, err = children["off"]
    assert code == 0 and out is not None, err[-3000:]
    assert out["releases"] == ["ok", "ok"]
    assert out["warnings"] == 1, out
    assert all("sealed, not sandboxed" in s for s in out["statements"]), out["statements"]
    data = h.private_data()
    data[3] = 0.5  # no marker: the mean
    r = release(h.forge_nan, estimate(h.forge_nan), data)
    assert "sandbox" in r.statement() and "not sandboxed" not in r.statement(), r.statement()


# ---------------------------------------------------------------------------------- 9. timing


# Pearson's r of n = 24 pairs under independence: |r| exceeds r_crit = t / sqrt(n - 2 + t²), t the
# two-sided α = 0.001 quantile of Student's t with 22 degrees of freedom (t = 3.792), with probability
# 0.001; r_crit = 0.6287.
N_TIMED = 24
R_CRIT = 0.6287


def _pearson(x, y) -> float:
    x, y = np.asarray(x, float) - np.mean(x), np.asarray(y, float) - np.mean(y)
    return float(np.sum(x * y) / math.sqrt(np.sum(x * x) * np.sum(y * y)))


def test_respond_after_hides_how_long_the_target_ran():
    """A target that sleeps 0.02 s per unit of its data's mean (0..10: up to 0.2 s; not below 0.5, so the
    public replay before each release is quick), released 24 times:
    with respond_after=0.4 every release takes at least 0.4 s, their median at most 0.55 s (what follows the
    deadline is the caller's own work: a loaded host delays single releases, not the median) and the times do
    not correlate with the means; without it (the control, which shows the channel exists) they do, r > 0.9."""
    need_sandbox()
    from scipy import stats

    assert abs(R_CRIT - stats.t.ppf(1 - 0.001 / 2, N_TIMED - 2)
               / math.sqrt(N_TIMED - 2 + stats.t.ppf(1 - 0.001 / 2, N_TIMED - 2) ** 2)) < 1e-4
    rng = np.random.default_rng(11)
    means = np.linspace(0.0, 10.0, N_TIMED)
    sets = []
    for m in means:
        z = rng.normal(size=h.N)
        sets.append(z - z.mean() + m)
    order = rng.permutation(N_TIMED)  # time order unrelated to the mean: drift in load is not a signal
    est = estimate(h.mean_paced)

    def wall_times(**keywords):
        out = np.empty(N_TIMED)
        for i in order:
            t0 = time.perf_counter()
            release(h.mean_paced, est, sets[i], **keywords)
            out[i] = time.perf_counter() - t0
        return out

    for _ in range(2):  # a template started, and the modules the caller loaded since imported in it
        release(h.mean_paced, est, sets[0], respond_after=0.4)
    hidden = wall_times(respond_after=0.4)
    shown = wall_times()
    assert abs(_pearson(means, hidden)) < R_CRIT, (_pearson(means, hidden), hidden.round(3).tolist())
    early = [(int(np.flatnonzero(order == i)[0]), round(t, 3)) for i, t in enumerate(hidden)
             if t < 0.4]  # (its place in time order, its time)
    assert early == [], hidden.round(3).tolist()
    assert np.median(hidden) <= 0.4 + 0.15, hidden.round(3).tolist()
    assert _pearson(means, shown) > 0.9, (_pearson(means, shown), shown.round(3).tolist())


def test_a_target_past_respond_after_is_stopped_and_counted(tmp_path):
    need_sandbox()
    target = h.sleeper(1.0)
    est = estimate(target)
    ledger = Ledger.create(tmp_path / "ledger.json", epsilon_total=10.0)
    t0 = time.perf_counter()
    with pytest.raises(raydp.TargetError) as info:
        release(target, est, respond_after=0.3, ledger=ledger)
    elapsed = time.perf_counter() - t0
    assert 0.3 <= elapsed < 0.3 + 0.4, elapsed
    assert_names_no_value(info.value)
    assert [e["status"] for e in ledger.entries()] == ["failed"] and ledger.spent() == (1.0, 0.0)


# ---------------------------------------------------------------------------------- 8. limits


def test_a_fork_bomb_is_capped_and_leaves_nothing_running():
    """Up to 500 sleeping children under processes=32: the release fails, or its value (the mean plus how
    many children were started, at ε = 1e6) shows no more than 32; none runs on the host afterwards."""
    need_sandbox()
    data = h.private_data()
    try:
        r = release(h.fork_bomb, estimate(h.fork_bomb), data, mechanism=raydp.Laplace(1e6),
                    limits=raydp.seal.Limits(processes=32))
    except raydp.TargetError as exc:
        assert_names_no_value(exc)
    else:
        started = float(np.asarray(r.value).ravel()[0]) - float(np.mean(data))
        assert started <= 32.5, f"{started:.0f} children were running at once"
    assert gone_within(1.0, "sleep", h.FORK_ARG) == []


@pytest.mark.parametrize("limit", ["memory", "cpu_seconds", "wall_seconds"])
def test_a_limit_hit_on_the_private_data_is_a_failure(limit):
    """2 GiB under memory=512 MiB, a busy loop under cpu_seconds=1, time.sleep(30) under wall_seconds=1
    (which fails within 3 s of the call): a TargetError that names no value, raised by the evaluation on
    the private data (the public load, replay and probe ran under the same limits, and the same target
    is released under them on data without the marker)."""
    need_sandbox()
    limits, target = {"memory": (raydp.seal.Limits(memory=512 << 20), h.allocator),
                      "cpu_seconds": (raydp.seal.Limits(cpu_seconds=1), h.busy),
                      "wall_seconds": (raydp.seal.Limits(wall_seconds=1), h.sleeper(30.0))}[limit]
    est = estimate(target)
    unmarked = h.private_data()
    unmarked[3] = 0.5
    # Without the marker the target is the mean: under the same limits that is released (so the failure
    # below is the target's doing), and the template for these limits is started before the clock runs.
    release(target, est, unmarked, limits=limits)
    t0 = time.perf_counter()
    with pytest.raises(raydp.TargetError) as info:
        release(target, est, limits=limits)
    elapsed = time.perf_counter() - t0
    assert_names_no_value(info.value)
    assert not re.search(r"loaded|replaying|public", str(info.value)), str(info.value)
    assert elapsed < (3.0 if limit == "wall_seconds" else 15.0), elapsed
