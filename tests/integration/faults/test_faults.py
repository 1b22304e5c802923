"""Fault injection on real Ray processes (issue 6, parts 1 and 5), and what leaks where.

1. A worker *node* of a 3-node ``raydp.local_cluster`` cluster is SIGKILLed (raylet, object store,
   agents, task workers) while a subprocess driver streams a run into a store: Ray reschedules the
   lost tasks on the surviving nodes and the run ends with the clean G sample, each pair once.
2. A driver with an *embedded* Ray (``backend="ray"``, no address) is SIGKILLed mid-run; its
   orphaned Ray processes (Ray's dashboard and runtime-env agents outlive it) are reaped by the
   test; a resumed run (also on Ray) evaluates exactly the databases of the missing pairs.
3. Private data never reaches output or logs: a marker value planted in a release's private data
   file and in a bootstrap oracle's file is searched (several textual forms and the raw float64
   bytes) in stdout/stderr, the store's non-data files and the Ray session's files — including a
   release whose target raises on the private data quoting a record, and a strict-mode Ray run
   whose target does the same (both leaked until raydp withheld such messages).
4. Every TCP LISTEN socket of a running local cluster (and of an embedded Ray) is on 127.0.0.1,
   and the job API refuses an unauthenticated raw HTTP request.

Drivers always run in subprocesses (``start_new_session=True``), so this process never holds a
Ray connection. Other Ray instances on the machine are never touched: processes are only ever
killed by recorded process groups (raydp.local_cluster) or by session id *and* a reference to our
private RAY_TMPDIR (command line, environment or an open file).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

import raydp
from raydp import oracles
from raydp.engine.blocks import BlockLayout
from raydp.store import Store

import slow_targets  # noqa: E402
from paths import CHILDREN  # noqa: E402
from paths import SUPPORT as HERE  # noqa: E402 - what a child needs on PYTHONPATH: slow_targets
from cluster_util import check_locked_down, listening_sockets, live_pids_in_sessions, local_cluster  # noqa: E402

pytest.importorskip("ray")

DRIVER = str(CHILDREN / "fault_driver.py")  # the driver of every Ray run here


def _base_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS", "RAY_AUTH_TOKEN_PATH")}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _clean(n, m, gamma, seed, block_size):
    """The reference: the same target, in process (backend="local"), no store, whole sample."""
    return raydp.estimate_sensitivity(slow_targets.traced_slow_mean(0.0), oracles.exponential(1.0), n, m=m,
                                      gamma=gamma, seed=seed, block_size=block_size, backend="local",
                                      keep_sample=True, progress=False)


def _shard_paths(uri) -> list[Path]:
    return sorted((Path(uri) / "shards").glob("shard-*.parquet"))


def _store_rows(uri) -> tuple[np.ndarray, np.ndarray, dict[str, set]]:
    """(block, pair) of every stored row, and the set of blocks of each shard file."""
    st = Store.open(str(uri))
    st.load()  # a shard is read for the run held in meta.json
    blocks, pairs, per_shard = [], [], {}
    for p in _shard_paths(uri):
        _, b, pr, _ = st.read_shard(p.name)
        blocks.append(b)
        pairs.append(pr)
        per_shard[p.name] = {int(x) for x in np.unique(b)}
    cat = (lambda xs: np.concatenate(xs) if xs else np.empty(0, np.int64))
    return cat(blocks), cat(pairs), per_shard


def _trace(trace_dir: Path, *, digests: bool = False) -> dict[int, dict]:
    """{pid: {"node": id, "calls": n, "last": mtime[, "dbs": [digest, ...]]}} from TracedSlowMean."""
    out = {}
    for f in trace_dir.glob("calls-*"):
        pid = int(f.name.split("-", 1)[1])
        try:
            st = f.stat()
            node = (trace_dir / f"node-{pid}").read_text()
            text = f.read_text() if digests else ""
        except OSError:
            continue
        out[pid] = {"node": node, "calls": st.st_size // slow_targets.TRACE_LINE, "last": st.st_mtime}
        if digests:
            out[pid]["dbs"] = text.split()
    return out


def _pair_digests(n, m, seed, block_size, blocks) -> set[str]:
    """db_digest of D and D' of every pair of ``blocks``, drawn exactly as the sampler draws them."""
    from raydp.engine.blocks import PairJob

    job = PairJob(target=None, oracle=oracles.exponential(1.0), mechanism=None, n=n, m=m, seed=seed,
                  block_size=block_size, out_dim=1)
    out = set()
    for b in blocks:
        d, d_prime = job.neighbours(job.draw(b)[0])
        out.update(slow_targets.db_digest(x) for x in (*d, *d_prime))
    return out


