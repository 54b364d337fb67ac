"""Qwen3-Omni's checkpoint for the example's nodes: its config and each part's weights (a
checkpoint's, its names converted on the way, or seeded random ones).

* **Config** (`omni_config`): the checkpoint's ``config.json`` (``config checkpoint``: a
  Hugging Face Qwen3-Omni folder, e.g. Qwen/Qwen3-Omni-30B-A3B-Instruct), else the tiny config
  of `wgc_models.qwen3_omni.config`; its KV geometry must be what the ``.walk``
  declares (`check_geometry`: it sizes the paged pools).
* **Weights**: each node builds only its part (the Thinker's text model, its audio tower, the
  Talker, Code2Wav), so a rank holds only what it runs. Random weights are drawn from one seed
  per part (`wgc_models._shared.speech.widen_`); the Thinker's embedding table from its own seed, so
  the Talker, on whatever rank, reads the same three TTS rows of it (`thinker_embedding`).
  Code2Wav's are at fan-in scale, its decoder blocks a little below it, so that a random
  vocoder makes a signal that is neither silent nor clipped.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, cast

import torch

from wgc_models._shared.speech import check_sizes, widen_
from wgc_models._shared.weights import part
from wgc_models.layers.convert import load_converted
from wgc_models.layers.tokenizer import TextCodec
from wgc_models.qwen3_omni.code2wav import CausalConv, Code2Wav
from wgc_models.qwen3_omni.config import TINY
from wgc_models.qwen3_omni.omni_audio import AudioEncoder
from wgc_models.qwen3_omni.omni_config import OmniConfig
from wgc_models.qwen3_omni.omni_talker import Talker
from wgc_models.qwen3_omni.omni_thinker import RENAMES, Thinker
from wgc_runtime.contract.node import NodeError
from wgc_runtime.contract.weights import WeightParts

EMBED_SEED = 1000  # the Thinker's embedding table: its own seed (module docstring)


def omni_config(config: Mapping[str, Any]) -> OmniConfig:
    path = str(config.get("checkpoint") or "")
    return OmniConfig.from_pretrained(path) if path else OmniConfig.from_dict(TINY)


def check_geometry(node: str, config: Mapping[str, Any], layers: int, heads: int, dim: int):
    """The model's KV geometry against the node's ``config layers / kv_heads / head_dim``."""
    want = {k: int(config[k]) for k in ("layers", "kv_heads", "head_dim")}
    have = {"layers": layers, "kv_heads": heads, "head_dim": dim}
    check_sizes(node, "the model", want, have)


def _seed(config: Mapping[str, Any]) -> int:
    return int(config.get("seed", 0))


@torch.no_grad()
def thinker_embedding(cfg: OmniConfig, seed: int) -> torch.Tensor:
    """The random Thinker's embedding table ``[vocab, hidden]``."""
    text = cfg.thinker.text
    g = torch.Generator().manual_seed(seed + EMBED_SEED)
    return 0.1 * torch.randn(text.vocab_size, text.hidden_size, generator=g)


def thinker(
    config: Mapping[str, Any], cfg: OmniConfig, codec: TextCodec, device: torch.device
) -> Thinker:
    """The Thinker's text model (its audio tower is the `audio_encoder` node's). A random one
    never writes a piece that is no printable text on its own (a lone UTF-8 continuation
    byte, a control character): their rows of its head are zero, so it babbles in words."""
    path = str(config.get("checkpoint") or "")
    if path:
        return Thinker.from_pretrained(path, audio=False).to(device)
    # the draws of the layers' own init
    with torch.random.fork_rng(devices=[]):  # pyright: ignore[reportUnknownMemberType] (stub: untyped)
        model = widen_(Thinker(cfg.thinker, audio=False), _seed(config))
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(thinker_embedding(cfg, _seed(config)))
        for i in range(min(codec.vocab_size, cfg.thinker.text.vocab_size)):
            piece = codec.piece(i)
            if piece and not (piece.isascii() and piece.decode().isprintable()):
                model.lm_head.weight[i].zero_()
    return model.to(device)


