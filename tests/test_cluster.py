"""Cluster deployment files: schema checks of cluster/cluster.yaml and cluster/rayjob.yaml, and an
end-to-end run of cluster/local.sh (a real head + worker node on 127.0.0.1 with token auth).

* cluster.yaml is validated against the cluster-launcher JSON schema that ships inside the
  installed Ray (ray/autoscaler/ray-schema.json) and by Ray's own ``validate_config``.
* rayjob.yaml is validated against tests/kuberay_rayjob_schema.json, which is a HAND-TRANSCRIBED
  SUBSET of the KubeRay RayJob CRD's openAPIV3Schema (the CRD is not installed here and there is
  no network): apiVersion ray.io/v1, kind RayJob, spec.entrypoint, spec.rayClusterSpec with
  headGroupSpec.template.spec.containers[].image, workerGroupSpecs[] with groupName / replicas /
  minReplicas / maxReplicas / rayStartParams / template, rayVersion. It is not a substitute for
  ``kubectl apply --dry-run=server`` against a cluster with the real CRD.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")
jsonschema = pytest.importorskip("jsonschema")
ray = pytest.importorskip("ray")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cluster_util import LOCAL_SH, REPO, local_cluster  # noqa: E402

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


# ----------------------------------------------------------------------------- rayjob.yaml


@pytest.fixture(scope="module")
def rayjob_docs():
    docs = [d for d in yaml.safe_load_all((CLUSTER_DIR / "rayjob.yaml").read_text()) if d]
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    assert len(by_kind.get("RayJob", [])) == 1 and len(by_kind.get("Secret", [])) == 1
    return by_kind["RayJob"][0], by_kind["Secret"][0]


@pytest.fixture(scope="module")
def rayjob_schema():
    schema = json.loads((Path(__file__).parent / "kuberay_rayjob_schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    return schema


def _containers(rayjob):
    spec = rayjob["spec"]
    cs = spec["rayClusterSpec"]
    yield "head", cs["headGroupSpec"]["template"]["spec"]["containers"][0]
    for g in cs["workerGroupSpecs"]:
        yield g["groupName"], g["template"]["spec"]["containers"][0]
    yield "submitter", spec["submitterPodTemplate"]["spec"]["containers"][0]


def test_rayjob_matches_crd_subset(rayjob_docs, rayjob_schema):
    rayjob, _ = rayjob_docs
    jsonschema.validate(rayjob, rayjob_schema)


@pytest.mark.parametrize("mutate", [
    lambda j: j.__setitem__("apiVersion", "ray.io/v1alpha1"),
    lambda j: j["spec"].__setitem__("entrypoint", ["python", "x.py"]),
    lambda j: j["spec"]["rayClusterSpec"].pop("headGroupSpec"),
    lambda j: j["spec"]["rayClusterSpec"]["workerGroupSpecs"][0].pop("groupName"),
    lambda j: j["spec"]["rayClusterSpec"]["workerGroupSpecs"][0].__setitem__("minReplica", 1),
    lambda j: j["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"].pop("containers"),
    lambda j: j["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    ["containers"][0]["resources"]["limits"].__setitem__("cpu", "two"),
], ids=["apiVersion", "entrypoint-list", "no-head", "no-groupName", "typo-field", "no-containers",
        "bad-quantity"])
def test_rayjob_schema_rejects_broken_manifests(rayjob_docs, rayjob_schema, mutate):
    bad = json.loads(json.dumps(rayjob_docs[0]))
    mutate(bad)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, rayjob_schema)


def test_rayjob_content(rayjob_docs):
    rayjob, secret = rayjob_docs
    spec = rayjob["spec"]
    assert spec["entrypoint"] == "python jobs/svm_sensitivity.py"
    cs = spec["rayClusterSpec"]
    assert cs["rayVersion"] == "2.60.0" == ray.__version__
    assert cs["workerGroupSpecs"], "needs a worker group"
    for g in cs["workerGroupSpecs"]:  # KubeRay's controller-side check (not expressible in schema)
        assert 0 <= g["minReplicas"] <= g.get("replicas", g["minReplicas"]) <= g["maxReplicas"]
    images = set()
    for where, c in _containers(rayjob):
        images.add(c["image"])
        env = {e["name"]: e for e in c.get("env", [])}
        assert env["RAY_AUTH_MODE"]["value"] == "token", where
        ref = env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]
        assert ref["name"] == secret["metadata"]["name"], where
        assert ref["key"] in secret["stringData"], where
        res = c["resources"]
        assert res["requests"] and res["limits"], where
    assert len(images) == 1, f"head, workers and submitter should share one image: {images}"
    # the Secret in the repo is a placeholder, never a real token
    assert not re.fullmatch(r"[0-9a-f]{64}", secret["stringData"]["auth_token"])


# ----------------------------------------------------------------------------- local.sh


def test_local_sh_is_valid_bash():
    subprocess.run(["bash", "-n", str(LOCAL_SH)], check=True)


def _without_auth(env):
    return {k: v for k, v in env.items() if k not in ("RAY_AUTH_TOKEN", "RAY_AUTH_MODE")}


@pytest.mark.slow
def test_local_sh_end_to_end():
    t0 = time.monotonic()
    # fast failure detection so that killing a worker node is noticed in ~2 s, not ~15 s
    fast_hc = {"RAY_health_check_period_ms": "500", "RAY_health_check_failure_threshold": "3"}
    with local_cluster(workers=1, cpus_per_node=1, extra_env=fast_hc) as c:
        t_up = time.monotonic() - t0
        sids = c._sids_seen
        assert len(sids) == 2 and len(c.worker_raylet_pids) == 1

        # two nodes, both on loopback, one CPU each
        nodes = c.alive_nodes()
        assert len(nodes) == 2
        assert {n["NodeManagerAddress"] for n in nodes} == {"127.0.0.1"}
        assert sum(n["Resources"].get("CPU", 0) for n in nodes) == 2
        assert {n["NodeID"] for n in nodes} == {r.node_id for r in c.nodes_table()}

        # `local.sh status` runs `ray status` with the token; its autoscaler summary lags a
        # few seconds behind node registration
        deadline = time.monotonic() + 30
        while True:
            out = c.status()
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
    p = subprocess.run(["bash", str(LOCAL_SH), "down"], env=c.script_env, text=True,
                       capture_output=True, timeout=60)
    assert p.returncode == 0 and "nothing to do" in p.stdout
    print(f"\nlocal cluster: up {t_up:.1f}s, submit {t_submit:.1f}s, total {t_total:.1f}s")
