"""The `.walk` parser: one lark LALR parser per `Parser`, friendly syntax diagnostics.

Owns: loading the grammar (once per `Parser`), collecting comments for `wgc fmt`, and turning
lark's exceptions into `WG001`-`WG003` diagnostics that say what was expected in words and
recognise the common mistakes; a tree nested past the limits of `wgc.parse.depth` is WG012,
reported here so that nothing recursive ever sees it (`wgc fmt` included); a file past
`MAX_SOURCE_CHARS` is WG010 before it is lexed.

Building the LALR tables takes ~0.3 s; lark keeps them in a cache file (`grammar_cache`: in the
user's own cache folder, mode 0700, named by the lark version; lark checks the grammar's and the
options' hash inside it and rebuilds on a mismatch), so a `Parser` after the first loads in
~10 ms. The cache is only used from a folder only this user can write (the file is a pickle);
without one the tables are built every time.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

import lark
from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from wgc.diagnostics.diagnostic import Diagnostic, Label, Span, diag, source_lines
from wgc.parse.depth import too_deep
from wgc.parse.grammar import grammar_text
from wgc.parse.hints import context, describe_expected, hint_for

# Terminals whose meaning is clearer in words than as a regular expression.
_WORDS = {
    "NAME": "a name",
    "INT": "an integer",
    "FLOAT": "a number",
    "STRING": 'a string ("...")',
    "QMARK": "`?`",
    "$END": "end of file",
}


# The largest source file wgc reads (~40,000 node declarations; the lexer and parser run at
# ~0.2-1 MB/s, so a 50 MB file would take minutes): larger is WG010, before lexing.
MAX_SOURCE_CHARS = 4_000_000


def too_large(file: str, size: int) -> Diagnostic:
    """WG010 for a source or placement file of ``size`` characters, past `MAX_SOURCE_CHARS`."""
    return diag(
        "WG010",
        f"cannot read `{file}`: {size:,} characters, past the {MAX_SOURCE_CHARS:,} wgc reads",
        Span(file, 0, 0, 0, 0),
        help="split the model, or generate a smaller one: no model needs a file this large",
    )


@dataclass(frozen=True, slots=True)
class Comment:
    line: int
    col: int
    text: str  # including the leading `#`
    own_line: bool  # nothing but whitespace before it on its line


@dataclass(frozen=True, slots=True)
class ParseResult:
    tree: Tree | None
    comments: tuple[Comment, ...]
    diagnostics: tuple[Diagnostic, ...]


def grammar_cache() -> str | bool:
    """Where lark may cache the parse tables: a file in ``$XDG_CACHE_HOME/wgc`` (default
    ``~/.cache/wgc``) when that folder is this user's and nobody else can write it; else False
    (no cache)."""
    try:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "wgc"
        base.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = base.stat()
        if st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return False
    except (OSError, RuntimeError, AttributeError):  # no home, read-only, no getuid (Windows)
        return False
    return str(base / f"grammar-lark{lark.__version__}.cache")


class Parser:
    """Parses `.walk` source. Build one and reuse it: the grammar is compiled once."""

    def __init__(self) -> None:
        self._comments: list[Token] = []
        self._lark = Lark(
            grammar_text(),
            parser="lalr",
            strict=True,
            propagate_positions=True,
            maybe_placeholders=True,
            lexer_callbacks={"COMMENT": self._comments.append},
            cache=grammar_cache(),
        )
        self._names = {t.name: self._describe_terminal(t) for t in self._lark.terminals}
        # hints match expected terminals by spelling (`->`, `max`), not by lark's names
        self._spelling = {
            t.name: t.pattern.value if t.pattern.type == "str" else t.name
            for t in self._lark.terminals
        }

    @staticmethod
    def _describe_terminal(t) -> str:
        if t.name in _WORDS:
            return _WORDS[t.name]
        if t.pattern.type == "str":
            return f"`{t.pattern.value}`"
        return t.name.lower()

    def parse(self, text: str, file: str) -> ParseResult:
        if len(text) > MAX_SOURCE_CHARS:
            return ParseResult(None, (), (too_large(file, len(text)),))
        self._comments.clear()
        try:
            tree = self._lark.parse(text)
        except UnexpectedInput as exc:
            return ParseResult(None, (), (self._syntax_error(exc, text, file),))
        deep = too_deep(tree, file)  # before anything walks the tree recursively
        if deep is not None:
            return ParseResult(None, (), (deep,))
        lines = source_lines(text)
        comments = tuple(_comment(c, lines) for c in self._comments)
        return ParseResult(tree, comments, ())

    # ------------------------------------------------------------------ syntax errors
    def _syntax_error(self, exc: UnexpectedInput, text: str, file: str) -> Diagnostic:
        lines = source_lines(text) or [""]
        if isinstance(exc, UnexpectedCharacters):
            ch = text[exc.pos_in_stream] if exc.pos_in_stream < len(text) else "?"
            span = Span(file, exc.line, exc.column, exc.line, exc.column + 1)
            msg, help_ = hint_for_char(ch)
            label = "the string starts here" if ch == '"' else "not valid here"
            return diag("WG003", msg, span, label=label, help=help_)
        if isinstance(exc, UnexpectedEOF) or (
            isinstance(exc, UnexpectedToken) and exc.token.type == "$END"
        ):
            return self._eof_error(exc, text, lines, file)
        assert isinstance(exc, UnexpectedToken)
        tok = exc.token
        expected = sorted(self._names.get(t, t) for t in exc.expected)
        found = f"`{tok}`" if tok.type != "NAME" else f"name `{tok}`"
        span = Span(
            file, tok.line, tok.column, tok.end_line or tok.line, tok.end_column or tok.column + 1
        )
        before = text[: tok.start_pos] if tok.start_pos is not None else ""
        spelled = {self._spelling.get(t, t) for t in exc.expected}
        hint = hint_for(context(str(tok), tok.type, spelled, before))
        message = (
            hint.message
            if hint and hint.message
            else f"expected {describe_expected(expected)}, found {found}"
        )
        return diag(
            "WG001",
            message,
            span,
            label=hint.label if hint and hint.label else f"unexpected {found}",
            help=hint.help if hint else None,
            notes=(f"expected one of: {', '.join(expected)}",) if len(expected) > 1 else (),
        )

    def _eof_error(self, exc, text: str, lines: list[str], file: str) -> Diagnostic:
        last = len(lines)
        span = Span(file, last, len(lines[-1]) + 1, last, len(lines[-1]) + 2)
        opener = _unclosed_bracket(text)
        labels = []
        help_ = None
        if opener is not None:
            line, col, ch = opener
            labels.append(
                Label(Span(file, line, col, line, col + 1), f"this `{ch}` is never closed")
            )
            help_ = f"add the missing `{_CLOSER[ch]}`"
        return diag(
            "WG002",
            "unexpected end of file",
            span,
            label="the file ends here",
            labels=labels,
            help=help_,
        )


def _comment(tok: Token, lines: list[str]) -> Comment:
    """A `COMMENT` token as a `Comment`; ``lines`` are the source's, numbered as lark does."""
    assert tok.line is not None and tok.column is not None  # the lexer positions every token
    before = lines[tok.line - 1][: tok.column - 1]
    return Comment(tok.line, tok.column, str(tok).rstrip(), not before.strip())


