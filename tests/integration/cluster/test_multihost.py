"""Hosts with addresses of their own: a head and two workers, each in a network namespace of its own on
its own address in 198.18.0.0/15 (``raydp.local_cluster`` in namespace mode, token auth on), the driver
in the head's namespace, links cut and restored under a running ``raydp estimate``.

One cluster for the module (1 CPU a node) and one run size, small enough to be quick and long enough
that a cut lands while a task is running (SVM, d = 8, n = 1000, m = 400, block 2). The reference is the
same command line with ``--backend local`` (in process), run while the cluster starts. The tests run in
this order:

1. every host: tasks ran on all three addresses (Ray's state API: each task's node) and the stored
   sample and Δ̂ equal the in-process run's bit for bit; its wall time is the module's clean time;
2. ``ray job submit`` from the root namespace to the head's dashboard address, with the token;
3. a worker's link cut for 10 s while it runs a task, then restored: the same result;
4. a worker's link cut for good while it runs a task: the run finishes within three times the
   clean time (at least 60 s, for a loaded machine), with no option set, the same Δ̂, no
   failure, and the store holds each pair once. A run still going at that bound is killed and fails.

A cut is timed by the victim's own processes: a Ray worker titles itself ``ray::_run_group`` while it
runs the sampler's task, so the cut hits a task in flight. The module ends by taking the cluster down
and checking that no namespace, link or process of it is left.

Beside the shared cluster: ``up --netns`` without root is one line, exit 2, and makes nothing; an
``up`` that fails midway (its ``ray start`` fails) and an ``up`` killed midway (then ``down``) leave
no namespace, link or process behind; ``cut`` on a loopback cluster is a usage error.

Root only (CI runs as root); without root or ``ip netns`` those tests are skipped with the reason.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

import raydp
from raydp.store import Store

from cluster_util import Cluster, netns_cluster, netns_skip_reason, venv_path_env
from raydp.local_cluster import ClusterError, main
from raydp.local_cluster.net import leftovers, remove as remove_net

_WHY = netns_skip_reason()
needs_netns = pytest.mark.skipif(_WHY is not None, reason=_WHY or "")
pytestmark = pytest.mark.slow

M = 400
ARGS = ["estimate", "--target", "raydp.targets:svm", "--oracle", "raydp.oracles:svm_two_class",
        "--oracle-args", '{"dim": 8}', "--n", "1000", "--m", str(M), "--gamma", "0.1", "--block-size", "2",
        "--seed", "0"]
RUN_TIMEOUT = 300  # a hang bound for runs without a cut


def _cli(*extra: str) -> list[str]:
    return [sys.executable, "-m", "raydp.cli", *ARGS, *extra]


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory):
    """The in-process run (``--backend local``), started first: it overlaps the cluster's start."""
    where = tmp_path_factory.mktemp("local")
    with open(where / "run.err", "w") as err:
        proc = subprocess.Popen(_cli("--backend", "local", "--quiet", "--store", str(where / "store")),
                                stdout=subprocess.DEVNULL, stderr=err)
    yield proc, where
    if proc.poll() is None:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def reference(reference_run):
    """The in-process run's stored estimate."""
    proc, where = reference_run
    assert proc.wait(timeout=RUN_TIMEOUT) == 0, (where / "run.err").read_text()[-3000:]
    return raydp.load_estimate(str(where / "store"))


@pytest.fixture(scope="module")
def cluster(reference_run):
    c = netns_cluster(workers=2, cpus_per_node=1)
    t0 = time.monotonic()
    try:
        with c:
            print(f"\n[netns] up in {time.monotonic() - t0:.1f}s: {c.address}")
            yield c
    finally:
        # nothing of the cluster is left: processes, namespaces, links
        left = c.net_leftovers()
        assert not left, f"left behind: {left}"
        assert not c.our_live_pids(), c.our_live_pids()
        print(f"[netns] module done in {time.monotonic() - t0:.1f}s")


