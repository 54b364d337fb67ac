"""Every name of a `.walk` parse tree, resolved to the symbol it declares or uses.

The IR keeps what a checker needs (a port's type, a call's bindings) but not every place a name
is written, so the editor's index is read off the lark tree, where every `NAME` token has its
line and column. A `Symbol` is (kind, scope, name): ports are scoped by the node that declares
them (a `like` node's inherited ports by its base), a flow's loop variables and a subflow's
parameters by the flow; everything else is file-wide. Channels are file-wide too: a channel
persisted by one walk is read by name in later walks and flows, so a channel's name is one
symbol across the file.

A call binding written once (`N(x)`, `-> y`) names a port and a channel together: it is indexed
twice, and `Occurrence.pair` says which side (`1`: the first name of `a = b`, `2`: the second),
so rename can spell the binding out (`N(x)` with port `x` renamed: `N(p = x)`).
"""

from __future__ import annotations

from dataclasses import dataclass

from lark import Token, Tree


@dataclass(frozen=True, slots=True)
class Symbol:
    kind: str
    scope: str  # the declaring node (ports), flow (vars); "" for file-wide names
    name: str


@dataclass(frozen=True, slots=True)
class Occurrence:
    """One written name: 0-based ``line`` and columns ``start``..``end`` (end exclusive)."""

    symbol: Symbol
    line: int
    start: int
    end: int
    is_def: bool
    pair: int = 0  # 1 / 2: the port or channel side of a binding written as one name

    def contains(self, line: int, col: int) -> bool:
        return self.line == line and self.start <= col <= self.end


@dataclass(frozen=True, slots=True)
class Word:
    """A name the language reserves or leaves open (dtype, modality, policy): semantic tokens
    colour it, nothing resolves it."""

    role: str  # "dtype", "modality", "policy", "property", "label", "builtin"
    line: int
    start: int
    end: int


