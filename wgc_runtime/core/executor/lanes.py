"""Decode lanes: a running, self-stepping decode call's rows, stepped wholesale (`Lane`).

A self-stepping call (`stepping`) whose plan captures it (`captured`) and whose one stream push
goes to another rank's stream it alone produces (a TTS or text decoder's ``LLM(token) -> token
= new_token, stop``) has a `Lane`. Once a request's decode loop runs (its first iterations went
through the general path, and `Stepper.step_on` started the next one in place), its row joins
the lane instead of a ready queue: its `Work` and `CallContext` are made once, and from then on
a step of the lane is, for all its rows at once, one captured-step call (the carried token
column is the previous step's output, no per-row stacking), one `StreamItems` per owner
(`Streams.send_row`'s credit bookkeeping per row, the items' tensor the batch's column) and the
loop bookkeeping `Stepper.step_on` makes. Per-row Python beyond that happens when a row
leaves: its stop is true, its loop's last iteration, no credit at hand, a failed row, or its
request ended (then it is dropped); a leaving row's outputs are routed as the general path
routes them (`Batcher.route_results`), so stops, failures, cancellation and back-pressure keep
their one code path. `tests/e2e/test_decode_lanes.py` runs the lane against the general path.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter
from typing import TYPE_CHECKING, Any, cast

import torch

from wgc_runtime.contract.kinds import DestKind
from wgc_runtime.contract.messages import StreamItem, StreamItems
from wgc_runtime.contract.node import CallContext, Work
from wgc_runtime.contract.spec import Dest, Unit
from wgc_runtime.core.executor.state import (
    STOP_FALSE,
    STOP_TRUE,
    Inst,
    LoopRun,
    Outlet,
    WalkRun,
)

if TYPE_CHECKING:
    from wgc_runtime.core.executor.batching import Batch, Batcher
    from wgc_runtime.core.executor.captured import CapturedSteps, CapturedUnit
    from wgc_runtime.core.executor.stepping import SelfStep

PACKED_BYTES = 1024  # an item this small travels packed (`pack_items`' bound)


@dataclass(slots=True, eq=False)
class Row:
    """One request's running decode call in a lane: the iteration it runs next, its loop run,
    and its `Work` (made when it joined; its context's ``iteration`` follows the row)."""

    w: WalkRun
    it: tuple[int, ...]
    lr: LoopRun
    work: Work
    out: Outlet | None = None  # the request's outlet to the stream's owner, once it has one


class Lane:
    """The running rows of one self-stepping captured call (see the module docstring)."""

    def __init__(
        self, walk: str, call: Unit, step: SelfStep, carried: tuple[str, str], dest: Dest
    ) -> None:
        self.walk, self.call, self.step = walk, call, step
        self.out_port, self.in_port = carried  # the output that feeds the input
        self.dest = dest  # the one stream push (another rank's stream)
        self.rows: list[Row] = []
        self.joined = False  # rows joined since the last step: the token column is rebuilt
        self.column: torch.Tensor | None = None  # the rows' carried input, in row order
        self.ended = False  # a request ended since the lane's last step (`Lanes.drop`)

    def __len__(self) -> int:
        return len(self.rows)

    def join(self, w: WalkRun, lr: LoopRun, it: tuple[int, ...], inputs: dict[str, Any]) -> None:
        """A request's decode loop starts iteration ``it`` here (`Stepper.step_on`)."""
        call = self.call
        kv = w.req.kv_handles.get(call.node)
        ctx = CallContext(
            request_id=w.req.node_id,
            walk=w.walk,
            call=call.id,
            node=call.node,
            flow=w.flow,
            loops=call.loops,
            iteration=it,
            options=w.options,
            state=w.req.node_state.setdefault(call.node, {}),
            reads=frozenset(inputs),
            writes=w.piece.writes.get(call.id, frozenset()),
            kv=kv,
        )
        out = w.req.outlets.get((self.dest.name or "", self.dest.rank or 0))
        self.rows.append(Row(w, it, lr, Work(inputs, ctx), out))
        self.joined = True


class Lanes:
    """The rank's lanes, by (walk, call), and their steps."""

    def __init__(self, captured: CapturedSteps, live: Callable[[WalkRun], bool]) -> None:
        self.captured = captured
        self.live = live
        self.lanes: dict[tuple[str, int], Lane] = {}
        self.batcher: Batcher | None = None
        self._next = 0  # round robin over the lanes
        self.steps = self.rows = 0  # lane steps run, and their rows (for tests and reports)

    def build(self, steps: dict[tuple[str, int], SelfStep], batcher: Batcher) -> None:
        """A lane for every self-stepping call with a captured unit and one remote push."""
        self.batcher = batcher
        for (walk, cid), step in steps.items():
            units = self.captured.units.get((walk, cid))
            if not units or not step.solo or len(step.carried) != 1:
                continue
            call = units[0].call
            pushes = [
                (o.port, d) for o in call.outputs for d in o.dests if d.kind is DestKind.STREAM
            ]
            out_port, in_port = step.carried[0]
            owner = pushes[0][1].rank if len(pushes) == 1 else None
            if len(pushes) != 1 or pushes[0][0] != out_port or owner in (None, batcher.rank):
                continue
            same = all(
                u.inputs.get(in_port) == u.out_types.get(out_port) and step.stop in u.stops
                for u in units
            )
            if same:
                self.lanes[(walk, cid)] = Lane(walk, call, step, (out_port, in_port), pushes[0][1])

    def drop(self) -> None:
        """A request ended (`RankExecutor.release`): each lane's next step drops its rows."""
        for lane in self.lanes.values():
            lane.ended = True

    def pending(self) -> bool:
        return any(lane.rows for lane in self.lanes.values())

    def run_next(self) -> bool:
        """Step one lane with rows, round robin; False when none has any."""
        lanes = [lane for lane in self.lanes.values() if lane.rows]
        if not lanes:
            return False
        self._next = (self._next + 1) % len(lanes)
        self.run(lanes[self._next])
        return True

    def run(self, lane: Lane) -> None:
        batcher = self.batcher
        assert batcher is not None
        rows, live = lane.rows, self.live
        if lane.ended:  # a request ended: its rows are dropped
            lane.ended = False
            if not all(live(r.w) for r in rows):
                rows = lane.rows = [r for r in rows if live(r.w)]
                lane.joined = True
                if not rows:
                    return
        most = batcher.max_batch
        now, later = rows, list[Row]()
        if lane.joined or len(rows) > most:  # at most one row per request, `max_batch` rows
            now, seen = list[Row](), set[str]()
            for r in rows:
                rid = r.w.req.id
                (later if rid in seen or len(now) >= most else now).append(r)
                seen.add(rid)
        in_port = lane.in_port
        works = [r.work for r in now]
        column = lane.column
        if lane.joined or later or column is None or column.shape[0] != len(now):
            column = torch.stack([cast(torch.Tensor, w.inputs[in_port]) for w in works])
        t0 = perf_counter()
        results: list[Any] = [None] * len(now)
        ran = None
        unit = None
        try:
            unit = self.captured.unit(lane.walk, lane.call.id, works)
            if unit is not None:
                ran = self.captured.run_columns(unit, works, {in_port: column}, results)
        except Exception as exc:  # the step's failure fails its batch
            results = [exc] * len(now)
        batcher.stats.call(lane.call.node, len(now), perf_counter() - t0)
        self.steps, self.rows = self.steps + 1, self.rows + len(now)
        lane.rows, lane.joined, lane.column = [], False, None
        if unit is None and ran is None and results[0] is None:
            # no form admits the batch: its rows go back to the general path
            self._queue(lane, now)
            lane.rows.extend(later)
            return
        leaving: Batch = []
        left: list[Any] = []
        if ran is not None:
            assert unit is not None
            self._advance(lane, unit, now, ran, leaving, left)
        for i, res in enumerate(results):
            if isinstance(res, BaseException):
                leaving.append(self._inst(lane, now[i]))
                left.append(res)
        lane.rows.extend(later)
        if later:
            lane.joined = True
        if leaving:
            batcher.route_results(leaving, left, True)

    def _advance(
        self,
        lane: Lane,
        unit: CapturedUnit,
        now: list[Row],
        ran: tuple[list[int], dict[str, torch.Tensor], dict[str, torch.Tensor]],
        leaving: Batch,
        left: list[Any],
    ) -> None:
        """After a step: each row that goes on sends its item on a credit and starts its next
        iteration in place; the others leave with their outputs."""
        batcher = self.batcher
        assert batcher is not None
        streams = batcher.streams
        idx, _outs, got = ran
        ports = unit.outputs
        stop_port, out_port, in_port = lane.step.stop, lane.out_port, lane.in_port
        cols = {p: got[p].clone() for p in ports if p != stop_port}
        stops = cast(list[bool], got[stop_port].tolist())  # pyright: ignore[reportUnknownMemberType]
        new = cols[out_port]
        views = new.unbind(0)
        d, top = lane.dest, lane.step.max
        name, owner = d.name or "", d.rank
        assert owner is not None
        keep: list[int] = []
        requests: list[str] = []
        seqs: list[int] = []
        kept: list[Row] = []
        for j, i in enumerate(idx):
            r = now[i]
            w, it, lr = r.w, r.it, r.lr
            k = it[-1]
            out = r.out
            if (
                stops[j]
                or k + 1 >= top
                or out is None
                or out.credits <= 0
                or out.blocked
                or not out.headed
                or lr.ended
                or lr.last is not None
            ):
                row = {p: c[j] for p, c in cols.items()}
                row[stop_port] = STOP_TRUE if stops[j] else STOP_FALSE
                leaving.append(self._inst(lane, r))
                left.append(row)
                continue
            # what `Streams.send_item` does for the item, and `Stepper.step_on` for the loop
            out.credits -= 1
            out.in_flight.append(w)
            w.unacked += 1
            streams.seq += 1
            requests.append(w.req.id)
            seqs.append(streams.seq)
            keep.append(j)
            lr.stops[k] = False
            lr.remaining[k] = 0
            lr.completed = k
            lr.started = k + 2
            lr.remaining[k + 1] = 1
            r.it = r.work.ctx.iteration = (*it[:-1], k + 1)
            r.work.inputs[in_port] = views[j]
            kept.append(r)
        if not kept:
            return
        every = len(kept) == len(idx)
        data = new if every else new[keep]
        post, rank = batcher.post, batcher.rank
        if len(kept) == 1 or data[0].numel() * data.element_size() > PACKED_BYTES:
            for n, rid in enumerate(requests):
                post.send(owner, StreamItem(rid, name, seqs[n], rank, data[n]))
        else:
            post.send(owner, StreamItems(name, rank, tuple(requests), tuple(seqs), data))
        lane.rows = kept
        lane.column = data
        lane.joined = False

    def _inst(self, lane: Lane, r: Row) -> tuple[Inst, Work]:
        """A leaving row as the instance the general path would have taken (`Batcher.take`)."""
        w = r.w
        inst = Inst(w, lane.call, r.it)
        streams = w.piece.pushes.get(lane.call.id)
        if streams:
            inst.key = w.piece.order_key(lane.call, r.it)
            w.pushing[inst.key] = streams
        return inst, r.work

    def _queue(self, lane: Lane, rows: list[Row]) -> None:
        """Rows back to the ready queues (the general path takes them from there)."""
        assert self.batcher is not None
        ready = self.batcher.ready
        for r in rows:
            inst = Inst(r.w, lane.call, r.it, queued=True, inputs=dict(r.work.inputs))
            r.w.waiting.setdefault(lane.call.id, {})[r.it] = inst
            ready.setdefault((lane.walk, lane.call.id), deque()).append(inst)
