"""A client of ``raydp serve``: the analyst's calls and the curator's, over HTTP (the standard library only).

>>> from raydp.client import Client
>>> c = Client("http://127.0.0.1:8750", token)                  # doctest: +SKIP
>>> c.datasets()                                                 # doctest: +SKIP
[{'name': 'incomes', 'n': 1000, 'dataset': {...remaining...}, 'analyst': {...}}]
>>> r = c.release("incomes", "raydp.targets:mean", epsilon=0.1, gamma=0.05)   # doctest: +SKIP
>>> r["result"]["value"], r["result"]["statement"]                           # doctest: +SKIP

``url`` defaults to ``$RAYDP_URL``, ``token`` to ``$RAYDP_TOKEN``. A release carries a ``request_id`` (a
fresh one unless given): the client repeats a request whose connection broke with the same id, and the
service answers a repeat with the first answer without charging again. A refusal for budget raises
:class:`raydp.errors.BudgetError`; any other refusal or a failed release :class:`ServiceError`, whose
message is the service's one line.
"""

from __future__ import annotations

import base64
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

from .errors import BudgetError, RaydpError

__all__ = ["Client", "ServiceError", "FINAL", "code_payload"]

FINAL = ("released", "failed", "refused", "cancelled", "done")


class ServiceError(RaydpError, RuntimeError):
    """The service refused a request or a release failed: ``status`` is the HTTP status (0: not reached),
    ``body`` the service's answer."""

    def __init__(self, message: str, status: int = 0, body: dict | None = None):
        super().__init__(message)
        self.status = status
        self.body = body or {}


