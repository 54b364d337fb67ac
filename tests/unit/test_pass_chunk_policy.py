"""Unit tests for the `chunk_policy` pass: policy arithmetic, parameters, and whole programs.

Whole programs go through the driver, so a finding here is what a user sees; the helpers of the
pass (`chunk_items`, `short_chunks`) are tested directly on the corner cases.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wgc.driver import Driver
from wgc.ir.decls import ChunkPolicy, FinalMode, PolicyKind
from wgc.passes import chunk_policy

ROOT = Path(__file__).resolve().parents[2]
_driver = Driver()

TEMPLATE = """model m
{params}
node LLM: kv_cache {{
  impl "orpheus.nodes:LLM"
  in  text_inputs: i64[T]
  out new_token:   {prod}
}}

node snac_decoder: stateless {{
  impl "orpheus.nodes:SnacDecoder"
  in  window: {cons}
  out audio:  f32[64]
}}

stream tokens: LLM.new_token -> snac_decoder.window
  chunk {policy}
{options}
walk prefill(text_inputs: i64[T]) {{
  LLM(text_inputs)
}}

walk snac_chunk() {{
  snac_decoder() -> audio
  emit audio as audio
}}

flow speech {{
  for seg in request.inputs {{
    match seg.modality {{
      text => prefill(text_inputs = seg)
      _    => fail "text only"
    }}
  }}
}}

