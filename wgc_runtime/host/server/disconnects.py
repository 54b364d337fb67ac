"""A client that goes away mid-request: `disconnected` returns once the HTTP client has gone (what
`calls.until_disconnect` and `Call.primed` race a request's work against), and the stream pieces
`Call.primed` answers with (`empty`, and `chain`: a first event put back in front of the rest).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from starlette.requests import Request as HttpRequest


async def disconnected(http: HttpRequest) -> None:
    """Returns when the client has gone away."""
    while True:
        msg = await http.receive()
        if msg["type"] == "http.disconnect":
            return


async def empty() -> AsyncIterator[Any]:
    for x in ():
        yield x


async def chain(head: Any, rest: AsyncGenerator[Any, None]) -> AsyncIterator[Any]:
    try:
        yield head
        async for x in rest:
            yield x
    finally:
        await rest.aclose()
