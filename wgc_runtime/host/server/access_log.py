"""One structured log line per request, for the operator (``wgc serve --log-format json|text``).

`AccessLog` is ASGI middleware, outermost (a request refused for its key or its size is logged
too). When the answer is whole (its last byte sent, or the client gone) it writes one line to
stderr: the request's ``id`` (the conductor's request id when the request reached it, else one
of its own), ``method``, ``route``, ``status``, ``seconds`` (to the end of the answer),
``request_bytes`` (the body's, as read), and, for a request that ran, what `calls.Call`
recorded in the scope (`record`): ``walks`` (walks finished), ``outputs`` per modality,
``prompt_tokens``, ``completion_tokens``, ``first_output_s`` per modality and the conductor's
``outcome``.
``json`` is one JSON object a line; ``text`` is ``key=value`` pairs.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Callable, MutableMapping
from typing import Any

FORMATS = ("json", "text")
KEY = "wgc.request"  # the scope entry a request's figures go in


def is_logged(scope: MutableMapping[str, Any]) -> bool:
    """Whether the request is logged (`AccessLog` made its record)."""
    return KEY in scope


def record(scope: MutableMapping[str, Any]) -> dict[str, Any]:
    """The dict a request's figures go in (what its log line adds)."""
    return scope.setdefault(KEY, {})


def ran(
    scope: MutableMapping[str, Any],
    walks: int,
    outputs: dict[str, int],
    first: dict[str, float],
    seconds: float,
    outcome: str,
) -> None:
    """A call's figures added to its request's (an images request runs ``n`` calls)."""
    figures = record(scope)
    _add(figures, "walks", walks)
    _add(figures, "outputs", dict(outputs))
    _add(figures, "completion_tokens", sum(n for k, n in outputs.items() if k.startswith("text")))
    _add(figures, "first_output_s", {k: round(v, 6) for k, v in first.items()})
    figures["run_s"] = round(seconds, 6)
    figures["outcome"] = outcome


def _add(figures: dict[str, Any], key: str, value: Any) -> None:
    if isinstance(value, dict):
        into = figures.setdefault(key, {})
        for k, v in value.items():
            into[k] = min(into.get(k, v), v) if isinstance(v, float) else into.get(k, 0) + v
    elif key in figures:
        figures[key] += value
    else:
        figures[key] = value


def line(fields: dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(fields, separators=(",", ":"), default=str)
    parts = []
    for k, v in fields.items():
        text = json.dumps(v, separators=(",", ":")) if not isinstance(v, str) else v
        parts.append(f"{k}={json.dumps(text) if (' ' in text or not text) else text}")
    return " ".join(parts)


class AccessLog:
    """ASGI middleware writing one line per request (see the module docstring)."""

    def __init__(self, app: Any, fmt: str, write: Callable[[str], None] | None = None) -> None:
        assert fmt in FORMATS
        self.app, self.fmt = app, fmt
        self.write = write or (lambda text: print(text, file=sys.stderr, flush=True))

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        t0 = time.monotonic()
        figures = record(scope)
        status = {"code": 0, "bytes": 0}
        ended: list[float] = []  # when the answer's last byte went

        async def receiving() -> dict:
            message = await receive()
            status["bytes"] += len(message.get("body") or b"")
            return message

        async def sending(message: dict) -> None:
            if message["type"] == "http.response.start":
                status["code"] = int(message["status"])
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                ended.append(time.monotonic())
            elif message["type"] == "websocket.accept":
                status["code"] = 101
            elif message["type"] == "websocket.close" and not status["code"]:
                status["code"] = 403  # closed before it was accepted (no key)
            await send(message)

        try:
            await self.app(scope, receiving, sending)
        except BaseException:
            status["code"] = status["code"] or 500
            raise
        finally:
            fields: dict[str, Any] = {
                "id": figures.pop("id", None) or f"req-{uuid.uuid4().hex[:12]}",
                "method": scope.get("method", "WS"),
                "route": scope.get("path", ""),
                "status": status["code"] or 499,  # no answer started: the client left
                "seconds": round((ended[0] if ended else time.monotonic()) - t0, 6),
                "request_bytes": status["bytes"],
            }
            fields.update(figures)
            self.write(line(fields, self.fmt))
