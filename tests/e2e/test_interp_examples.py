"""Every example family end to end on the reference interpreter with its nodes (toys; the real
tiny architectures for Orpheus and Qwen3-Omni): the expected
structure of the outputs (which flows and walks emit, how many chunks, tokens and images, their
shapes), determinism across runs, and how requests fail."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

from tests.narrow import all_present, present

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the node modules import as `wgc_models.<family>`
    sys.path.insert(0, str(ROOT))

from wgc.interp import (  # noqa: E402
    load_model,
    load_nodes,
    make_request,
    run_request,
    same_outputs,
    segment,
)
from wgc.ir.model import Model  # noqa: E402
from wgc_runtime.contract.node import Node  # noqa: E402

MODELS: dict[str, Model] = {}


def model(family: str) -> Model:
    if family not in MODELS:
        MODELS[family] = load_model(str(ROOT / "wgc_models" / family / f"{family}.walk"))
    return MODELS[family]


def run(family: str, inputs, want, options=None, **kw):
    m = model(family)
    req = make_request(m, inputs, want, options)
    first = run_request(m, req, **kw)
    again = run_request(m, req, **kw)
    assert same_outputs(first, again), "the interpreter must be deterministic"
    return first


def bagel_ids() -> frozenset[str]:
    """BAGEL's nodes but its detokenizer: the token-id placements (walk `decode` emits)."""
    return frozenset(n.name for n in model("bagel").nodes if n.name != "detokenizer")


def shapes(out) -> Counter:
    return Counter((e.flow, e.walk, e.modality, tuple(present(e.value).shape)) for e in out.emitted)


class Recorder(Node):
    """Wraps a node and records the `ChunkInfo` of every call's stream-fed ports."""

    def __init__(self, inner: Node):
        super().__init__(inner.ctx)
        self.inner = inner
        self.chunks: list = []

    def forward(self, batch):
        self.chunks += [dict(w.ctx.chunks) for w in batch]
        return self.inner.forward(batch)


IMAGE = (
    torch.arange(32 * 32 * 3, dtype=torch.int64).reshape(32, 32, 3).remainder(251).to(torch.uint8)
)


# ---------------------------------------------------------------------------------- BAGEL
def test_bagel_text_to_image_cfg_parallel():
    out = run("bagel", [segment("text", "a red cube")], ["image"])
    assert out.ok, out.error
    assert shapes(out) == {("main", "image_gen_cfg", "image", (64, 64, 3)): 1}
    assert present(out.of("image")[0]).dtype == torch.uint8


def test_bagel_text_to_image_without_cfg_nodes_placed():
    out = run("bagel", [segment("text", "a red cube")], ["image"], placed={"LLM"})
    assert shapes(out) == {("main", "image_gen", "image", (64, 64, 3)): 1}


def test_bagel_image_editing():
    out = run("bagel", [segment("image", IMAGE), segment("text", "make it blue")], ["image"])
    assert out.ok, out.error
    # at the input's resized shape (32 x 32 stays: the tiny rule's shortest side is 32)
    assert shapes(out) == {("main", "image_edit_cfg", "image", (32, 32, 3)): 1}
    other = run(
        "bagel", [segment("image", 255 - IMAGE), segment("text", "make it blue")], ["image"]
    )
    assert not torch.equal(
        present(out.of("image")[0]), present(other.of("image")[0])
    )  # the image conditions it


def test_bagel_image_understanding_decodes_until_eos():
    inputs = [segment("image", IMAGE), segment("text", "what is this?")]
    out = run("bagel", inputs, ["text"], {"max_tokens": 6}, placed=bagel_ids())
    assert out.ok, out.error
    # the prefill's token (`<|im_start|>`), then one per decode step; the last step's token
    # (EOS, or the one after `max_tokens`) is not emitted
    assert shapes(out) == {("main", "decode", "text", (1,)): 6}
    assert [e.iteration for e in out.emitted] == [(i,) for i in range(6)]
    assert int(present(out.of("text")[0])) == 256  # the tiny vocabulary's <|im_start|>
    assert all(
        int(t) != 257 for t in all_present(out.of("text"))
    )  # <|im_end|> ends it, never emitted


def test_bagel_think_then_generate():
    options = {"think": True, "max_tokens": 3}
    out = run("bagel", [segment("text", "a cat")], ["image"], options, placed=bagel_ids())
    assert [e.walk for e in out.emitted] == ["decode"] * 3 + ["image_gen_cfg"]


def test_bagel_with_its_detokenizer_replies_in_text():
    """The detokenizer placed (every node, the interpreter's default): the reply is the text of
    the tokens the token-id run emits (tiny: bytes; BAGEL's special ids add nothing)."""
    inputs = [segment("image", IMAGE), segment("text", "what is this?")]
    ids = run("bagel", inputs, ["text"], {"max_tokens": 6}, placed=bagel_ids())
    out = run("bagel", inputs, ["text"], {"max_tokens": 6})
    assert out.ok, out.error
    assert {(e.flow, e.walk) for e in out.emitted} == {("text", "detokenize")}
    text = b"".join(bytes(present(e.value).tolist()) for e in out.emitted)
    assert (
        text
        == bytes(int(present(e.value)) for e in ids.emitted if int(present(e.value)) < 256)
        != b""
    )


