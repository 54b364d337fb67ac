"""BAGEL's example on its real (tiny) architecture against a reference pipeline called directly,
on a checkpoint this test writes (``model.safetensors`` under BAGEL's module names, ``vae/`` a
diffusers ``AutoencoderKL`` folder), loaded by the nodes' own loader:

* text-to-image, image editing and image understanding through `LocalCluster` on every CPU
  placement (``cpu``, ``cpu-2rank`` and ``cpu-3rank`` take the CFG-parallel walk
  ``image_gen_cfg``; ``cpu-batched-cfg`` leaves the CFG copies unplaced, so ``image_gen`` runs
  the three passes as one batched call over the three labels) equal the reference: each CFG
  context (``main``, ``cfg_text``, ``cfg_img``) kept as its own block list and run as a full
  dense pass from scratch at every step (three separate passes, no cache), BAGEL's guidance and
  the Euler step over the shifted schedule from the request's noise, then diffusers' decoder;
  greedy decoding by full passes over the sequence;
* one placement serves a mixed stream of the three at once (the 1-rank and the 3-rank
  CFG-parallel placements, the batched one, and as processes), each output equal to the
  request's alone;
* `wgc run` writes the reference image as a PNG;
* the checkpoint is what runs: the default seeded weights give another image.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.e2e.real_support import (
    PLACEMENTS,
    ROOT,
    compile_to,
    noise,
    run_local,
    run_processes,
    save_module,
    start,
)
from tests.unit.test_bagel_image import release_image
from wgc.interp import segment
from wgc_models.bagel.config import TINY
from wgc_models.bagel.image import vit_pixels
from wgc_models.bagel.model import (
    Bagel,
    Guidance,
    Schedule,
    euler,
    guide,
    patchify,
    unpatchify,
)
from wgc_models.layers.block_attention import Block, DenseBlocks, DenseKV
from wgc_models.layers.random_init import init_seeded

diffusers = pytest.importorskip("diffusers")

STEPS, SHIFT, IMAGE_SIDE = 50, 3.0, 64  # the .walk's `steps`, `timestep_shift`, `image_side`
PHOTO = torch.arange(24 * 40 * 3).reshape(24, 40, 3).mul(3).remainder(251).to(torch.uint8)
BAGEL_PLACEMENTS = (*PLACEMENTS, "cpu-batched-cfg")  # the last: the single-node walk image_gen
REQUESTS = {  # name -> (inputs, want, options)
    "t2i": ([segment("text", "a red cube")], ["image"], {}),
    "edit": ([segment("image", PHOTO), segment("text", "make it blue")], ["image"], {}),
    "i2t": ([segment("image", PHOTO), segment("text", "what is it?")], ["text"], {"max_tokens": 7}),
}


@pytest.fixture(autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    """(checkpoint folder, BAGEL's LLM and ViT sides, diffusers' VAE)."""
    path = tmp_path_factory.mktemp("bagel")
    model = init_seeded(Bagel(TINY), 41, keep=("pos_embed",)).eval()
    save_module(model, path / "model.safetensors")
    vae = init_seeded(diffusers.AutoencoderKL(**TINY.vae.diffusers()), 42).eval()
    vae.save_pretrained(path / "vae")
    return path, model, vae


@pytest.fixture(scope="module")
def plans(weights, tmp_path_factory):
    sets = {"checkpoint": str(weights[0])}
    return {p: compile_to(tmp_path_factory.mktemp(p), "bagel", p, sets) for p in BAGEL_PLACEMENTS}


# ---------------------------------------------------------------------------- the reference
def dense(model: Bagel, blocks: list) -> torch.Tensor:
    """One full pass over ``blocks`` (text causal, images full, one sequence), no cache."""
    groups: list[int] = []
    for b in blocks:
        groups += [1] * b.x.shape[0] if b.causal else [b.x.shape[0]]
    xs = torch.cat([b.x for b in blocks])
    step = DenseBlocks(DenseKV(2), [Block("dense", "x", xs.shape[0], groups=tuple(groups))])
    pos = torch.cat([b.positions for b in blocks])
    return model.language_model(xs, pos, step, torch.cat([b.gen for b in blocks]))


def rope(blocks: list) -> int:
    return blocks[-1].next_rope if blocks else 0


def contexts(model: Bagel, vae, inputs, want) -> dict[str, list]:
    """BAGEL's three contexts: a text goes into ``main`` and ``cfg_img`` (``cfg_text`` is
    ``main`` before it); an image (its VAE latents when an image is wanted, then its ViT
    tokens) into ``main`` and ``cfg_text``."""
    ctx: dict[str, list] = {"main": [], "cfg_text": [], "cfg_img": []}
    for seg in inputs:
        if seg.modality == "text":
            ids = torch.tensor(list(seg.data.encode("utf-8")))
            ctx["cfg_text"] = list(ctx["main"])
            for label in ("main", "cfg_img"):
                ctx[label].append(model.text_block(ids, rope(ctx[label])))
            continue
        images = []
        # the release resizes an input image by its VAE transform's rule first (the test's own
        # `release_image`): the VAE encodes that image and the ViT resizes it again
        img = release_image(seg.data, IMAGE_SIDE, IMAGE_SIDE // 2, 16)
        if "image" in want:
            px = (img.permute(2, 0, 1).float() / 255.0 * 2.0 - 1.0)[None]
            z = (vae.encode(px).latent_dist.mode() - vae.config.shift_factor) * (
                vae.config.scaling_factor
            )
            grid = patchify(z[0], TINY.latent_patch_size).reshape(
                img.shape[0] // 16, img.shape[1] // 16, -1
            )  # the image's own grid: 2x3 for PHOTO
            images.append((model.latent_tokens(grid, 0.0), True))
        # the ViT reads the image at its aspect ratio (`bagel_image`, tested against the release)
        vit = model.vit_tokens(vit_pixels(img, TINY.vit.image_size, TINY.vit.patch_size))
        images.append((vit.to(torch.bfloat16).float(), False))  # the `bf16` port
        for tokens, gen in images:
            ctx["main"].append(model.image_block(tokens, rope(ctx["main"]), gen))
            ctx["cfg_text"] = list(ctx["main"])
    return ctx


@torch.no_grad()
def reference(weights, name: str, rid: str, seed: int | None = None) -> torch.Tensor:
    """The request's image ``u8 [side, side, 3]`` or its decoded tokens (``seed``: `--seed`)."""
    _, model, vae = weights
    inputs, want, options = REQUESTS[name]
    ctx = contexts(model, vae, inputs, want)
    if "text" in want:
        tokens, blocks = [TINY.tokens.bos], list(ctx["main"])
        while True:
            blocks.append(model.token_block(tokens[-1], rope(blocks)))
            nxt = int(model.language_model.logits(dense(model, blocks)[-1:]).argmax(-1))
            if nxt == TINY.tokens.eos or len(blocks) - len(ctx["main"]) >= options["max_tokens"]:
                return torch.tensor(tokens)
            tokens.append(nxt)
    images = [s.data for s in inputs if s.modality == "image"]
    g = Guidance.editing(4.0, 2.0) if images else Guidance(4.0, 1.0)
    shape: tuple[int, ...] = (16, 16)  # text-to-image: the 4x4 square of 16-dim tokens
    if images:  # an edit: the last input image's grid (its release-resized size / 16)
        h, w, _ = edit_size(images[-1])
        shape = (h // 16, w // 16, 16)
    sched, x = Schedule(STEPS, SHIFT), noise(shape, "latents", rid, seed)
    for i in range(STEPS - 1):
        t, dt = sched.at(i)
        v = {}
        for label, blocks in ctx.items():
            latent = model.image_block(model.latent_tokens(x, t), rope(blocks), True)
            out = dense(model, [*blocks, latent])[-latent.x.shape[0] :]
            v[label] = model.velocity(out).reshape(x.shape)
        x = euler(x, guide(v["main"], v["cfg_text"], v["cfg_img"], g, t), dt)
    z = unpatchify(x, TINY.latent_patch_size, TINY.vae.latent_channels)[None]
    img = vae.decode(z / vae.config.scaling_factor + vae.config.shift_factor).sample[0]
    return ((img * 0.5 + 0.5).clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0)


def edit_size(image: torch.Tensor) -> tuple[int, int, int]:
    """The size BAGEL's release gives an edit of ``image``: its interleaved inference sets
    ``image_shapes`` to the input's size after the VAE transform's resize (the test's own
    `release_image`) and generates and decodes at it."""
    h, w = release_image(image, IMAGE_SIDE, IMAGE_SIDE // 2, 16).shape[:2]
    return h, w, 3


def check(got, name: str, want: torch.Tensor) -> None:
    if name == "i2t":
        texts = torch.cat(got[("main", "decode", "text")])
        assert texts.tolist() == want.tolist()
        return
    walks = ("image_edit_cfg", "image_edit") if name == "edit" else ("image_gen_cfg", "image_gen")
    (image,) = got.get(("main", walks[0], "image")) or got[("main", walks[1], "image")]
    size = edit_size(PHOTO) if name == "edit" else (IMAGE_SIDE, IMAGE_SIDE, 3)
    assert image.shape == want.shape == size and image.dtype == torch.uint8
    diff = (image.int() - want.int()).abs()
    assert diff.max() <= 1 and diff.float().mean() < 0.01  # float rounding at a pixel's edge
    assert want.float().std() > 5  # an image, not a flat field


# ---------------------------------------------------------------------------- the tests
@pytest.mark.parametrize("placement", BAGEL_PLACEMENTS)
@pytest.mark.parametrize("name", list(REQUESTS))
def test_each_task_equals_the_reference_pipeline(weights, plans, placement, name) -> None:
    got = run_local(plans[placement], *REQUESTS[name], rid=f"{name}-0")
    if name != "i2t":  # which denoising walk ran: the CFG copies placed or not
        walk = "image_edit" if name == "edit" else "image_gen"
        walk += "" if placement == "cpu-batched-cfg" else "_cfg"
        assert [w for _, w, m in got if m == "image"] == [walk]
    check(got, name, reference(weights, name, f"{name}-0"))


@pytest.mark.slow
@pytest.mark.parametrize("placement", ["cpu", "cpu-3rank", "cpu-batched-cfg"])
def test_one_placement_serves_a_mixed_stream(weights, plans, placement) -> None:
    from wgc_runtime.host.local import LocalCluster

    c = LocalCluster(plans[placement], strict=True)
    order = ["t2i", "i2t", "edit", "i2t", "t2i"]
    handles = [c.submit(c.request(*REQUESTS[n]), f"{n}-{i}") for i, n in enumerate(order)]
    c.run()
    for i, (n, h) in enumerate(zip(order, handles, strict=True)):
        assert h.ok, h.error
        got: dict = {}
        for o in h.outputs:
            got.setdefault((o.meta["flow"], o.meta["walk"], o.modality), []).append(o.tensor)
        check(got, n, reference(weights, n, f"{n}-{i}"))


def test_the_checkpoint_is_what_runs(weights, plans, tmp_path) -> None:
    default = compile_to(tmp_path / "default", "bagel", "cpu", {})
    key = ("main", "image_gen_cfg", "image")
    ours = run_local(plans["cpu"], *REQUESTS["t2i"], rid="x")[key][0]
    other = run_local(default, *REQUESTS["t2i"], rid="x")[key][0]
    assert (ours.int() - other.int()).abs().float().mean() > 5


@pytest.mark.slow
@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="needs POSIX shm")
def test_processes_serve_the_mixed_stream(weights, plans) -> None:
    order = ["edit", "t2i", "i2t"]
    cluster = start(plans["cpu-3rank"])
    try:
        outs = run_processes(cluster, [(*REQUESTS[n], f"{n}-p{i}") for i, n in enumerate(order)])
    finally:
        cluster.stop()
    for i, (n, got) in enumerate(zip(order, outs, strict=True)):
        check(got, n, reference(weights, n, f"{n}-p{i}"))


@pytest.mark.slow
@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="needs POSIX shm")
def test_wgc_run_writes_the_reference_image(weights, plans, tmp_path) -> None:
    from PIL import Image

    exe = Path(sys.executable).with_name("wgc")
    args = [str(exe), "run", str(plans["cpu-2rank"]), "--input", "text=a red cube"]
    args += ["--want", "image", "--seed", "7", "-o", str(tmp_path)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    png = torch.from_numpy(np.array(Image.open(tmp_path / "image_000.png")))
    want = reference(weights, "t2i", "any-id", seed=7)
    check({("main", "image_gen_cfg", "image"): [png]}, "t2i", want)


@pytest.mark.slow
def test_bf16_weights_run_every_task(weights, plans, tmp_path) -> None:
    """``--set dtype=bf16`` (what the real placement sets): the checkpoint's weights held and
    computed in bf16, the rotary tables in f32; every task runs and the image stays close to
    the f32 reference's (bf16 rounds: not equal)."""
    from wgc_models.bagel.checkpoint import load_bagel

    sets = {"checkpoint": str(weights[0]), "dtype": "bf16"}
    llm = load_bagel("LLM", sets | {"model": "tiny"}, torch.device("cpu"), "llm")
    assert {p.dtype for p in llm.parameters()} == {torch.bfloat16}
    assert llm.language_model.inv_freq.dtype == torch.float32
    plan = compile_to(tmp_path / "bf16", "bagel", "cpu-batched-cfg", sets)
    for name in ("t2i", "edit"):
        got = run_local(plan, *REQUESTS[name], rid=f"{name}-0")
        (image,) = got[("main", "image_edit" if name == "edit" else "image_gen", "image")]
        want = reference(weights, name, f"{name}-0")
        diff = (image.int() - want.int()).abs().float()
        print(f"\n{name} bf16 vs f32: mean {diff.mean():.2f}, max {diff.max():.0f} u8 steps")
        assert image.shape == want.shape and 0 < diff.mean() < 4
    texts = run_local(plan, *REQUESTS["i2t"], rid="i2t-0")[("main", "decode", "text")]
    assert 1 <= len(texts) <= 7


def test_with_the_detokenizer_placed_the_reply_is_text(weights, tmp_path) -> None:
    """Image understanding through a placement with the detokenizer: the reply is the text of
    the tokens the reference decodes (tiny: a token under 256 is a byte, BAGEL's special ids
    add nothing), the tokens past the stop (`max_tokens`) adding nothing either."""
    from wgc.cli.compile import sync
    from wgc.driver import Driver

    cpu = (ROOT / "wgc_models/bagel/placements/cpu.yaml").read_text()
    assert "combine_cfg, vae_decoder]" in cpu
    (tmp_path / "text.yaml").write_text(cpu.replace("vae_decoder]", "vae_decoder, detokenizer]"))
    result = Driver().compile(
        str(ROOT / "wgc_models/bagel/bagel.walk"), str(tmp_path / "text.yaml"),
        {"checkpoint": str(weights[0])},
    )  # fmt: skip
    assert result.ok, [d.message for d in result.errors]
    sync(tmp_path / "plan", result.files, check=False)
    got = run_local(tmp_path / "plan", *REQUESTS["i2t"], rid="i2t-0")
    assert list(got) == [("text", "detokenize", "text")]
    text = b"".join(bytes(t.tolist()) for t in got[("text", "detokenize", "text")])
    want = reference(weights, "i2t", "i2t-0").tolist()
    assert len(text) > 0 and text == bytes(t for t in want if t < 256)


def test_the_tiny_text_placement_speaks_through_the_shipped_bpe(tmp_path) -> None:
    """``cpu-text.yaml`` without a checkpoint (model ``tiny-text``): the prompt goes in through
    the shipped tiny BPE (``bagel/tokenizer.json``) and the reply is that tokenizer's text of the
    ids the same model decodes (``cpu.yaml`` with model ``tiny-text`` gives the ids)."""
    from tokenizers import Tokenizer

    from wgc_models.bagel.text import TINY_TOKENIZER

    tok = Tokenizer.from_file(str(TINY_TOKENIZER))
    request = ([segment("image", PHOTO), segment("text", "what is it?")], ["text"])
    options = {"max_tokens": 9}
    ids_plan = compile_to(tmp_path / "ids", "bagel", "cpu", {"model": "tiny-text"})
    ids = torch.cat(run_local(ids_plan, *request, options, rid="r")[("main", "decode", "text")])
    assert any(int(t) >= 256 for t in ids[1:])  # BPE ids, not bytes
    text_plan = compile_to(tmp_path / "text", "bagel", "cpu-text", {})
    got = run_local(text_plan, *request, options, rid="r")
    text = b"".join(bytes(t.tolist()) for t in got[("text", "detokenize", "text")])
    want = tok.decode([int(t) for t in ids], skip_special_tokens=True)
    assert want and text.decode("utf-8") == want