def _read_lines(path: Path, prefix: str) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line[len(prefix):]) for line in path.read_text(errors="replace").splitlines()
            if line.startswith(prefix)]


def _wait_for_line(path: Path, prefix: str, proc, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = _read_lines(path, prefix)
        if got:
            return got[0]
        assert proc.poll() is None, f"driver exited ({proc.returncode}) early:\n{path.read_text()[-4000:]}"
        time.sleep(0.05)
    raise AssertionError(f"no {prefix!r} line from the driver in {timeout}s:\n{path.read_text()[-4000:]}")


def _mentions(pid: int, tag: str) -> bool:
    """Whether process ``pid`` refers to ``tag`` (our private RAY_TMPDIR): in its command line, its
    environment, or a path it has open. (Ray's agents and workers rewrite their process title over
    argv *and* environ -- "ray::DashboardAgent" -- so the open log files are what identifies them.)"""
    needle = tag.encode()
    for name in ("cmdline", "environ"):
        try:
            if needle in Path(f"/proc/{pid}/{name}").read_bytes():
                return True
        except OSError:
            pass
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(tag + "/"):
                return True
        except OSError:
            pass
    return False


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def _ours(sid: int, tag: str) -> list[int]:
    """Live processes of session ``sid`` (a driver started with start_new_session=True) that refer
    to our private RAY_TMPDIR ``tag``: the driver and the embedded Ray it started."""
    return [p for p in live_pids_in_sessions({sid}) if _mentions(p, tag)]


def _reap(sid: int, tag: str, timeout: float = 20) -> list[str]:
    """SIGKILL what is left of a driver's session (see _ours) until nothing is; return their names."""
    killed = []
    deadline = time.monotonic() + timeout
    while True:
        pids = _ours(sid, tag)
        if not pids:
            return killed
        if time.monotonic() > deadline:
            raise AssertionError(f"processes of session {sid} survive SIGKILL: {pids}")
        for p in pids:
            killed.append(f"{_comm(p)}[{p}]")
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)


# ============================================================================ 2. driver killed

