"""Analysts' own code in ``raydp serve``: one real server for the module, sampling Δ̂ on a real local Ray
(``--backend ray``, the machine's CPUs), with a data set whose curator allows code and one that does not.

Hostile functions (``tests/support/code_targets.py``, sent by value) act during the sampling of Δ̂ (on every
database) or only on the private data (its records hold a marker the oracle never draws). For each the test
asserts what stopped it — the test's TCP server saw no connection, what the code read was empty, no file
appeared, no process of it is left, the limit failed the release with the charge the policy says — and that
another analyst's ordinary release on the same server succeeds afterwards. The service's directory and the
data live outside /tmp (``serve_util.state_root``), so ``hide`` is what hides them. The deadline is off
(``--respond-after 0``): the CPU limit, not the deadline, is what stops a busy loop on the private data.
"""

from __future__ import annotations

import base64
import hashlib
import inspect
import os
import pickle
import shutil
import socket
import threading
import time

import code_targets as ct
import numpy as np
import pytest
import serve_util as su

from raydp.client import Client, ServiceError, code_payload

pytestmark = [pytest.mark.subprocess]

FAILED = ("the release failed on the private data; why is withheld because it may depend on the data "
          "(the reservation stays counted)")
LIMITS = {"memory": 1 << 30, "cpu_seconds": 2, "processes": 16, "wall_seconds": 20.0}
EPS = 100.0  # noise scale Δ̂/ε of a mean of 40 normal records: about 1e-3, so a released count is read exactly


class Listener:
    """A TCP server on 127.0.0.1 that counts the connections it accepts (and keeps what they sent)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.seen: list[bytes] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(1)
                try:
                    self.seen.append(conn.recv(1024))
                except OSError:
                    self.seen.append(b"")

    def close(self):
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


@pytest.fixture(scope="module")
def srv():
    root = su.state_root("raydp-code-")
    data = root / "data"
    data.mkdir()
    np.save(data / "code.npy", ct.private_data())
    np.save(data / "plain.npy", np.random.default_rng(2).normal(size=ct.N))
    rng = np.random.default_rng(3)
    X = rng.normal(size=(460, 2))
    rows = np.column_stack([X, (X @ [1.5, -1.0] + 0.3 * rng.normal(size=460) > 0).astype(float)])
    for name, part in (("clf.csv", rows[:60]), ("public.csv", rows[60:])):
        (data / name).write_text("x1,x2,y\n" + "\n".join(",".join(f"{v:.6f}" for v in r) for r in part) + "\n")
    listener = Listener()
    s = su.start(root / "state", "--backend", "ray", "--respond-after", "0", timeout=180)
    try:
        admin = Client(s.url, s.token)
        norm = {"oracle": "normal", "oracle_args": {"mean": 0.0, "sd": 1.0}}
        admin.add_dataset("code", str(data / "code.npy"), n=ct.N, epsilon_total=1e6, **norm)
        admin.add_dataset("plain", str(data / "plain.npy"), n=ct.N, epsilon_total=1e6, **norm)
        admin.add_dataset("clf", str(data / "clf.csv"), n=60, epsilon_total=1e6, public_file=str(data / "public.csv"))
        tokens = {name: admin.add_analyst(name) for name in ("alice", "bob")}
        admin.set_cap("alice", "code", epsilon=1e6)
        admin.set_cap("alice", "plain", epsilon=1e6)
        admin.set_cap("bob", "plain", epsilon=1e6)
        admin.set_cap("alice", "clf", epsilon=1e6)
        admin.allow_target("raydp.targets:mean")
        admin.allow_code("code", **LIMITS)
        admin.allow_code("clf")  # the service's default limits (scikit-learn's libraries need more memory)
        (s.dir / "curator.token").write_text(s.token)  # a token file in the service's directory
        s.tokens, s.data, s.listener = tokens, data, listener
        yield s
    finally:
        s.stop()
        listener.close()
        shutil.rmtree(root, ignore_errors=True)
        for p in root.parent.glob(root.name + "*"):
            if p.is_file():
                p.unlink()


def client(s, who="alice") -> Client:
    return Client(s.url, s.tokens[who], timeout=300)


def release(s, fn, dataset="code", who="alice", epsilon=EPS) -> dict:
    """The job of a release of ``fn`` (released, failed or cancelled), or ``{"error", "status"}`` of a refusal."""
    try:
        return client(s, who).release_code(dataset, fn, epsilon=epsilon, gamma=0.1, wait=240)
    except ServiceError as exc:
        return exc.body if exc.status == 200 else {"error": str(exc), "http": exc.status}


def spent(s, dataset="code", who="alice") -> float:
    return next(d for d in client(s, who).datasets() if d["name"] == dataset)["analyst"]["spent"]["epsilon"]


def others_still_served(s) -> None:
    job = client(s, "bob").release("plain", "raydp.targets:mean", epsilon=0.5, gamma=0.1, wait=240)
    assert job["status"] == "released" and np.isfinite(job["result"]["value"])


def cmdlines() -> dict[int, str]:
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    out[int(name)] = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                pass
    return out


def running_with(marker: str) -> list[int]:
    return [p for p, c in cmdlines().items() if marker in c and p != os.getpid() and su.alive([p])]


def gone_within(seconds: float, marker: str) -> list[int]:
    end = time.monotonic() + seconds
    while (left := running_with(marker)) and time.monotonic() < end:
        time.sleep(0.1)
    for p in left:  # the test's own leftovers: removed, and reported
        try:
            os.kill(p, 9)
        except OSError:
            pass
    return left


def template_processes(s) -> list[int]:
    """The sandbox's Python processes below the server (templates and their forks; not bwrap itself)."""
    out = []
    for p in su.alive(su.descendants(s.proc.pid)):
        try:
            with open(f"/proc/{p}/comm") as f:
                comm = f.read().strip()
            with open(f"/proc/{p}/cmdline", "rb") as f:
                line = f.read()
        except OSError:
            continue
        if comm != "bwrap" and b"_template_main" in line:
            out.append(p)
    return out


