"""Build the typed IR from a lark parse tree.

Owns: turning parse-tree shapes into IR dataclasses with spans; evaluating `param`s; building
options before types (a dim may read a shape-bucket option); resolving type aliases and `like`
nodes; numbering calls; handing each walk to `wgc.ir.resolve` for channel-edge inference; and
expanding subflow calls (`wgc.ir.subflows`). It reports only what it must decide to build
(codes WG004-WG011, WG105/WG202/WG203/WG205/WG206 for params, dims and option values,
WG112/WG116/WG117 and WG705/WG007 while expanding subflows); every other rule belongs to a pass
in `wgc.passes`. The parts live in `build_core` (spans, expressions), `build_types` (params,
options, types; `build_buckets` and `build_bounded` for two kinds of dim), `build_decls` (nodes,
streams) and `build_flow` (flows, subflows); they read the parse tree through `parse_tree`.
"""

from __future__ import annotations

from pathlib import Path

from lark import Tree

from wgc.diagnostics.diagnostic import Diagnostic, Span
from wgc.ir import expr as E
from wgc.ir.build_decls import DeclBuilder
from wgc.ir.build_flow import FlowBuilder
from wgc.ir.decls import Node, Stream, TypeAlias
from wgc.ir.model import Model
from wgc.ir.parse_tree import ParseTree, branch, opt_sub, opt_tok, sub, subs, text, tok, toks
from wgc.ir.resolve import resolve_walk
from wgc.ir.subflows import expand
from wgc.ir.walk import Bind, Block, Call, Emit, Loop, Named, Par, Persist, Stmt, Walk, WalkInput


def build(
    tree: ParseTree, file: str, overrides: dict[str, E.Value] | None = None
) -> tuple[Model, list[Diagnostic]]:
    """The IR of one parsed file, and the diagnostics found while building it.

    ``overrides`` replaces the value of the named params at their declaration (placement
    `params:` and `--set`), so every param, dim and loop bound derived from them follows.
    """
    return _Builder(file, overrides).model(tree)


