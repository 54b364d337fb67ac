"""π0 and π0.5: a PaliGemma prefix (SigLIP + Gemma) and a Gemma action expert that denoises an
action chunk by flow matching, attending to the prefix's keys and values.

Named like the checkpoints transformers' ``PI0ForConditionalGeneration.save_pretrained`` writes
(openpi's / LeRobot's layout): ``paligemma_with_expert.paligemma.model.{vision_tower,
multi_modal_projector, language_model.model}``, ``paligemma_with_expert.gemma_expert.model``,
``action_in_proj``, ``action_out_proj``, and per variant ``state_proj`` + ``action_time_mlp_{in,
out}`` (π0) or ``time_mlp_{in,out}`` + the expert's adaptive norms ``….dense`` (π0.5).

The computation (HF's ``PI0Model`` and openpi's ``PI0Pytorch``):

* **prefix** (`Pi0.prefill`): each camera image → SigLIP → ``multi_modal_projector`` (image
  tokens at the language model's width, unscaled), then the prompt's token embeddings (times
  ``√width``); the language model runs the whole prefix with bidirectional attention (one
  block), positions ``0 … P-1`` as openpi and LeRobot count them (``cumsum(pad_mask) - 1``;
  transformers' PaliGemma counts from 1: `Pi0Config.prefix_position`), and its keys and
  values stay in the cache;
* **one denoising step** (`Pi0.velocity`): the suffix runs through the expert's layers (the
  expert has the same depth, kv heads and head size as the language model: its layer ``i``
  attends to the prefix's layer ``i``), positions ``P …`` (`Pi0Config.positions`), and is
  never cached. The action
  chunk's velocity is ``action_out_proj`` of the expert's last ``chunk`` tokens; the Euler step
  ``x ← x + dt · v`` with ``dt = -1 / steps`` goes from ``t = 1`` (noise) to ``t = 0``.

**π0** (``pi05=False``, what HF implements): the suffix is ``[state_proj(state), action tokens]``
where an action token is ``action_time_mlp_out(silu(action_time_mlp_in([action_in_proj(x),
sincos(t)])))``; the state token sees the prefix and itself, the action tokens everything.

**π0.5** (``pi05=True``, openpi's ``pi05``) differs in three ways:

1. *no state token*: the robot state is discretised into the prompt (the prefix), so the
   suffix is the action tokens alone, one bidirectional block over the prefix;
2. *time by adaptive normalisation*: the action tokens are ``action_in_proj(x)`` only; the time
   goes through ``silu(time_mlp_out(silu(time_mlp_in(sincos(t)))))`` into every norm of the
   expert (adaRMS: scale, shift and a residual gate, `wgc_models.pi05.gemma`);
3. hence no ``state_proj`` / ``action_time_mlp_*`` weights, and ``time_mlp_*`` +
   ``….layernorm.dense`` / ``norm.dense`` instead.

The sinusoid (both): ``fraction = linspace(0, 1, width / 2)``, ``period = min · (max /
min)^fraction``, ``[sin(2π t / period), cos(2π t / period)]`` with ``min = 4e-3``, ``max = 4``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from wgc_models.layers.block_attention import BlockStep
from wgc_models.layers.invariant import Linear
from wgc_models.layers.siglip import SiglipConfig, SiglipVision
from wgc_models.pi05.gemma import GemmaConfig, GemmaStack


@dataclass(frozen=True, slots=True, kw_only=True)
class Pi0Config:
    """``PI0Config`` (``vlm_config`` text and vision parts, ``dit_config``) plus ``pi05``."""

    vision: SiglipConfig
    text: GemmaConfig
    expert: GemmaConfig
    chunk_size: int = 50
    max_state_dim: int = 32
    max_action_dim: int = 32
    num_inference_steps: int = 10
    min_period: float = 4e-3
    max_period: float = 4.0
    pi05: bool = True
    # where the prefix's rotary positions start: openpi and LeRobot count from 0 (the suffix
    # continues at the prefix length); transformers' PaliGemma (its π0) counts from 1
    prefix_position: int = 0

    def positions(self, prefix: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotary positions of a prefix of ``prefix`` tokens and of one suffix after it."""
        suffix = self.chunk_size + (0 if self.pi05 else 1)
        start = self.prefix_position
        return torch.arange(start, start + prefix), torch.arange(prefix, prefix + suffix)

    @classmethod
    def from_dict(cls, raw: dict[str, Any], *, pi05: bool | None = None) -> Pi0Config:
        """From a ``PI0Config`` dict (``config.json``); ``pi05`` defaults to the dict's own
        ``pi05`` key (absent: π0, which is what transformers' config describes)."""
        vlm = raw["vlm_config"]
        return cls(
            vision=SiglipConfig.from_dict(vlm["vision_config"]),
            text=GemmaConfig.from_dict(vlm["text_config"]),
            expert=GemmaConfig.from_dict(raw["dit_config"], embed=False),
            chunk_size=int(raw.get("chunk_size", 50)),
            max_state_dim=int(raw.get("max_state_dim", 32)),
            max_action_dim=int(raw.get("max_action_dim", 32)),
            num_inference_steps=int(raw.get("num_inference_steps", 10)),
            min_period=float(raw.get("min_period", 4e-3)),
            max_period=float(raw.get("max_period", 4.0)),
            pi05=bool(raw.get("pi05", False)) if pi05 is None else pi05,
        )


