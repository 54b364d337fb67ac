"""`wgc lsp` over stdio, driven by pygls' own client, on every example model and placement.

Each feature is checked against the compiler rather than against itself: diagnostics equal
`wgc check`'s, a rename leaves a model (and its placements) that still checks clean with the
same shape, formatting equals `wgc fmt`, definitions land on the declared name.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from lsprotocol import types as lsp

sys.path.insert(0, str(Path(__file__).parent))  # --import-mode=importlib: no package for tests/

from lsp_client import Client

from wgc.driver import Driver
from wgc.fmt import format_source
from wgc.lsp.names import index
from wgc.lsp.placement_refs import placements_of
from wgc.lsp.semantic import TOKEN_TYPES
from wgc.parse.parser import Parser
from wgc.placement.check import check_placement

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(ROOT.glob("wgc_models/*/*.walk"))
IDS = [p.stem for p in EXAMPLES]
RENAMED_KINDS = ("node", "port", "channel", "walk", "flow", "subflow", "stream", "param", "option")


@pytest.fixture(scope="module")
def client():
    c = Client(ROOT)
    yield c
    c.close()


def offset(text: str, line: int, col: int) -> int:
    lines = text.split("\n")
    return sum(len(x) + 1 for x in lines[:line]) + col


def apply(text: str, edits: list[lsp.TextEdit]) -> str:
    spans = sorted(
        ((offset(text, e.range.start.line, e.range.start.character),
          offset(text, e.range.end.line, e.range.end.character), e.new_text) for e in edits),
        reverse=True,
    )  # fmt: skip
    for a, b, new in spans:
        text = text[:a] + new + text[b:]
    return text


def first_of_each(path: Path) -> dict:
    """The first occurrence of every distinct symbol of ``path`` (by the server's own index)."""
    tree = Parser().parse(path.read_text(), str(path)).tree
    assert tree is not None
    occurrences, _ = index(tree)
    out = {}
    for o in occurrences:
        out.setdefault(o.symbol, o)
    return out


def key(d) -> tuple:
    return (d.code, d.range.start.line, d.range.start.character)


@pytest.mark.parametrize("path", EXAMPLES, ids=IDS)
def test_diagnostics_equal_wgc_check(client, path):
    uri = client.open(path)
    front = Driver().front_end(str(path))
    expected = [(d.code, d.span.line - 1, d.span.col - 1) for d in front.diagnostics]
    assert [key(d) for d in client.diagnostics[uri]] == expected
    for placement in placements_of(str(path)):
        p_uri = client.open(Path(placement))
        placed = check_placement(front.model, placement)
        want = [(d.code, d.span.line - 1, d.span.col - 1) for d in placed.diagnostics]
        assert [key(d) for d in client.diagnostics[p_uri]] == want, placement


@pytest.mark.parametrize("path", EXAMPLES, ids=IDS)
def test_hover_definition_references(client, path):
    uri = client.open(path)
    text = path.read_text()
    lines = text.split("\n")
    for sym, occ in first_of_each(path).items():
        hover = client.hover(uri, occ.line, occ.start + 1)
        if sym.kind not in ("var",):
            assert hover is not None and sym.name in hover.contents.value, sym
        found = client.definition(uri, occ.line, occ.start)
        assert found, sym
        names = {lines[loc.range.start.line][loc.range.start.character : loc.range.end.character]
                 for loc in found}  # fmt: skip
        assert sym.name in names, (sym, names)
        refs = client.references(uri, occ.line, occ.start)
        assert any(r.range.start.line == occ.line for r in refs), sym
    # the channel's type, the port's type, a stream's chunk
    if path.stem == "orpheus":
        line = next(i for i, x in enumerate(lines) if x.startswith("stream tokens"))
        h = client.hover(uri, line, len("stream t"))
        assert "chunk sliding(window = 28, stride = 7)" in h.contents.value
        assert "each chunk: i64[frame * window_frames]" in h.contents.value
        line = next(i for i, x in enumerate(lines) if "out new_token" in x)
        h = client.hover(uri, line, lines[line].index("new_token"))
        assert "out LLM.new_token: i64[1]" in h.contents.value
        line = next(i for i, x in enumerate(lines) if x.startswith("node LLM"))
        h = client.hover(uri, line, 6)
        assert "Orpheus's LM on the paged pool" in h.contents.value  # the class docstring


@pytest.mark.parametrize("path", EXAMPLES, ids=IDS)
def test_impl_goes_to_the_python_class(client, path):
    uri = client.open(path)
    lines = path.read_text().split("\n")
    impls = [(i, m) for i, x in enumerate(lines) for m in re.finditer(r'impl "([^"]+)"', x)]
    assert impls
    for i, m in impls:
        (loc,) = client.definition(uri, i, m.start(1) + 2)
        target = Path(loc.uri.removeprefix("file://"))
        cls = m.group(1).split(":")[1]
        assert target.read_text().split("\n")[loc.range.start.line].startswith(f"class {cls}")


@pytest.mark.parametrize("path", EXAMPLES, ids=IDS)
def test_rename_every_kind_keeps_the_model_checking(client, path):
    uri = client.open(path)
    text = path.read_text()
    base = Driver().front_end(str(path), text).model
    per_kind: dict[str, int] = {}
    for sym, occ in first_of_each(path).items():
        per_kind[sym.kind] = per_kind.get(sym.kind, 0) + 1
        if sym.kind not in RENAMED_KINDS or per_kind[sym.kind] > 3:  # three of each kind
            continue
        new = f"{sym.name}_r"
        edit = client.rename(uri, occ.line, occ.start, new)
        assert edit is not None and edit.changes, sym
        renamed = apply(text, edit.changes[uri])
        front = Driver().front_end(str(path), renamed)
        assert not front.errors, (sym, [d.message for d in front.errors])
        m = front.model
        assert m is not None and base is not None
        assert (len(m.nodes), len(m.walks), len(m.streams), len(m.flows)) == (
            len(base.nodes), len(base.walks), len(base.streams), len(base.flows)
        ), sym  # fmt: skip
        assert sum(len(w.edges) for w in m.walks) == sum(len(w.edges) for w in base.walks)
        for p_uri, edits in edit.changes.items():
            if p_uri == uri:
                continue
            p = Path(p_uri.removeprefix("file://"))
            placed = check_placement(m, str(p), apply(p.read_text(), edits))
            assert not placed.errors, (sym, p, [d.message for d in placed.errors])
        if sym.kind == "node" and placements_of(str(path)):
            assert len(edit.changes) > 1, "a node rename reaches the placement files"


@pytest.mark.parametrize("path", EXAMPLES, ids=IDS)
def test_formatting_semantic_tokens_completion(client, path):
    uri = client.open(path)
    text = path.read_text()
    edits = client.formatting(uri)
    want = format_source(text, str(path), Parser()).text
    assert apply(text, edits or []) == want
    data = client.semantic_tokens(uri)
    assert data and len(data) % 5 == 0
    model = Driver().front_end(str(path)).model
    assert model is not None
    # decode the relative encoding; every declared node, walk and stream is coloured as one
    tokens, line, col = {}, 0, 0
    for i in range(0, len(data), 5):
        dl, dc, length, kind, mods = data[i : i + 5]
        line, col = line + dl, (col + dc if dl == 0 else dc)
        tokens[(line, col)] = (length, TOKEN_TYPES[kind], mods)
    for decls, kind in (
        (model.nodes, "class"),
        (model.walks, "function"),
        (model.streams, "event"),
    ):
        for d in decls:
            assert d.name_span is not None, d.name
            at = (d.name_span.line - 1, d.name_span.col - 1)
            assert tokens[at] == (len(d.name), kind, 1), (d.name, tokens.get(at))  # 1: declaration
    symbols = client.outline(uri)
    top = {(s.name, s.kind) for s in symbols}
    assert {(n.name, lsp.SymbolKind.Class) for n in model.nodes} <= top
    assert {(w.name, lsp.SymbolKind.Function) for w in model.walks} <= top
    assert {(f.name, lsp.SymbolKind.Module) for f in model.flows} <= top
    for s in symbols:
        if s.kind == lsp.SymbolKind.Class:
            n = model.node(s.name)
            assert n is not None, s.name
            assert [c.name for c in s.children or []] == [p.name for p in (*n.inputs, *n.outputs)]
    node = model.nodes[0]
    labels = client.completion(uri, 0, 0)
    assert {"node", "walk", "text", "image"} <= set(labels)
    assert {n.name for n in model.nodes} <= set(labels)
    lines = text.split("\n")
    line = next(i for i, x in enumerate(lines) if x.startswith("stream") or x.startswith("walk"))
    changed = "\n".join([*lines[: line + 1], f"  {node.name}.", *lines[line + 1 :]])
    client.change(uri, changed)
    ports = client.completion(uri, line + 1, len(node.name) + 3)
    assert set(ports) == {p.name for p in (*node.inputs, *node.outputs)}
    client.change(uri, text)


def test_live_plan_and_save_notification(client):
    path = ROOT / "wgc_models/orpheus/orpheus.walk"
    uri = client.open(path)
    result = client.plan(uri)
    assert result.html.lstrip().lower().startswith("<!doctype html")
    assert "LLM" in result.html and result.placement.endswith("cpu.yaml")
    two = ROOT / "wgc_models/orpheus/placements/cpu-2rank.yaml"
    assert "rank 1" in client.plan(uri, two.as_uri()).html.lower()
    missing = client.plan(uri, (ROOT / "wgc_models/orpheus/placements/none.yaml").as_uri())
    assert "WG010" in missing.error and "none.yaml" in missing.error
    client.save(uri)
    assert client.wait_note("wgc/planChanged").uri == uri
