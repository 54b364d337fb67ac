"""Running flows: the per-request state machine, straight from the flow IR.

A flow is a generator of `Wait`s (it blocks only inside walks, on streams). Statements:
a walk call runs the walk to completion; `for` visits the request's segments in order;
`match` picks the first arm naming the segment's modality (or the option's value, for `match
option.NAME`; else `_`, else nothing); `if` and `when` evaluate `request.wants/has`, segment
counts, bool options and option comparisons, `placed(NODE)` and constants; `repeat` runs
its body ``count`` times (params and int options); `fail` ends the request.

Walk arguments: the `for` variable is the segment's payload, ``seg.FIELD`` a named field,
``request.first(m)`` the first segment of modality ``m``, a bare name a channel this flow
persisted earlier, ``option.NAME`` the request's option; values become
tensors through `wgc_runtime.contract.node.to_tensor`; optional walk inputs left out are bare
signals.

Escape-hatch flows (`flow NAME = "module:function"`) are imported and driven with the protocol
of `wgc_runtime.contract.spec`: the generator yields `RunWalk` (arguments: `Segment`, `Persisted` or
plain values) or `Fail`.
"""

from __future__ import annotations

import importlib
from typing import Any

from wgc.interp.request import RequestError, RequestFailed
from wgc.interp.walks import Steps
from wgc.ir.expr import BinOp, Expr, Lit, Neg, OptionRef, Ref
from wgc.ir.flow import (
    ArgKind,
    BoolOp,
    Cond,
    Const,
    CountCmp,
    Fail,
    FBlock,
    Flow,
    FlowKind,
    For,
    If,
    Match,
    Not,
    OptionCmp,
    OptionCond,
    OptionMatch,
    ParamCmp,
    Placed,
    Repeat,
    RequestPred,
    WalkCall,
    iter_fstmts,
)
from wgc.ir.paths import compare
from wgc_runtime.contract.families import resolve_impl
from wgc_runtime.contract.flow import Fail as FailStep
from wgc_runtime.contract.flow import Persisted, RunWalk, Segment
from wgc_runtime.contract.node import to_tensor