def sincos(t: torch.Tensor, width: int, min_period: float, max_period: float) -> torch.Tensor:
    """``[batch, width]`` sine-cosine embedding of the times ``t`` ``[batch]`` (fp32)."""
    fraction = torch.linspace(0.0, 1.0, width // 2, dtype=torch.float32, device=t.device)
    period = min_period * (max_period / min_period) ** fraction
    emb = (1.0 / period * 2 * math.pi)[None, :] * t.float()[:, None]
    return torch.cat([emb.sin(), emb.cos()], dim=1)


class _Projector(nn.Module):
    def __init__(self, vision: int, text: int):
        super().__init__()
        self.linear = Linear(vision, text)


class PaliVision(nn.Module):
    """PaliGemma's image side: ``vision_tower`` + ``multi_modal_projector`` (the π0 vision
    encoder node; named as under ``paligemma_with_expert.paligemma.model.``)."""

    def __init__(self, vision: SiglipConfig, width: int):
        super().__init__()
        self.vision_tower = SiglipVision(vision)
        self.multi_modal_projector = _Projector(vision.hidden_size, width)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """``[cameras, 3, S, S]`` → ``[cameras · patches, width]``."""
        return image_tokens(self.vision_tower, self.multi_modal_projector, pixel_values)


def image_tokens(tower: SiglipVision, projector: _Projector, pixel_values: torch.Tensor):
    x = projector.linear(tower(pixel_values))
    return x.reshape(-1, x.shape[-1])


class _LanguageModel(nn.Module):
    def __init__(self, cfg: GemmaConfig):
        super().__init__()
        self.model = GemmaStack(cfg)


class _PaliModel(nn.Module):
    def __init__(self, cfg: Pi0Config, vision: bool):
        super().__init__()
        self.has_vision = vision
        if vision:
            self.vision_tower = SiglipVision(cfg.vision)
            self.multi_modal_projector = _Projector(cfg.vision.hidden_size, cfg.text.hidden_size)
        self.language_model = _LanguageModel(cfg.text)


class _PaliGemma(nn.Module):
    def __init__(self, cfg: Pi0Config, vision: bool):
        super().__init__()
        self.model = _PaliModel(cfg, vision)


class _Expert(nn.Module):
    def __init__(self, cfg: Pi0Config):
        super().__init__()
        cond = cfg.expert.hidden_size if cfg.pi05 else None
        self.model = GemmaStack(cfg.expert, cond)


class _WithExpert(nn.Module):
    def __init__(self, cfg: Pi0Config, vision: bool):
        super().__init__()
        self.paligemma = _PaliGemma(cfg, vision)
        self.gemma_expert = _Expert(cfg)


class Pi0(nn.Module):
    """The policy: prefix prefill and the expert's denoising step (module docstring).
    ``vision=False`` leaves the image side out (a placement runs it as its own node)."""

    def __init__(self, cfg: Pi0Config, *, vision: bool = True):
        super().__init__()
        if (cfg.text.num_hidden_layers, cfg.text.num_key_value_heads, cfg.text.head_dim) != (
            cfg.expert.num_hidden_layers,
            cfg.expert.num_key_value_heads,
            cfg.expert.head_dim,
        ):
            raise ValueError(
                "the action expert must have the language model's layers, kv heads "
                "and head size (its layers attend to the prefix's)"
            )
        self.config = cfg
        self.paligemma_with_expert = _WithExpert(cfg, vision)
        w = cfg.expert.hidden_size
        self.action_in_proj = Linear(cfg.max_action_dim, w)
        self.action_out_proj = Linear(w, cfg.max_action_dim)
        if cfg.pi05:
            self.time_mlp_in = Linear(w, w)
            self.time_mlp_out = Linear(w, w)
        else:
            self.state_proj = Linear(cfg.max_state_dim, w)
            self.action_time_mlp_in = Linear(2 * w, w)
            self.action_time_mlp_out = Linear(w, w)

    @property
    def language_model(self) -> GemmaStack:
        return self.paligemma_with_expert.paligemma.model.language_model.model

    @property
    def expert(self) -> GemmaStack:
        return self.paligemma_with_expert.gemma_expert.model

    def encode_images(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """The image tokens of ``[cameras, 3, S, S]`` pixels (`PaliVision`)."""
        m = self.paligemma_with_expert.paligemma.model
        if not m.has_vision:
            raise ValueError("this π0 was built without its vision side (`vision=False`)")
        return image_tokens(m.vision_tower, m.multi_modal_projector, pixel_values)

    # ------------------------------------------------------------------ the prefix
    def prefix_embeddings(self, image_tokens: torch.Tensor, prompt: torch.Tensor) -> torch.Tensor:
        """``[image tokens; embedded prompt]`` (``[P, width]``)."""
        lm = self.language_model
        text = lm.embed(prompt.reshape(-1).long())
        return torch.cat((image_tokens.to(text.dtype), text))

    def prefill(self, prefix: torch.Tensor, positions: torch.Tensor, step: BlockStep) -> None:
        """Run the language model over prefix embeddings (``[tokens, width]``, blocks of the
        step written, bidirectional) so their keys and values are cached."""
        self.language_model(prefix, positions, step)

    # ------------------------------------------------------------------ a denoising step
    def suffix(
        self, x: torch.Tensor, t: torch.Tensor, state: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The expert's input for noisy chunks ``x`` ``[B, chunk, action_dim]`` at times ``t``
        ``[B]``: tokens ``[B, S, width]`` and the adaRMS condition (π0.5) ``[B, width]``."""
        cfg, w = self.config, self.config.expert.hidden_size
        emb = sincos(t, w, cfg.min_period, cfg.max_period)
        actions = self.action_in_proj(x)
        if cfg.pi05:
            cond = F.silu(self.time_mlp_out(F.silu(self.time_mlp_in(emb.to(actions.dtype)))))
            return actions, cond
        if state is None:
            raise ValueError("π0 needs the robot state (π0.5 takes it in the prompt)")
        time = emb[:, None, :].expand_as(actions).to(actions.dtype)
        mixed = self.action_time_mlp_out(
            F.silu(self.action_time_mlp_in(torch.cat((actions, time), 2)))
        )
        return torch.cat((self.state_proj(state)[:, None, :], mixed), dim=1), None

    def suffix_groups(self) -> tuple[int, ...]:
        """The suffix's attention groups (`Block.groups`): π0's state token, then its actions."""
        n = self.config.chunk_size
        return (n,) if self.config.pi05 else (1, n)

    def velocity(
        self,
        x: torch.Tensor,
        t: torch.Tensor,
        positions: torch.Tensor,
        step: BlockStep,
        state: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The flow's velocity for ``x`` ``[B, chunk, action_dim]`` at ``t`` ``[B]``: the
        step's blocks are the B suffixes (read only) in order; ``positions`` ``[B · S]``."""
        tokens, cond = self.suffix(x, t, state)
        b, s, w = tokens.shape
        c = None if cond is None else cond[:, None, :].expand(b, s, w).reshape(b * s, w)
        out = self.expert(tokens.reshape(b * s, w), positions, step, c).view(b, s, w)
        return self.action_out_proj(out[:, -self.config.chunk_size :])

    @staticmethod
    def euler(x: torch.Tensor, v: torch.Tensor, steps: int) -> torch.Tensor:
        return x + (-1.0 / steps) * v