class Client:
    """One token's calls to a ``raydp serve`` at ``url``."""

    def __init__(self, url: str | None = None, token: str | None = None, *, timeout: float = 60.0):
        url = url or os.environ.get("RAYDP_URL")
        token = token if token is not None else os.environ.get("RAYDP_TOKEN")
        if not url:
            raise ServiceError("no service URL: give url= (or --url), or set RAYDP_URL")
        if not token:
            raise ServiceError("no token: give token= (or --token-file), or set RAYDP_TOKEN")
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ServiceError(f"the service URL must look like http://127.0.0.1:PORT, got {url!r}")
        self.url = url.rstrip("/")
        self.token = token.strip()
        self.timeout = timeout

    # ---- the wire --------------------------------------------------------------------------------------
    def request(self, method: str, path: str, body: dict | None = None, *, timeout: float | None = None,
                retries: int = 0) -> tuple[int, dict]:
        """(status, JSON answer) of one call; 4xx and 5xx raise (402: BudgetError) except what ``_answer``
        keeps. ``retries``: times a broken connection is tried again (only for idempotent calls)."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        for attempt in range(retries + 1):
            req = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
            try:
                with urllib.request.urlopen(req, timeout=timeout or self.timeout) as resp:
                    return resp.status, _json(resp.read())
            except urllib.error.HTTPError as exc:
                answer = _json(exc.read())
                message = answer.get("error") or f"HTTP {exc.code}"
                if exc.code == 402:
                    raise BudgetError(message) from None
                raise ServiceError(message, exc.code, answer) from None
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as exc:
                if attempt < retries:
                    time.sleep(0.2 * (attempt + 1))
                    continue
                reason = getattr(exc, "reason", exc)
                raise ServiceError(f"cannot reach the service at {self.url} ({reason})") from None
        raise AssertionError("unreachable")

    # ---- anyone ----------------------------------------------------------------------------------------
    def whoami(self) -> dict:
        return self.request("GET", "/v1/whoami")[1]

    def job(self, job_id: str) -> dict:
        return self.request("GET", f"/v1/jobs/{urllib.parse.quote(job_id, safe='')}")[1]

    def wait(self, job_id: str, timeout: float | None = None, poll: float = 0.5) -> dict:
        """Poll a job until it ends (or ``timeout`` seconds pass: the job as it is then)."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if job["status"] in FINAL or (end is not None and time.monotonic() >= end):
                return job
            time.sleep(poll)

    # ---- analysts ----------------------------------------------------------------------------------------
    def datasets(self) -> list[dict]:
        """The data sets this analyst may use, with the data set's and this analyst's remaining budget."""
        return self.request("GET", "/v1/datasets")[1]["datasets"]

    def release(self, dataset: str, target: str, *, args: dict | None = None, epsilon: float, delta: float = 0.0,
                gamma: float, mechanism: str = "laplace", mechanism_args: dict | None = None,
                request_id: str | None = None, wait: float = 30.0, follow: bool = True) -> dict:
        """A release of the allow-listed ``target`` (``module:function``) on ``dataset``: the job, with
        ``result`` (``value``, ``statement``, ...). ``follow``: poll a job still running after ``wait``."""
        body = {"request_id": request_id or uuid.uuid4().hex, "dataset": dataset,
                "target": {"name": target, "args": args}, "mechanism": mechanism, "mechanism_args": mechanism_args,
                "epsilon": epsilon, "delta": delta, "gamma": gamma, "wait": wait}
        return self._release(body, wait, follow)

    def release_code(self, dataset: str, function, *, epsilon: float, delta: float = 0.0, gamma: float,
                     mechanism: str = "laplace", mechanism_args: dict | None = None, source: str | None = None,
                     request_id: str | None = None, wait: float = 30.0, follow: bool = True) -> dict:
        """A release of your own ``function`` of the database on ``dataset``, where its curator allows code
        (``raydp admin allow-code``). The function is sent as ``cloudpickle.dumps(function)`` (its module by
        value unless it is an installed library's, so the server needs none of your files) with its source text
        (``inspect.getsource``, or ``source``), which the service keeps in its audit log. The server never
        unpickles it: Δ̂ is sampled and the private value computed in its sandbox."""
        payload, text = code_payload(function)
        body = {"request_id": request_id or uuid.uuid4().hex, "dataset": dataset,
                "target": {"code": base64.b64encode(payload).decode("ascii"),
                           "source": text if source is None else source},
                "mechanism": mechanism, "mechanism_args": mechanism_args, "epsilon": epsilon, "delta": delta,
                "gamma": gamma, "wait": wait}
        return self._release(body, wait, follow)

    def fit(self, dataset: str, estimator: dict, *, epsilon: float, delta: float = 0.0, gamma: float,
            request_id: str | None = None, wait: float = 60.0, follow: bool = True) -> dict:
        """A scikit-learn model released on ``dataset``: ``estimator`` is ``{"class": "module:Class", "params":
        {...}}`` or ``{"steps": [...]}``, with the PrivateEstimator choices ``tune``, ``mechanism``,
        ``time_budget``. The result holds the released ``params`` and the statement."""
        body = {"request_id": request_id or uuid.uuid4().hex, "dataset": dataset, "estimator": estimator,
                "epsilon": epsilon, "delta": delta, "gamma": gamma, "wait": wait}
        return self._release(body, wait, follow)

    def _release(self, body: dict, wait: float, follow: bool) -> dict:
        _, job = self.request("POST", "/v1/releases", body, timeout=wait + 60, retries=2)
        if follow and job["status"] not in FINAL:
            job = self.wait(job["job"])
        if job["status"] == "refused":
            raise BudgetError(job.get("error") or "refused")
        if job["status"] in ("failed", "cancelled"):
            raise ServiceError(job.get("error") or job["status"], 200, job)
        return job

    # ---- the curator ----------------------------------------------------------------------------------------
    def add_dataset(self, name: str, path: str, *, n: int, epsilon_total: float, delta_total: float = 0.0,
                    oracle: str | None = None, oracle_args: dict | None = None,
                    public_file: str | None = None) -> dict:
        spec = {"public_file": public_file} if public_file is not None else {"name": oracle, "args": oracle_args}
        return self.request("POST", "/v1/admin/datasets", {"name": name, "path": path, "oracle": spec, "n": n,
                                                           "epsilon_total": epsilon_total,
                                                           "delta_total": delta_total})[1]

    def add_analyst(self, name: str) -> str:
        """A new analyst; returns its token (shown once: the service keeps only its hash)."""
        return self.request("POST", "/v1/admin/analysts", {"name": name})[1]["token"]

    def revoke(self, analyst: str) -> dict:
        return self.request("POST", "/v1/admin/revoke", {"name": analyst})[1]

    def set_cap(self, analyst: str, dataset: str, *, epsilon: float, delta: float = 0.0) -> dict:
        return self.request("PUT", "/v1/admin/caps", {"analyst": analyst, "dataset": dataset, "epsilon": epsilon,
                                                      "delta": delta})[1]

    def allow_target(self, name: str, args: dict | None = None) -> dict:
        return self.request("POST", "/v1/admin/allow", {"kind": "target", "name": name, "args": args})[1]

    def allow_estimator(self, name: str) -> dict:
        return self.request("POST", "/v1/admin/allow", {"kind": "estimator", "name": name})[1]

    def allow_code(self, dataset: str, *, allow: bool = True, memory: int | None = None,
                   cpu_seconds: int | None = None, processes: int | None = None,
                   wall_seconds: float | None = None) -> dict:
        """Let analysts release their own code on ``dataset`` (``allow=False``: no more), run in the sandbox
        with these limits (:class:`raydp.seal.Limits`; an omitted one keeps the service's default)."""
        limits = {k: v for k, v in (("memory", memory), ("cpu_seconds", cpu_seconds), ("processes", processes),
                                    ("wall_seconds", wall_seconds)) if v is not None}
        return self.request("POST", "/v1/admin/allow-code", {"dataset": dataset, "allow": allow,
                                                             "limits": limits or None})[1]

    def precompute(self, dataset: str, target: str, *, args: dict | None = None, gamma: float,
                   mechanism: str = "laplace", mechanism_args: dict | None = None, seed: int | None = None,
                   wait: float = 600.0) -> dict:
        """Sample and store Δ̂ for (target, data set, mechanism, γ); the job, with the store's id and Δ̂."""
        _, job = self.request("POST", "/v1/admin/estimates", {
            "dataset": dataset, "target": {"name": target, "args": args}, "mechanism": mechanism,
            "mechanism_args": mechanism_args, "gamma": gamma, "seed": seed, "wait": min(wait, 600.0)},
            timeout=min(wait, 600.0) + 60)
        if job["status"] not in FINAL:
            job = self.wait(job["job"])
        if job["status"] != "done":
            raise ServiceError(job.get("error") or job["status"], 200, job)
        return job

    def overview(self) -> dict:
        return self.request("GET", "/v1/admin/overview")[1]

    def audit(self, after: int = 0, limit: int = 1000) -> list[dict]:
        return self.request("GET", f"/v1/admin/audit?after={int(after)}&limit={int(limit)}")[1]["rows"]

    def verify(self, expect: str | None = None) -> dict:
        """The audit chain checked: ``{"ok", "rows", "head", "problems"}``; ``expect`` is a ``ROWS:HASH`` printed
        by an earlier verify (kept outside the service)."""
        query = "" if expect is None else "?expect=" + urllib.parse.quote(expect)
        return self.request("GET", "/v1/admin/audit/verify" + query)[1]


