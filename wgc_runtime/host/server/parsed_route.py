"""A JSON body parsed off the event loop, handed to the route that reads it.

`body_limits.BodyLimits` parses a large JSON body in a worker thread and leaves what it parsed
to in the scope (`PARSED`). FastAPI would parse the body again, on the event loop, when it
validates the route's body parameter: `ParsedRoute` (the ``route_class`` of the routers whose
bodies are JSON) gives that route a `ParsedRequest`, whose ``json()`` is the value in the scope
when there is one (a body that is not JSON raises the parser's error again, which FastAPI
reports as it would have).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute

PARSED = "wgc.parsed_json"  # the scope entry the parsed body goes in


class Unparsable:
    """A body the parser refused: its error, raised when the route reads the body."""

    def __init__(self, error: ValueError) -> None:
        self.error = error


class ParsedRequest(Request):
    async def json(self) -> Any:
        if PARSED not in self.scope:
            return await super().json()
        value = self.scope[PARSED]
        if isinstance(value, Unparsable):
            raise value.error
        return value


class ParsedRoute(APIRoute):
    """An `APIRoute` whose body is read from the scope when it was parsed already."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            return await handler(ParsedRequest(request.scope, request.receive))

        return handle