# ---------------------------------------------------------------------------------------------- releases


def test_a_function_is_released_its_delta_reused_and_its_source_and_hash_audited(srv):
    """A plain function: released near the private mean; the second release of the same bytes reuses the stored
    Δ̂ (keyed by the payload's hash); the request's audit row holds the source text and the payload's SHA-256,
    and the job's stored body holds the hash, not the payload."""
    payload, source = code_payload(ct.mean)
    assert source == inspect.getsource(ct)  # the module travels by value: its whole text is the source kept
    first = release(srv, ct.mean)
    assert first["status"] == "released", first
    r = first["result"]
    truth = float(np.mean(ct.private_data()))
    assert abs(r["value"] - truth) < 40 * r["sensitivity"] / EPS + 1e-9
    assert r["isolation"] == "sandboxed"
    again = release(srv, ct.mean)
    assert again["status"] == "released" and again["result"]["estimate"]["how"] == "precomputed"
    digest = hashlib.sha256(payload).hexdigest()
    rows = Client(srv.url, srv.token).audit()
    request = next(x for x in rows if x["job"] == first["job"] and x["action"] == "request")
    import json

    detail = json.loads(request["detail"])
    assert detail["source"] == source and detail["code_sha256"] == digest
    assert request["target"] == f"code sha256:{digest}"
    reserve = next(x for x in rows if x["job"] == first["job"] and x["action"] == "reserve")
    assert digest in reserve["target"]
    raw = b"".join(p.read_bytes() for p in srv.dir.glob("raydp.db*"))
    assert base64.b64encode(payload) not in raw  # the payload is not kept: its hash and source are
    assert Client(srv.url, srv.token).verify()["ok"]


