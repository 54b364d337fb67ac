"""V-JEPA 2-AC's components against their references, on the same (seeded random) weights.

* the video encoder equals the encoder of transformers' ``VJEPA2Model`` loaded from its own
  ``save_pretrained`` checkpoint (≤ 1e-4, fp32), on a clip and frame by frame;
* the action-conditioned predictor rolled forward with a cache that grows by one frame per step
  — dense, and over the runtime's paged pool as the ``rollout_predictor`` node does — equals the
  "native" rollout that re-runs the predictor over the whole sequence at every step (≤ 1e-5):
  the correctness half of the paper's speed-up;
* the attention is block-causal by frame: a later frame never changes an earlier prediction.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from wgc_models.layers.block_attention import DenseBlocks, DenseKV, PagedBlocks
from wgc_models.layers.convert import load_converted
from wgc_models.layers.random_init import init_seeded
from wgc_models.vjepa2_ac.config import TINY
from wgc_models.vjepa2_ac.model import (
    ACPredictor,
    cached_rollout,
    native_rollout,
    normalize,
)
from wgc_models.vjepa2_ac.vjepa2 import VJEPA2Config, VJEPA2Encoder
from wgc_runtime.engines.kv_pool import PagedKVPool

P = TINY.predictor


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny tensors: one intra-op thread (waking a second costs more than the op)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_the_encoder_equals_vjepa2_model(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    e = TINY.encoder
    ref_cfg = transformers.VJEPA2Config(
        hidden_size=e.hidden_size,
        num_hidden_layers=e.num_hidden_layers,
        num_attention_heads=e.num_attention_heads,
        patch_size=e.patch_size,
        crop_size=e.crop_size,
        frames_per_clip=4,
        tubelet_size=e.tubelet_size,
        pred_hidden_size=16,
        pred_num_hidden_layers=1,
        pred_num_attention_heads=2,
        pred_num_mask_tokens=2,
    )
    ref = transformers.VJEPA2Model(ref_cfg).eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(torch.randn(p.shape, generator=_g(1)) * 0.2)
    ref.save_pretrained(tmp_path)
    mine = VJEPA2Encoder(VJEPA2Config.from_dict(json.loads((tmp_path / "config.json").read_text())))
    load_converted(mine.eval(), tmp_path, prefix="encoder.")  # the predictor is left out
    clip = torch.randn(1, 4, 3, e.crop_size, e.crop_size, generator=_g(2))
    with torch.no_grad():
        want = ref(pixel_values_videos=clip, skip_predictor=True).last_hidden_state
        assert (mine(clip) - want).abs().max() <= 1e-4
        # V-JEPA 2-AC's per-frame encoding is the encoder on each frame repeated to a tubelet
        frames = clip[0, :2]
        pair = ref(pixel_values_videos=frames[1:2, None].repeat(1, 2, 1, 1, 1), skip_predictor=True)
        per_frame = mine.encode_frames(frames).view(2, -1, e.hidden_size)
        assert (per_frame[1] - pair.last_hidden_state[0]).abs().max() <= 1e-4


def _predictor() -> ACPredictor:
    return init_seeded(ACPredictor(P), 3).eval()


def _inputs(frames: int, rows: int):
    ctx = normalize(torch.randn(frames, P.frame_tokens, P.embed_dim, generator=_g(4)))
    return ctx, torch.randn(rows, 7, generator=_g(5)), torch.randn(rows, 7, generator=_g(6))


@pytest.mark.parametrize(("frames", "horizon"), [(1, 6), (3, 8)])
def test_the_cached_rollout_equals_the_native_re_run(frames: int, horizon: int) -> None:
    model = _predictor()
    ctx, actions, states = _inputs(frames, frames + horizon)
    with torch.no_grad():
        native = native_rollout(model, ctx, actions, states, horizon)
        dense = cached_rollout(model, ctx, actions, states, horizon)
        # the node's way: the pool grows by one frame (2 + patches tokens) per step
        pool = PagedKVPool(layers=P.depth, kv_heads=P.num_heads, head_dim=P.head_dim, pages=64)
        t = ctx.shape[0]
        if t > 1:
            step = PagedBlocks(pool, [model.frame_block("r", t - 1)])
            model.step_frames([ctx[:-1]], [actions[: t - 1]], [states[: t - 1]], [0], step)
        z, paged = ctx[-1], []
        for k in range(horizon):
            f = t - 1 + k
            assert pool.seq_len("r", "main") == f * P.tokens_per_frame
            step = PagedBlocks(pool, [model.frame_block("r", 1)])
            out = model.step_frames([z[None]], [actions[f : f + 1]], [states[f : f + 1]], [f], step)
            z = normalize(out[0][0])
            paged.append(z)
    assert (dense - native).abs().max() <= 1e-5
    assert (torch.stack(paged) - native).abs().max() <= 1e-5


def test_frames_attend_block_causally() -> None:
    model = _predictor()
    ctx, actions, states = _inputs(3, 3)
    with torch.no_grad():

        def run(z):
            step = DenseBlocks(DenseKV(P.depth), [model.frame_block("r", 3)])
            return model.step_frames([z], [actions], [states], [0], step)[0]

        a = run(ctx)
        changed = ctx.clone()
        changed[2] += 1.0
        b = run(changed)
    assert torch.equal(a[:2], b[:2])  # frames 0 and 1 never see frame 2
    assert not torch.allclose(a[2], b[2])
