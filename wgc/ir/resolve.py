"""Channel -> edge inference for one walk, done once while building the IR.

Rules (the language reference states them for users):

* A read sees the nearest earlier binding in its block, then in the enclosing blocks.
* In a loop body, a channel read and bound later in the body (or by the same call) is
  *loop-carried*: iteration 0 reads the value from before the loop (`LOOP_INIT`), iteration i+1
  the body's last binding of iteration i (`LOOP_CARRIED`).
* A channel bound only outside the loop is *loop-invariant* (`LOOP_INVARIANT`).
* Outside loops a read with no earlier binding sees a later one in the same block (statements run
  as data allows); cycles this creates are reported by the dataflow pass.
* `par` branches see what was bound before the `par`, never a sibling's writes.
* After a loop only `yield last` (`TERMINAL`) / `yield all` (`ACCUMULATED`) channels are visible.
* Stream endpoints are implicit: every call of a stream's producer node streams its port, every
  call of its consumer node takes a chunk (`STREAMED`).

Reads that cannot be resolved become `Issue`s, reported by the passes that own their codes.
"""

from __future__ import annotations

from wgc.diagnostics.diagnostic import Span
from wgc.ir.decls import Node, Stream
from wgc.ir.expr import Value
from wgc.ir.resolve_scope import (
    NESTED,
    Def,
    Found,
    Level,
    branch_span,
    enclosing_loop_level,
    innermost_loop,
    yield_via,
)
from wgc.ir.types import Dim, TensorType
from wgc.ir.walk import (
    Block,
    Call,
    Edge,
    EdgeKind,
    Emit,
    End,
    EndKind,
    Issue,
    IssueKind,
    Loop,
    Par,
    Stmt,
    WalkInput,
)


def resolve_walk(
    body: Block,
    inputs: tuple[WalkInput, ...],
    nodes: dict[str, Node],
    streams: list[Stream],
    params: dict[str, Value],
) -> tuple[tuple[Edge, ...], tuple[Issue, ...]]:
    r = _Resolver(inputs, nodes, streams)
    top = r.level("top", body, None, 0)
    r.walk_block(top)
    return tuple(r.edges), tuple(r.issues)


