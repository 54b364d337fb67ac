"""Qwen3-Omni's components against transformers' ``Qwen3OmniMoe*`` modules on the same weights.

A random tiny ``Qwen3OmniMoeForConditionalGeneration`` (`configs.qwen3_omni.TINY`) is saved with
``save_pretrained`` (the released layout: per-expert weights) and as its ``state_dict`` (the
runtime layout: fused experts); wgc's components load either by HF's names and match, in fp32
with max abs error ≤ 1e-4: the Thinker's logits, input embeddings and accept-layer hidden
states (a prefill and decode steps over the paged pool; with audio through the audio encoder),
the Talker's codec logits (its prefill, one step, the code predictor's logits of every group,
and a whole greedy run against ``talker.generate``: the same codes), and Code2Wav's waveform
(whole and chunked as the stream delivers it).
"""

from __future__ import annotations

import contextlib

import pytest
import torch

transformers = pytest.importorskip("transformers")

from tests.reference import checkpoints, qwen3_omni_reference  # noqa: E402
from tests.reference.speech import SpeechOptions  # noqa: E402
from wgc_models.layers.convert import merge_experts  # noqa: E402
from wgc_models.layers.loading import CheckpointError  # noqa: E402
from wgc_models.qwen3_omni.code2wav import Code2Wav  # noqa: E402
from wgc_models.qwen3_omni.config import NEWLINE, REAL, TINY, TINY_TOKENS  # noqa: E402
from wgc_models.qwen3_omni.moe import GATHER_PAIRS, MoeConfig, SparseMoeBlock  # noqa: E402
from wgc_models.qwen3_omni.omni_audio import out_lengths  # noqa: E402
from wgc_models.qwen3_omni.omni_config import OmniConfig  # noqa: E402
from wgc_models.qwen3_omni.omni_talker import Talker, TalkerEngine  # noqa: E402
from wgc_models.qwen3_omni.omni_thinker import Thinker, ThinkerEngine  # noqa: E402

TOL = 1e-4
T = TINY_TOKENS
PROMPT = [T["im_start"], T["user"], NEWLINE, 20, 21, 22, 23, T["im_end"], NEWLINE,
          T["im_start"], T["assistant"], NEWLINE]  # fmt: skip
SEQ = [("r", "main")]


