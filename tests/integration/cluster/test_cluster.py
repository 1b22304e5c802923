"""Cluster deployment files: schema checks of cluster/cluster.yaml and cluster/rayjob.yaml, and
end-to-end runs of raydp.local_cluster -- from Python and as the command line behind cluster/local.sh
(a real head + worker node on 127.0.0.1 with token auth).

* cluster.yaml is validated against the cluster-launcher JSON schema that ships inside the
  installed Ray (ray/autoscaler/ray-schema.json) and by Ray's own ``validate_config``.
* rayjob.yaml is validated against the published RayJob CRD of KubeRay v1.5.1 and v1.7.0 (verbatim
  copies in tests/data/kuberay/, source in its README): the v1 openAPIV3Schema with kubectl's strict
  unknown-field rule, plus what the API server checks outside the schema (served group/version,
  kind, name). Not checked: the CRD's CEL rules, and everything a real ``kubectl apply`` to a
  cluster with the operator would show; the operator-side rules the manifest relies on (token mode,
  replica bounds, name length) are asserted in ``test_rayjob_content``.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import jsonschema  # test extras: a missing one fails here instead of skipping the CRD checks
import pytest
import ray
import yaml

from cluster_util import LOCAL_SH, REPO, Cluster, local_cluster, venv_path_env, wait_gone
from paths import DATA
from raydp.local_cluster import session_pids
from raydp.local_cluster.net import free_ports as _free_ports

CLUSTER_DIR = REPO / "cluster"


# ----------------------------------------------------------------------------- cluster.yaml


@pytest.fixture(scope="module")
def launcher_config():
    return yaml.safe_load((CLUSTER_DIR / "cluster.yaml").read_text())


def test_cluster_yaml_matches_rays_launcher_schema(launcher_config):
    schema_path = Path(ray.__file__).parent / "autoscaler" / "ray-schema.json"
    schema = json.loads(schema_path.read_text())
    jsonschema.validate(launcher_config, schema)  # raises ValidationError with the path
    # Ray's own checks on top of the schema (head type exists, min/max workers consistent, ...)
    from ray.autoscaler._private.util import validate_config

    validate_config(launcher_config)


def test_cluster_yaml_schema_check_is_not_vacuous(launcher_config):
    schema = json.loads((Path(ray.__file__).parent / "autoscaler" / "ray-schema.json").read_text())
    bad = json.loads(json.dumps(launcher_config))
    bad["available_node_types"]["ray.worker.default"]["min_worker"] = 1  # typo
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_cluster_yaml_content(launcher_config):
    c = launcher_config
    assert c["provider"]["type"] == "aws"
    types = c["available_node_types"]
    assert c["head_node_type"] in types
    workers = [t for name, t in types.items() if name != c["head_node_type"]]
    assert workers and all(0 <= t["min_workers"] <= t["max_workers"] <= c["max_workers"]
                           for t in workers)
    # the repo is shipped and installed, with the Ray version we test against
    assert "." in c["file_mounts"].values()
    setup = " ".join(c["setup_commands"])
    assert f"ray[default]=={ray.__version__}" in setup and "pip install -e ~/raydp" in setup
    # token auth: the token file is shipped to every node and every ray start runs in token mode
    assert c["file_mounts"].get("~/.ray/auth_token") == "~/.ray/auth_token"
    for cmd in c["head_start_ray_commands"] + c["worker_start_ray_commands"]:
        if "ray start" in cmd:
            assert "RAY_AUTH_MODE=token" in cmd
    head_start = " ".join(c["head_start_ray_commands"])
    assert "--dashboard-host=127.0.0.1" in head_start


def test_cluster_yaml_sizing_fits_the_projection(launcher_config):
    """The autoscaling bounds of README "Scaling out": up to 1 024 slots (the width up to which the
    paper's SVM at γ = 0.001 projects to ≥ 0.9 efficiency), no task on the head (it hosts the driver),
    and nothing but the head while idle."""
    c = launcher_config
    types = c["available_node_types"]
    assert types[c["head_node_type"]]["resources"] == {"CPU": 0}
    worker = types["ray.worker.default"]
    assert worker["node_config"]["InstanceType"] == "c6i.8xlarge" and worker["resources"] == {"CPU": 32}
    assert worker["max_workers"] * worker["resources"]["CPU"] >= 1000
    assert worker["min_workers"] == 0 and c["max_workers"] >= worker["max_workers"]
    assert c["idle_timeout_minutes"] <= 10


# ----------------------------------------------------------------------------- rayjob.yaml

KUBERAY_VERSIONS = ("v1.5.1", "v1.7.0")
# libyaml reads the 1.3 MB CRDs in ~0.5 s each; the pure-Python loader takes ~2 s
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@pytest.fixture(scope="module")
def rayjob():
    docs = [d for d in yaml.safe_load_all((CLUSTER_DIR / "rayjob.yaml").read_text()) if d]
    # no Secret of our own: the operator makes the token Secret when authOptions.mode is token
    assert [d["kind"] for d in docs] == ["RayJob"]
    return docs[0]


def _strict(node):
    """kubectl's strict field validation, on a CRD's openAPIV3Schema: unknown fields are errors."""
    if isinstance(node, dict):
        if ("properties" in node and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")):
            node["additionalProperties"] = False
        for v in node.values():
            _strict(v)
    elif isinstance(node, list):
        for v in node:
            _strict(v)
    return node


@dataclass(frozen=True)
class PublishedCRD:
    version: str
    api_version: str
    kind: str
    # OpenAPI v3.0 schemas follow JSON Schema draft 4; one validator per CRD, because
    # jsonschema.validate() would first check the 0.4 MB schema itself (~2.4 s per call)
    schema: jsonschema.Draft4Validator

    def admit(self, manifest: dict) -> None:
        """What the API server checks before the operator sees a RayJob: a served group/version, the
        kind, a DNS-1123 name, and the v1 openAPIV3Schema with unknown fields refused (CEL rules are not
        evaluated; the RayJob's ones concern fields the manifest does not use)."""
        if manifest.get("apiVersion") != self.api_version or manifest.get("kind") != self.kind:
            raise jsonschema.ValidationError(f"not a {self.api_version} {self.kind}")
        name = manifest.get("metadata", {}).get("name", "")
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name) or len(name) > 253:
            raise jsonschema.ValidationError(f"metadata.name {name!r} is not a DNS-1123 name")
        self.schema.validate(manifest)


@pytest.fixture(scope="module", params=KUBERAY_VERSIONS)
def crd(request):
    """The published RayJob CRD of one KubeRay release, vendored under tests/data/kuberay/."""
    doc = yaml.load((DATA / "kuberay" / f"ray.io_rayjobs-{request.param}.yaml").read_text(), Loader=_YAML_LOADER)
    assert doc["kind"] == "CustomResourceDefinition" and doc["spec"]["names"]["kind"] == "RayJob"
    (v1,) = [v for v in doc["spec"]["versions"] if v["name"] == "v1"]
    assert v1["served"] and v1["storage"]
    return PublishedCRD(request.param, f"{doc['spec']['group']}/v1", doc["spec"]["names"]["kind"],
                        jsonschema.Draft4Validator(_strict(v1["schema"]["openAPIV3Schema"])))


def _pods(rayjob):
    """(where, pod spec) of every pod the manifest declares (the submitter's only when it has one)."""
    spec = rayjob["spec"]
    cs = spec["rayClusterSpec"]
    yield "head", cs["headGroupSpec"]["template"]["spec"]
    for g in cs["workerGroupSpecs"]:
        yield g["groupName"], g["template"]["spec"]
    if "submitterPodTemplate" in spec:
        yield "submitter", spec["submitterPodTemplate"]["spec"]


def test_rayjob_matches_the_published_crd(rayjob, crd):
    crd.admit(rayjob)


def _spec(j):
    return j["spec"]


def _cluster(j):
    return j["spec"]["rayClusterSpec"]


def _workers(j):
    return j["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]


@pytest.mark.parametrize("mutate", [
    lambda j: j.__setitem__("apiVersion", "ray.io/v2"),
    lambda j: j.__setitem__("kind", "RayJobs"),
    lambda j: j["metadata"].__setitem__("name", "raydp_svm"),
    lambda j: _spec(j).__setitem__("entrypoint", ["python", "x.py"]),
    lambda j: _spec(j).__setitem__("backoffLimit", "0"),
    lambda j: _cluster(j).pop("headGroupSpec"),
    lambda j: _cluster(j).__setitem__("authOptions", {"mode": "tokens"}),
    lambda j: _cluster(j).__setitem__("authOption", {"mode": "token"}),
    lambda j: _workers(j).pop("groupName"),
    lambda j: _workers(j).__setitem__("minReplica", 1),
    lambda j: _cluster(j)["headGroupSpec"]["template"]["spec"].pop("containers"),
    lambda j: _workers(j)["template"]["spec"]["containers"][0]["resources"]["limits"].__setitem__("cpu", "two"),
    lambda j: _workers(j)["template"]["spec"]["containers"][0].__setitem__(
        "env", [{"name": "RAY_AUTH_MODE", "valueFrm": "token"}]),
], ids=["apiVersion", "kind", "name", "entrypoint-list", "backoffLimit-string", "no-head", "auth-mode-enum",
        "typo-authOptions", "no-groupName", "typo-minReplica", "no-containers", "bad-quantity", "typo-env-field"])
def test_the_crd_check_rejects_broken_manifests(rayjob, crd, mutate):
    """The check is not vacuous: each of these mistakes is refused, against either release's CRD."""
    bad = json.loads(json.dumps(rayjob))
    mutate(bad)
    with pytest.raises(jsonschema.ValidationError):
        crd.admit(bad)


def test_the_token_secret_cannot_be_named_for_both_releases(rayjob, crd):
    """authOptions.secretName (a Secret of one's own) exists from v1.7.0 on; v1.5.1's CRD refuses it. So the
    manifest leaves the Secret to the operator, which both releases generate per RayCluster."""
    with_secret = json.loads(json.dumps(rayjob))
    with_secret["spec"]["rayClusterSpec"]["authOptions"]["secretName"] = "raydp-ray-auth"
    if crd.version == "v1.5.1":
        with pytest.raises(jsonschema.ValidationError, match="secretName"):
            crd.admit(with_secret)
    else:
        crd.admit(with_secret)


def test_rayjob_content(rayjob):
    spec = rayjob["spec"]
    assert spec["entrypoint"] == "python jobs/svm_sensitivity.py"
    # the operator's own check of a RayJob's name, which no schema expresses: a DNS-1035 label of <= 47
    name = rayjob["metadata"]["name"]
    assert len(name) <= 47 and re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name)
    cs = spec["rayClusterSpec"]
    assert cs["rayVersion"] == "2.60.0" == ray.__version__
    assert cs["workerGroupSpecs"], "needs a worker group"
    for g in cs["workerGroupSpecs"]:
        assert 0 <= g["minReplicas"] <= g.get("replicas", g["minReplicas"]) <= g["maxReplicas"]
    # token auth through the operator's field: only then does it send the token with its job-status
    # polls; token mode needs rayVersion >= 2.52.0
    assert cs["authOptions"] == {"mode": "token"}
    assert tuple(int(x) for x in cs["rayVersion"].split(".")) >= (2, 52, 0)
    # ...and nothing of our own that would fight the token it injects (v1.5.1 appends RAY_AUTH_* after
    # ours, which then lose; v1.7.0 keeps ours, whose token would differ from the one it polls with)
    images = set()
    for where, pod in _pods(rayjob):
        for c in pod["containers"] + pod.get("initContainers", []):
            names = {e["name"] for e in c.get("env", [])}
            assert not names & {"RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"}, (where, c["name"])
        c = pod["containers"][0]
        images.add(c["image"])
        assert c["resources"]["requests"] and c["resources"]["limits"], where
    # KubeRay's default submitter runs the head's image; one declared here must share it
    assert len(images) == 1, f"every pod should run one image: {images}"


# ----------------------------------------------------------------------------- local cluster


def test_local_sh_is_valid_bash():
    subprocess.run(["bash", "-n", str(LOCAL_SH)], check=True)


def _without_auth(env):
    return {k: v for k, v in env.items() if k not in ("RAY_AUTH_TOKEN", "RAY_AUTH_MODE")}


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.subprocess
def test_local_cluster_end_to_end():
    t0 = time.monotonic()
    # fast failure detection so that killing a worker node is noticed in ~2 s, not ~15 s
    fast_hc = {"RAY_health_check_period_ms": "500", "RAY_health_check_failure_threshold": "3"}
    with local_cluster(workers=1, cpus_per_node=1, extra_env=fast_hc) as c:
        t_up = time.monotonic() - t0
        pgids = {n.pgid for n in c.nodes_table()}
        assert len(pgids) == 2 and len(c.worker_raylet_pids) == 1

        # two nodes, both on loopback, one CPU each
        nodes = c.alive_nodes()
        assert len(nodes) == 2
        assert {n["NodeManagerAddress"] for n in nodes} == {"127.0.0.1"}
        assert sum(n["Resources"].get("CPU", 0) for n in nodes) == 2
        assert {n["NodeID"] for n in nodes} == {r.node_id for r in c.nodes_table()}

        # `status` runs `ray status` with the token; its autoscaler summary lags a
        # few seconds behind node registration
        deadline = time.monotonic() + 30
        while True:
            out = c.status_text()
            active = out.split("Active:", 1)[-1].split("Pending:", 1)[0]
            if len(re.findall(r"\bnode_[0-9a-f]+", active)) == 2 or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert len(re.findall(r"\bnode_[0-9a-f]+", active)) == 2, out

        ray_cli = str(Path(sys.executable).parent / "ray")
        # job API without the token: refused (HTTP 401), and with a wrong token: 403
        p = subprocess.run([ray_cli, "job", "submit", "--address", c.dashboard, "--", "true"],
                           env=_without_auth(c.env), text=True, capture_output=True, timeout=60)
        assert p.returncode != 0
        assert "Unauthorized: Missing authentication token" in p.stdout + p.stderr
        p = subprocess.run([ray_cli, "job", "list", "--address", c.dashboard],
                           env=dict(c.env, RAY_AUTH_TOKEN="0" * 64), text=True,
                           capture_output=True, timeout=60)
        assert p.returncode != 0 and "Invalid authentication token" in p.stdout + p.stderr
        # GCS (gRPC) without the token: refused too
        p = subprocess.run([ray_cli, "status", "--address", c.address], env=_without_auth(c.env),
                           text=True, capture_output=True, timeout=60)
        assert p.returncode != 0 and "InvalidAuthToken" in p.stdout + p.stderr

        # with the token: a tiny job runs on the cluster and sees both nodes
        t1 = time.monotonic()
        p = c.submit(["python", "-c",
                      "import ray; ray.init(); print('RES', ray.cluster_resources())"], timeout=120)
        t_submit = time.monotonic() - t1
        assert p.returncode == 0, p.stdout + p.stderr
        assert "succeeded" in p.stdout + p.stderr
        res = re.search(r"RES (\{.*\})", p.stdout)
        assert res and "'CPU': 2.0" in res.group(1), p.stdout

        # fault injection: kill the worker node; the GCS notices, the head stays
        c.kill_worker(0, wait_dead=True, timeout=30)
        assert len(c.alive_nodes()) == 1
        head_raylet = c.head.raylet_pid

    # after `down` (the context exit): nothing of ours is left running
    t_total = time.monotonic() - t0
    assert not c.our_live_pids(), c.our_live_pids()
    assert not Path(f"/proc/{head_raylet}/cmdline").exists() or not Path(
        f"/proc/{head_raylet}/cmdline").read_bytes()
    assert not c.state_dir.exists()
    # `down` again is a no-op
    p = subprocess.run(["bash", str(LOCAL_SH), "down"], env=dict(c.env, RAYDP_CLUSTER_DIR=str(c.state_dir)),
                       text=True, capture_output=True, timeout=60)
    assert p.returncode == 0 and "nothing to do" in p.stdout
    print(f"\nlocal cluster: up {t_up:.1f}s, submit {t_submit:.1f}s, total {t_total:.1f}s")


def _cli(args, env, *, sh=False, timeout=240):
    """`cluster/local.sh ARGS` (sh=True) or `python -m raydp.local_cluster ARGS`."""
    cmd = ["bash", str(LOCAL_SH), *args] if sh else [sys.executable, "-m", "raydp.local_cluster", *args]
    return subprocess.run(cmd, env=env, text=True, capture_output=True, timeout=timeout)


def _with_marker(marker):
    """Live PIDs whose command line contains ``marker``."""
    out = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and marker.encode() in (d / "cmdline").read_bytes():
                out.append(int(d.name))
        except OSError:
            pass
    return wait_gone(out, timeout=0)


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.subprocess
def test_command_line_end_to_end(tmp_path):
    """The command line (`python -m raydp.local_cluster` and its wrapper cluster/local.sh) on its
    own state dir and ports: usage errors, stale state, a busy port, up, the state files, env,
    status, token auth through env.sh, every LISTEN socket on 127.0.0.1 (test_faults.py's check),
    kill-worker, and a down that also stops a running job's driver; down again is a no-op."""
    from cluster_util import check_locked_down as check_locked

    t0 = time.monotonic()
    state = tmp_path / "state"  # a long path: the Ray temp dir goes to /tmp/raydp-ray-PORT instead
    gcs, dash, client = _free_ports(3, "127.0.0.1")
    env = {k: v for k, v in venv_path_env().items()
           if not k.startswith(("RAY_", "RAYDP_")) or k == "RAY_USAGE_STATS_ENABLED"}
    env.update(RAYDP_CLUSTER_DIR=str(state), RAYDP_PORT=str(gcs), RAYDP_DASHBOARD_PORT=str(dash),
               RAYDP_CLIENT_PORT=str(client), RAY_health_check_period_ms="500",
               RAY_health_check_failure_threshold="3")
    ray_tmp = Path(f"/tmp/raydp-ray-{gcs}")
    assert not ray_tmp.exists()

    # usage errors: exit 2, one line; nothing recorded yet
    for args in ([], ["up", "x"], ["up", "1", "2"], ["kill-worker", "0"], ["frobnicate"]):
        p = _cli(args, env, sh=args == ["up", "x"])
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        assert len(p.stderr.strip().splitlines()) <= 1, p.stderr
    assert "WORKERS must be a non-negative integer, got 'x'" in _cli(["up", "x"], env, sh=True).stderr
    p = _cli(["env"], env)
    assert p.returncode == 1 and f"no local cluster recorded in {state}" in p.stderr
    p = _cli(["status"], env)
    assert p.returncode == 1 and f"no local cluster recorded in {state}" in p.stdout
    p = _cli(["down"], env, sh=True)
    assert p.returncode == 0 and p.stdout.startswith("local.sh: ") and "nothing to do" in p.stdout

    # stale state of a cluster long gone is removed; a busy port is refused with a clear message
    state.mkdir()
    gone = subprocess.Popen(["true"])
    gone.wait()  # its PID is recorded as the head's: certainly no live Ray process now
    (state / "nodes").write_text(f"head {gone.pid} - -\n")
    busy = socket.socket()
    busy.bind(("127.0.0.1", dash))
    busy.listen()
    try:
        p = _cli(["up", "1"], env, sh=True)
    finally:
        busy.close()
    assert p.returncode == 1, p.stderr
    assert "removing stale state of a cluster that is no longer running" in p.stderr
    assert f"port {dash} on 127.0.0.1 is already in use" in p.stderr
    assert not (state / "nodes").exists()

    marker, ours = f"raydp-e2e-sleeper-{gcs}", []
    try:
        t_up = time.monotonic()
        p = _cli(["up", "1"], env, sh=True)
        t_up = time.monotonic() - t_up
        assert p.returncode == 0, p.stdout + p.stderr
        assert "Ray cluster up: 1 head + 1 worker node(s), 1 CPU(s) each, token auth on." in p.stdout
        assert f"GCS address : 127.0.0.1:{gcs}" in p.stdout and f"http://127.0.0.1:{dash}" in p.stdout
        assert f"Status / stop:     {LOCAL_SH} status  |  {LOCAL_SH} down" in p.stdout
        assert "local.sh: up in " in p.stderr and "2 nodes alive" in p.stderr

        # state files and their modes
        assert (state.stat().st_mode & 0o777) == 0o700
        assert (state / "token").stat().st_mode & 0o777 == 0o600
        assert (state / "env.sh").stat().st_mode & 0o777 == 0o600
        token = (state / "token").read_text().strip()
        assert re.fullmatch(r"[0-9a-f]{64}", token)
        nodes = [line.split() for line in (state / "nodes").read_text().splitlines()]
        assert [n[0] for n in nodes] == ["head", "worker1"] and all(len(n) == 4 and "-" not in n for n in nodes)
        rec = dict(line.split("=", 1) for line in (state / "cluster.env").read_text().splitlines())
        assert rec["ADDRESS"] == f"127.0.0.1:{gcs}" and rec["CLIENT_PORT"] == str(client)
        assert rec["RAY_TEMP_DIR"] == str(ray_tmp) and rec["RAY_TEMP_DIR_OURS"] == "1"
        assert rec["RAY_SESSION_DIR"].startswith(f"{ray_tmp}/session_") and rec["LOOPBACK"] == "1"
        assert (state / "logs" / "head.log").exists() and (state / "logs" / "worker1.log").exists()

        # env: the same from both, what env.sh holds
        env_sh = (state / "env.sh").read_text()
        for sh in (False, True):
            p = _cli(["env"], env, sh=sh)
            assert p.returncode == 0 and p.stdout == env_sh
        for line in ("export RAY_AUTH_MODE=token", f"export RAY_AUTH_TOKEN='{token}'",
                     f"export RAY_ADDRESS='127.0.0.1:{gcs}'",
                     f"export RAY_API_SERVER_ADDRESS='http://127.0.0.1:{dash}'",
                     "export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0"):
            assert line in env_sh.splitlines()

        # a second `up` while it runs is refused
        p = _cli(["up", "1"], env)
        assert p.returncode == 1 and f"a cluster recorded in {state} is still running" in p.stderr

        # status: recorded nodes alive + `ray status` through the token
        p = _cli(["status"], env)
        assert p.returncode == 0, p.stdout + p.stderr
        assert re.search(r"^  head \d+ \d+ [0-9a-f]+ yes$", p.stdout, re.M), p.stdout
        assert re.search(r"^  worker1 \d+ \d+ [0-9a-f]+ yes$", p.stdout, re.M), p.stdout

        # token auth through env.sh: a job runs and sees both nodes; without the token: refused
        shell = f"source {state}/env.sh && "
        job = subprocess.run(["bash", "-c", shell + "ray job submit -- python -c "
                              "'import ray; ray.init(); print(\"RES\", ray.cluster_resources())'"],
                             env=env, text=True, capture_output=True, timeout=180)
        assert job.returncode == 0 and "succeeded" in job.stdout + job.stderr, job.stdout + job.stderr
        assert "'CPU': 2.0" in re.search(r"RES (\{.*\})", job.stdout).group(1)
        p = subprocess.run(["ray", "job", "list", "--address", f"http://127.0.0.1:{dash}"], env=env,
                           text=True, capture_output=True, timeout=60)
        assert p.returncode != 0 and "Missing authentication token" in p.stdout + p.stderr

        # every LISTEN socket of its processes is on 127.0.0.1 (+ raw job API needs the token)
        attached = Cluster.from_env(env=env)
        check_locked(attached)

        # kill-worker 1: the worker node's processes die at once, the head stays
        worker_pgid, worker_raylet = int(nodes[1][1]), int(nodes[1][2])
        p = _cli(["kill-worker", "1"], env, sh=True)
        assert p.returncode == 0 and "local.sh: killed worker1" in p.stderr
        assert not session_pids([worker_pgid], descendants=True) and not wait_gone([worker_raylet], 0)
        p = _cli(["status"], env)
        assert re.search(r"^  worker1 \d+ \d+ [0-9a-f]+ no$", p.stdout, re.M), p.stdout
        assert re.search(r"^  head \d+ \d+ [0-9a-f]+ yes$", p.stdout, re.M), p.stdout
        p = _cli(["kill-worker", "2"], env)
        assert p.returncode == 1 and "no worker2 recorded" in p.stderr
        # issue 19: killing it again is not "killed" with exit 0 — nothing of it was alive
        p = _cli(["kill-worker", "1"], env, sh=True)
        assert p.returncode == 1 and "killed worker1" not in p.stderr, p.stderr
        assert "worker1 is not running (already stopped or killed)" in p.stderr and "status` lists" in p.stderr

        # a job still running at `down` (its driver lives in a session of its own): stopped too
        p = subprocess.run(["bash", "-c", shell + "ray job submit --no-wait -- python -c "
                            f"'import ray, time; ray.init(); print(\"{marker}\", flush=True); time.sleep(600)'"],
                           env=env, text=True, capture_output=True, timeout=120)
        assert p.returncode == 0, p.stdout + p.stderr
        deadline = time.monotonic() + 60
        while not _with_marker(marker) and time.monotonic() < deadline:
            time.sleep(0.2)
        driver = _with_marker(marker)
        assert driver, "the job's driver did not start"
        head_pgid = int(nodes[0][1])
        ours = attached.processes()
        assert set(driver) <= set(ours) and os.getsid(driver[0]) != head_pgid
    finally:
        t_down = time.monotonic()
        down = _cli(["down"], env, sh=True)
        t_down = time.monotonic() - t_down
    assert down.returncode == 0 and "local.sh: cluster in" in down.stdout and "stopped in" in down.stdout
    assert not wait_gone(ours, timeout=5), "processes of the cluster survived down"
    assert not _with_marker(marker)
    assert not ray_tmp.exists()  # the temp dir `up` created is gone, the token stays
    assert sorted(f.name for f in state.iterdir()) == ["logs", "token"]
    assert (state / "token").read_text().strip() == token
    p = _cli(["down"], env)
    assert p.returncode == 0 and "nothing to do" in p.stdout
    print(f"\ncommand line: up {t_up:.1f}s, down {t_down:.1f}s, total {time.monotonic() - t0:.1f}s")
