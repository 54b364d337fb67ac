"""The SNAC 24 kHz decoder and Orpheus's token mapping against their reference implementations.

A random tiny ``snac.SNAC`` (the 24 kHz architecture, `TINY_SNAC`; norms, biases and Snake
alphas perturbed so they matter) is saved as a safetensors state dict under the package's own
names and loaded with `snac_from_pretrained`: ``decode`` equals ``SNAC.decode`` (max abs
≤ 1e-4, fp32; the noise blocks draw the same noise from equally seeded generators), for whole
windows and for the streaming vocoder's kept samples. The Orpheus token ids are checked against
the public reference's literal values.
"""

from __future__ import annotations

import contextlib
import json

import pytest
import torch

snac = pytest.importorskip("snac")

from safetensors.torch import save_file  # noqa: E402

from wgc_models.layers.loading import CheckpointError  # noqa: E402
from wgc_models.orpheus.checkpoint import snac_from_pretrained  # noqa: E402
from wgc_models.orpheus.config import (  # noqa: E402
    REAL_SNAC,
    REAL_TOKENS,
    TINY_SNAC,
    TINY_TOKENS,
)
from wgc_models.orpheus.model import OrpheusVocoder, audio_mask, window_codes  # noqa: E402

TOL = 1e-4
SPF = TINY_SNAC.samples_per_frame


@contextlib.contextmanager
def one_thread():
    """Tiny tensors: one intra-op thread (waking a second costs more than the op)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


def _save(ref, path, *, legacy: bool = False):
    state = {k: v.contiguous() for k, v in ref.state_dict().items()}
    if legacy:  # the `torch.nn.utils.weight_norm` names older checkpoints carry
        state = {
            k.replace("parametrizations.weight.original0", "weight_g").replace(
                "parametrizations.weight.original1", "weight_v"
            ): v
            for k, v in state.items()
        }
    path.mkdir(parents=True, exist_ok=True)
    save_file(state, str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps(TINY_SNAC.to_dict()))
    return path


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    with one_thread():
        torch.manual_seed(0)
        ref = snac.SNAC(**TINY_SNAC.to_dict()).eval()
        with torch.no_grad():
            for name, p in ref.named_parameters():
                if name.endswith(("alpha", "original0")):
                    p.mul_(1 + 0.2 * torch.randn_like(p))
                elif name.endswith("bias"):
                    p.add_(0.1 * torch.randn_like(p))
        path = _save(ref, tmp_path_factory.mktemp("snac"))
        yield ref, snac_from_pretrained(path)


def _codes(frames: int, batch: int = 1, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    size = TINY_SNAC.codebook_size
    return [torch.randint(0, size, (batch, frames * 4 // s), generator=g) for s in (4, 2, 1)]


def _reference(ref, codes, seed):
    torch.manual_seed(seed)  # where the package's noise blocks draw from
    with torch.inference_mode():
        return ref.decode(codes)


@pytest.mark.parametrize("frames,batch", [(4, 1), (4, 3), (9, 2)])
def test_decode_matches_snac(pair, frames, batch):
    ref, ours = pair
    codes = _codes(frames, batch, seed=frames + batch)
    want = _reference(ref, codes, seed=7)
    got = ours.decode(codes, torch.Generator().manual_seed(7))
    assert got.shape == want.shape == (batch, 1, frames * SPF)
    assert (got - want).abs().max().item() <= TOL
    assert want.abs().max().item() > 0.05  # a real signal, not a vanishing one


def test_noise_is_drawn_from_the_generator(pair):
    _, ours = pair
    codes = _codes(4)
    a = ours.decode(codes, torch.Generator().manual_seed(1))
    b = ours.decode(codes, torch.Generator().manual_seed(1))
    c = ours.decode(codes, torch.Generator().manual_seed(2))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_legacy_weight_norm_names_load(pair, tmp_path):
    ref, ours = pair
    legacy = snac_from_pretrained(_save(ref, tmp_path, legacy=True))
    for k, v in ours.state_dict().items():
        assert torch.equal(legacy.state_dict()[k], v), k


def test_loading_is_strict(pair, tmp_path):
    ref, _ = pair
    state = {k: v.contiguous() for k, v in ref.state_dict().items()}
    state.pop("decoder.model.1.bias")
    save_file(state, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(TINY_SNAC.to_dict()))
    with pytest.raises(CheckpointError, match=r"missing keys \(1\): `decoder\.model\.1\.bias`"):
        snac_from_pretrained(tmp_path)


def test_real_config_is_the_24khz_codec():
    """`REAL_SNAC` is ``hubertsiuzdak/snac_24khz``'s config.json; 2048 samples per frame."""
    assert REAL_SNAC.to_dict() == {
        "sampling_rate": 24000, "encoder_dim": 48, "encoder_rates": [2, 4, 8, 8],
        "latent_dim": None, "decoder_dim": 1024, "decoder_rates": [8, 8, 4, 2],
        "attn_window_size": None, "codebook_size": 4096, "codebook_dim": 8,
        "vq_strides": [4, 2, 1], "noise": True, "depthwise": True,
    }  # fmt: skip
    assert REAL_SNAC.samples_per_frame == TINY_SNAC.samples_per_frame == 2048  # real rates


