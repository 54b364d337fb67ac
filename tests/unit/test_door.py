"""The door (`wgc_runtime.core.conductor.door`): every problem of a request, named by its field,
and the same refusals from `LocalCluster.submit` and the admission helpers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
if (
    str(ROOT) not in sys.path
):  # node modules import as `wgc_models.<family>.nodes` (registered: `orpheus.nodes`)
    sys.path.insert(0, str(ROOT))

from wgc_runtime.contract.flow import Segment  # noqa: E402
from wgc_runtime.contract.kinds import FailKind  # noqa: E402
from wgc_runtime.contract.node import DTYPE_NAMES, SEED_OPTION, CallContext, to_tensor  # noqa: E402
from wgc_runtime.core.conductor.door import _dtype_shape, check, describe, dry_run  # noqa: E402
from wgc_runtime.host.admission import RequestIds, admit  # noqa: E402
from wgc_runtime.host.loading import load_conductor  # noqa: E402
from wgc_runtime.host.local import LocalCluster  # noqa: E402

VIDEO = torch.zeros(2, 8, 8, 3, dtype=torch.uint8)
ACTIONS = torch.zeros(16, 7)


def spec(family: str):
    return load_conductor(ROOT / "generated" / family / "cpu")


def problems(family: str, segments, want, options=None, strict: bool = True) -> dict[str, str]:
    s = spec(family)
    return {p.field: p.message for p in check(s, s.request(segments, want, options), strict=strict)}


def test_good_requests_have_no_problem() -> None:
    assert problems("orpheus", [Segment("text", "hello")], ["audio"]) == {}
    assert problems("bagel", [Segment("text", "a cat")], ["image"], {"think": True}) == {}
    image = torch.zeros(8, 8, 3, dtype=torch.uint8)
    assert problems("bagel", [Segment("image", image), Segment("text", "what?")], ["text"]) == {}
    video = Segment("video", VIDEO, (("actions", ACTIONS), ("states", ACTIONS)))
    assert problems("vjepa2_ac", [video], ["tensor"], {"rollout": True, "horizon": 4}) == {}


def test_unknown_options_and_wants_name_what_is_allowed() -> None:
    got = problems("bagel", [Segment("text", "hi")], ["imgae"], {"thnk": True, "steps": 3})
    assert "did you mean `think`?" in got["options.thnk"]
    assert "the options of `bagel` are `think`" in got["options.steps"]
    assert (
        got["want"]
        == "`bagel` never emits `imgae` (did you mean `image`?); it emits `text`, `image`"
    )
    got = problems("llama", [Segment("text", "hi")], [], {"eos_after": 3})
    assert got["options.eos_after"] == "unknown option `eos_after`: `llama` declares no options"
    assert got["want"] == "no output wanted: ask for one of `text`"
    got = problems("orpheus", [Segment("text", "hi")], ["audio"], {"voice": "bob"})
    assert got["options.voice"].startswith("got `'bob'`; option `voice` takes `'tara'`")


def test_not_strict_lets_undeclared_options_and_wants_through() -> None:
    assert problems("orpheus", [Segment("text", "hi")], [], {"eos_after": 3}, strict=False) == {}


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("abc", "option `think` is a bool, got `'abc'` (give true or false)"),
        (1, "option `think` is a bool, got `1` (give true or false)"),
    ],
)
def test_ill_typed_options(value, words) -> None:
    got = problems("bagel", [Segment("text", "hi")], ["image"], {"think": value}, strict=False)
    assert got == {"options.think": words}


def test_int_options_are_64_bit_and_typed() -> None:
    video = Segment("video", VIDEO, (("actions", ACTIONS), ("states", ACTIONS)))
    got = problems("vjepa2_ac", [video], ["tensor"], {"rollout": True, "horizon": 2**70})
    assert "out of the 64-bit range" in got["options.horizon"]
    got = problems("vjepa2_ac", [video], ["tensor"], {"rollout": True, "horizon": "4"})
    assert got["options.horizon"] == "option `horizon` is an int, got `'4'`"


def test_unknown_input_modality_under_strict_and_the_flow_s_own_fail_otherwise() -> None:
    audio = Segment("audio", torch.zeros(10))
    got = problems("bagel", [audio], ["text"])
    assert got == {"inputs[0].modality": "`bagel` takes no `audio` input; it takes `text`, `image`"}
    assert problems("bagel", [audio], ["text"], strict=False) == {}  # the flow fails it (`fail`)
    run = dry_run(spec("bagel"), spec("bagel").request([audio], ["text"]))
    assert run.fails == [("main", "BAGEL takes text and image inputs")]


def test_missing_fields_and_values_a_walk_input_cannot_take() -> None:
    got = problems(
        "pi05", [Segment("image", torch.zeros(1, 8, 8, 3, dtype=torch.uint8))], ["action"]
    )
    assert got["inputs[0].fields.prompt"].startswith(
        "missing: flow `main` passes field `prompt` of this `image` segment to walk `prefill` "
        "input `prompt` (i64[T])"
    )
    video = Segment("video", VIDEO, (("actions", torch.zeros(15, 7)), ("states", ACTIONS)))
    got = problems("vjepa2_ac", [video], ["tensor"], {"rollout": True})
    assert got["inputs[0].fields.actions"].startswith(
        "expected f32[16, 7], got f32[15, 7] (dim 0 must be 16)"
    )
    flat = Segment("image", torch.zeros(8, 8, dtype=torch.uint8))
    got = problems("bagel", [flat, Segment("text", 3.5)], ["text"])
    assert got["inputs[0].data"].startswith("expected 3 dims (u8[H, W, 3]), got u8[8, 8]")
    assert got["inputs[1].data"].startswith("expected dtype i64, got f32[]")


def test_describe_lists_every_problem() -> None:
    s = spec("orpheus")
    text = describe(check(s, s.request([Segment("text", "hi")], ["audoi"], {"x": 1})))
    assert text.splitlines()[0] == "bad request (2 problems):"
    assert "options.x: unknown option `x`" in text and "want: `orpheus` never emits" in text


def test_a_seed_must_be_a_64_bit_integer() -> None:
    s = spec("orpheus")
    req = s.request([Segment("text", "hi")], ["audio"])
    _, found = admit(s, req, strict=True, seed="7")
    assert [p.field for p in found] == ["seed"]
    seeded, found = admit(s, req, strict=True, seed=7)
    assert not found and seeded.option(SEED_OPTION) == 7


def test_call_context_seeds_from_the_request_seed_when_given() -> None:
    a = CallContext(request_id="a", walk="w", call=0)
    b = CallContext(request_id="b", walk="w", call=0)
    assert a.seed() != b.seed()
    a.options, b.options = {SEED_OPTION: 7}, {SEED_OPTION: 7}
    assert a.seed() == b.seed() and a.request_seed("x") == b.request_seed("x")


def test_request_ids_reuse_runs_under_a_fresh_internal_id() -> None:
    ids = RequestIds()
    first = ids.open("r")
    assert first == "r" and ids.live("r")
    ids.close(first)
    second = ids.open("r")
    assert second != "r" and ids.client(second) == "r"
    req = spec("orpheus").request([Segment("text", "hi")], ["audio"])
    assert ids.seeded(req, second).option(SEED_OPTION) == "r"  # it computes as `r` did


def test_local_cluster_refuses_at_the_door_and_reuses_ended_ids() -> None:
    cluster = LocalCluster(ROOT / "generated" / "orpheus" / "cpu", strict=True)
    bad = cluster.submit(cluster.request([Segment("text", "hi")], ["audoi"]), "x")
    assert bad.done and bad.error is not None and bad.error.kind is FailKind.REJECTED
    assert "never emits `audoi`" in (bad.error.message or "")
    first = cluster.submit(cluster.request([Segment("text", "hi")], ["audio"]), "x").result()
    again = cluster.submit(cluster.request([Segment("text", "hi")], ["audio"]), "x").result()
    assert first.ok and again.ok and again.id == "x"
    assert all(a.tensor.equal(b.tensor) for a, b in zip(first.outputs, again.outputs, strict=True))


@pytest.mark.parametrize(
    "value",
    [
        "héllo",
        "",
        True,
        3,
        2.5,
        [1, 2, 3],
        [[0.5, 1.0], [2.0, 3.0]],
        [1, 2.5],
        [True, False],
        np.zeros((2, 3), np.float32),
        np.zeros(4, np.float64),
        np.zeros((1, 2, 2), np.uint8),
        np.arange(5, dtype=np.int32),
        np.float32(1.5),
        torch.zeros(2, 2, dtype=torch.bfloat16),
        torch.arange(3),
    ],
    ids=repr,
)
def test_the_door_types_a_value_as_the_runtime_converts_it(value) -> None:
    """The door's torch-free typing equals `to_tensor`'s (what the walk receives)."""
    x = to_tensor(value)
    assert x is not None
    name = DTYPE_NAMES.get(x.dtype, str(x.dtype).removeprefix("torch."))
    assert _dtype_shape(value) == (name, tuple(x.shape))


@pytest.mark.parametrize(
    "value", [np.array(["a", "b"]), np.array([object()]), [[1, 2], [3]], 2**70], ids=repr
)
def test_the_door_refuses_what_is_not_a_tensor(value) -> None:
    with pytest.raises((TypeError, ValueError, RuntimeError, OverflowError)):
        to_tensor(value)
    with pytest.raises((TypeError, ValueError, OverflowError)):
        _dtype_shape(value)


@pytest.mark.slow
def test_wgc_run_checks_a_request_before_importing_torch() -> None:
    """`wgc run` checks the request before it starts any process; torch (~1.5 s) is imported
    by the processes and, while they start, by the CLI, never before the check."""
    code = (
        "import sys\n"
        "from wgc.cli.door import at_the_door\n"
        f"at_the_door({str(ROOT / 'generated' / 'orpheus' / 'cpu')!r},"
        " [('text', 'hi', {})], ('audio',), {}, None)\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