flow codec on tokens {{
  snac_chunk()
}}
"""


def program(policy: str, cons: str, prod: str = "i64[1]", *options: str) -> str:
    opts = "".join(f"  {o}\n" for o in options)
    uses_frame = "frame" in policy + cons + prod
    params = "\nparam frame = 7\n" if uses_frame else ""
    return TEMPLATE.format(policy=policy, cons=cons, prod=prod, options=opts, params=params)


def codes(src: str) -> list[str]:
    return [d.code for d in _driver.front_end("t.walk", src).diagnostics]


def diags(src: str, code: str):
    return [d for d in _driver.front_end("t.walk", src).diagnostics if d.code == code]


# ------------------------------------------------------------------------- valid programs


@pytest.mark.parametrize("final", ["final pad", "final drop"])
def test_orpheus_sliding_window_is_clean(final):
    src = program("sliding(window = 4 * frame, stride = frame)", "i64[28]", "i64[1]", final)
    assert codes(src) == []


def test_orpheus_sliding_window_partial_into_symbolic_consumer_is_clean():
    src = program("sliding(window = 4 * frame, stride = frame)", "i64[N]", "i64[1]")
    assert codes(src) == []


def test_code2wav_left_context_into_symbolic_consumer_is_clean():
    src = program("left_context(chunk = 25, left = 25)", "i64[N, 16]", "i64[1, 16]")
    assert codes(src) == []


def test_code2wav_left_context_padded_into_static_consumer_is_clean():
    src = program("left_context(chunk = 25, left = 25)", "i64[50, 16]", "i64[1, 16]", "final pad")
    assert codes(src) == []


def test_thinker_talker_fixed_one_after_done_pad_is_clean():
    src = program(
        "fixed(k = 1)", "bf16[8, 128]", "bf16[8, 128]", "final pad", "after_done continue"
    )
    assert codes(src) == []


@pytest.mark.parametrize(
    "path", sorted((ROOT / "wgc_models").glob("*/*.walk")), ids=lambda p: p.name
)
def test_examples_have_no_chunk_policy_findings(path):
    result = _driver.front_end(str(path))
    assert result.model is not None
    assert chunk_policy.run(result.model) == []


# ------------------------------------------------------------------------- arithmetic


def test_consumer_leading_dim_is_items_times_producer_leading_dim():
    ok = program("fixed(k = 3)", "f32[6, 8]", "f32[2, 8]", "final pad")
    bad = program("fixed(k = 3)", "f32[3, 8]", "f32[2, 8]", "final pad")
    assert "WG503" not in codes(ok)
    (d,) = diags(bad, "WG503")
    assert "delivers 6" in d.message and "f32[6, 8]" in (d.help or "")


def test_scalar_items_stack_into_a_vector():
    assert codes(program("fixed(k = 4)", "bool[4]", "bool[]", "final pad")) == []
    assert "WG503" in codes(program("fixed(k = 4)", "bool[3]", "bool[]", "final pad"))
    assert "WG504" in codes(program("fixed(k = 4)", "bool[4, 1]", "bool[]", "final pad"))


def test_param_leading_dim_counts_as_static():
    assert "WG503" in codes(program("fixed(k = 2)", "i64[frame]", "i64[1]", "final pad"))
    assert "WG503" not in codes(program("fixed(k = frame)", "i64[frame]", "i64[1]", "final pad"))


@pytest.mark.parametrize("lead", ["N", "?"])
def test_dynamic_consumer_leading_dim_accepts_anything(lead):
    src = program(
        "sliding(window = 5, stride = 2)", f"i64[{lead}]", "i64[1]", "after_done continue"
    )
    assert {"WG503", "WG505", "WG508"}.isdisjoint(codes(src))


def test_symbolic_producer_leading_dim_needs_a_dynamic_consumer():
    (d,) = diags(program("fixed(k = 2)", "i64[2]", "i64[T]", "final pad"), "WG503")
    assert d.notes and "varies per request" in d.notes[0]
    assert "WG503" not in codes(program("fixed(k = 2)", "i64[N]", "i64[T]", "final pad"))


@pytest.mark.slow
@given(
    k=st.integers(1, 40),
    d0=st.integers(1, 5),
    wrong=st.integers(1, 200),
)
def test_fixed_accepts_exactly_k_times_d0(k, d0, wrong):
    good = program(f"fixed(k = {k})", f"f32[{k * d0}, 3]", f"f32[{d0}, 3]", "final pad")
    assert "WG503" not in codes(good)
    if wrong != k * d0:
        bad = program(f"fixed(k = {k})", f"f32[{wrong}, 3]", f"f32[{d0}, 3]", "final pad")
        assert "WG503" in codes(bad)


def _policy(kind: PolicyKind) -> ChunkPolicy:
    from wgc.diagnostics.diagnostic import NO_SPAN

    return ChunkPolicy(kind, (), NO_SPAN)


@pytest.mark.parametrize(
    ("kind", "values", "items"),
    [
        (PolicyKind.FIXED, {"k": 3}, 3),
        (PolicyKind.SLIDING, {"window": 28, "stride": 7}, 28),
        (PolicyKind.LEFT_CONTEXT, {"chunk": 25, "left": 25}, 50),
    ],
)
def test_chunk_items(kind, values, items):
    assert chunk_policy.chunk_items(_policy(kind), values) == items


@pytest.mark.parametrize(
    ("kind", "values", "final", "short"),
    [
        # under `partial` the final chunk may be empty (0 rows), even for one-item chunks
        (PolicyKind.FIXED, {"k": 1}, FinalMode.PARTIAL, 1),
        (PolicyKind.FIXED, {"k": 2}, FinalMode.PARTIAL, 1),
        (PolicyKind.FIXED, {"k": 2}, FinalMode.DROP, 0),
        (PolicyKind.SLIDING, {"window": 1, "stride": 1}, FinalMode.PARTIAL, 1),
        (PolicyKind.SLIDING, {"window": 28, "stride": 7}, FinalMode.PARTIAL, 1),
        (PolicyKind.LEFT_CONTEXT, {"chunk": 1, "left": 0}, FinalMode.PARTIAL, 1),
        (PolicyKind.LEFT_CONTEXT, {"chunk": 25, "left": 0}, FinalMode.DROP, 0),
        (PolicyKind.LEFT_CONTEXT, {"chunk": 25, "left": 25}, FinalMode.DROP, 1),  # first chunk
        (PolicyKind.LEFT_CONTEXT, {"chunk": 25, "left": 25}, FinalMode.PARTIAL, 2),
        (PolicyKind.LEFT_CONTEXT, {"chunk": 25, "left": 25}, FinalMode.PAD, 0),
    ],
)
def test_short_chunks(kind, values, final, short):
    assert len(chunk_policy.short_chunks(_policy(kind), values, final)) == short


def test_fixed_one_partial_into_static_consumer_can_get_an_empty_final_chunk():
    assert "WG505" in codes(program("fixed(k = 1)", "i64[1]", "i64[1]"))
    assert "WG505" not in codes(program("fixed(k = 1)", "i64[1]", "i64[1]", "final pad"))
    assert "WG505" not in codes(program("fixed(k = 1)", "i64[1]", "i64[1]", "final drop"))


def test_after_done_with_partial_static_reports_both_problems_once_each():
    src = program("fixed(k = 2)", "i64[2]", "i64[1]", "after_done continue")
    got = codes(src)
    assert got.count("WG505") == 1 and got.count("WG508") == 1


# ------------------------------------------------------------------------- parameters


@pytest.mark.parametrize(
    "policy",
    [
        "sliding(28, 7)",
        "sliding(window = 28, stride = 7)",
        "sliding(stride = 7, window = 28)",
        "sliding(28, stride = 7)",
        "sliding(window = 4 * frame, stride = frame)",
    ],
)
def test_parameter_spellings(policy):
    assert codes(program(policy, "i64[28]", "i64[1]", "final pad")) == []


@pytest.mark.parametrize(
    ("policy", "code", "fragment"),
    [
        ("fixed()", "WG502", "missing parameter `k`"),
        ("fixed(n = 2)", "WG502", "no parameter `n`"),
        ("fixed(2, 3)", "WG502", "too many"),
        ("sliding(window = 28, window = 28)", "WG502", "given twice"),
        ("sliding(28, window = 28)", "WG502", "given twice"),
        ("fixed(k = option.size)", "WG502", "compile-time integer"),
        ("fixed(k = 2.5)", "WG502", "must be an integer"),
        ("fixed(k = 0)", "WG501", "at least 1"),
        ("sliding(window = 7, stride = 28)", "WG501", "larger than `window`"),
        ("sliding(window = 28, stride = 0)", "WG501", "at least 1"),
        ("left_context(chunk = 0, left = 3)", "WG501", "at least 1"),
        ("left_context(chunk = 3, left = -1)", "WG501", "at least 0"),
    ],
)
def test_parameter_errors(policy, code, fragment):
    found = diags(program(policy, "i64[N]", "i64[1]", "final pad"), code)
    assert len(found) == 1, found
    assert fragment in found[0].message
    # a broken policy stops the arithmetic: no knock-on WG503/WG505
    assert {"WG503", "WG505"}.isdisjoint(codes(program(policy, "i64[3]", "i64[1]")))


def test_misspelt_parameter_does_not_also_report_missing():
    assert codes(program("sliding(window = 28, strid = 7)", "i64[28]", "i64[1]", "final pad")) == [
        "WG502"
    ]


# ------------------------------------------------------------------------- robustness


@pytest.mark.parametrize(
    "src",
    [
        program("fixed(k = 1)", "i64[1]", "Missing"),  # unresolved type: no WG504 guesses
        program("fixed(k = 1)", "i64[1]").replace("LLM.new_token", "LLM.nope"),
        program("fixed(k = 1)", "i64[1]").replace("LLM.new_token", "Nobody.new_token"),
        program("bogus(k = 1)", "i64[1]"),
    ],
)
def test_partial_ir_never_raises_and_reports_nothing_of_its_own(src):
    result = _driver.front_end("t.walk", src)
    assert result.model is not None
    assert chunk_policy.run(result.model) == []


def test_every_finding_uses_an_owned_code():
    src = program("sliding(window = 7, stride = 28)", "f32[3]", "i64[1]", "after_done continue")
    result = _driver.front_end("t.walk", src)
    assert result.model is not None
    for d in chunk_policy.run(result.model):
        assert d.code in chunk_policy.CODES
