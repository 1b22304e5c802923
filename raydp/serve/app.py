"""The HTTP JSON API of ``raydp serve`` (FastAPI; the OpenAPI schema is at ``/v1/openapi.json``).

Every route but the schema needs ``Authorization: Bearer TOKEN``. A missing, wrong or revoked token gets
401 with one body whatever the reason (the token is hashed and looked up the same way in every case); an
analyst's token on a curator route (``/v1/admin/...``) gets 403. Every error is one JSON object,
``{"error": "one line"}``: 400 a body that is not JSON, 422 a body that does not fit the request's schema
(ε ≤ 0, an unknown field, ...), 404 an unknown data set, target or job (another analyst's job too), 402 a
release the budget refuses, 409 a request id reused with another body, 413 a body over
:data:`MAX_BODY` bytes.

A release answers 200 when it ended (released, failed or cancelled: see ``status``), 202 with the job's id
while it runs (``GET /v1/jobs/{id}``), 402 when it was refused; a retry with the same ``request_id`` gets
the first answer, status code included, and charges nothing.

``GET /`` is the curator's page (:data:`PAGE`, a file of this package): one self-contained HTML page, public and
holding no data, that asks for a token and shows what that token may read through the routes above. Its
inline script and style are allowed by their SHA-256 in its ``Content-Security-Policy``, which allows nothing
from another origin. Every answer says ``X-Content-Type-Options: nosniff`` and ``Referrer-Policy: no-referrer``;
an API answer also ``Cache-Control: no-store``.
"""

from __future__ import annotations

import contextlib
import json
import logging
from typing import Annotated, Literal, Union

from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import BudgetError, RaydpError
from . import db as _db
from .service import Service, ServiceError

log = logging.getLogger("raydp.serve")