def test_sampled_g_are_those_of_the_function_run_directly():
    """In this process: the sampler's G sample of a Submitted (evaluated in a sandbox session) equals, bit for bit,
    the sample of the function itself, for a scalar and a vector output; a pair is one round trip."""
    import raydp
    from raydp.seal import Submitted, close_sessions, sandbox_status

    if not sandbox_status()[0]:
        pytest.skip("bubblewrap cannot make a sandbox here")
    try:
        for fn in (ct.mean, ct.scaled_mean):
            sub = Submitted(code_payload(fn)[0], "")
            runs = []
            for target in (fn, sub):
                runs.append(raydp.estimate_sensitivity(
                    target, raydp.oracles.normal(mean=0.0, sd=1.0), 30, mechanism=raydp.Laplace(epsilon=1.0),
                    gamma=0.2, options=raydp.SamplerOptions.of(seed=7, backend="local", progress=False)))
            a, b = runs
            assert a.failures == b.failures == 0
            assert a.sensitivity == b.sensitivity
            assert np.array_equal(np.asarray(a.sample), np.asarray(b.sample))
            d = np.arange(5.0)
            assert np.array_equal(np.asarray(sub(d)), np.asarray(fn(d)))
    finally:
        close_sessions()


def test_a_scikit_learn_pipeline_with_a_custom_step_is_released_as_a_function(srv):
    """An estimator with a step of the analyst's own (a class the server does not have), fitted inside a function
    of the database: its coefficients are released (three finite numbers, Δ̂ sampled in the sandbox)."""
    job = release(srv, ct.fitted_coefficients, dataset="clf", epsilon=10.0)
    assert job["status"] == "released", job
    value = np.asarray(job["result"]["value"], dtype=float)
    assert value.shape == (3,) and np.all(np.isfinite(value)) and job["result"]["sensitivity"] > 0


def test_the_client_sends_the_function_by_value():
    """``code_payload`` pickles a function of the analyst's own module by value: the bytes load (here, in a test
    process of our own) where that module cannot be imported."""
    import subprocess
    import sys

    payload, _ = code_payload(ct.scaled_mean)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    p = subprocess.run([sys.executable, "-c", "import sys, cloudpickle\n"
                        "try:\n    import code_targets\n    sys.exit(3)\nexcept ImportError: pass\n"
                        "print(cloudpickle.loads(sys.stdin.buffer.read())([1.0, 3.0]).tolist())"],
                       input=payload, capture_output=True, cwd="/", env=env, timeout=60)
    assert p.returncode == 0, p.stderr[-500:]
    assert p.stdout.decode().strip() == "[2.0, 5.0]"