# ---------------------------------------------------------------- Orpheus's tokens


def test_orpheus_ids_are_the_references():
    """``_format_prompt``: [128259] + text ids (BOS 128000 first) + [128009, 128260, 128261,
    128257]; end of speech 128258; ``<custom_token_N>`` is 128256 + N, audio from N = 10."""
    t = REAL_TOKENS
    assert t.prompt([1, 2]) == [128259, 128000, 1, 2, 128009, 128260, 128261, 128257]
    assert t.end_of_speech == 128258 and t.audio_offset == 128266
    assert t.vocab_size == 156940
    # turn_token_into_id: int(N) - 10 - (index % 7) * 4096, for id 128256 + N
    for index, code in [(0, 5), (1, 0), (6, 4095), (7, 11), (13, 77)]:
        token = t.audio_token(index, code)
        n = token - 128256
        assert n - 10 - (index % 7) * 4096 == code
        assert int(t.code(torch.tensor(token), torch.tensor(index))) == code


def test_window_codes_follow_convert_to_audio():
    """``convert_to_audio``: codes_0 = [f[i]], codes_1 = [f[i+1], f[i+4]], codes_2 =
    [f[i+2], f[i+3], f[i+5], f[i+6]] for each frame i = 7j."""
    t = TINY_TOKENS
    g = torch.Generator().manual_seed(0)
    frame = torch.randint(0, t.codebook_size, (28,), generator=g).tolist()
    window = torch.tensor([t.audio_token(p, c) for p, c in enumerate(frame)])
    codes = window_codes(window[None], t)
    assert codes is not None
    want0, want1, want2 = [], [], []
    for i in range(0, 28, 7):
        want0.append(frame[i])
        want1 += [frame[i + 1], frame[i + 4]]
        want2 += [frame[i + 2], frame[i + 3], frame[i + 5], frame[i + 6]]
    assert [c[0].tolist() for c in codes] == [want0, want1, want2]
    bad = window.clone()
    bad[3] = t.audio_token(2, 1)  # position 2's range, at position 3: out of range there
    assert window_codes(bad[None], t) is None


def test_vocoder_keeps_the_second_frame(pair):
    """A 28-token window yields samples [spf:2·spf] of its 4 frames' audio (Orpheus keeps
    [2048:4096] at 24 kHz)."""
    ref, ours = pair
    voc = OrpheusVocoder(ours, TINY_TOKENS)
    codes = _codes(4, seed=3)
    c0, c1, c2 = (c[0].tolist() for c in codes)
    frames = []
    for j in range(4):
        frames += [c0[j], c1[2 * j], c2[4 * j], c2[4 * j + 1], c1[2 * j + 1], c2[4 * j + 2],
                   c2[4 * j + 3]]  # fmt: skip
    window = torch.tensor([TINY_TOKENS.audio_token(p, c) for p, c in enumerate(frames)])
    got = voc.window(window, torch.Generator().manual_seed(9))
    want = _reference(ref, codes, seed=9)[0, 0, SPF : 2 * SPF]
    assert got is not None and got.shape == (SPF,) and voc.sample_rate == 24000
    assert (got - want).abs().max().item() <= TOL


def test_audio_mask_keeps_the_positions_range():
    t = TINY_TOKENS
    logits = torch.zeros(2, t.vocab_size)
    masked = audio_mask(logits, t, [3, 7])
    for row, pos in enumerate((3, 7)):
        lo, hi = t.allowed(pos)
        kept = torch.isfinite(masked[row]).nonzero().flatten().tolist()
        extra = [t.end_of_speech] if pos % 7 == 0 else []
        assert kept == sorted(list(range(lo, hi)) + extra)
        assert lo == t.audio_token(pos, 1)  # code 0 is left out (the reference drops it)
