"""The tiny decoder against `transformers`: same checkpoint, same logits (fp32, max abs < 1e-4).

Each case builds a random `LlamaForCausalLM` / `Qwen2ForCausalLM` (norms and biases perturbed so
they matter), saves it as safetensors, loads it into `LlamaDecoder`, and compares the logits of a
prefill and of 20 decode steps with the reference's logits over the whole sequence (one forward,
no cache): for one request, a ragged batch of 8, and 3 labels of one request forked from `main`.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch

transformers = pytest.importorskip("transformers")

from safetensors.torch import save_file  # noqa: E402

from wgc_models.layers.config import ConfigError, DecoderConfig  # noqa: E402
from wgc_models.layers.loading import CheckpointError, load_checkpoint  # noqa: E402
from wgc_models.llama.checkpoint import from_pretrained  # noqa: E402
from wgc_models.llama.engine import DecoderEngine  # noqa: E402
from wgc_models.llama.model import LlamaDecoder  # noqa: E402

TOL = 1e-4
STEPS = 20
VOCAB = 128
TINY: dict[str, Any] = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
)
LABELS = ("main", "cfg_text", "cfg_img")


def _hf(kind: str):
    if kind == "llama":
        cfg = transformers.LlamaConfig(**TINY, rope_theta=5000.0, tie_word_embeddings=False)
        return transformers.LlamaForCausalLM(cfg)
    cfg = transformers.Qwen2Config(**TINY, tie_word_embeddings=True)
    return transformers.Qwen2ForCausalLM(cfg)


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def pair(request, tmp_path_factory):
    torch.manual_seed(0)
    hf = _hf(request.param).eval()
    with torch.no_grad():  # perturb norms and biases (initialised to 1 / 0) so they count
        for name, p in hf.named_parameters():
            if "norm" in name or "bias" in name:
                p.add_(torch.randn_like(p) * 0.1)
    path = tmp_path_factory.mktemp(request.param)
    hf.save_pretrained(path)
    return hf, from_pretrained(path), path


def _reference(hf, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return hf(ids[None]).logits[0].float()


def _engine(model, page_size=4):
    return DecoderEngine.build(model, pages=512, page_size=page_size, labels=LABELS)


def test_config_reads_checkpoint(pair):
    _, ours, _ = pair
    cfg = ours.config
    assert cfg.num_kv_heads == 2 and cfg.head_dim == 16
    assert cfg.qkv_bias == (cfg.model_type == "qwen2")
    assert cfg.tie_word_embeddings == (cfg.model_type == "qwen2")
    if cfg.model_type == "llama":
        assert cfg.rope_theta == 5000.0
    else:
        assert ours.lm_head.weight is ours.model.embed_tokens.weight


def test_one_request(pair):
    hf, ours, _ = pair
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (13 + STEPS,), generator=g)
    ref = _reference(hf, ids)
    eng = _engine(ours)
    pre = eng.prefill([("r", "main")], [ids[:13]], all_logits=True)[0]
    err = (pre - ref[:13]).abs().max().item()
    for i in range(13, 13 + STEPS):
        step = eng.decode([("r", "main")], ids[i : i + 1])
        err = max(err, (step[0] - ref[i]).abs().max().item())
    assert err < TOL


def test_ragged_batch_of_8(pair):
    hf, ours, _ = pair
    g = torch.Generator().manual_seed(2)
    lens = [3, 17, 5, 11, 1, 8, 14, 6]
    seqs = [torch.randint(0, VOCAB, (n + STEPS,), generator=g) for n in lens]
    refs = [_reference(hf, s) for s in seqs]
    eng = _engine(ours)
    keys = [(f"r{i}", "main") for i in range(8)]
    pre = eng.prefill(keys, [s[:n] for s, n in zip(seqs, lens, strict=True)], all_logits=True)
    err = max((p - r[:n]).abs().max().item() for p, r, n in zip(pre, refs, lens, strict=True))
    for t in range(STEPS):
        toks = torch.stack([s[n + t] for s, n in zip(seqs, lens, strict=True)])
        out = eng.decode(keys, toks)
        for b, (r, n) in enumerate(zip(refs, lens, strict=True)):
            err = max(err, (out[b] - r[n + t]).abs().max().item())
    assert err < TOL
    eng.pool.check()


def test_three_labels_of_one_request(pair):
    hf, ours, _ = pair
    g = torch.Generator().manual_seed(3)
    prompt = torch.randint(0, VOCAB, (10,), generator=g)  # 10 tokens: a partial last page
    conts = [torch.randint(0, VOCAB, (STEPS,), generator=g) for _ in LABELS]
    refs = [_reference(hf, torch.cat([prompt, c])) for c in conts]
    eng = _engine(ours)
    eng.prefill([("req", "main")], [prompt])
    for label in LABELS[1:]:
        eng.fork("req", "main", label)
    keys = [("req", label) for label in LABELS]
    err = 0.0
    for t in range(STEPS):
        out = eng.decode(keys, torch.stack([c[t] for c in conts]))
        for b in range(3):
            err = max(err, (out[b] - refs[b][10 + t]).abs().max().item())
    assert err < TOL
    # the branches diverged after the fork: each label holds its own tokens
    assert len({tuple(eng.pool.page_table("req", lab)[-1:]) for lab in LABELS}) == 3
    eng.free("req")
    eng.pool.check()
    assert eng.pool.used_pages == 0


def test_static_decode_path_matches_reference(pair):
    """The capture path's static decode unit (padded page tables) against the reference."""
    hf, ours, _ = pair
    g = torch.Generator().manual_seed(4)
    lens = [2, 9, 4]
    seqs = [torch.randint(0, VOCAB, (n + 5,), generator=g) for n in lens]
    eng = _engine(ours)
    keys = [(f"s{i}", "main") for i in range(3)]
    eng.prefill(keys, [s[:n] for s, n in zip(seqs, lens, strict=True)])
    width = eng.width_for(32)
    specs = eng.decode_buffers(width)
    bufs = {k: torch.full((4, *s.dims), s.pad, dtype=s.dtype) for k, s in specs.items()}
    for t in range(5):
        for b, ((rid, lab), s, n) in enumerate(zip(keys, seqs, lens, strict=True)):
            slot = int(eng.pool.append(rid, lab, 1)[0])
            table = eng.pool.page_table(rid, lab)
            bufs["tokens"][b] = s[n + t]
            bufs["slots"][b] = slot
            bufs["positions"][b] = n + t
            bufs["kv_lens"][b] = n + t + 1
            bufs["block_tables"][b, : len(table)] = torch.tensor(table, dtype=torch.int32)
        out = eng.decode_unit(bufs)["logits"]
        for b, (s, n) in enumerate(zip(seqs, lens, strict=True)):
            ref = _reference(hf, s[: n + t + 1])[-1]
            assert (out[b] - ref).abs().max().item() < TOL