@pytest.fixture(scope="module")
def clean(cluster, reference, tmp_path_factory):
    """The clean run on the cluster (once the reference is done, so that its time is its own): its
    store, its wall time and the job ids that existed before it."""
    before = {r["job"] for r in cluster.task_rows()}
    store = tmp_path_factory.mktemp("clean") / "store"
    t0 = time.monotonic()
    p = cluster.client(_cli("--backend", "ray", "--address", cluster.address, "--quiet", "--store", str(store)),
                       timeout=RUN_TIMEOUT)
    wall = time.monotonic() - t0
    assert p.returncode == 0, p.stderr[-3000:]
    print(f"\n[netns] clean run: {wall:.1f}s")
    return store, wall, before


def _same_as_reference(store: Path, reference) -> None:
    got = raydp.load_estimate(str(store))
    assert got.provenance() == reference.provenance()
    np.testing.assert_array_equal(got.sample, reference.sample)
    assert got.sensitivity == reference.sensitivity  # Δ̂ bit for bit
    assert got.failures == 0 == reference.failures
    st = Store.open(str(store))
    st.load()
    pairs = np.concatenate([st.read_shard(p.name)[2] for p in sorted((store / "shards").glob("shard-*.parquet"))])
    assert pairs.size == M and np.array_equal(np.sort(pairs), np.arange(M)), "a pair lost or stored twice"


@needs_netns
def test_a_run_uses_every_host_and_equals_the_in_process_run(cluster, clean, reference):
    store, _, before = clean
    hosts = {cluster.fabric.ip(i) for i in range(3)}
    assert {n["NodeManagerAddress"] for n in cluster.alive_nodes()} == hosts
    # the state API learns of finished tasks within a second or two of their end
    deadline = time.monotonic() + 30
    while True:
        rows = [r for r in cluster.task_rows() if r["job"] not in before]
        ran = {r["ip"] for r in rows if r["state"] == "FINISHED"}
        if ran == hosts or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert len({r["job"] for r in rows}) == 1, rows[:5]
    assert ran == hosts, f"tasks ran on {sorted(ran)}, not on every host {sorted(hosts)}"
    print(f"\n[netns] tasks per host: { {h: sum(r['ip'] == h for r in rows) for h in sorted(hosts)} }")
    _same_as_reference(store, reference)


@needs_netns
def test_a_job_submitted_to_the_heads_address_runs(cluster):
    tiny = "import ray; ray.init(); print('HOSTS', sorted(n['NodeManagerAddress'] for n in ray.nodes() if n['Alive']))"
    ray_cli = str(Path(sys.executable).parent / "ray")
    assert cluster.dashboard.startswith(f"http://{cluster.fabric.ip(0)}:")
    p = cluster.run([ray_cli, "job", "submit", "--address", cluster.dashboard, "--", "python", "-c", tiny],
                    timeout=180)  # from the root namespace
    assert p.returncode == 0 and "succeeded" in p.stdout + p.stderr, p.stdout[-3000:] + p.stderr[-3000:]
    hosts = sorted(cluster.fabric.ip(i) for i in range(3))
    assert f"HOSTS {hosts}" in p.stdout, p.stdout[-3000:]
    # without the token: refused
    env = {k: v for k, v in cluster.env.items() if k not in ("RAY_AUTH_TOKEN", "RAY_AUTH_MODE")}
    p = subprocess.run([ray_cli, "job", "list", "--address", cluster.dashboard], env=env, text=True,
                       capture_output=True, timeout=60)
    assert p.returncode != 0 and "Missing authentication token" in p.stdout + p.stderr


