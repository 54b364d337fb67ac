"""Wan2.2's nodes over the family's own modules (diffusers' Wan pipeline, part for part),
with the tiny seeded sizes of `wgc_models.wan22.tiny`, or a diffusers Wan folder
given as ``config checkpoint`` (``text_encoder/``, ``transformer/``, ``transformer_2/``,
``vae/``).

Shapes come from the request's shape bucket: the latents are ``[C, (frames - 1) / 4 + 1,
height / 8, width / 8]`` for the request's `frames`, `height` and `width` options (their
defaults when it sets none), as the `.walk` file declares.

- `TextEncoder`: umT5 over the prompt's ids (at most ``text_len``): the checkpoint's
  ``tokenizer/tokenizer.json`` makes them as the pipeline does (`PromptTokenizer`); the tiny
  model takes the UTF-8 bytes as ids. Its states at the tokens, zeros at the padding.
- `Dit` (both experts: config `expert`, ``high_noise`` = diffusers' ``transformer``,
  ``low_noise`` = ``transformer_2``): the transformer's velocity with classifier-free guidance
  (`guidance` option): ``uncond + g·(cond - uncond)``. The first step's latents are noise every
  node of the request agrees on, its timestep 999 (the flow schedule's first, whatever the
  shift). Image-to-video conditions as diffusers' ``WanImageToVideoPipeline`` does with
  ``expand_timesteps`` (Wan2.2 TI2V's way): the first latent frame is the condition's, its
  tokens at timestep 0.
- `Solver`: one UniPC step (`uni_step`) of the flow schedule of `steps` steps shifted by the
  `shift` option; the step index is the incoming timestep's place in the schedule. It passes on
  the next timestep, the last two x0 predictions (`m1`, `m2`) and the sample its predictor
  started from (`last`, for the next step's corrector).
- `VaeEncoder` (image-to-video): the first frame through Wan's VAE encoder, normalised (the
  VAE config's mean and std), in latent frame 0 (the rest zeros).
- `VaeDecoder`: the latents (their first frame the condition's, for image-to-video)
  de-normalised and decoded, as u8 frames (``round(255 · (x / 2 + 0.5))``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from wgc_models._shared.batched import need
from wgc_models._shared.speech import check_sizes
from wgc_models._shared.weights import part
from wgc_models.layers.host_values import int_list
from wgc_models.wan22 import tiny
from wgc_models.wan22.scheduler import FlowSchedule, UniState, flow_schedule, uni_step
from wgc_models.wan22.text import UMT5Encoder
from wgc_models.wan22.toy import noise
from wgc_models.wan22.transformer import WanTransformer
from wgc_models.wan22.vae import WanVaeConfig, WanVaeDecoder
from wgc_models.wan22.vae_encoder import WanVaeEncoder
from wgc_runtime.contract.node import CallContext, Node, NodeContext, NodeError, type_parts
from wgc_runtime.contract.weights import WeightParts

STRIDE = 8  # the VAE's spatial stride (`param vae_stride`)
FIRST_TIMESTEP = 999  # the flow schedule's first timestep: ⌊1000 · (1 - 1e-6)⌋ for any shift


def latent_shape(node: Node, ctx: CallContext) -> tuple[int, int, int, int]:
    """``[C, F', H / 8, W / 8]`` in the request's bucket (C as the node's ports declare it)."""
    o = ctx.options
    ports = {**node.ctx.inputs, **node.ctx.outputs}
    latent = ports.get("latents", ports.get("condition"))
    channels = int(type_parts(latent)[1][0]) if latent is not None else 16
    return (
        channels,
        (int(o["frames"]) - 1) // 4 + 1,
        int(o["height"]) // STRIDE,
        int(o["width"]) // STRIDE,
    )


def _check(node: Node, part: str, want: dict[str, int], have: dict[str, int]) -> None:
    """The built part's sizes against the ``.walk``'s (a checkpoint's ``config.json``, or the
    tiny seeded sizes, may differ from the params): a mismatch is the placement's fault, said
    when the rank starts, before any request."""
    if node.config.get("checkpoint"):
        check_sizes(node.name, f"the checkpoint's `{part}/config.json`", want, have)
        return
    wrong = {k: (want[k], have[k]) for k in want if want[k] != have[k]}
    if wrong:
        diff = ", ".join(f"{k} {w} (tiny: {h})" for k, (w, h) in wrong.items())
        raise NodeError(
            f"node `{node.name}`: seeded weights are built at the tiny sizes only, and the "
            f".walk asks for {diff}; give a `checkpoint` for other sizes"
        )


def _check_vae(node: Node, cfg: WanVaeConfig) -> None:
    ports = {**node.ctx.inputs, **node.ctx.outputs}
    latent = ports.get("latents", ports.get("condition"))
    assert latent is not None
    stride = 2 ** (len(cfg.dim_mult) - 1) * (cfg.patch_size or 1)
    want = {"latent_channels": int(type_parts(latent)[1][0]), "vae_stride": STRIDE}
    _check(node, "vae", want, {"latent_channels": cfg.z_dim, "vae_stride": stride})


def _parts(
    name: str,
    config: Mapping[str, Any],
    build: Callable[[], torch.nn.Module],
    sub: str,
    names: tuple[str, ...] = (),
    skip: tuple[str, ...] = (),
) -> list[WeightParts]:
    """`Node.weights`: the part at its sizes (counted from the folder's ``sub/`` when given)."""
    path = str(config.get("checkpoint") or "")
    where = str(Path(path) / sub) if path else ""
    return [part("wan22", name, config, build, checkpoint=where, names=names, skip=skip)]


def start_noise(node: Node, ctx: CallContext) -> torch.Tensor:
    return noise(latent_shape(node, ctx), ctx, "wan22-latents")


class TextEncoder(Node):
    @classmethod
    def weights(cls, config: Mapping[str, Any]) -> Sequence[WeightParts]:
        text = tiny.configs(str(config.get("checkpoint") or ""))[0]
        return _parts("text_encoder", config, lambda: UMT5Encoder(text), "text_encoder")

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        checkpoint = str(self.config.get("checkpoint") or "")
        model = tiny.build_text_encoder(checkpoint)
        rows, dim = self.out_shape("context")
        _check(self, "text_encoder", {"text_dim": dim}, {"text_dim": model.cfg.d_model})
        try:
            self.tokenizer = tiny.prompt_tokenizer(checkpoint, rows)
        except FileNotFoundError as e:
            raise NodeError(f"node `{self.name}`: {e}") from None
        self.model = model.to(self.device).eval()

    @torch.no_grad()
    def forward_one(
        self, inputs: dict[str, torch.Tensor | None], ctx: CallContext
    ) -> dict[str, torch.Tensor]:
        rows, _ = self.out_shape("context")
        prompt = need(inputs, "prompt", self.name).reshape(-1)
        if self.tokenizer is None:  # the tiny model: the bytes are the ids
            tokens = prompt[:rows].long()
        else:
            text = bytes(int_list(prompt.to(torch.uint8))).decode("utf-8", errors="replace")
            tokens = torch.tensor(self.tokenizer(text), dtype=torch.long)
        ids = torch.zeros(1, rows, dtype=torch.long)
        ids[0, : tokens.numel()] = tokens
        mask = (torch.arange(rows) < tokens.numel()).long()[None]
        states = self.model.prompt_states(ids.to(self.device), mask.to(self.device))
        return {"context": states[0].float().cpu()}


class VaeEncoder(Node):
    """The first frame through Wan's VAE encoder (normalised), in latent frame 0 (TI2V)."""

    @classmethod
    def weights(cls, config: Mapping[str, Any]) -> Sequence[WeightParts]:
        vae = tiny.configs(str(config.get("checkpoint") or ""))[2]
        names, skip = ("encoder.", "quant_conv."), ("post_quant_conv.",)
        return _parts("vae_encoder", config, lambda: WanVaeEncoder(vae), "vae", names, skip)

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        model = tiny.build_vae_encoder(str(self.config.get("checkpoint") or ""))
        _check_vae(self, model.cfg)
        self.model = model.to(self.device).eval()

    @torch.no_grad()
    def forward_one(
        self, inputs: dict[str, torch.Tensor | None], ctx: CallContext
    ) -> dict[str, torch.Tensor]:
        c, frames, h, w = latent_shape(self, ctx)
        image = need(inputs, "image", self.name).to(torch.float32) / 255 * 2 - 1
        video = image.permute(2, 0, 1)[None, :, None].to(self.device)  # [1, 3, 1, H, W]
        first = self.model.normalise(self.model.encode(video))[0, :, 0]
        condition = torch.zeros(c, frames, h, w)
        condition[:, 0] = first.float().cpu()
        return {"condition": condition}


class Dit(Node):
    @classmethod
    def weights(cls, config: Mapping[str, Any]) -> Sequence[WeightParts]:
        expert = str(config.get("expert", "high_noise"))
        dit = tiny.configs(str(config.get("checkpoint") or ""))[1][expert]
        sub = tiny.SUBFOLDERS[expert]
        return _parts(expert, config, lambda: WanTransformer(dit), sub)

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        expert = str(self.config.get("expert", "high_noise"))
        model = tiny.build_transformer(expert, str(self.config.get("checkpoint") or ""))
        want = {"latent_channels": int(type_parts(self.ctx.inputs["latents"])[1][0]),
                "text_dim": int(type_parts(self.ctx.inputs["context"])[1][1])}  # fmt: skip
        have = {"latent_channels": model.cfg.in_channels, "text_dim": model.cfg.text_dim}
        _check(self, tiny.SUBFOLDERS[expert], want, have)
        if model.cfg.out_channels != model.cfg.in_channels:
            raise NodeError(
                f"node `{self.name}`: a transformer of {model.cfg.in_channels} input channels "
                f"and {model.cfg.out_channels} output channels (Wan2.1/2.2 I2V-A14B's "
                "concatenated condition) is not run; image-to-video here conditions as TI2V"
            )
        self.model = model.to(self.device).eval()

    @torch.no_grad()
    def forward_one(
        self, inputs: dict[str, torch.Tensor | None], ctx: CallContext
    ) -> dict[str, torch.Tensor]:
        x, t = inputs.get("latents"), inputs.get("timestep")
        x = (start_noise(self, ctx) if x is None else x)[None]
        t = torch.tensor([float(FIRST_TIMESTEP) if t is None else float(t)])
        cond = inputs.get("condition")
        if cond is not None:  # TI2V: the first frame given, its tokens at t = 0
            x = torch.cat([cond[None, :, :1], x[:, :, 1:]], dim=2)
            pt, ph, pw = self.model.cfg.patch_size
            _, _, f, h, w = x.shape
            per_token = torch.full((f // pt, h // ph, w // pw), float(t))
            per_token[0] = 0.0
            t = per_token.reshape(1, -1)
        x, t = x.to(self.device), t.to(self.device)
        v_pos = self.model(x, t, need(inputs, "context", self.name)[None].to(self.device))
        v_neg = self.model(x, t, need(inputs, "negative", self.name)[None].to(self.device))
        guidance = float(ctx.options.get("guidance", 4.0))
        return {"velocity": (v_neg + guidance * (v_pos - v_neg))[0].float().cpu()}


class Solver(Node):
    @torch.no_grad()
    def forward_one(
        self, inputs: dict[str, torch.Tensor | None], ctx: CallContext
    ) -> dict[str, torch.Tensor]:
        cfg = replace(tiny.SCHEDULER, flow_shift=float(ctx.options.get("shift", 5.0)))
        steps = int(self.config.get("steps", 8))
        schedule = flow_schedule(cfg, steps)
        x = inputs.get("latents")
        x = start_noise(self, ctx) if x is None else x
        k = self._index(schedule, inputs.get("timestep"))
        m1, m2 = inputs.get("m1"), inputs.get("m2")
        kept = (m2, m1)[max(0, 2 - k) :]  # x0 predictions of the steps before, oldest first
        x0s = tuple(m[None] for m in kept if m is not None)
        prev = min(cfg.solver_order, k)  # the order the last step's predictor used
        if cfg.lower_order_final:
            prev = min(prev, steps - k + 1)
        last = inputs.get("last")
        state = UniState(k, x0s, None if last is None or k == 0 else last[None], prev)
        v = need(inputs, "velocity", self.name)[None]
        nxt, state = uni_step(cfg, schedule, state, v, x[None])
        t_next = schedule.timesteps[k + 1] if k + 1 < steps else torch.tensor(0)
        x0s_next = list(state.x0s)  # the newest last
        m2_next = x0s_next[-2] if len(x0s_next) > 1 else torch.zeros_like(nxt)
        assert state.last_sample is not None
        return {
            "latents": nxt[0],
            "timestep": t_next.to(torch.float32),
            "m1": x0s_next[-1][0],
            "m2": m2_next[0],
            "last": state.last_sample[0],
        }

    def _index(self, schedule: FlowSchedule, timestep: torch.Tensor | None) -> int:
        if timestep is None:
            return 0
        hits = (schedule.timesteps == round(float(timestep))).nonzero()
        if len(hits) == 0:
            raise NodeError(f"{self.name}: timestep {float(timestep)} is not in the schedule")
        return int(hits[0])


class VaeDecoder(Node):
    @classmethod
    def weights(cls, config: Mapping[str, Any]) -> Sequence[WeightParts]:
        vae = tiny.configs(str(config.get("checkpoint") or ""))[2]
        names = ("decoder.", "post_quant_conv.")
        return _parts("vae_decoder", config, lambda: WanVaeDecoder(vae), "vae", names)

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        model = tiny.build_vae_decoder(str(self.config.get("checkpoint") or ""))
        _check_vae(self, model.cfg)
        self.model = model.to(self.device).eval()

    @torch.no_grad()
    def forward_one(
        self, inputs: dict[str, torch.Tensor | None], ctx: CallContext
    ) -> dict[str, torch.Tensor]:
        lat = need(inputs, "latents", self.name).clone()
        cond = inputs.get("condition")
        if cond is not None:  # image-to-video: the given first frame
            lat[:, 0] = cond[:, 0]
        lat = lat[None].to(self.device)
        video = self.model.decode(self.model.denormalise(lat))[0]  # [3, F, H, W] in [-1, 1]
        video = (video / 2 + 0.5).clamp(0, 1).permute(1, 2, 3, 0)
        return {"video": (video * 255).round().to(torch.uint8).cpu()}