N2, M2, GAMMA2, SEED2, BLOCK2 = 30, 1000, 0.1, 17, 10  # 100 blocks of 10 pairs


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.subprocess
def test_ray_driver_killed_mid_run_then_resumed(tmp_path):
    """Embedded Ray driver SIGKILLed once >= 3 shards are stored; resume on Ray = the clean run."""
    uri = tmp_path / "store"
    trace1, trace2 = tmp_path / "trace1", tmp_path / "trace2"
    trace1.mkdir()
    trace2.mkdir()
    total_blocks = BlockLayout(M2, BLOCK2).count
    ray_tmp = tempfile.mkdtemp(prefix="rf-", dir="/tmp")  # short: Unix socket paths < 108 bytes
    env = _base_env(RAY_TMPDIR=ray_tmp)

    def cfg(delay, trace, resume):
        return json.dumps(dict(address=None, cpus=2, delay=delay, trace=str(trace), n=N2, m=M2, gamma=GAMMA2,
                               seed=SEED2, block_size=BLOCK2, store=str(uri), resume=resume,
                               engine={"group_size": 2}))  # 2 blocks (40 target calls) per task

    sids: list[int] = []
    t0 = time.monotonic()
    try:
        out1 = tmp_path / "driver1.out"
        with open(out1, "w") as f:
            proc = subprocess.Popen([sys.executable, DRIVER, cfg(0.01, trace1, False)], env=env,
                                    stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        sids.append(proc.pid)
        info = _wait_for_line(out1, "DRIVER ", proc, timeout=120)
        assert info["session_dir"].startswith(ray_tmp + "/")  # the embedded Ray is ours alone
        deadline = time.monotonic() + 120
        while len(_shard_paths(uri)) < 3:
            assert proc.poll() is None, f"driver ended before the kill:\n{out1.read_text()[-4000:]}"
            assert time.monotonic() < deadline, "no 3 shards in 120 s"
            time.sleep(0.02)
        # (4, embedded) while it runs: every listening socket of the embedded Ray is on loopback
        embedded_socks = listening_sockets(_ours(proc.pid, ray_tmp))
        assert proc.poll() is None
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        t_kill, t_killed = time.time(), time.monotonic() - t0

        # The orphans: Ray's GCS and raylet die with the driver (PR_SET_PDEATHSIG), the task
        # workers shortly after; the dashboard/runtime-env agents stay. Reap whatever is left.
        time.sleep(1.0)
        leftovers = _reap(proc.pid, ray_tmp)
        assert not _ours(proc.pid, ray_tmp)
        print(f"\n[driver kill] orphans reaped 1 s after SIGKILL: {leftovers or 'none'}")

        # What the killed run left: whole shards only (a torn one would be a hidden .tmp file).
        before = {p.name: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns) for p in _shard_paths(uri)}
        _, p_before, per_shard_before = _store_rows(uri)
        blocks_before = set().union(*per_shard_before.values())
        assert 3 <= len(blocks_before) < total_blocks, "not killed mid-run"
        assert p_before.size == np.unique(p_before).size == sum(
            min(BLOCK2, M2 - b * BLOCK2) for b in blocks_before)
        calls1 = _trace(trace1)
        assert sum(v["calls"] for pid, v in calls1.items() if pid != proc.pid) > 0

        # Resume on Ray, in a new driver (no delay: values do not depend on it).
        out2 = tmp_path / "driver2.out"
        with open(out2, "w") as f:
            proc2 = subprocess.Popen([sys.executable, DRIVER, cfg(0.0, trace2, True)], env=env,
                                     stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        sids.append(proc2.pid)
        rc2 = proc2.wait(timeout=300)
        t_resumed = time.monotonic() - t0
        assert rc2 == 0, out2.read_text()[-4000:]
        result = _read_lines(out2, "RESULT ")[-1]
        # a driver that exits normally shuts its embedded Ray down (after a short grace)
        grace = time.monotonic() + 15
        while _ours(proc2.pid, ray_tmp) and time.monotonic() < grace:
            time.sleep(0.2)
        t_grace = time.monotonic() - t0 - t_resumed
        left2 = [f"{_comm(p)}[{p}]" for p in _ours(proc2.pid, ray_tmp)]
        assert not left2, f"a normally finished driver left Ray processes behind: {left2}"
    finally:
        for sid in sids:  # whatever happened above: nothing of our drivers stays alive
            _reap(sid, ray_tmp)
        import shutil

        shutil.rmtree(ray_tmp, ignore_errors=True)

    clean = _clean(N2, M2, GAMMA2, SEED2, BLOCK2)
    stored = raydp.load_estimate(str(uri))
    np.testing.assert_array_equal(stored.sample, clean.sample)  # bit for bit
    assert stored.sensitivity == clean.sensitivity and result["delta"] == clean.sensitivity.hex()
    assert stored.provenance() == clean.provenance()

    # exactly m rows, each pair once; finished blocks were not recomputed:
    _, p_all, per_shard = _store_rows(uri)
    assert p_all.size == M2 and np.array_equal(np.sort(p_all), np.arange(M2))
    after = {p.name: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns) for p in _shard_paths(uri)}
    assert all(after.get(name) == v for name, v in before.items()), "a shard of the killed run changed"
    new_blocks = [b for name, bs in per_shard.items() if name not in before for b in bs]
    assert len(new_blocks) == len(set(new_blocks)) and not set(new_blocks) & blocks_before
    assert set(new_blocks) | blocks_before == set(range(total_blocks))
    # ... and the resumed run evaluated the target on exactly the databases of the missing pairs
    # (by content digest: robust to Ray retrying a task, e.g. after an OOM kill on a busy machine)
    calls2 = _trace(trace2, digests=True)
    # the driver: the probe database, and the stored witness pairs it replays (two databases each)
    # before it trusts the stored blocks
    replayed = result["replayed"]
    assert replayed >= 1
    assert [v["calls"] for pid, v in calls2.items() if pid == proc2.pid] == [1 + 2 * replayed]
    evaluated = [h for pid, v in calls2.items() if pid != proc2.pid for h in v["dbs"]]
    stored_dbs = _pair_digests(N2, M2, SEED2, BLOCK2, blocks_before)
    missing_dbs = _pair_digests(N2, M2, SEED2, BLOCK2, set(range(total_blocks)) - blocks_before)
    driver_dbs = [h for pid, v in calls2.items() if pid == proc2.pid for h in v["dbs"]]
    assert len(set(driver_dbs) & stored_dbs) >= 1 and not set(driver_dbs) & missing_dbs
    assert not set(evaluated) & stored_dbs, "the resumed run evaluated pairs that were already stored"
    assert set(evaluated) == missing_dbs
    worker_calls = len(evaluated)  # == 2 * missing pairs unless Ray retried a task
    assert worker_calls >= 2 * (M2 - p_before.size)
    assert min(v["last"] for v in calls2.values()) > t_kill

    bad = [s for s in embedded_socks if not s.loopback_v4]
    print(f"[driver kill] {len(blocks_before)}/{total_blocks} blocks stored at the kill; resumed run: "
          f"{worker_calls} worker calls for {M2 - p_before.size} pairs; killed at {t_killed:.1f}s, resumed "
          f"run done at {t_resumed:.1f}s (its Ray gone {t_grace:.1f}s later); embedded Ray listening: "
          + ", ".join(f"{s.comm}={s.ip}:{s.port}" for s in embedded_socks))
    assert embedded_socks, "found no listening socket of the embedded Ray (the check would be vacuous)"
    assert not bad, f"embedded Ray listens beyond loopback: {bad}"


