"""BAGEL's image sizes (`wgc_models.bagel.image`): the ViT's resize keeps the aspect
ratio with the release's rule (``ImageTransform(980, 224, 14)``: sizes worked out by hand from
its ``MaxLongEdgeMinShortEdgeResize`` steps), and the ViT reads an image of any such size, its
patches placed by row and column in the position tables."""

from __future__ import annotations

import pytest
import torch

from wgc_models.bagel.config import TINY
from wgc_models.bagel.image import ResizeRule, resize, vit_pixels, vit_rule
from wgc_models.bagel.model import Bagel
from wgc_models.layers.random_init import init_seeded

RELEASE = ResizeRule(max_size=980, min_size=224, stride=14, max_pixels=14 * 14 * 9 * 1024)


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
