"""π0.5 against an independent reading of openpi's ``PI0Pytorch`` (``pi05=True``), on checkpoints
named as openpi and LeRobot publish them.

The reference below is written from openpi's description of π0.5, not from the component:

* **one joint sequence** ``[prefix; suffix]`` per denoising step, with big_vision's attention
  rule: token ``i`` sees token ``j`` iff ``cumsum(ar)[j] <= cumsum(ar)[i]``; the prefix (every
  camera's image tokens, then the prompt's token embeddings times ``√width``) has ``ar = 0``
  (one bidirectional block), the suffix (the action tokens ``action_in_proj(x)``, no state token)
  ``ar = [1, 0, …]`` (one block that sees the prefix and itself); rotary positions are
  ``cumsum(pad_mask) - 1``, so the prefix sits at ``0 … P-1`` and the suffix after it;
* **two experts, one attention**: each layer computes q, k, v with the language model's weights
  for prefix tokens and the action expert's for suffix tokens, concatenates them, applies rope,
  attends once and splits the output back to each expert's ``o_proj`` and MLP;
* **adaRMS on the flow time** in the expert only: ``cond = silu(time_mlp_out(silu(time_mlp_in(
  sincos(t)))))``; each expert norm is ``rms(x) · (1 + scale) + shift`` with ``scale, shift,
  gate = dense(cond)`` and its residual adds ``gate · out``; the language model keeps Gemma's
  ``rms(x) · (1 + weight)`` and plain residuals;
* **flow**: ``x`` from noise at ``t = 1``, ten Euler steps ``x += dt · v`` with ``dt = -1/10``;
  ``v = action_out_proj`` of the suffix's outputs after the expert's final (adaptive) norm.

The vision tower is transformers' own ``SiglipVisionModel`` on the same weights. The component is
loaded from the files through the example's loaders, strictly.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from wgc_models.layers.block_attention import Block, DenseBlocks, DenseKV
from wgc_models.layers.loading import CheckpointError
from wgc_models.pi05.config import TINY
from wgc_models.pi05.model import Pi0

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from wgc_models.pi05.nodes import load_policy, load_vision  # noqa: E402

CAMS, PROMPT, STEPS = 2, 7, 10
PALI = "paligemma_with_expert.paligemma."
EXPERT = "paligemma_with_expert.gemma_expert."


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _siglip_config():
    transformers = pytest.importorskip("transformers")
    v = TINY.vision
    return transformers.SiglipVisionConfig(
        hidden_size=v.hidden_size,
        intermediate_size=v.intermediate_size,
        num_hidden_layers=v.num_hidden_layers,
        num_attention_heads=v.num_attention_heads,
        image_size=v.image_size,
        patch_size=v.patch_size,
        vision_use_head=False,
    )


def openpi_state_dict() -> dict[str, torch.Tensor]:
    """Random weights under openpi's names and shapes (``PI0Pytorch.state_dict()``, pi05)."""
    transformers = pytest.importorskip("transformers")
    shapes: dict[str, tuple[int, ...]] = {}
    tower = transformers.SiglipVisionModel(_siglip_config())
    for name, p in tower.state_dict().items():  # under vision_model. as openpi's 4.53 saves it
        name = name if name.startswith("vision_model.") else f"vision_model.{name}"
        shapes[f"{PALI}model.vision_tower.{name}"] = tuple(p.shape)
    t, x, v = TINY.text, TINY.expert, TINY.vision
    shapes[f"{PALI}model.multi_modal_projector.linear.weight"] = (t.hidden_size, v.hidden_size)
    shapes[f"{PALI}model.multi_modal_projector.linear.bias"] = (t.hidden_size,)
    shapes[f"{PALI}model.language_model.embed_tokens.weight"] = (t.vocab_size, t.hidden_size)
    shapes[f"{PALI}lm_head.weight"] = (t.vocab_size, t.hidden_size)
    shapes[f"{EXPERT}lm_head.weight"] = (t.vocab_size, x.hidden_size)
    for root, c, ada in ((f"{PALI}model.language_model.", t, False), (f"{EXPERT}model.", x, True)):
        w, d = c.hidden_size, c.head_dim
        norm = {"dense.weight": (3 * w, w), "dense.bias": (3 * w,)} if ada else {"weight": (w,)}
        for i in range(c.num_hidden_layers):
            at = f"{root}layers.{i}."
            for n in ("input_layernorm", "post_attention_layernorm"):
                shapes.update({f"{at}{n}.{k}": s for k, s in norm.items()})
            shapes[f"{at}self_attn.q_proj.weight"] = (c.num_attention_heads * d, w)
            shapes[f"{at}self_attn.k_proj.weight"] = (c.num_key_value_heads * d, w)
            shapes[f"{at}self_attn.v_proj.weight"] = (c.num_key_value_heads * d, w)
            shapes[f"{at}self_attn.o_proj.weight"] = (w, c.num_attention_heads * d)
            shapes[f"{at}mlp.gate_proj.weight"] = (c.intermediate_size, w)
            shapes[f"{at}mlp.up_proj.weight"] = (c.intermediate_size, w)
            shapes[f"{at}mlp.down_proj.weight"] = (w, c.intermediate_size)
        shapes.update({f"{root}norm.{k}": s for k, s in norm.items()})
    a, w = TINY.max_action_dim, x.hidden_size
    for name, (o, i) in {
        "action_in_proj": (w, a),
        "action_out_proj": (a, w),
        "time_mlp_in": (w, w),
        "time_mlp_out": (w, w),
    }.items():
        shapes[f"{name}.weight"], shapes[f"{name}.bias"] = (o, i), (o,)
    gen = _g(11)
    out = {}
    for name, shape in sorted(shapes.items()):
        scale = 0.1 if name.endswith("bias") else 1.0 / math.sqrt(shape[-1])
        out[name] = torch.randn(shape, generator=gen) * (0.3 if len(shape) == 1 else scale)
    out[f"{PALI}lm_head.weight"] = out[f"{PALI}model.language_model.embed_tokens.weight"]
    return out


