"""cluster/serve.yaml (``raydp serve`` on Kubernetes): every document against the published Kubernetes
v1.30.0 JSON schemas, strict (tests/data/kubernetes/, source in its README; validated as their publisher
validates with them: Draft 2020-12, references resolved in their ``_definitions.json``), and what those
schemas cannot see: the Deployment selects its own pods, the Service reaches the container's port, the database URL comes
from the Secret, the container runs a ``raydp serve`` command line that ``raydp serve`` itself accepts,
and the probes use the one path the service answers without a token -- checked in the code and on a
real server.

Not checked: a real ``kubectl apply`` (admission, feature gates, the storage classes of the volumes) and
the image build.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import re
import shutil
import tomllib

import jsonschema
import pytest
import yaml
from referencing import Registry, Resource

import serve_util as su
from paths import DATA, REPO

MANIFEST = REPO / "cluster" / "serve.yaml"
SCHEMA_DIR = DATA / "kubernetes" / "v1.30.0-local-strict"
SCHEMAS = {  # (apiVersion, kind) -> the published strict schema of that resource
    ("v1", "Secret"): "secret-v1.json",
    ("v1", "PersistentVolumeClaim"): "persistentvolumeclaim-v1.json",
    ("apps/v1", "Deployment"): "deployment-apps-v1.json",
    ("v1", "Service"): "service-v1.json",
}
DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@pytest.fixture(scope="module")
def definitions() -> dict:
    return json.loads((SCHEMA_DIR / "_definitions.json").read_text())


@pytest.fixture(scope="module")
def validators(definitions):
    # each resource's schema refers into _definitions.json by its $id; the schemas are not re-checked
    # on every call (1.3 MB)
    registry = Resource.from_contents(definitions) @ Registry()
    return {key: jsonschema.Draft202012Validator(json.loads((SCHEMA_DIR / name).read_text()), registry=registry)
            for key, name in SCHEMAS.items()}


@pytest.fixture(scope="module")
def docs():
    return [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]


def _one(docs, kind):
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, (kind, [d["kind"] for d in docs])
    return found[0]


@pytest.fixture(scope="module")
def deployment(docs):
    return _one(docs, "Deployment")


@pytest.fixture(scope="module")
def container(deployment):
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def _errors(validator, doc) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path)) or '.'}: {e.message}" for e in validator.iter_errors(doc)]


# ----------------------------------------------------------------------------- the published schemas


def test_every_document_matches_its_published_schema(docs, validators):
    assert sorted(d["kind"] for d in docs) == ["Deployment", "PersistentVolumeClaim", "Secret", "Service"]
    for doc in docs:
        key = (doc["apiVersion"], doc["kind"])
        assert key in validators, key
        assert _errors(validators[key], doc) == [], key
        # what the API server checks outside the schema
        assert DNS1123.match(doc["metadata"]["name"]) and len(doc["metadata"]["name"]) <= 63


def test_the_schemas_are_strict(validators, definitions):
    """The vendored files are the strict variant: unknown fields are refused at every level."""
    for v in validators.values():
        assert v.schema["additionalProperties"] is False and v.schema["$schema"].endswith("/draft/2020-12/schema")
    objects = {name: d for name, d in definitions["$defs"].items() if "properties" in d}
    assert len(objects) > 500 and all(d.get("additionalProperties") is False for d in objects.values())
    assert "io.k8s.api.core.v1.PodSpec" in objects  # the one the Deployment's pods are checked against


@pytest.mark.parametrize("kind, path, wrong", [
    ("Deployment", ["spec", "replicas"], "replica"),
    ("Deployment", ["spec", "template", "spec", "containers", 0, "readinessProbe"], "readynessProbe"),
    ("Deployment", ["spec", "template", "spec", "containers", 0, "ports", 0, "containerPort"], "containerport"),
    ("Deployment", ["spec", "template", "spec", "containers", 0, "securityContext", "procMount"], "procmount"),
    ("Deployment", ["spec", "template", "spec", "securityContext", "seccompProfile"], "secompProfile"),
    ("Deployment", ["spec", "template", "spec", "volumes", 1, "persistentVolumeClaim", "readOnly"], "readonly"),
    ("Service", ["spec", "selector"], "selectors"),
    ("Secret", ["stringData"], "stringdata"),
    ("PersistentVolumeClaim", ["spec", "accessModes"], "accessMode"),
])
def test_a_misspelled_field_fails_validation(docs, validators, kind, path, wrong):
    doc = copy.deepcopy(_one(docs, kind))
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    parent[wrong] = parent.pop(path[-1])
    errors = _errors(validators[(doc["apiVersion"], kind)], doc)
    assert errors and any(repr(wrong) in e and "Additional properties" in e for e in errors), errors


def test_a_wrong_type_fails_validation(docs, validators):
    doc = copy.deepcopy(_one(docs, "Deployment"))
    doc["spec"]["replicas"] = "2"
    assert _errors(validators[("apps/v1", "Deployment")], doc)


# ----------------------------------------------------------------------------- what the schemas cannot see


def test_the_deployment_selects_its_own_pods(deployment):
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    wanted = spec["selector"]["matchLabels"]
    labels = spec["template"]["metadata"]["labels"]
    assert wanted and wanted.items() <= labels.items()
    assert "matchExpressions" not in spec["selector"]


def test_the_service_reaches_the_containers_port(docs, deployment, container):
    service = _one(docs, "Service")
    assert service["spec"]["type"] == "ClusterIP"
    selector = service["spec"]["selector"]
    assert selector and selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    (port,) = service["spec"]["ports"]
    target = port["targetPort"]
    assert (ports[target] if isinstance(target, str) else target) in ports.values()
    served = _arg(container["args"], "--port")
    assert int(served) == (ports[target] if isinstance(target, str) else target)


def _arg(args, flag):
    assert args.count(flag) == 1, (flag, args)
    return args[args.index(flag) + 1]


def test_the_database_url_comes_from_the_secret(docs, deployment, container):
    secret = _one(docs, "Secret")
    assert _arg(container["args"], "--db") == "$(RAYDP_DB)"
    env = {e["name"]: e for e in container["env"]}
    ref = env["RAYDP_DB"]["valueFrom"]["secretKeyRef"]
    assert ref["name"] == secret["metadata"]["name"]
    assert ref["key"] in secret.get("stringData", {}) or ref["key"] in secret.get("data", {})
    assert ref.get("optional") is not True  # no Secret, no pod: never a service on some other database
    url = secret["stringData"][ref["key"]]
    assert url.startswith("postgresql://")
    # the password: not in the URL (it would be on the server's command line), in PGPASSWORD from the
    # same Secret (the driver reads it), and clearly a value to replace
    assert ":" not in url[len("postgresql://"):].split("@")[0]
    pw = env["PGPASSWORD"]["valueFrom"]["secretKeyRef"]
    assert pw["name"] == secret["metadata"]["name"] and "placeholder" in secret["stringData"][pw["key"]].lower()
    # the URL is nowhere but in the Secret, and every $(VAR) in the command line is one Kubernetes expands
    assert "postgresql://" not in yaml.safe_dump(deployment)
    for token in container["command"] + container["args"]:
        for var in re.findall(r"\$\((\w+)\)", token):
            assert var in env, var


@pytest.fixture(scope="module")
def serve_parser() -> argparse.ArgumentParser:
    from raydp.cli import make_parser

    parser = make_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["serve"]


def test_the_command_is_a_raydp_serve_that_raydp_serve_accepts(docs, deployment, container, serve_parser):
    from raydp.serve.commands import cmd_serve

    # `raydp` is the console script of this project, installed in the image with the [serve] extra
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert container["command"] == ["raydp", "serve"] and project["scripts"]["raydp"] == "raydp.cli:main"
    dockerfile = (REPO / "cluster" / "Dockerfile").read_text()
    installed = re.search(r"pip install [^\n]*raydp\[([\w,]+)\]", dockerfile)
    extras = installed.group(1).split(",")
    assert "serve" in extras and "bubblewrap" in dockerfile  # raydp serve refuses to start without its sandbox
    needs = [r for e in extras for r in project["optional-dependencies"][e]]
    assert any(r.startswith("psycopg") for r in needs)  # --db postgresql:// needs the driver in the image
    image = container["image"]
    assert image.split(":")[0] in dockerfile and image.split(":")[1] in dockerfile  # the tag the build makes

    args = container["args"]
    known = set(serve_parser._option_string_actions)
    flags = [a for a in args if a.startswith("-")]
    assert flags and set(flags) <= known, sorted(set(flags) - known)
    url = _one(docs, "Secret")["stringData"]["url"]
    a = serve_parser.parse_args([arg.replace("$(RAYDP_DB)", url) for arg in args])
    assert a.func is cmd_serve and a.db == url
    assert a.allow_unsandboxed is False  # the pod is made for the sandbox, never without it
    # A pod must listen on its own interface for the Service to reach it: 0.0.0.0 here, and raydp serve
    # takes it only with --behind-proxy (the rule "bind only to 127.0.0.1" is for processes run on this
    # machine, the tests among them; the server test below binds 127.0.0.1).
    assert a.host == "0.0.0.0" and a.behind_proxy is True
    # the service directory is on the shared volume, a subdirectory raydp serve makes and owns
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    claims = {d["metadata"]["name"]: d for d in docs if d["kind"] == "PersistentVolumeClaim"}
    state = next(m for m in mounts.values() if a.dir.startswith(m["mountPath"].rstrip("/") + "/"))
    assert not state.get("readOnly") and a.dir != state["mountPath"]
    state_claim = claims[volumes[state["name"]]["persistentVolumeClaim"]["claimName"]]
    assert state_claim["spec"]["accessModes"] == ["ReadWriteMany"]  # shared by the replicas
    # the data sets: read-only on every replica, at the mount and at the claim
    data = [m for m in mounts.values() if m is not state]
    assert data and all(m["readOnly"] is True and volumes[m["name"]]["persistentVolumeClaim"]["readOnly"] is True
                        for m in data)


def test_the_pod_runs_as_non_root_with_what_the_sandbox_needs(deployment, container):
    pod = deployment["spec"]["template"]["spec"]
    sc = pod["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] != 0
    assert pod["automountServiceAccountToken"] is False
    c = container["securityContext"]
    assert c["allowPrivilegeEscalation"] is False and c["capabilities"]["drop"] == ["ALL"]
    assert "privileged" not in c and "add" not in c["capabilities"]
    # bubblewrap: user namespace + mounts (seccomp, AppArmor), a fresh /proc (procMount, a pod user namespace)
    assert sc["seccompProfile"]["type"] == "Unconfined" and c["procMount"] == "Unmasked" and pod["hostUsers"] is False
    res = container["resources"]
    assert set(res) == {"requests", "limits"} and all(set(res[k]) == {"cpu", "memory"} for k in res)


PROBES = ("startupProbe", "readinessProbe", "livenessProbe")


def test_the_probes_use_a_path_served_without_a_token(container):
    from raydp.serve.app import _Auth

    ports = {p["name"] for p in container["ports"]}
    paths = set()
    for name in PROBES:
        get = container[name]["httpGet"]
        assert get["port"] in ports and "httpHeaders" not in get  # no token in a probe
        paths.add(get["path"])
    (path,) = paths
    # the token check lets this path through before it looks at any token (no service needed)
    reached = []

    async def app(scope, receive, send):
        reached.append(scope["path"])

    try:
        asyncio.run(_Auth(app, service=None)({"type": "http", "path": path, "headers": []}, None, None))
    except AttributeError:  # it went on to look a token up (in the service it was not given)
        pass
    assert reached == [path], f"{path} is a token-checked path: a probe would get 401"


@pytest.mark.subprocess
def test_a_real_server_answers_the_probe_path_without_a_token(tmp_path):
    """The probe path on a real ``raydp serve`` started with the pod's --behind-proxy (on 127.0.0.1): 200
    without a token where a token-checked path answers 401; --host 0.0.0.0 passes the host check only with
    --behind-proxy (shown without binding it: the bad --port stops the start right after that check)."""
    path = yaml.safe_load_all(MANIFEST.read_text())
    probe = next(d for d in path if d and d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]
    probe_path = probe["readinessProbe"]["httpGet"]["path"]
    root = su.state_root("raydp-k8s-")
    try:
        s = su.start(root / "s", "--host", "127.0.0.1", "--behind-proxy")
        try:
            status, body, _ = s.call("GET", probe_path, token="")
            assert status == 200 and body["info"]["title"] == "raydp serve"
            assert s.call("GET", "/v1/whoami", token="")[0] == 401
        finally:
            s.stop()
        refused = su.cli("serve", str(root / "t"), "--host", "0.0.0.0", "--port", "70000")
        assert refused.returncode == 2 and "binds 127.0.0.1 only" in refused.stderr
        passed = su.cli("serve", str(root / "t"), "--host", "0.0.0.0", "--behind-proxy", "--port", "70000")
        assert passed.returncode == 2 and "--port must be 0..65535" in passed.stderr, passed.stderr
        assert not (root / "t").exists()
    finally:
        shutil.rmtree(root, ignore_errors=True)
