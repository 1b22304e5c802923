"""``raydp serve``, ``raydp admin`` and ``raydp remote``: the service and its two kinds of clients.

Registered on ``raydp``'s parser by :func:`add_commands`. ``raydp serve`` needs the ``[serve]`` extra
(FastAPI, uvicorn, SQLAlchemy), imported only when it starts; ``admin`` and ``remote`` use
:class:`raydp.client.Client` (the standard library). Every error is one line on stderr and exit status 2,
as for every raydp command.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import socket
import sys

from ..client import Client, ServiceError
from ..errors import InvalidArgumentError
from ..plan import format_up

HOST = "127.0.0.1"
DEFAULT_PORT = 8750
DEFAULT_RESPOND_AFTER = 2.0
DEFAULT_LEASE = 30.0
INSTALL = "pip install 'raydp-sensitivity[serve]'"


def add_commands(sub, parser_class) -> None:
    """Add ``serve``, ``admin`` and ``remote`` to ``raydp``'s subcommands."""
    s = sub.add_parser("serve", help="serve private data sets to analysts over an HTTP JSON API on 127.0.0.1 "
                                     f"(needs the [serve] extra: {INSTALL})")
    s.add_argument("dir", help="the service's directory: its database, Δ̂ stores (created 0700 on the first start)")
    s.add_argument("--host", default=HOST, help="127.0.0.1 (the default); any other address is refused unless "
                                               "--behind-proxy is given")
    s.add_argument("--port", type=int, default=DEFAULT_PORT,
                   help=f"TCP port (default {DEFAULT_PORT}; 0: any free port, printed as the url line)")
    s.add_argument("--address", help="a Ray cluster for sampling Δ̂ (default: in process or an embedded Ray)")
    s.add_argument("--backend", choices=("auto", "local", "ray"), default="auto",
                   help="where Δ̂ is sampled (default auto: in process when small, Ray when large)")
    s.add_argument("--respond-after", type=float, default=DEFAULT_RESPOND_AFTER, metavar="SECONDS",
                   help=f"every release answers exactly SECONDS after its private data was sent (default "
                        f"{DEFAULT_RESPOND_AFTER:g}; a target still running then is stopped and the release fails, "
                        "counted); 0 turns the deadline off, which lets a release's time depend on the data")
    s.add_argument("--workers", type=int, default=8, help="releases run at once (default 8; the sandbox runs two)")
    s.add_argument("--allow-unsandboxed", action="store_true",
                   help="start even where bubblewrap cannot sandbox the private evaluation (not advised)")
    s.add_argument("--behind-proxy", action="store_true",
                   help="let --host be another address than 127.0.0.1, e.g. 0.0.0.0 in a container (a Kubernetes "
                        "pod) reached only through a TLS-terminating ingress or proxy: between it and the service "
                        "tokens travel in clear")
    s.add_argument("--db", metavar="URL",
                   help="a PostgreSQL database shared by several raydp serve processes: postgresql://USER@HOST:PORT/DB "
                        "(a password is best given in $PGPASSWORD or ~/.pgpass, not on the command line; default: "
                        "SQLite in DIR, one process)")
    s.add_argument("--lease", type=float, default=DEFAULT_LEASE, metavar="SECONDS",
                   help=f"how long this server counts as alive without a heartbeat (default {DEFAULT_LEASE:g}; it "
                        "beats every third of that): the unfinished jobs of a server whose lease ran out are failed "
                        "by another server, reservations counted")
    s.set_defaults(func=cmd_serve)

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default=None, help="the service (default $RAYDP_URL)")
    common.add_argument("--token-file", help="a file holding the token (default $RAYDP_TOKEN)")
    common.add_argument("--json", action="store_true", help="print the service's JSON answer")

    a = sub.add_parser("admin", help="the curator's commands against a raydp serve")
    asub = a.add_subparsers(dest="admin_cmd", required=True, parser_class=parser_class)
    ds = asub.add_parser("dataset", help="register a private data set").add_subparsers(
        dest="what", required=True, parser_class=parser_class)
    d = ds.add_parser("add", parents=[common], help="register a data set: its private file stays on the server")
    d.add_argument("name")
    d.add_argument("--data", required=True, help="the private file on the server (absolute path: .parquet, .csv, .npy)")
    d.add_argument("--n", type=int, required=True, help="its number of records (public)")
    d.add_argument("--oracle", help="its public oracle: a function of raydp.oracles (exponential, normal, ...)")
    d.add_argument("--oracle-args", help="JSON keyword arguments of --oracle")
    d.add_argument("--public-file", help="or: a public Parquet/CSV file on the server to bootstrap from")
    d.add_argument("--epsilon-total", type=float, required=True)
    d.add_argument("--delta-total", type=float, default=0.0)
    d.set_defaults(func=cmd_admin_dataset)
    an = asub.add_parser("analyst", help="add an analyst").add_subparsers(dest="what", required=True,
                                                                          parser_class=parser_class)
    x = an.add_parser("add", parents=[common], help="add an analyst; prints its token once")
    x.add_argument("name")
    x.set_defaults(func=cmd_admin_analyst)
    x = asub.add_parser("cap", parents=[common], help="set an analyst's cap on a data set")
    x.add_argument("analyst")
    x.add_argument("dataset")
    x.add_argument("--epsilon", type=float, required=True)
    x.add_argument("--delta", type=float, default=0.0)
    x.set_defaults(func=cmd_admin_cap)
    x = asub.add_parser("revoke", parents=[common], help="revoke an analyst's token")
    x.add_argument("analyst")
    x.set_defaults(func=cmd_admin_revoke)
    x = asub.add_parser("allow", parents=[common], help="allow-list a target (module:function) or an estimator class")
    x.add_argument("kind", choices=("target", "estimator"))
    x.add_argument("name", help="module:function (a target) or module:Class (a scikit-learn estimator)")
    x.add_argument("--args", help="a target's JSON arguments, pinned: analysts may use only these")
    x.set_defaults(func=cmd_admin_allow)
    x = asub.add_parser("allow-code", parents=[common],
                        help="let analysts release their own functions on a data set (run only in the sandbox)")
    x.add_argument("dataset")
    x.add_argument("--off", action="store_true", help="turn it off: the data set refuses analysts' own code")
    x.add_argument("--memory", type=int, metavar="BYTES", help="address space per process in the sandbox")
    x.add_argument("--cpu-seconds", type=int, help="CPU seconds per process (a sampling session: in total)")
    x.add_argument("--processes", type=int, help="processes alive at once in the sandbox")
    x.add_argument("--wall-seconds", type=float, help="seconds for one answer of the code")
    x.set_defaults(func=cmd_admin_allow_code)
    x = asub.add_parser("precompute", parents=[common], help="sample and store Δ̂ for (target, data set, γ)")
    x.add_argument("dataset")
    x.add_argument("--target", required=True)
    x.add_argument("--target-args")
    x.add_argument("--mechanism", default="laplace", choices=("laplace", "gaussian", "exponential", "bernstein"))
    x.add_argument("--mechanism-args")
    x.add_argument("--gamma", type=float, required=True)
    x.add_argument("--seed", type=int)
    x.set_defaults(func=cmd_admin_precompute)
    x = asub.add_parser("list", parents=[common], help="data sets, budgets, analysts, caps, allow-lists, Δ̂ stores")
    x.set_defaults(func=cmd_admin_list)
    au = asub.add_parser("audit", help="the audit log").add_subparsers(dest="what", required=True,
                                                                       parser_class=parser_class)
    x = au.add_parser("verify", parents=[common], help="check the audit log's hash chain")
    x.add_argument("--expect", metavar="ROWS:HASH", help="a head printed by an earlier verify, kept elsewhere")
    x.set_defaults(func=cmd_admin_verify)
    x = au.add_parser("show", parents=[common], help="print the audit rows")
    x.add_argument("--after", type=int, default=0)
    x.add_argument("--limit", type=int, default=1000)
    x.set_defaults(func=cmd_admin_audit)

    r = sub.add_parser("remote", help="an analyst's commands against a raydp serve")
    rsub = r.add_subparsers(dest="remote_cmd", required=True, parser_class=parser_class)
    x = rsub.add_parser("datasets", parents=[common], help="the data sets you may use, with your remaining budget")
    x.set_defaults(func=cmd_remote_datasets)
    x = rsub.add_parser("release", parents=[common], help="a release of an allow-listed target")
    x.add_argument("dataset")
    x.add_argument("--target", required=True, help="module:function, as allow-listed")
    x.add_argument("--target-args", help="JSON keyword arguments")
    x.add_argument("--mechanism", default="laplace", choices=("laplace", "gaussian", "exponential", "bernstein"))
    x.add_argument("--mechanism-args")
    _add_budget_flags(x)
    x.set_defaults(func=cmd_remote_release)
    x = rsub.add_parser("release-code", parents=[common],
                        help="a release of your own function, on a data set whose curator allows code")
    x.add_argument("dataset")
    x.add_argument("--code", required=True, metavar="FILE.py:FUNCTION",
                   help="the function, in a Python file of yours (imported here, on your machine; the service gets "
                        "it pickled, with the file's text as its source, and runs it only in its sandbox)")
    x.add_argument("--mechanism", default="laplace", choices=("laplace", "gaussian", "exponential", "bernstein"))
    x.add_argument("--mechanism-args")
    _add_budget_flags(x)
    x.set_defaults(func=cmd_remote_release_code)
    x = rsub.add_parser("fit", parents=[common], help="a scikit-learn model released (its parameters)")
    x.add_argument("dataset")
    x.add_argument("--estimator", required=True,
                   help='JSON: {"class": "sklearn.linear_model:LogisticRegression", "params": {...}} or '
                        '{"steps": [...]}, with "tune", "mechanism", "time_budget"')
    _add_budget_flags(x)
    x.set_defaults(func=cmd_remote_fit)
    x = rsub.add_parser("job", parents=[common], help="a job's status, progress and answer")
    x.add_argument("job")
    x.add_argument("--wait", action="store_true", help="wait until it ends")
    x.set_defaults(func=cmd_remote_job)


