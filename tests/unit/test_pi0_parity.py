"""π0 / π0.5 (`wgc_models.pi05.model`) against transformers' ``PI0ForConditionalGeneration``
for what they share, and π0.5's differences against their description.

* π0 (``pi05=False``) loaded from ``PI0ForConditionalGeneration.save_pretrained`` (openpi's /
  LeRobot's names): the prefix's keys and values in the pool equal HF's cache, a denoising
  step's velocity equals HF's ``forward``, and ten steps equal ``sample_actions`` (≤ 1e-4);
* π0.5: a step equals a dense hand-written reading of its description — no state token, the
  action tokens alone over the prefix, time through adaptive RMSNorm (scale, shift, gated
  residuals) — and the example's nodes load the HF-layout checkpoint strictly.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from wgc_models.layers.block_attention import Block, PagedBlocks
from wgc_models.layers.convert import load_converted
from wgc_models.layers.random_init import init_seeded
from wgc_models.pi05.config import TINY
from wgc_models.pi05.gemma import GemmaLayer
from wgc_models.pi05.model import Pi0, Pi0Config, sincos
from wgc_runtime.engines.kv_pool import PagedKVPool

ROOT = Path(__file__).resolve().parents[2]
TOL = 1e-4
CAMS, CHUNK, DIM = 2, 5, 6


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny tensors: one intra-op thread (waking a second costs more than the op)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _hf_config(transformers):
    v, t, x = TINY.vision, TINY.text, TINY.expert
    return transformers.PI0Config(
        vlm_config={
            "model_type": "paligemma",
            "text_config": {
                "model_type": "gemma",
                "hidden_size": t.hidden_size,
                "num_hidden_layers": t.num_hidden_layers,
                "intermediate_size": t.intermediate_size,
                "num_attention_heads": t.num_attention_heads,
                "num_key_value_heads": t.num_key_value_heads,
                "head_dim": t.head_dim,
                "vocab_size": t.vocab_size,
            },
            "vision_config": {
                "model_type": "siglip_vision_model",
                "hidden_size": v.hidden_size,
                "intermediate_size": v.intermediate_size,
                "num_hidden_layers": v.num_hidden_layers,
                "num_attention_heads": v.num_attention_heads,
                "patch_size": v.patch_size,
                "image_size": v.image_size,
                "vision_use_head": False,
            },
            "projection_dim": t.hidden_size,
            "image_token_id": t.vocab_size - 1,
        },
        dit_config={
            "model_type": "gemma",
            "hidden_size": x.hidden_size,
            "num_hidden_layers": x.num_hidden_layers,
            "intermediate_size": x.intermediate_size,
            "num_attention_heads": x.num_attention_heads,
            "num_key_value_heads": x.num_key_value_heads,
            "head_dim": x.head_dim,
        },
        chunk_size=CHUNK,
        max_state_dim=DIM,
        max_action_dim=DIM,
    )


@pytest.fixture(scope="module")
def hf_pi0(tmp_path_factory):
    transformers = pytest.importorskip("transformers")
    ref = transformers.PI0ForConditionalGeneration(_hf_config(transformers)).eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(torch.randn(p.shape, generator=_g(1)) * 0.2)
    path = tmp_path_factory.mktemp("pi0")
    ref.save_pretrained(path)
    return ref, path


def _observation():
    s = TINY.vision.image_size
    px = torch.randn(1, CAMS, 3, s, s, generator=_g(2))
    text = torch.randint(0, TINY.text.vocab_size - 1, (7,), generator=_g(3))
    return px, text


def test_pi0_prefix_and_denoising_equal_transformers(hf_pi0) -> None:
    ref, path = hf_pi0
    cfg = Pi0Config.from_dict(json.loads((path / "config.json").read_text()))
    assert not cfg.pi05  # transformers' config describes π0
    # transformers' PaliGemma puts the prefix at positions 1 … P (openpi, which the component
    # follows by default, at 0 … P-1: tests/unit/test_pi05_openpi.py)
    cfg = dataclasses.replace(cfg, prefix_position=1)
    mine = Pi0(cfg).eval()
    load_converted(mine, path, optional=("paligemma_with_expert.gemma_expert.lm_head.weight",))
    px, text = _observation()
    patches = (TINY.vision.image_size // TINY.vision.patch_size) ** 2
    ids = torch.cat([torch.full((CAMS * patches,), TINY.text.vocab_size - 1), text])[None]
    cams = torch.ones(1, CAMS, dtype=torch.bool)
    state = torch.randn(1, DIM, generator=_g(4))
    noise = torch.randn(1, CHUNK, DIM, generator=_g(5))
    t = torch.tensor([0.7])
    tk = TINY.text
    pool = PagedKVPool(layers=2, kv_heads=tk.num_key_value_heads, head_dim=tk.head_dim, pages=64)
    with torch.no_grad():
        prefix = mine.prefix_embeddings(mine.encode_images(px[0]), text)
        n = prefix.shape[0]
        pre_pos, suf_pos = cfg.positions(n)
        mine.prefill(prefix, pre_pos, PagedBlocks(pool, [Block("r", "main", n)]))
        cache = ref.model.vlm(
            inputs_embeds=ref.model.embed_prefix(ids, px, cams),
            token_type_ids=torch.zeros(1, n, dtype=torch.long),
            use_cache=True,
        ).cache
        for layer in range(2):
            k_ref = cache.layers[layer].keys[0].transpose(0, 1)
            assert (pool.gather("r", "main", layer)[0] - k_ref).abs().max() <= TOL

        def step() -> PagedBlocks:
            return PagedBlocks(pool, [Block("r", "main", 1 + CHUNK, False, groups=(1, CHUNK))])

        want = ref(
            state=state, noise=noise, timestep=t, input_ids=ids, pixel_values=px,
            pixel_attention_mask=cams,
        ).logits  # fmt: skip
        assert (mine.velocity(noise, t, suf_pos, step(), state) - want).abs().max() <= TOL
        acts = ref.sample_actions(
            state=state, input_ids=ids, pixel_values=px, noise=noise, pixel_attention_mask=cams
        )
        x = noise
        for i in range(10):
            v = mine.velocity(x, torch.tensor([1.0 - i / 10]), suf_pos, step(), state)
            x = mine.euler(x, v, 10)
        assert (x - acts).abs().max() <= TOL
    assert pool.seq_len("r", "main") == n  # the suffix is never cached


def _dense_pi05_velocity(m: Pi0, prefix: torch.Tensor, x: torch.Tensor, t: float):
    """π0.5's step written out from its description, densely: the language model over the
    prefix (bidirectional), then the expert over the action tokens — every norm adaptive on
    the time, every residual gated — attending to the prefix's keys and values and its own."""
    cfg, lm, ex = m.config, m.language_model, m.expert
    emb = sincos(torch.tensor([t]), cfg.expert.hidden_size, 4e-3, 4.0)
    cond = F.silu(m.time_mlp_out(F.silu(m.time_mlp_in(emb))))  # [1, width]
    pre_pos, suf_pos = cfg.positions(prefix.shape[0])

    def rms(x, eps=1e-6):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)

    def ada(norm, x):
        scale, shift, gate = norm.dense(cond).chunk(3, dim=-1)
        return rms(x) * (1 + scale) + shift, gate

    def rope(x, pos):
        d = x.shape[-1]
        inv = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
        ang = pos.float()[:, None] * inv[None]
        cos, sin = (
            torch.cat((ang, ang), -1).cos()[:, None],
            torch.cat((ang, ang), -1).sin()[:, None],
        )
        half = torch.cat((-x[..., d // 2 :], x[..., : d // 2]), -1)
        return x * cos + half * sin

    def qkv(attn, h, pos, heads, kv):
        d = attn.head_dim
        q = rope(attn.q_proj(h).view(-1, heads, d), pos)
        k = rope(attn.k_proj(h).view(-1, kv, d), pos)
        return q, k, attn.v_proj(h).view(-1, kv, d)

    def attend(q, k, v):
        g = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
        w = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(q.shape[-1])
        return torch.einsum("hqk,khd->qhd", w.softmax(-1), v).reshape(q.shape[0], -1)

    h, prefix_kv = prefix, []
    tt = cfg.text
    for layer in lm.layers:  # the prefix: plain Gemma norms, full attention
        assert isinstance(layer, GemmaLayer)
        a = rms(h) * (1 + layer.input_layernorm.weight)
        q, k, v = qkv(layer.self_attn, a, pre_pos, tt.num_attention_heads, tt.num_key_value_heads)
        prefix_kv.append((k, v))
        h = h + layer.self_attn.o_proj(attend(q, k, v))
        a = rms(h) * (1 + layer.post_attention_layernorm.weight)
        h = h + layer.mlp(a)
    y = m.action_in_proj(x[0])  # the action tokens alone: no state token
    xe = cfg.expert
    for layer, (pk, pv) in zip(ex.layers, prefix_kv, strict=True):
        assert isinstance(layer, GemmaLayer)
        a, gate = ada(layer.input_layernorm, y)
        q, k, v = qkv(layer.self_attn, a, suf_pos, xe.num_attention_heads, xe.num_key_value_heads)
        y = y + gate * layer.self_attn.o_proj(attend(q, torch.cat((pk, k)), torch.cat((pv, v))))
        a, gate = ada(layer.post_attention_layernorm, y)
        y = y + gate * layer.mlp(a)
    out, _ = ada(ex.norm, y)
    return m.action_out_proj(out)


def test_a_pi05_step_is_its_description() -> None:
    m = init_seeded(Pi0(TINY), 6).eval()
    assert not hasattr(m, "state_proj") and hasattr(m, "time_mlp_in")
    px, text = _observation()
    x = torch.randn(1, TINY.chunk_size, TINY.max_action_dim, generator=_g(7))
    tk = TINY.text
    pool = PagedKVPool(layers=2, kv_heads=tk.num_key_value_heads, head_dim=tk.head_dim, pages=64)
    with torch.no_grad():
        prefix = m.prefix_embeddings(m.encode_images(px[0]), text)
        pre_pos, suf_pos = m.config.positions(prefix.shape[0])
        m.prefill(prefix, pre_pos, PagedBlocks(pool, [Block("r", "main", prefix.shape[0])]))
        for t in (1.0, 0.4):
            step = PagedBlocks(pool, [Block("r", "main", len(suf_pos), False)])
            got = m.velocity(x, torch.tensor([t]), suf_pos, step)
            assert (got[0] - _dense_pi05_velocity(m, prefix, x, t)).abs().max() <= TOL


def test_the_example_nodes_load_the_transformers_layout(hf_pi0, tmp_path: Path) -> None:
    """The nodes' loader reads the HF-layout checkpoint by name, strictly: π0.5's extra weights
    are required (a π0 checkpoint lacks them), and with them it loads."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from wgc_models.layers.loading import CheckpointError
    from wgc_models.pi05.nodes import load_policy, load_vision

    _, path = hf_pi0
    config = {"model": "tiny", "checkpoint": str(path), "seed": 0}
    with pytest.raises(CheckpointError, match="missing keys"):
        load_policy("LLM", config, torch.device("cpu"))  # tiny π0.5 vs a π0 file of other sizes
    vision = Pi0(TINY)  # a π0.5 checkpoint at the tiny sizes, saved under the HF names
    init_seeded(vision, 8)
    from safetensors.torch import save_file

    save_file(
        {k: v.contiguous() for k, v in vision.state_dict().items()}, tmp_path / "model.safetensors"
    )
    config = {"model": "tiny", "checkpoint": str(tmp_path), "seed": 0}
    policy = load_policy("LLM", config, torch.device("cpu"))
    assert torch.equal(policy.time_mlp_in.weight, vision.time_mlp_in.weight)
    tower = load_vision("vit_encoder", config, torch.device("cpu"))
    got = tower.multi_modal_projector.linear.weight
    assert torch.equal(
        got, vision.paligemma_with_expert.paligemma.model.multi_modal_projector.linear.weight
    )