class _Resolver:
    def __init__(
        self, inputs: tuple[WalkInput, ...], nodes: dict[str, Node], streams: list[Stream]
    ) -> None:
        self.inputs = {
            i.name: Def("input", End(EndKind.INPUT, name=i.name), i.type) for i in inputs
        }
        self.nodes = nodes
        self.producers: dict[tuple[str, str], list[Stream]] = {}
        self.consumers: dict[tuple[str, str], list[Stream]] = {}
        for s in streams:
            self.producers.setdefault((s.producer.node, s.producer.port), []).append(s)
            self.consumers.setdefault((s.consumer.node, s.consumer.port), []).append(s)
        self.edges: list[Edge] = []
        self.issues: list[Issue] = []
        self.loop_locals: dict[str, Loop] = {}  # bound in an earlier loop's body, not yielded

    # ------------------------------------------------------------------ binding tables
    def level(
        self,
        kind: str,
        block: Block,
        parent: Level | None,
        pos: int,
        loop: Loop | None = None,
        par_index: int = -1,
        siblings: tuple[dict[str, Def], ...] = (),
    ) -> Level:
        lv = Level(kind, block, parent, pos, [], loop, par_index, siblings)
        lv.defs = [self.stmt_defs(s) for s in block.stmts]
        return lv

    def port_type(self, node: str, port: str) -> TensorType | None:
        """The type a write binds: the node's *output* port (a node may have `in x` and `out x`)."""
        n = self.nodes.get(node)
        p = n.output(port) if n else None
        return p.type if p else None

    def stmt_defs(self, s: Stmt) -> list[tuple[str, Def]]:
        if isinstance(s, Call):
            return [
                (
                    w.channel,
                    Def("port", End(EndKind.CALL, s.id, w.port), self.port_type(s.node, w.port)),
                )
                for w in s.writes
            ]
        if isinstance(s, Par):
            out: list[tuple[str, Def]] = []
            for b in s.branches:
                for st in b.stmts:
                    out.extend(self.stmt_defs(st))
            return out
        if isinstance(s, Loop):
            body = self.level("loop", s.body, None, 0, loop=s)
            out = []
            for named, kind in [(n, "last") for n in s.yield_last] + [
                (n, "all") for n in s.yield_all
            ]:
                inner = body.last(named.name)
                if inner is None:
                    continue
                typ = inner.type
                if kind == "all" and typ is not None:
                    lead = (
                        Dim.sym(f"{s.name}_iterations")
                        if s.until or s.max is None
                        else Dim.int_(s.max)
                    )
                    typ = typ.with_leading(lead)
                out.append((named.name, Def(kind, inner.end, typ, s.name)))
            return out
        return []

    # ------------------------------------------------------------------ traversal
    def walk_block(self, lv: Level) -> None:
        for i, s in enumerate(lv.block.stmts):
            if isinstance(s, Call):
                self.call(s, lv, i)
            elif isinstance(s, Par):
                sib = tuple(
                    {ch: d for st in b.stmts for ch, d in self.stmt_defs(st)} for b in s.branches
                )
                for bi, b in enumerate(s.branches):
                    self.walk_block(self.level("branch", b, lv, i, par_index=bi, siblings=sib))
            elif isinstance(s, Loop):
                body = self.level("loop", s.body, lv, i, loop=s)
                self.walk_block(body)
                self.loop_end(s, body)
            elif isinstance(s, Emit):
                self.read(
                    s.channel,
                    lv,
                    i,
                    End(EndKind.CLIENT, name=s.modality),
                    s.span,
                    "emit",
                    EdgeKind.EMITTED,
                )
            else:  # a `Persist`
                self.read(
                    s.channel,
                    lv,
                    i,
                    End(EndKind.PERSIST, name=s.channel),
                    s.span,
                    "persist",
                    EdgeKind.PERSISTED,
                )

    def call(self, c: Call, lv: Level, i: int) -> None:
        for b in c.reads:
            self.read(
                b.channel,
                lv,
                i,
                End(EndKind.CALL, c.id, b.port),
                b.span,
                f"port `{b.port}` of `{c.node}`",
            )
        inner = c.loops[-1] if c.loops else None
        node = self.nodes.get(c.node)
        if node is None:
            return
        for p in node.inputs:
            for s in self.consumers.get((c.node, p.name), []):
                self.edges.append(
                    Edge(
                        EdgeKind.STREAMED,
                        s.name,
                        End(EndKind.STREAM, name=s.name),
                        End(EndKind.CALL, c.id, p.name),
                        inner,
                        p.type,
                        c.span,
                    )
                )
        for p in node.outputs:
            for s in self.producers.get((c.node, p.name), []):
                self.edges.append(
                    Edge(
                        EdgeKind.STREAMED,
                        s.name,
                        End(EndKind.CALL, c.id, p.name),
                        End(EndKind.STREAM, name=s.name),
                        inner,
                        p.type,
                        c.span,
                    )
                )

    def loop_end(self, loop: Loop, body: Level) -> None:
        n = len(body.defs)
        if loop.until is not None:
            d = body.before(loop.until.name, n)
            if d is None:
                self.issues.append(
                    Issue(
                        IssueKind.YIELD_UNBOUND,
                        loop.until.name,
                        loop.until.span,
                        loop.header_span,
                        loop.name,
                        "until",
                    )
                )
            else:
                self.edges.append(
                    Edge(
                        EdgeKind.UNTIL,
                        loop.until.name,
                        d.end,
                        End(EndKind.UNTIL, name=loop.name),
                        loop.name,
                        d.type,
                        loop.until.span,
                    )
                )
        seen: dict[str, Span] = {}
        for named in (*loop.yield_last, *loop.yield_all):
            if body.before(named.name, n) is None:
                self.issues.append(
                    Issue(
                        IssueKind.YIELD_UNBOUND,
                        named.name,
                        named.span,
                        loop.header_span,
                        loop.name,
                        "yield",
                    )
                )
            seen.setdefault(named.name, named.span)
        for defs in body.defs:
            for ch, _ in defs:
                if ch not in seen:
                    self.loop_locals.setdefault(ch, loop)

    # ------------------------------------------------------------------ reads
    def read(
        self,
        channel: str,
        lv: Level,
        i: int,
        dst: End,
        span: Span,
        reader: str,
        kind_override: EdgeKind | None = None,
    ) -> None:
        inner_loop = innermost_loop(lv)
        result = self.lookup(channel, lv, i, span, reader)
        if result is None:
            return
        for kind, d, loop in result:
            kind2 = kind
            if kind_override is not None and kind is not EdgeKind.LOOP_INIT:
                kind2 = kind_override
                if kind not in (EdgeKind.LOOP_CARRIED, EdgeKind.TERMINAL, EdgeKind.ACCUMULATED):
                    loop = inner_loop
            via, via_loop = yield_via(kind2, d)
            if via is not None and kind2 in (EdgeKind.EMITTED, EdgeKind.PERSISTED):
                loop = d.loop  # an emit/persist of a yield happens once, when that loop ends
            self.edges.append(Edge(kind2, channel, d.end, dst, loop, d.type, span, via, via_loop))

    def lookup(
        self, channel: str, lv: Level, pos: int, span: Span, reader: str
    ) -> list[Found] | None:
        crossed: Loop | None = None
        level: Level | None = lv
        while level is not None:
            d = level.before(channel, pos)
            if d is not None:
                return [self.found(d, crossed, level)]
            later = level.at_or_after(channel, pos)
            if level.kind == "loop" and later is not None:
                return self.carried(level, channel, span, reader)
            if level.kind == "branch":
                own = level.at_or_after(channel, pos)
                if own is not None:
                    # bound later in this branch: inside a loop that is the next iteration's
                    # value (the branch is part of the body); outside, a forward reference
                    loop_level = enclosing_loop_level(level)
                    if loop_level is not None:
                        return self.carried(loop_level, channel, span, reader)
                    return [self.found(own, crossed, level)]
                for bi, writes in enumerate(level.siblings):
                    if bi != level.par_index and channel in writes:
                        other = branch_span(level, bi)
                        self.issues.append(
                            Issue(IssueKind.SIBLING_READ, channel, span, other, None, reader)
                        )
                        return None
            if level.kind == "top":
                # walk inputs are bound before the first statement; a forward reference only
                # applies when nothing earlier binds the channel
                if channel in self.inputs:
                    return [self.found(self.inputs[channel], crossed, level)]
                if later is not None:
                    return [self.found(later, crossed, level)]
                break
            if level.kind == "loop":
                crossed = level.loop
            pos = level.pos_in_parent
            level = level.parent
        self.issues.append(self.unbound(channel, span, reader))
        return None

    def carried(self, level: Level, channel: str, span: Span, reader: str) -> list[Found]:
        """Edges of a loop-carried read in loop ``level``'s body: the body's last binding feeds
        the next iteration; the value visible before the loop feeds iteration 0."""
        loop = level.loop
        last = level.last(channel)
        # callers found a binding of `channel` at or after the read in this body (a `par`
        # branch's bindings are its statement's), so the body's last one exists
        assert loop is not None and last is not None
        edges: list[Found] = [(EdgeKind.LOOP_CARRIED, last, loop.name)]
        init = None
        if level.parent is not None:
            init = self.lookup_quiet(channel, level.parent, level.pos_in_parent)
        if init is NESTED:
            self.issues.append(
                Issue(IssueKind.NESTED_CARRIED, channel, span, loop.header_span, loop.name, reader)
            )
        elif init is None:
            self.issues.append(
                Issue(IssueKind.NO_INIT, channel, span, loop.header_span, loop.name, reader)
            )
        else:
            edges.append((EdgeKind.LOOP_INIT, init, loop.name))
        return edges

    def lookup_quiet(self, channel: str, level: Level | None, pos: int) -> Def | None:
        """The value of ``channel`` visible at ``pos`` of ``level`` (for a loop's initial value)."""
        while level is not None:
            d = level.before(channel, pos)
            if d is not None:
                return d
            if level.kind == "loop" and level.at_or_after(channel, pos) is not None:
                # the enclosing loop carries it: the inner loop's start differs per outer
                # iteration (the value before the outer loop, then the outer body's binding)
                return NESTED
            if level.kind == "top":
                return self.inputs.get(channel)
            pos = level.pos_in_parent
            level = level.parent
        return None

    @staticmethod
    def found(d: Def, crossed: Loop | None, level: Level) -> Found:
        if crossed is not None:
            return (EdgeKind.LOOP_INVARIANT, d, crossed.name)
        loop = innermost_loop(level)
        if d.kind == "input":
            return (EdgeKind.INPUT, d, loop)
        if d.kind == "last":
            return (EdgeKind.TERMINAL, d, d.loop)
        if d.kind == "all":
            return (EdgeKind.ACCUMULATED, d, d.loop)
        return (EdgeKind.INTERNAL, d, loop)

    def unbound(self, channel: str, span: Span, reader: str) -> Issue:
        loop = self.loop_locals.get(channel)
        if loop is not None:
            return Issue(IssueKind.LOOP_LOCAL, channel, span, loop.header_span, loop.name, reader)
        return Issue(IssueKind.UNBOUND, channel, span, None, None, reader)
