"""Standing rules: a stream's ``on`` flow run on the stream's owner rank, chunk by chunk.

A stream whose spec carries a standing rule (`StreamSpec.chunk_walk`, set by the compiler when
the flow does nothing per chunk but run one walk placed on the owner alone) costs the conductor
no message per chunk. When chunk j of such a stream becomes ready here (`Streams.changed`, where
other streams send `ChunkReady`), the owner does what the conductor's flow would have asked:

* an empty chunk is taken and dropped at once (the conductor's `SkipChunk`);
* a non-empty one starts a walk run of ``chunk_walk`` for flow ``chunk_flow`` with the request's
  options (its walk id is the rank's own: negative, the conductor's are positive); the next chunk
  waits for it, as the flow's body would. When that run is done here (`RankExecutor._walk_done`:
  it sends no `WalkDone`), the chunk is dropped unless the walk's call took it, and chunk j+1 goes
  on.

After the final chunk the owner sends one `ChunksDone` (walks run, chunks skipped), on the same
channel as the walks' emits, so it arrives after them; the conductor ends the flow then. A failing
call fails the request as usual (`Failed`); cancellation and `Release` drop the runs with the rest
of the request's state here.

`ChunkRules` owns the rank's rules; per request and stream the progress lives in the `Inlet`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from wgc_runtime.contract.messages import CONDUCTOR, ChunksDone
from wgc_runtime.contract.spec import StreamSpec
from wgc_runtime.core.executor.requests import Requests
from wgc_runtime.core.executor.state import Inlet, RequestState, WalkRun
from wgc_runtime.core.post import Post

Begin = Callable[[WalkRun, str, tuple[tuple[str, Any], ...]], None]
Changed = Callable[[RequestState, str], None]


class ChunkRules:
    """The standing rules of the streams this rank owns (see the module docstring)."""

    begin: Begin
    changed: Changed

    def __init__(self, specs: Mapping[str, StreamSpec], requests: Requests, post: Post) -> None:
        self.rules = {name: s for name, s in specs.items() if s.chunk_walk}
        self.requests = requests
        self.post = post

    def connect(self, begin: Begin, changed: Changed) -> None:
        """How a walk run starts here, and how a stream looks at its buffer again."""
        self.begin, self.changed = begin, changed

    def ready(
        self, req: RequestState, name: str, inlet: Inlet, index: int, empty: bool, final: bool
    ) -> bool:
        """Chunk ``index`` of stream ``name`` is ready: run the rule for it. False when the
        stream has no rule (the conductor hears of the chunk instead)."""
        rule = self.rules.get(name)
        if rule is None:
            return False
        inlet.chunk_final = final
        if empty:
            inlet.chunks_skipped += 1
            if inlet.buf.taken == index and inlet.buf.ready():
                inlet.buf.take()
            self.next(req, name, inlet, final)
            return True
        req.local_walks += 1
        w = self.requests.walk(req.id, -req.local_walks, rule.chunk_walk)
        if w is not None:
            w.chunk_of, inlet.chunk_running = name, True
            self.begin(w, rule.chunk_flow, inlet.options)
        return True

    def walk_done(self, w: WalkRun) -> None:
        """The rule's walk run for the current chunk of ``w.chunk_of`` is done here: drop the
        chunk unless the walk took it, and go on."""
        req, name = w.req, w.chunk_of
        inlet = req.streams.get(name)
        if inlet is None or self.requests.by_id.get(req.id) is not req:
            return
        inlet.chunk_walks += 1
        inlet.chunk_emits += w.emitted
        inlet.chunk_running = False
        buf = inlet.buf
        if buf.taken == inlet.notified and not buf.final_taken and buf.ready():
            buf.take()
        self.next(req, name, inlet, inlet.chunk_final)

    def next(self, req: RequestState, name: str, inlet: Inlet, final: bool) -> None:
        if final:
            done = ChunksDone(
                req.id, name, inlet.chunk_walks, inlet.chunks_skipped, inlet.chunk_emits
            )
            self.post.send(CONDUCTOR, done)
        else:
            self.changed(req, name)
