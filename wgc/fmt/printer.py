"""The parse tree printed as canonical `Line`s (comments and blank lines are `layout`'s job).

Every printed line records the source lines it came from, so `layout` can put each comment back
next to the code it was written beside. Printing never reorders anything that the IR keeps in
order; it only drops what the IR cannot see (a binding `a = a` is `a`, a one-statement `{ }`
branch is its statement, repeated loop modifiers are one, `yield` clauses are merged).
"""

from __future__ import annotations

from collections.abc import Callable

from lark import Token, Tree

from wgc.fmt import exprs
from wgc.fmt.layout import INDENT, LIMIT, Line

_LOOP_MODS = ("until", "eager", "nospeculate")
_SIMPLE_FSTMTS = ("walk_call", "fail_stmt")
_SIMPLE_STMTS = ("call", "emit", "persist")


def _lines_of(t: Tree | Token) -> tuple[int, int]:
    if isinstance(t, Token):
        return t.line or 0, t.end_line or t.line or 0
    return t.meta.line, t.meta.end_line


def _end_pos(child: Tree | Token) -> int:
    """The end offset of a child the grammar makes a token (a name); the lexer sets it."""
    assert isinstance(child, Token) and child.end_pos is not None, child
    return child.end_pos


def _present(children) -> list:
    return [c for c in children if c is not None]


def fit(depth: int, head: str, items: list[str], tail: str) -> str:
    """``head`` + ``items`` joined by `, ` + ``tail``; wrapped after commas past `LIMIT` columns,
    continuation rows aligned just after ``head`` (which ends in `(`)."""
    base = len(INDENT) * depth
    one = head + ", ".join(items) + tail
    if base + len(one) <= LIMIT or len(items) < 2:
        return one
    rows: list[str] = []
    row = head
    for i, item in enumerate(items):
        piece = item + ("," if i < len(items) - 1 else tail)
        if i and base + len(row) + 1 + len(piece) > LIMIT:
            rows.append(row)
            row = " " * len(head) + piece
        else:
            row += (" " if i else "") + piece
    rows.append(row)
    return "\n".join(rows)


