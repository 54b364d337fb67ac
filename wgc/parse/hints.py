"""Recognisers for common syntax mistakes, so `WG001` can say what to write instead.

Each rule looks at the unexpected token, what the parser expected (terminal names) and the word
just before the error; the first rule that fits gives the message, label and help.
"""

from __future__ import annotations

from dataclasses import dataclass

_DECL_WORDS = ("model", "param", "type", "option", "node", "stream", "walk", "flow")


@dataclass(frozen=True, slots=True)
class Hint:
    message: str | None
    label: str | None
    help: str | None


def describe_expected(expected: list[str]) -> str:
    """`a`, `a or b`, `a, b or c` (at most six shown)."""
    items = expected[:6]
    more = len(expected) - len(items)
    if more > 0:
        items = [*items, f"{more} more"]
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + " or " + items[-1]


def hint_for(tok: str, tok_type: str, expected: set[str], prev: str) -> Hint | None:
    for rule in _RULES:
        h = rule(tok, tok_type, expected, prev)
        if h is not None:
            return h
    return None


def _top_level(tok, tok_type, expected, prev):
    if "NODE" in expected and "WALK" in expected and tok not in _DECL_WORDS:
        return Hint(
            f"expected a declaration, found `{tok}`",
            "not a declaration",
            "a file is a sequence of `model`, `param`, `type`, `option`, `node`, `stream`, "
            "`walk` and `flow` declarations",
        )
    return None


def _fat_arrow_in_call(tok, tok_type, expected, prev):
    if tok == "=>" and "__ANON_0" in expected:
        return Hint("calls bind their outputs with `->`, not `=>`", "use `->` here", None)
    return None


def _thin_arrow_in_match(tok, tok_type, expected, prev):
    if tok == "->" and "__ANON_1" in expected:
        return Hint("match arms use `=>`, not `->`", "use `=>` here", None)
    return None


def _colon_for_equals(tok, tok_type, expected, prev):
    if tok == ":" and expected == {"EQUAL"}:
        return Hint(
            "expected `=`, found `:`",
            "use `=` here",
            "declarations assign with `=`: `param steps = 50`",
        )
    return None


def _loop_without_max(tok, tok_type, expected, prev):
    if expected == {"MAX"}:
        return Hint(
            "a loop needs a static bound: expected `max`",
            "expected `max` here",
            "write `loop NAME max N { ... }`; `N` is an integer or a `param` expression",
        )
    return None


def _emit_without_as(tok, tok_type, expected, prev):
    if expected == {"AS"}:
        return Hint(
            "`emit` needs a modality: expected `as`",
            "expected `as MODALITY` here",
            "write `emit CHANNEL as text` (modalities: text image audio video action tensor)",
        )
    return None


def _comma_between_statements(tok, tok_type, expected, prev):
    if tok == "," and "RBRACE" in expected and "COMMA" not in expected:
        return Hint(
            "statements are not separated by commas",
            "remove this `,`",
            "put each statement (or `par` branch) on its own line",
        )
    return None


def _equality_in_condition(tok, tok_type, expected, prev):
    if tok in ("==", "=") and "LBRACE" in expected and ("OR" in expected or "AND" in expected):
        return Hint(
            "conditions do not compare values",
            "not allowed in a condition",
            "conditions are `request.wants(m)`, `request.has(m)`, a bool `option.NAME`, "
            "`placed(NODE)`, combined with `not`, `and`, `or`",
        )
    return None


def _keyword_as_name(tok, tok_type, expected, prev):
    if "NAME" in expected and tok_type not in ("NAME", "$END") and tok.isidentifier():
        return Hint(
            f"`{tok}` is a keyword here and cannot be used as a name",
            "keyword",
            f"rename it, e.g. `{tok}_`",
        )
    return None


def _missing_port_type(tok, tok_type, expected, prev):
    if expected == {"COLON"} and prev and prev.isidentifier():
        return Hint(
            "expected `:` and a type",
            "expected `: TYPE` here",
            "ports are declared as `in NAME: dtype[dims]`, e.g. `in tokens: i64[T]`",
        )
    return None


def _unclosed_paren(tok, tok_type, expected, prev):
    if expected <= {"RPAR", "COMMA"} and "RPAR" in expected:
        return Hint(
            f"expected `,` or `)`, found `{tok}`",
            "the argument list should end before this",
            "close the argument list with `)`",
        )
    return None


_RULES = (
    _fat_arrow_in_call,
    _thin_arrow_in_match,
    _colon_for_equals,
    _loop_without_max,
    _emit_without_as,
    _comma_between_statements,
    _equality_in_condition,
    _missing_port_type,
    _unclosed_paren,
    _top_level,
    _keyword_as_name,
)