# ============================================================================ 3. no private data in logs

MARKER = -73519.86420753  # negative and 14 digits: no noisy release here prints anything like it


def _needles(x: float) -> dict[str, bytes]:
    forms = {
        "repr": repr(x), "str": str(x), "%g": "%g" % x, "%f": "%f" % x, "%.2f": "%.2f" % x,
        "%.3e": "%.3e" % x, "%.8e (numpy array print)": "%.8e" % x, "np.float64 repr": repr(np.float64(x)),
    }
    out = {k: v.encode() for k, v in forms.items()}
    out["float64 LE bytes"] = struct.pack("<d", x)
    out["float64 BE bytes"] = struct.pack(">d", x)
    return out


NEEDLES = _needles(MARKER)


def _hits(data: bytes, where: str) -> list[str]:
    return [f"{where}: {name} {needle!r}" for name, needle in NEEDLES.items() if needle in data]


def _scan_tree(root: Path, *, skip=lambda p: False) -> tuple[list[str], int, int]:
    """(hits, files, bytes) over the regular files under root."""
    hits, files, size = [], 0, 0
    for p in sorted(root.rglob("*")):
        if not p.is_file() or p.is_symlink() or skip(p):
            continue
        try:
            data = p.read_bytes()
        except OSError:
            continue
        files += 1
        size += len(data)
        hits += _hits(data, str(p))
    return hits, files, size