def _run_with_cut(cluster, tmp_path, *, hold: float | None, limit: float):
    """Start the run, cut the link of the first worker seen running a task (of those still linked),
    restore it after ``hold`` seconds (None: never); return (returncode, stderr, wall seconds, store).
    The run is killed at ``limit`` seconds."""
    store = tmp_path / "store"
    err = tmp_path / "run.err"
    # a copy left running by an earlier run (one replaced while its link was cut) would be taken for
    # this run's task: wait for the workers to be idle first
    idle_by = time.monotonic() + 120
    while any(cluster.running_task(f"worker{i}") for i in range(1, cluster.workers + 1)):
        assert time.monotonic() < idle_by, "a worker still runs an earlier run's task after 120 s"
        time.sleep(0.1)
    t0 = time.monotonic()
    with open(err, "w") as f:
        proc = cluster.client_popen(_cli("--backend", "ray", "--address", cluster.address, "--store", str(store)),
                                    stdout=subprocess.DEVNULL, stderr=f)
    workers = [f"worker{i}" for i in range(1, cluster.workers + 1) if cluster.fabric.link_up(i)]
    victim, restored = None, hold is None
    try:
        while True:
            victim = next((w for w in workers if cluster.running_task(w)), None)
            if victim is not None:
                break
            assert proc.poll() is None, f"the run ended before a worker ran a task:\n{err.read_text()[-3000:]}"
            assert time.monotonic() - t0 < limit, f"no worker ran a task in {limit:.0f}s"
            time.sleep(0.05)
        cluster.cut(victim)
        t_cut = time.monotonic()
        assert proc.poll() is None, "the run had ended before the cut"
        if hold is not None:
            while time.monotonic() < t_cut + hold:
                assert proc.poll() is None or proc.returncode == 0, err.read_text()[-3000:]
                time.sleep(0.1)
            cluster.restore(victim)
            restored = True
        try:
            rc = proc.wait(timeout=max(1.0, t0 + limit - time.monotonic()))
        except subprocess.TimeoutExpired:
            rc = None
        wall = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if not restored and victim is not None:
            cluster.restore(victim)
    print(f"\n[netns] {victim} cut {t_cut - t0:.1f}s into the run "
          f"{'for good' if hold is None else f'for {hold:g}s'}: run {'killed at' if rc is None else 'ended in'} "
          f"{wall:.1f}s, exit {rc}")
    return rc, err.read_text(errors="replace"), wall, store


@needs_netns
def test_a_link_cut_for_10s_and_restored(cluster, clean, reference, tmp_path):
    rc, err, _, store = _run_with_cut(cluster, tmp_path, hold=10, limit=RUN_TIMEOUT)
    assert rc == 0, err[-3000:]
    assert all(cluster.fabric.link_up(i) for i in range(3))
    _same_as_reference(store, reference)


@needs_netns
def test_a_node_cut_for_good_mid_run(cluster, clean, reference, tmp_path):
    """No timeout option: a lost host must cost seconds, not Ray's keepalive minutes."""
    limit = max(3 * clean[1], 60.0)
    rc, err, wall, store = _run_with_cut(cluster, tmp_path, hold=None, limit=limit)
    assert rc is not None, (f"the run was still going {limit:.0f}s after it started (clean run: {clean[1]:.1f}s); "
                            f"last lines:\n{err[-3000:]}")
    assert rc == 0, err[-3000:]
    assert wall <= limit
    _same_as_reference(store, reference)


# ---------------------------------------------------------------------------- the tool itself


def _cli_env(state: Path) -> dict[str, str]:
    env = {k: v for k, v in venv_path_env().items() if not k.startswith(("RAY_", "RAYDP_"))}
    env.update(RAYDP_CLUSTER_DIR=str(state), RAY_USAGE_STATS_ENABLED="0")
    return env


def _tool(args, env, timeout=240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "raydp.local_cluster", *args], env=env, text=True,
                          capture_output=True, timeout=timeout)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root and setpriv, to run the command as an unprivileged user")
