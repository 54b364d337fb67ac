"""API keys: ``Authorization: Bearer KEY`` on every route but ``/health``.

`ApiKeys` is ASGI middleware, outermost, so nothing else runs for a request without a key (the
body is not read, the door not asked). With no keys configured it passes everything (a
loopback server; `wgc serve` refuses any other host without a key unless told
``--insecure-no-auth``). A request whose header is missing, not ``Bearer``, or names no
configured key answers 401 with an OpenAI error body (``code`` ``invalid_api_key``) and
``WWW-Authenticate: Bearer``, which the ``openai`` client raises as `AuthenticationError`; a
websocket without a key is closed before it is accepted (code 1008, policy). The key is
compared with every configured key in constant time (`hmac.compare_digest` on each, no early
exit), so timing tells nothing of how much of a key was right.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Sequence
from typing import Any

OPEN_PATHS = frozenset({"/health"})


def key_of(headers: Sequence[tuple[bytes, bytes]]) -> bytes | None:
    """The bearer token of ``Authorization`` (case-insensitive scheme), or None."""
    for name, value in headers:
        if name.lower() == b"authorization":
            scheme, _, token = value.strip().partition(b" ")
            return token.strip() if scheme.lower() == b"bearer" and token.strip() else None
    return None


def matches(given: bytes | None, keys: Sequence[bytes]) -> bool:
    """Whether ``given`` is one of ``keys``, every key compared in constant time."""
    ok = False
    for key in keys:
        ok |= hmac.compare_digest(given or b"", key)
    return ok and given is not None


class ApiKeys:
    """ASGI middleware asking for one of ``keys`` (see the module docstring)."""

    def __init__(self, app: Any, keys: Sequence[str]) -> None:
        self.app = app
        self.keys = tuple(k.encode() for k in keys)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if (
            not self.keys
            or scope["type"] not in ("http", "websocket")
            or scope.get("path") in OPEN_PATHS
            or matches(key_of(scope.get("headers") or ()), self.keys)
        ):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await receive()  # the connect message, then refuse it
            await send({"type": "websocket.close", "code": 1008, "reason": "invalid API key"})
            return
        given = key_of(scope.get("headers") or ()) is not None
        why = "the API key is not one of this server's" if given else "no API key given"
        message = f"{why}: send `Authorization: Bearer KEY`"
        body = {"error": {"message": message, "type": "invalid_request_error",
                          "code": "invalid_api_key", "param": None}}  # fmt: skip
        raw = json.dumps(body).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(raw)).encode()),
            (b"www-authenticate", b"Bearer"),
        ]
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": raw})
