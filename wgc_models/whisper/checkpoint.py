"""Whisper's checkpoint: a Hugging Face ``WhisperForConditionalGeneration`` folder, whose tensor
names are `wgc_models.whisper.model`'s own (``model.encoder.*``, ``model.decoder.*``,
``proj_out``), and the sizes its nodes take from it or from the ``.walk``.

`load_part` loads one node's half of a checkpoint strictly: the checkpoint's names must be
exactly the full model's (a tied ``proj_out.weight`` may be absent), and only the half's tensors
are read. `whisper_config` is the checkpoint's sizes (checked against the ``.walk``) or the
``.walk``'s; `whisper_parts` what the encoder or decoder will hold (`Node.weights`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from wgc_models._shared.speech import check_sizes
from wgc_models._shared.weights import part
from wgc_models.layers.loading import CheckpointError, checkpoint_files, open_safetensors
from wgc_models.whisper import config as tiny
from wgc_models.whisper.model import WhisperConfig, WhisperEncoder, WhisperTextDecoder
from wgc_runtime.contract.weights import WeightParts

TIED = "proj_out.weight"


def full_names(cfg: WhisperConfig) -> set[str]:
    """Every parameter name of ``WhisperForConditionalGeneration`` at these sizes."""
    with torch.device("meta"):
        enc, dec = WhisperEncoder(cfg), WhisperTextDecoder(cfg)
    names = {f"model.encoder.{n}" for n in enc.state_dict()}
    return names | set(dec.state_dict())


def load_part(module: nn.Module, path: str | Path, prefix: str, cfg: WhisperConfig) -> None:
    """Fill ``module`` (whose names are the checkpoint's after ``prefix``) strictly (module
    docstring): missing, unexpected or misshapen names raise `CheckpointError`."""
    files = checkpoint_files(path)
    where: dict[str, Path] = {}
    for file in files:
        with open_safetensors(file) as f:
            where.update((name, file) for name in f.keys())  # noqa: SIM118
    want = full_names(cfg)
    optional: set[str] = {TIED} if cfg.tie_word_embeddings else set()
    missing = sorted(want - set(where) - optional)
    unexpected = sorted(set(where) - want)
    target = module.state_dict()
    mine = {prefix + n: n for n in target}
    shapes: list[str] = []
    by_file: dict[Path, list[str]] = {}
    for name in mine:
        if name in where:
            by_file.setdefault(where[name], []).append(name)
    with torch.no_grad():
        for file, names in by_file.items():
            with open_safetensors(file) as f:
                for name in names:
                    t, dst = f.get_tensor(name), target[mine[name]]
                    if tuple(t.shape) != tuple(dst.shape):
                        shapes.append(
                            f"`{name}`: checkpoint {tuple(t.shape)}, model {tuple(dst.shape)}"
                        )
                        continue
                    dst.copy_(t.to(dst.dtype))
    if missing or unexpected or shapes:
        lines = [f"checkpoint `{path}` is not a Whisper checkpoint of its config.json's sizes:"]
        for title, items in (("missing", missing), ("unexpected", unexpected), ("shapes", shapes)):
            if items:
                more = f" and {len(items) - 6} more" if len(items) > 6 else ""
                lines.append(f"  {title} ({len(items)}): {', '.join(items[:6])}{more}")
        raise CheckpointError("\n".join(lines))


def whisper_config(node: str, config: Mapping[str, Any]) -> WhisperConfig:
    """The checkpoint's sizes (checked against the ``.walk``), else the ``.walk``'s."""
    path = str(config.get("checkpoint") or "")
    walk = {k: int(config[k]) for k in ("n_mels", "audio_ctx", "d_model", "ffn", "vocab")}
    if path:
        cfg = WhisperConfig.from_pretrained(path)
        have = dict(n_mels=cfg.num_mel_bins, audio_ctx=cfg.max_source_positions,
                    d_model=cfg.d_model, ffn=cfg.decoder_ffn_dim, vocab=cfg.vocab_size)  # fmt: skip
        check_sizes(node, f"checkpoint `{path}`", walk, have)
        return cfg
    enc_layers = int(config.get("encoder_layers", config["layers"]))
    dec_layers = int(config.get("decoder_layers", config["layers"]))
    heads = int(config.get("kv_heads", config.get("heads", 1)))
    return WhisperConfig.from_dict({
        **tiny.TINY, "num_mel_bins": walk["n_mels"], "max_source_positions": walk["audio_ctx"],
        "d_model": walk["d_model"], "encoder_ffn_dim": walk["ffn"], "decoder_ffn_dim": walk["ffn"],
        "vocab_size": walk["vocab"], "encoder_layers": enc_layers, "decoder_layers": dec_layers,
        "encoder_attention_heads": heads, "decoder_attention_heads": heads,
    })  # fmt: skip


def whisper_parts(node: str, config: Mapping[str, Any]) -> list[WeightParts]:
    """What the encoder or the decoder (``node``) will hold (`Node.weights`): the model at the
    checkpoint's sizes (else the ``.walk``'s) in the node's dtype, counted from the checkpoint's
    headers when given (the decoder's ``proj_out`` shares the token embedding's tensor when
    tied, so a stored copy is not counted twice)."""
    cfg = whisper_config(node, config)
    if node == "encoder":
        build, names = (lambda: WhisperEncoder(cfg)), ("model.encoder.",)
    else:
        build, names = (lambda: WhisperTextDecoder(cfg)), ("model.decoder.",)
        if not cfg.tie_word_embeddings:
            names += ("proj_out.",)
    return [part("whisper", node, config, build, names=names)]