def test_bagel_rejects_audio_input():
    out = run("bagel", [segment("audio", torch.zeros(10))], ["text"])
    assert out.error is not None and out.error.kind == "fail"
    assert "BAGEL takes text and image inputs" in out.error.message


# ---------------------------------------------------------------------------------- Qwen3-Omni
def test_qwen3_omni_text_and_audio_three_flows_side_by_side():
    m = model("qwen3_omni")
    code2wav = Recorder(load_nodes(m, {"Code2Wav"})["Code2Wav"])
    talker = Recorder(load_nodes(m, {"Talker"})["Talker"])
    inputs = [segment("text", "hello"), segment("audio", torch.linspace(-1, 1, 1600))]
    out = run(
        "qwen3_omni",
        inputs,
        ["text", "audio"],
        {"max_tokens": 6, "max_frames": 30},
        nodes={"Code2Wav": code2wav, "Talker": talker},
    )
    assert out.ok, out.error
    # text: one emit per token the Thinker chose (the reply's, then 5 decode steps'), each its
    # bytes; audio: the Talker speaks 30 frames (its cap), which make two Code2Wav chunks (25
    # new frames, then the padded residual [0, 30), the final one): 1920 samples a frame,
    # less 555 per chunk (the decoder's trim), the second chunk only its 5 new frames
    texts = [e for e in out.emitted if e.modality == "text"]
    assert len(texts) == 6 and all(present(e.value).dtype == torch.uint8 for e in texts)
    audio = Counter(tuple(present(e.value).shape) for e in out.emitted if e.modality == "audio")
    assert audio == {(25 * 1920 - 555,): 1, (30 * 1920 - 555 - 25 * 1920,): 1}
    infos = [c["codes"] for c in code2wav.chunks[: len(code2wav.chunks) // 2]]  # first run
    assert [(i.index, i.start, i.items, i.valid, i.size, i.final) for i in infos] == [
        (0, 0, 25, 25, 50, False),
        (1, 0, 30, 30, 50, True),
    ]
    # Thinker passes: 2 segments + the reply + 5 decode passes (its 6th token is never read
    # back); the Talker takes them (3 prefills, the last prefill, 4 decode steps), then the
    # empty final chunk and `after_done` chunks until its 30th frame: 1 + 29 decode steps + the
    # step that stops
    thinker_chunks = [c["thinker_states"] for c in talker.chunks[: len(talker.chunks) // 2]]
    assert len(thinker_chunks) == 3 + 1 + 30
    assert not any(c.final or c.empty for c in thinker_chunks[:8])  # full chunks, at once
    final = thinker_chunks[8]
    assert final.final and final.valid == 0 and final.size == 64 and not final.after_done
    assert all(c.after_done and c.valid == 0 for c in thinker_chunks[9:])


def test_qwen3_omni_text_only_runs_no_talker():
    out = run("qwen3_omni", [segment("text", "hello")], ["text"], {"max_tokens": 5})
    assert out.ok, out.error
    assert {(e.flow, e.walk, e.modality) for e in out.emitted} == {("text", "detokenize", "text")}
    assert len(out.emitted) == 5


def test_qwen3_omni_refuses_image_input():
    video = torch.zeros(2, 8, 8, 3, dtype=torch.uint8)
    out = run("qwen3_omni", [segment("video", video), segment("text", "what?")], ["text", "audio"])
    assert out.error is not None and out.error.kind == "fail"
    assert "takes text and audio inputs (no vision encoder)" in out.error.message


# ---------------------------------------------------------------------------------- Orpheus
@pytest.mark.parametrize(
    ("max_tokens", "windows"),
    [
        (35, 2),  # 35 tokens: windows [0,28), [7,35); nothing left over
        (41, 2),  # 41 tokens: the residual [14,41) is dropped
        (49, 4),  # 49 tokens: 4 windows
        (5, 0),  # 5 tokens: no full window; the empty final chunk runs nothing
    ],
)
def test_orpheus_tts_sliding_windows(max_tokens, windows):
    m = model("orpheus")
    snac = Recorder(load_nodes(m, {"snac_decoder"})["snac_decoder"])
    out = run(
        "orpheus",
        [segment("text", "hello")],
        ["audio"],
        {"max_tokens": max_tokens},
        nodes={"snac_decoder": snac},
    )
    assert out.ok, out.error
    # each window: the 2048 samples (one SNAC frame at 24 kHz) of its second frame
    assert shapes(out) == ({("codec", "snac_chunk", "audio", (2048,)): windows} if windows else {})
    infos = [c["window"] for c in snac.chunks[: len(snac.chunks) // 2]]  # first of the two runs
    assert [(i.start, i.items) for i in infos] == [(7 * j, 28) for j in range(windows)]
    # full windows are never final; the final chunk (under `drop`, always empty) runs nothing
    assert not any(i.final for i in infos)


def test_orpheus_takes_one_text_prompt():
    out = run("orpheus", [segment("text", "a"), segment("text", "b")], ["audio"])
    assert out.error is not None and out.error.kind == "fail"
    assert out.error.message == "Orpheus takes one text prompt"


# ---------------------------------------------------------------------------------- V-JEPA 2-AC
VIDEO = torch.arange(2 * 16 * 16 * 3).reshape(2, 16, 16, 3).remainder(255).to(torch.uint8)
ACTIONS = torch.linspace(-1, 1, 16 * 7).reshape(16, 7)
STATES = torch.linspace(0, 1, 16 * 7).reshape(16, 7)


def test_vjepa_single_prediction():
    seg = segment("video", VIDEO, actions=ACTIONS, states=STATES)
    out = run("vjepa2_ac", [seg], ["tensor"])
    assert shapes(out) == {("main", "prefill_video", "tensor", (16, 32)): 1}


@pytest.mark.parametrize("horizon", [1, 4, 15])  # frames 1 .. 15 take the 16 action rows
def test_vjepa_rollout_until_horizon(horizon):
    seg = segment("video", VIDEO, actions=ACTIONS, states=STATES)
    out = run("vjepa2_ac", [seg], ["tensor"], {"rollout": True, "horizon": horizon})
    assert out.ok, out.error
    assert shapes(out) == {("main", "prefill_video_rollout", "tensor", (horizon, 16, 32)): 1}
    streamed = run(
        "vjepa2_ac",
        [seg],
        ["tensor"],
        {"rollout": True, "stream_rollout": True, "horizon": horizon},
    )
    frames = all_present(streamed.of("tensor"))
    assert len(frames) == horizon
    assert torch.equal(
        torch.stack(frames), present(out.of("tensor")[0])
    )  # yield all = the emitted frames


def test_vjepa_mpc_planning():
    plans = torch.stack([torch.full((16, 7), float(k)) for k in range(4)])
    seg = segment("video", VIDEO, goal=VIDEO[:1], plans=plans, states=STATES)
    out = run("vjepa2_ac", [seg], ["action"])
    assert out.ok, out.error
    assert shapes(out) == {
        ("main", "prefill_video_mpc", "action", ()): 1,
        ("main", "prefill_video_mpc", "tensor", (4,)): 1,
    }
    best, costs = present(out.of("action")[0]), present(out.of("tensor")[0])
    assert best.dtype == torch.int64 and int(best) == int(costs.argmin())


# ---------------------------------------------------------------------------------- pi0.5
def test_pi05_action_chunk():
    images = torch.zeros(3, 16, 16, 3, dtype=torch.uint8)
    seg = segment("image", images, prompt="pick up the cup")  # text: the tiny tokenizer's
    out = run("pi05", [seg], ["action"])
    assert out.ok, out.error
    assert shapes(out) == {("main", "action_gen", "action", (50, 32)): 1}
    other = run_request(
        model("pi05"), make_request(model("pi05"), [seg], ["action"]), request_id="b"
    )
    assert not torch.equal(
        present(other.of("action")[0]), present(out.of("action")[0])
    )  # noise is per request


# ---------------------------------------------------------------------------------- failures
class Raising(Node):
    def forward_one(self, inputs, ctx):
        raise RuntimeError("out of cheese")


class WrongDtype(Node):
    def forward_one(self, inputs, ctx):
        return {"image_embeddings": torch.zeros(2, 64)}  # f32, declared bf16


def test_node_that_raises_fails_the_request_with_node_and_walk():
    m = model("pi05")
    nodes = {"vit_encoder": Raising(load_nodes(m, {"vit_encoder"})["vit_encoder"].ctx)}
    seg = segment("image", torch.zeros(1, 8, 8, 3, dtype=torch.uint8), prompt=torch.arange(3))
    out = run_request(m, make_request(m, [seg], ["action"]), nodes=nodes)
    assert out.error is not None and out.error.kind == "node"
    assert (out.error.node, out.error.walk, out.error.flow) == ("vit_encoder", "prefill", "main")
    assert "out of cheese" in out.error.message and "`vit_encoder`" in out.error.message
    assert out.emitted == []


def test_wrong_output_dtype_is_a_clear_error():
    m = model("pi05")
    nodes = {"vit_encoder": WrongDtype(load_nodes(m, {"vit_encoder"})["vit_encoder"].ctx)}
    seg = segment("image", torch.zeros(1, 8, 8, 3, dtype=torch.uint8), prompt=torch.arange(3))
    out = run_request(m, make_request(m, [seg], ["action"]), nodes=nodes)
    assert out.error is not None and out.error.kind == "output"
    assert "`image_embeddings`" in out.error.message and "bf16" in out.error.message