def _write_data(tmp_path: Path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(1)
    public = rng.exponential(1.0, 60)
    public[17] = MARKER  # the bootstrap oracle draws it ~ once per 60 records
    private = rng.exponential(1.0, 40)
    private[5] = MARKER  # not the last record: the careless target accepts this database
    paths = tmp_path / "public.parquet", tmp_path / "private.parquet"
    for path, x in zip(paths, (public, private)):
        pq.write_table(pa.table({"x": x}), path)
    return paths


def _cli(args, env, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "raydp.cli", *map(str, args)], env=env, text=True,
                          capture_output=True, timeout=timeout, check=False)


TARGET_ARGS = ["--target", "slow_targets:RejectsNegative", "--target-args", "{}"]


def test_needles_find_the_marker():
    """The scanner is not blind: it finds each form where the marker is, and nothing in noise."""
    assert len(_hits(f"x {MARKER!r} y".encode(), "t")) >= 2
    assert _hits(np.array([1.0, MARKER]).tobytes(), "t") == ["t: float64 LE bytes " + repr(NEEDLES["float64 LE bytes"])]
    assert "-7.35198642e+04" in np.array2string(np.array([MARKER, 1.0]))
    noisy = MARKER / 40 + np.random.default_rng(0).laplace(0, 10, 1000)  # what a release prints
    assert not _hits(" ".join(map(repr, noisy)).encode(), "t")


def test_release_error_on_private_data_does_not_echo_it(tmp_path):
    public, _ = _write_data(tmp_path)
    env = _base_env()
    store = tmp_path / "est"
    p = _cli(["estimate", *TARGET_ARGS, "--oracle", "raydp.oracles:bootstrap", "--oracle-args",
              json.dumps({"source": str(public)}), "--n", 40, "--m", 600, "--gamma", 0.2, "--seed", 3,
              "--store", store, "--quiet"], env)
    assert p.returncode == 0, p.stderr
    import pyarrow as pa
    import pyarrow.parquet as pq

    private = np.random.default_rng(2).exponential(1.0, 40)
    private[-1] = MARKER  # the target raises on this database, naming the record
    pq.write_table(pa.table({"x": private}), tmp_path / "private_last.parquet")
    r = _cli(["release", "--store", store, "--data", tmp_path / "private_last.parquet", *TARGET_ARGS,
              "--epsilon", 1.0, "--gamma", 0.2], env)
    assert r.returncode == 2  # refused, as it should be
    assert not _hits((r.stdout + r.stderr).encode(), "release stderr"), r.stderr


# ============================================================================ cluster tests

FAST_HC = {"RAY_health_check_period_ms": "500", "RAY_health_check_failure_threshold": "3"}


@pytest.fixture(scope="module")
def cluster():
    """Head + 2 worker nodes (1 CPU each) from raydp.local_cluster; tests/ on every node's
    PYTHONPATH (task workers import slow_targets); node death noticed in ~2 s."""
    extra = dict(FAST_HC, PYTHONPATH=_base_env()["PYTHONPATH"])
    with local_cluster(workers=2, cpus_per_node=1, extra_env=extra) as c:
        yield c


# ---------------------------------------------------------------------------- 4. locked cluster


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.subprocess
def test_cluster_listens_on_loopback_only_and_job_api_needs_token(cluster):
    check_locked_down(cluster)