class Printer:
    def __init__(self, source: str) -> None:
        self.source = source
        self.lines: list[Line] = []

    # ------------------------------------------------------------------ helpers
    def emit(self, depth: int, text: str, start: int, end: int, **kw) -> Line:
        line = Line(depth, text, start, end, **kw)
        self.lines.append(line)
        return line

    def brace_line(self, pos: int) -> int:
        """Line of the first `{` at or after offset ``pos``, skipping comments."""
        s, i = self.source, pos
        while i < len(s) and s[i] != "{":
            if s[i] == "#":
                nl = s.find("\n", i)
                i = len(s) if nl < 0 else nl
            i += 1
        return s.count("\n", 0, i) + 1

    @staticmethod
    def inline(depth: int, head: str, items: list, one_line: bool, simple) -> str | None:
        """``head { item }`` on one line, when the source wrote it so and it is short and simple."""
        if not one_line or len(items) > 1:
            return None
        text = simple(items[0]) if items else ""
        if text is None:
            return None
        line = f"{head} {text} }}" if text else f"{head}}}"
        return line if len(INDENT) * depth + len(line) <= LIMIT else None

    # ------------------------------------------------------------------ declarations
    def file(self, tree: Tree) -> list[Line]:
        prev: tuple[str, bool] | None = None
        for decl in tree.children:
            first = len(self.lines)
            getattr(self, decl.data)(decl)
            one_line = len(self.lines) == first + 1 and "\n" not in self.lines[first].text
            if prev is not None:
                # consecutive one-line declarations of one kind stay grouped
                grouped = prev == (decl.data, True) and one_line
                self.lines[first].sep = "keep" if grouped else "one"
            prev = (decl.data, one_line)
        return self.lines

    def model_decl(self, t: Tree) -> None:
        self.emit(0, f"model {t.children[0]}", *_lines_of(t))

    def param_decl(self, t: Tree) -> None:
        self.emit(0, f"param {t.children[0]} = {exprs.value(t.children[1])}", *_lines_of(t))

    def type_decl(self, t: Tree) -> None:
        name, te = t.children
        if te.data == "tensor_type":  # a long list of dims wraps after a comma
            dims = [exprs.dim(d) for d in te.children[1:] if d is not None]
            text = fit(0, f"type {name} = {te.children[0]}[", dims, "]")
        else:
            text = f"type {name} = {exprs.type_expr(te)}"
        self.emit(0, text, *_lines_of(t))

    def option_decl(self, t: Tree) -> None:
        name, typ, choices, default = t.children
        head = f"option {name}: {typ}"
        if choices is not None:
            head = fit(0, f"{head} in [", [exprs.value(c) for c in choices.children], "]")
        if isinstance(default, Tree) and default.data == "default_match":
            sel, *arms = default.children
            items = [
                f"{exprs.pattern(a.children[0])} => {exprs.value(a.children[1])}"
                for a in _present(arms)
            ]
            text = fit(0, f"{head} = match option.{sel} {{ ", items, " }")
        else:
            text = f"{head} = {exprs.value(default)}"
        self.emit(0, text, *_lines_of(t))

    def node_decl(self, t: Tree) -> None:
        name, engine, *items = t.children
        start, end = _lines_of(t)
        brace = self.brace_line(_end_pos(name))
        head = f"node {name}: {_engine(engine)} {{"
        short = self.inline(0, head, items, brace == end, _short_node_item)
        if short is not None:
            self.emit(0, short, start, end)
            return
        self.emit(0, head, start, brace, opens=True)
        ports = [i for i in items if i.data in ("in_port", "out_port")]
        width = max((len(str(p.children[0])) for p in ports), default=0) + 1
        for item in items:
            self.emit(1, _node_item(item, width), *_lines_of(item))
        self.emit(0, "}", end, end, closes=True)

    def stream_decl(self, t: Tree) -> None:
        name, producer, consumer, *opts = t.children
        head = f"stream {name}: {_port_ref(producer)} -> {_port_ref(consumer)}"
        self.emit(0, head, t.meta.line, consumer.meta.end_line)
        for opt in opts:
            self.emit(1, _stream_opt(opt), *_lines_of(opt), sep="zero")

    def walk_decl(self, t: Tree) -> None:
        name, *params, body = t.children
        head = fit(0, f"walk {name}(", [_walk_param(p) for p in _present(params)], ") {")
        self.block(0, head, t.meta.line, body, self.stmt, simple=_simple_stmt)

    def subflow_decl(self, t: Tree) -> None:
        name, *params, body = t.children
        head = fit(0, f"subflow {name}(", [str(p) for p in _present(params)], ") {")
        self.block(0, head, t.meta.line, body, self.fstmt, simple=_simple_fstmt)

    def flow_decl(self, t: Tree) -> None:
        name, trigger, body = t.children
        head = f"flow {name}"
        if trigger is not None:
            head += (
                f" when {exprs.cond(trigger.children[0])}"
                if trigger.data == "when"
                else f" on {trigger.children[0]}"
            )
        if body.data == "flow_extern":
            self.emit(0, f"{head} = {exprs.quote(str(body.children[0]))}", *_lines_of(t))
            return
        self.block(0, head + " {", t.meta.line, body, self.fstmt, simple=_simple_fstmt)

    # ------------------------------------------------------------------ blocks
    def block(
        self,
        depth: int,
        head: str,
        start: int,
        body: Tree,
        each: Callable,
        close: str = "}",
        simple: Callable | None = None,
    ) -> Line:
        """``head`` (ending in `{`), ``body``'s statements one level in, and ``close``.

        With ``simple``, a body the source wrote on one line with at most one simple statement
        stays on one line. Returns the closing line."""
        if simple is not None and close == "}":
            one_line = body.meta.line == body.meta.end_line
            short = self.inline(depth, head, body.children, one_line, simple)
            if short is not None:
                return self.emit(depth, short, start, body.meta.end_line)
        self.emit(depth, head, start, body.meta.line, opens=True)
        for s in body.children:
            each(depth + 1, s)
        end = body.meta.end_line
        return self.emit(depth, close, end, end, closes=True)

    # ------------------------------------------------------------------ walk statements
    def stmt(self, depth: int, t: Tree) -> None:
        d = t.data
        if d == "par":
            self.par(depth, t)
        elif d == "loop":
            self.loop(depth, t)
        elif d == "block":  # a `par` branch of several statements (or none)
            self.block(depth, "{", t.meta.line, t, self.stmt)
        else:
            self.emit(depth, _stmt_text(_simple_stmt(t, depth), t), *_lines_of(t))

    def par(self, depth: int, t: Tree) -> None:
        start, end = _lines_of(t)
        self.emit(depth, "par {", start, self.brace_line(t.meta.start_pos), opens=True)
        branches = [
            b.children[0] if b.data == "block" and len(b.children) == 1 else b  # `{ s }` is `s`
            for b in t.children
        ]
        # the `->` of one-line call branches line up, to show the parallel structure
        heads = [_call_head(b) for b in branches if b.data == "call" and _outs(b)]
        width = max((len(h) for h in heads if "\n" not in h), default=0)
        for branch in branches:
            if branch.data == "call":
                text = _stmt_text(_simple_stmt(branch, depth + 1, width), branch)
                self.emit(depth + 1, text, *_lines_of(branch))
            else:
                self.stmt(depth + 1, branch)
        self.emit(depth, "}", end, end, closes=True)

    def loop(self, depth: int, t: Tree) -> None:
        name, max_expr, *rest = t.children
        body = next(c for c in rest if c.data == "block")
        head = f"loop {name} max {exprs.expr(max_expr)}"
        for kind in _LOOP_MODS:
            found = [m for m in rest if m.data == kind]
            if found:  # `until` keeps the last one, as the IR does
                head += f" until {found[-1].children[0]}" if kind == "until" else f" {kind}"
        close = "}"
        for kind, word in (("yield_last", "last"), ("yield_all", "all")):
            names = [str(n) for y in rest if y.data == kind for n in y.children]
            if names:
                close += f" yield {word} {', '.join(names)}"
        closer = self.block(depth, head + " {", t.meta.line, body, self.stmt, close)
        closer.end = t.meta.end_line

    # ------------------------------------------------------------------ flow statements
    def fstmt(self, depth: int, t: Tree, prefix: str = "") -> None:
        d = t.data
        simple = _simple_fstmt
        if d == "for_stmt":
            var, obj, attr, body = t.children
            head = f"{prefix}for {var} in {obj}.{attr} {{"
            self.block(depth, head, t.meta.line, body, self.fstmt, simple=simple)
        elif d == "match_stmt":
            self.match(depth, t, prefix)
        elif d == "if_stmt":
            self.if_stmt(depth, t, prefix)
        elif d == "repeat_stmt":
            count, body = t.children
            head = f"{prefix}repeat {exprs.expr(count)} {{"
            self.block(depth, head, t.meta.line, body, self.fstmt, simple=simple)
        elif d == "fblock":  # an arm body (`p => {}` stays on one line)
            self.block(depth, prefix + "{", t.meta.line, t, self.fstmt, simple=_simple_fstmt)
        else:
            self.emit(depth, _stmt_text(_simple_fstmt(t, depth, prefix), t), *_lines_of(t))

    def match(self, depth: int, t: Tree, prefix: str) -> None:
        subject, *arms = t.children
        start, end = _lines_of(t)
        if subject.data == "match_option":
            head = f"{prefix}match option.{subject.children[0]} {{"
            last = subject.children[0]
        else:
            head = f"{prefix}match {subject.children[0]}.{subject.children[1]} {{"
            last = subject.children[1]
        self.emit(depth, head, start, self.brace_line(_end_pos(last)), opens=True)
        pats = [exprs.pattern(arm.children[0]) for arm in arms]
        width = max((len(p) for p in pats), default=0)
        for arm, pat in zip(arms, pats, strict=True):
            first = len(self.lines)
            self.fstmt(depth + 1, _arm_body(arm.children[1]), f"{pat.ljust(width)} => ")
            # the arm's first printed line also covers its pattern's source line
            self.lines[first].start = min(self.lines[first].start, arm.meta.line)
        self.emit(depth, "}", end, end, closes=True)

    def if_stmt(self, depth: int, t: Tree, prefix: str) -> None:
        cond, then, *rest = t.children
        other = rest[0] if rest else None
        head = f"{prefix}if {exprs.cond(cond)} {{"
        if (
            other is not None
            and other.data == "fblock"
            and len(other.children) == 1
            and other.children[0].data == "if_stmt"
        ):
            other = other.children[0]  # `else { if ... }` is `else if ...`
        # an `else if` continues a multi-line chain, so it is never shortened
        if not prefix.startswith("}") and self._short_if(depth, head, then, other, t):
            return
        closer = self.block(depth, head, t.meta.line, then, self.fstmt)
        if other is None:
            return
        if other.data == "if_stmt":
            self.lines.pop()
            first = len(self.lines)
            self.if_stmt(depth, other, "} else ")
            self.lines[first].start, self.lines[first].closes = closer.start, True
            return
        closer.text, closer.opens, closer.end = "} else {", True, other.meta.line
        for s in other.children:
            self.fstmt(depth + 1, s)
        self.emit(depth, "}", other.meta.end_line, other.meta.end_line, closes=True)

    def _short_if(self, depth: int, head: str, then: Tree, other: Tree | None, t: Tree) -> bool:
        """`if c { a() }` and `if c { a() } else { b() }`, kept on one line as written."""
        if other is not None and other.data != "fblock":
            return False
        text = self.inline(
            depth, head, then.children, then.meta.line == then.meta.end_line, _simple_fstmt
        )
        if text is not None and other is not None:
            rest = self.inline(
                depth,
                text + " else {",
                other.children,
                other.meta.line == other.meta.end_line == then.meta.end_line,
                _simple_fstmt,
            )
            text = rest
        if text is None:
            return False
        self.emit(depth, text, *_lines_of(t))
        return True


