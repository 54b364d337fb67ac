"""Building nodes (engines, ports, `like` copies, the options they read) and streams.

Codes reported here: WG011 (an unknown `kv_cache` argument), WG005/WG006 (stream `final` /
`after_done` modes and chunk policies); a config value that does not evaluate is WG105/WG203.
"""

from __future__ import annotations

from wgc.diagnostics.suggest import did_you_mean
from wgc.ir import expr as E
from wgc.ir.build_core import unquote
from wgc.ir.build_types import TypeBuilder
from wgc.ir.decls import (
    ChunkPolicy,
    EngineKind,
    FinalMode,
    Node,
    PolicyArg,
    PolicyKind,
    Port,
    PortDir,
    PortRef,
    Stream,
)
from wgc.ir.parse_tree import ParseTree, branch, child, kids, opt_tok, sub, subs, text, tok, toks


class DeclBuilder(TypeBuilder):
    # ------------------------------------------------------------------ nodes
    def nodes(self, trees: list[ParseTree]) -> list[Node]:
        by_name: dict[str, ParseTree] = {}
        for t in trees:
            by_name.setdefault(text(t, 0), t)
        done: dict[str, Node] = {}

        def make(t: ParseTree, seen: frozenset[str]) -> Node:
            name = text(t, 0)
            if t is by_name.get(name) and name in done:
                return done[name]
            engine_t = sub(t, 1)
            items = subs(t, 2)
            base: Node | None = None
            like = None
            if engine_t.data == "like":
                like = text(engine_t, 0)
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
            reads = dict(zip(base.reads, base.read_spans, strict=True)) if base else {}
            label = None
            label_span = None
            writable = False
            own_inputs: list[Port] = []
            own_outputs: list[Port] = []
            for it in items:
                if it.data == "impl":
                    impl = unquote(text(it, 0))
                    impl_span = self.span(it)
                elif it.data in ("in_port", "out_port"):
                    p = self.port(it)
                    (own_inputs if p.direction is PortDir.IN else own_outputs).append(p)
                elif it.data == "label":
                    label = text(it, 0)
                    label_span = self.span(it)
                    writable = len(it.children) > 1 and child(it, 1) is not None
                elif it.data == "config":
                    key, ex = text(it, 0), self.expr(branch(it, 1))
                    value = self.static_value(ex)
                    if value is None:  # reported; a broken value is no value (nor the base's)
                        config.pop(key, None)
                    else:
                        config[key] = value
                    config_exprs[key] = ex
                elif it.data == "reads":
                    for name_tok in toks(it):
                        reads.setdefault(str(name_tok), self.span(name_tok))
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
                writable=writable,
                span=self.span(t),
                label_span=label_span,
                impl_span=impl_span,
                name_span=self.span(tok(t, 0)),
                config_exprs=tuple(config_exprs.items()),
                reads=tuple(reads),
                read_spans=tuple(reads.values()),
            )
            if t is by_name.get(name):
                done[name] = node
            return node

        return [make(t, frozenset()) for t in trees]

    def kv_labels(self, engine_t: ParseTree) -> tuple[str, ...]:
        labels: list[str] = []
        for arg in subs(engine_t):
            key = text(arg, 0)
            if key != "labels":
                self.error(
                    "WG011",
                    f"unknown `kv_cache` argument `{key}`",
                    tok(arg, 0),
                    label="unknown argument",
                    help="`kv_cache` takes `labels = [a, b, ...]`",
                )
                continue
            labels.extend(str(x) for x in kids(arg, 1) if x is not None)
        return tuple(labels) or ("main",)

    def port(self, t: ParseTree) -> Port:
        direction = PortDir.IN if t.data == "in_port" else PortDir.OUT
        typ, ref = self.type_expr(sub(t, 1))
        return Port(text(t, 0), direction, typ, ref, self.span(t))

    # ------------------------------------------------------------------ streams
    def stream(self, t: ParseTree) -> Stream:
        name = text(t, 0)
        prod = self.port_ref(sub(t, 1))
        cons = self.port_ref(sub(t, 2))
        policy = None
        final = FinalMode.PARTIAL
        bad_final = False
        final_span = after_span = None
        after = False
        for opt in subs(t, 3):
            if opt.data == "chunk":
                policy = self.policy(opt)
            elif opt.data == "final":
                word = text(opt, 0)
                final_span = self.span(opt)
                try:
                    final = FinalMode(word)
                except ValueError:
                    bad_final = True
                    modes = [m.value for m in FinalMode]
                    self.error(
                        "WG005",
                        f"unknown final mode `{word}`",
                        tok(opt, 0),
                        label="not a final mode",
                        help=f"{did_you_mean(word, modes, end=' ')}write `final partial`, "
                        "`final pad` or `final drop`",
                    )
            else:
                word = text(opt, 0)
                after_span = self.span(opt)
                if word == "continue":
                    after = True
                elif word != "stop":
                    self.error(
                        "WG005",
                        f"unknown `after_done` mode `{word}`",
                        tok(opt, 0),
                        label="expected `continue` or `stop`",
                        help="`after_done continue` keeps offering empty chunks after the "
                        "producer is done; `after_done stop` (the default) ends the stream",
                    )
        written = any(o.data == "chunk" for o in subs(t, 3))
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
            self.span(tok(t, 0)),
            policy_valid,
        )

    def port_ref(self, t: ParseTree) -> PortRef:
        return PortRef(text(t, 0), text(t, 1), self.span(t))

    def policy(self, t: ParseTree) -> ChunkPolicy | None:
        word = text(t, 0)
        try:
            kind = PolicyKind(word)
        except ValueError:
            kinds = [k.value for k in PolicyKind]
            self.error(
                "WG006",
                f"unknown chunk policy `{word}`",
                tok(t, 0),
                label="not a chunk policy",
                help=f"{did_you_mean(word, kinds, end=' ')}policies are `fixed(k)`, "
                "`sliding(window = W, stride = S)`, `left_context(chunk = C, left = L)`",
            )
            return None
        args: list[PolicyArg] = []
        for a in subs(t, 1):
            key_tok = opt_tok(a, 0)
            key = str(key_tok) if key_tok is not None else None
            ex = self.expr(branch(a, 1))
            v = None
            if E.is_static(ex, self.params):
                val = self.static_value(ex)
                if isinstance(val, int) and not isinstance(val, bool):
                    v = val
            args.append(PolicyArg(key, ex, v, self.span(a)))
        return ChunkPolicy(kind, tuple(args), self.span(t))
