"""``/v1/sessions``: the sessions `wgc serve` keeps (the placement's ``sessions:``).

``GET /v1/sessions`` lists them, least recently used first (id, seconds idle, whether a request
runs it); ``DELETE /v1/sessions/{id}`` forgets one and frees its pages on every rank (404 when
it is not kept). A request continues a session by naming it (``"session"`` in the native and
chat bodies); see `wgc_runtime.core.conductor.sessions`. API keys apply as to every route.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from wgc_runtime.contract.control import SessionList
from wgc_runtime.host.server.calls import HttpError, Server

SESSIONS = "/v1/sessions"


def router(server: Server) -> APIRouter:
    api = APIRouter()

    async def ask(drop: str | None = None) -> SessionList:
        try:
            return await server.gateway.sessions(drop)
        except TimeoutError:
            raise HttpError(503, "the conductor did not answer", code="unavailable") from None

    def listing(got: SessionList) -> dict[str, Any]:
        data = [
            {"id": s, "object": "session", "idle_s": round(idle, 3), "running": running}
            for s, idle, running in got.sessions
        ]
        return {"object": "list", "max_sessions": got.max_sessions, "data": data}

    @api.get(SESSIONS, tags=["sessions"], summary="The sessions kept")
    async def sessions() -> dict[str, Any]:
        return listing(await ask())

    @api.delete(SESSIONS + "/{session}", tags=["sessions"], summary="Forget a session")
    async def delete(session: str) -> dict[str, Any]:
        got = await ask(session)
        if not got.dropped:
            raise HttpError(404, f"no session `{session}` is kept", code="not_found")
        return {"id": session, "object": "session", "deleted": True}

    return api