# ---------------------------------------------------------------------- one-line pieces
def _arm_body(body: Tree) -> Tree:
    """An arm's body is one simple statement on the arm's line, or a block."""
    if body.data == "fblock" and len(body.children) == 1:
        if body.children[0].data in _SIMPLE_FSTMTS:
            return body.children[0]
        return body
    if body.data in _SIMPLE_FSTMTS or body.data == "fblock":
        return body
    return Tree("fblock", [body], body.meta)  # `p => if ...` is `p => { if ... }`


def _engine(t: Tree) -> str:
    if t.data == "stateless":
        return "stateless"
    if t.data == "like":
        return f"like {t.children[0]}"
    args = _present(t.children)
    if not args:
        return "kv_cache"
    parts = [
        f"{a.children[0]} = [{', '.join(str(n) for n in _present(a.children[1:]))}]" for a in args
    ]
    return f"kv_cache({', '.join(parts)})"


def _node_item(t: Tree, width: int) -> str:
    d = t.data
    if d == "impl":
        return f"impl {exprs.quote(str(t.children[0]))}"
    if d in ("in_port", "out_port"):
        name, typ = t.children
        word = "in " if d == "in_port" else "out"
        return f"{word} {(str(name) + ':').ljust(width)} {exprs.type_expr(typ)}"
    if d == "label":
        writable = " writable" if len(t.children) > 1 and t.children[1] is not None else ""
        return f"label {t.children[0]}{writable}"
    if d == "reads":
        return "reads " + ", ".join(f"option.{n}" for n in t.children)
    name, value = t.children  # config
    return f"config {name} = {exprs.value(value)}"