class FlowRun:
    """One flow of one request. ``host`` runs walks (`host.run_walk`) and owns the stores."""

    def __init__(self, host, flow: Flow):
        self.host = host
        self.flow = flow
        self.req = host.request
        self.env: dict[str, Segment] = {}

    def fail(self, message: str, kind: str = "fail") -> RequestFailed:
        return RequestFailed(RequestError(kind, message, self.flow.name))

    def run(self) -> Steps:
        f = self.flow
        if f.kind is FlowKind.EXTERN:
            yield from self.extern(f.extern or "")
        elif f.kind is FlowKind.ON_STREAM:
            yield from self.on_stream(f.on_stream or "")
        elif f.body is not None:
            yield from self.block(f.body)

    def on_stream(self, name: str) -> Steps:
        """The body once per chunk: its consumer call takes the chunk (a run that takes none
        skips it), until the final chunk is taken. Empty chunks are skipped, not processed."""
        buf = self.host.streams[name]
        while not buf.final_taken:
            yield from self.host.wait(
                buf.ready, f"flow `{self.flow.name}` waits for a chunk of stream `{name}`"
            )
            if buf.next_is_empty():
                buf.take()  # nothing to process: an empty (final) chunk only ends the flow
                continue
            taken = buf.taken
            if self.flow.body is not None:
                yield from self.block(self.flow.body)
            if buf.taken == taken and not buf.final_taken:
                buf.take()

    # ------------------------------------------------------------------ statements
    def block(self, b: FBlock) -> Steps:
        for s in b.stmts:
            yield from self.stmt(s)

    def stmt(self, s) -> Steps:
        if isinstance(s, WalkCall):
            yield from self.host.run_walk(self.flow.name, s.walk, self.args(s))
        elif isinstance(s, For):
            for seg in self.req.inputs:
                self.env[s.var] = seg
                yield from self.block(s.body)
            self.env.pop(s.var, None)
        elif isinstance(s, Match):
            seg = self.env[s.var]
            arm = next((a for a in s.arms if seg.modality in a.patterns), None)
            arm = arm or next((a for a in s.arms if "_" in a.patterns), None)
            if arm is not None:
                yield from self.block(arm.body)
        elif isinstance(s, OptionMatch):
            value = self.req.option(s.option)
            chosen = next((a for a in s.arms if value in a.values), None)
            chosen = chosen or next((a for a in s.arms if a.default), None)
            if chosen is not None:
                yield from self.block(chosen.body)
        elif isinstance(s, If):
            if self.host.cond(s.cond):
                yield from self.block(s.then)
            elif s.else_ is not None:
                yield from self.block(s.else_)
        elif isinstance(s, Repeat):
            for _ in range(int(self.count(s.count))):
                yield from self.block(s.body)
        elif isinstance(s, Fail):
            raise self.fail(s.message)

    def args(self, call: WalkCall) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for a in call.args:
            if a.kind is ArgKind.OPTION:
                out[a.param] = to_tensor(self.req.option(a.name))
            elif a.kind is ArgKind.SEGMENT_FIELD:
                out[a.param] = to_tensor(self.env[a.name].field(a.attr or ""))
            elif a.kind is ArgKind.FIRST:
                out[a.param] = to_tensor(self.req.first(a.name).data)
            elif a.name in self.env:
                out[a.param] = to_tensor(self.env[a.name].data)
            else:
                out[a.param] = self.persisted(a.name)
        return out

    def persisted(self, name: str):
        store = self.host.stores[self.flow.name]
        if name not in store:
            raise self.fail(
                f"flow `{self.flow.name}` passes `{name}`, which no walk persisted yet", "flow"
            )
        return store[name]

    def count(self, e: Expr) -> Any:
        if isinstance(e, Lit):
            return e.value
        if isinstance(e, Ref):
            return self.host.model.param_values()[e.name]
        if isinstance(e, OptionRef):
            return self.req.option(e.name)
        if isinstance(e, Neg):
            return -self.count(e.operand)
        assert isinstance(e, BinOp)
        a, b = self.count(e.left), self.count(e.right)
        ops = {"+": a + b, "-": a - b, "*": a * b}
        return ops[e.op] if e.op in ops else a // b

    # ------------------------------------------------------------------ escape hatch
    def extern(self, path: str) -> Steps:
        module, _, fn = resolve_impl(path).partition(":")
        try:
            gen = getattr(importlib.import_module(module), fn)(self.req)
        except Exception as exc:  # an import error is the request's error, not a crash
            raise self.fail(
                f"flow `{self.flow.name}`: cannot start `{path}`: {exc}", "flow"
            ) from exc
        try:
            step = next(gen, None)
            while step is not None:
                if isinstance(step, FailStep):
                    raise self.fail(step.message)
                if not isinstance(step, RunWalk):
                    raise self.fail(f"flow `{self.flow.name}` yielded {step!r}", "flow")
                args = {k: self.extern_arg(v) for k, v in step.args.items()}
                yield from self.host.run_walk(self.flow.name, step.walk, args)
                step = gen.send(None)
        except StopIteration:
            return
        except RequestFailed:
            raise
        except Exception as exc:
            raise self.fail(f"flow `{self.flow.name}` raised: {exc}", "flow") from exc

    def extern_arg(self, v: Any):
        if isinstance(v, Segment):
            return to_tensor(v.data)
        if isinstance(v, Persisted):
            return self.persisted(v.name)
        return to_tensor(v)


def eval_cond(c: Cond, req, placed: frozenset[str], params: dict | None = None) -> bool:
    """``c``'s value for request ``req``; ``params``: the param values (a `ParamCmp`)."""
    if isinstance(c, RequestPred):
        return req.wants(c.modality) if c.pred == "wants" else req.has(c.modality)
    if isinstance(c, OptionCond):
        return bool(req.option(c.name))
    if isinstance(c, OptionCmp):
        return compare(c.op, req.option(c.name), c.value)
    if isinstance(c, CountCmp):
        return compare(c.op, req.count(c.modality), c.value)
    if isinstance(c, Placed):
        return c.node in placed
    if isinstance(c, ParamCmp):
        return param_truth(c, params or {})
    if isinstance(c, Const):
        return c.value
    if isinstance(c, Not):
        return not eval_cond(c.operand, req, placed, params)
    assert isinstance(c, BoolOp)
    if c.op == "and":
        return eval_cond(c.left, req, placed, params) and eval_cond(c.right, req, placed, params)
    return eval_cond(c.left, req, placed, params) or eval_cond(c.right, req, placed, params)


def param_truth(c: ParamCmp, params: dict) -> bool:
    """A param condition under ``params`` (a checked model: the param is known, of its kind)."""
    v = params.get(c.name)
    if c.op is None:
        return v is True
    return v is not None and compare(c.op, v, c.value)


def walks_of(flow: Flow, all_walks: list[str]) -> set[str]:
    """Walks a flow can call (an escape hatch: any)."""
    if flow.kind is FlowKind.EXTERN or flow.body is None:
        return set(all_walks)
    return {s.walk for s in iter_fstmts(flow.body) if isinstance(s, WalkCall)}
