"""Random *valid, runnable* models and placements for the runtime-vs-interpreter property.

`models()` draws a `GenModel`: `.walk` text whose every node is `generic_nodes:Generic`, built so
that its outputs are a function of the request alone (nothing the semantics leave to the
schedule shows in them), and so that it exercises:

* walks `w0` -> `w1` in flow `main` (`w1` reads what `w0` persisted; sometimes under `repeat 2`
  or `if option.flag`), with calls, `par` (emits in branches), nested loops (`max 3`) with
  loop-carried and loop-invariant channels, `until` (stop set by the request option `stop_at`,
  sometimes `nospeculate`), `yield last` / `yield all`, `emit` inside and after loops;
* an outer loop whose carried value is rebound by an inner loop's `yield last` (the inner loop,
  `max 1`–`3`, steps its own carried value, `until` or not, beside an outer `until` or not, and
  may push stream items), the shape of speculative decoding's draft steps (`_Walk.inner_carry`;
  ``models(nested=True)`` draws it in every model);
* a ``kv_cache`` node `K` whose calls form one dataflow chain (each reads the previous one's
  output, through top-level loops as a carried channel), so its per-request state is well
  defined; only the `main` flow calls it (two flows side by side have no order between them);
* sometimes a second flow `side` (`when` or not; `for seg in request.inputs` / `match`) running
  walks `w2` (persist) and `w3` beside `main`;
* sometimes a stream `st: P.t -> C.u` (fixed, sliding or left_context; final pad or drop) fed
  by `main`'s walks, whose `P` calls form a chain like `K`'s or are free (items of one walk go
  in statement order either way), and consumed by a flow `codec on st`.

Shapes the runtime gets wrong today are steered around, each marked ``KNOWN BUG`` with the
xfail test in `test_runtime_vs_interp` that pins it (none at the moment).

`placements(walk_nodes)` draws a placement YAML over 1–3 CPU ranks: each node on one rank for
all its walks, or per walk (which, for `K`, moves its state between ranks), sometimes a
tensor-parallel pair, and a batch size of 1–4.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import strategies as st

IMPL = "generic_nodes:Generic"
NODES = ("N0", "N1", "N2")
MODALITIES = ("tensor", "image", "audio", "text")


@dataclass
class GenModel:
    text: str
    walk_nodes: dict[str, list[str]] = field(default_factory=dict)  # walk -> nodes it calls


class _Walk:
    """Builds one walk body; ``draw`` is hypothesis's, counters keep names fresh."""

    def __init__(
        self, draw, prefix: str, chained: tuple[str, ...], modality: str, nested: bool = False
    ) -> None:
        self.draw = draw
        self.nested = nested  # every top-level loop carries a value an inner loop yields
        self.prefix = prefix
        self.modality = modality
        self.n = 0
        self.loops = 0
        # per chained node (`K`, `P`): its last output, which its next call reads
        self.chains: dict[str, str | None] = dict.fromkeys(chained)
        self.nodes: set[str] = set()
        self.emitted: dict[str, list[str]] = {}
        self.yielded: set[str] = set()  # channels a loop yields

    def fresh(self) -> str:
        self.n += 1
        return f"{self.prefix}c{self.n}"

    def reads(self, visible: list[str], ports=("a", "b")) -> list[str]:
        if not visible:
            return []
        chans = self.draw(st.lists(st.sampled_from(visible), min_size=1, max_size=len(ports)))
        return [f"{p} = {c}" for p, c in zip(ports, chans, strict=False)]

    def call(self, visible: list[str], writes: list[tuple[str, str]], node=None) -> str:
        node = node or self.draw(st.sampled_from(NODES))
        self.nodes.add(node)
        out = f" -> {', '.join(f'{c} = {p}' for c, p in writes)}" if writes else ""
        return f"{node}({', '.join(self.reads(visible))}){out}"

    def emit(self, ch: str) -> str:
        # a second `emit` of a channel keeps the walk's modality or takes another
        modality = self.modality
        if ch in self.emitted and self.draw(st.booleans()):
            modality = MODALITIES[(MODALITIES.index(self.modality) + len(self.emitted[ch])) % 4]
        self.emitted.setdefault(ch, []).append(modality)
        return f"emit {ch} as {modality}"

    def chain_call(self, node: str, visible: list[str], bound: list[str]) -> str:
        self.nodes.add(node)
        src = self.chains[node] or self.draw(st.sampled_from(visible))
        c = self.fresh()
        self.chains[node] = c
        bound.append(c)
        return f"{node}(a = {src}) -> {c} = x"

    def body(self, param: str, size: int) -> tuple[list[str], list[str]]:
        """A walk's body reading walk input ``param`` (it may call no node at all)."""
        return self.block([param], 0, size, True)

    def block(self, visible: list[str], depth: int, size: int, top: bool) -> tuple[list, list]:
        """Statements, and the channels they bind that stay visible after the block.
        ``top``: the walk's own block (where `K` calls may go)."""
        lines: list[str] = []
        bound: list[str] = []
        kinds = ["call", "call", "loop", "par", "emit"] if depth < 2 else ["call", "emit"]
        if top:
            kinds += [*self.chains, *self.chains]
        if "P" in self.chains:
            kinds.append("free P")  # a stream producer call outside the chain
        for k in range(size):
            kind = self.draw(st.sampled_from(kinds))
            if self.nested and depth == 0 and k == 0:
                kind = "loop"
            vis = visible + bound
            if kind == "loop":
                lines += self.loop(vis, depth, bound, top)
            elif kind == "par":
                branches = []
                for _ in range(self.draw(st.integers(2, 3))):
                    c = self.fresh()
                    branch = [self.call(vis, [(c, "x")])]
                    if self.draw(st.booleans()):
                        branch.append(self.emit(c))
                    branches.append("{ " + " ".join(branch) + " }")
                    bound.append(c)
                lines.append("par { " + " ".join(branches) + " }")
            elif kind == "emit" and vis:  # in a loop: its own channels, or ones from outside
                lines.append(self.emit(self.draw(st.sampled_from(vis))))
            elif kind == "free P":
                c = self.fresh()
                self.nodes.add("P")
                lines.append(f"P(a = {self.draw(st.sampled_from(vis))}) -> {c} = x")
                bound.append(c)
            elif kind in self.chains and vis:
                lines.append(self.chain_call(kind, vis, bound))
            else:
                c = self.fresh()
                lines.append(self.call(vis, [(c, "y")]))
                bound.append(c)
        return lines, bound

    def loop(self, vis: list[str], depth: int, bound: list[str], top: bool) -> list[str]:
        self.loops += 1
        name = f"{self.prefix}L{self.loops}"
        lines: list[str] = []
        carried = None
        if (self.nested and depth == 0) or self.draw(st.booleans()):  # rebound in the loop
            carried = self.fresh()
            lines.append(self.call(vis, [(carried, "x")]))
            bound.append(carried)
            vis = [*vis, carried]
        inner, inner_bound = self.block(vis, depth + 1, self.draw(st.integers(0, 2)), False)
        body = list(inner)
        if carried is not None and depth == 0 and (self.nested or self.draw(st.booleans())):
            # an inner loop's `yield last` is the next iteration's value (a draft stepped k
            # times, whose last value the target reads next)
            body += self.inner_carry(vis + inner_bound, carried)
        elif carried is not None:  # reads the previous iteration's value, then rebinds it
            body.append(self.call([carried, *inner_bound], [(carried, "x")]))
        chained = []
        for node, ch in self.chains.items():
            if top and ch is not None and self.draw(st.booleans()):
                chained.append(ch)  # the chain runs through the loop as a carried channel
                self.nodes.add(node)
                body.append(f"{node}(a = {ch}) -> {ch} = x")
        last, acc = self.fresh(), self.fresh()
        body.append(self.call(vis + inner_bound, [(last, "x"), (acc, "y")]))
        if self.draw(st.booleans()):
            body.append(self.emit(last))  # per iteration
        mods = ""
        if self.draw(st.booleans()):
            stop = self.fresh()
            body.append(self.call(vis + inner_bound, [(stop, "s")]))
            mods = f" until {stop}" + (" nospeculate" if self.draw(st.booleans()) else "")
        bound.append(last)  # `yield all` values are stacked: only emitted, never read by ports
        self.yielded |= {x for x in (carried, *chained, last) if x}
        yields = ", ".join(x for x in (carried, *chained, last) if x)
        lines += [f"loop {name} max 3{mods} {{", *body, f"}} yield last {yields} yield all {acc}"]
        return [*lines, self.emit(acc)]

    def inner_carry(self, vis: list[str], carried: str) -> list[str]:
        """``g = f(vis)``, then an inner loop (``until`` or not) that carries ``g``, may run
        other statements (stream pushes among them), and binds the outer loop's ``carried``
        without reading it (iteration 0 of the inner loop would read the enclosing loop's
        carried value: `WG607`); its ``yield last carried`` is the outer loop's next value."""
        self.loops += 1
        name = f"{self.prefix}L{self.loops}"
        g = self.fresh()
        lines = [self.call(vis, [(g, "x")])]
        inner_vis = [c for c in vis if c != carried] + [g]
        extra, extra_bound = self.block(inner_vis, 2, self.draw(st.integers(0, 2)), False)
        body = [*extra, self.call([g, *extra_bound], [(g, "x")])]
        body.append(self.call([g, *extra_bound], [(carried, "x")]))
        if self.draw(st.booleans()):
            body.append(self.emit(carried))
        mods = ""
        if self.draw(st.booleans()):
            stop = self.fresh()
            body.append(self.call([g, *extra_bound], [(stop, "s")]))
            mods = f" until {stop}" + (" nospeculate" if self.draw(st.booleans()) else "")
        bound_max = self.draw(st.integers(1, 3))
        self.yielded |= {g, carried}
        return [
            *lines,
            f"loop {name} max {bound_max}{mods} {{",
            *body,
            f"}} yield last {carried}, {g}",
        ]