def test_width_forms_halve_the_page_table(pair):
    """A decode step's page-table forms: the width for the longest sequence and its halves,
    narrowest first, never below one page, never repeated."""
    eng = _engine(pair[1], page_size=4)
    assert eng.width_for(32) == 8
    assert eng.width_forms(32, 1) == (8,)
    assert eng.width_forms(32, 3) == (2, 4, 8)
    assert eng.width_forms(32, 9) == (1, 2, 4, 8)
    assert eng.width_forms(20, 2) == (2, 5)


# ---------------------------------------------------------------- loading and config errors


def test_sharded_checkpoint_loads(pair, tmp_path):
    _, ours, _ = pair
    state = {k: v.clone().contiguous() for k, v in ours.state_dict().items()}
    if ours.config.tie_word_embeddings:
        state.pop("lm_head.weight")
    names = sorted(state)
    half = len(names) // 2
    shards = {"a.safetensors": names[:half], "b.safetensors": names[half:]}
    for file, keys in shards.items():
        save_file({k: state[k] for k in keys}, str(tmp_path / file))
    index = {"weight_map": {k: f for f, ks in shards.items() for k in ks}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    fresh = LlamaDecoder(ours.config)
    optional = ("lm_head.weight",) if ours.config.tie_word_embeddings else ()
    load_checkpoint(fresh, tmp_path, optional=optional)
    for k, v in ours.state_dict().items():
        assert torch.equal(fresh.state_dict()[k], v), k


def test_strict_loading_names_every_problem(pair, tmp_path):
    _, ours, _ = pair
    state = {k: v.clone().contiguous() for k, v in ours.state_dict().items()}
    state.pop("lm_head.weight", None)
    state.pop("model.layers.1.mlp.up_proj.weight")
    state["model.layers.0.self_attn.extra.weight"] = torch.zeros(2)
    state["model.norm.weight"] = torch.ones(3)
    save_file(state, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(LlamaDecoder(ours.config), tmp_path, optional=("lm_head.weight",))
    msg = str(e.value)
    assert "missing keys (1): `model.layers.1.mlp.up_proj.weight`" in msg
    assert "unexpected keys (1): `model.layers.0.self_attn.extra.weight`" in msg
    assert "model.norm.weight: checkpoint (3,), model (64,)" in msg


def test_missing_checkpoint_is_clear(tmp_path):
    with pytest.raises(CheckpointError, match=r"no `model\.safetensors`"):
        load_checkpoint(torch.nn.Linear(2, 2), tmp_path)


def test_config_spellings():
    base = dict(TINY, num_hidden_layers=2, model_type="llama")
    old = DecoderConfig.from_dict(dict(base, rope_theta=123.0))
    new = DecoderConfig.from_dict(dict(base, rope_parameters={"rope_theta": 456.0}))
    assert (old.rope_theta, new.rope_theta) == (123.0, 456.0)
    l3 = DecoderConfig.from_dict(
        dict(base, rope_scaling={"rope_type": "llama3", "factor": 8.0}, rope_theta=5e5)
    )
    assert (l3.rope_type, l3.rope_factor) == ("llama3", 8.0)
    assert (old.max_position_embeddings, l3.max_position_embeddings) == (2048, 2048)
    long = DecoderConfig.from_dict(dict(base, max_position_embeddings=32768))
    assert long.max_position_embeddings == 32768
    with pytest.raises(ConfigError, match="rotary scaling `yarn` is not supported"):
        DecoderConfig.from_dict(dict(base, rope_scaling={"rope_type": "yarn"}))
    with pytest.raises(ConfigError, match="no `vocab_size`"):
        DecoderConfig.from_dict({k: v for k, v in base.items() if k != "vocab_size"})
    with pytest.raises(ConfigError, match="hidden_act `gelu`"):
        DecoderConfig.from_dict(dict(base, hidden_act="gelu"))


def test_llama3_rope_matches_transformers():
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from wgc_models.layers.rope import inv_freq

    scaling = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64,
        "rope_theta": 5e5,
    }
    hf_cfg = LlamaConfig(**TINY, rope_parameters=scaling, max_position_embeddings=512)
    ref, _ = ROPE_INIT_FUNCTIONS["llama3"](hf_cfg, "cpu")
    ours = inv_freq(DecoderConfig.from_dict(hf_cfg.to_dict()))
    assert torch.allclose(ours, ref.float(), rtol=1e-6, atol=0)
