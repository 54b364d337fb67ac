"""BAGEL's image-side nodes: the encoders an input image goes through and the decoder a
generated one comes out of (the LLM and the guidance are `wgc_models.bagel.nodes`).

- `VitEncoder`: an image → SigLIP → connector + ViT positions: the understanding tokens
  ``[V, hidden]`` the LLM reads (an image keeps its aspect ratio, resized as BAGEL's release
  resizes it: `wgc_models.bagel.image`).
- `VaeEncoder`: an image → the FLUX VAE's scaled latents, patchified 2x2 on the image's own
  grid: ``[h, w, latent_dim]`` (resized by the release's VAE rule first; the ViT reads that
  image too, as the release's interleaved inference feeds it).
- `VaeDecoder`: latents → pixels (``u8``): text-to-image's ``[latent_tokens, latent_dim]``
  (the ``image_side`` square) or an edit's ``[h, w, latent_dim]`` (``16·h × 16·w``: the input
  image's resized shape, as the release decodes an edit).

Weights and dtypes as `wgc_models.bagel.nodes` describes (one shared copy per process).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from wgc_models._shared.batched import Batched, need, weights_dtype
from wgc_models.bagel.checkpoint import bagel_config, bagel_parts, load_bagel, load_vae
from wgc_models.bagel.image import scaled, vae_image, vit_pixels
from wgc_models.bagel.model import BagelConfig, patchify, unpatchify
from wgc_runtime.contract.node import NodeContext, NodeError, Work
from wgc_runtime.contract.weights import WeightParts


def latent_stride(cfg: BagelConfig) -> int:
    """Pixels per latent token a side: the VAE's downsampling times the latent patch (16)."""
    return 2 ** (len(cfg.vae.block_out_channels) - 1) * cfg.latent_patch_size


class VitEncoder(Batched):
    @classmethod
    def weights(cls, config: Mapping[str, Any]) -> Sequence[WeightParts]:
        return bagel_parts("VitEncoder", config, "vit")

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        self.model = load_bagel(self.name, self.config, self.device, "vit")
        self.dtype = weights_dtype(self.config, self.name)
        self.side = int(self.config.get("image_side", 64))
        self.stride = latent_stride(self.model.config)

    @torch.inference_mode()
    def forward(self, batch: Sequence[Work]) -> list[dict[str, torch.Tensor]]:
        v = self.model.config.vit
        out: list[dict[str, torch.Tensor]] = []
        for w in batch:  # one image at a time: each its own size (and a batch rounds otherwise)
            img = vae_image(_image(w, self.name), self.side, self.stride)  # the release's order
            px = vit_pixels(img, v.image_size, v.patch_size)
            px = px.to(self.device, self.dtype)
            out.append({"vit_embeddings": self.model.vit_tokens(px).to(torch.bfloat16).cpu()})
        return out


def _image(w: Work, node: str) -> torch.Tensor:
    img = w.inputs.get("image")
    if img is None or img.dim() != 3 or img.shape[-1] != 3:
        raise NodeError(f"node `{node}`: an image is u8[H, W, 3]")
    return img


class VaeEncoder(Batched):
    @classmethod
    def weights(cls, config: Mapping[str, Any]) -> Sequence[WeightParts]:
        return bagel_parts("VaeEncoder", config, "vae")

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        self.vae = load_vae(self.name, self.config, self.device)
        self.cfg = bagel_config(self.name, self.config)
        self.side = int(self.config.get("image_side", 64))
        self.stride = latent_stride(self.cfg)
        self.dtype = weights_dtype(self.config, self.name)

    @torch.inference_mode()
    def forward(self, batch: Sequence[Work]) -> list[dict[str, torch.Tensor]]:
        p = self.cfg.latent_patch_size
        out: list[dict[str, torch.Tensor]] = []
        for w in batch:  # one image at a time: a batched convolution rounds differently
            # the release resizes twice: before the context update, then in its VAE transform
            img = _image(w, self.name)
            for _ in range(2):
                img = vae_image(img, self.side, self.stride)
            px = scaled(img).to(self.device, self.dtype)
            h, wd = (n // self.stride for n in img.shape[:2])
            z = patchify(self.vae.encode(px)[0], p).float().cpu()
            out.append({"vae_latents": z.reshape(h, wd, z.shape[-1])})
        return out


class VaeDecoder(Batched):
    @classmethod
    def weights(cls, config: Mapping[str, Any]) -> Sequence[WeightParts]:
        return bagel_parts("VaeDecoder", config, "vae")

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        self.vae = load_vae(self.name, self.config, self.device)
        self.cfg = bagel_config(self.name, self.config)
        self.dtype = weights_dtype(self.config, self.name)

    @torch.inference_mode()
    def forward(self, batch: Sequence[Work]) -> list[dict[str, torch.Tensor]]:
        p, c = self.cfg.latent_patch_size, self.cfg.vae.latent_channels
        out: list[dict[str, torch.Tensor]] = []
        for w in batch:  # one image at a time: a batched convolution rounds differently
            latents = w.inputs.get("edit_latents")
            latents = need(w.inputs, "latents", self.name) if latents is None else latents
            img = self.vae.decode(unpatchify(latents, p, c)[None].to(self.device, self.dtype))[0]
            img = ((img.float() * 0.5 + 0.5).clamp(0, 1) * 255).round().to(torch.uint8)
            out.append({"image": img.permute(1, 2, 0).contiguous().cpu()})
        return out