@contextlib.contextmanager
def one_thread():
    """Tiny tensors: one intra-op thread (waking a second costs more than the op)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    with one_thread():
        path = tmp_path_factory.mktemp("omni")
        yield checkpoints.qwen3_omni(path, seed=0), path


@pytest.fixture(scope="module")
def thinker(ckpt):
    _, path = ckpt
    return Thinker.from_pretrained(path)


@pytest.fixture(scope="module")
def talker(ckpt):
    _, path = ckpt
    return Talker.from_pretrained(path)


def _thinker_engine(thinker):
    return ThinkerEngine.build(thinker, accept_hidden_layer=1, pages=32, page_size=4)


def _err(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return (a.float() - b.float()).abs().max().item()


# ---------------------------------------------------------------- loading


def test_both_checkpoint_layouts_load_alike(ckpt, tmp_path, thinker, talker):
    model, _ = ckpt
    runtime = tmp_path / "runtime"
    checkpoints.qwen3_omni(runtime, seed=0, runtime_layout=True)
    for ours, cls in ((thinker, Thinker), (talker, Talker)):
        other = cls.from_pretrained(runtime)
        want = ours.state_dict()
        assert all(torch.equal(v, want[k]) for k, v in other.state_dict().items())
    specials = [T["tts_bos"], T["tts_eos"], T["tts_pad"]]
    assert torch.equal(talker.tts, model.thinker.get_input_embeddings().weight[specials])


def test_incomplete_experts_are_refused():
    w = torch.zeros(2, 3)
    items = [(f"l.mlp.experts.{e}.{p}.weight", w) for e in (0, 1) for p in ("gate_proj", "up_proj")]
    items.append(("l.mlp.experts.0.down_proj.weight", w))
    with pytest.raises(CheckpointError, match="incomplete"):
        list(merge_experts(items))


def test_real_config_reads():
    cfg = OmniConfig.from_dict(transformers.Qwen3OmniMoeConfig(**REAL).to_dict())
    th, tk = cfg.thinker, cfg.talker
    assert (th.text.hidden_size, th.text.num_layers, th.text.head_dim) == (2048, 48, 128)
    assert (th.moe.num_experts, th.moe.top_k, th.moe.intermediate) == (128, 8, 768)
    assert (tk.text.hidden_size, tk.moe.shared_intermediate, tk.moe.top_k) == (1024, 768, 6)
    assert (tk.num_code_groups, tk.accept_hidden_layer, tk.codebook_size) == (16, 24, 2048)
    assert tk.suppressed() == tuple(i for i in range(2048, 3072) if i != 2150)
    assert cfg.code2wav.total_upsample == 1920 and cfg.code2wav.sliding_window == 72


# ---------------------------------------------------------------- MoE


def test_moe_paths_agree():
    """The gathered (decode) and per-expert (prefill) expert paths compute the same."""
    torch.manual_seed(0)
    cfg = OmniConfig.from_dict(TINY).talker
    block = SparseMoeBlock(cfg.text, MoeConfig(**{**_moe(cfg.moe), "top_k": 2}))
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0, 0.3)
        x = torch.randn(GATHER_PAIRS, cfg.text.hidden_size)
        idx, w = block.gate(x)
        gathered = block.experts._gathered(x, idx, w)
        per_expert = block.experts._per_expert(x, idx, w)
    assert _err(gathered, per_expert) <= 1e-5


def _moe(m: MoeConfig) -> dict:
    return {f: getattr(m, f) for f in MoeConfig.__dataclass_fields__}


# ---------------------------------------------------------------- Thinker


def test_thinker_matches(ckpt, thinker):
    model, _ = ckpt
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 240, (18,), generator=g)
    with torch.no_grad():
        ref = model.thinker(input_ids=ids[None], output_hidden_states=True)
    engine = _thinker_engine(thinker)
    p = engine.forward(SEQ, [ids[:11]])[0]
    err = max(
        _err(p.logits, ref.logits[0, 10]),
        _err(p.embeds, ref.hidden_states[0][0, :11]),
        _err(p.hidden, ref.hidden_states[1][0, :11]),
    )
    for i in range(11, 18):
        p = engine.forward(SEQ, [ids[i : i + 1]])[0]
        err = max(
            err, _err(p.logits, ref.logits[0, i]), _err(p.hidden[0], ref.hidden_states[1][0, i])
        )
    assert err <= TOL
    assert ref.logits.std().item() > 0.1  # logits that choose, not a flat line


def test_audio_encoder_and_thinker_with_audio(ckpt, thinker):
    model, _ = ckpt
    g = torch.Generator().manual_seed(2)
    lengths = [337, 130]  # 100-frame chunks, windows of 2 chunks, short tails
    feats = torch.randn(16, sum(lengths), generator=g)
    with torch.no_grad():
        ref = model.thinker.model.audio_tower(feats, feature_lens=torch.tensor(lengths))
    assert thinker.audio_tower is not None
    ours = thinker.audio_tower(feats, torch.tensor(lengths))
    assert _err(ours, ref.last_hidden_state) <= TOL
    # a prompt with the first audio's placeholders, through the Thinker
    n = int(out_lengths(torch.tensor(lengths[0]), 50))
    ids = torch.tensor([T["im_start"], T["user"], NEWLINE, T["audio_start"]] + [T["audio"]] * n
                       + [248, 30, T["im_end"]])  # fmt: skip
    with torch.no_grad():
        want = model.thinker(
            input_ids=ids[None],
            attention_mask=torch.ones(1, ids.numel(), dtype=torch.long),
            input_features=feats[None, :, : lengths[0]],
            feature_attention_mask=torch.ones(1, lengths[0], dtype=torch.long),
            output_hidden_states=True,
        )
    audio = thinker.audio_tower(feats[:, : lengths[0]], torch.tensor(lengths[:1]))
    p = _thinker_engine(thinker).forward(SEQ, [ids], [audio])[0]
    assert _err(p.logits, want.logits[0, -1]) <= TOL
    assert _err(p.hidden, want.hidden_states[1][0]) <= TOL
    assert thinker.multimodal(ids).sum().item() == n


# ---------------------------------------------------------------- Talker


@pytest.fixture(scope="module")
def talker_inputs(ckpt):
    """The Talker's prompt and text rows for a Thinker run, built by transformers' own code."""
    model, _ = ckpt
    opts = SpeechOptions(max_new_tokens=6)
    tokens, embeds, hidden = qwen3_omni_reference.think(model, PROMPT, opts)
    speaker = model.config.talker_config.speaker_id["ethan"]
    return qwen3_omni_reference.talker_inputs(model, PROMPT, tokens, embeds, hidden, speaker)


def test_talker_step_and_code_predictor(ckpt, talker, talker_inputs):
    model, _ = ckpt
    inputs, trailing, _ = talker_inputs
    engine = TalkerEngine.build(talker, pages=16, page_size=8)
    cache = transformers.DynamicCache(config=model.config.talker_config.text_config)
    with torch.no_grad():
        ref = model.talker(
            inputs_embeds=inputs, cache=cache, use_cache=True, output_hidden_states=True
        )
    logits, hidden = engine.forward(SEQ, [inputs[0]])
    assert _err(logits[0], ref.logits[0, -1]) <= TOL
    c0 = ref.logits[:, -1].argmax(-1)
    # the code predictor: every group's logits, given the same codes
    seen: list[torch.Tensor] = []
    codes, embed = engine.predictor.frames(
        hidden, c0, talker.model.codec_embedding(c0),
        on_logits=lambda j, lg: seen.append(lg[0]),
    )  # fmt: skip
    cp = model.talker.code_predictor
    pcache = transformers.DynamicCache(config=model.config.talker_config.code_predictor_config)
    past = ref.hidden_states[0][-1][:, -1:]
    with torch.no_grad():
        first = model.talker.get_input_embeddings()(c0[None])
        out = cp(inputs_embeds=torch.cat((past, first), 1), cache=pcache, use_cache=True)
        for j in range(1, 16):
            assert _err(seen[j - 1], out.logits[0, -1]) <= TOL
            if j < 15:
                code = codes[:, j : j + 1]
                out = cp(input_ids=code, cache=pcache, use_cache=True, generation_steps=j)
    # one decode step on the summed embeddings plus the first text row
    step_in = embed + trailing[0, :1]
    with torch.no_grad():
        ref2 = model.talker(inputs_embeds=step_in[None], cache=cache, use_cache=True,
                            output_hidden_states=True, generation_step=0)  # fmt: skip
    logits2, _ = engine.forward(SEQ, [step_in])
    assert _err(logits2[0], ref2.logits[0, -1]) <= TOL


def test_talker_greedy_run_matches_generate(ckpt, talker, talker_inputs):
    model, _ = ckpt
    inputs, trailing, pad = talker_inputs
    tcfg = model.config.talker_config
    frames = 20
    with torch.no_grad():
        res = model.talker.generate(
            inputs_embeds=inputs, trailing_text_hidden=trailing, tts_pad_embed=pad,
            attention_mask=torch.ones(inputs.shape[:2], dtype=torch.long), do_sample=False,
            max_new_tokens=frames + 1, eos_token_id=tcfg.codec_eos_token_id,
            suppress_tokens=list(talker.config.suppressed()), repetition_penalty=1.0,
            output_hidden_states=True, output_logits=True, return_dict_in_generate=True,
        )  # fmt: skip
    want_codes = torch.stack([h[-1][0] for h in res.hidden_states if h[-1] is not None])
    engine = TalkerEngine.build(talker, pages=16, page_size=8)
    logits, hidden = engine.forward(SEQ, [inputs[0]])
    suppress = torch.tensor(talker.config.suppressed())
    err, codes = 0.0, []
    for t in range(frames + 1):
        err = max(err, _err(logits[0], res.logits[t][0]))
        c0 = logits.index_fill(-1, suppress, float("-inf")).argmax(-1)
        if t == frames or int(c0) == tcfg.codec_eos_token_id:
            break
        frame, embed = engine.frame(hidden, c0)
        codes.append(frame[0])
        text = trailing[0, t : t + 1] if t < trailing.shape[1] else pad[0]
        logits, hidden = engine.forward(SEQ, [embed + text])
    assert err <= TOL
    assert torch.equal(torch.stack(codes), want_codes)
    assert len(codes) >= 5  # a run of several frames, to its end-of-speech or the cap


# ---------------------------------------------------------------- Code2Wav


def test_code2wav_matches(ckpt):
    model, path = ckpt
    ours = Code2Wav.from_pretrained(path)
    g = torch.Generator().manual_seed(3)
    codes = torch.randint(0, 32, (2, 16, 60), generator=g)
    with torch.no_grad():
        want = model.code2wav(codes)
        chunked = model.code2wav.chunked_decode(codes[:1], chunk_size=25, left_context_size=25)
    assert _err(ours(codes), want) <= TOL
    assert want.shape[-1] == ours.samples(60) == 60 * 1920 - 555  # as the released model
    assert _err(ours.chunked_decode(codes[0].T), chunked[0, 0]) <= TOL
    assert want.std().item() > 0.05 and (want.abs() >= 1).float().mean().item() < 0.05
