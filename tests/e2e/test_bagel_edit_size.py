"""The size of a BAGEL edit: the release's interleaved inference sets ``image_shapes`` to the
input image's size after its VAE transform's resize and generates and decodes at it (an edit
keeps the input's aspect ratio; text-to-image keeps the requested square). Checked through
`LocalCluster` on the seeded tiny model (no checkpoint) for inputs of several aspect ratios, on
the single-node walk (``cpu-batched-cfg``: ``image_edit``) and the CFG-parallel one (``cpu``:
``image_edit_cfg``); the expected sizes are worked out by hand from the rule (tiny: longest side
at most 64, shortest at least 32, multiples of 16) and agree with the test's own implementation
of it (`release_size`)."""

from __future__ import annotations

import pytest
import torch

from tests.e2e.real_support import compile_to, run_local
from tests.unit.test_bagel_image import release_size
from wgc.interp import segment

# input (height, width) -> the edit's (height, width), by hand from the rule
SIZES = {
    (24, 40): (32, 48),  # the shortest side up to 32 (x 4/3): 53 wide -> 48
    (40, 24): (48, 32),  # the same, portrait
    (64, 64): (64, 64),  # already the generation square
    (50, 70): (48, 64),  # the longest side down to 64 (x 64/70): 45.7 high -> 48
    (30, 100): (16, 64),  # up to 32 x 107 (-> 112), then the longest side down to 64: 18 -> 16
    (130, 90): (64, 48),  # down by 64/130: 44.3 wide -> 48
}


def photo(h: int, w: int) -> torch.Tensor:
    return torch.arange(h * w * 3).reshape(h, w, 3).mul(7).remainder(253).to(torch.uint8)


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    return {
        p: compile_to(tmp_path_factory.mktemp(p), "bagel", p, {})
        for p in ("cpu", "cpu-batched-cfg")
    }


def edit(plan, images: list[torch.Tensor], rid: str) -> torch.Tensor:
    inputs = [segment("image", im) for im in images] + [segment("text", "make it blue")]
    got = run_local(plan, inputs, ["image"], {}, rid=rid)
    (walk,) = [w for _, w, m in got if m == "image"]
    assert walk.startswith("image_edit")
    (image,) = got[("main", walk, "image")]
    return image


def test_the_hand_worked_sizes_are_the_rule() -> None:
    for (h, w), want in SIZES.items():
        assert release_size(h, w, 64, 32, 16) == want


@pytest.mark.parametrize("placement", ["cpu", "cpu-batched-cfg"])
def test_an_edit_keeps_the_input_aspect_ratio(plans, placement) -> None:
    for i, ((h, w), (eh, ew)) in enumerate(SIZES.items()):
        image = edit(plans[placement], [photo(h, w)], f"e{i}")
        assert image.shape == (eh, ew, 3) and image.dtype == torch.uint8
        assert image.float().std() > 1  # decoded pixels, not a fill


def test_with_several_images_the_last_one_sets_the_size(plans) -> None:
    """The release overwrites ``image_shapes`` at each input image: the last one's wins."""
    image = edit(plans["cpu"], [photo(24, 40), photo(30, 100)], "two")
    assert image.shape == (16, 64, 3)
    image = edit(plans["cpu"], [photo(30, 100), photo(24, 40)], "two-b")
    assert image.shape == (32, 48, 3)


def test_text_to_image_keeps_the_square(plans) -> None:
    got = run_local(plans["cpu"], [segment("text", "a red cube")], ["image"], {}, rid="t")
    (image,) = got[("main", "image_gen_cfg", "image")]
    assert image.shape == (64, 64, 3)
