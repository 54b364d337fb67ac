"""Which input modalities the door lets in, per `match` arm form (`wgc.lower.flowplan`'s
`taken_segments`, checked by `wgc_runtime.core.conductor.door`): an arm takes its modalities
unless its body `fail`s, whatever else the body does (nothing at all, `text => { }`, included);
a `_` arm that does not fail takes any modality."""

from __future__ import annotations

from pathlib import Path

import pytest

from wgc.driver import Driver
from wgc_runtime.contract.flow import Segment
from wgc_runtime.core.conductor.door import check
from wgc_runtime.host.loading import load_conductor

HEAD = """model arms
option loud: bool = false
node N: stateless { impl "m:N" out x: i64[4] }
walk v() { N() -> x  emit x as text }
"""
CALLED = 'node M: stateless { impl "m:M" in a: i64[T] out x: i64[T] }\n'
CALLED += "walk w(a: i64[T]) { M(a = a) -> x  emit x as text }\n"
PLACEMENT = "devices: [cpu]\nplace:\n  - {nodes: [N], ranks: [0]}\n"
CALLED_PLACEMENT = "  - {nodes: [M], ranks: [0]}\n"
MODALITIES = ("text", "image", "audio")

# arm form -> (the arms, the modalities the door takes; None: any)
ARMS = {
    "call_reading_the_segment": ("text => w(a = seg)", {"text"}),
    "empty_block": ("text => { }", {"text"}),
    "block_not_reading_the_segment": ("text => { v() }", {"text"}),
    "bare_call_not_reading_the_segment": ("text => v()", {"text"}),
    "alternatives_empty": ("text | image => { }", {"text", "image"}),
    "if_inside": ("text => if option.loud { v() }", {"text"}),
    "if_failing_inside": ('text => if option.loud { fail "quiet please" }', {"text"}),
    "repeat_inside": ("image => repeat 2 { v() }", {"image"}),
    "fail": ('text => { }  audio => fail "no audio"', {"text"}),
    "fail_block": ('text => { }  audio => { fail "no audio" }', {"text"}),
    "default_empty": ("text => { }  _ => { }", None),
    "default_fail": ('image => { }  _ => fail "images only"', {"image"}),
}


def conductor(tmp_path: Path, arms: str):
    (tmp_path / "m.walk").write_text(
        HEAD
        + (CALLED if "w(" in arms else "")
        + f"flow main {{\n  for seg in request.inputs {{\n    match seg.modality {{ {arms} }}\n"
        "  }\n  v()\n}\n",
        encoding="utf-8",
    )
    placement = PLACEMENT + (CALLED_PLACEMENT if "w(" in arms else "")
    (tmp_path / "p.yaml").write_text(placement, encoding="utf-8")
    res = Driver().compile(str(tmp_path / "m.walk"), str(tmp_path / "p.yaml"))
    assert res.ok, [(d.code, d.message) for d in res.diagnostics if d.is_error]
    out = tmp_path / "out"
    out.mkdir()
    for name, text in res.files.items():
        (out / name).write_text(text, encoding="utf-8")
    return load_conductor(out)


@pytest.mark.parametrize("form", sorted(ARMS))
def test_every_arm_form_takes_its_modalities_unless_it_fails(tmp_path: Path, form: str) -> None:
    arms, taken = ARMS[form]
    spec = conductor(tmp_path, arms)
    for m in MODALITIES:
        req = spec.request([Segment(m, "x")], ["text"], {})
        fields = {p.field: p.message for p in check(spec, req, strict=True)}
        if taken is None or m in taken:
            assert "inputs[0].modality" not in fields, (form, m, fields)
        else:
            assert fields["inputs[0].modality"].startswith(f"`arms` takes no `{m}` input"), fields
