"""Decode lanes: a running, self-stepping decode call's rows, stepped wholesale (`Lane`).

A self-stepping call (`stepping`) whose plan captures it (`captured`) and whose one stream push
goes to another rank's stream it alone produces (a TTS or text decoder's ``LLM(token) -> token
= new_token, stop``) has a `Lane`. Once a request's decode loop runs (its first iterations went
through the general path, and `Stepper.step_on` started the next one in place), its row joins
the lane instead of a ready queue: its `Work` and `CallContext` are made once, and from then on
a step of the lane is, for all its rows at once, one captured-step call (the carried token
column is the previous step's output, no per-row stacking), one `StreamItems` per owner
(`Streams.send_row`'s credit bookkeeping per row, the items' tensor the batch's column, their
sequence numbers a range) and the row's next iteration (its context's ``iteration``); the
loop's counters `Stepper.step_on` would set each step (its `LoopRun`'s stops, remaining units,
completed and started iterations: the loop runs on this rank alone, its stop computed here) are
written when the row leaves (`Lanes._loop`). A row's input is its row of the lane's column;
where the node's step reads only its works' contexts (`StaticStep.reads_inputs` false) the
row's `Work` is given it (a view per row) only when the lane's rows change (``stale``: a row
joins or leaves, a request ends) or when it leaves. Per-row Python beyond that happens when a
row leaves: its stop is true, its loop's last iteration, no credit at hand, a failed row, or
its request ended (then it is dropped); a leaving row's outputs are routed as the general path
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
    synced: int = 0  # the iteration its loop run's counters were last written for (`_loop`)


class Lane:
    """The running rows of one self-stepping captured call (see the module docstring)."""

    def __init__(
        self,
        walk: str,
        call: Unit,
        step: SelfStep,
        carried: tuple[str, str],
        dest: Dest,
        lazy: bool = False,
    ) -> None:
        self.walk, self.call, self.step = walk, call, step
        self.lazy = lazy  # the node's step reads no work's inputs: they may lag (``stale``)
        self.out_port, self.in_port = carried  # the output that feeds the input
        self.dest = dest  # the one stream push (another rank's stream)
        self.rows: list[Row] = []
        self.joined = False  # rows joined since the last step: the token column is rebuilt
        self.column: torch.Tensor | None = None  # the rows' carried input, in row order
        # the first ``len(column)`` rows' works do not hold their input yet: it is their row
        # of ``column`` (`Lanes._sync` gives it them)
        self.stale = False
        self.ids: tuple[str, ...] | None = None  # the rows' request ids, while they stay
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
        self.rows.append(Row(w, it, lr, Work(inputs, ctx), out, it[-1]))
        self.joined = True
        self.ids = None


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
                lazy = not any(u.step.reads_inputs for u in units)
                carried = (out_port, in_port)
                self.lanes[(walk, cid)] = Lane(walk, call, step, carried, pushes[0][1], lazy)

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
        most = batcher.max_batch
        if lane.stale and (not lane.lazy or lane.ended or lane.joined or len(rows) > most):
            self._sync(lane)  # the node reads them, or the rows change: each work its input
        if lane.ended:  # a request ended: its rows are dropped
            lane.ended = False
            if not all(live(r.w) for r in rows):
                rows = lane.rows = [r for r in rows if live(r.w)]
                lane.joined = True
                lane.ids = None
                if not rows:
                    return
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
        stale = column if lane.stale else None  # the rows' inputs, their works lagging
        lane.rows, lane.joined, lane.column, lane.stale = [], False, None, False
        if unit is None and ran is None and results[0] is None:
            # no form admits the batch: its rows go back to the general path
            self._queue(lane, now, stale)
            lane.rows.extend(later)
            lane.ids = None
            return
        leaving: Batch = []
        left: list[Any] = []
        if ran is not None:
            assert unit is not None
            self._advance(lane, unit, now, ran, leaving, left, stale)
        for i, res in enumerate(results):
            if isinstance(res, BaseException):
                leaving.append(self._inst(lane, now[i], None if stale is None else stale[i]))
                left.append(res)
        lane.rows.extend(later)
        if later:
            lane.joined = True
        if leaving or later:
            lane.ids = None
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
        stale: torch.Tensor | None,
    ) -> None:
        """After a step: each row that goes on sends its item on a credit and starts its next
        iteration in place (its input: its row of the lane's column); the others leave with
        their outputs (and their work with the input it ran, ``stale``'s row when it lagged)."""
        batcher = self.batcher
        assert batcher is not None
        streams = batcher.streams
        idx, _outs, got = ran
        ports = unit.outputs
        stop_port, out_port = lane.step.stop, lane.out_port
        cols = {p: got[p].clone() for p in ports if p != stop_port}
        stops = cast(list[bool], got[stop_port].tolist())  # pyright: ignore[reportUnknownMemberType]
        new = cols[out_port]
        d, top = lane.dest, lane.step.max
        name, owner = d.name or "", d.rank
        assert owner is not None
        keep: list[int] = []
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
                leaving.append(self._inst(lane, r, None if stale is None else stale[i]))
                left.append(row)
                continue
            # what `Streams.send_item` does for the item, and `Stepper.step_on` for the loop
            out.credits -= 1
            out.in_flight.append(w)
            w.unacked += 1
            keep.append(j)
            r.it = r.work.ctx.iteration = (*it[:-1], k + 1)
            kept.append(r)
        if not kept:
            return
        every = len(kept) == len(idx)
        data = new if every else new[keep]
        ids = lane.ids if every and len(idx) == len(now) else None
        if ids is None:
            ids = tuple(r.w.req.id for r in kept)
        first = streams.seq + 1  # each item's sequence number, in row order
        streams.seq += len(kept)
        post, rank = batcher.post, batcher.rank
        if len(kept) == 1 or data[0].numel() * data.element_size() > PACKED_BYTES:
            for n, rid in enumerate(ids):
                post.send(owner, StreamItem(rid, name, first + n, rank, data[n]))
        else:
            seqs = tuple(range(first, first + len(kept)))
            post.send(owner, StreamItems(name, rank, ids, seqs, data))
        lane.rows = kept
        lane.column = data
        lane.stale = True
        lane.ids = ids
        lane.joined = False

    @staticmethod
    def _sync(lane: Lane) -> None:
        """Each row's work gets its input from the lane's column (the rows are to change)."""
        column = lane.column
        if lane.stale and column is not None:
            port = lane.in_port
            for r, v in zip(lane.rows, column.unbind(0), strict=False):
                r.work.inputs[port] = v
        lane.stale = False

    @staticmethod
    def _loop(r: Row) -> None:
        """Write what `Stepper.step_on` would have left in the row's loop run for each
        iteration it stepped in the lane: iterations ``synced`` to ``it - 1`` complete with a
        false stop, iteration ``it`` started with its one unit to run."""
        k, k0, lr = r.it[-1], r.synced, r.lr
        if k > k0:
            lr.stops.update(dict.fromkeys(range(k0, k), False))
            lr.remaining.update(dict.fromkeys(range(k0, k), 0))
            lr.remaining[k] = 1
            lr.completed, lr.started = k - 1, k + 1
            r.synced = k

    def _inst(self, lane: Lane, r: Row, value: torch.Tensor | None) -> tuple[Inst, Work]:
        """A leaving row as the instance the general path would have taken (`Batcher.take`);
        ``value``: its input, when its work does not hold it yet."""
        if value is not None:
            r.work.inputs[lane.in_port] = value
        self._loop(r)
        w = r.w
        inst = Inst(w, lane.call, r.it)
        streams = w.piece.pushes.get(lane.call.id)
        if streams:
            inst.key = w.piece.order_key(lane.call, r.it)
            w.pushing[inst.key] = streams
        return inst, r.work

    def _queue(self, lane: Lane, rows: list[Row], stale: torch.Tensor | None) -> None:
        """Rows back to the ready queues (the general path takes them from there); ``stale``:
        their inputs, when their works do not hold them yet."""
        assert self.batcher is not None
        ready = self.batcher.ready
        for i, r in enumerate(rows):
            if stale is not None:
                r.work.inputs[lane.in_port] = stale[i]
            self._loop(r)
            inst = Inst(r.w, lane.call, r.it, queued=True, inputs=dict(r.work.inputs))
            r.w.waiting.setdefault(lane.call.id, {})[r.it] = inst
            ready.setdefault((lane.walk, lane.call.id), deque()).append(inst)