def _add_budget_flags(x) -> None:
    x.add_argument("--epsilon", type=float, required=True)
    x.add_argument("--delta", type=float, default=0.0)
    x.add_argument("--gamma", type=float, required=True)
    x.add_argument("--request-id", help="your id of this request: repeating it returns the first answer, "
                                        "charged once (default: a fresh one)")
    x.add_argument("--wait", type=float, default=60.0, help="seconds to wait before polling the job (default 60)")


def _json_arg(text: str | None, flag: str) -> dict | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidArgumentError(f"{flag} must be a JSON object ({exc.msg})") from None
    if not isinstance(value, dict):
        raise InvalidArgumentError(f"{flag} must be a JSON object, got {type(value).__name__}")
    return value


def _client(a) -> Client:
    token = None
    if a.token_file:
        try:
            with open(a.token_file, encoding="utf-8") as f:
                token = f.read().strip()
        except OSError as exc:
            raise InvalidArgumentError(f"--token-file: cannot read {a.token_file!r} ({exc.strerror})") from None
    return Client(a.url, token)


def _print(a, doc, text: str) -> int:
    print(json.dumps(doc) if a.json else text)
    return 0


# ---------------------------------------------------------------------------------------------- serve


def cmd_serve(a) -> int:
    """Start the service in ``a.dir`` (see :mod:`raydp.serve`)."""
    try:
        import fastapi  # noqa: F401
        import sqlalchemy  # noqa: F401
        import uvicorn
    except ImportError as exc:
        raise InvalidArgumentError(f"raydp serve needs the [serve] extra ({exc.name} is missing): {INSTALL}") from None
    if a.host != HOST and not a.behind_proxy:
        raise InvalidArgumentError(f"--host {a.host}: raydp serve binds {HOST} only (tokens travel in clear over "
                                   "HTTP); reach it through an SSH tunnel or a TLS proxy on this machine, or give "
                                   "--behind-proxy where a TLS-terminating proxy is the only way in")
    if not 0 <= a.port <= 65535:
        raise InvalidArgumentError(f"--port must be 0..65535, got {a.port}")
    if not (math.isfinite(a.respond_after) and a.respond_after >= 0):
        raise InvalidArgumentError(f"--respond-after must be a number of seconds >= 0, got {a.respond_after:g}")
    if a.workers < 1:
        raise InvalidArgumentError(f"--workers must be >= 1, got {a.workers}")
    if not (math.isfinite(a.lease) and a.lease >= 1):
        raise InvalidArgumentError(f"--lease must be a number of seconds >= 1, got {a.lease:g}")
    if a.db is not None and not a.db.startswith(("postgresql://", "postgres://", "postgresql+psycopg://")):
        raise InvalidArgumentError("--db takes a PostgreSQL URL, postgresql://USER@HOST:PORT/DB (without --db the "
                                   "database is SQLite in DIR)")
    from ..seal import sandbox_status, warm

    import warnings

    with warnings.catch_warnings():  # said below, in one line, or on purpose (--allow-unsandboxed)
        warnings.simplefilter("ignore")
        ok, why = sandbox_status()
    if not ok and not a.allow_unsandboxed:
        raise InvalidArgumentError(f"raydp serve refuses to start without the sandbox ({why}): install bubblewrap "
                                   "(apt-get install bubblewrap), or pass --allow-unsandboxed to serve anyway")
    from sqlalchemy.exc import SQLAlchemyError

    from .db import Database, masked
    from .service import Service, Settings

    root = os.path.realpath(a.dir)
    os.umask(0o077)  # every file the service makes: 0600, every directory 0700
    os.makedirs(root, mode=0o700, exist_ok=True)
    os.chmod(root, 0o700)
    try:
        database = Database(a.db or f"sqlite:///{os.path.join(root, 'raydp.db')}")
        token = database.init()
        database.register(a.lease)
    except ImportError as exc:
        raise InvalidArgumentError(f"--db: the PostgreSQL driver is missing ({exc.name}): {INSTALL}") from None
    except SQLAlchemyError as exc:  # the driver's first line: it names the host and port, never the password
        first = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise InvalidArgumentError(f"--db {masked(a.db) if a.db else 'sqlite'}: {first}") from None
    for name in os.listdir(root):
        if name.startswith("raydp.db"):
            os.chmod(os.path.join(root, name), 0o600)
    failed = database.recover()
    service = Service(database, Settings(root=root, respond_after=a.respond_after or None, backend=a.backend,
                                         address=a.address, workers=a.workers, lease=a.lease))
    warm()  # the sandbox's first template starts now, not at the first release
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((a.host, a.port))
    except OSError as exc:
        raise InvalidArgumentError(f"--port {a.port}: cannot listen on {a.host} ({exc.strerror})") from None
    sock.listen(1024)
    port = sock.getsockname()[1]
    from .app import make_app

    app = make_app(service)
    if token is not None:
        print(f"admin token {token}")
        print("  (shown once: the service keeps only its SHA-256; save it, e.g. export RAYDP_TOKEN=...)")
    if failed:
        by = "servers whose lease ran out" if a.db else "the last stop"
        print(f"recovered  {len(failed)} job(s) left unfinished by {by}: failed (reservations stay counted)")
    deadline = f"{a.respond_after:g} s after the data is sent" if a.respond_after else "off"
    print(f"serving    {root} (sandbox: {why if ok else 'off: ' + why}; answers {deadline})")
    if a.db:
        print(f"database   {masked(a.db)} (shared: server {database.instance}, lease {a.lease:g} s)")
    print(f"url http://{a.host}:{port}", flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=5,
                            timeout_keep_alive=30)
    server = uvicorn.Server(config)
    try:
        server.run(sockets=[sock])
    finally:
        service.close()
    return 0