# ---------------------------------------------------------------- the reference (openpi's reading)
def _rms(h: torch.Tensor) -> torch.Tensor:
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)


def _rope(h: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    d = h.shape[-1]
    inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2).float() / d))
    ang = torch.cat((pos.float()[:, None] * inv, pos.float()[:, None] * inv), -1)[:, None]
    rotated = torch.cat((-h[..., d // 2 :], h[..., : d // 2]), -1)
    return h * ang.cos() + rotated * ang.sin()


def _sincos(t: float, width: int) -> torch.Tensor:
    fraction = torch.linspace(0.0, 1.0, width // 2, dtype=torch.float64)
    period = 4e-3 * (4.0 / 4e-3) ** fraction
    arg = 2 * math.pi / period * t
    return torch.cat((arg.sin(), arg.cos())).float()


def _lin(sd, name, h):
    return F.linear(h, sd[f"{name}.weight"], sd.get(f"{name}.bias"))


def _image_tokens(sd, px: torch.Tensor) -> torch.Tensor:
    transformers = pytest.importorskip("transformers")
    tower = transformers.SiglipVisionModel(_siglip_config()).eval()
    root = f"{PALI}model.vision_tower."
    mine = {k[len(root) :]: v for k, v in sd.items() if k.startswith(root)}
    if not any(k.startswith("vision_model.") for k in tower.state_dict()):
        mine = {k.removeprefix("vision_model."): v for k, v in mine.items()}
    tower.load_state_dict(mine)
    with torch.no_grad():
        feats = tower(pixel_values=px).last_hidden_state
    tokens = _lin(sd, f"{PALI}model.multi_modal_projector.linear", feats)
    return tokens.reshape(-1, TINY.text.hidden_size)


def reference_velocity(sd, prefix: torch.Tensor, x: torch.Tensor, t: float) -> torch.Tensor:
    """One denoising step as openpi's joint forward computes it (module docstring)."""
    cfg = TINY
    suffix = _lin(sd, "action_in_proj", x)
    p, s = prefix.shape[0], suffix.shape[0]
    ar = torch.tensor([0] * p + [1] + [0] * (s - 1))
    cum = ar.cumsum(0)
    allowed = cum[None, :] <= cum[:, None]  # [query, key]
    pos = torch.ones(p + s, dtype=torch.long).cumsum(0) - 1
    cond = _lin(sd, "time_mlp_in", _sincos(t, cfg.expert.hidden_size))
    cond = F.silu(_lin(sd, "time_mlp_out", F.silu(cond)))
    roots = (f"{PALI}model.language_model.", f"{EXPERT}model.")
    confs = (cfg.text, cfg.expert)

    def norm(i: int, name: str, h: torch.Tensor):
        if i == 0:
            return _rms(h) * (1 + sd[f"{name}.weight"]), None
        scale, shift, gate = _lin(sd, f"{name}.dense", cond).chunk(3)
        return _rms(h) * (1 + scale) + shift, gate

    streams = [prefix, suffix]
    for layer in range(cfg.text.num_hidden_layers):
        qs, ks, vs, gates = [], [], [], []
        for i, h in enumerate(streams):
            at, c = f"{roots[i]}layers.{layer}.", confs[i]
            a, gate = norm(i, f"{at}input_layernorm", h)
            gates.append(gate)
            d = c.head_dim
            qs.append(_lin(sd, f"{at}self_attn.q_proj", a).view(-1, c.num_attention_heads, d))
            ks.append(_lin(sd, f"{at}self_attn.k_proj", a).view(-1, c.num_key_value_heads, d))
            vs.append(_lin(sd, f"{at}self_attn.v_proj", a).view(-1, c.num_key_value_heads, d))
        q, k, v = _rope(torch.cat(qs), pos), _rope(torch.cat(ks), pos), torch.cat(vs)
        group = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(~allowed[None], float("-inf"))
        att = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(p + s, -1)
        parts = (att[:p], att[p:])
        for i, h in enumerate(streams):
            at = f"{roots[i]}layers.{layer}."
            out = _lin(sd, f"{at}self_attn.o_proj", parts[i])
            h = h + (out if gates[i] is None else gates[i] * out)
            a, gate = norm(i, f"{at}post_attention_layernorm", h)
            up = F.gelu(_lin(sd, f"{at}mlp.gate_proj", a), approximate="tanh")
            out = _lin(sd, f"{at}mlp.down_proj", up * _lin(sd, f"{at}mlp.up_proj", a))
            streams[i] = h + (out if gate is None else gate * out)
    out, _ = norm(1, f"{EXPERT}model.norm", streams[1])
    return _lin(sd, "action_out_proj", out[-cfg.chunk_size :])


def reference_actions(sd, px, prompt, noise) -> torch.Tensor:
    text = F.embedding(prompt, sd[f"{PALI}model.language_model.embed_tokens.weight"])
    text = text * math.sqrt(TINY.text.hidden_size)
    prefix = torch.cat((_image_tokens(sd, px), text))
    x, t, dt = noise, 1.0, -1.0 / STEPS
    for _ in range(STEPS):
        x = x + dt * reference_velocity(sd, prefix, x, t)
        t += dt
    return x


# ---------------------------------------------------------------- the component
def component_actions(policy: Pi0, vision, px, prompt, noise) -> torch.Tensor:
    cfg = policy.config
    with torch.no_grad():
        prefix = policy.prefix_embeddings(vision(px), prompt)
        cache = DenseKV(cfg.text.num_hidden_layers)
        pre, suf = cfg.positions(prefix.shape[0])
        policy.prefill(prefix, pre, DenseBlocks(cache, [Block("obs", "main", prefix.shape[0])]))
        x, t = noise, 1.0
        for _ in range(STEPS):
            block = Block("obs", "main", len(suf), write=False, groups=policy.suffix_groups())
            v = policy.velocity(x[None], torch.tensor([t]), suf, DenseBlocks(cache, [block]))
            x, t = Pi0.euler(x[None], v, STEPS)[0], t - 1.0 / STEPS
    return x


def _inputs():
    s = TINY.vision.image_size
    px = torch.randn(CAMS, 3, s, s, generator=_g(2))
    prompt = torch.randint(0, TINY.text.vocab_size, (PROMPT,), generator=_g(3))
    noise = torch.randn(TINY.chunk_size, TINY.max_action_dim, generator=_g(4))
    return px, prompt, noise


def _write(tmp: Path, layout: str) -> tuple[dict[str, torch.Tensor], Path]:
    sd = openpi_state_dict()
    files = dict(sd)
    if layout == "lerobot":  # `model.` prefix; the embedding left out, tied to the head
        files.pop(f"{PALI}model.language_model.embed_tokens.weight")
        files = {f"model.{k}": v for k, v in files.items()}
    else:  # openpi's dedup keeps the embedding, drops its tied head
        files.pop(f"{PALI}lm_head.weight")
    folder = tmp / layout
    folder.mkdir()
    save_file({k: v.contiguous() for k, v in files.items()}, folder / "model.safetensors")
    return sd, folder


def _load(folder: Path):
    config = {"model": "tiny", "checkpoint": str(folder), "seed": 0}
    cpu = torch.device("cpu")
    return load_policy("LLM", config, cpu), load_vision("vit_encoder", config, cpu)


@pytest.mark.parametrize("layout", ["openpi", "lerobot"])
def test_pi05_actions_equal_openpis_description(layout: str, tmp_path: Path) -> None:
    sd, folder = _write(tmp_path, layout)
    policy, vision = _load(folder)
    px, prompt, noise = _inputs()
    want = reference_actions(sd, px, prompt, noise)
    got = component_actions(policy, vision, px, prompt, noise)
    assert (got - want).abs().max() <= 1e-4
    assert want.abs().max() > 0.5  # not a degenerate chunk


def test_the_prefix_at_positions_from_one_would_differ(tmp_path: Path) -> None:
    """The check can fail: transformers' counting (prefix at 1 … P) moves the actions by far
    more than the tolerance."""
    sd, folder = _write(tmp_path, "openpi")
    policy, vision = _load(folder)
    policy.config = dataclasses.replace(policy.config, prefix_position=1)
    try:
        px, prompt, noise = _inputs()
        got = component_actions(policy, vision, px, prompt, noise)
    finally:
        policy.config = dataclasses.replace(policy.config, prefix_position=0)
    assert (got - reference_actions(sd, px, prompt, noise)).abs().max() > 1e-2


def test_a_published_checkpoint_missing_a_weight_is_refused(tmp_path: Path) -> None:
    sd = openpi_state_dict()
    sd.pop(f"{PALI}lm_head.weight")
    sd.pop(f"{EXPERT}model.layers.0.input_layernorm.dense.bias")
    save_file({k: v.contiguous() for k, v in sd.items()}, tmp_path / "model.safetensors")
    config = {"model": "tiny", "checkpoint": str(tmp_path), "seed": 1}
    with pytest.raises(CheckpointError, match=r"missing keys \(1\).*input_layernorm\.dense\.bias"):
        load_policy("LLM", config, torch.device("cpu"))
