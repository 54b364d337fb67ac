"""V-JEPA 2-AC's action-conditioned predictor: block-causal attention over frames, each frame
its action token, its state token and its patch latents, predicting the next frame's latents.

Named like the reference's ``VisionTransformerPredictorAC`` (``predictor_embed``,
``action_encoder``, ``state_encoder``, ``extrinsics_encoder``, ``predictor_blocks.{i}.norm1`` /
``attn.qkv`` / ``attn.proj`` / ``norm2`` / ``mlp.fc1`` / ``mlp.fc2``, ``predictor_norm``,
``predictor_proj``), so its checkpoints load by name.

The computation: frame ``t`` is ``[action_encoder(a_t), state_encoder(s_t), predictor_embed(z_t)]``;
a token sees every token of frames ``≤ t`` (block-causal: `Block.groups`, one group per frame);
rotary positions are absolute — a patch rotates by (frame, row, column)
(`wgc_models.vjepa2_ac.vjepa2.rotate_3d`), the action and state tokens by their frame only —
so a frame's keys and values never change once computed. The output at frame ``t``
(``predictor_proj(predictor_norm(patches))``) predicts ``z_{t+1}``; planning and rollouts
layer-normalise it (`normalize`, no affine) before feeding it back as the next frame.

Hence a rollout can keep the keys and values of the frames it has seen and run only the new
frame per step (`step_frames` over a cache that grows by one frame: O(H) frames for a horizon
H), where the baseline re-runs every frame so far at every step (`native_rollout`: O(H²)), with
the same result.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from wgc_models.layers.block_attention import Block, BlockStep, DenseBlocks, DenseKV
from wgc_models.layers.invariant import Linear
from wgc_models.vjepa2_ac.vjepa2 import rotary_split, rotate_3d, rotate_queries_or_keys


@dataclass(frozen=True, slots=True, kw_only=True)
class PredictorConfig:
    """``vit_ac_predictor``'s arguments."""

    embed_dim: int  # the encoder's width
    predictor_embed_dim: int
    depth: int
    num_heads: int
    grid: int  # patches per side of a frame (crop size / patch size)
    action_embed_dim: int = 7
    state_embed_dim: int = 7
    mlp_ratio: float = 4.0
    eps: float = 1e-6

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> PredictorConfig:
        return cls(**{k: raw[k] for k in cls.__dataclass_fields__ if k in raw})

    @property
    def head_dim(self) -> int:
        return self.predictor_embed_dim // self.num_heads

    @property
    def frame_tokens(self) -> int:
        return self.grid * self.grid

    @property
    def tokens_per_frame(self) -> int:
        """Cached tokens per frame: action, state and patches."""
        return 2 + self.frame_tokens


def normalize(z: torch.Tensor) -> torch.Tensor:
    """The layer norm (no affine) planning applies to latents."""
    return F.layer_norm(z, (z.shape[-1],))


class _Attention(nn.Module):
    def __init__(self, cfg: PredictorConfig):
        super().__init__()
        d = cfg.predictor_embed_dim
        self.heads, self.head_dim = cfg.num_heads, cfg.head_dim
        self.qkv = Linear(d, 3 * d)
        self.proj = Linear(d, d)

    def forward(self, x: torch.Tensor, pos: _Positions, step: BlockStep, layer: int):
        n = x.shape[0]
        q, k, v = self.qkv(x).view(n, 3, self.heads, self.head_dim).unbind(1)
        q, k = pos.rotate(q), pos.rotate(k)
        out = step.attend(layer, q, k, v, self.head_dim**-0.5)
        return self.proj(out.reshape(n, -1))


class _Mlp(nn.Module):
    def __init__(self, dim: int, ratio: float):
        super().__init__()
        self.fc1 = Linear(dim, int(dim * ratio))
        self.fc2 = Linear(int(dim * ratio), dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class _Block(nn.Module):
    def __init__(self, cfg: PredictorConfig):
        super().__init__()
        d = cfg.predictor_embed_dim
        self.norm1 = nn.LayerNorm(d, eps=cfg.eps)
        self.attn = _Attention(cfg)
        self.norm2 = nn.LayerNorm(d, eps=cfg.eps)
        self.mlp = _Mlp(d, cfg.mlp_ratio)

    def forward(
        self, x: torch.Tensor, pos: _Positions, step: BlockStep, layer: int
    ) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), pos, step, layer)
        return x + self.mlp(self.norm2(x))