class _Indexer:
    def __init__(self, tree: Tree) -> None:
        self.occurrences: list[Occurrence] = []
        self.words: list[Word] = []
        self.types: set[str] = set()
        self.params: set[str] = set()
        self.subflows: set[str] = set()
        self.like: dict[str, str] = {}
        self.ports: dict[str, set[str]] = {}
        self._scan_decls(tree)

    def _scan_decls(self, tree: Tree) -> None:
        for item in tree.children:
            if not isinstance(item, Tree):
                continue
            name = str(item.children[0]) if item.children else ""
            if item.data == "type_decl":
                self.types.add(name)
            elif item.data == "param_decl":
                self.params.add(name)
            elif item.data == "subflow_decl":
                self.subflows.add(name)
            elif item.data == "node_decl":
                engine = item.children[1]
                if isinstance(engine, Tree) and engine.data == "like":
                    self.like[name] = str(engine.children[0])
                self.ports[name] = {
                    str(c.children[0])
                    for c in item.children[2:]
                    if isinstance(c, Tree) and c.data in ("in_port", "out_port")
                }

    # -- recording -------------------------------------------------------------------------
    def add(self, tok, kind: str, scope: str = "", is_def: bool = False, pair: int = 0) -> None:
        if not isinstance(tok, Token) or tok.line is None or tok.column is None:
            return
        line, col = tok.line - 1, tok.column - 1
        sym = Symbol(kind, scope, str(tok))
        self.occurrences.append(Occurrence(sym, line, col, col + len(tok), is_def, pair))

    def word(self, tok, role: str) -> None:
        if isinstance(tok, Token) and tok.line is not None and tok.column is not None:
            self.words.append(Word(role, tok.line - 1, tok.column - 1, tok.column - 1 + len(tok)))

    def port_scope(self, node: str, port: str) -> str:
        """The node that declares ``port`` of ``node``: itself, or up its `like` chain."""
        seen = set()
        current = node
        while current not in seen:
            seen.add(current)
            if port in self.ports.get(current, ()):
                return current
            if current not in self.like:
                break
            current = self.like[current]
        return node

    # -- the tree --------------------------------------------------------------------------
    def item(self, t: Tree) -> None:
        handler = {
            "model_decl": self._model_decl,
            "param_decl": self._param_decl,
            "type_decl": self._type_decl,
            "option_decl": self._option_decl,
            "node_decl": self._node_decl,
            "stream_decl": self._stream_decl,
            "walk_decl": self._walk_decl,
            "flow_decl": self._flow_decl,
            "subflow_decl": self._subflow_decl,
        }.get(str(t.data))
        if handler is not None:
            handler(t)
            return
        for child in t.children:
            if isinstance(child, Tree):
                self.item(child)

    def _model_decl(self, t: Tree) -> None:
        self.add(t.children[0], "model", is_def=True)

    def _param_decl(self, t: Tree) -> None:
        self.add(t.children[0], "param", is_def=True)
        self.expr(t.children[1])

    def _type_decl(self, t: Tree) -> None:
        self.add(t.children[0], "type", is_def=True)
        self.type_expr(t.children[1])

    def _option_decl(self, t: Tree) -> None:
        name, typ, choices, default = t.children
        self.add(name, "option", is_def=True)
        self.word(typ, "dtype")
        if isinstance(choices, Tree):
            for v in choices.children:
                self.expr(v)
        if isinstance(default, Tree) and default.data == "default_match":
            self.add(default.children[0], "option")
            for arm in default.children[1:]:
                if isinstance(arm, Tree):
                    self.expr(arm.children[1])
        else:
            self.expr(default)

    def expr(self, t) -> None:
        if isinstance(t, Tree):
            if t.data == "ref":
                tok = t.children[0]
                if str(tok) in self.params:
                    self.add(tok, "param")
                return
            if t.data == "option_ref":
                self.add(t.children[0], "option")
                return
            for child in t.children:
                self.expr(child)

    def type_expr(self, t) -> None:
        if not isinstance(t, Tree):
            return
        tok = t.children[0]
        if t.data == "type_ref" and str(tok) in self.types:
            self.add(tok, "type")
        else:
            self.word(tok, "dtype")
        for dim in t.children[1:]:
            self.expr(dim)

    def _node_decl(self, t: Tree) -> None:
        name = str(t.children[0])
        self.add(t.children[0], "node", is_def=True)
        engine = t.children[1]
        if isinstance(engine, Tree) and engine.data == "like":
            self.add(engine.children[0], "node")
        for part in t.children[2:]:
            if not isinstance(part, Tree):
                continue
            if part.data in ("in_port", "out_port"):
                self.add(part.children[0], "port", name, is_def=True)
                self.type_expr(part.children[1])
            elif part.data == "config":
                self.word(part.children[0], "property")
                self.expr(part.children[1])
            elif part.data == "reads":
                for tok in part.children:
                    self.add(tok, "option")
            elif part.data == "label":
                self.word(part.children[0], "label")

    def port_ref(self, t: Tree) -> None:
        node, port = t.children
        self.add(node, "node")
        self.add(port, "port", self.port_scope(str(node), str(port)))

    def _stream_decl(self, t: Tree) -> None:
        self.add(t.children[0], "stream", is_def=True)
        for part in t.children[1:]:
            if not isinstance(part, Tree):
                continue
            if part.data == "port_ref":
                self.port_ref(part)
            elif part.data == "chunk":
                self.word(part.children[0], "policy")
                for arg in part.children[1:]:
                    if isinstance(arg, Tree):
                        self.word(arg.children[0], "property")
                        self.expr(arg.children[1])
            elif part.data in ("final", "after_done"):
                self.word(part.children[0], "policy")

    def _walk_decl(self, t: Tree) -> None:
        self.add(t.children[0], "walk", is_def=True)
        for part in t.children[1:]:
            if isinstance(part, Tree) and part.data == "walk_param":
                self.add(part.children[0], "channel", is_def=True)
                self.type_expr(part.children[-1])
            elif isinstance(part, Tree):
                self.stmt(part)

    def stmt(self, t: Tree) -> None:
        if t.data == "call":
            self.call(t)
        elif t.data == "loop":
            self.add(t.children[0], "loop", is_def=True)
            for part in t.children[1:]:
                if not isinstance(part, Tree):
                    continue
                if part.data in ("until", "yield_last", "yield_all"):
                    for tok in part.children:
                        self.add(tok, "channel")
                elif part.data == "block":
                    self.stmt(part)
                else:
                    self.expr(part)
        elif t.data == "emit":
            self.add(t.children[0], "channel")
            self.word(t.children[1], "modality")
        elif t.data == "persist":
            for tok in t.children:
                self.add(tok, "channel")
        else:  # block, par
            for part in t.children:
                if isinstance(part, Tree):
                    self.stmt(part)

    def call(self, t: Tree) -> None:
        node = str(t.children[0])
        self.add(t.children[0], "node")
        for b in t.children[1:]:
            if not isinstance(b, Tree):
                continue
            first, second = b.children
            # `arg`: port [= channel]; `out`: channel [= port]
            port_tok, chan_tok = (first, second) if b.data == "arg" else (second, first)
            if second is None:
                port_tok = chan_tok = first
            pairs = (1, 2) if b.data == "arg" else (2, 1)
            one = second is None
            self.add(port_tok, "port", self.port_scope(node, str(port_tok)), pair=pairs[0] * one)
            self.add(chan_tok, "channel", is_def=b.data == "out", pair=pairs[1] * one)

    # -- flows -----------------------------------------------------------------------------
    def _flow_decl(self, t: Tree) -> None:
        name = str(t.children[0])
        self.add(t.children[0], "flow", is_def=True)
        trigger = t.children[1]
        if isinstance(trigger, Tree) and trigger.data == "on_stream":
            self.add(trigger.children[0], "stream")
        elif isinstance(trigger, Tree):
            self.fstmt(trigger, name, set())
        self.fstmt(t.children[2], name, set())

    def _subflow_decl(self, t: Tree) -> None:
        name = str(t.children[0])
        self.add(t.children[0], "subflow", is_def=True)
        params = {str(p) for p in t.children[1:-1] if isinstance(p, Token)}
        for p in t.children[1:-1]:
            self.add(p, "var", name, is_def=True)
        self.fstmt(t.children[-1], name, params)

    def fstmt(self, t, flow: str, local: set[str]) -> None:
        if not isinstance(t, Tree):
            return
        c = t.children
        if t.data == "walk_call":
            callee = str(c[0])
            self.add(c[0], "subflow" if callee in self.subflows else "walk")
            for farg in c[1:]:
                if isinstance(farg, Tree):
                    kind = "var" if callee in self.subflows else "channel"
                    self.add(farg.children[0], kind, callee if kind == "var" else "")
                    self.fvalue(farg.children[1], flow, local)
            return
        if t.data == "for_stmt":
            self.add(c[0], "var", flow, is_def=True)
            self.add(c[1], "var", flow) if str(c[1]) in local else self.word(c[1], "builtin")
            self.word(c[2], "property")
            self.fstmt(c[3], flow, local | {str(c[0])})
            return
        if t.data in ("match_field", "fvalue_dotted"):
            self.var_or_builtin(c[0], flow, local)
            self.word(c[1], "property")
            return
        if t.data in ("match_option", "option_cond", "option_cmp", "fvalue_option"):
            self.add(c[0], "option")
            for v in c[1:]:
                self.expr(v)
            return
        if t.data in ("request_pred", "request_cmp", "fvalue_select"):
            self.var_or_builtin(c[0], flow, local)
            self.word(c[1], "builtin")
            self.word(c[2], "modality")
            for v in c[3:]:
                self.expr(v)
            return
        if t.data == "placed":
            self.add(c[0], "node")
            return
        if t.data == "pat_name":
            self.word(c[0], "modality")
            return
        for child in c:
            self.fstmt(child, flow, local)
        if t.data == "repeat_stmt":
            self.expr(c[0])

    def fvalue(self, t, flow: str, local: set[str]) -> None:
        if isinstance(t, Tree) and t.data == "fvalue_name":
            tok = t.children[0]
            if str(tok) in local:
                self.add(tok, "var", flow)
            else:
                self.add(tok, "channel")
            return
        self.fstmt(t, flow, local)

    def var_or_builtin(self, tok, flow: str, local: set[str]) -> None:
        if str(tok) in local:
            self.add(tok, "var", flow)
        else:
            self.word(tok, "builtin")


def index(tree: Tree) -> tuple[list[Occurrence], list[Word]]:
    """Every name occurrence and open word of ``tree``, in source order."""
    ix = _Indexer(tree)
    for item in tree.children:
        if isinstance(item, Tree):
            ix.item(item)
    key = lambda o: (o.line, o.start)  # noqa: E731
    return sorted(ix.occurrences, key=key), sorted(ix.words, key=key)
