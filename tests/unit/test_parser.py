"""The parser's friendly syntax errors: every hint in `wgc.parse.hints` and the EOF / character
diagnostics. (`tests/ui/syntax/` holds a rendered UI test for each as well.)"""

from __future__ import annotations

import pytest

from wgc.parse.hints import context
from wgc.parse.parser import Parser

_parser = Parser()

EMBED = """node Embed: stateless {
  impl "demo.nodes:Embed"
  in  tokens: i64[T]
  out hidden: f32[T, 64]
}
"""


def error(text: str):
    result = _parser.parse(text, "t.walk")
    assert result.tree is None
    (d,) = result.diagnostics
    return d


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("walk w() { A(x) => y }", "calls bind their outputs with `->`, not `=>`"),
        ("stream s: A.x => B.y", "a stream connects its ports with `->`, not `=>`"),
        (
            "flow f { for s in request.inputs { match s.modality { text -> w() } } }",
            "match arms use `=>`, not `->`",
        ),
        ("flow f { w() -> x }", "a walk call in a flow has no outputs"),
        ("walk w() { A(x) -> (y) }", "outputs are listed without parentheses"),
        (
            "walk w() {\n  A(x) -> y,\n  B(y)\n}",
            "a call cannot start inside the previous call's outputs",
        ),
        ("param steps: 50", "expected `=`, found `:`"),
        ("walk w() { A(x: y) }", "arguments bind with `=`, not `:`"),
        ("walk w() { loop l 4 { } }", "a loop needs a static bound: expected `max`"),
        ("walk w() { emit x text }", "`emit` needs a modality: expected `as`"),
        (
            "walk w() { loop l max 4 { A() -> x yield last x } }",
            "`yield` goes after the loop body, not inside it",
        ),
        ("flow f { if option.a { w() } elif option.b { w() } }", "write `else if`, not `elif`"),
        ("walk w() { emit(x) -> y }", "`emit` is a keyword and cannot be used as a name here"),
        (
            "node A: stateless { in x: f32[4], out y: f32[4] }",
            "node items are not separated by commas",
        ),
        (
            "walk w() { par { { A() -> a }, { B() -> b } } }",
            "statements are not separated by commas",
        ),
        (
            "walk w() { loop l max 4 until x == 1 { } }",
            "`until` takes a `bool[]` channel, not a comparison",
        ),
        (
            "flow f { if placed(N) == true { w() } }",
            "only an option or a segment count can be compared in a condition",
        ),
        ("node A { }", "a node needs an engine: expected `:`"),
        ("option think = false", "an option needs a type: expected `:`"),
        ("node A: stateless {\n  in x\n}", "expected `:` and a type"),
        ("walk w(x: ) { }", "expected a type after `:`"),
        ("node A: stateless { impl a.b:C }", "`impl` takes a quoted `module:Class` path"),
        ("node A: stateless { in x: f32(4) }", "dims are written in square brackets"),
        ("walk w() { A(x -> y }", "expected `,` or `)`, found `->`"),
        ("def main(): pass", "expected a declaration, found `def`"),
    ],
)
def test_hint(source, message):
    d = error(source)
    assert d.code == "WG001"
    assert d.message == message


def test_plain_syntax_error_lists_what_was_expected():
    d = error("walk w() { A[x] }")
    assert d.message == "expected `(`, found `[`"


@pytest.mark.parametrize(
    ("source", "opener", "closer"),
    [
        (EMBED + "walk w() {\n  Embed(tokens)\n", (6, 10), "}"),
        ("type A = f32[4,\n", (1, 13), "]"),
        ("walk w() { A(x\n", (1, 13), ")"),
    ],
)
def test_eof_points_at_the_unclosed_bracket(source, opener, closer):
    d = error(source)
    assert d.code == "WG002"
    assert (d.labels[0].span.line, d.labels[0].span.col) == opener
    assert d.help == f"add the missing `{closer}`"


def test_brackets_in_strings_and_comments_do_not_count():
    d = error('node A: stateless { impl "x{" # {\n')
    assert (d.labels[0].span.line, d.labels[0].span.col) == (1, 19)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("param x = 1;", "invalid character `;`"),
        ("node A: stateless { impl 'x' }", "invalid character `'`"),
        ('node A: stateless { impl "x }', "unterminated string"),
        ("flow f { if !request.wants(text) { w() } }", "invalid character `!`"),
    ],
)
def test_invalid_characters(source, message):
    d = error(source)
    assert d.code == "WG003"
    assert d.message == message
    assert d.help


def test_context_ignores_strings_and_comments():
    ctx = context("x", "NAME", {"NAME"}, 'node A: stateless {\n  impl "walk {" # flow {\n  ')
    assert ctx.decl == "node"
    assert ctx.depth == 1
    assert ctx.prev == '"'


def test_valid_program_has_no_diagnostics():
    result = _parser.parse(EMBED, "t.walk")
    assert result.tree is not None and result.diagnostics == ()


@pytest.mark.parametrize("ch", ["\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\x1e"])
def test_comments_are_placed_on_the_lexers_lines(ch):
    # a line break `str.splitlines` knows (but the lexer does not) must not shift later lines
    result = _parser.parse(f'model m  # a{ch}b\nparam x = "{ch}"  # c\n# d\n', "t.walk")
    got = [(c.line, c.col, c.own_line) for c in result.comments]
    assert got == [(1, 10, False), (2, 16, False), (3, 1, True)]


def test_eof_error_after_a_line_break_character():
    d = error("model m  # \u2028\nnode A: {")
    assert d.code in ("WG001", "WG002") and d.span.line == 2


def test_the_grammar_cache_lives_only_in_a_folder_only_this_user_writes(tmp_path, monkeypatch):
    import os

    from wgc.parse.parser import grammar_cache

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = grammar_cache()
    assert isinstance(path, str) and path.startswith(str(tmp_path / "cache" / "wgc"))
    assert os.stat(tmp_path / "cache" / "wgc").st_mode & 0o777 == 0o700
    first = Parser().parse("model m\n# note\n", "a.walk")  # builds the tables, writes the cache
    assert os.path.exists(path)
    again = Parser().parse("model m\n# note\n", "a.walk")  # loads them
    assert again.comments == first.comments and not again.diagnostics
    os.chmod(tmp_path / "cache" / "wgc", 0o777)  # anyone could plant a pickle there: not used
    assert grammar_cache() is False