@dataclass(slots=True)
class _Positions:
    """Each token's frame, row and column, and whether it is an action/state token."""

    frame: torch.Tensor
    row: torch.Tensor
    col: torch.Tensor
    cond: torch.Tensor  # bool

    def rotate(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``[tokens, heads, dim]`` rotated: patches in 3-D, action/state tokens by frame."""
        xt = x.transpose(0, 1)  # [heads, tokens, dim]
        full = rotate_3d(xt, self.frame, self.row, self.col)
        s = rotary_split(x.shape[-1])
        depth = torch.cat((rotate_queries_or_keys(xt[..., :s], self.frame), xt[..., s:]), -1)
        return torch.where(self.cond[None, :, None], depth, full).transpose(0, 1)


class ACPredictor(nn.Module):
    """The predictor (module docstring)."""

    def __init__(self, cfg: PredictorConfig):
        super().__init__()
        d = cfg.predictor_embed_dim
        self.config = cfg
        self.predictor_embed = Linear(cfg.embed_dim, d)
        self.action_encoder = Linear(cfg.action_embed_dim, d)
        self.state_encoder = Linear(cfg.state_embed_dim, d)
        self.extrinsics_encoder = Linear(cfg.action_embed_dim - 1, d)  # unused: no extrinsics
        self.predictor_blocks = nn.ModuleList(_Block(cfg) for _ in range(cfg.depth))
        self.predictor_norm = nn.LayerNorm(d, eps=cfg.eps)
        self.predictor_proj = Linear(d, cfg.embed_dim)

    def _positions(
        self, starts: Sequence[int], counts: Sequence[int], device: torch.device
    ) -> _Positions:
        cfg = self.config
        per = cfg.tokens_per_frame
        frames = torch.cat(
            [torch.arange(s, s + c, device=device) for s, c in zip(starts, counts, strict=True)]
        )
        frame = frames.repeat_interleave(per)
        slot = torch.arange(per, device=device).repeat(len(frames))
        patch = (slot - 2).clamp(min=0)
        return _Positions(frame, patch // cfg.grid, patch % cfg.grid, slot < 2)

    def step_frames(
        self,
        latents: Sequence[torch.Tensor],
        actions: Sequence[torch.Tensor],
        states: Sequence[torch.Tensor],
        starts: Sequence[int],
        step: BlockStep,
    ) -> list[torch.Tensor]:
        """Run new frames of several sequences as one batch: ``latents[i]`` ``[F_i, patches,
        embed]`` with ``actions[i]`` / ``states[i]`` ``[F_i, dim]``; ``starts[i]``: the
        absolute index of its first frame (the frames the sequence already holds). ``step``'s
        blocks are the sequences' frames in order (`frame_block`). Returns each sequence's
        predictions ``[F_i, patches, embed]`` (frame ``t``'s is ``z_{t+1}``)."""
        cfg = self.config
        parts: list[torch.Tensor] = []
        for z, a, s in zip(latents, actions, states, strict=True):
            zz = self.predictor_embed(z.float())
            aa = self.action_encoder(a.float())[:, None]
            ss = self.state_encoder(s.float())[:, None]
            parts.append(torch.cat((aa, ss, zz), dim=1).reshape(-1, zz.shape[-1]))
        x = torch.cat(parts)
        counts = [int(z.shape[0]) for z in latents]
        pos = self._positions(starts, counts, x.device)
        for i, blk in enumerate(self.predictor_blocks):
            x = blk(x, pos, step, i)
        x = x.view(-1, cfg.tokens_per_frame, x.shape[-1])[:, 2:]
        out = self.predictor_proj(self.predictor_norm(x))
        return list(torch.split(out, counts))

    def frame_block(self, request: Hashable, frames: int, label: str = "main") -> Block:
        """The `Block` of ``frames`` new frames of one sequence (kept, block-causal)."""
        per = self.config.tokens_per_frame
        return Block(request, label, frames * per, write=True, groups=(per,) * frames)


def native_rollout(
    model: ACPredictor,
    context: torch.Tensor,
    actions: torch.Tensor,
    states: torch.Tensor,
    horizon: int,
) -> torch.Tensor:
    """The baseline: from ``context`` ``[T, patches, embed]`` (normalised), ``horizon`` steps,
    re-running the predictor over every frame so far at every step (no cache). Frame ``t``
    uses ``actions[t]`` / ``states[t]``. Returns the ``horizon`` predicted frames."""
    frames = list(context.unbind(0))
    out: list[torch.Tensor] = []
    for _ in range(horizon):
        seq = torch.stack(frames)
        t = seq.shape[0]
        step = DenseBlocks(DenseKV(model.config.depth), [model.frame_block("native", t)])
        pred = model.step_frames([seq], [actions[:t]], [states[:t]], [0], step)[0]
        nxt = normalize(pred[-1])
        out.append(nxt)
        frames.append(nxt)
    return torch.stack(out)


def cached_rollout(
    model: ACPredictor,
    context: torch.Tensor,
    actions: torch.Tensor,
    states: torch.Tensor,
    horizon: int,
    cache: DenseKV | None = None,
) -> torch.Tensor:
    """`native_rollout` keeping the frames' keys and values: the context's frames but the last
    once, then one frame per step (what the ``rollout_predictor`` node does over the pool)."""
    cache = cache if cache is not None else DenseKV(model.config.depth)
    t = context.shape[0]
    if t > 1:
        step = DenseBlocks(cache, [model.frame_block("r", t - 1)])
        model.step_frames([context[:-1]], [actions[: t - 1]], [states[: t - 1]], [0], step)
    z = context[-1]
    out: list[torch.Tensor] = []
    for k in range(horizon):
        f = t - 1 + k
        step = DenseBlocks(cache, [model.frame_block("r", 1)])
        pred = model.step_frames([z[None]], [actions[f : f + 1]], [states[f : f + 1]], [f], step)
        z = normalize(pred[0][0])
        out.append(z)
    return torch.stack(out)
