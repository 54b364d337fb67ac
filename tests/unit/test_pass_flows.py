"""The `flows` pass: reachability, the persisted-before-use must-analysis, walk arguments."""

from __future__ import annotations

from pathlib import Path

import pytest

from wgc.driver import Driver
from wgc.passes import flows

ROOT = Path(__file__).resolve().parents[2]
_driver = Driver()

PRELUDE = """
model t
param two = 2
option n: int = 1
option temp: float = 1.0
option on: bool = false
option tag: str = "x"

node Enc: stateless {
  impl "t:Enc"
  in  x: f32[4]
  out y: f32[4]
}

node Use: stateless {
  impl "t:Use"
  in  y: f32[4]
  out z: f32[4]
}

walk prefill(x: f32[4]) {
  Enc(x) -> y
  persist y
}

walk other(x: f32[4]) {
  Enc(x) -> y
  persist y
}

walk decode(y: f32[4]) {
  Use(y) -> z
  emit z as tensor
}
"""


def codes(src: str, prelude: str = PRELUDE, ignore=("WG701",)) -> list[str]:
    """The flows pass's codes for ``prelude + src`` (by default without unreachable walks, which
    most cases here leave on purpose)."""
    result = _driver.front_end("t.walk", prelude + src)
    return sorted(
        d.code for d in result.diagnostics if d.code in flows.CODES and d.code not in ignore
    )


def test_metadata():
    assert flows.NAME == "flows"
    assert set(flows.CODES) == {f"WG70{i}" for i in range(1, 8)}


@pytest.mark.parametrize("path", sorted((ROOT / "wgc_models").rglob("*.walk")), ids=str)
def test_examples_are_clean(path: Path):
    result = _driver.front_end(str(path))
    assert [d.code for d in result.diagnostics if d.code in flows.CODES] == []


# ---------------------------------------------------------------- the must-analysis
@pytest.mark.parametrize(
    "body",
    [
        # `for` runs at least once
        "for seg in request.inputs { prefill(x = seg) other(x = seg) } decode(y)",
        # every arm persists, or fails
        """for seg in request.inputs { match seg.modality {
             text => prefill(x = seg)
             image | video => other(x = seg)
             _ => fail "no" } }
           decode(y)""",
        # `_` arm present
        """for seg in request.inputs { match seg.modality {
             text => prefill(x = seg)
             _ => other(x = seg) } }
           decode(y)""",
        # both branches persist
        """for seg in request.inputs {
             if option.on { prefill(x = seg) } else { other(x = seg) } }
           decode(y)""",
        # the path that does not persist fails
        """for seg in request.inputs {
             if request.has(text) { prefill(x = seg) } else { fail "no" } }
           decode(y)""",
        # `else if` chains
        """for seg in request.inputs {
             if request.has(text) { prefill(x = seg) }
             else if request.has(image) { other(x = seg) }
             else { fail "no" } }
           decode(y)""",
        # a static positive repeat count runs at least once
        "repeat two { for seg in request.inputs { prefill(x = seg) } } decode(y)",
        # uses inside the branch that persisted
        """for seg in request.inputs {
             if option.on { prefill(x = seg) decode(y) } }""",
        # after `fail`, nothing is reachable and nothing is reported
        'fail "never" decode(y)',
    ],
)
def test_persisted_on_every_path(body):
    assert codes(f"flow main {{ {body} }}") == []


@pytest.mark.parametrize(
    "body",
    [
        # used before the persisting walk
        "decode(y) for seg in request.inputs { prefill(x = seg) }",
        # a `match` without `_`: an unmatched input skips it
        """for seg in request.inputs { match seg.modality { text => prefill(x = seg) } }
           decode(y)""",
        # an arm that does not persist
        """for seg in request.inputs { match seg.modality {
             text => prefill(x = seg)
             _ => decode(y) } }""",
        # `if` without `else`
        "for seg in request.inputs { if option.on { prefill(x = seg) } } decode(y)",
        # `repeat` with a count known only per request, or zero
        "repeat option.n { for seg in request.inputs { prefill(x = seg) } } decode(y)",
        "repeat 0 { for seg in request.inputs { prefill(x = seg) } } decode(y)",
        # one branch persists, the other does not
        """for seg in request.inputs {
             if option.on { prefill(x = seg) } else { decode(y) } }
           decode(y)""",
    ],
)
def test_may_be_used_before_persisted(body):
    assert "WG702" in codes(f"flow main {{ {body} }}")


