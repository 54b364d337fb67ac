"""The `unused` pass: what counts as a use of each kind of declaration and binding."""

from __future__ import annotations

from pathlib import Path

import pytest

from wgc.driver import Driver
from wgc.passes import unused

ROOT = Path(__file__).resolve().parents[2]
_driver = Driver()

ENC = """
node Enc: stateless {
  impl "t:Enc"
  in  x: f32[4]
  out y: f32[4]
}
"""
WALK = """
walk encode(x: f32[4]) {
  Enc(x) -> y
  emit y as tensor
}
"""
FLOW = "flow main { for s in request.inputs { encode(x = s) } }\n"


def findings(src: str) -> list[tuple[str, str]]:
    result = _driver.front_end("t.walk", "model t\n" + src)
    return sorted((d.code, d.message) for d in result.diagnostics if d.code in unused.CODES)


def codes(src: str) -> list[str]:
    return [c for c, _ in findings(src)]


def errors(src: str) -> list[str]:
    result = _driver.front_end("t.walk", "model t\n" + src)
    return [d.code for d in result.diagnostics if d.is_error]


def test_metadata():
    assert unused.NAME == "unused"
    assert set(unused.CODES) == {f"WG90{i}" for i in range(1, 9)}


@pytest.mark.parametrize("path", sorted((ROOT / "wgc_models").rglob("*.walk")), ids=str)
def test_examples_are_clean(path: Path):
    result = _driver.front_end(str(path))
    assert [d.code for d in result.diagnostics if d.code in unused.CODES] == []


def test_baseline_is_clean():
    assert findings(ENC + WALK + FLOW) == []


# ---------------------------------------------------------------- params
@pytest.mark.parametrize(
    "use",
    [
        'param q = p + 1\nnode Q: stateless { impl "t:Q" in a: f32[q] out b: f32[q] }',
        'node Q: stateless { impl "t:Q" in a: f32[p * 2] out b: f32[8] }',  # dim expression
        'node Q: stateless { impl "t:Q" in a: f32[4] out b: f32[4] config gain = p }',
        'type V = f32[p]\nnode Q: stateless { impl "t:Q" in a: V out b: V }',
        "option k: int = p\n",  # an option default
    ],
)
def test_param_uses(use):
    got = codes("param p = 4\n" + use + ENC + WALK + FLOW)
    assert "WG902" not in got


def test_param_used_by_loop_bound_repeat_and_policy():
    src = (
        "param steps = 2\nparam rounds = 2\nparam k = 1\n"
        + """
node Step: stateless {
  impl "t:Step"
  in  x: f32[4]
  out x: f32[4]
  out c: f32[1, 4]
}
node Voc: stateless {
  impl "t:Voc"
  in  c: f32[1, 4]
  out w: f32[4]
}
stream cs: Step.c -> Voc.c
  chunk fixed(k = k)
  final pad
walk run(x: f32[4]) {
  loop l max steps { Step(x) -> x } yield last x
  emit x as tensor
}
walk voc() {
  Voc() -> w
  emit w as audio
}
flow main { repeat rounds { for s in request.inputs { run(x = s) } } }
flow v on cs { voc() }
"""
    )
    assert errors(src) == []
    assert findings(src) == []


def test_unused_param_is_reported():
    assert codes("param p = 4\n" + ENC + WALK + FLOW) == ["WG902"]


# ---------------------------------------------------------------- nodes, types, options
def test_like_base_and_placed_count_as_uses():
    src = ENC + 'node Enc2: like Enc { impl "t:Enc2" }\n' + ENC.replace("Enc", "Spare")
    src += WALK.replace("Enc(x)", "Enc2(x)")
    src += "flow main { for s in request.inputs { if placed(Spare) { encode(x = s) } } }\n"
    assert codes(src) == []


def test_unused_node_type_option():
    src = "type T = f32[4]\noption o: bool = false\n" + ENC + ENC.replace("Enc", "Spare")
    assert codes(src + WALK + FLOW) == ["WG901", "WG903", "WG906"]


def test_alias_of_alias_counts():
    src = "type A = f32[4]\ntype B = A\n" + ENC.replace("in  x: f32[4]", "in  x: B")
    assert codes(src + WALK + FLOW) == []


@pytest.mark.parametrize(
    "flow",
    [
        "flow main { for s in request.inputs { if option.o { encode(x = s) } } }",
        "flow main when option.o { for s in request.inputs { encode(x = s) } }",
        "flow main { repeat option.o { for s in request.inputs { encode(x = s) } } }",
    ],
)
def test_option_uses(flow):
    src = "option o: int = 1\n" + ENC + WALK + flow
    assert "WG906" not in codes(src)


# ---------------------------------------------------------------- streams
STREAM_NODES = """
node P: stateless {
  impl "t:P"
  in  x: f32[4]
  out c: f32[1, 4]
}
node C: stateless {
  impl "t:C"
  in  c: f32[1, 4]
  out w: f32[4]
}
stream cs: P.c -> C.c
"""


def test_stream_sides():
    producer_only = STREAM_NODES + "walk p(x: f32[4]) { P(x) }\n"
    producer_only += "flow main { for s in request.inputs { p(x = s) } }\n"
    [(_, msg)] = [f for f in findings(producer_only) if f[0] == "WG904"]
    assert "consumer `C`" in msg and "never read" in msg
    neither = STREAM_NODES + ENC + WALK + FLOW
    [(_, msg)] = [f for f in findings(neither) if f[0] == "WG904"]
    assert "neither" in msg


# ---------------------------------------------------------------- channels and walk inputs
def test_loop_carried_until_and_yield_are_reads():
    src = """
param n = 3
node S: stateless {
  impl "t:S"
  in  x: f32[4]
  out x: f32[4]
  out stop: bool[]
  out trace: f32[4]
}
walk run(x: f32[4]) {
  loop l max n until stop {
    S(x) -> x, stop, trace
  } yield last x yield all trace
  emit x as tensor
}
flow main { for s in request.inputs { run(x = s) } }
"""
    assert errors(src) == []
    assert findings(src) == []


def test_streamed_binding_is_read():
    src = (
        STREAM_NODES
        + """
walk p(x: f32[4]) { P(x) -> c }
walk q() {
  C() -> w
  emit w as audio
}
flow main { for s in request.inputs { p(x = s) } }
flow v on cs { q() }
"""
    )
    assert findings(src) == []


def test_unread_binding_and_input():
    src = (
        ENC
        + """
walk encode(x: f32[4], extra?: f32[4]) {
  Enc(x) -> y
  Enc(x = y) -> spare = y
  emit y as tensor
}
"""
        + FLOW
    )
    assert codes(src) == ["WG905", "WG907"]


def test_loop_invariant_input_is_read():
    src = """
param n = 2
node S: stateless {
  impl "t:S"
  in  x: f32[4]
  in  k: f32[4]
  out x: f32[4]
}
walk run(x: f32[4], k: f32[4]) {
  loop l max n { S(x, k) -> x } yield last x
  emit x as tensor
}
flow main { for s in request.inputs { run(x = s, k = s) } }
"""
    assert findings(src) == []


def test_never_raises_on_ui_cases():
    for path in sorted((ROOT / "tests" / "ui").rglob("*.walk")):
        result = _driver.front_end(str(path), verify=False)
        if result.model is not None:
            unused.run(result.model)