def _short_node_item(t: Tree) -> str | None:
    return None if t.data in ("in_port", "out_port") else _node_item(t, 0)


def _port_ref(t: Tree) -> str:
    return f"{t.children[0]}.{t.children[1]}"


def _stream_opt(t: Tree) -> str:
    if t.data == "chunk":
        name, *args = t.children
        return f"chunk {name}({', '.join(_policy_arg(a) for a in _present(args))})"
    return f"{t.data} {t.children[0]}"  # final, after_done


def _policy_arg(t: Tree) -> str:
    name, value = t.children
    return exprs.expr(value) if name is None else f"{name} = {exprs.expr(value)}"


def _walk_param(t: Tree) -> str:
    name, qmark, typ = t.children
    text = f"{name}{'?' if qmark is not None else ''}"
    return text if typ is None else f"{text}: {exprs.type_expr(typ)}"


def _binding(t: Tree) -> str:
    a, b = t.children
    return str(a) if b is None or str(b) == str(a) else f"{a} = {b}"


def _outs(t: Tree) -> list[str]:
    return [_binding(c) for c in _present(t.children[1:]) if c.data == "out"]


def _call_head(t: Tree, depth: int = 0, tail: str = ")") -> str:
    """`N(a, b = c)` + ``tail``, wrapped if long."""
    args = [_binding(c) for c in _present(t.children[1:]) if c.data == "arg"]
    return fit(depth, f"{t.children[0]}(", args, tail)


def _stmt_text(text: str | None, t: Tree) -> str:
    """The one-line text of a statement the printer has no block form for: every such statement
    of the grammar has a simple form, so None here is a printer bug."""
    assert text is not None, f"no printed form for `{t.data}`"
    return text


def _simple_stmt(t: Tree, depth: int = 0, arrow: int = 0) -> str | None:
    """A one-line statement; a call's `->` is put at column ``arrow`` when it fits on one line."""
    d = t.data
    if d == "call":
        outs = _outs(t)
        if not outs:
            return _call_head(t, depth)
        head = _call_head(t, depth)
        if "\n" not in head:
            return f"{head.ljust(arrow)} -> {', '.join(outs)}"
        return _call_head(t, depth, f") -> {', '.join(outs)}")
    if d == "emit":
        return f"emit {t.children[0]} as {t.children[1]}"
    if d == "persist":
        return "persist " + ", ".join(str(c) for c in t.children)
    return None


def _simple_fstmt(t: Tree, depth: int = 0, prefix: str = "") -> str | None:
    if t.data == "fail_stmt":
        return f"{prefix}fail {exprs.quote(str(t.children[0]))}"
    if t.data != "walk_call":
        return None
    name, *args = t.children
    return fit(depth, f"{prefix}{name}(", [_farg(a) for a in _present(args)], ")")


def _farg(t: Tree) -> str:
    name, v = t.children
    if v is None:
        return str(name)
    if v.data == "fvalue_name":
        return str(name) if str(v.children[0]) == str(name) else f"{name} = {v.children[0]}"
    if v.data == "fvalue_option":
        return f"{name} = option.{v.children[0]}"
    if v.data == "fvalue_select":
        obj, fn, arg = v.children
        return f"{name} = {obj}.{fn}({arg})"
    return f"{name} = {v.children[0]}.{v.children[1]}"
