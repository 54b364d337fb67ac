"""A placement's ``sessions:`` block (both formats; M*'s key of that name): how many
conversations each rank keeps between their requests, and the pages they may hold.

Keys: ``max_sessions`` (sessions kept parked and running at once; without the block sessions
are off and a request naming one is refused at the door) and ``max_pages`` (pages of each KV
pool the parked sessions may hold; default: no limit but the pool). Past either, the least
recently used idle session is evicted; a new session while ``max_sessions`` have a request
running is refused (HTTP 429). See `wgc_runtime.core.executor.sessions`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wgc.placement.model import Sessions
from wgc.placement.yamlnodes import span

if TYPE_CHECKING:
    from wgc.placement.load import _Loader

KEYS = ("max_sessions", "max_pages")


def read(r: _Loader, entry) -> Sessions:
    if entry is None:
        return Sessions()
    _, node = entry
    if not r.map_(node, "`sessions`"):
        return Sessions()
    e = r.keys(node, KEYS, (), "in `sessions`")
    count = r.positive(e.get("max_sessions"), "`sessions.max_sessions`", "WG817")
    pages = r.positive(e.get("max_pages"), "`sessions.max_pages`", "WG817")
    return Sessions(max_sessions=count or 0, max_pages=pages or 0, span=span(r.file, node))
