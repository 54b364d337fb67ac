"""Toy BAGEL nodes (deterministic stand-ins until the model issue brings real tiny models).

- `VitEncoder` / `VaeEncoder`: average pixel regions through a fixed linear map.
- `LLM` (and `LLM_cfg_text`, `LLM_cfg_img`, which share the class and read one KV label of
  LLM's cache each): a kv-cache node on the runtime's paged pool with three labels, as BAGEL
  keeps them: a text segment goes into `main` and `cfg_img` (the image-free branch), an image
  (ViT or VAE tokens) into `main` and `cfg_text` (the text-free branch); a prefill's token is a
  hash of what its last position attends to in `main`. Decode appends each token to `main` and
  says `stop` after `eos_after` tokens (request option, toy only; default 4). Denoising starts
  from noise seeded by the request when `latents` is a bare signal; a guidance pass's
  `velocity` pulls the latents towards what they read from one label (non-causally: latents
  are not in the cache); the call either returns that one pass (when it binds `velocity`) or
  does the three passes, the CFG combination and an Euler step itself.
- `CombineCfg`: the CFG combination and the Euler step.
- `VaeDecoder`: latents to pixels by a fixed map, upsampled.
"""

from __future__ import annotations

import math

import torch

from examples._toy import embed, eos_after, kv_read, kv_rows, kv_summary, noise
from wgc_runtime.contract.node import CallContext, Node

VOCAB = 1000
EOS = 0
LABELS = ("main", "cfg_text", "cfg_img")
PREFILL_LABELS = {
    "text_inputs": ("main", "cfg_img"),  # the image-free branch keeps the text
    "vit_embeddings": ("main", "cfg_text"),  # the text-free branch keeps the image
    "vae_latents": ("main", "cfg_text"),
}


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
        kv = ctx.kv
        for port, labels in PREFILL_LABELS.items():
            if port in inputs:
                k, v = kv_rows(inputs[port], kv, salt=21)
                for label in labels:
                    kv.append(k, v, label)
                return {"new_token": self._token(kv_summary(kv, inputs[port], 22, "main"))}
        if "token" in inputs:
            return self._decode(inputs["token"], ctx)
        return self._denoise(inputs, ctx)

    @staticmethod
    def _token(h: int) -> torch.Tensor:
        return torch.tensor([1 + h % (VOCAB - 1)], dtype=torch.int64)  # never EOS

    def _decode(self, token, ctx):
        kv, st = ctx.kv, ctx.state
        kv.append(*kv_rows(token, kv, salt=21), "main")
        st["decoded"] = st.get("decoded", 0) + 1
        stop = st["decoded"] >= eos_after(ctx, 4)
        h = kv_summary(kv, token, 22, "main")
        new = torch.tensor([EOS], dtype=torch.int64) if stop else self._token(h)
        return {"new_token": new, "stop": torch.tensor(stop)}

    @staticmethod
    def _velocity(latents, t, ctx, label: str) -> torch.Tensor:
        target = kv_read(ctx.kv, latents, 23, label)  # [rows, 1]
        return (target - latents) * (1.0 + 0.01 * float(t))

    def _denoise(self, inputs, ctx):
        latents, t = _start(inputs, ctx, self.out_shape("latents"))
        if "velocity" in ctx.writes:  # one guidance pass: this node's (first) label
            return {"velocity": self._velocity(latents, t, ctx, ctx.kv.labels[0])}
        vs = [self._velocity(latents, t, ctx, label) for label in LABELS]
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
