"""`wgc.lsp.incremental`: the piece-cached parser gives the front end exactly what a whole parse
gives (the same IR, spans included, the same comments, the same diagnostics), on every example,
after an edit to each of its declarations, and on broken texts (where it falls back to a whole
parse, so syntax errors read as `wgc check` prints them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from wgc.driver import Driver
from wgc.lsp.document import EditorDriver, analyse_walk
from wgc.lsp.incremental import pieces
from wgc.lsp.names import Symbol

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(ROOT.glob("wgc_models/*/*.walk"))


def same(full: Driver, editor: EditorDriver, path: str, text: str) -> None:
    a = full.front_end(path, text)
    b = editor.front_end(path, text)
    assert repr(a.model) == repr(b.model)  # every IR field, spans included
    assert a.comments == b.comments
    assert [(d.code, d.message, d.span, d.labels, d.help) for d in a.diagnostics] == [
        (d.code, d.message, d.span, d.labels, d.help) for d in b.diagnostics
    ]


def test_pieces_cover_the_text_and_start_at_declarations() -> None:
    for path in EXAMPLES:
        text = path.read_text()
        cut = pieces(text)
        assert "".join(c for _, c in cut) == text
        for line, chunk in cut:
            assert text.split("\n")[line - 1] == chunk.split("\n")[0]


@pytest.mark.slow
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_same_front_end_after_every_edit(path: Path) -> None:
    text = path.read_text()
    full, editor = Driver(), EditorDriver()
    same(full, editor, str(path), text)
    lines = text.split("\n")
    cut_at = [p for p in pieces(text) if p[1].strip()]
    for line, chunk in cut_at[:: max(1, len(cut_at) // 5)]:  # six declarations, spread out
        # a renamed declaration (errors elsewhere), a blank line added (every later piece
        # moves), and the text cut in the middle of the declaration (a syntax error)
        first = lines[line - 1]
        renamed = "\n".join([*lines[: line - 1], first.replace(" ", " x", 1), *lines[line:]])
        grown = "\n".join([*lines[: line - 1], "", *lines[line - 1 :]])
        cut = text[: text.index(chunk) + len(chunk) // 2]
        for variant in (renamed, grown, cut, text):
            same(full, editor, str(path), variant)
    assert editor.incremental.reparsed == 0  # the original text again: every piece cached


def test_a_line_that_only_looks_like_a_declaration_falls_back() -> None:
    # a node may be called `stream`: a call of it at column 0 is cut as if a declaration began
    text = (
        "model m\nnode stream: stateless {\n  in x: f32[4]\n  out y: f32[4]\n}\n"
        "walk w(x: f32[4]) {\nstream(x) -> y\n  emit y as tensor\n}\n"
        "flow f {\n  w()\n}\n"
    )
    assert [line for line, _ in pieces(text)] == [1, 2, 6, 7, 10]  # 7: the call
    full, editor = Driver(), EditorDriver()
    same(full, editor, "m.walk", text)
    doc = analyse_walk(editor, "m.walk", text)
    assert doc.tree is not None and not any(d.code < "WG010" for d in doc.diagnostics)
    assert [o.line for o in doc.occurrences if o.symbol == Symbol("node", "", "stream")] == [1, 6]