def code_payload(function) -> tuple[bytes, str]:
    """``(cloudpickle.dumps(function), its source text)`` as :meth:`Client.release_code` sends them: the
    function's own module is pickled by value (not by its name) unless it is an installed library's or the
    standard library's, so the server needs none of the analyst's files. The source is that whole module's text
    when it goes by value (everything in it travels and may run), else the function's own; ``""`` when
    ``inspect`` cannot find it. The service keeps the source as sent: nothing checks it against the bytes."""
    import inspect
    import sys
    import sysconfig

    import cloudpickle

    if not callable(function):
        raise TypeError(f"function must be callable, got {type(function).__name__}")
    module = sys.modules.get(getattr(function, "__module__", None) or "")
    file = getattr(module, "__file__", None)
    path = os.path.realpath(file) if file else ""
    roots = {os.path.realpath(p) for k, p in sysconfig.get_paths().items() if k in ("stdlib", "purelib", "platlib")}
    by_value = (module is not None and module.__name__ != "__main__" and bool(path)
                and not any(path.startswith(r + os.sep) for r in roots) and module.__name__.partition(".")[0] != "raydp")
    if by_value:
        cloudpickle.register_pickle_by_value(module)
    try:
        payload = cloudpickle.dumps(function)
    finally:
        if by_value:
            cloudpickle.unregister_pickle_by_value(module)
    try:  # what is pickled: the whole module when it goes by value (its other functions run too), else the function
        source = inspect.getsource(module if by_value else function)
    except (OSError, TypeError):
        source = ""
    return payload, source


def _json(raw: bytes) -> dict:
    try:
        value = json.loads(raw.decode("utf-8") or "{}")
    except (UnicodeDecodeError, json.JSONDecodeError):
        return {"error": "the service answered something that is not JSON"}
    return value if isinstance(value, dict) else {"value": value}
