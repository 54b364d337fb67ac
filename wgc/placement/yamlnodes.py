"""Small helpers over PyYAML's composed node tree: spans, scalar values, checked mappings.

The loader works on `yaml.compose` nodes rather than `yaml.safe_load` values because nodes keep
their marks, so every diagnostic can point at the exact YAML token (1-based, like `.walk` spans).
Scalars are converted by PyYAML's *safe* constructor only: a placement file never builds objects.
"""

from __future__ import annotations

import yaml
from yaml.constructor import ConstructorError, SafeConstructor

from wgc.diagnostics.diagnostic import Span
from wgc.ir.expr import int_literal

_TAG = "tag:yaml.org,2002:"
_KINDS = {"int": int, "float": float, "bool": bool, "str": str, "null": type(None)}


def span(file: str, node: yaml.Node) -> Span:
    """The node's region. A block collection ends at the start of the next line: clip it."""
    start, end = node.start_mark, node.end_mark
    if end.line > start.line and end.column == 0:
        return Span(file, start.line + 1, start.column + 1, start.line + 1, start.column + 2)
    return Span(file, start.line + 1, start.column + 1, end.line + 1, end.column + 1)


def mark_span(file: str, mark: yaml.Mark | None) -> Span:
    if mark is None:
        return Span(file, 1, 1, 1, 2)
    return Span.point(file, mark.line + 1, mark.column + 1)


def scalar(node: yaml.Node) -> object:
    """The Python value of a scalar node (int, float, bool, str or None)."""
    try:
        value = SafeConstructor().construct_object(node, deep=True)
    except ConstructorError:
        return node.value  # an explicit tag the safe loader does not know: keep the text
    except ValueError:
        # a decimal integer past Python's conversion limit (thousands of digits): far out of
        # the 64-bit range, which the loader reports, so an out-of-range stand-in will do
        text = str(node.value).replace("_", "")
        digits = text.removeprefix("-").removeprefix("+")
        if not (digits.isascii() and digits.isdigit()):
            return node.value
        return -int_literal(digits) if text.startswith("-") else int_literal(digits)
    if value is None or isinstance(value, int | float | str):  # bool is an int
        return value
    # a kind the placement never takes (a date, `!!binary` bytes): the text it was written as,
    # so the reader reports it as the string it reads as, never as a type it did not expect
    return str(node.value)


def kind(node: yaml.Node) -> str:
    """``int``, ``float``, ``bool``, ``str``, ``null``, ``list``, ``mapping`` or the tag."""
    if isinstance(node, yaml.MappingNode):
        return "mapping"
    if isinstance(node, yaml.SequenceNode):
        return "list"
    tag = node.tag.removeprefix(_TAG)
    return tag if tag in _KINDS else "str"


def describe(node: yaml.Node) -> str:
    """How a value reads in a message: ``a list``, ``the string `x` ``, ``the number `3` ``."""
    k = kind(node)
    if k in ("list", "mapping"):
        return f"a {k}"
    if k == "null":
        return "nothing"
    word = {"int": "the integer", "float": "the number", "bool": "the boolean"}.get(k, "`")
    if word == "`":
        return f"`{node.value}`"
    return f"{word} `{node.value}`"