class _Marks:
    """Unpickling it creates the file ``path`` (then gives a mean): where it was unpickled shows."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return eval, (f"(__import__('os').system('touch {self.path} 2>/dev/null'), lambda d: sum(d) / len(d))[1]",)


def test_without_the_sandbox_submitted_code_never_runs(tmp_path):
    """Δ̂ of a payload whose unpickling creates a file is sampled here in the sandbox (whose /tmp is its own: no
    file appears). Then, in a process with RAYDP_SANDBOX=off, calling it on public data is refused and its release
    with that Δ̂ fails (the sealed process, unsandboxed, refuses to unpickle it): the file never appears."""
    import subprocess
    import sys

    import raydp
    from raydp.seal import Submitted, close_sessions, sandbox_status

    if not sandbox_status()[0]:
        pytest.skip("bubblewrap cannot make a sandbox here")
    marker = tmp_path / "unpickled"
    payload = pickle.dumps(_Marks(marker), protocol=4)
    store = tmp_path / "store"
    try:
        est = raydp.estimate_sensitivity(Submitted(payload, "source"), raydp.oracles.normal(0.0, 1.0), 20,
                                         mechanism=raydp.Laplace(epsilon=1.0), gamma=0.2,
                                         options=raydp.SamplerOptions.of(seed=1, backend="local", progress=False,
                                                                         store=str(store)))
    finally:
        close_sessions()
    assert est.failures == 0 and not marker.exists()
    script = (
        "import sys, warnings, numpy as np, raydp\n"
        "from raydp.seal import Submitted\n"
        "warnings.simplefilter('ignore')\n"
        "s = Submitted(sys.stdin.buffer.read(), 'source')\n"
        "try:\n    s(np.zeros(5)); print('ran')\nexcept raydp.TargetError: print('refused')\n"
        f"est = raydp.load_estimate({str(store)!r}, oracle=raydp.oracles.normal(0.0, 1.0))\n"
        "try:\n"
        "    raydp.sample_then_respond(np.ones(20), s, raydp.Laplace(epsilon=1.0), estimate=est); print('released')\n"
        "except raydp.RaydpError as exc: print('failed', type(exc).__name__)\n")
    p = subprocess.run([sys.executable, "-c", script], input=payload, capture_output=True, timeout=120,
                       env=su.env(RAYDP_SANDBOX="off"), cwd=str(tmp_path))
    assert p.stdout.decode().split()[:2] == ["refused", "failed"], (p.stdout, p.stderr[-800:])
    assert not marker.exists()


def test_the_server_never_unpickles_the_payload(srv):
    """A payload whose unpickling writes a marker file in the service's directory (then gives a mean): the release
    succeeds (the code was unpickled and ran, in the sandbox) and the marker never appears."""
    marker = srv.dir / "unpickled-here"

    class Boom:
        def __reduce__(self):
            return eval, (f"(__import__('os').system('touch {marker}'), lambda d: sum(d) / len(d))[1]",)

    payload = pickle.dumps(Boom(), protocol=4)
    before = spent(srv)
    status, job, _ = srv.call("POST", "/v1/releases", {
        "request_id": "unpickle-1", "dataset": "code", "target": {"code": base64.b64encode(payload).decode(),
                                                                  "source": "Boom"},
        "epsilon": EPS, "gamma": 0.1, "wait": 240}, token=srv.tokens["alice"])
    assert status == 200 and job["status"] == "released", job
    assert abs(job["result"]["value"] - float(np.mean(ct.private_data()))) < 1.0
    assert not marker.exists()
    assert spent(srv) == pytest.approx(before + EPS)


def test_bad_payloads_and_data_sets_without_the_switch_are_refused_and_charge_nothing(srv):
    before = {ds: spent(srv, ds) for ds in ("code", "plain")}
    a = srv.tokens["alice"]

    def post(target, dataset="code"):
        return srv.call("POST", "/v1/releases", {"request_id": os.urandom(8).hex(), "dataset": dataset,
                                                 "target": target, "epsilon": 1.0, "gamma": 0.1}, token=a)

    good = base64.b64encode(code_payload(ct.mean)[0]).decode()
    # the curator's switch, from the command line: on with a limit, then off again
    p = su.cli("admin", "allow-code", "plain", "--cpu-seconds", "7", token=srv.token, url=srv.url)
    assert p.returncode == 0 and "allowed on plain" in p.stdout and "cpu_seconds 7" in p.stdout, p.stderr
    p = su.cli("admin", "allow-code", "plain", "--off", token=srv.token, url=srv.url)
    assert p.returncode == 0 and "refused on plain" in p.stdout, p.stderr
    actions = [(r["action"], r["target"], r["outcome"]) for r in Client(srv.url, srv.token).audit()]
    assert actions[-2:] == [("allow code", "plain", "ok"), ("disallow code", "plain", "ok")]
    status, body, _ = post({"code": good, "source": ""}, dataset="plain")
    assert status == 403 and "allow-code plain" in body["error"]
    status, body, _ = post({"code": "%%% not base64 %%%"})
    assert status == 422 and "not base64" in body["error"]
    status, body, _ = post({"code": base64.b64encode(b"\0" * (600 << 10)).decode()})
    assert status == 422 and "at most" in body["error"]
    status, body, _ = post({"code": base64.b64encode(b"this is not a pickle").decode()})
    assert status == 422 and "pickle" in body["error"]
    status, body, _ = post({"code": good, "source": "s" * ((256 << 10) + 1)})
    assert status == 422 and "source" in body["error"]
    # a pickle stream that cannot be loaded (its module is nowhere): the sampling fails, uncharged
    job = srv.call("POST", "/v1/releases", {"request_id": "no-module", "dataset": "code", "target": {
        "code": base64.b64encode(b"\x80\x04\x95\x1b\x00\x00\x00\x00\x00\x00\x00\x8c\x0eno_such_module\x94\x8c\x01f"
                                 b"\x94\x93\x94.").decode()}, "epsilon": 1.0, "gamma": 0.1, "wait": 240}, token=a)[1]
    assert job["status"] == "failed" and job["error"].startswith("the submitted code failed"), job
    # the curator's switch: another analyst's token may not set it; an unknown data set is 404
    status, _, _ = srv.call("POST", "/v1/admin/allow-code", {"dataset": "plain"}, token=a)
    assert status == 403
    status, _, _ = srv.call("POST", "/v1/admin/allow-code", {"dataset": "nowhere"})
    assert status == 404
    assert {ds: spent(srv, ds) for ds in ("code", "plain")} == before
    others_still_served(srv)


# ---------------------------------------------------------------------------------------------- hostile code


def _files(srv) -> dict:
    return {"data": str(srv.data / "code.npy"), "state": str(srv.dir), "db": str(srv.dir / "raydp.db"),
            "token": str(srv.dir / "curator.token")}


@pytest.mark.parametrize("when", ["always", "private"])
def test_a_socket_to_the_host_reaches_nothing(srv, when):
    n0 = len(srv.listener.seen)
    job = release(srv, ct.act("tcp", when, srv.listener.port))
    assert job["status"] == "released", job
    if when == "private":
        assert abs(job["result"]["value"]) < 0.5  # it connected 0 times
    time.sleep(0.5)
    assert srv.listener.seen[n0:] == []
    others_still_served(srv)


@pytest.mark.parametrize("when", ["always", "private"])
def test_the_private_file_the_database_and_token_files_read_empty(srv, when):
    files = _files(srv)
    for p in files.values():
        assert os.path.exists(p)  # they are there, outside the sandbox
    job = release(srv, ct.act("read", when, list(files.values())))
    assert job["status"] == "released", job
    if when == "private":
        assert abs(job["result"]["value"]) < 0.5  # 0 bytes read, 0 entries listed
    others_still_served(srv)


@pytest.mark.parametrize("when", ["always", "private"])
def test_writes_outside_its_tmp_make_no_file(srv, when):
    tag = f"written-{when}-{os.getpid()}"
    places = [srv.dir / tag, srv.data / tag, srv.dir.parent / tag]
    job = release(srv, ct.act("write", when, [str(p) for p in places]))
    assert job["status"] == "released", job
    if when == "private":
        assert abs(job["result"]["value"]) < 0.5
    assert [p for p in places if p.exists()] == []
    others_still_served(srv)


@pytest.mark.parametrize("when", ["always", "private"])
def test_a_detached_process_does_not_survive(srv, when):
    marker = f"{len(when)}.{os.getpid()}271828"
    job = release(srv, ct.act("detach", when, marker))
    assert job["status"] == "released", job
    # the server's sessions close with the sampling, a Ray worker's after SESSION_IDLE seconds without a call
    assert gone_within(15.0, marker) == []
    others_still_served(srv)


@pytest.mark.parametrize("when", ["always", "private"])
def test_the_memory_limit_fails_the_release_with_the_policys_charge(srv, when):
    before = spent(srv)
    job = release(srv, ct.act("memory", when, 3 << 30))
    assert job["status"] == "failed", job
    if when == "always":
        assert job["error"].startswith("the submitted code failed on public oracle records") and \
            "nothing was charged" in job["error"]
        assert spent(srv) == before
    else:
        assert job["error"] == FAILED
        assert spent(srv) == pytest.approx(before + EPS)
    others_still_served(srv)


@pytest.mark.parametrize("when", ["always", "private"])
def test_the_cpu_limit_stops_a_busy_loop(srv, when):
    before = spent(srv)
    t0 = time.monotonic()
    job = release(srv, ct.act("cpu", when, 120))
    took = time.monotonic() - t0
    assert job["status"] == "failed", job
    assert took < LIMITS["wall_seconds"] + 15, took  # not the 120 s loop: the 2 s CPU limit (or at most the wall)
    if when == "always":
        assert "nothing was charged" in job["error"] and spent(srv) == before
    else:
        assert job["error"] == FAILED and spent(srv) == pytest.approx(before + EPS)
    others_still_served(srv)


@pytest.mark.parametrize("when", ["always", "private"])
def test_a_fork_bomb_is_capped_and_leaves_nothing(srv, when):
    job = release(srv, ct.act("forks", when, 200, allowance=LIMITS["processes"]))
    assert job["status"] == "released", job
    if when == "private":
        assert job["result"]["value"] <= LIMITS["processes"] + 0.5  # children alive at once: capped
    end = time.monotonic() + 15
    while len(template_processes(srv)) > 2 and time.monotonic() < end:
        time.sleep(0.2)
    assert len(template_processes(srv)) <= 2  # the pool's templates, no bomb
    others_still_served(srv)


def test_sampling_on_ray_workers_runs_in_the_sandbox(srv):
    """Sampled on Ray: while the job runs, bwrap processes are started by Ray worker processes (a session of the
    code on a worker), and the code — which raises where it can reach the test's TCP server or read the data
    file or the service's directory — is released: on the workers too it could do neither."""
    n0 = len(srv.listener.seen)
    seen, stop = set(), threading.Event()

    def watch():
        while not stop.is_set():
            lines = cmdlines()
            for p in su.descendants(srv.proc.pid):
                try:
                    with open(f"/proc/{p}/comm") as f:
                        if f.read().strip() != "bwrap":
                            continue
                    with open(f"/proc/{p}/stat") as f:
                        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                except (OSError, ValueError, IndexError):
                    continue
                if "ray::" in lines.get(ppid, "") or "default_worker" in lines.get(ppid, ""):
                    seen.add(p)
            time.sleep(0.05)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        files = _files(srv)
        job = release(srv, ct.where_am_i(srv.listener.port, [files["data"], files["state"]]))
    finally:
        stop.set()
        t.join(5)
    assert job["status"] == "released", job
    assert seen, "no sandbox was started by a Ray worker"
    assert srv.listener.seen[n0:] == []


