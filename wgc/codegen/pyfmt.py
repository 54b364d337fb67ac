"""A tiny pretty printer for Python expressions, producing what `ruff format` would.

Generated code must pass ``ruff format --check`` without running ruff. Expressions are built as
documents (`Atom`, `Seq`) and laid out with one rule, which ruff keeps as is: a bracketed
sequence goes on one line when it fits in the line width, otherwise one item per line with a
trailing comma (a "magic" trailing comma, so ruff never joins it back). A sequence with comments
among its items (provenance) is always split.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

WIDTH = 100
INDENT = "    "


@dataclass(frozen=True, slots=True)
class Atom:
    """Text that is never split (a literal, a name)."""

    text: str


@dataclass(frozen=True, slots=True)
class Item:
    """One entry of a sequence: ``key`` + ``sep`` + value (``sep`` is ``=`` or ``: ``)."""

    value: Doc
    key: str | None = None
    sep: str = "="
    comments: tuple[str, ...] = ()  # own-line comments above the item, without the "# "


@dataclass(frozen=True, slots=True)
class Seq:
    """A bracketed, comma-separated sequence: a call ``Name(...)``, a tuple or a dict."""

    open: str
    close: str
    items: tuple[Item, ...] = field(default=())
    one_tuple: bool = False  # a one-item tuple keeps its comma on one line

    @property
    def has_comments(self) -> bool:
        return any(it.comments or _has_comments(it.value) for it in self.items)


Doc = Atom | Seq


def _has_comments(doc: Doc) -> bool:
    return isinstance(doc, Seq) and doc.has_comments


# ---------------------------------------------------------------- constructors


def string(s: str) -> Atom:
    """A Python string literal, quoted the way ruff prefers (double, unless that needs escapes)."""
    quote = "'" if '"' in s and "'" not in s else '"'
    out = []
    for ch in s:
        if ch == "\\":
            out.append("\\\\")
        elif ch == quote:
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        elif 0xD800 <= ord(ch) < 0xE000:
            # a lone surrogate (a file name byte that is not UTF-8, as Python decodes it): the
            # module is written as UTF-8, which cannot hold one, so it goes as its escape
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return Atom(quote + "".join(out) + quote)


def comment_text(text: str) -> str:
    """``text`` safe inside a ``#`` comment (or a docstring): every character Python would not
    print (line breaks of any kind, other control and format characters) as an escape, so text
    from a user (a file name, a name) can never end the comment and become code."""
    if text.isprintable():
        return text
    out = []
    for ch in text:
        if ch.isprintable():
            out.append(ch)
        elif ch == "\n":
            out.append("\\n")
        elif ord(ch) < 0x100:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) < 0x10000:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    return "".join(out)


def literal(v: object) -> Doc:
    """A Python literal for a str, int, float, bool, None, or (nested) tuple of those."""
    if isinstance(v, str):
        return string(v)
    if v is None or isinstance(v, bool | int):
        return Atom(repr(v))
    if isinstance(v, float):
        return Atom(_float(v))
    if isinstance(v, tuple | list):
        return tuple_([literal(x) for x in v])
    raise TypeError(f"no Python literal for {type(v).__name__}: {v!r}")


def _float(v: float) -> str:
    text = repr(v)
    if text in ("inf", "-inf", "nan"):
        return f'float("{text}")'
    return text


def call(name: str, args: Sequence[Doc] = (), kwargs: Sequence[tuple[str, Doc]] = ()) -> Seq:
    items = [Item(a) for a in args] + [Item(v, k, "=") for k, v in kwargs]
    return Seq(f"{name}(", ")", tuple(items))


def tuple_(docs: Sequence[Doc], comments: Sequence[Sequence[str]] | None = None) -> Seq:
    notes = comments or [()] * len(docs)
    items = tuple(Item(d, comments=tuple(c)) for d, c in zip(docs, notes, strict=True))
    return Seq("(", ")", items, one_tuple=len(items) == 1)


def dict_(pairs: Sequence[tuple[Doc, Doc]]) -> Seq:
    items = []
    for k, v in pairs:
        assert isinstance(k, Atom), "dict keys are atoms"
        items.append(Item(v, k.text, ": "))
    return Seq("{", "}", tuple(items))


# ---------------------------------------------------------------- layout


def flat(doc: Doc) -> str:
    """``doc`` on one line."""
    if isinstance(doc, Atom):
        return doc.text
    parts = [f"{it.key}{it.sep}{flat(it.value)}" if it.key else flat(it.value) for it in doc.items]
    body = ", ".join(parts) + ("," if doc.one_tuple else "")
    return doc.open + body + doc.close


def layout(doc: Doc, col: int, indent: int, trailer: int = 0) -> str:
    """``doc`` starting at column ``col`` of a line indented ``indent`` levels, followed by
    ``trailer`` more characters on its last line. Continuation lines carry their indentation;
    the first line does not (the caller has written what precedes it)."""
    text = flat(doc)
    if isinstance(doc, Atom) or (col + len(text) + trailer <= WIDTH and not _has_comments(doc)):
        return text
    if not doc.items:
        return text
    inner = INDENT * (indent + 1)
    lines = [doc.open]
    for it in doc.items:
        lines += [f"{inner}# {c}" if c else f"{inner}#" for c in it.comments]
        head = f"{it.key}{it.sep}" if it.key else ""
        value = layout(it.value, len(inner) + len(head), indent + 1, trailer=1)
        lines.append(f"{inner}{head}{value},")
    lines.append(INDENT * indent + doc.close)
    return "\n".join(lines)


def statement(prefix: str, doc: Doc, indent: int) -> str:
    """A statement line ``prefix`` + ``doc`` at ``indent`` levels, fully indented."""
    pad = INDENT * indent
    return pad + prefix + layout(doc, len(pad) + len(prefix), indent)