_CHAR_HINTS = {
    ";": "statements end at the end of the line; remove the `;`",
    "'": 'strings use double quotes: "..."',
    '"': 'this string is never closed: end it with `"` on the same line',
    "!": "conditions negate with `not`: `not request.wants(text)`",
    "&": "conditions combine with `and`",
    "<": "conditions do not compare values; use a bool `option` or `request.wants(m)`",
    ">": "conditions do not compare values; use a bool `option` or `request.wants(m)`",
}


def hint_for_char(ch: str) -> tuple[str, str | None]:
    if ch == '"':
        return "unterminated string", _CHAR_HINTS[ch]
    return f"invalid character `{ch}`", _CHAR_HINTS.get(ch)


_CLOSER = {"{": "}", "(": ")", "[": "]"}


def _unclosed_bracket(text: str) -> tuple[int, int, str] | None:
    """Position and kind of the innermost bracket left open at the end of ``text`` (comments and
    strings skipped)."""
    stack: list[tuple[int, int, str]] = []
    line, col = 1, 0
    in_str = in_comment = False
    escape = False
    for ch in text:
        col += 1
        if ch == "\n":
            line, col = line + 1, 0
            in_comment = False
            in_str = False
            continue
        if in_comment:
            continue
        if in_str:
            if escape:
                escape = False
            elif ch == "\\":
                escape = True
            elif ch == '"':
                in_str = False
            continue
        if ch == "#":
            in_comment = True
        elif ch == '"':
            in_str = True
        elif ch in _CLOSER:
            stack.append((line, col, ch))
        elif ch in ")}]" and stack:
            stack.pop()
    return stack[-1] if stack else None
