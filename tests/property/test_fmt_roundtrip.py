"""Properties of `wgc fmt` on generated programs (see `gen_walk`): for every valid program `x`,
`fmt(x)` parses to the same IR as `x`, `fmt(fmt(x)) == fmt(x)`, every comment survives with its
text unchanged, and the layout has no trailing whitespace and one final newline. On mutated
(mostly invalid) programs the formatter either formats or reports a syntax error; it never
raises. Programs with a line break that `str.splitlines` knows but the lexer does not (U+2028,
`\\x0c`, ...) inside comments and strings format idempotently too."""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))  # --import-mode=importlib: no package for tests/

from gen_walk import mutated_programs, walk_programs

from wgc.driver import Driver
from wgc.fmt import format_source
from wgc.parse.parser import Parser

PARSER = Parser()
DRIVER = Driver()
SLOW = settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# every character `str.splitlines` breaks a line at, except `\n` and `\r` (the lexer: `\n` only)
LINE_BREAKS = ("\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e")
_COMMENT_OR_STRING = re.compile(r'#[^\n]*|"(?:[^"\\\n]|\\.)*"')


@st.composite
def programs_with_line_breaks(draw) -> str:
    """A generated program with `LINE_BREAKS` characters put into some comments and strings."""

    def inject(m: re.Match) -> str:
        tok = m.group()
        if not draw(st.booleans()):
            return tok
        ch = draw(st.sampled_from(LINE_BREAKS))
        # anywhere in a comment; right after a string's opening quote (never inside an escape)
        at = draw(st.integers(1, len(tok))) if tok.startswith("#") else 1
        return tok[:at] + ch + tok[at:]

    return _COMMENT_OR_STRING.sub(inject, draw(walk_programs()))


def _comments(text: str) -> Counter:
    parsed = PARSER.parse(text, "x.walk")
    assert parsed.tree is not None, parsed.diagnostics
    return Counter(c.text for c in parsed.comments)


def _model(text: str):
    return DRIVER.front_end("x.walk", text, verify=False).model


def _check_roundtrip(source: str) -> None:
    out = format_source(source, "x.walk", PARSER).text
    assert out is not None
    assert _model(out) == _model(source)
    assert _comments(out) == _comments(source)
    assert format_source(out, "x.walk", PARSER).text == out
    assert all(line == line.rstrip() for line in out.split("\n"))
    assert out == "" or (out.endswith("\n") and not out.endswith("\n\n"))


@pytest.mark.slow
@SLOW
@given(walk_programs())
def test_fmt_keeps_ir_comments_and_is_idempotent(source: str) -> None:
    _check_roundtrip(source)


@pytest.mark.slow
@SLOW
@given(programs_with_line_breaks())
def test_fmt_is_idempotent_with_line_break_characters(source: str) -> None:
    _check_roundtrip(source)


@pytest.mark.slow
@SLOW
@given(mutated_programs())
def test_fmt_never_raises_on_broken_input(source: str) -> None:
    result = format_source(source, "x.walk", PARSER)
    if result.text is None:
        assert result.diagnostics
    else:
        assert format_source(result.text, "x.walk", PARSER).text == result.text
