"""Toy BAGEL nodes (deterministic stand-ins until the model issue brings real tiny models).

- `VitEncoder` / `VaeEncoder`: average pixel regions through a fixed linear map.
- `LLM` (and `LLM_cfg_text`, `LLM_cfg_img`, which share the class and differ by KV label):
  prefill calls fold their input into a per-request context hash; decode hashes the context and
  the previous token into the next token and says `stop` after `eos_after` tokens (request
  option, toy only; default 4); denoising starts from noise seeded by the request when
  `latents` is a bare signal, and either returns one guidance pass's `velocity` (when the call
  binds it) or does the three passes, the CFG combination and an Euler step itself.
- `CombineCfg`: the CFG combination and the Euler step.
- `VaeDecoder`: latents to pixels by a fixed map, upsampled.
"""

from __future__ import annotations

import math

import torch

from examples._toy import digest, embed, eos_after, noise
from wgc_runtime.contract.node import CallContext, Node

VOCAB = 1000
EOS = 0
LABEL_SHIFT = {"main": 0.0, "cfg_text": 0.25, "cfg_img": 0.5}


def _start(inputs, ctx: CallContext, shape) -> tuple[torch.Tensor, torch.Tensor]:
    """The denoising state; bare signals start from request-seeded noise at time index 0."""
    latents = inputs.get("latents")
    if latents is None:
        latents = noise(shape, ctx, "latents")
    t = inputs.get("time_index")
    if t is None:
        t = torch.tensor(0, dtype=torch.int64)
    return latents, t


def _combine(v_main, v_text, v_img, text_scale: float, img_scale: float) -> torch.Tensor:
    return v_main + text_scale * (v_main - v_text) + img_scale * (v_main - v_img)


def _euler(latents, t, v, steps: int = 50) -> tuple[torch.Tensor, torch.Tensor]:
    return latents + v / steps, t + 1


class VitEncoder(Node):
    def forward_one(self, inputs, ctx):
        _, hidden = self.out_shape("vit_embeddings", V=4)
        return {"vit_embeddings": embed(inputs["image"], 4, hidden, torch.bfloat16, salt=1)}


class VaeEncoder(Node):
    def forward_one(self, inputs, ctx):
        _, dim = self.out_shape("vae_latents", L=4)
        return {"vae_latents": embed(inputs["image"], 4, dim, torch.float32, salt=2)}


class LLM(Node):
    def forward_one(self, inputs, ctx):
        st = ctx.state
        st.setdefault("context", 0)
        for port in ("text_inputs", "vit_embeddings", "vae_latents"):
            if port in inputs:
                st["context"] = digest(st["context"], port, inputs[port])
                return {"new_token": self._token(st["context"])}
        if "token" in inputs:
            return self._decode(inputs["token"], ctx)
        return self._denoise(inputs, ctx)

    @staticmethod
    def _token(h: int) -> torch.Tensor:
        return torch.tensor([1 + h % (VOCAB - 1)], dtype=torch.int64)  # never EOS

    def _decode(self, token, ctx):
        st = ctx.state
        st["decoded"] = st.get("decoded", 0) + 1
        st["context"] = digest(st["context"], token)
        stop = st["decoded"] >= eos_after(ctx, 4)
        new = torch.tensor([EOS], dtype=torch.int64) if stop else self._token(st["context"])
        return {"new_token": new, "stop": torch.tensor(stop)}

    def _velocity(self, latents, t, context: int, label: str) -> torch.Tensor:
        target = math.sin(context % 1000) + LABEL_SHIFT.get(label, 0.0)
        return (target - latents) * (1.0 + 0.01 * float(t))

    def _denoise(self, inputs, ctx):
        latents, t = _start(inputs, ctx, self.out_shape("latents"))
        context = ctx.state.get("context", 0)
        if "velocity" in ctx.writes:
            label = self.ctx.labels[0] if self.ctx.labels else "main"
            return {"velocity": self._velocity(latents, t, context, label)}
        vs = [self._velocity(latents, t, context, lab) for lab in ("main", "cfg_text", "cfg_img")]
        v = _combine(
            *vs, self.config.get("cfg_text_scale", 4.0), self.config.get("cfg_img_scale", 1.0)
        )
        latents, t = _euler(latents, t, v)
        return {"latents": latents, "time_index": t}


class CombineCfg(Node):
    def forward_one(self, inputs, ctx):
        latents, t = _start(inputs, ctx, self.out_shape("latents"))
        v = _combine(
            inputs["v_main"],
            inputs["v_text"],
            inputs["v_img"],
            self.config.get("cfg_text_scale", 4.0),
            self.config.get("cfg_img_scale", 1.0),
        )
        latents, t = _euler(latents, t, v)
        return {"latents": latents, "time_index": t}


class VaeDecoder(Node):
    def forward_one(self, inputs, ctx):
        side, _, _ = self.out_shape("image")
        latents = inputs["latents"]
        grid = math.isqrt(latents.shape[0])
        rgb = torch.sigmoid(latents[:, :3]).reshape(grid, grid, 3)
        up = rgb.repeat_interleave(side // grid, 0).repeat_interleave(side // grid, 1)
        return {"image": (up * 255).round().to(torch.uint8)}