# ---------------------------------------------------------------------------------------------- admin


def cmd_admin_dataset(a) -> int:
    if (a.oracle is None) == (a.public_file is None):
        raise InvalidArgumentError("give either --oracle (with --oracle-args) or --public-file")
    doc = _client(a).add_dataset(a.name, os.path.abspath(a.data), n=a.n, epsilon_total=a.epsilon_total,
                                 delta_total=a.delta_total, oracle=a.oracle,
                                 oracle_args=_json_arg(a.oracle_args, "--oracle-args"),
                                 public_file=None if a.public_file is None else os.path.abspath(a.public_file))
    return _print(a, doc, f"data set   {a.name}: n={a.n}, ε total {a.epsilon_total:g}, δ total {a.delta_total:g}")


def cmd_admin_analyst(a) -> int:
    token = _client(a).add_analyst(a.name)
    return _print(a, {"analyst": a.name, "token": token},
                  f"analyst {a.name} token {token}\n  (shown once: the service keeps only its SHA-256)")


def cmd_admin_cap(a) -> int:
    doc = _client(a).set_cap(a.analyst, a.dataset, epsilon=a.epsilon, delta=a.delta)
    return _print(a, doc, f"cap        {a.analyst} on {a.dataset}: ε {a.epsilon:g}, δ {a.delta:g}")


