"""Toy Wan2.2 nodes (deterministic stand-ins until the model issue brings the real model).

Shapes come from the request's shape bucket: the latents are ``[C, (frames - 1) / 4 + 1,
height / 8, width / 8]`` for the request's `frames`, `height` and `width` options (their
defaults when it sets none), as the `.walk` file declares.

- `TextEncoder`: the prompt's bytes pooled into ``text_len`` rows of ``text_dim`` (an empty
  negative prompt is all zeros).
- `VaeEncoder`: the first frame pooled into the latent grid, in latent frame 0 (the rest zero:
  Wan's image-to-video mask).
- `Dit` (both experts: config `expert`): a fixed function of the latents, the timestep and the
  pooled prompts, with classifier-free guidance (`guidance` option) against the negative prompt.
  The first step's latents are a bare signal: noise every node of the request agrees on.
- `Solver`: a flow-matching step on a shifted schedule (`shift` option) with a two-step
  multistep correction from its buffers `m1`, `m2` (the last two x0 predictions).
- `VaeDecoder`: the latents upsampled to the video, as u8.
"""

from __future__ import annotations

import torch

from wgc_models._shared.batched import need
from wgc_models.wan22.toy import embed, noise
from wgc_runtime.contract.node import Node, type_parts

STRIDE = 8  # the VAE's spatial stride (`param vae_stride`)


def latent_shape(node: Node, ctx) -> tuple[int, int, int, int]:
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


def start_noise(node: Node, ctx) -> torch.Tensor:
    return noise(latent_shape(node, ctx), ctx, "wan22-latents")


class TextEncoder(Node):
    def forward_one(self, inputs, ctx):
        rows, dim = self.out_shape("context")
        prompt = need(inputs, "prompt", self.name).reshape(-1)
        if prompt.numel() == 0:
            return {"context": torch.zeros(rows, dim)}
        return {"context": embed(prompt, rows, dim, torch.float32, salt=31)}


class VaeEncoder(Node):
    def forward_one(self, inputs, ctx):
        c, frames, h, w = latent_shape(self, ctx)
        image = need(inputs, "image", self.name).to(torch.float32) / 255
        grid = image.reshape(-1, 3)  # pooled into h * w cells
        cells = embed(grid, h * w, c, torch.float32, salt=33).T.reshape(c, h, w)
        condition = torch.zeros(c, frames, h, w)
        condition[:, 0] = cells
        return {"condition": condition}


class Dit(Node):
    def forward_one(self, inputs, ctx):
        x, t = inputs.get("latents"), inputs.get("timestep")
        x = start_noise(self, ctx) if x is None else x
        t = torch.tensor(1.0) if t is None else t
        salt = 1.0 if self.config.get("expert") == "high_noise" else 2.0
        cond = inputs.get("condition")
        x_in = x if cond is None else x + 0.1 * cond
        v_pos = self._velocity(x_in, t, inputs["context"], salt)
        v_neg = self._velocity(x_in, t, inputs["negative"], salt)
        guidance = float(ctx.options.get("guidance", 4.0))
        return {"velocity": v_neg + guidance * (v_pos - v_neg)}

    @staticmethod
    def _velocity(x, t, context, salt: float) -> torch.Tensor:
        pull = context.mean() * 0.1
        return torch.tanh(x * (0.5 + 0.1 * salt) + t * 0.2 + pull) - 0.05 * x


class Solver(Node):
    def forward_one(self, inputs, ctx):
        x, timestep = inputs.get("latents"), inputs.get("timestep")
        x = start_noise(self, ctx) if x is None else x
        t = float(timestep) if timestep is not None else 1.0
        steps = int(self.config.get("steps", 8))
        shift = float(ctx.options.get("shift", 5.0))
        t_next = max(t - 1.0 / steps, 0.0)
        sigma, sigma_next = self._shifted(t, shift), self._shifted(t_next, shift)
        v = need(inputs, "velocity", self.name)
        x0 = x - sigma * v
        m1, m2 = inputs.get("m1"), inputs.get("m2")
        step = x + (sigma_next - sigma) * v
        if m1 is not None and m2 is not None:  # the second-order correction
            step = step + 0.5 * (sigma_next - sigma) * (x0 - 2 * m1 + m2) * 0.1
        m2_next = m1 if m1 is not None else torch.zeros_like(x0)
        return {"latents": step, "timestep": torch.tensor(t_next), "m1": x0, "m2": m2_next}

    @staticmethod
    def _shifted(t: float, shift: float) -> float:
        return shift * t / (1 + (shift - 1) * t)


class VaeDecoder(Node):
    def forward_one(self, inputs, ctx):
        frames, height, width = (int(ctx.options[k]) for k in ("frames", "height", "width"))
        lat = need(inputs, "latents", self.name)
        rgb = lat[:3] if lat.shape[0] >= 3 else lat.repeat(3, 1, 1, 1)[:3]
        video = rgb.repeat_interleave(4, dim=1)[:, :frames]
        video = video.repeat_interleave(STRIDE, dim=2).repeat_interleave(STRIDE, dim=3)
        video = video[:, :, :height, :width].permute(1, 2, 3, 0)
        return {"video": ((torch.tanh(video) + 1) * 127.5).round().clamp(0, 255).to(torch.uint8)}