NODE_DECLS = [
    *(
        f'node {n}: stateless {{ impl "{IMPL}" in a: f32[4] in b: f32[4] '
        "out x: f32[4] out y: f32[4] out s: bool[] }"
        for n in NODES
    ),
    f'node K: kv_cache {{ impl "{IMPL}" in a: f32[4] out x: f32[4] }}',
]
STREAM_DECLS = [
    f'node P: stateless {{ impl "{IMPL}" in a: f32[4] out t: f32[1] out x: f32[4] }}',
    f'node C: stateless {{ impl "{IMPL}" in u: f32[2] out x: f32[4] }}',
]
POLICIES = ("fixed(k = 2)", "sliding(window = 2, stride = 1)", "left_context(chunk = 1, left = 1)")


@st.composite
def models(draw, stream: bool | None = None, nested: bool = False) -> GenModel:
    """A random model; ``stream``: with (True) or without (False) the stream, else either;
    ``nested``: `w0` starts with a loop whose carried value an inner loop's `yield last`
    rebinds (every top-level loop of `w0` is such a loop)."""
    kv = draw(st.booleans())
    stream = draw(st.booleans()) if stream is None else stream
    side = draw(st.booleans())
    lines = ["model gen", "option stop_at: int = 2", "option flag: bool = false", *NODE_DECLS]
    if stream:
        policy = draw(st.sampled_from(POLICIES))
        # left_context's first chunk is short (C < C + L items): only `pad` fills it
        final = "pad" if policy.startswith("left") else draw(st.sampled_from(("pad", "drop")))
        lines += [*STREAM_DECLS, f"stream st: P.t -> C.u chunk {policy} final {final}"]
    gm = GenModel("")

    chained = (("K",) if kv else ()) + (("P",) if stream else ())
    g0 = _Walk(draw, "a", chained, "tensor", nested)
    body0, bound0 = g0.body("inp", draw(st.integers(1, 4)))
    keep = draw(st.sampled_from(bound0)) if bound0 else "inp"
    lines += ["walk w0(inp?: f32[4]) {", *body0, f"persist {keep}", "}"]
    g1 = _Walk(draw, "b", chained, "text")
    body1, _ = g1.body("got", draw(st.integers(1, 4)))
    if stream and "P" not in g0.nodes | g1.nodes:
        body1.append(g1.chain_call("P", ["got"], []))
        g1.nodes.add("P")
    lines += ["walk w1(got: f32[4]) {", *body1, "}"]
    gm.walk_nodes = {"w0": sorted(g0.nodes), "w1": sorted(g1.nodes)}
    call_w1 = draw(
        st.sampled_from(
            [
                f"w1(got = {keep})",
                f"repeat 2 {{ w1(got = {keep}) }}",
                f"if option.flag {{ w1(got = {keep}) }}",
            ]
        )
    )
    lines += ["flow main {", "  w0()", f"  {call_w1}", "}"]

    if side:
        g2 = _Walk(draw, "s", (), "image")
        body2, bound2 = g2.body("inp", draw(st.integers(1, 3)))
        keep2 = draw(st.sampled_from(bound2)) if bound2 else "inp"
        lines += ["walk w2(inp: f32[4]) {", *body2, f"persist {keep2}", "}"]
        g3 = _Walk(draw, "t", (), "image")
        body3, _ = g3.body("got", draw(st.integers(1, 2)))
        if not any(x.startswith("emit") for x in body3):
            body3.append("emit got as image")
        lines += ["walk w3(got: f32[4]) {", *body3, "}"]
        gm.walk_nodes |= {"w2": sorted(g2.nodes), "w3": sorted(g3.nodes)}
        trigger = draw(st.sampled_from(["", " when option.flag", " when request.wants(image)"]))
        lines += [
            f"flow side{trigger} {{",
            "  for seg in request.inputs {",
            f"    match seg.modality {{ tensor => {{ w2(inp = seg) w3(got = {keep2}) }} }}",
            "  }",
            "}",
        ]
    if stream:
        extra = []
        nodes = ["C"]
        if draw(st.booleans()):
            extra = ["N0(a = cx, b = cx) -> cy = y", "emit cy as audio"]
            nodes.append("N0")
        lines += ["walk wc() {", "C() -> cx = x", "emit cx as audio", *extra, "}"]
        lines += ["flow codec on st {", "  wc()", "}"]
        gm.walk_nodes["wc"] = nodes
    gm.text = "\n".join(lines) + "\n"
    return gm


