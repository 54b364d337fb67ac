"""BAGEL's image sizes: an input image keeps its aspect ratio, as the release's
``ImageTransform`` resizes it (``MaxLongEdgeMinShortEdgeResize``) before its encoders read it.

The release's interleaved inference first resizes every input image by the VAE transform's rule
(``ImageTransform(1024, 512, 16)``: longest side at most the 1024-px generation size, shortest at
least 512, multiples of 16 = the VAE's 8x downsampling times the 2x2 latent patch), whatever the
request wants; that image is what the VAE encodes (`vae_rule`, `vae_image`: in the generation
size's terms, so the tiny model's 64-px side gives 64 / 32 / 16) and what the ViT's own transform
resizes again (`vit_pixels`). The pixel budget is ``ImageTransform``'s default for both.

The release's inference sets the ViT's transform to a longest side of at most 980 px (its
``image_size``), a shortest side of at least 224 px, both multiples of the 14-px patch, and at
most ``14 * 14 * 9 * 1024`` pixels. `vit_side` says these in the ViT's own terms (its
``image_size``, 16 patches, 9 * 1024 patches), which are the release's numbers at its sizes and
scale with the tiny test model. The steps are the release's: scale the longest side down to the
maximum (never up), then the shortest side up to the minimum, each side rounded to a multiple of
the stride (at least one stride); if the pixels are then too many, scale them down to the
budget, and if the longest side is still too long, scale it to the maximum, rounding again each
time. The image is resized with Pillow's bicubic filter, which the release's torchvision
``resize`` of a PIL image calls.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image


@dataclass(frozen=True, slots=True)
class ResizeRule:
    """``MaxLongEdgeMinShortEdgeResize``'s parameters (module docstring)."""

    max_size: int
    min_size: int
    stride: int
    max_pixels: int

    def _side(self, value: float) -> int:
        return max(self.stride, round(value / self.stride) * self.stride)

    def _scaled(self, w: int | float, h: int | float, scale: float) -> tuple[int, int]:
        return self._side(round(w * scale)), self._side(round(h * scale))

    def size(self, height: int, width: int) -> tuple[int, int]:
        """The ``(height, width)`` an image of these sides is resized to."""
        scale = min(self.max_size / max(width, height), 1.0)
        scale = max(scale, self.min_size / min(width, height))
        w, h = self._scaled(width, height, scale)
        if w * h > self.max_pixels:
            w, h = self._scaled(w, h, self.max_pixels / (w * h))
        if max(w, h) > self.max_size:
            w, h = self._scaled(w, h, self.max_size / max(w, h))
        return h, w


def vit_rule(image_size: int, patch_size: int) -> ResizeRule:
    """The ViT's rule (module docstring): 980 / 224 / 14 / 1,806,336 at the release's sizes."""
    return ResizeRule(
        max_size=image_size,
        min_size=min(16 * patch_size, image_size),
        stride=patch_size,
        max_pixels=patch_size * patch_size * 9 * 1024,
    )


MAX_PIXELS = 14 * 14 * 9 * 1024  # ImageTransform's default budget (both transforms)


def vae_rule(image_side: int, stride: int) -> ResizeRule:
    """The VAE transform's rule (module docstring): 1024 / 512 / 16 at the release's sizes."""
    return ResizeRule(
        max_size=image_side, min_size=image_side // 2, stride=stride, max_pixels=MAX_PIXELS
    )


def vae_image(image: torch.Tensor, image_side: int, stride: int) -> torch.Tensor:
    """``u8 [H, W, 3]`` → the image the release's encoders read: resized by `vae_rule`."""
    rule = vae_rule(image_side, stride)
    return resize(image, rule.size(int(image.shape[0]), int(image.shape[1])))


def scaled(image: torch.Tensor) -> torch.Tensor:
    """``u8 [h, w, 3]`` → ``f32 [1, 3, h, w]`` in ``[-1, 1]`` (``ToTensor``, ``Normalize(0.5,
    0.5)``)."""
    return (image.permute(2, 0, 1).float() / 255.0 * 2.0 - 1.0)[None]


def resize(image: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """``u8 [H, W, 3]`` → ``u8 [h, w, 3]`` (Pillow's bicubic; the same image when unchanged)."""
    if tuple(image.shape[:2]) == size:
        return image
    pil = Image.fromarray(image.cpu().numpy().astype(np.uint8))
    out = pil.resize((size[1], size[0]), Image.Resampling.BICUBIC)
    return torch.as_tensor(np.asarray(out).copy())


def vit_pixels(image: torch.Tensor, image_size: int, patch_size: int) -> torch.Tensor:
    """``u8 [H, W, 3]`` (already `vae_image`'s) → the ViT's input ``f32 [1, 3, h, w]``:
    resized by `vit_rule`, scaled to ``[-1, 1]`` (`scaled`)."""
    rule = vit_rule(image_size, patch_size)
    return scaled(resize(image, rule.size(int(image.shape[0]), int(image.shape[1]))))
