"""`wgc lsp` on broken files: syntax errors, misspelt names with their quick fixes, placement
files checked against a model being edited, and requests on text that does not parse.

A copy of the Orpheus example (model and placements) in a temporary folder is edited through the
protocol only; the files on disk never change.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from lsprotocol import types as lsp

sys.path.insert(0, str(Path(__file__).parent))  # --import-mode=importlib: no package for tests/

from lsp_client import Client

from wgc.driver import Driver

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CALL = "LLM(token) -> token = new_token, stop"


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("lsp") / "orpheus"
    shutil.copytree(
        ROOT / "wgc_models/orpheus", folder, ignore=shutil.ignore_patterns("__pycache__")
    )
    return folder


@pytest.fixture(scope="module")
def client(copy):
    c = Client(copy)
    yield c
    c.close()


def apply(text: str, edit: lsp.TextEdit) -> str:
    lines = text.split("\n")
    r = edit.range
    assert r.start.line == r.end.line
    line = lines[r.start.line]
    lines[r.start.line] = line[: r.start.character] + edit.new_text + line[r.end.character :]
    return "\n".join(lines)


def test_misspelt_node_has_the_check_diagnostic_and_a_quick_fix(client, copy):
    path = copy / "orpheus.walk"
    good = path.read_text()
    uri = client.open(path)
    assert client.diagnostics[uri] == []
    broken = good.replace(CALL, CALL.replace("LLM(", "LLMM("))
    (d,) = client.change(uri, broken)
    (want,) = Driver().front_end(str(path), broken).diagnostics
    assert (d.code, d.range.start.line + 1, d.range.start.character + 1) == (
        want.code, want.span.line, want.span.col
    )  # fmt: skip
    assert d.severity == lsp.DiagnosticSeverity.Error and d.source == "wgc"
    assert d.message.splitlines()[0] == want.message and "help: did you mean `LLM`?" in d.message
    (action,) = client.code_actions(uri, [d])
    assert action.kind == lsp.CodeActionKind.QuickFix
    (edit,) = action.edit.changes[uri]
    fixed = apply(broken, edit)
    assert fixed == good
    assert client.change(uri, fixed) == []


def test_syntax_error_keeps_hover_safe_and_completion_working(client, copy):
    path = copy / "orpheus.walk"
    good = path.read_text()
    uri = client.open(path)
    broken = good + "\nwalk extra() {\n  par {\n"
    (d,) = client.change(uri, broken)
    assert d.code == "WG002" and "unexpected end of file" in d.message
    (related,) = d.related_information
    assert related.location.uri == uri and "never closed" in related.message
    line = broken.split("\n").index("walk snac_chunk() {")
    assert client.hover(uri, line, 6) is None
    assert client.references(uri, line, 6) == []
    assert client.formatting(uri) is None  # nothing to format until it parses
    assert "LLM" in client.completion(uri, line + 1, 0)  # the names of the last good text
    assert client.change(uri, good) == []


def test_placement_checked_against_the_model_being_edited(client, copy):
    model = copy / "orpheus.walk"
    good = model.read_text()
    m_uri = client.open(model)
    placement = copy / "placements/cpu.yaml"
    p_text = placement.read_text()
    p_uri = client.open(placement, p_text.replace("snac_decoder]", "snac_decodr]"))
    diags = {d.code: d for d in client.diagnostics[p_uri]}
    assert set(diags) == {"WG807", "WG811"}
    # the model-side label of WG811 is a related location in the model file
    assert any(r.location.uri == m_uri for r in diags["WG811"].related_information)
    (action,) = client.code_actions(p_uri, [diags["WG807"]])
    (edit,) = action.edit.changes[p_uri]
    assert edit.new_text == "snac_decoder"
    # renaming the node in the model's buffer re-checks the open placement against it
    seen = client.published[p_uri]
    client.change(m_uri, good.replace("snac_decoder", "vocoder"))
    after = client.wait_diagnostics(p_uri, seen)
    assert any("snac_decodr" in d.message and "vocoder" in d.message for d in after)
    # a model with errors: the placement says its rules did not run, and why
    seen = client.published[p_uri]
    client.change(m_uri, good.replace(CALL, CALL.replace("LLM(", "LLMM(")))
    after = client.wait_diagnostics(p_uri, seen)
    (note,) = [d for d in after if d.code == "WG102"]
    assert note.severity == lsp.DiagnosticSeverity.Information
    assert "placement rules did not run" in note.message and "LLMM" in note.message
    client.change(m_uri, good)


def test_placement_definition_and_completion(client, copy):
    model = copy / "orpheus.walk"
    client.open(model)
    placement = copy / "placements/cpu-2rank.yaml"
    text = placement.read_text()
    p_uri = client.open(placement)
    lines = text.split("\n")
    line = next(i for i, x in enumerate(lines) if "nodes: [LLM]" in x)
    (loc,) = client.definition(p_uri, line, lines[line].index("LLM") + 1)
    assert loc.uri == model.resolve().as_uri()
    assert model.read_text().split("\n")[loc.range.start.line].startswith("node LLM")
    hover = client.hover(p_uri, line, lines[line].index("LLM") + 1)
    assert hover.contents.value.startswith("```walk\nnode LLM: kv_cache")
    assert {"devices", "place", "kv_cache", "batching"} <= set(client.completion(p_uri, 0, 0))
    col = lines[line].index("LLM")
    assert {"LLM", "snac_decoder"} <= set(client.completion(p_uri, line, col))
    kv = next(i for i, x in enumerate(lines) if x.startswith("kv_cache"))
    client.change(p_uri, "\n".join([*lines[:kv], "kv_cache:", "  pa", *lines[kv + 1 :]]))
    assert set(client.completion(p_uri, kv + 1, 4)) == {"page_size", "pages", "dtype"}
    block = ["place:", "  - nodes:", "      - ", "    ranks: [0]"]
    client.change(p_uri, "\n".join(["devices: [cpu]", *block]))
    assert set(client.completion(p_uri, 3, 8)) == {"LLM", "snac_decoder"}
    assert "ranks" in client.completion(p_uri, 4, 4)
    client.change(p_uri, text)


def test_rename_spells_out_a_shorthand_binding(client, copy):
    path = copy / "orpheus.walk"
    good = path.read_text()
    uri = client.open(path)
    lines = good.split("\n")
    line = next(i for i, x in enumerate(lines) if CALL in x)
    col = lines[line].index("LLM(token") + 4  # the `token` argument: port and channel at once
    (port_decl,) = [i for i, x in enumerate(lines) if x.strip().startswith("in  token:")]
    edit = client.rename(uri, port_decl, lines[port_decl].index("token"), "prev")
    texts = [e.new_text for e in edit.changes[uri]]
    assert "prev = token" in texts  # the call now binds port `prev` from channel `token`
    chan = client.rename(uri, line, col, "last")
    assert "token = last" in [e.new_text for e in chan.changes[uri]]