def test_persisted_by_another_flow_only():
    src = """
    flow main { for seg in request.inputs { prefill(x = seg) } }
    flow side when request.wants(text) { decode(y) }
    """
    result = _driver.front_end("t.walk", PRELUDE + src)
    [d] = [d for d in result.diagnostics if d.code == "WG702"]
    assert "side by side" in " ".join(d.notes)


def test_the_branch_that_drops_it_is_labelled():
    src = "flow main { for seg in request.inputs { if option.on { prefill(x = seg) } } decode(y) }"
    result = _driver.front_end("t.walk", PRELUDE + src)
    [d] = [d for d in result.diagnostics if d.code == "WG702"]
    assert any("condition is false" in lb.message for lb in d.labels)
    assert "else" in (d.help or "")


# ---------------------------------------------------------------- values, types, missing inputs
@pytest.mark.parametrize(
    "body",
    [
        "decode(y = nothing)",  # persisted by no walk
        "for seg in request.inputs { prefill(x = seg) } prefill(x = seg)",  # out of its `for`
        "prefill(x = seg.data)",  # not a `for` variable
    ],
)
def test_unknown_values(body):
    assert codes(f"flow main {{ {body} }}") == ["WG705"]


def test_segment_fields_and_loop_vars_are_known():
    assert codes("flow main { for s in request.inputs { prefill(x = s.data) other(x = s) } }") == []


def test_unknown_walks_params_and_options_belong_to_names():
    src = "flow main { for s in request.inputs { nowalk(x = s) prefill(x = s, q = s) } }"
    assert codes(src) == []
    prelude = PRELUDE.replace("walk decode(y: f32[4])", "walk decode(y: f32[4], k?: i64[])")
    assert codes("flow main { decode(y = y, k = option.missing) }", prelude) == ["WG702"]


@pytest.mark.parametrize(
    ("option", "input_type", "ok"),
    [
        ("n", "i64[]", True),
        ("n", "i32[1]", True),
        ("n", "i64[2]", False),
        ("n", "f32[]", False),
        ("temp", "bf16[]", True),
        ("temp", "i64[]", False),
        ("on", "bool[]", True),
        ("on", "i32[]", False),
        ("tag", "u8[]", False),
    ],
)
def test_option_argument_types(option, input_type, ok):
    prelude = PRELUDE.replace(
        "walk decode(y: f32[4])", f"walk decode(y: f32[4], k?: {input_type})"
    ).replace("Use(y) -> z", "Use(y) -> z\n  emit k as tensor")
    src = (
        "flow main { for s in request.inputs { prefill(x = s) } "
        f"decode(y, k = option.{option}) }}"
    )
    assert codes(src, prelude) == ([] if ok else ["WG703"])


def test_persisted_channel_type_mismatch():
    prelude = PRELUDE.replace("walk decode(y: f32[4])", "walk decode(y: f32[8])")
    src = "flow main { for s in request.inputs { prefill(x = s) } decode(y) }"
    assert "WG703" in codes(src, prelude)


def test_missing_required_inputs_but_not_optional_ones():
    prelude = PRELUDE.replace("walk decode(y: f32[4])", "walk decode(y: f32[4], w?: f32[4])")
    assert codes("flow main { decode() }", prelude) == ["WG704"]
    src = "flow main { for s in request.inputs { prefill(x = s) } decode(y) }"
    assert codes(src, prelude) == []


# ---------------------------------------------------------------- reachability
def test_unreachable_walk_and_no_flow():
    src = "flow main { for s in request.inputs { prefill(x = s) } }"
    assert codes(src, ignore=()) == ["WG701"] * 2
    assert codes("", ignore=()) == ["WG706"]  # one finding, not one per walk


def test_extern_flow_may_run_any_walk():
    assert codes('flow main = "pkg.flows:main"', ignore=()) == []


def test_never_raises_on_ui_cases():
    for path in sorted((ROOT / "tests" / "ui").rglob("*.walk")):
        result = _driver.front_end(str(path), verify=False)
        if result.model is not None:
            flows.run(result.model)
