"""Build the typed IR from a lark parse tree.

Owns: turning parse-tree shapes into IR dataclasses with spans; evaluating `param`s; resolving
type aliases and `like` nodes; numbering calls; and handing each walk to `wgc.ir.resolve` for
channel-edge inference. It reports only what it must decide to build (codes WG004-WG011,
WG105/WG202/WG203 for params and dims); every other rule belongs to a pass in `wgc.passes`.
"""

from __future__ import annotations

from pathlib import Path

from lark import Token, Tree

from wgc.diagnostics.diagnostic import Diagnostic, Span, diag
from wgc.diagnostics.suggest import did_you_mean
from wgc.ir import expr as E
from wgc.ir.decls import (
    OPTION_TYPES,
    ChunkPolicy,
    EngineKind,
    FinalMode,
    Node,
    OptionDecl,
    Param,
    PolicyArg,
    PolicyKind,
    Port,
    PortDir,
    PortRef,
    Stream,
    TypeAlias,
)
from wgc.ir.flow import (
    MODALITIES,
    ArgKind,
    Arm,
    BoolOp,
    Const,
    Fail,
    FArg,
    FBlock,
    Flow,
    FlowKind,
    For,
    FStmt,
    If,
    Match,
    Not,
    OptionCond,
    Placed,
    Repeat,
    RequestPred,
    WalkCall,
)
from wgc.ir.model import Model
from wgc.ir.resolve import resolve_walk
from wgc.ir.types import DTYPE_NAMES, Dim, DType, TensorType
from wgc.ir.walk import Bind, Block, Call, Emit, Loop, Named, Par, Persist, Walk, WalkInput


def build(
    tree: Tree, file: str, overrides: dict[str, E.Value] | None = None
) -> tuple[Model, list[Diagnostic]]:
    """The IR of one parsed file, and the diagnostics found while building it.

    ``overrides`` replaces the value of the named params at their declaration (placement
    `params:` and `--set`), so every param, dim and loop bound derived from them follows.
    """
    return _Builder(file, overrides).model(tree)