def cmd_admin_revoke(a) -> int:
    doc = _client(a).revoke(a.analyst)
    return _print(a, doc, f"revoked    {a.analyst}")


def cmd_admin_allow(a) -> int:
    c = _client(a)
    doc = c.allow_target(a.name, _json_arg(a.args, "--args")) if a.kind == "target" else c.allow_estimator(a.name)
    pinned = f" with {a.args}" if a.args else ""
    return _print(a, doc, f"allowed    {a.kind} {a.name}{pinned}")


def cmd_admin_allow_code(a) -> int:
    doc = _client(a).allow_code(a.dataset, allow=not a.off, memory=a.memory, cpu_seconds=a.cpu_seconds,
                                processes=a.processes, wall_seconds=a.wall_seconds)
    if a.off:
        return _print(a, doc, f"code       refused on {a.dataset}")
    limits = ", ".join(f"{k} {v:g}" for k, v in doc["limits"].items())
    return _print(a, doc, f"code       allowed on {a.dataset} (sandbox limits: {limits})")


def cmd_admin_precompute(a) -> int:
    job = _client(a).precompute(a.dataset, a.target, args=_json_arg(a.target_args, "--target-args"), gamma=a.gamma,
                                mechanism=a.mechanism, mechanism_args=_json_arg(a.mechanism_args, "--mechanism-args"),
                                seed=a.seed)
    r = job["result"]
    return _print(a, job, f"stored     Δ̂ = {r['sensitivity']:.6g} for {a.target} on {a.dataset} (m={r['m']} k={r['k']} "
                          f"γ={format_up(r['gamma'])}, seed {r['seed']}): store {r['store']}")


