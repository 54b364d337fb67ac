"""Orpheus's weights: its LM (a Llama checkpoint folder, `wgc_models.llama.checkpoint`, or seeded
random weights at the ``.walk`` sizes) and its SNAC vocoder (the `snac` package's ``config.json``
and safetensors state dict, or seeded random weights).

SNAC's names are `wgc_models.orpheus.snac.SnacDecoder`'s own; the encoder and the quantizers'
input projections in the published state dict are skipped (decoding reads neither), and the
legacy weight-norm names (``weight_g`` / ``weight_v``) convert on the way
(`wgc_models.layers.convert.load_converted`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import torch

from wgc_models._shared.speech import check_sizes, widen_
from wgc_models.layers.config import DecoderConfig
from wgc_models.layers.convert import load_converted
from wgc_models.llama.checkpoint import from_pretrained
from wgc_models.llama.model import LlamaDecoder
from wgc_models.orpheus.model import orpheus_tokens
from wgc_models.orpheus.snac import SnacConfig
from wgc_models.orpheus.snac import SnacDecoder as Snac

# the SNAC state dict holds the encoder and the quantizers' input projections too: decoding
# reads neither
_ENCODE_ONLY = ("encoder.",)


def build_lm(config: Mapping[str, Any], device: torch.device) -> LlamaDecoder:
    """The checkpoint ``config checkpoint``, else seeded random weights at the ``.walk``
    sizes (Llama 3 rotary scaling and tied embeddings, as Orpheus 3B)."""
    want = {k: int(config[k]) for k in ("vocab", "layers", "kv_heads", "head_dim")}
    path = str(config.get("checkpoint") or "")
    if path:
        model = from_pretrained(path, device=device)
        c = model.config
        have = dict(
            vocab=c.vocab_size, layers=c.num_layers, kv_heads=c.num_kv_heads, head_dim=c.head_dim
        )
        check_sizes("LLM", f"checkpoint `{path}`", want, have)
        return model
    cfg = DecoderConfig(
        vocab_size=want["vocab"],
        hidden_size=int(config["hidden"]),
        intermediate_size=int(config["intermediate"]),
        num_layers=want["layers"],
        num_heads=int(config["heads"]),
        num_kv_heads=want["kv_heads"],
        head_dim=want["head_dim"],
        rms_norm_eps=1e-5,
        rope_theta=500000.0,
        rope_type="llama3",
        rope_factor=32.0,
        tie_word_embeddings=True,
        max_position_embeddings=131072,
    )
    # the draws of the layers' own init (torch's stub leaves a parameter untyped)
    with torch.random.fork_rng(devices=[]):  # pyright: ignore[reportUnknownMemberType]
        model = widen_(LlamaDecoder(cfg), int(config.get("seed", 0)))
    with torch.no_grad():  # a random model would end its speech at any frame boundary
        model.model.embed_tokens.weight[orpheus_tokens(config).end_of_speech].zero_()
    return model.to(device)


@torch.no_grad()
def seeded_snac(cfg: SnacConfig, seed: int) -> Snac:
    """SNAC with seeded random weights as the `snac` package draws them (PyTorch's default
    uniform convolutions, weight norms at the drawn norms, unit Snake slopes), norms and
    slopes perturbed so they matter, and the output convolution halved: a random decoder's
    audio then swings within (-1, 1) without saturating its ``tanh``."""
    # the draws of the layers' own init (torch's stub leaves a parameter untyped)
    with torch.random.fork_rng(devices=[]):  # pyright: ignore[reportUnknownMemberType]
        model = Snac(cfg).eval()
    g = torch.Generator().manual_seed(seed)
    params = dict(model.named_parameters())
    bounds: dict[str, float] = {}
    for name, p in params.items():
        if name.endswith("original1"):
            bound = p[0].numel() ** -0.5
            p.copy_((torch.rand(p.shape, generator=g) * 2 - 1) * bound)
            bounds[name.removesuffix("parametrizations.weight.original1")] = bound
    for name, p in params.items():
        noise = torch.randn(p.shape, generator=g)
        if name.endswith("original0"):
            v = params[name.removesuffix("0") + "1"]
            norm = cast(torch.Tensor, v.flatten(1).norm(dim=1))  # pyright: ignore[reportUnknownMemberType] (stub: untyped `p`)
            p.copy_(norm.reshape(p.shape) * (1 + 0.2 * noise))
        elif name.endswith("alpha"):
            p.copy_(1 + 0.2 * noise)
        elif name.endswith("bias"):
            bound = bounds.get(name.removesuffix("bias"), 0.0)
            p.copy_((torch.rand(p.shape, generator=g) * 2 - 1) * bound)
        elif name.endswith("codebook.weight"):
            p.copy_(noise)
    last = [n for n in params if n.endswith("original0")][-1]
    params[last].mul_(0.5)
    return model


def snac_from_pretrained(
    path: str | Path, *, dtype: torch.dtype = torch.float32, device: str = "cpu"
) -> Snac:
    """From a folder with the package's ``config.json`` and a safetensors state dict
    (`wgc_models.layers.convert.load_converted`: strict on the decoding half)."""
    path = Path(path)
    cfg = SnacConfig.from_dict(json.loads((path / "config.json").read_text()))
    model = Snac(cfg)
    skip = _ENCODE_ONLY + tuple(
        f"quantizer.quantizers.{i}.in_proj." for i in range(len(cfg.vq_strides))
    )
    load_converted(model, path, skip=skip)
    return model.to(device=device, dtype=dtype).eval()