#: The largest request body accepted (bytes); a larger one gets 413 before it is read to the end.
MAX_BODY = 1 << 20
UNAUTHORIZED = {"error": "unauthorized: give a valid token as 'Authorization: Bearer TOKEN'"}
#: The page served at ``GET /``, next to this module.
PAGE = "page.html"
#: The answers' headers (the page's own policy is :func:`page_policy`).
SECURITY_HEADERS = [(b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer")]
API_HEADERS = [(b"cache-control", b"no-store"), (b"content-security-policy", b"default-src 'none'; frame-ancestors 'none'")]


# ---------------------------------------------------------------------------------------------- bodies


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class TargetSpec(_Body):
    """An allow-listed target by name, with JSON keyword arguments for its factory."""

    name: str = Field(min_length=3, max_length=300, description="module:function, as on the allow-list")
    args: dict | None = Field(None, description="keyword arguments (JSON) of the factory")


class CodeSpec(_Body):
    """An analyst's own function, where the data set's curator allows it (``raydp admin allow-code``): ``code``
    is base64 of ``cloudpickle.dumps(function)`` (at most ``MAX_CODE`` bytes), ``source`` its text (at most
    ``MAX_SOURCE`` characters, kept in the audit log). The server never unpickles it: it runs only in the sandbox."""

    code: str = Field(min_length=1, description="base64 of cloudpickle.dumps(function)")
    source: str = Field("", description="the function's source text (kept in the audit log with the release)")


def _target_kind(value) -> str:
    """Which of the two a request's ``target`` is (a JSON object when read, a model when written)."""
    return "code" if (isinstance(value, dict) and "code" in value) or isinstance(value, CodeSpec) else "name"


class EstimatorStep(_Body):
    class_: str = Field(alias="class", min_length=3, max_length=300, description="module:Class on the allow-list")
    params: dict = Field(default_factory=dict)


class EstimatorSpec(_Body):
    """A scikit-learn estimator (one class, or ``steps`` of a pipeline) and the PrivateEstimator choices."""

    class_: str | None = Field(None, alias="class", min_length=3, max_length=300)
    params: dict | None = None
    steps: list[EstimatorStep] | None = Field(None, min_length=1, max_length=8)
    tune: bool = False
    mechanism: Literal["auto", "laplace", "gaussian"] | None = None
    time_budget: float | Literal["auto"] | None = Field("auto", description="seconds of sampling, 'auto' or null")

    @model_validator(mode="after")
    def _one(self):
        if (self.class_ is None) == (self.steps is None):
            raise ValueError("give either class (with params) or steps")
        if isinstance(self.time_budget, float) and not self.time_budget > 0:
            raise ValueError("time_budget must be > 0 seconds, 'auto' or null")
        return self


class ReleaseRequest(_Body):
    """A release: an allow-listed ``target`` or a scikit-learn ``estimator``, at (ε, δ, γ)."""

    request_id: str = Field(min_length=1, max_length=200, description="the client's id: a retry repeats it")
    dataset: str = Field(min_length=1, max_length=200)
    target: Annotated[Union[Annotated[TargetSpec, Tag("name")], Annotated[CodeSpec, Tag("code")]],
                      Discriminator(_target_kind)] | None = None
    estimator: EstimatorSpec | None = None
    mechanism: str = Field("laplace", description="laplace, gaussian, exponential or bernstein (targets)")
    mechanism_args: dict | None = None
    epsilon: float = Field(gt=0, allow_inf_nan=False)
    delta: float = Field(0.0, ge=0, lt=1, allow_inf_nan=False)
    gamma: float = Field(gt=0, lt=1, allow_inf_nan=False)
    wait: float = Field(30.0, ge=0, le=600, description="seconds to wait for the answer before a 202 with the job")

    @model_validator(mode="after")
    def _one(self):
        if (self.target is None) == (self.estimator is None):
            raise ValueError("give either target or estimator")
        return self


class OracleSpec(_Body):
    name: str | None = Field(None, description="a function of raydp.oracles (exponential, normal, ...)")
    args: dict | None = None
    public_file: str | None = Field(None, description="a public Parquet/CSV file on the server to bootstrap from")

    @model_validator(mode="after")
    def _one(self):
        if (self.name is None) == (self.public_file is None):
            raise ValueError("give either name (with args) or public_file")
        return self


class DatasetRequest(_Body):
    name: str = Field(min_length=1, max_length=200)
    path: str = Field(min_length=1, max_length=4096, description="the private file on the server (.parquet, .csv, .npy)")
    oracle: OracleSpec
    n: int = Field(ge=1)
    epsilon_total: float = Field(gt=0, allow_inf_nan=False)
    delta_total: float = Field(0.0, ge=0, lt=1, allow_inf_nan=False)


class AnalystRequest(_Body):
    name: str = Field(min_length=1, max_length=200)


class CapRequest(_Body):
    analyst: str
    dataset: str
    epsilon: float = Field(ge=0, allow_inf_nan=False)
    delta: float = Field(0.0, ge=0, lt=1, allow_inf_nan=False)


class CodeLimits(_Body):
    """The sandbox's limits for analysts' code on a data set (:class:`raydp.seal.Limits`); an omitted one keeps the
    service's default (``raydp.serve.service.CODE_LIMITS``)."""

    memory: int | None = Field(None, ge=1, description="bytes of address space per process")
    cpu_seconds: int | None = Field(None, ge=1, description="CPU seconds per process (a sampling session: in total)")
    processes: int | None = Field(None, ge=1, description="processes alive at once in the sandbox")
    wall_seconds: float | None = Field(None, gt=0, allow_inf_nan=False, description="seconds for one answer")


class AllowCodeRequest(_Body):
    dataset: str = Field(min_length=1, max_length=200)
    allow: bool = Field(True, description="false: turn it off (the data set refuses analysts' own code)")
    limits: CodeLimits | None = None


class AllowRequest(_Body):
    kind: Literal["target", "estimator"]
    name: str = Field(min_length=3, max_length=300)
    args: dict | None = Field(None, description="a target's pinned arguments (analysts may not give others)")


class EstimateRequest(_Body):
    dataset: str
    target: TargetSpec
    mechanism: str = "laplace"
    mechanism_args: dict | None = None
    gamma: float = Field(gt=0, lt=1, allow_inf_nan=False)
    seed: int | None = Field(None, ge=0)
    wait: float = Field(0.0, ge=0, le=600)


# ---------------------------------------------------------------------------------------------- the app


class _BodyLimit:
    """Refuse a body over ``limit`` bytes with 413: at once from its Content-Length, else while it streams."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        for k, v in scope.get("headers", ()):
            if k == b"content-length":
                try:
                    too_big = int(v) > self.limit
                except ValueError:
                    too_big = True
                if too_big:
                    return await _send_error(send, 413, f"the body is larger than {self.limit} bytes")
        seen, started, answered = 0, False, False

        async def limited():
            # Past the limit: answer 413 here and tell the app the client left (it stops reading and sends
            # nothing that arrives: the 413 is the answer).
            nonlocal seen, answered
            if answered:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    if not started:
                        await _send_error(send, 413, f"the body is larger than {self.limit} bytes")
                    answered = True
                    return {"type": "http.disconnect"}
            return message

        async def tracking(message):
            nonlocal started
            if answered:
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        await self.app(scope, limited, tracking)


class _Auth:
    """Every ``/v1/`` route but the schema: the token is hashed and looked up before anything else is read
    (a missing, wrong or revoked one: 401, one body); the principal goes to the route in the scope."""

    def __init__(self, app, service: Service):
        self.app, self.service = app, service

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not scope["path"].startswith("/v1/") or scope["path"] == "/v1/openapi.json":
            return await self.app(scope, receive, send)
        import anyio.to_thread

        header = next((v for k, v in scope.get("headers", ()) if k == b"authorization"), b"")
        scheme, _, token = header.decode("latin-1").partition(" ")
        token = token.strip() if scheme.lower() == "bearer" else ""
        principal = await anyio.to_thread.run_sync(self.service.db.principal, token)
        if principal is None:
            body = json.dumps(UNAUTHORIZED).encode()
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                    (b"www-authenticate", b"Bearer")]})
            await send({"type": "http.response.body", "body": body})
            return
        scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)


class _Headers:
    """Add :data:`SECURITY_HEADERS` to every answer, :data:`API_HEADERS` to every one outside the page."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        extra = SECURITY_HEADERS + ([] if scope["path"] == "/" else API_HEADERS)

        async def adding(message):
            if message["type"] == "http.response.start":
                names = {k.lower() for k, _ in message.get("headers", ())}
                message = {**message, "headers": [*message.get("headers", ()),
                                                  *((k, v) for k, v in extra if k not in names)]}
            await send(message)

        await self.app(scope, receive, adding)


def page_policy(html: str) -> str:
    """The page's Content-Security-Policy: its inline scripts and styles by their SHA-256, API calls to its own
    origin, nothing else from anywhere (no form posts, no frames, no base URL)."""
    import base64
    import hashlib
    import re

    def hashes(tag: str) -> str:
        found = re.findall(rf"<{tag}>(.*?)</{tag}>", html, flags=re.S)
        return " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(b.encode()).digest()).decode()}'" for b in found)

    return (f"default-src 'none'; script-src {hashes('script')}; style-src {hashes('style')}; connect-src 'self'; "
            "img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


async def _send_error(send, status: int, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


def _error(status: int, message: str, headers=None) -> JSONResponse:
    return JSONResponse({"error": message.splitlines()[0] if message else "error"}, status_code=status, headers=headers)


def job_view(service: Service, row: dict) -> dict:
    row = service.view(row)
    ds = None if row.get("dataset_id") is None else service.db.dataset_name(row["dataset_id"])
    return {"job": row["id"], "kind": row["kind"], "request_id": row.get("request_id"), "dataset": ds,
            "status": row["status"], "progress": row.get("progress"),
            "result": None if row.get("result") is None else json.loads(row["result"]),
            "error": row.get("error"), "created": row["created"], "updated": row["updated"]}


def _status_of(row: dict) -> int:
    return {"refused": 402}.get(row["status"], 200 if row["status"] in _db.FINAL else 202)


def make_app(service: Service) -> FastAPI:
    """The API over ``service``."""
    @contextlib.asynccontextmanager
    async def lifespan(_app):
        import anyio.to_thread

        # requests wait for their jobs in worker threads: more of them than anyio's default 40
        anyio.to_thread.current_default_thread_limiter().total_tokens = 200
        yield

    app = FastAPI(title="raydp serve", version="1", openapi_url="/v1/openapi.json", docs_url=None, redoc_url=None,
                  lifespan=lifespan,
                  description="Releases of allow-listed targets and scikit-learn models on a curator's private data "
                              "sets, with (ε, δ, γ)-random differential privacy and budgets kept by the service.")

    @app.exception_handler(ServiceError)
    async def _service_error(_request, exc: ServiceError):
        return _error(exc.status, str(exc))

    @app.exception_handler(_db.NotFound)
    async def _not_found(_request, exc):
        return _error(404, str(exc))

    @app.exception_handler(_db.Conflict)
    async def _conflict(_request, exc):
        return _error(409, str(exc))

    @app.exception_handler(BudgetError)
    async def _budget(_request, exc):
        return _error(402, str(exc))

    @app.exception_handler(RaydpError)
    async def _raydp(_request, exc):
        return _error(422, str(exc))

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request, exc: RequestValidationError):
        errors = exc.errors()
        first = errors[0] if errors else {}
        if first.get("type") == "json_invalid":
            return _error(400, "the body is not valid JSON")
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "body"
        msg = str(first.get("msg", "invalid")).replace("Value error, ", "")
        return _error(422, f"{where}: {msg}" + (f" ({len(errors) - 1} more)" if len(errors) > 1 else ""))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request, exc: StarletteHTTPException):
        return _error(exc.status_code, str(exc.detail), getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _internal(_request, exc: Exception):
        log.error("internal error: %s", type(exc).__name__)  # the type alone: a message could quote anything
        return _error(500, "internal error")

    app.add_middleware(_BodyLimit, limit=MAX_BODY)
    app.add_middleware(_Auth, service=service)  # a request without a valid token reads nothing
    app.add_middleware(_Headers)  # the outermost: a 401 or a 413 carries the headers too

    from importlib.resources import files

    from fastapi.responses import HTMLResponse

    page = files(__package__).joinpath(PAGE).read_text(encoding="utf-8")
    page_headers = {"Content-Security-Policy": page_policy(page), "Cache-Control": "no-store"}

    @app.get("/", include_in_schema=False)
    def the_page():
        return HTMLResponse(page, headers=page_headers)

    def who(request: Request) -> _db.Principal:
        principal = getattr(request.state, "principal", None)
        if principal is None:  # a route outside /v1/ (the page alone, which calls none of these)
            raise StarletteHTTPException(401, UNAUTHORIZED["error"], headers={"WWW-Authenticate": "Bearer"})
        return principal

    def curator(p: _db.Principal = Depends(who)) -> _db.Principal:
        if p.role != "admin":
            raise StarletteHTTPException(403, "forbidden: this route is the curator's")
        return p

    def analyst(p: _db.Principal = Depends(who)) -> _db.Principal:
        if p.role != "analyst":
            raise StarletteHTTPException(403, "forbidden: releases are asked for with an analyst's token")
        return p

    # ---- anyone with a token ---------------------------------------------------------------------------
    @app.get("/v1/whoami")
    def whoami(p: _db.Principal = Depends(who)):
        return {"name": p.name, "role": p.role}

    @app.get("/v1/jobs/{job_id}")
    def get_job(job_id: str, p: _db.Principal = Depends(who)):
        row = service.db.job(job_id) if len(job_id) <= 40 else None
        if row is None or (row["owner_id"] != p.id and p.role != "admin"):
            raise ServiceError("no such job", 404)  # another analyst's job: the same answer
        return JSONResponse(job_view(service, row), status_code=200)

    # ---- analysts ------------------------------------------------------------------------------------------
    @app.get("/v1/datasets")
    def list_datasets(p: _db.Principal = Depends(analyst)):
        return {"datasets": service.db.datasets_for(p.id)}

    @app.get("/v1/jobs")
    def list_jobs(p: _db.Principal = Depends(analyst)):
        return {"jobs": service.db.jobs_of(p.id)}

    @app.get("/v1/releases")
    def my_releases(limit: int = Query(20, ge=1, le=500), p: _db.Principal = Depends(analyst)):
        return {"releases": service.db.releases(p.id, min(max(limit, 1), 200))}

    @app.get("/v1/budget/history")
    def my_spending(p: _db.Principal = Depends(analyst)):
        return {"analysts": service.db.spending(p.id)}

    @app.post("/v1/releases")
    def release(body: ReleaseRequest, p: _db.Principal = Depends(analyst)):
        request = body.model_dump(by_alias=True)
        row, _ = service.submit_release(p, request)
        row = service.wait(row["id"], body.wait) or row
        return JSONResponse(job_view(service, row), status_code=_status_of(row))

    # ---- the curator ---------------------------------------------------------------------------------------
    @app.post("/v1/admin/datasets")
    def add_dataset(body: DatasetRequest, p: _db.Principal = Depends(curator)):
        from .service import build_oracle

        path, oracle = _check_data_path(body.path), body.oracle.model_dump(exclude_none=True)
        if "public_file" in oracle:
            oracle["public_file"] = _check_data_path(oracle["public_file"], "public_file", npy=False)
        build_oracle(oracle)  # a bad oracle is refused now, not at the first release
        did = service.db.add_dataset(p.name, body.name, path, oracle, body.n, body.epsilon_total, body.delta_total)
        service.hide()
        return {"dataset": body.name, "id": did}

    @app.post("/v1/admin/analysts")
    def add_analyst(body: AnalystRequest, p: _db.Principal = Depends(curator)):
        return {"analyst": body.name, "token": service.db.add_analyst(p.name, body.name)}

    @app.post("/v1/admin/revoke")
    def revoke(body: AnalystRequest, p: _db.Principal = Depends(curator)):
        service.db.revoke(p.name, body.name)
        return {"revoked": body.name}

    @app.put("/v1/admin/caps")
    def set_cap(body: CapRequest, p: _db.Principal = Depends(curator)):
        service.db.set_cap(p.name, body.analyst, body.dataset, body.epsilon, body.delta)
        return {"analyst": body.analyst, "dataset": body.dataset, "epsilon": body.epsilon, "delta": body.delta}

    @app.post("/v1/admin/allow")
    def allow(body: AllowRequest, p: _db.Principal = Depends(curator)):
        from .service import _resolve

        if body.kind == "estimator" and body.args is not None:
            raise ServiceError("args are for targets; an estimator's parameters come with each request")
        _resolve(body.name, body.kind)  # importable here, now
        service.db.allow(p.name, body.kind, body.name, body.args)
        return {"allowed": body.kind, "name": body.name, "args": body.args}

    @app.post("/v1/admin/allow-code")
    def allow_code(body: AllowCodeRequest, p: _db.Principal = Depends(curator)):
        from ..seal import Limits
        from .service import CODE_LIMITS

        service.db.dataset(body.dataset)  # an unknown data set: 404
        limits = {} if body.limits is None else body.limits.model_dump(exclude_none=True)
        if body.allow:
            Limits(**{**CODE_LIMITS, **limits})
            service.db.allow(p.name, "code", body.dataset, limits)
        else:
            service.db.disallow(p.name, "code", body.dataset)
        return {"dataset": body.dataset, "code": body.allow, "limits": {**CODE_LIMITS, **limits} if body.allow else None}

    @app.post("/v1/admin/estimates")
    def precompute(body: EstimateRequest, p: _db.Principal = Depends(curator)):
        row = service.submit_estimate(p, body.model_dump(exclude={"wait"}))
        row = service.wait(row["id"], body.wait) or row
        return JSONResponse(job_view(service, row), status_code=_status_of(row))

    @app.get("/v1/admin/overview")
    def overview(p: _db.Principal = Depends(curator)):
        out = service.db.overview()
        out["jobs"] = service.db.jobs_of(None, limit=50)
        return out

    @app.get("/v1/admin/releases")
    def releases(limit: int = Query(20, ge=1, le=500), p: _db.Principal = Depends(curator)):
        return {"releases": service.db.releases(None, min(max(limit, 1), 200))}

    @app.get("/v1/admin/budget/history")
    def spending(p: _db.Principal = Depends(curator)):
        return {"analysts": service.db.spending()}

    @app.get("/v1/admin/audit")
    def audit_rows(after: int = Query(0, ge=0), limit: int = Query(1000, ge=1, le=100000),
                   p: _db.Principal = Depends(curator)):
        return {"rows": service.db.audit_rows(after, min(max(limit, 1), 10000))}

    @app.get("/v1/admin/audit/verify")
    def verify(expect: str | None = None, p: _db.Principal = Depends(curator)):
        expected = None
        if expect is not None:
            rows, _, digest = expect.partition(":")
            if not rows.isdigit() or len(digest) != 64:
                raise ServiceError("expect must be ROWS:HASH (as a verify printed it)")
            expected = (int(rows), digest)
        return service.db.verify(expected)

    return app


def _check_data_path(path: str, what: str = "path", npy: bool = True) -> str:
    import os

    from ..tables import check_regular

    real = os.path.realpath(os.path.expanduser(path))
    if not os.path.isabs(os.path.expanduser(path)):
        raise ServiceError(f"{what} must be an absolute path on the server, got {path!r}")
    kinds = (".parquet", ".pq", ".parq", ".csv", ".npy") if npy else (".parquet", ".pq", ".parq", ".csv")
    if not real.endswith(kinds):
        raise ServiceError(f"{what} must be a {', '.join(kinds)} file, got {path!r}")
    try:
        check_regular(real, ServiceError, f"{what} {path!r}")
    except FileNotFoundError:
        raise ServiceError(f"{what}: no such file {path!r}") from None
    except OSError as exc:
        raise ServiceError(f"{what}: cannot read {path!r} ({exc.strerror or type(exc).__name__})") from None
    return real