class _Tower(torch.nn.Module):
    """Only the Thinker's ``audio_tower``, named as in the checkpoint."""

    def __init__(self, raw: dict[str, Any]):
        super().__init__()
        self.audio_tower = AudioEncoder(raw)


def audio_tower(config: Mapping[str, Any], cfg: OmniConfig, device: torch.device) -> AudioEncoder:
    if not cfg.thinker.audio:
        raise NodeError("node `audio_encoder`: the checkpoint's Thinker has no audio encoder")
    path = str(config.get("checkpoint") or "")
    with torch.random.fork_rng(devices=[]):  # pyright: ignore[reportUnknownMemberType] (stub: untyped)
        tower = _Tower(cfg.thinker.audio)
    if path:
        skip = ("model.", "lm_head.", "visual.")
        load_converted(tower, path, prefix="thinker.", skip=skip, renames=RENAMES)
    else:
        widen_(tower, _seed(config))
    return tower.audio_tower.to(device).eval()


def talker(config: Mapping[str, Any], cfg: OmniConfig, device: torch.device) -> Talker:
    path = str(config.get("checkpoint") or "")
    if path:
        return Talker.from_pretrained(path).to(device)
    with torch.random.fork_rng(devices=[]):  # pyright: ignore[reportUnknownMemberType] (stub: untyped)
        model = widen_(Talker(cfg.talker, cfg.tokens), _seed(config))
    t = cfg.tokens
    table = thinker_embedding(cfg, int(config.get("thinker_seed", 0)))
    model.tts.copy_(table[[t.tts_bos, t.tts_eos, t.tts_pad]])
    return model.to(device)


@torch.no_grad()
def code2wav(config: Mapping[str, Any], cfg: OmniConfig, device: torch.device) -> Code2Wav:
    path = str(config.get("checkpoint") or "")
    if path:
        return Code2Wav.from_pretrained(path).to(device)
    with torch.random.fork_rng(devices=[]):  # pyright: ignore[reportUnknownMemberType] (stub: untyped)
        model = Code2Wav(cfg.code2wav).eval()
    g = torch.Generator().manual_seed(_seed(config))
    blocks = tuple(f"decoder.{i}." for i in range(1, len(model.decoder) - 2))
    bounds: dict[str, float] = {}  # a matrix's module -> its fan-in bound, for its bias
    for name, p in model.named_parameters():
        noise = torch.randn(p.shape, generator=g)
        if "embedding" in name:
            p.copy_(noise)
        elif p.dim() >= 2:
            p.copy_(noise * (0.7 if name.startswith(blocks) else 1) / math.sqrt(p[0].numel()))
            bounds[name.removesuffix("weight")] = p[0].numel() ** -0.5
        elif name.endswith(("scale", "gamma")):
            p.fill_(0.5)
        elif name.endswith(("alpha", "beta")):
            p.copy_(0.3 * noise)
        elif name.endswith("bias") and name.removesuffix("bias") in bounds:
            # PyTorch's own bias draw (uniform within the fan-in bound), from the seed: not
            # from the global generator, whose state differs from process to process
            bound = bounds[name.removesuffix("bias")]
            p.copy_((torch.rand(p.shape, generator=g) * 2 - 1) * bound)
    last = cast(CausalConv, model.decoder[-1])
    last.conv.weight.mul_(0.2)
    return model.to(device)


def parts(config: Mapping[str, Any], which: str) -> list[WeightParts]:
    """What the node holding ``which`` (``thinker``, ``audio``, ``talker``, ``code2wav``) will
    hold (`Node.weights`): the checkpoint's tensors of that sub-model when one is given."""
    cfg = omni_config(config)
    builds = {
        "thinker": (lambda: Thinker(cfg.thinker, audio=False), ("thinker.",)),
        "audio": (lambda: _Tower(cfg.thinker.audio), ("thinker.audio_tower.",)),
        "talker": (lambda: Talker(cfg.talker, cfg.tokens), ("talker.",)),
        "code2wav": (lambda: Code2Wav(cfg.code2wav), ("code2wav.",)),
    }
    build, names = builds[which]
    skip = ("audio_tower.", "visual.") if which == "thinker" else ()
    return [part("qwen3_omni", which, config, build, names=names, skip=skip)]
