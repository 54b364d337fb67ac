"""BAGEL around its backbone: the ViT connector, the latent embedders, the token layout of its
context blocks, and flow-matching generation with classifier-free guidance.

Named like BAGEL's ``Bagel`` module (``language_model`` — `Qwen2MoT` —, ``vit_model`` (a
SigLIP ViT: `wgc_models.layers.siglip`), ``connector.fc1`` / ``fc2``,
``vit_pos_embed.pos_embed``, ``time_embedder.mlp.0`` / ``mlp.2``, ``vae2llm``, ``llm2vae``,
``latent_pos_embed.pos_embed``), so its checkpoint loads by name; the VAE is its own file
(`wgc_models.bagel.autoencoder_kl`). A node builds the parts it runs (`Bagel(vit=…,
llm=…)`).

The context, as BAGEL's ``inferencer`` builds it (each label is a sequence of the KV pool):

* a **text** segment is ``[<|im_start|>] + ids + [<|im_end|>]``, causal, one rotary position
  per token; before it, ``cfg_text`` becomes a copy of ``main`` (the text-free branch is
  ``main`` without the latest text), and the text goes into ``main`` and ``cfg_img``;
* an **image** is a block ``[<|vision_start|>, tokens, <|vision_end|>]`` at ONE rotary position
  (the next), attended fully: ViT tokens (``connector(vit(x)) + vit_pos_embed``, the
  understanding expert) and, when generating or editing, VAE tokens first (``vae2llm(z) +
  time_embedder(0) + latent_pos_embed``, the generation expert); it goes into ``main`` only
  (the image-free branch ``cfg_img`` never sees images) and ``cfg_text`` becomes a copy of
  ``main`` after it;
* **decoding** starts from ``<|im_start|>`` (`BagelTokens.bos`, what BAGEL's
  ``prepare_start_tokens`` feeds) and appends one token per step to ``main`` until
  ``<|im_end|>``.

**Generation** (`Schedule`, `guide`): the timesteps ``linspace(1, 0, steps)``, shifted
``s·t / (1 + (s-1)·t)``; at each of the ``steps - 1`` steps a latent block (noise at first) at
the label's next rotary position attends to each label's context without being cached, its
velocity is ``llm2vae`` of the generation tokens' final states, the three velocities combine
(BAGEL's ``cfg_text_scale`` / ``cfg_img_scale`` with its ``global``, ``channel`` or
``text_channel`` renormalisation, applied inside ``cfg_interval``), and the Euler step is
``x ← x - v · (t_i - t_{i+1})`` (the velocity points from data to noise).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from wgc_models.bagel.autoencoder_kl import VaeConfig
from wgc_models.bagel.qwen2_navit import MoTConfig, Qwen2MoT
from wgc_models.layers.host_values import int_list
from wgc_models.layers.invariant import Linear
from wgc_models.layers.siglip import SiglipConfig, SiglipVision
from wgc_runtime.contract.node import NodeInputError


@dataclass(frozen=True, slots=True)
class BagelTokens:
    """The special ids (BAGEL's ``new_token_ids``; the real ones are Qwen2.5's)."""

    bos: int = 151644  # <|im_start|>
    eos: int = 151645  # <|im_end|>
    start_of_image: int = 151652  # <|vision_start|>
    end_of_image: int = 151653  # <|vision_end|>


@dataclass(frozen=True, slots=True, kw_only=True)
class BagelConfig:
    """``BagelConfig``: the three sub-models' configs and the latent layout."""

    llm: MoTConfig
    vit: SiglipConfig
    vae: VaeConfig = field(default_factory=VaeConfig)
    tokens: BagelTokens = field(default_factory=BagelTokens)
    latent_patch_size: int = 2
    max_latent_size: int = 64
    vit_max_num_patch_per_side: int = 70
    timestep_shift: float = 3.0

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> BagelConfig:
        tokens: dict[str, Any] = raw.get("tokens") or {}
        return cls(
            llm=MoTConfig.from_dict(raw["llm_config"]),
            vit=SiglipConfig.from_dict(raw["vit_config"]),
            vae=VaeConfig.from_dict(raw.get("vae_config") or {}),
            tokens=BagelTokens(**tokens),
            latent_patch_size=int(raw.get("latent_patch_size", 2)),
            max_latent_size=int(raw.get("max_latent_size", 64)),
            vit_max_num_patch_per_side=int(raw.get("vit_max_num_patch_per_side", 70)),
            timestep_shift=float(raw.get("timestep_shift", 3.0)),
        )

    @property
    def patch_latent_dim(self) -> int:
        return self.latent_patch_size**2 * self.vae.latent_channels