def cmd_admin_list(a) -> int:
    doc = _client(a).overview()
    if a.json:
        print(json.dumps(doc))
        return 0
    lines = ["data sets"]
    for d in doc["datasets"]:
        b = d["dataset"]
        lines.append(f"  {d['name']}: n={d['n']}, {_budget(b)}; {_guarantee(b['guarantee'])}")
    lines.append("analysts")
    for p in doc["principals"]:
        lines.append(f"  {p['name']} ({p['role']}){' revoked ' + p['revoked'][:19] if p['revoked'] else ''}")
    lines.append("caps")
    for c in doc["caps"]:
        lines.append(f"  {c['analyst']} on {c['dataset']}: {_budget(c)}")
    lines.append("allowed")
    for x in doc["allowed"]:
        lines.append(f"  {x['kind']} {x['name']}" + (f" {json.dumps(x['args'])}" if x["args"] is not None else ""))
    lines.append("stored Δ̂")
    for e in doc["estimates"]:
        lines.append(f"  {e['id']}: {e['target']['name']} n={e['n']} {e['measure']['name']} γ={format_up(e['gamma'])} "
                     f"Δ̂={e['sensitivity']:.6g}")
    print("\n".join(lines))
    return 0


def _spent(b: dict, what: str) -> str:
    return f"spent {format_up(b['spent'][what])} of {b[what + '_total']:g}, remaining {b['remaining'][what]:g}"


def _budget(b: dict) -> str:
    """ε spent and remaining, and δ's when there is a δ budget."""
    text = f"ε {_spent(b, 'epsilon')}"
    return text + (f", δ {_spent(b, 'delta')}" if b["delta_total"] or b["spent"]["delta"] else "")


def _guarantee(g: dict) -> str:
    if not g["releases"]:
        return "no releases yet"
    return (f"{g['releases']} release(s) compose to ({format_up(g['epsilon'])}, {format_up(g['delta'])}, "
            f"{format_up(g['gamma'])})-random DP")


def cmd_admin_verify(a) -> int:
    doc = _client(a).verify(a.expect)
    if a.json:
        print(json.dumps(doc))
    elif doc["ok"]:
        print(f"audit log intact: {doc['rows']} rows, head {doc['rows']}:{doc['head']}\n"
              "  (keep that head elsewhere; --expect it later to find a rewritten history)")
    else:
        print(f"audit log NOT intact ({len(doc['problems'])} problem(s)):")
        for p in doc["problems"]:
            print(f"  {p}")
    if not doc["ok"]:
        print(f"raydp: error: the audit log fails verification: {doc['problems'][0]}", file=sys.stderr)
        return 1
    return 0


