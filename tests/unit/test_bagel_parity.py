"""BAGEL's components against their references, on the same (seeded random) weights.

* the backbone's understanding path (`Qwen2MoT`, qk-norm off) equals transformers'
  ``Qwen2ForCausalLM`` loaded from its own ``save_pretrained`` checkpoint, prefilled in two
  pieces over the paged pool;
* the generation expert routes: a latent token's result changes with the ``_moe_gen`` weights
  and a text token's does not;
* the ViT equals ``SiglipVisionModel``; the VAE equals diffusers' ``AutoencoderKL`` with FLUX's
  configuration (≤ 1e-4, fp32);
* the LLM node's denoising (three labels of one pool, BAGEL's guidance and Euler step) equals a
  dense hand-written reference that runs three separate full passes per step (≤ 1e-4);
* a BAGEL checkpoint written under its module names loads strictly into the nodes' parts.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from wgc_models.bagel.autoencoder_kl import AutoencoderKL, VaeConfig
from wgc_models.bagel.config import TINY
from wgc_models.bagel.model import Bagel, Guidance, Schedule, euler, guide
from wgc_models.bagel.qwen2_navit import MoTConfig, Qwen2MoT, Qwen2MoTDecoderLayer
from wgc_models.layers.block_attention import Block, DenseBlocks, DenseKV, PagedBlocks
from wgc_models.layers.convert import load_converted
from wgc_models.layers.loading import CheckpointError
from wgc_models.layers.random_init import init_seeded
from wgc_models.layers.siglip import SiglipConfig, SiglipVision
from wgc_runtime.engines.kv_pool import PagedKVPool

ROOT = Path(__file__).resolve().parents[2]
TOL = 1e-4


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny tensors: one intra-op thread (waking a second costs more than the op)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _randomize(module: torch.nn.Module, seed: int = 0) -> None:
    with torch.no_grad():
        g = torch.Generator().manual_seed(seed)
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)


def test_the_understanding_path_equals_qwen2_for_causal_lm(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    llm = TINY.llm
    hf_cfg = transformers.Qwen2Config(
        vocab_size=llm.vocab_size,
        hidden_size=llm.hidden_size,
        intermediate_size=llm.intermediate_size,
        num_hidden_layers=llm.num_hidden_layers,
        num_attention_heads=llm.num_attention_heads,
        num_key_value_heads=llm.num_key_value_heads,
        rope_theta=llm.rope_theta,
        tie_word_embeddings=False,
    )
    ref = transformers.Qwen2ForCausalLM(hf_cfg).eval()
    _randomize(ref)
    ref.save_pretrained(tmp_path)
    raw = json.loads((tmp_path / "config.json").read_text())
    mot = Qwen2MoT(MoTConfig.from_dict({**raw, "qk_norm": False})).eval()
    gen = [k for k in mot.state_dict() if "_moe_gen" in k]  # a Qwen2 checkpoint has no expert
    load_converted(mot, tmp_path, optional=gen)
    ids = torch.randint(0, llm.vocab_size, (13,), generator=torch.Generator().manual_seed(1))
    pool = PagedKVPool(layers=2, kv_heads=2, head_dim=llm.head_dim, pages=16, page_size=4)
    with torch.no_grad():
        want = ref(ids[None]).logits[0]
        got = []
        for s, e in ((0, 8), (8, 13)):  # two prefill pieces: the second reads the first's pages
            step = PagedBlocks(pool, [Block("r", "main", e - s, causal=True)])
            got.append(mot.logits(mot(mot.embed(ids[s:e]), torch.arange(s, e), step)))
    assert (torch.cat(got) - want).abs().max() <= TOL


def test_the_generation_expert_takes_the_latent_tokens_only() -> None:
    mot = init_seeded(Qwen2MoT(TINY.llm), 3).eval()
    x = torch.randn(6, TINY.llm.hidden_size, generator=torch.Generator().manual_seed(2))
    gen = torch.tensor([False, False, True, True, True, False])

    def run() -> torch.Tensor:
        step = DenseBlocks(DenseKV(2), [Block("r", "main", 6)])
        return mot(x, torch.zeros(6, dtype=torch.long), step, gen)

    with torch.no_grad():
        before = run()
        layer = mot.model.layers[1]
        assert isinstance(layer, Qwen2MoTDecoderLayer)
        layer.mlp_moe_gen.down_proj.weight.add_(0.5)
        after = run()
    # the expert's MLP changes the latent rows; the text rows never read it (their attention
    # reads the latents' keys and values, which the second layer's MLP does not touch)
    assert torch.equal(before[~gen], after[~gen])
    assert not torch.allclose(before[gen], after[gen])


def test_the_vit_equals_siglip_vision_model(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    v = TINY.vit
    ref_cfg = transformers.SiglipVisionConfig(
        hidden_size=v.hidden_size,
        intermediate_size=v.intermediate_size,
        num_hidden_layers=v.num_hidden_layers,
        num_attention_heads=v.num_attention_heads,
        image_size=v.image_size,
        patch_size=v.patch_size,
        vision_use_head=False,
    )
    ref = transformers.SiglipVisionModel(ref_cfg).eval()
    _randomize(ref, 4)
    ref.save_pretrained(tmp_path)
    mine = SiglipVision(SiglipConfig.from_dict(json.loads((tmp_path / "config.json").read_text())))
    load_converted(mine.eval(), tmp_path)
    px = torch.rand(2, 3, v.image_size, v.image_size) * 2 - 1
    with torch.no_grad():
        want = ref(pixel_values=px).last_hidden_state
        assert (mine(px) - want).abs().max() <= TOL


def test_the_vae_equals_diffusers_autoencoder_kl_with_flux_settings(tmp_path: Path) -> None:
    diffusers = pytest.importorskip("diffusers")
    cfg = TINY.vae
    assert (VaeConfig().latent_channels, VaeConfig().scaling_factor) == (16, 0.3611)  # FLUX
    ref = diffusers.AutoencoderKL(**cfg.diffusers()).eval()
    _randomize(ref, 5)
    ref.save_pretrained(tmp_path)
    mine = AutoencoderKL(VaeConfig.from_dict(json.loads((tmp_path / "config.json").read_text())))
    load_converted(mine.eval(), tmp_path)
    x = torch.rand(1, 3, 32, 32) * 2 - 1
    with torch.no_grad():
        mean = ref.encode(x).latent_dist.mode()
        z = (mean - cfg.shift_factor) * cfg.scaling_factor
        assert (mine.encode(x) - z).abs().max() <= TOL
        out = ref.decode(z / cfg.scaling_factor + cfg.shift_factor).sample
        assert (mine.decode(z) - out).abs().max() <= TOL


# ---------------------------------------------------------------------------- CFG and Euler
def _llm_node():
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from wgc.interp import load_model, load_nodes
    from wgc.interp.interp import kv_pools
    from wgc_runtime.contract.spec import KvCacheSpec

    model = load_model(str(ROOT / "wgc_models" / "bagel" / "bagel.walk"))
    node = load_nodes(model, {"LLM"})["LLM"]
    return node, kv_pools(model, KvCacheSpec(pages=256))


def _call(node, pools, walk: str, inputs: dict, writes: set[str], state: dict):
    from wgc_runtime.contract.node import CallContext, Work

    ctx = CallContext(
        request_id="r", walk=walk, call=0, state=state, writes=frozenset(writes),
        kv=pools.handle("LLM", "r"),
    )  # fmt: skip
    (out,) = node.forward([Work(inputs, ctx)])
    assert not isinstance(out, Exception), out
    return out


def _dense_velocity(model: Bagel, context: list, x: torch.Tensor, t: float) -> torch.Tensor:
    """One full pass from scratch, no cache: the context blocks (text causal, images full,
    each image at one position) then the latent block, as ONE sequence with its mask."""
    blocks = [*context, model.image_block(model.latent_tokens(x, t), context_rope(context), True)]
    xs = torch.cat([b.x for b in blocks])
    pos = torch.cat([b.positions for b in blocks])
    gen = torch.cat([b.gen for b in blocks])
    groups: list[int] = []
    for b in blocks:
        groups += [1] * b.x.shape[0] if b.causal else [b.x.shape[0]]
    step = DenseBlocks(DenseKV(2), [Block("dense", "x", xs.shape[0], groups=tuple(groups))])
    hidden = model.language_model(xs, pos, step, gen)
    return model.velocity(hidden[-blocks[-1].x.shape[0] :])


def context_rope(context: list) -> int:
    return context[-1].next_rope if context else 0


def test_cfg_over_three_labels_equals_three_dense_passes() -> None:
    node, pools = _llm_node()
    model = node.model  # pyright: ignore[reportAttributeAccessIssue] (the BAGEL LLM node's model)
    state: dict = {}
    with torch.no_grad():
        for text in (b"a red", b" cube"):  # two segments: cfg_text drops only the second
            ids = torch.tensor(list(text))
            _call(
                node, pools, "prefill_text", {"text_inputs": ids}, {"new_token", "context"}, state
            )
        # the same contexts, by hand: main has both texts, cfg_text the first, cfg_img both
        first = model.text_block(torch.tensor(list(b"a red")), 0)
        second = model.text_block(torch.tensor(list(b" cube")), first.next_rope)
        contexts = {"main": [first, second], "cfg_text": [first], "cfg_img": [first, second]}
        g = Guidance(4.0, 1.0)
        sched = Schedule(int(node.config["steps"]), 3.0)
        x = torch.randn(16, 16, generator=torch.Generator().manual_seed(7))
        ref = x.clone()
        for i in (0, 1, 30):  # inside and outside the guidance interval
            out = _call(
                node, pools, "image_gen",
                {"latents": x, "time_index": torch.tensor(i)}, {"latents", "time_index"}, state,
            )  # fmt: skip
            t, dt = sched.at(i)
            vs = {lb: _dense_velocity(model, c, ref, t) for lb, c in contexts.items()}
            ref = euler(ref, guide(vs["main"], vs["cfg_text"], vs["cfg_img"], g, t), dt)
            assert (out["latents"] - ref).abs().max() <= TOL, i
            assert int(out["time_index"]) == i + 1
            x = out["latents"]


def test_guidance_is_bagels_formula() -> None:
    v, vt, vi = (torch.randn(5, 8, generator=torch.Generator().manual_seed(s)) for s in (1, 2, 3))
    g = Guidance(4.0, 2.0, (0.0, 1.0), "global", 0.0)
    mixed = vi + 2.0 * ((vt + 4.0 * (v - vt)) - vi)
    want = mixed * (v.norm() / (mixed.norm() + 1e-8)).clamp(0.0, 1.0)
    assert torch.allclose(guide(v, vt, vi, g, 0.5), want)
    assert torch.equal(guide(v, vt, vi, Guidance(), 0.2), v)  # outside [0.4, 1]: no guidance
    times = Schedule(5, 3.0).times()
    assert torch.allclose(times, 3 * torch.linspace(1, 0, 5) / (1 + 2 * torch.linspace(1, 0, 5)))


# ---------------------------------------------------------------------------- loading
def test_a_bagel_checkpoint_loads_into_the_nodes_parts(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    full = init_seeded(Bagel(TINY), 9)
    save_file({k: v.contiguous() for k, v in full.state_dict().items()}, tmp_path / "m.safetensors")
    llm = Bagel(TINY, vit=False)
    load_converted(
        llm, tmp_path / "m.safetensors", skip=("vit_model.", "connector.", "vit_pos_embed.")
    )
    assert torch.equal(llm.llm2vae.weight, full.llm2vae.weight)
    vit = Bagel(TINY, llm=False)
    with pytest.raises(CheckpointError, match="unexpected keys"):  # strict: nothing is dropped
        load_converted(vit, tmp_path / "m.safetensors")