@st.composite
def placements(draw, walk_nodes: dict[str, list[str]]) -> str:
    """A placement YAML for the walks' (walk, node) pairs over 1–3 CPU ranks."""
    world = draw(st.integers(1, 3))
    nodes = sorted({n for ns in walk_nodes.values() for n in ns} | {"N0"})  # never empty
    groups: list[str] = []

    def ranks(node: str) -> str:
        r = draw(st.integers(0, world - 1))
        # sometimes tensor-parallel; not `K`, whose groups must share one tp size (WG813)
        pair = node != "K" and r + 1 < world and draw(st.integers(0, 4)) == 0
        return f"[{r}, {r + 1}]" if pair else f"[{r}]"

    for node in nodes:
        walks = [w for w, ns in walk_nodes.items() if node in ns]
        per_walk = draw(st.integers(0, 3)) > (0 if node == "K" else 1)
        if len(walks) > 1 and per_walk:  # per walk (for `K`: P/D-style, its state moves)
            for w in walks:
                groups.append(f"  - {{nodes: [{node}], ranks: {ranks(node)}, walks: [{w}]}}")
        else:
            groups.append(f"  - {{nodes: [{node}], ranks: {ranks(node)}}}")
    max_batch = draw(st.integers(1, 4))
    return (
        "\n".join(
            [
                f"devices: [{', '.join(['cpu'] * world)}]",
                "place:",
                *groups,
                "kv_cache: {page_size: 16, pages: 64, dtype: f32}",
                f"batching: {{max_batch: {max_batch}}}",
                "max_concurrent_requests: 8",
            ]
        )
        + "\n"
    )