# ---------------------------------------------------------------------------- 3. logs


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.subprocess
def test_no_private_data_in_output_store_or_ray_logs(tmp_path, cluster):
    public, private = _write_data(tmp_path)
    env = dict(cluster.env, PYTHONPATH=_base_env()["PYTHONPATH"])
    store = tmp_path / "est"
    common = [*TARGET_ARGS, "--oracle", "raydp.oracles:bootstrap", "--oracle-args",
              json.dumps({"source": str(public)}), "--n", 40, "--m", 600, "--gamma", 0.2, "--seed", 3,
              "--backend", "ray", "--address", cluster.address]
    outputs = []
    # a Ray run with failing pairs (the target raises, naming the record, on ~3% of pairs)
    est = _cli(["estimate", *common, "--store", store, "--json"], env)
    outputs.append(("estimate", est))
    assert est.returncode == 0, est.stderr[-3000:]
    d = json.loads(est.stdout.strip().splitlines()[-1])
    assert d["failures"] > 0 and d["failure_kinds"] == {"target raised": d["failures"]}
    assert np.isfinite(d["sensitivity"])
    # the release on the private file (marker inside), with the Ray-made estimate
    rel = _cli(["release", "--store", store, "--data", private, *TARGET_ARGS, "--epsilon", 1.0, "--gamma", 0.2],
               env)
    outputs.append(("release", rel))
    assert rel.returncode == 0, rel.stderr
    released = float(rel.stdout.splitlines()[0])
    assert np.isfinite(released) and "random differential privacy" in rel.stdout
    rel_json = _cli(["release", "--store", store, "--data", private, *TARGET_ARGS, "--epsilon", 1.0, "--gamma", 0.2,
                     "--json"], env)
    outputs.append(("release --json", rel_json))
    assert rel_json.returncode == 0, rel_json.stderr

    hits, n_out = [], 0
    for name, p in outputs:
        for stream in ("stdout", "stderr"):
            data = getattr(p, stream).encode()
            n_out += len(data)
            hits += _hits(data, f"{name} {stream}")
    # positive control: the data files themselves hold the marker (raw float64)
    assert _hits(private.read_bytes(), "private") and _hits(public.read_bytes(), "public")
    # witnesses.npz holds oracle records by design (the witness pairs' databases, replayed at every reuse):
    # rows of the public file, which holds the marker too. It holds nothing else.
    import pyarrow.parquet as pq

    with np.load(store / "witnesses.npz", allow_pickle=False) as w:
        assert set(np.unique(w["records"])) <= set(pq.read_table(public).column("x").to_numpy())
    store_hits, store_files, store_bytes = _scan_tree(
        store, skip=lambda p: (p.parent.name == "shards" and p.suffix == ".parquet") or p.name == "witnesses.npz")
    assert (store / "meta.json").exists() and (store / "result.json").exists()
    session = cluster.session_dir
    assert session is not None and (session / "logs").is_dir()
    time.sleep(1.0)  # let the log monitor and workers flush
    log_hits, log_files, log_bytes = _scan_tree(session / "logs")
    other_hits, other_files, other_bytes = _scan_tree(
        session, skip=lambda p: (session / "logs") in p.parents or "spilled" in str(p))
    # local.sh's own state: `ray start` output of every node (logs/*.log), env files
    state_hits, state_files, state_bytes = _scan_tree(
        cluster.state_dir, skip=lambda p: session in p.parents or p.parent.name.startswith("session_"))
    assert log_files > 10 and log_bytes > 10_000, "the session logs are not where they should be"
    print(f"\n[log scan] {len(NEEDLES)} forms of {MARKER!r}: CLI output {n_out} B; store non-shard files "
          f"{store_files} ({store_bytes} B); {session}/logs {log_files} files ({log_bytes} B); "
          f"rest of the session dir {other_files} files ({other_bytes} B); local.sh state dir "
          f"{state_files} files ({state_bytes} B)")
    all_hits = hits + store_hits + log_hits + other_hits + state_hits
    assert not all_hits, "private marker found:\n" + "\n".join(all_hits[:50])


@pytest.mark.slow
def _raydp_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("raydp:")]


