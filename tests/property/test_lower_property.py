"""Lowering on random valid models and random valid placements.

The generator (`valid_models`) writes small programs that are valid by construction: nodes with
same-typed ports, walks with calls, `par`, nested loops with loop-carried channels, `until`,
`yield last` / `yield all`, `emit` / `persist`, a persisted channel passed to a later walk, and
optionally a stream; each program is checked to have no errors before use. Placements put every
(walk, node) on a random rank (sometimes a tensor-parallel pair). Properties: lowering never
fails; every IR edge out of a call port is in the route table with its destination; every input
port's source names a producer that routes to it; every cross-rank hop is a transfer; the plan
dumps to JSON.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from wgc.diagnostics.diagnostic import Span
from wgc.driver import Driver
from wgc.ir.walk import EndKind
from wgc.lower.lower import lower
from wgc.lower.plan import Plan
from wgc.placement.model import Batching, Group, KvCache, Named, Placement

DRIVER = Driver()
SLOW = settings(
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large], deadline=None
)
S = Span("p.yaml", 1, 1, 1, 2)
NODES = ("N0", "N1", "N2", "N3")


class _Gen:
    """Builds one walk body; ``draw`` is hypothesis's, the counters keep names fresh."""

    def __init__(self, draw, prefix: str) -> None:
        self.draw = draw
        self.prefix = prefix
        self.n = 0
        self.loops = 0

    def fresh(self) -> str:
        self.n += 1
        return f"{self.prefix}c{self.n}"

    def call(self, visible: list[str], writes: list[tuple[str, str]]) -> str:
        node = self.draw(st.sampled_from(NODES))
        reads = []
        if visible:
            chans = self.draw(st.lists(st.sampled_from(visible), min_size=1, max_size=2))
            reads = [f"{port} = {ch}" for port, ch in zip(("a", "b"), chans, strict=False)]
        out = f" -> {', '.join(f'{c} = {p}' for c, p in writes)}" if writes else ""
        return f"{node}({', '.join(reads)}){out}"

    def block(self, visible: list[str], depth: int, size: int) -> tuple[list[str], list[str]]:
        """Statements, and the channels they bind that stay visible after the block."""
        lines: list[str] = []
        bound: list[str] = []
        for _ in range(size):
            kind = self.draw(
                st.sampled_from(["call", "call", "loop", "par", "emit"] if depth < 2 else ["call"])
            )
            vis = visible + bound
            if kind == "loop":
                lines += self.loop(vis, depth, bound)
            elif kind == "par":
                branches = []
                for _ in range(2):
                    c = self.fresh()
                    branches.append("{ " + self.call(vis, [(c, "x")]) + " }")
                    bound.append(c)
                lines.append("par { " + " ".join(branches) + " }")
            elif kind == "emit" and vis:
                lines.append(f"emit {self.draw(st.sampled_from(vis))} as tensor")
            else:
                c = self.fresh()
                lines.append(self.call(vis, [(c, "y")]))
                bound.append(c)
        return lines, bound

    def loop(self, vis: list[str], depth: int, bound: list[str]) -> list[str]:
        self.loops += 1
        name = f"{self.prefix}L{self.loops}"
        lines = []
        carried = None
        if self.draw(st.booleans()):  # a channel bound just before the loop, rebound in it
            carried = self.fresh()
            lines.append(self.call(vis, [(carried, "x")]))
            bound.append(carried)
            vis = [*vis, carried]
        inner, inner_bound = self.block(vis, depth + 1, self.draw(st.integers(0, 2)))
        body = list(inner)
        if carried is not None:  # reads the previous iteration's value, then rebinds it
            body.append(self.call([carried, *inner_bound], [(carried, "x")]))
        last, acc = self.fresh(), self.fresh()
        body.append(self.call(vis + inner_bound, [(last, "x"), (acc, "y")]))
        until = ""
        if self.draw(st.booleans()):
            stop = self.fresh()
            body.append(self.call(vis + inner_bound, [(stop, "s")]))
            until = f" until {stop}"
        bound.append(last)  # `yield all` values are stacked: only emitted, never read by ports
        yields = f"{carried}, {last}" if carried else last
        lines += [f"loop {name} max 3{until} {{", *body, f"}} yield last {yields} yield all {acc}"]
        return [*lines, f"emit {acc} as tensor"]


