"""BAGEL's image sizes (`wgc_models.bagel.image`): the ViT's and the VAE's resizes keep the
aspect ratio with the release's rules (``ImageTransform(980, 224, 14)`` and
``ImageTransform(1024, 512, 16)``: sizes worked out by hand from its
``MaxLongEdgeMinShortEdgeResize`` steps, and every size of a sweep equal to `release_size`, an
implementation of those steps written here), the ViT reads an image of any such size, its
patches placed by row and column in the position tables, and the VAE side's latent grid keeps
the image's shape (its tokens placed by row and column in the latent table)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from wgc_models.bagel.config import TINY
from wgc_models.bagel.image import (
    ResizeRule,
    resize,
    vae_image,
    vae_rule,
    vit_pixels,
    vit_rule,
)
from wgc_models.bagel.model import Bagel
from wgc_models.bagel.pixels import latent_stride
from wgc_models.layers.random_init import init_seeded

BUDGET = 14 * 14 * 9 * 1024  # ImageTransform's default max_pixels
RELEASE = ResizeRule(max_size=980, min_size=224, stride=14, max_pixels=BUDGET)
RELEASE_VAE = ResizeRule(max_size=1024, min_size=512, stride=16, max_pixels=BUDGET)


def release_size(
    height: int, width: int, longest: int, shortest: int, stride: int, budget: int = BUDGET
) -> tuple[int, int]:
    """``MaxLongEdgeMinShortEdgeResize``'s ``(height, width)``, from its description: one
    scale that brings the longest side down to ``longest`` (never up) and the shortest up to at
    least ``shortest``; each side then rounded (Python's ``round``) to pixels and to the
    nearest multiple of ``stride`` (at least one); over the pixel ``budget`` the rounded sides
    are scaled to it and rounded again; a longest side still past ``longest`` is scaled to it
    and rounded again."""

    def sides(w: float, h: float, factor: float) -> list[int]:
        out = []
        for v in (w, h):
            px = round(v * factor)
            out.append(max(stride, int(round(px / stride) * stride)))
        return out

    factor = 1.0 if max(height, width) <= longest else longest / max(height, width)
    if min(height, width) * factor < shortest:
        factor = shortest / min(height, width)
    w, h = sides(width, height, factor)
    if w * h > budget:
        w, h = sides(w, h, budget / (w * h))
    if max(w, h) > longest:
        w, h = sides(w, h, longest / max(w, h))
    return h, w


def release_image(image: torch.Tensor, longest: int, shortest: int, stride: int) -> torch.Tensor:
    """The release's resize of a ``u8 [H, W, 3]`` image: Pillow's bicubic to `release_size`."""
    h, w = release_size(int(image.shape[0]), int(image.shape[1]), longest, shortest, stride)
    pil = Image.fromarray(image.numpy())
    if pil.size != (w, h):
        pil = pil.resize((w, h), Image.Resampling.BICUBIC)
    return torch.from_numpy(np.array(pil))


SWEEP = (1, 7, 13, 14, 15, 16, 31, 50, 100, 223, 224, 300, 511, 512, 513, 640, 979, 980, 1000)
SWEEP += (1023, 1024, 1025, 1080, 1920, 2000, 3000, 4000, 9999)


@pytest.mark.parametrize(
    ("rule", "args"),
    [
        (RELEASE, (980, 224, 14)),  # the ViT's
        (RELEASE_VAE, (1024, 512, 16)),  # the VAE's
        (vit_rule(TINY.vit.image_size, TINY.vit.patch_size), (32, 32, 8, 8 * 8 * 9 * 1024)),
        (vae_rule(64, 16), (64, 32, 16)),  # the tiny model's: image_side 64
    ],
)
def test_every_size_of_a_sweep_is_the_releases(rule: ResizeRule, args: tuple) -> None:
    for h in SWEEP:
        for w in SWEEP:
            assert rule.size(h, w) == release_size(h, w, *args), (h, w)


def test_the_vae_sizes_are_the_releases() -> None:
    assert vae_rule(1024, 16) == RELEASE_VAE
    assert RELEASE_VAE.size(1080, 1920) == (576, 1024)  # long side to 1024
    assert RELEASE_VAE.size(300, 200) == (768, 512)  # short side up to 512
    assert RELEASE_VAE.size(1024, 1024) == (1024, 1024)


def test_the_vae_side_reads_the_image_at_its_aspect_ratio() -> None:
    """A 24x40 photo at the tiny sizes: resized by the VAE rule to 32x48 (the release's
    pixels), a 2x3 latent grid whose tokens sit at their rows and columns of the table."""
    photo = torch.arange(24 * 40 * 3).reshape(24, 40, 3).mul(3).remainder(251).to(torch.uint8)
    stride = latent_stride(TINY)
    assert stride == 16
    img = vae_image(photo, 64, stride)
    assert img.shape == (32, 48, 3)
    assert torch.equal(img, release_image(photo, 64, 32, 16))
    assert vae_image(img, 64, stride) is img  # the release's second resize changes nothing
    torch.manual_seed(0)
    model = Bagel(TINY, vit=False).eval()
    init_seeded(model, 1, 1.0)
    grid = torch.randn(2, 3, TINY.patch_latent_dim)
    with torch.no_grad():
        got = model.latent_tokens(grid, 0.5)
        per_side = TINY.max_latent_size
        ids = torch.tensor([r * per_side + c for r in range(2) for c in range(3)])
        x = model.vae2llm(grid.reshape(6, -1))
        want = x + model.time_embedder(torch.full((1,), 0.5)) + model.latent_pos_embed(ids)
        assert torch.allclose(got, want)
        # a square grid given flat reads as before
        flat = torch.randn(4, TINY.patch_latent_dim)
        assert torch.equal(
            model.latent_tokens(flat, 0.5), model.latent_tokens(flat.reshape(2, 2, -1), 0.5)
        )
        with pytest.raises(ValueError, match="latent grid"):
            model.latent_tokens(torch.zeros(1, per_side + 1, TINY.patch_latent_dim), 0.0)


@pytest.mark.parametrize(
    ("hw", "want"),
    [
        ((1080, 1920), (546, 980)),  # long side to 980, 551.25 rounds to 39 patches
        ((50, 100), (224, 448)),  # a small image grows until its short side is 224
        ((980, 980), (980, 980)),  # the full square stays
        ((100, 4000), (28, 980)),  # past the pixel budget, then the long side again
        ((3000, 2000), (980, 658)),
    ],
)
def test_the_vit_sizes_are_the_releases(hw: tuple[int, int], want: tuple[int, int]) -> None:
    assert vit_rule(980, 14) == RELEASE
    assert RELEASE.size(*hw) == want


def test_an_image_keeps_its_aspect_ratio_through_the_vit() -> None:
    v = TINY.vit
    photo = torch.arange(24 * 40 * 3).reshape(24, 40, 3).mul(3).remainder(251).to(torch.uint8)
    px = vit_pixels(photo, v.image_size, v.patch_size)
    assert px.shape == (1, 3, 16, 32)  # 40x24 → 32x16: wide, not squashed into 32x32
    assert resize(photo, (24, 40)) is photo
    torch.manual_seed(0)
    model = Bagel(TINY, llm=False).eval()
    init_seeded(model, 1, 1.0)
    with torch.no_grad():
        wide = model.vit_tokens(px)
        assert wide.shape == (2 * 4, TINY.llm.hidden_size)
        # the full square reads every position in order, as the plain table lookup
        square = torch.rand(1, 3, v.image_size, v.image_size) * 2 - 1
        whole = model.vit_model.vision_model(square)
        rows = v.image_size // v.patch_size
        ids = torch.arange(rows * rows)
        assert torch.equal(model.vit_model.vision_model(square, ids), whole)
        with pytest.raises(ValueError, match="past the ViT"):
            model.vit_tokens(torch.zeros(1, 3, v.image_size + v.patch_size, v.patch_size))