class _Builder(DeclBuilder, FlowBuilder):
    # ------------------------------------------------------------------ model
    def model(self, tree: ParseTree) -> tuple[Model, list[Diagnostic]]:
        items = subs(tree)
        name = Path(self.file).stem
        by_kind: dict[str, list[ParseTree]] = {}
        for it in items:
            by_kind.setdefault(it.data, []).append(it)
            if it.data == "type_decl":
                self.aliases.setdefault(text(it, 0), sub(it, 1))
        for it in by_kind.get("model_decl", ()):
            name = text(it, 0)
        # params first (each sees the params before it), then options (their values use
        # params; types use options), then everything else
        params = [self.param(it) for it in by_kind.get("param_decl", ())]
        option_trees = by_kind.get("option_decl", [])
        per_mode = [
            isinstance(c := branch(t, 3), Tree) and c.data == "default_match" for t in option_trees
        ]
        self.per_mode_names = {text(t, 0) for t, m in zip(option_trees, per_mode, strict=True) if m}
        options = [self.option(it) for it in option_trees]
        # by the declaration's own default, not its name: a duplicate (WG1xx) may differ
        options = [
            self.per_mode(t, o) if m else o
            for t, o, m in zip(option_trees, options, per_mode, strict=True)
        ]
        self.options = {}
        for o in options:
            self.options.setdefault(o.name, o)
        types = [self.type_decl(it) for it in by_kind.get("type_decl", ())]
        streams = [self.stream(it) for it in by_kind.get("stream_decl", ())]
        nodes = self.nodes(by_kind.get("node_decl", []))
        node_map: dict[str, Node] = {}
        for n in nodes:
            node_map.setdefault(n.name, n)
        walks = [self.walk(w, node_map, streams) for w in by_kind.get("walk_decl", ())]
        flows = [self.flow(f) for f in by_kind.get("flow_decl", ())]
        subflows = [self.subflow(s) for s in by_kind.get("subflow_decl", ())]
        flows, subflows, diags = expand(flows, subflows, {w.name for w in walks})
        self.diags.extend(diags)
        model = Model(
            name=name,
            file=self.file,
            params=tuple(params),
            types=tuple(types),
            options=tuple(options),
            nodes=tuple(nodes),
            streams=tuple(streams),
            walks=tuple(walks),
            flows=tuple(flows),
            span=self.span(tree),
            subflows=tuple(subflows),
            dim_options=frozenset(self.dim_options),
        )
        return model, self.diags

    # ------------------------------------------------------------------ types
    def type_decl(self, t: ParseTree) -> TypeAlias:
        name = text(t, 0)
        te = sub(t, 1)
        ref = text(te, 0) if te.data == "type_ref" else None
        return TypeAlias(name, self.alias_type(name), ref, self.span(t), self.span(tok(t, 0)))

    # ------------------------------------------------------------------ walks
    def walk(self, t: ParseTree, nodes: dict[str, Node], streams: list[Stream]) -> Walk:
        name = text(t, 0)
        inputs: list[WalkInput] = []
        for p in subs(t, 1)[:-1]:
            pname, q, te = tok(p, 0), opt_tok(p, 1), opt_sub(p, 2)
            typ, ref = self.type_expr(te) if te is not None else (None, None)
            inputs.append(WalkInput(str(pname), q is not None, typ, ref, self.span(p)))
        self._call_id = 0
        self._calls: list[Call] = []
        self._loops: list[Loop] = []
        body = self.block(sub(t, -1), ())
        calls = tuple(sorted(self._calls, key=lambda c: c.id))
        loops = tuple(self._loops)
        edges, issues = resolve_walk(body, tuple(inputs), nodes, streams, self.params)
        return Walk(
            name,
            tuple(inputs),
            body,
            calls,
            loops,
            edges,
            issues,
            self.span(t),
            self.span(tok(t, 0)),
        )

    def block(self, t: ParseTree, loops: tuple[str, ...]) -> Block:
        stmts: list[Stmt] = []
        for s in subs(t):
            stmts.extend(self.stmt(s, loops))
        return Block(tuple(stmts), self.span(t))

    def stmt(self, t: ParseTree, loops: tuple[str, ...]) -> list[Stmt]:
        d = t.data
        if d == "call":
            return [self.call(t, loops)]
        if d == "par":
            branches: list[Block] = []
            for b in subs(t):
                if b.data == "block":
                    branches.append(self.block(b, loops))
                else:
                    branches.append(Block(tuple(self.stmt(b, loops)), self.span(b)))
            return [Par(tuple(branches), self.span(t))]
        if d == "loop":
            return [self.loop(t, loops)]
        if d == "emit":
            mod_tok = tok(t, 1)
            self.check_modality(mod_tok)
            return [Emit(text(t, 0), str(mod_tok), self.span(t))]
        if d == "persist":
            return [Persist(str(c), self.span(c)) for c in toks(t)]
        if d == "block":  # a braced group outside `par` is just its statements
            return list(self.block(t, loops).stmts)
        raise AssertionError(f"unexpected statement {d}")

    def call(self, t: ParseTree, loops: tuple[str, ...]) -> Call:
        node_tok = tok(t, 0)
        reads: list[Bind] = []
        writes: list[Bind] = []
        for c in subs(t, 1):
            a, b = tok(c, 0), opt_tok(c, 1)
            if c.data == "arg":
                reads.append(Bind(str(a), str(b) if b is not None else str(a), self.span(c)))
            else:
                writes.append(Bind(str(b) if b is not None else str(a), str(a), self.span(c)))
        call = Call(
            self._call_id,
            str(node_tok),
            tuple(reads),
            tuple(writes),
            loops,
            self.span(t),
            self.span(node_tok),
        )
        self._call_id += 1
        self._calls.append(call)
        return call

    def loop(self, t: ParseTree, loops: tuple[str, ...]) -> Loop:
        name = text(t, 0)
        max_expr = self.expr(branch(t, 1))
        until = None
        eager = False
        speculate = True
        body = None
        yl: list[Named] = []
        ya: list[Named] = []
        placeholder = Loop(
            name, max_expr, None, None, False, True, Block((), self.span(t)), (), (), self.span(t)
        )
        self._loops.append(placeholder)
        index = len(self._loops) - 1
        for c in subs(t, 2):
            if c.data == "until":
                until = Named(text(c, 0), self.span(tok(c, 0)))
            elif c.data == "eager":
                eager = True
            elif c.data == "nospeculate":
                speculate = False
            elif c.data == "block":
                body = self.block(c, (*loops, name))
            elif c.data == "yield_last":
                yl.extend(Named(str(x), self.span(x)) for x in toks(c))
            elif c.data == "yield_all":
                ya.extend(Named(str(x), self.span(x)) for x in toks(c))
        assert body is not None, "the grammar gives every loop a block"
        mx = None
        if E.is_static(max_expr, self.params):
            try:
                v = E.evaluate(max_expr, self.params)
                if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                    mx = v
            except E.EvalError:
                mx = None
        header = self.span(t)
        header = Span(
            header.file, header.line, header.col, header.line, header.col + 4 + len(name) + 1
        )
        loop = Loop(
            name,
            max_expr,
            mx,
            until,
            eager,
            speculate,
            body,
            tuple(yl),
            tuple(ya),
            self.span(t),
            header,
        )
        self._loops[index] = loop
        return loop