# Ray's own fatal check, seen under load when the driver exits with tasks still being cancelled
# (issue 19): its C++ stack trace is Ray's output, not raydp's, and may change the exit status.
_RAY_FATAL = ("Tried to complete task that was not pending", "Check failed")


@pytest.mark.ray
@pytest.mark.subprocess
def test_strict_ray_run_does_not_print_target_messages(tmp_path, cluster):
    """--strict through Ray with a target that fails on about half of all pairs (naming the record):
    raydp prints exactly one line, its strict-mode error, and the target's message appears nowhere in
    the output — whatever else Ray itself prints (log lines, worker prefixes, a C++ stack trace)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    half = np.random.default_rng(1).exponential(1.0, 60)
    half[::2] = MARKER
    pq.write_table(pa.table({"x": half}), tmp_path / "half.parquet")
    env = dict(cluster.env, PYTHONPATH=_base_env()["PYTHONPATH"])
    for attempt in range(3):  # the leak needs a second failing task in flight: try a few times
        r = _cli(["estimate", *TARGET_ARGS, "--oracle", "raydp.oracles:bootstrap", "--oracle-args",
                  json.dumps({"source": str(tmp_path / "half.parquet")}), "--n", 40, "--m", 600,
                  "--gamma", 0.2, "--seed", 2,  # seed 2: the probe database is accepted
                  "--backend", "ray", "--address", cluster.address, "--store", tmp_path / f"s{attempt}",
                  "--strict", "--quiet"], env)
        ours = _raydp_lines(r.stderr)
        assert len(ours) == 1 and ours[0].startswith("raydp: error: ") and ours[0].endswith(
            "target raised: ValueError (strict mode)"), r.stderr[-3000:]
        ray_crashed = any(sig in r.stderr for sig in _RAY_FATAL)
        assert r.returncode == 2 or (ray_crashed and r.returncode != 0), (r.returncode, r.stderr[-3000:])
        assert not _hits((r.stdout + r.stderr).encode(), f"attempt {attempt}"), r.stderr[-3000:]


# ---------------------------------------------------------------------------- 1. node killed

N1, M1, GAMMA1, SEED1, BLOCK1, DELAY1 = 20, 1200, 0.1, 23, 10, 0.015  # 120 blocks


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.subprocess
def test_worker_node_killed_mid_run(tmp_path, cluster):
    """SIGKILL a worker node while its task workers evaluate pairs; Ray retries the lost tasks on
    the surviving nodes; the stored sample is the clean one, each pair exactly once."""
    assert all(r.raylet_alive() for r in cluster.nodes_table()), "needs head + 2 live worker nodes"
    uri, trace = tmp_path / "store", tmp_path / "trace"
    trace.mkdir()
    total_blocks = BlockLayout(M1, BLOCK1).count
    cfg = json.dumps(dict(address=cluster.address, cpus=None, delay=DELAY1, trace=str(trace), n=N1, m=M1,
                          gamma=GAMMA1, seed=SEED1, block_size=BLOCK1, store=str(uri), resume=False))
    out = tmp_path / "driver.out"
    env = dict(cluster.env, PYTHONPATH=_base_env()["PYTHONPATH"])
    with open(out, "w") as f:
        proc = subprocess.Popen([sys.executable, DRIVER, cfg], env=env, stdout=f,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        info = _wait_for_line(out, "DRIVER ", proc, timeout=120)
        worker_ids = cluster.worker_node_ids
        assert info["node"] not in worker_ids  # Ray attaches a driver to the head when it can
        # Wait until blocks are stored and a worker node is evaluating pairs right now.
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, f"driver ended before the kill:\n{out.read_text()[-4000:]}"
            assert time.monotonic() < deadline, "no stored shards / no busy worker node in 120 s"
            if _shard_paths(uri):
                now, tr = time.time(), _trace(trace)
                busy = {v["node"]: max(w["last"] for w in tr.values() if w["node"] == v["node"])
                        for v in tr.values()}
                # in a task right now (Ray titles the worker ray::_run_group while it runs one; a
                # recent target call alone may be the end of a task whose result already went back)
                cands = [i for i, nid in enumerate(worker_ids) if now - busy.get(nid, 0) < 0.3
                         and cluster.running_task(f"worker{i + 1}")]
                if cands:
                    victim = max(cands, key=lambda i: busy[worker_ids[i]])
                    break
            time.sleep(0.03)
        victim_id = worker_ids[victim]
        shards_at_kill = {p.name for p in _shard_paths(uri)}
        cluster.kill_worker(victim)  # returns once the node's processes are gone
        t_kill = time.time()
        running_at_kill = proc.poll() is None
        alive = cluster.wait_for_alive_nodes(2, dead=[victim_id], timeout=60)  # the GCS saw it die
        running_at_dead = proc.poll() is None
        stored_at_dead = len(_shard_paths(uri))  # flush_rows=1: one shard per block
        rc = proc.wait(timeout=300)
        log = out.read_text(errors="replace")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert rc == 0, log[-4000:]
    result = _read_lines(out, "RESULT ")[-1]

    # the kill really happened mid-run
    assert running_at_kill and running_at_dead, "the driver had finished before the node was dead"
    assert 1 <= len(shards_at_kill) and stored_at_dead < total_blocks
    assert {a["NodeID"] for a in alive} == {r.node_id for r in cluster.nodes_table()} - {victim_id}
    tr = _trace(trace, digests=True)
    victim_pids = [pid for pid, v in tr.items() if v["node"] == victim_id]
    assert victim_pids and all(not Path(f"/proc/{p}/cmdline").exists()
                               or not Path(f"/proc/{p}/cmdline").read_bytes() for p in victim_pids)
    survivors_after = [v for v in tr.values() if v["node"] not in (victim_id, "-") and v["last"] > t_kill]
    assert survivors_after, "no target call on the surviving nodes after the kill"
    worker_calls = sum(v["calls"] for pid, v in tr.items() if pid != info["pid"])
    # databases the dead node was evaluating when it died were evaluated again on the survivors
    # (the lost task was retried there), and every pair was evaluated somewhere
    on_victim = {h for pid in victim_pids for h in tr[pid]["dbs"]}
    elsewhere = {h for pid, v in tr.items() if pid != info["pid"] and pid not in victim_pids for h in v["dbs"]}
    redone = on_victim & elsewhere
    assert redone, "no database evaluated on the dead node was evaluated again: nothing in flight was lost?"
    assert on_victim | elsewhere >= _pair_digests(N1, M1, SEED1, BLOCK1, range(total_blocks))
    new_shards = [p for p in _shard_paths(uri) if p.name not in shards_at_kill]
    assert new_shards and min(p.stat().st_mtime for p in new_shards) > t_kill - 1

    # and the result is the clean one: same G sample bit for bit, each pair exactly once
    clean = _clean(N1, M1, GAMMA1, SEED1, BLOCK1)
    _, p_all, _ = _store_rows(uri)
    assert p_all.size == M1 and np.array_equal(np.sort(p_all), np.arange(M1)), "a pair lost or stored twice"
    stored = raydp.load_estimate(str(uri))
    np.testing.assert_array_equal(stored.sample, clean.sample)
    assert stored.sensitivity == clean.sensitivity and result["delta"] == clean.sensitivity.hex()
    assert stored.provenance() == clean.provenance() and result["failures"] == 0
    retried = [line for line in log.splitlines() if "will be retried" in line]
    print(f"\n[node kill] killed worker{victim + 1} with {len(shards_at_kill)}/{total_blocks} blocks stored; "
          f"{stored_at_dead} stored when the GCS marked it dead; {len(redone)} databases evaluated on the dead "
          f"node and again elsewhere; {worker_calls} worker calls for {2 * M1} databases; driver rc={rc}; "
          f"Ray's retry notices in the driver log: {len(retried)}")