def cmd_admin_audit(a) -> int:
    rows = _client(a).audit(a.after, a.limit)
    if a.json:
        print(json.dumps(rows))
        return 0
    for r in rows:
        amounts = "" if r["epsilon"] is None else f" ε={r['epsilon']} δ={r['delta']} γ={r['gamma']}"
        print(f"{r['seq']:>6} {r['time'][:23]} {r['actor']:<12} {r['action']:<14} {r['outcome'] or '':<10}"
              f"{amounts}{' job ' + r['job'] if r['job'] else ''}")
    return 0


# ---------------------------------------------------------------------------------------------- remote


def cmd_remote_datasets(a) -> int:
    rows = _client(a).datasets()
    if a.json:
        print(json.dumps(rows))
        return 0
    for d in rows:
        mine = d.get("analyst")
        print(f"{d['name']}: n={d['n']}; yours: {_budget(mine)}; the data set's: ε remaining "
              f"{d['dataset']['remaining']['epsilon']:g}")
    return 0


def cmd_remote_release(a) -> int:
    job = _client(a).release(a.dataset, a.target, args=_json_arg(a.target_args, "--target-args"), epsilon=a.epsilon,
                             delta=a.delta, gamma=a.gamma, mechanism=a.mechanism,
                             mechanism_args=_json_arg(a.mechanism_args, "--mechanism-args"), request_id=a.request_id,
                             wait=a.wait)
    r = job["result"]
    return _print(a, job, f"{r['value']}\n{r['statement']}")


def _function_from_file(spec: str):
    """``FILE.py:FUNCTION`` -> the function, the file imported as a module of its own (in ``sys.modules``, so that
    the client pickles it by value)."""
    import importlib.util

    path, sep, name = spec.rpartition(":")
    if not sep or not path.endswith(".py") or not name.isidentifier():
        raise InvalidArgumentError(f"--code must be FILE.py:FUNCTION, got {spec!r}")
    if not os.path.isfile(path):
        raise InvalidArgumentError(f"--code: no file {path!r}")
    module_name = "submitted_" + hashlib.sha256(os.path.realpath(path).encode()).hexdigest()[:12]
    loader = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(loader)
    sys.modules[module_name] = module
    try:
        loader.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - your own file, on your own machine: its error is yours to see
        raise InvalidArgumentError(f"--code: importing {path} raised {type(exc).__name__}: {exc}".splitlines()[0]) \
            from None
    function = getattr(module, name, None)
    if not callable(function):
        raise InvalidArgumentError(f"--code: {path} has no function {name!r}")
    return function


def cmd_remote_release_code(a) -> int:
    function = _function_from_file(a.code)
    job = _client(a).release_code(a.dataset, function, epsilon=a.epsilon, delta=a.delta, gamma=a.gamma,
                                  mechanism=a.mechanism, mechanism_args=_json_arg(a.mechanism_args, "--mechanism-args"),
                                  request_id=a.request_id, wait=a.wait)
    r = job["result"]
    return _print(a, job, f"{r['value']}\n{r['statement']}")


def cmd_remote_fit(a) -> int:
    spec = _json_arg(a.estimator, "--estimator")
    job = _client(a).fit(a.dataset, spec, epsilon=a.epsilon, delta=a.delta, gamma=a.gamma, request_id=a.request_id,
                         wait=a.wait)
    r = job["result"]
    params = "\n".join(f"{k} = {v}" for k, v in r["params"].items())
    return _print(a, job, f"{params}\n{r['statement']}")


def cmd_remote_job(a) -> int:
    c = _client(a)
    job = c.wait(a.job) if a.wait else c.job(a.job)
    text = f"{job['status']}: {job['progress']}" + (f"\n{job['error']}" if job.get("error") else "")
    if job.get("result") and "value" in job["result"]:
        text += f"\n{job['result']['value']}\n{job['result'].get('statement', '')}"
    return _print(a, job, text)


__all__ = ["add_commands", "cmd_serve", "ServiceError"]
