"""Recognisers for common syntax mistakes, so `WG001` can say what to write instead.

Each rule looks at a `Context`: the unexpected token, what the parser expected (as literal
spellings such as ``"->"`` or ``"max"``, and ``"NAME"``/``"INT"``/... for the other terminals),
the token just before it and the source text before it (to know which declaration the error is
in). The first rule that fits gives the message, label and help; `tests/ui/syntax/` has one UI
test per rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_DECL_WORDS = ("model", "param", "type", "option", "node", "stream", "walk", "flow")
# words that start a statement wherever they appear, so they cannot be used as a name there
_STMT_WORDS = ("par", "loop", "emit", "persist", "for", "match", "fail")

_STRING = re.compile(r'"([^"\\\n]|\\.)*"')
_COMMENT = re.compile(r"#[^\n]*")
_LAST_TOKEN = re.compile(r"(->|=>|[A-Za-z_][A-Za-z0-9_]*|[0-9]+|\S)\s*$")
_DECL_START = re.compile(r"^[ \t]*(" + "|".join(_DECL_WORDS) + r")\b", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Hint:
    message: str | None
    label: str | None
    help: str | None


@dataclass(frozen=True, slots=True)
class Context:
    tok: str  # the unexpected token's text
    tok_type: str  # its terminal name (`NAME`, `LBRACE`, ...)
    expected: frozenset[str]  # literal spellings of the expected terminals, else their names
    before: str  # the source before the token, strings and comments blanked out

    @property
    def prev(self) -> str:
        """The token just before the error (possibly on an earlier line)."""
        m = _LAST_TOKEN.search(self.before)
        return m.group(1) if m else ""

    @property
    def decl(self) -> str | None:
        """The keyword of the declaration the error is in (`node`, `walk`, ...)."""
        found = None
        for m in _DECL_START.finditer(self.before):
            found = m.group(1)
        return found

    @property
    def depth(self) -> int:
        return self.before.count("{") - self.before.count("}")

    def ends_with(self, pattern: str) -> bool:
        return re.search(pattern + r"\s*$", self.before) is not None


def context(tok: str, tok_type: str, expected: set[str], before: str) -> Context:
    """A `Context`, blanking strings and comments in ``before`` so they never look like code."""
    clean = _COMMENT.sub("", _STRING.sub('""', before))
    return Context(tok, tok_type, frozenset(expected), clean)


def describe_expected(expected: list[str]) -> str:
    """`a`, `a or b`, `a, b or c` (at most six shown)."""
    items = expected[:6]
    more = len(expected) - len(items)
    if more > 0:
        items = [*items, f"{more} more"]
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + " or " + items[-1]


def hint_for(ctx: Context) -> Hint | None:
    for rule in _RULES:
        h = rule(ctx)
        if h is not None:
            return h
    return None


# ---------------------------------------------------------------- arrows
def _fat_arrow(c: Context) -> Hint | None:
    if c.tok != "=>" or "->" not in c.expected:
        return None
    if c.decl == "stream":
        return Hint(
            "a stream connects its ports with `->`, not `=>`",
            "use `->` here",
            "write `stream NAME: PRODUCER.port -> CONSUMER.port`",
        )
    return Hint("calls bind their outputs with `->`, not `=>`", "use `->` here", None)


def _thin_arrow_in_match(c: Context) -> Hint | None:
    if c.tok == "->" and "=>" in c.expected:
        return Hint("match arms use `=>`, not `->`", "use `=>` here", None)
    return None


def _arrow_in_flow(c: Context) -> Hint | None:
    if c.tok == "->" and c.decl == "flow":
        return Hint(
            "a walk call in a flow has no outputs",
            "walks do not return values",
            "a walk hands values on with `persist X`; a later walk takes them as an argument: "
            "`next_walk(x = X)`",
        )
    return None


def _parenthesized_outputs(c: Context) -> Hint | None:
    if c.tok == "(" and c.prev == "->":
        return Hint(
            "outputs are listed without parentheses",
            "remove the `(`",
            "write `N(a) -> x, y = port`",
        )
    return None


def _call_inside_outputs(c: Context) -> Hint | None:
    if c.tok == "(" and {"=", ",", "}"} <= c.expected:
        return Hint(
            "a call cannot start inside the previous call's outputs",
            "this call continues the output list above",
            "a `,` at the end of a line continues the output list of the call before it; "
            "remove that trailing `,`",
        )
    return None


# ---------------------------------------------------------------- punctuation
def _colon_for_equals(c: Context) -> Hint | None:
    if c.tok == ":" and c.expected == {"="}:
        return Hint(
            "expected `=`, found `:`",
            "use `=` here",
            "declarations assign with `=`: `param steps = 50`",
        )
    return None


def _colon_in_arguments(c: Context) -> Hint | None:
    if c.tok == ":" and {"=", ")"} <= c.expected:
        return Hint(
            "arguments bind with `=`, not `:`",
            "use `=` here",
            "write `N(port = channel)`, or `N(port)` when the channel has the port's name",
        )
    return None


def _comma_between_items(c: Context) -> Hint | None:
    if c.tok != "," or "}" not in c.expected or "," in c.expected:
        return None
    if c.decl == "node":
        return Hint(
            "node items are not separated by commas",
            "remove this `,`",
            "put each port, `impl`, `label` and `config` on its own line",
        )
    return Hint(
        "statements are not separated by commas",
        "remove this `,`",
        "put each statement (or `par` branch) on its own line",
    )


def _unclosed_paren(c: Context) -> Hint | None:
    if ")" in c.expected and c.expected <= {")", ",", "="}:
        return Hint(
            f"expected `,` or `)`, found `{c.tok}`",
            "the argument list should end before this",
            "close the argument list with `)`",
        )
    return None


def _dims_in_parens(c: Context) -> Hint | None:
    if c.tok == "(" and "[" in c.expected:
        return Hint(
            "dims are written in square brackets",
            "use `[` here",
            "a type is `dtype[dims]`, e.g. `f32[4, N]`; a scalar is `f32[]`",
        )
    return None


# ---------------------------------------------------------------- declarations
def _node_without_engine(c: Context) -> Hint | None:
    if c.expected == {":"} and c.ends_with(r"\bnode\s+\w+"):
        return Hint(
            "a node needs an engine: expected `:`",
            "expected `: ENGINE` here",
            "write `node NAME: stateless { ... }`, `node NAME: kv_cache(labels = [main]) "
            "{ ... }` or `node NAME: like OTHER { ... }`",
        )
    return None


def _option_without_type(c: Context) -> Hint | None:
    if c.expected == {":"} and c.ends_with(r"\boption\s+\w+"):
        return Hint(
            "an option needs a type: expected `:`",
            "expected `: TYPE` here",
            "write `option NAME: bool = false` (types: `bool`, `int`, `float`, `str`)",
        )
    return None


def _missing_port_type(c: Context) -> Hint | None:
    if c.expected == {":"} and c.ends_with(r"\b(in|out)\s+\w+"):
        return Hint(
            "expected `:` and a type",
            "expected `: TYPE` here",
            "ports are declared as `in NAME: dtype[dims]`, e.g. `in tokens: i64[T]`",
        )
    return None


def _missing_type_after_colon(c: Context) -> Hint | None:
    if c.prev == ":" and "NAME" in c.expected and c.tok in (")", ",", "}", "=", "[", "?"):
        return Hint(
            "expected a type after `:`",
            "expected a type here",
            "write a type such as `f32[4, N]`, `i64[]`, or the name of a `type`",
        )
    return None


def _impl_without_string(c: Context) -> Hint | None:
    if c.prev == "impl" and c.tok_type != "STRING":
        return Hint(
            "`impl` takes a quoted `module:Class` path",
            "expected a string here",
            'write `impl "package.module:Class"`',
        )
    return None


def _top_level(c: Context) -> Hint | None:
    if "node" in c.expected and "walk" in c.expected and c.depth <= 0:
        if c.tok in _DECL_WORDS:
            return None
        return Hint(
            f"expected a declaration, found `{c.tok}`",
            "not a declaration",
            "a file is a sequence of `model`, `param`, `type`, `option`, `node`, `stream`, "
            "`walk` and `flow` declarations",
        )
    return None


# ---------------------------------------------------------------- walks and flows
def _loop_without_max(c: Context) -> Hint | None:
    if c.expected == {"max"}:
        return Hint(
            "a loop needs a static bound: expected `max`",
            "expected `max` here",
            "write `loop NAME max N { ... }`; `N` is an integer or a `param` expression",
        )
    return None


def _emit_without_as(c: Context) -> Hint | None:
    if c.expected == {"as"}:
        return Hint(
            "`emit` needs a modality: expected `as`",
            "expected `as MODALITY` here",
            "write `emit CHANNEL as text` (modalities: text image audio video action tensor)",
        )
    return None


def _yield_inside_body(c: Context) -> Hint | None:
    if c.prev == "yield" and c.tok in ("last", "all"):
        return Hint(
            "`yield` goes after the loop body, not inside it",
            "inside the loop body",
            "write `loop NAME max N { ... } yield last x`: the yield follows the closing `}`",
        )
    return None


def _until_comparison(c: Context) -> Hint | None:
    if c.tok[:1] in ("=", "<", ">", "!") and c.ends_with(r"\buntil\s+\w+"):
        return Hint(
            "`until` takes a `bool[]` channel, not a comparison",
            "not allowed after `until`",
            "bind a `bool[]` channel in the loop body (e.g. `-> stop`) and write `until stop`",
        )
    return None


def _equality_in_condition(c: Context) -> Hint | None:
    if c.tok[:1] in ("=", "<", ">", "!") and "{" in c.expected and ({"or", "and"} & c.expected):
        return Hint(
            "only an option or a segment count can be compared in a condition",
            "not allowed here",
            "compare `option.NAME == VALUE` or `request.count(m) >= N`; `request.wants(m)`, "
            "`request.has(m)`, a bool `option.NAME` and `placed(NODE)` are conditions "
            "themselves, combined with `not`, `and`, `or`",
        )
    return None


def _elif(c: Context) -> Hint | None:
    if c.prev == "elif":
        return Hint("write `else if`, not `elif`", None, "`if C { ... } else if D { ... }`")
    return None


def _statement_word_as_name(c: Context) -> Hint | None:
    if c.prev in _STMT_WORDS and c.tok in ("(", "=", "->", ","):
        return Hint(
            f"`{c.prev}` is a keyword and cannot be used as a name here",
            None,
            f"rename the node or channel, e.g. `{c.prev}_`",
        )
    return None


_RULES = (
    _fat_arrow,
    _thin_arrow_in_match,
    _arrow_in_flow,
    _parenthesized_outputs,
    _call_inside_outputs,
    _colon_for_equals,
    _colon_in_arguments,
    _loop_without_max,
    _emit_without_as,
    _yield_inside_body,
    _elif,
    _statement_word_as_name,
    _comma_between_items,
    _until_comparison,
    _equality_in_condition,
    _node_without_engine,
    _option_without_type,
    _missing_port_type,
    _missing_type_after_colon,
    _impl_without_string,
    _dims_in_parens,
    _unclosed_paren,
    _top_level,
)
