"""The rank's request table (`Requests`): the requests it keeps state for, their walk runs, and
the ids of requests that ended here (to drop their late messages).

A request's state appears with its first message here. A walk run appears with the first message
of its walk instance (a `StartWalk`, a value, a stop); a finished walk run's id is remembered
so a late (speculative) message for it is dropped. A request whose pieces leave nothing behind
is dropped here without a `Release` (`retire`); its walk ids are remembered for a while, to
drop a message still on its way.
"""

from __future__ import annotations

from collections import OrderedDict

from wgc_runtime.contract.kinds import FailKind
from wgc_runtime.core.executor.state import PieceIndex, RequestAbort, RequestState, WalkRun

ENDED_KEEP = 4096  # ended request ids (and retired walks) remembered, to drop late messages


class Requests:
    """The request table of rank ``rank`` (see the module docstring)."""

    def __init__(self, rank: int, pieces: dict[str, PieceIndex]) -> None:
        self.rank = rank
        self.pieces = pieces
        self.by_id: dict[str, RequestState] = {}
        self.ended: OrderedDict[str, None] = OrderedDict()
        # (request, walk id) of walks finished by a request dropped without `Release`
        self.quit: OrderedDict[tuple[str, int], None] = OrderedDict()

    def req(self, request: str) -> RequestState:
        """The request's state, made on its first message."""
        req = self.by_id.get(request)
        if req is None:
            req = self.by_id[request] = RequestState(request)
        return req

    def walk(self, request: str, walk_id: int, walk: str) -> WalkRun | None:
        """The walk run ``walk_id`` of ``request`` (made on its first message), or None for a
        late message of a finished walk run."""
        if self.quit and (request, walk_id) in self.quit:
            return None  # a late value for a walk of a request dropped here
        req = self.req(request)
        if walk_id in req.finished_walks:
            return None  # a late (speculative) value for a finished walk
        w = req.walks.get(walk_id)
        if w is None:
            piece = self.pieces.get(walk)
            if piece is None:
                raise RequestAbort(
                    FailKind.INTERNAL, f"rank {self.rank} has no piece of walk `{walk}`", walk
                )
            w = req.walks[walk_id] = WalkRun(req, walk_id, walk, piece)
        return w

    def live(self, w: WalkRun) -> bool:
        """Whether ``w`` is a running walk run of a request kept here (what `walk` would find
        for its ids)."""
        return self.by_id.get(w.req.id) is w.req and w.req.walks.get(w.walk_id) is w

    def end(self, request: str) -> RequestState | None:
        """The request ended here: forget it (its late messages are dropped); its state."""
        req = self.by_id.pop(request, None)
        self.ended[request] = None
        while len(self.ended) > ENDED_KEEP:
            self.ended.popitem(last=False)
        return req

    def retire(self, req: RequestState) -> None:
        """Drop a request that keeps nothing here (no `Release` comes for it), remembering its
        walk ids to drop a late message."""
        del self.by_id[req.id]
        for wid in req.finished_walks:
            self.quit[(req.id, wid)] = None
        while len(self.quit) > ENDED_KEEP:
            self.quit.popitem(last=False)