@st.composite
def valid_models(draw) -> str:
    lines = ["model gen"]
    for n in NODES:
        lines += [
            f"node {n}: stateless {{",
            f'  impl "pkg:{n}"',
            "  in a: f32[4]",
            "  in b: f32[4]",
            "  out x: f32[4]",
            "  out y: f32[4]",
            "  out s: bool[]",
            "}",
        ]
    with_stream = draw(st.booleans())
    if with_stream:
        lines += [
            'node P: stateless { impl "pkg:P" in a: f32[4] out t: f32[1] }',
            'node C: stateless { impl "pkg:C" in u: f32[2] out x: f32[4] }',
            "stream st: P.t -> C.u chunk fixed(k = 2) final pad",
        ]
    g0 = _Gen(draw, "a")
    body0, bound0 = g0.block(["inp"], 0, draw(st.integers(1, 4)))
    keep = draw(st.sampled_from(bound0)) if bound0 else "inp"
    if with_stream:
        body0.append(f"P(a = {keep})")
    lines += ["walk w0(inp?: f32[4]) {", *body0, f"persist {keep}", "}"]
    g1 = _Gen(draw, "b")
    body1, _ = g1.block(["got"], 0, draw(st.integers(1, 4)))
    if with_stream:
        body1.append("C() -> fromstream = x")
        body1.append("emit fromstream as tensor")
    lines += ["walk w1(got: f32[4]) {", *body1, "}"]
    lines += ["flow main {", "  w0()", f"  w1(got = {keep})", "}"]
    return "\n".join(lines) + "\n"


@st.composite
def placements(draw, model) -> Placement:
    world = draw(st.integers(1, 4))
    groups = []
    for w in model.walks:
        for node in dict.fromkeys(c.node for c in w.calls):
            r = draw(st.integers(0, world - 1))
            ranks = (r, r + 1) if r + 1 < world and draw(st.booleans()) else (r,)
            groups.append(Group((Named(node, S),), ranks, (Named(w.name, S),), len(ranks), S))
    devices = tuple(f"cuda:{i}" for i in range(world))
    return Placement(
        "rand",
        "rand.yaml",
        "wgc",
        devices,
        (),
        tuple(groups),
        KvCache(),
        Batching(),
        (),
        4,
        "auto",
        S,
    )


def _check_routes(model, plan: Plan) -> None:
    routes = {(r.walk, r.call, r.port, r.channel): r for r in plan.routes}
    transfers = {(t.walk, t.call, t.port, t.dst_rank) for t in plan.transfers}
    lowered = {w.name for w in plan.walks}
    calls = {}
    sinks: dict[str, set[int]] = {}
    for rp in plan.ranks:
        for piece in rp.pieces:
            for c in piece.calls:
                calls[(piece.walk, c.id)] = c
            sinks.setdefault(piece.walk, set()).update(u.id for u in piece.sinks)
    for w in model.walks:
        if w.name not in lowered:
            continue
        for e in w.edges:
            if e.src.kind is not EndKind.CALL:
                continue
            row = routes.get((w.name, e.src.call, e.src.port, e.channel))
            assert row is not None, f"no route for {w.name} {e}"
            if e.dst.kind is EndKind.CALL:
                d = next(d for d in row.dests if d.call == e.dst.call and d.port == e.dst.port)
                assert d.rank == calls[(w.name, e.dst.call)].rank
                if d.rank != row.rank:
                    assert (w.name, e.src.call, e.src.port, d.rank) in transfers
            else:  # an emit / persist: the producer's destination, or a sink unit's input
                kinds = {d.kind for d in row.dests}
                units = {d.call for d in row.dests if d.kind == "call" and d.port == "value"}
                assert e.dst.kind.value in kinds or units & sinks.get(w.name, set())
    for (walk, _), c in calls.items():
        for p in c.inputs:
            for s in (p.src, p.init):
                if s is None or s.kind != "call":
                    continue
                row = routes[(walk, s.call, s.port, p.channel)]
                assert any(d.call == c.id and d.port == p.port for d in row.dests)


@pytest.mark.slow
@SLOW
@given(st.data())
def test_lowering_random_valid_pairs(data) -> None:
    text = data.draw(valid_models())
    res = DRIVER.front_end("gen.walk", text)
    assert res.model is not None
    assume(not res.errors)
    model = res.model
    placement = data.draw(placements(model))
    plan = lower(model, placement)
    assert [w.name for w in plan.walks] == ["w0", "w1"]
    _check_routes(model, plan)
    for rp in plan.ranks:
        for piece in rp.pieces:
            for lp in piece.loops:
                assert rp.rank in lp.ranks
    json.loads(plan.to_json())


def test_generator_makes_valid_models() -> None:
    """Most generated programs must be error-free, or the property above tests little."""
    ok = 0

    @settings(
        max_examples=60, deadline=None, suppress_health_check=list(HealthCheck.__members__.values())
    )
    @given(valid_models())
    def count(text: str) -> None:
        nonlocal ok
        res = DRIVER.front_end("gen.walk", text)
        if res.model is not None and not res.errors:
            ok += 1
        else:
            print(text, [(d.code, d.message) for d in res.errors])

    count()
    assert ok >= 50