# ---------------------------------------------------------------------------- fixed embeddings
def sincos_2d(dim: int, side: int) -> torch.Tensor:
    """MAE's 2-D sine-cosine table ``[side², dim]`` (BAGEL's ``PositionEmbedding`` init)."""

    def one_d(d: int, pos: torch.Tensor) -> torch.Tensor:
        omega = 1.0 / 10000 ** (torch.arange(d // 2, dtype=torch.float64) / (d / 2.0))
        out = pos.reshape(-1).double()[:, None] * omega[None, :]
        return torch.cat([out.sin(), out.cos()], dim=1)

    coords = torch.arange(side, dtype=torch.float64)
    grid_w, grid_h = torch.meshgrid(coords, coords, indexing="xy")  # numpy's meshgrid(w, h)
    return torch.cat([one_d(dim // 2, grid_w), one_d(dim // 2, grid_h)], dim=1).float()


def flat_positions(h: int, w: int, per_side: int) -> torch.Tensor:
    """Position ids of an ``h × w`` grid in a ``per_side``-wide table (``extrapolate``)."""
    rows = torch.arange(h)[:, None] * per_side
    return (rows + torch.arange(w)[None, :]).reshape(-1)


class PositionEmbedding(nn.Module):
    def __init__(self, side: int, dim: int):
        super().__init__()
        self.pos_embed = nn.Parameter(sincos_2d(dim, side), requires_grad=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.pos_embed[ids]


def timestep_embedding(t: torch.Tensor, dim: int = 256, max_period: float = 10000) -> torch.Tensor:
    """DiT's frequency embedding of times ``t`` ``[n]``: ``[n, dim]`` (cos then sin)."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32) / half)
    args = t.float()[:, None] * freqs.to(t.device)[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class TimestepEmbedder(nn.Module):
    def __init__(self, hidden: int, freq: int = 256):
        super().__init__()
        self.freq = freq
        self.mlp = nn.Sequential(Linear(freq, hidden), nn.SiLU(), Linear(hidden, hidden))

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        first = self.mlp[0]
        assert isinstance(first, nn.Linear)
        return self.mlp(timestep_embedding(t, self.freq).to(first.weight.dtype))


class MLPconnector(nn.Module):
    def __init__(self, cin: int, hidden: int):
        super().__init__()
        self.fc1, self.fc2 = Linear(cin, hidden), Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class _VitModel(nn.Module):
    def __init__(self, cfg: SiglipConfig):
        super().__init__()
        self.vision_model = SiglipVision(cfg)


# ---------------------------------------------------------------------------- the model
@dataclass(slots=True)
class ContextBlock:
    """One block of BAGEL's context: embeddings, rotary positions, which rows are
    generation tokens, whether attention inside it is causal, and the rotary position after
    it."""

    x: torch.Tensor
    positions: torch.Tensor
    gen: torch.Tensor
    causal: bool
    next_rope: int


class Bagel(nn.Module):
    """BAGEL's parts (module docstring): ``vit`` the image-understanding side (``vit_model``,
    ``connector``, ``vit_pos_embed``), ``llm`` the backbone and the latent side."""

    def __init__(self, cfg: BagelConfig, *, vit: bool = True, llm: bool = True):
        super().__init__()
        self.config = cfg
        hidden = cfg.llm.hidden_size
        if llm:
            self.language_model = Qwen2MoT(cfg.llm)
            self.time_embedder = TimestepEmbedder(hidden)
            self.vae2llm = Linear(cfg.patch_latent_dim, hidden)
            self.llm2vae = Linear(hidden, cfg.patch_latent_dim)
            self.latent_pos_embed = PositionEmbedding(cfg.max_latent_size, hidden)
        if vit:
            self.vit_model = _VitModel(cfg.vit)
            self.connector = MLPconnector(cfg.vit.hidden_size, hidden)
            self.vit_pos_embed = PositionEmbedding(cfg.vit_max_num_patch_per_side, hidden)

    # ------------------------------------------------------------------ encoders
    def vit_tokens(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """``[1, 3, H, W]`` SigLIP pixels (sides multiples of the patch, at most the ViT's
        ``image_size``: `bagel_image.vit_side`) → ``[patches, hidden]`` (connector +
        positions). A patch's position is its row and column in the ViT's table, as BAGEL's
        ``get_flattened_position_ids_extrapolate`` places it."""
        v = self.config.vit
        rows, cols = (n // v.patch_size for n in pixel_values.shape[-2:])
        side = v.image_size // v.patch_size
        if rows > side or cols > side:
            raise ValueError(f"a {rows}x{cols}-patch image is past the ViT's {side}x{side}")
        feats = self.vit_model.vision_model(pixel_values, flat_positions(rows, cols, side))[0]
        ids = flat_positions(rows, cols, self.config.vit_max_num_patch_per_side)
        return self.connector(feats) + self.vit_pos_embed(ids.to(feats.device))

    def latent_tokens(self, latents: torch.Tensor, t: float) -> torch.Tensor:
        """Patchified latents at time ``t`` → ``[h·w, hidden]``: ``[h, w, patch_latent_dim]``
        (a grid of any shape: an editing image's) or ``[h·w, patch_latent_dim]`` (a square
        grid); a token's position is its row and column in the latent table."""
        if latents.dim() == 3:
            h, w = int(latents.shape[0]), int(latents.shape[1])
            latents = latents.reshape(h * w, -1)
        else:
            h = w = math.isqrt(latents.shape[0])
        per_side = self.config.max_latent_size
        if h > per_side or w > per_side:
            raise ValueError(f"a {h}x{w} latent grid is past the {per_side}x{per_side} table")
        ids = flat_positions(h, w, per_side).to(latents.device)
        time = torch.full((1,), float(t), device=latents.device)
        x = self.vae2llm(latents.to(self.vae2llm.weight.dtype))
        return x + self.time_embedder(time) + self.latent_pos_embed(ids)

    # ------------------------------------------------------------------ context blocks
    def _tok(self, ids: list[int]) -> torch.Tensor:
        dev = self.language_model.model.embed_tokens.weight.device
        return self.language_model.embed(torch.tensor(ids, dtype=torch.long, device=dev))

    def text_block(self, ids: torch.Tensor, rope: int) -> ContextBlock:
        """``[<|im_start|>] + ids + [<|im_end|>]`` at ``rope, rope+1, …`` (causal)."""
        tk = self.config.tokens
        given = int_list(ids)
        vocab = self.config.llm.vocab_size
        bad = next((i for i in given if not 0 <= i < vocab), None)
        if bad is not None:  # the request's ids: its fault (400), never an index error (500)
            raise NodeInputError(f"text token id {bad} is not in [0, {vocab})")
        seq = [tk.bos, *given, tk.eos]
        x = self._tok(seq)
        n = len(seq)
        pos = torch.arange(rope, rope + n, device=x.device)
        return ContextBlock(
            x, pos, torch.zeros(n, dtype=torch.bool, device=x.device), True, rope + n
        )

    def token_block(self, token: int, rope: int) -> ContextBlock:
        """One decoded token (causal over the context)."""
        x = self._tok([token])
        pos = torch.full((1,), rope, device=x.device)
        return ContextBlock(
            x, pos, torch.zeros(1, dtype=torch.bool, device=x.device), True, rope + 1
        )

    def image_block(self, tokens: torch.Tensor, rope: int, gen: bool) -> ContextBlock:
        """``[<|vision_start|>, tokens, <|vision_end|>]`` at one position ``rope`` (full
        attention); ``gen``: the tokens are VAE latent tokens (the generation expert)."""
        tk = self.config.tokens
        ends = self._tok([tk.start_of_image, tk.end_of_image])
        x = torch.cat((ends[:1], tokens.to(ends.dtype), ends[1:]))
        n = x.shape[0]
        kinds = torch.zeros(n, dtype=torch.bool, device=x.device)
        if gen:
            kinds[1:-1] = True
        pos = torch.full((n,), rope, device=x.device)
        return ContextBlock(x, pos, kinds, False, rope + 1)

    def velocity(self, hidden: torch.Tensor) -> torch.Tensor:
        """``llm2vae`` of a latent block's inner rows (``[L + 2, hidden]`` → ``[L, dim]``)."""
        return self.llm2vae(hidden[1:-1]).float()


# ---------------------------------------------------------------------------- the latent grid
def patchify(latent: torch.Tensor, p: int) -> torch.Tensor:
    """VAE latents ``[C, H, W]`` → ``[(H/p)·(W/p), p·p·C]`` (BAGEL's ``chpwq->hwpqc``)."""
    c, hh, ww = latent.shape
    h, w = hh // p, ww // p
    x = latent[:, : h * p, : w * p].reshape(c, h, p, w, p)
    return torch.einsum("chpwq->hwpqc", x).reshape(-1, p * p * c)


def unpatchify(tokens: torch.Tensor, p: int, channels: int) -> torch.Tensor:
    """The inverse of `patchify`: ``[h, w, p·p·C]`` (a grid of any shape) or ``[h·w, p·p·C]``
    (a square grid) → ``[C, h·p, w·p]``."""
    if tokens.dim() == 3:
        h, w = int(tokens.shape[0]), int(tokens.shape[1])
    else:
        h = w = math.isqrt(tokens.shape[0])
    x = tokens.reshape(h, w, p, p, channels)
    return torch.einsum("hwpqc->chpwq", x).reshape(channels, h * p, w * p)


# ---------------------------------------------------------------------------- generation
@dataclass(frozen=True, slots=True)
class Schedule:
    """The shifted timesteps of ``steps`` points; step ``i`` goes from ``t[i]`` to ``t[i+1]``."""

    steps: int
    shift: float

    def times(self) -> torch.Tensor:
        t = torch.linspace(1, 0, self.steps)
        return self.shift * t / (1 + (self.shift - 1) * t)

    def at(self, i: int) -> tuple[float, float]:
        """``(t_i, t_i - t_{i+1})``."""
        t = self.times()
        return float(t[i]), float(t[i] - t[i + 1])


@dataclass(frozen=True, slots=True)
class Guidance:
    """BAGEL's CFG hyperparameters (its inferencer's defaults: text-to-image; `editing`)."""

    text_scale: float = 4.0
    img_scale: float = 1.0
    interval: tuple[float, float] = (0.4, 1.0)
    renorm: str = "global"  # global | channel | text_channel
    renorm_min: float = 0.0

    @staticmethod
    def editing(text_scale: float = 4.0, img_scale: float = 2.0) -> Guidance:
        return Guidance(text_scale, img_scale, (0.0, 1.0), "text_channel", 0.0)

    def scales(self, t: float) -> tuple[float, float]:
        """The scales in force at time ``t`` (1.0 outside the interval: no guidance)."""
        lo, hi = self.interval
        return (self.text_scale, self.img_scale) if lo < t <= hi else (1.0, 1.0)


def _norm(x: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """``x.norm()`` (of all of it), or ``x.norm(dim=dim, keepdim=True)`` (torch's stub leaves
    `Tensor.norm`'s ``p`` untyped)."""
    if dim is None:
        return cast(torch.Tensor, x.norm())  # pyright: ignore[reportUnknownMemberType]
    return cast(torch.Tensor, x.norm(dim=dim, keepdim=True))  # pyright: ignore[reportUnknownMemberType]


def guide(
    v: torch.Tensor, v_text: torch.Tensor, v_img: torch.Tensor, g: Guidance, t: float
) -> torch.Tensor:
    """BAGEL's ``_forward_flow`` combination of the three velocities at time ``t``."""
    ts, im = g.scales(t)
    if ts <= 1.0:
        return v
    if g.renorm == "text_channel":
        vt_ = v_text + ts * (v - v_text)
        scale = (_norm(v, -1) / (_norm(vt_, -1) + 1e-8)).clamp(min=g.renorm_min, max=1.0)
        vt = vt_ * scale
        return v_img + im * (vt - v_img) if im > 1.0 else vt
    vt_ = v_text + ts * (v - v_text)
    out = v_img + im * (vt_ - v_img) if im > 1.0 else vt_
    if g.renorm == "global":
        norm_v, norm_out = _norm(v), _norm(out)
    elif g.renorm == "channel":
        norm_v, norm_out = _norm(v, -1), _norm(out, -1)
    else:
        raise ValueError(f"unknown cfg renorm `{g.renorm}` (global, channel or text_channel)")
    return out * (norm_v / (norm_out + 1e-8)).clamp(min=g.renorm_min, max=1.0)


def euler(x: torch.Tensor, v: torch.Tensor, dt: float) -> torch.Tensor:
    return x - v * dt
