"""The FastAPI application: the routes the model gets, errors as OpenAI error bodies, and the
service routes.

======================================  ==========================================================
route                                   answers
======================================  ==========================================================
``GET /``                               the playground
``GET /plan``                           the plan drawing (``wgc show --placement --format html``)
``GET /health``                         200 when the conductor answers and every process is alive,
                                        else 503 (the processes are started, warmed up and
                                        captured before the server listens); ``status`` is
                                        ``ok``, ``degraded`` while a dead worker is restarted,
                                        ``down`` past the restart budget, or ``unavailable``
``GET /metrics``                        Prometheus text (`metrics`)
``GET /v1/models``                      the served model, OpenAI-style
``GET /v1/wgc/model``                   what it takes, emits and declares; its routes, and why it
                                        lacks the others
``GET /v1/wgc/nodes``                   every rank's node calls (count, rows, seconds) and stream
                                        buffers since it started (`metrics.node_table`)
``POST /v1/requests``                   the native route (`native`)
``POST /v1/chat/completions`` ...       the OpenAI routes the model can serve (`model`); the
                                        others answer 404 saying why
``WS /v1/realtime``                     live transcription (`realtime`), with
                                        ``/v1/audio/transcriptions`` (`transcriptions`)
``GET /openapi.json``, ``/docs``        the OpenAPI schema, and a page to browse it
======================================  ==========================================================

With API keys (`auth`), every route but ``/health`` asks ``Authorization: Bearer KEY`` (401
otherwise). Errors are ``{"error": {"message", "type", "code", "param", "problems"}}`` (what
OpenAI clients raise from): 400 for a request refused at the door, a body that does not
validate (with every problem) or an input over the deployment's limits (`body_limits`,
`wgc_runtime.host.inputs`), 413 for a body over its ``request_bytes``, 404 for a route the
model lacks or a ``model`` it is not, 429 over the admission cap (``Retry-After``), 503 over
the connection cap or when a process of the deployment died, 504 past a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from wgc_runtime.core.conductor.bounds import capacity
from wgc_runtime.host.server import (
    native,
    openai_chat,
    openai_media,
    playground,
    realtime,
    sessions,
    transcriptions,
)
from wgc_runtime.host.server.access_log import AccessLog
from wgc_runtime.host.server.auth import ApiKeys
from wgc_runtime.host.server.body_limits import BodyLimits
from wgc_runtime.host.server.calls import HttpError, Server
from wgc_runtime.host.server.metrics import node_table
from wgc_runtime.host.server.model import (
    CHAT,
    EDITS,
    IMAGES,
    NATIVE,
    REALTIME,
    SPEECH,
    TRANSCRIPTIONS,
)
from wgc_runtime.host.server.schemas import validation_problems

Alive = Callable[[], dict[str, bool]]
Health = Callable[[], Any]  # `processes.launcher.Health`: status, restarting, restarts


def create_app(
    server: Server,
    alive: Alive,
    plan_html: str | None = None,
    state: Health | None = None,
    api_keys: Sequence[str] = (),
    log_format: str | None = None,
) -> FastAPI:
    """The application serving ``server``'s model; ``alive``: process name -> up; ``state``:
        the deployment's own health (restarts), when it has one; ``api_keys``: the keys a request
        must bear (`auth`; none: no key asked); ``log_format``: one line per request (`access_log`:
    ``json`` or ``text``; None: none)."""

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        server.gateway.start()
        yield
        await server.gateway.close()

    info = server.info
    app = FastAPI(
        title=f"wgc · {info.name}",
        version="1",
        description=f"`{info.name}` under placement `{info.placement}`, served by `wgc serve`.",
        lifespan=lifespan,
    )
    started = int(time.time())
    routes = [NATIVE]
    app.include_router(native.router(server))
    app.include_router(sessions.router(server))
    if info.serves(CHAT):
        app.include_router(openai_chat.router(server))
    if info.serves(SPEECH):
        app.include_router(openai_media.speech_router(server))
    if info.serves(IMAGES):
        app.include_router(openai_media.images_router(server, info.serves(EDITS)))
    if info.serves(TRANSCRIPTIONS):
        app.include_router(transcriptions.router(server))
        app.include_router(realtime.router(server))
    routes += [r for r in (CHAT, SPEECH, IMAGES, EDITS, TRANSCRIPTIONS) if info.serves(r)]
    routes += [REALTIME] if info.serves(TRANSCRIPTIONS) else []
    for route in (CHAT, SPEECH, IMAGES, EDITS, TRANSCRIPTIONS):
        why = info.missing(route)
        if why is not None:
            app.add_api_route(route, _lacking(why), methods=["POST"], include_in_schema=False)

    app.add_middleware(
        BodyLimits,
        limits=server.limits,
        body_timeout_s=server.body_timeout_s,
        tokens=capacity(server.spec),
    )  # 413 / 400 / 408 before parsing
    app.add_middleware(ApiKeys, keys=api_keys)  # nothing runs without a key
    if log_format is not None:
        app.add_middleware(AccessLog, fmt=log_format)  # outermost: every answer is logged
    app.add_exception_handler(HttpError, _http_error)
    app.add_exception_handler(RequestValidationError, _invalid)

    @app.get("/health", tags=["service"])
    async def health() -> Response:
        procs = alive()
        ok = server.gateway.lost is None and all(procs.values()) and await server.gateway.ping(1.0)
        body: dict[str, Any] = {"status": "ok" if ok else "unavailable"}
        if state is not None:
            h = state()
            if h.status != "ok":  # degraded (a worker coming back) or down
                body["status"], ok = h.status, False
            body.update(restarting=list(h.restarting), restarts=h.restarts)
        body.update(model=info.name, processes=procs)
        return JSONResponse(body, 200 if ok else 503)

    @app.get("/metrics", tags=["service"])
    async def metrics() -> Response:
        stats = None if server.gateway.lost else await server.gateway.stats(1.0)
        usage = await asyncio.to_thread(server.metrics.poll_usage)  # asks every process
        return Response(server.metrics.render(stats, usage), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/wgc/nodes", tags=["native"])
    async def nodes() -> dict:
        usage = await asyncio.to_thread(server.metrics.poll_usage)  # asks every process
        return node_table(usage or {})

    @app.get("/v1/models", tags=["openai"])
    async def models() -> dict:
        entry = {"id": info.name, "object": "model", "created": started, "owned_by": "wgc"}
        return {"object": "list", "data": [entry]}

    @app.get("/v1/wgc/model", tags=["native"])
    async def model() -> dict:
        return info.to_json(routes)

    @app.get("/", include_in_schema=False)
    async def index() -> Response:
        return HTMLResponse(playground.page(info.to_json(routes)))

    @app.get("/plan", include_in_schema=False)
    async def plan() -> Response:
        return HTMLResponse(plan_html or playground.PLAN_MISSING, 200 if plan_html else 404)

    return app


async def _http_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HttpError)
    return JSONResponse(exc.body(), exc.status, headers=exc.headers)


async def _invalid(request: Request, exc: Exception) -> Response:
    """A body that does not validate: 400 with every problem, named like the door's."""
    assert isinstance(exc, RequestValidationError)
    problems = validation_problems(exc.errors())
    message = "; ".join(str(p) for p in problems)
    return await _http_error(request, HttpError(400, message, code="invalid", problems=problems))


def _lacking(why: str) -> Callable[[], object]:
    async def lacking() -> Response:
        body = {"error": {"message": why, "type": "invalid_request_error", "code": "no_route"}}
        return JSONResponse(body, 404)

    return lacking