def test_without_root_it_says_so_in_one_line_and_makes_nothing():
    home = Path(tempfile.mkdtemp(prefix="raydp-noroot-"))  # pytest's tmp_path is root's alone
    try:
        home.chmod(0o777)
        state = home / "state"
        env = dict(_cli_env(state), HOME=str(home))
        p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-m",
                            "raydp.local_cluster", "up", "1", "--netns"], env=env, text=True, capture_output=True,
                           timeout=120, cwd=home)
        assert p.returncode == 2, (p.stdout, p.stderr)
        assert p.stderr.strip().splitlines() == [
            "raydp.local_cluster: --netns needs root (it creates network namespaces, a bridge and veth links); "
            "run it as root"], p.stderr
        assert sorted(os.listdir(home)) == []  # no state dir, no token, nothing
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _sweep(cluster: Cluster) -> None:
    """What a failed assertion may have left: the cluster's processes, network and Ray temp dir."""
    with contextlib.suppress(Exception):
        cluster.down()
    if cluster.fabric is not None:
        remove_net(cluster.fabric.net_id)
        shutil.rmtree(f"/tmp/raydp-{cluster.fabric.net_id}", ignore_errors=True)


@needs_netns
def test_an_up_that_fails_midway_leaves_nothing(tmp_path):
    """`ray start` fails in the head's namespace (a `ray` that only exits 1): the error, then nothing of
    the network or the processes is left."""
    fake = tmp_path / "ray"
    fake.write_text("#!/bin/sh\necho 'ray start: refused by the test' >&2\nexit 1\n")
    fake.chmod(0o755)
    c = Cluster(1, 1, netns=True, ray=str(fake), env=venv_path_env(), state_dir=tmp_path / "state")
    try:
        with pytest.raises(ClusterError, match="'ray start' for head failed"):
            c.up()
        assert c.fabric is not None  # the network had been made before the failure...
        assert not leftovers(c.fabric.net_id) and not c.our_live_pids()  # ...and is gone
        assert not (tmp_path / "state" / "netns").exists()
        assert "refused by the test" in (tmp_path / "state" / "logs" / "head.log").read_text()  # logs kept
    finally:
        _sweep(c)  # (and the Ray temp dir, kept as after any failed up)


@needs_netns
def test_an_up_killed_midway_is_cleaned_by_down(tmp_path):
    state = tmp_path / "state"
    env = _cli_env(state)
    attached = Cluster.from_env(env=env)
    up = subprocess.Popen([sys.executable, "-m", "raydp.local_cluster", "up", "1", "--netns"], env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        try:
            deadline = time.monotonic() + 120
            # killed once the head's `ray start` runs in its namespace
            while not ((state / "nodes").exists() and (state / "nodes").read_text().startswith("head ")):
                assert up.poll() is None and time.monotonic() < deadline, "up ended or hung before starting the head"
                time.sleep(0.05)
        finally:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()
        net_id = (state / "netns").read_text().split()[0]
        assert attached.fabric is not None and attached.fabric.net_id == net_id
        assert leftovers(net_id), "nothing made before the kill?"
        assert attached.our_live_pids()  # the head node outlives the `up` that started it
        p = _tool(["down"], env)
        assert p.returncode == 0 and "removed" in p.stdout, (p.stdout, p.stderr)
        assert not leftovers(net_id) and not attached.our_live_pids()
        assert not (state / "netns").exists() and not Path(f"/tmp/raydp-{net_id}").exists()
        p = _tool(["down"], env)
        assert p.returncode == 0 and "nothing to do" in p.stdout
    finally:
        _sweep(attached)


def test_cut_needs_a_namespace_cluster(tmp_path, monkeypatch, capsys):
    state = tmp_path / "state"
    state.mkdir()
    (state / "nodes").write_text("head 1 - -\nworker1 2 - -\n")
    (state / "cluster.env").write_text("LOOPBACK=1\n")
    monkeypatch.setenv("RAYDP_CLUSTER_DIR", str(state))
    for verb in ("cut", "restore"):
        assert main([verb, "1"]) == 2
        assert capsys.readouterr().err.strip().splitlines() == [
            f"raydp.local_cluster: {verb} needs a cluster started with 'up --netns' (on loopback all nodes share "
            "one network)"]
    assert main(["cut", "0"]) == 2 and "1-based worker index, or 'head'" in capsys.readouterr().err