def test_the_cli_releases_a_function_from_a_file_and_keeps_the_files_text(srv, tmp_path):
    """``raydp remote release-code DATASET --code FILE.py:FUNCTION``: the file imported on the analyst's side, its
    function released (value near the private mean, the statement), the file's text the source in the audit row;
    a malformed ``--code``, a missing file or function, and a file that raises on import: one line, exit 2."""
    file = tmp_path / "my_target.py"
    text = "import numpy as np\n\n\ndef clipped_mean(d):\n    return float(np.clip(d, -50.0, 50.0).mean())\n"
    file.write_text(text)
    p = su.cli("remote", "release-code", "code", "--code", f"{file}:clipped_mean", "--epsilon", "0.5", "--gamma", "0.1",
               "--wait", "240", token=srv.tokens["alice"], url=srv.url, timeout=300)
    assert p.returncode == 0, p.stderr
    value, statement = p.stdout.splitlines()[:2]
    truth = float(np.mean(np.clip(ct.private_data(), -50.0, 50.0)))
    assert abs(float(value) - truth) < 5.0, (value, truth)  # Laplace noise at ε = 0.5 on a clipped mean
    assert statement.startswith("(0.5, 0, 0.1)-random differential privacy")
    rows = Client(srv.url, srv.token).audit()
    request = [x for x in rows if x["action"] == "request" and "code sha256:" in (x["target"] or "")][-1]
    import json

    assert json.loads(request["detail"])["source"] == text
    (tmp_path / "raises.py").write_text("raise RuntimeError('not today')\n")
    for bad, words in ((f"{file}", "must be FILE.py:FUNCTION"), (f"{tmp_path}/none.py:f", "no file"),
                       (f"{file}:missing", "no function 'missing'"),
                       (f"{tmp_path}/raises.py:f", "raised RuntimeError: not today")):
        p = su.cli("remote", "release-code", "code", "--code", bad, "--epsilon", "0.5", "--gamma", "0.1",
                   token=srv.tokens["alice"], url=srv.url)
        assert p.returncode == 2 and words in p.stderr and len(p.stderr.strip().splitlines()) == 1, (bad, p.stderr)