class _Builder:
    def __init__(self, file: str, overrides: dict[str, E.Value] | None = None) -> None:
        self.file = file
        self.overrides = dict(overrides or {})
        self.diags: list[Diagnostic] = []
        self.params: dict[str, E.Value] = {}
        self.failed_params: set[str] = set()  # declared, but their value was an error
        self.aliases: dict[str, Tree] = {}
        self.resolved_aliases: dict[str, TensorType | None] = {}

    # ------------------------------------------------------------------ spans
    def span(self, node: Tree | Token) -> Span:
        if isinstance(node, Token):
            return Span(
                self.file,
                node.line or 0,
                node.column or 0,
                node.end_line or node.line or 0,
                node.end_column or (node.column or 0) + len(node),
            )
        m = node.meta
        if m.empty:
            return Span(self.file, 0, 0, 0, 0)
        return Span(self.file, m.line, m.column, m.end_line, m.end_column)

    def error(self, code: str, message: str, at, **kw) -> None:
        self.diags.append(
            diag(code, message, self.span(at) if not isinstance(at, Span) else at, **kw)
        )

    # ------------------------------------------------------------------ model
    def model(self, tree: Tree) -> tuple[Model, list[Diagnostic]]:
        items = tree.children
        name = Path(self.file).stem
        for it in items:
            if it.data == "type_decl":
                self.aliases.setdefault(str(it.children[0]), it.children[1])
        params, types, options, raw_nodes, streams, walk_trees, flow_trees = (
            [],
            [],
            [],
            [],
            [],
            [],
            [],
        )
        for it in items:
            kind = it.data
            if kind == "model_decl":
                name = str(it.children[0])
            elif kind == "param_decl":
                params.append(self.param(it))
            elif kind == "type_decl":
                types.append(self.type_decl(it))
            elif kind == "option_decl":
                options.append(self.option(it))
            elif kind == "node_decl":
                raw_nodes.append(it)
            elif kind == "stream_decl":
                streams.append(self.stream(it))
            elif kind == "walk_decl":
                walk_trees.append(it)
            elif kind == "flow_decl":
                flow_trees.append(it)
        nodes = self.nodes(raw_nodes)
        node_map: dict[str, Node] = {}
        for n in nodes:
            node_map.setdefault(n.name, n)
        walks = [self.walk(w, node_map, streams) for w in walk_trees]
        flows = [self.flow(f) for f in flow_trees]
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
        )
        return model, self.diags

    # ------------------------------------------------------------------ expressions
    def expr(self, t) -> E.Expr:
        if isinstance(t, Token):  # bare NAME in some positions
            return E.Ref(str(t), self.span(t))
        d = t.data
        sp = self.span(t)
        if d == "int":
            return E.Lit(E.int_literal(str(t.children[0])), sp)
        if d == "float":
            return E.Lit(float(t.children[0]), sp)
        if d == "string":
            return E.Lit(_unquote(str(t.children[0])), sp)
        if d == "true":
            return E.Lit(True, sp)
        if d == "false":
            return E.Lit(False, sp)
        if d == "ref":
            return E.Ref(str(t.children[0]), sp)
        if d == "option_ref":
            return E.OptionRef(str(t.children[0]), sp)
        if d == "neg":
            return E.Neg(self.expr(t.children[0]), sp)
        op = {"add": "+", "sub": "-", "mul": "*", "div": "/"}[d]
        return E.BinOp(op, self.expr(t.children[0]), self.expr(t.children[1]), sp)

    def uses_failed_param(self, ex: E.Expr) -> bool:
        """Whether ``ex`` names a param whose own value failed (and was reported there)."""
        return any(r.name in self.failed_params and r.name not in self.params for r in E.refs(ex))

    def static_value(self, ex: E.Expr) -> E.Value | None:
        if self.uses_failed_param(ex):
            return None  # one error per broken param, where it is declared
        try:
            return E.evaluate(ex, self.params)
        except E.EvalError as err:
            self.error(err.code, err.message, err.span, help=err.help)
            return None

    def param(self, t: Tree) -> Param:
        name = str(t.children[0])
        ex = self.expr(t.children[1])
        value = self.overrides[name] if name in self.overrides else self.static_value(ex)
        if value is None:
            self.failed_params.add(name)
        elif name not in self.params:
            self.params[name] = value
        return Param(name, ex, value, self.span(t), self.span(t.children[0]))

    def option(self, t: Tree) -> OptionDecl:
        name, typ, default_t = str(t.children[0]), str(t.children[1]), t.children[2]
        ex = self.expr(default_t)
        default: E.Value = False
        if typ not in OPTION_TYPES:
            self.error(
                "WG009",
                f"unknown option type `{typ}`",
                t.children[1],
                label="not an option type",
                help=f"{did_you_mean(typ, OPTION_TYPES, end=' ')}option types are "
                + ", ".join(f"`{x}`" for x in OPTION_TYPES),
            )
        else:
            v = self.static_value(ex)
            ok = v is not None and _option_fits(typ, v)
            if v is not None and not ok:
                self.error(
                    "WG009",
                    f"default of option `{name}` is not of type `{typ}`",
                    default_t,
                    label=f"expected a `{typ}`",
                    help=f"give a `{typ}` default, e.g. `option {name}: {typ} = {_example(typ)}`",
                )
            elif v is not None:
                default = float(v) if typ == "float" and isinstance(v, int | float) else v
        return OptionDecl(name, typ, default, self.span(t), self.span(t.children[0]), ex)

    # ------------------------------------------------------------------ types
    def type_decl(self, t: Tree) -> TypeAlias:
        name = str(t.children[0])
        te = t.children[1]
        ref = str(te.children[0]) if te.data == "type_ref" else None
        return TypeAlias(name, self.alias_type(name), ref, self.span(t), self.span(t.children[0]))

    def alias_type(self, name: str, seen: frozenset = frozenset()) -> TensorType | None:
        if name in self.resolved_aliases:
            return self.resolved_aliases[name]
        te = self.aliases.get(name)
        if te is None or name in seen:
            return None
        if te.data == "type_ref":
            result = self.alias_type(str(te.children[0]), seen | {name})
        else:
            result = self.tensor_type(te)
        self.resolved_aliases[name] = result
        return result

    def type_expr(self, te: Tree) -> tuple[TensorType | None, str | None]:
        if te.data == "type_ref":
            ref = str(te.children[0])
            if ref in DTYPE_NAMES:
                self.error(
                    "WG202",
                    f"`{ref}` needs dims: write `{ref}[]` for a scalar",
                    te,
                    label="missing `[...]`",
                    help=f"a scalar is `{ref}[]`; a vector `{ref}[N]`",
                )
                return None, None
            return self.alias_type(ref), ref
        return self.tensor_type(te), None

    def tensor_type(self, te: Tree) -> TensorType | None:
        dtype_tok = te.children[0]
        dname = str(dtype_tok)
        dims_t = [c for c in te.children[1:] if c is not None]
        dtype = None
        if dname not in DTYPE_NAMES:
            self.error(
                "WG004",
                f"unknown dtype `{dname}`",
                dtype_tok,
                label="not a dtype",
                help=f"{did_you_mean(dname, DTYPE_NAMES, end=' ')}dtypes are "
                + " ".join(f"`{d}`" for d in DTYPE_NAMES),
            )
        else:
            dtype = DType(dname)
        dims = []
        ok = True
        for dt in dims_t:
            d = self.dim(dt)
            ok &= d is not None
            dims.append(d)
        if dtype is None or not ok:
            return None
        return TensorType(dtype, tuple(dims))

    def dim(self, t) -> Dim | None:
        if isinstance(t, Tree) and t.data == "any_dim":
            return Dim.any_()
        ex = self.expr(t)
        if isinstance(ex, E.Ref) and ex.name not in self.params:
            return Dim.sym(ex.name)
        if self.uses_failed_param(ex):
            return None
        if not E.is_static(ex, self.params):
            bad = next((r for r in E.refs(ex) if r.name not in self.params), None)
            self.error(
                "WG202",
                "a dim expression may only use integers and `param`s",
                ex.span,
                label=f"`{bad.name}` is not a param" if bad else "not static",
                help="write a symbolic dim on its own (`T`), or declare the names as params",
            )
            return None
        v = self.static_value(ex)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            self.error(
                "WG202",
                f"a dim must be a non-negative integer, found `{v!r}`",
                ex.span,
                label="invalid dim",
            )
            return None
        if isinstance(ex, E.Ref):
            return Dim.param(ex.name, v)
        if isinstance(ex, E.Lit):
            return Dim.int_(v)
        return Dim.param(E.render(ex), v)

    # ------------------------------------------------------------------ nodes
    def nodes(self, trees: list[Tree]) -> list[Node]:
        by_name: dict[str, Tree] = {}
        for t in trees:
            by_name.setdefault(str(t.children[0]), t)
        done: dict[str, Node] = {}

        def make(t: Tree, seen: frozenset) -> Node:
            name = str(t.children[0])
            if t is by_name.get(name) and name in done:
                return done[name]
            engine_t = t.children[1]
            items = t.children[2:]
            base: Node | None = None
            like = None
            if engine_t.data == "like":
                like = str(engine_t.children[0])
                bt = by_name.get(like)
                if bt is not None and like not in seen:
                    base = make(bt, seen | {name})
                engine, labels = (base.engine, base.labels) if base else (EngineKind.STATELESS, ())
            elif engine_t.data == "stateless":
                engine, labels = EngineKind.STATELESS, ()
            else:
                engine, labels = EngineKind.KV_CACHE, self.kv_labels(engine_t)
            impl = base.impl if base else None
            impl_span = base.impl_span if base else None
            inputs = {p.name: p for p in base.inputs} if base else {}
            outputs = {p.name: p for p in base.outputs} if base else {}
            config = dict(base.config) if base else {}
            config_exprs = dict(base.config_exprs) if base else {}
            label = None
            label_span = None
            own_inputs: list[Port] = []
            own_outputs: list[Port] = []
            for it in items:
                if it.data == "impl":
                    impl = _unquote(str(it.children[0]))
                    impl_span = self.span(it)
                elif it.data in ("in_port", "out_port"):
                    p = self.port(it)
                    (own_inputs if p.direction is PortDir.IN else own_outputs).append(p)
                elif it.data == "label":
                    label = str(it.children[0])
                    label_span = self.span(it)
                elif it.data == "config":
                    key, ex = str(it.children[0]), self.expr(it.children[1])
                    value = self.static_value(ex)
                    if value is None:  # reported; a broken value is no value (nor the base's)
                        config.pop(key, None)
                    else:
                        config[key] = value
                    config_exprs[key] = ex
            if like is not None:
                for p in own_inputs:
                    inputs[p.name] = p
                for p in own_outputs:
                    outputs[p.name] = p
                ins, outs = tuple(inputs.values()), tuple(outputs.values())
            else:
                ins, outs = tuple(own_inputs), tuple(own_outputs)
            if label is not None:
                labels = (label,)
            node = Node(
                name=name,
                engine=engine,
                labels=labels,
                impl=impl,
                inputs=ins,
                outputs=outs,
                config=tuple(config.items()),
                like=like,
                label=label,
                span=self.span(t),
                label_span=label_span,
                impl_span=impl_span,
                name_span=self.span(t.children[0]),
                config_exprs=tuple(config_exprs.items()),
            )
            if t is by_name.get(name):
                done[name] = node
            return node

        return [make(t, frozenset()) for t in trees]

    def kv_labels(self, engine_t: Tree) -> tuple[str, ...]:
        labels: list[str] = []
        for arg in engine_t.children:
            if arg is None:
                continue
            key = str(arg.children[0])
            if key != "labels":
                self.error(
                    "WG011",
                    f"unknown `kv_cache` argument `{key}`",
                    arg.children[0],
                    label="unknown argument",
                    help="`kv_cache` takes `labels = [a, b, ...]`",
                )
                continue
            labels.extend(str(x) for x in arg.children[1:] if x is not None)
        return tuple(labels) or ("main",)

    def port(self, t: Tree) -> Port:
        direction = PortDir.IN if t.data == "in_port" else PortDir.OUT
        typ, ref = self.type_expr(t.children[1])
        return Port(str(t.children[0]), direction, typ, ref, self.span(t))

    # ------------------------------------------------------------------ streams
    def stream(self, t: Tree) -> Stream:
        name = str(t.children[0])
        prod = self.port_ref(t.children[1])
        cons = self.port_ref(t.children[2])
        policy = None
        final = FinalMode.PARTIAL
        bad_final = False
        final_span = after_span = None
        after = False
        for opt in t.children[3:]:
            if opt.data == "chunk":
                policy = self.policy(opt)
            elif opt.data == "final":
                word = str(opt.children[0])
                final_span = self.span(opt)
                try:
                    final = FinalMode(word)
                except ValueError:
                    bad_final = True
                    modes = [m.value for m in FinalMode]
                    self.error(
                        "WG005",
                        f"unknown final mode `{word}`",
                        opt.children[0],
                        label="not a final mode",
                        help=f"{did_you_mean(word, modes, end=' ')}write `final partial`, "
                        "`final pad` or `final drop`",
                    )
            else:
                word = str(opt.children[0])
                after_span = self.span(opt)
                if word == "continue":
                    after = True
                elif word != "stop":
                    self.error(
                        "WG005",
                        f"unknown `after_done` mode `{word}`",
                        opt.children[0],
                        label="expected `continue` or `stop`",
                        help="`after_done continue` keeps offering empty chunks after the "
                        "producer is done; `after_done stop` (the default) ends the stream",
                    )
        written = any(o.data == "chunk" for o in t.children[3:])
        policy_valid = (policy is not None or not written) and not bad_final
        if policy is None:  # no `chunk` line: the default `fixed(k = 1)`
            policy = ChunkPolicy(
                PolicyKind.FIXED,
                (PolicyArg("k", E.Lit(1, self.span(t)), 1, self.span(t)),),
                self.span(t),
            )
        return Stream(
            name,
            prod,
            cons,
            policy,
            final,
            after,
            self.span(t),
            final_span,
            after_span,
            self.span(t.children[0]),
            policy_valid,
        )

    def port_ref(self, t: Tree) -> PortRef:
        return PortRef(str(t.children[0]), str(t.children[1]), self.span(t))

    def policy(self, t: Tree) -> ChunkPolicy | None:
        word = str(t.children[0])
        try:
            kind = PolicyKind(word)
        except ValueError:
            kinds = [k.value for k in PolicyKind]
            self.error(
                "WG006",
                f"unknown chunk policy `{word}`",
                t.children[0],
                label="not a chunk policy",
                help=f"{did_you_mean(word, kinds, end=' ')}policies are `fixed(k)`, "
                "`sliding(window = W, stride = S)`, `left_context(chunk = C, left = L)`",
            )
            return None
        args = []
        for a in t.children[1:]:
            if a is None:
                continue
            key = str(a.children[0]) if a.children[0] is not None else None
            ex = self.expr(a.children[1])
            v = None
            if E.is_static(ex, self.params):
                val = self.static_value(ex)
                if isinstance(val, int) and not isinstance(val, bool):
                    v = val
            args.append(PolicyArg(key, ex, v, self.span(a)))
        return ChunkPolicy(kind, tuple(args), self.span(t))

    # ------------------------------------------------------------------ walks
    def walk(self, t: Tree, nodes: dict[str, Node], streams: list[Stream]) -> Walk:
        name = str(t.children[0])
        inputs = []
        for p in t.children[1:-1]:
            if p is None:
                continue
            pname, q, te = p.children
            typ, ref = self.type_expr(te) if te is not None else (None, None)
            inputs.append(WalkInput(str(pname), q is not None, typ, ref, self.span(p)))
        self._call_id = 0
        self._calls: list[Call] = []
        self._loops: list[Loop] = []
        body = self.block(t.children[-1], ())
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
            self.span(t.children[0]),
        )

    def block(self, t: Tree, loops: tuple[str, ...]) -> Block:
        stmts = []
        for s in t.children:
            stmts.extend(self.stmt(s, loops))
        return Block(tuple(stmts), self.span(t))

    def stmt(self, t: Tree, loops: tuple[str, ...]) -> list:
        d = t.data
        if d == "call":
            return [self.call(t, loops)]
        if d == "par":
            branches = []
            for b in t.children:
                if b.data == "block":
                    branches.append(self.block(b, loops))
                else:
                    branches.append(Block(tuple(self.stmt(b, loops)), self.span(b)))
            return [Par(tuple(branches), self.span(t))]
        if d == "loop":
            return [self.loop(t, loops)]
        if d == "emit":
            mod_tok = t.children[1]
            self.check_modality(mod_tok)
            return [Emit(str(t.children[0]), str(mod_tok), self.span(t))]
        if d == "persist":
            return [Persist(str(c), self.span(c)) for c in t.children]
        if d == "block":  # a braced group outside `par` is just its statements
            return list(self.block(t, loops).stmts)
        raise AssertionError(f"unexpected statement {d}")

    def call(self, t: Tree, loops: tuple[str, ...]) -> Call:
        node_tok = t.children[0]
        reads, writes = [], []
        for c in t.children[1:]:
            if c is None:
                continue
            a, b = c.children
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

    def loop(self, t: Tree, loops: tuple[str, ...]) -> Loop:
        name = str(t.children[0])
        max_expr = self.expr(t.children[1])
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
        for c in t.children[2:]:
            if c.data == "until":
                until = Named(str(c.children[0]), self.span(c.children[0]))
            elif c.data == "eager":
                eager = True
            elif c.data == "nospeculate":
                speculate = False
            elif c.data == "block":
                body = self.block(c, (*loops, name))
            elif c.data == "yield_last":
                yl.extend(Named(str(x), self.span(x)) for x in c.children)
            elif c.data == "yield_all":
                ya.extend(Named(str(x), self.span(x)) for x in c.children)
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

    def check_modality(self, tok: Tree | Token) -> bool:
        m = str(tok)
        if m in MODALITIES:
            return True
        self.error(
            "WG008",
            f"unknown modality `{m}`",
            tok,
            label="not a modality",
            help=f"{did_you_mean(m, MODALITIES, end=' ')}modalities are "
            + " ".join(f"`{x}`" for x in MODALITIES),
        )
        return False

    # ------------------------------------------------------------------ flows
    def flow(self, t: Tree) -> Flow:
        name = str(t.children[0])
        trig, body_t = t.children[1], t.children[2]
        kind = FlowKind.ALWAYS
        when = None
        on = None
        trig_span = None
        if trig is not None:
            trig_span = self.span(trig)
            if trig.data == "when":
                kind, when = FlowKind.WHEN, self.cond(trig.children[0])
            else:
                kind, on = FlowKind.ON_STREAM, str(trig.children[0])
        if body_t.data == "flow_extern":
            target = _unquote(str(body_t.children[0]))
            if ":" not in target:
                self.error(
                    "WG007",
                    f"flow target `{target}` is not a `module:function` path",
                    body_t,
                    label="expected `module:function`",
                    help='write `flow main = "examples.bagel.flows:main"`',
                )
            return Flow(
                name,
                FlowKind.EXTERN,
                None,
                on,
                target,
                None,
                self.span(t),
                trig_span,
                self.span(t.children[0]),
            )
        self._flow_vars: list[str] = []
        return Flow(
            name,
            kind,
            when,
            on,
            None,
            self.fblock(body_t),
            self.span(t),
            trig_span,
            self.span(t.children[0]),
        )

    def fblock(self, t: Tree) -> FBlock:
        return FBlock(tuple(self.fstmt(s) for s in t.children), self.span(t))

    def fstmt(self, t: Tree) -> FStmt:
        """One statement of a flow body (braced arm and `else` bodies are `fblock`s, built by
        their callers)."""
        d = t.data
        sp = self.span(t)
        if d == "walk_call":
            args = []
            for a in t.children[1:]:
                if a is None:
                    continue
                pname = str(a.children[0])
                v = a.children[1]
                if v is None:
                    args.append(FArg(pname, ArgKind.NAME, pname, None, self.span(a)))
                elif v.data == "fvalue_name":
                    args.append(FArg(pname, ArgKind.NAME, str(v.children[0]), None, self.span(a)))
                elif v.data == "fvalue_option":
                    args.append(FArg(pname, ArgKind.OPTION, str(v.children[0]), None, self.span(a)))
                else:
                    args.append(
                        FArg(
                            pname,
                            ArgKind.SEGMENT_FIELD,
                            str(v.children[0]),
                            str(v.children[1]),
                            self.span(a),
                        )
                    )
            return WalkCall(str(t.children[0]), tuple(args), sp)
        if d == "for_stmt":
            var, obj, attr, body = t.children
            if (str(obj), str(attr)) != ("request", "inputs"):
                self.error(
                    "WG007",
                    f"`for` iterates over `request.inputs`, not `{obj}.{attr}`",
                    _join(self.span(obj), self.span(attr)),
                    label="expected `request.inputs`",
                    help=f"write `for {var} in request.inputs {{ ... }}`",
                )
            self._flow_vars.append(str(var))
            block = self.fblock(body)
            self._flow_vars.pop()
            return For(str(var), block, sp)
        if d == "match_stmt":
            var, attr = t.children[0], t.children[1]
            if str(attr) != "modality":
                self.error(
                    "WG007",
                    f"`match` inspects `{var}.modality`, not `{var}.{attr}`",
                    attr,
                    label="expected `modality`",
                    help=f"write `match {var}.modality {{ text => ..., _ => ... }}`",
                )
            arms = []
            for arm in t.children[2:]:
                pats = tuple(str(p) for p in arm.children[0].children)
                for p in arm.children[0].children:
                    if str(p) != "_":
                        self.check_modality(p)
                body = arm.children[1]
                block = (
                    self.fblock(body)
                    if body.data == "fblock"
                    else FBlock((self.fstmt(body),), self.span(body))
                )
                arms.append(Arm(pats, block, self.span(arm)))
            return Match(str(var), tuple(arms), sp)
        if d == "if_stmt":
            cond_t, then_t, *rest = t.children
            else_t = rest[0] if rest else None
            else_block = None
            if else_t is not None:
                else_block = (
                    self.fblock(else_t)
                    if else_t.data == "fblock"
                    else FBlock((self.fstmt(else_t),), self.span(else_t))
                )
            return If(self.cond(cond_t), self.fblock(then_t), else_block, sp)
        if d == "repeat_stmt":
            return Repeat(self.expr(t.children[0]), self.fblock(t.children[1]), sp)
        if d == "fail_stmt":
            return Fail(_unquote(str(t.children[0])), sp)
        raise AssertionError(f"unexpected flow statement {d}")

    def cond(self, t):
        d = t.data
        sp = self.span(t)
        if d == "or_":
            return BoolOp("or", self.cond(t.children[0]), self.cond(t.children[1]), sp)
        if d == "and_":
            return BoolOp("and", self.cond(t.children[0]), self.cond(t.children[1]), sp)
        if d == "not_":
            return Not(self.cond(t.children[0]), sp)
        if d == "true":
            return Const(True, sp)
        if d == "false":
            return Const(False, sp)
        if d == "placed":
            return Placed(str(t.children[0]), sp)
        if d == "option_cond":
            return OptionCond(str(t.children[0]), sp)
        obj, pred, arg = (str(c) for c in t.children)
        if obj != "request" or pred not in ("wants", "has"):
            self.error(
                "WG007",
                f"unknown condition `{obj}.{pred}(...)`",
                t,
                label="not a condition",
                help="conditions are `request.wants(m)`, `request.has(m)`, a bool `option.NAME`, "
                "`placed(NODE)`, combined with `not`, `and`, `or`",
            )
            return Const(False, sp)
        self.check_modality(t.children[2])
        return RequestPred(pred, arg, sp)


def _unquote(s: str) -> str:
    body = s[1:-1]
    out = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            out.append({"n": "\n", "t": "\t"}.get(nxt, nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _example(typ: str) -> str:
    return {"bool": "false", "int": "1", "float": "1.0", "str": '"x"'}.get(typ, "...")


def _option_fits(typ: str, v: E.Value) -> bool:
    """Whether ``v`` is a default for an option of type ``typ`` (an int fits a float)."""
    if typ == "bool" or isinstance(v, bool):
        return typ == "bool" and isinstance(v, bool)
    if typ == "int":
        return isinstance(v, int)
    if typ == "float":
        return isinstance(v, int | float)
    return typ == "str" and isinstance(v, str)


def _join(first: Span, last: Span) -> Span:
    """From the start of ``first`` to the end of ``last``."""
    return Span(first.file, first.line, first.col, last.end_line, last.end_col)
