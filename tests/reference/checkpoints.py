"""Tiny checkpoints with seeded random weights, written the way the real ones are, for the tests,
the end-to-end runs and the benchmarks (no weights can be downloaded).

Each function builds the reference implementation from the family's tiny config
(`wgc_models._shared`), draws its weights from a seed — wider than HF's
initialisation (std 0.02 makes every logit nearly equal, so greedy choices would hinge on
rounding), with norms and biases perturbed so they matter, and for Code2Wav scaled so the
waveform is a signal, not silence — saves it in the reference's own format and returns the
reference modules:

* `orpheus`: ``lm/`` (``LlamaForCausalLM.save_pretrained``) and ``snac/`` (``snac.SNAC``'s
  state dict as safetensors + its ``config.json``);
* `qwen3_omni`: ``Qwen3OmniMoeForConditionalGeneration.save_pretrained`` (the released layout:
  per-expert weights, ``thinker.model.…``), or with ``runtime_layout`` its ``state_dict()``
  (transformers 5's module names: fused experts, ``thinker.model.language_model.…``).
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from wgc_models._shared import tiny_tokenizers
from wgc_models.orpheus import config as orpheus_cfg
from wgc_models.qwen3_omni import config as omni_cfg


def _widen(module: Any, std: float, skip: str = "") -> None:
    with torch.no_grad():
        for name, p in module.named_parameters():
            if skip and name.startswith(skip):
                continue
            if p.dim() >= 2:
                p.normal_(0, std)
            elif "norm" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))


def _signal(code2wav: Any) -> None:
    """Code2Wav weights at fan-in scale (its default leaves the waveform ~1e-5), its decoder
    blocks' convolutions a little below it: at fan-in scale the activations grow ~3x a block,
    and SnakeBeta's ``sin²`` of large values turns fp32 rounding into audible differences
    (5e-4 after the four blocks of the real upsampling). Then the waveform has a standard
    deviation near 0.15 and no clipped sample."""
    blocks = tuple(f"decoder.{i}." for i in range(1, len(code2wav.decoder) - 2))
    with torch.no_grad():
        for name, p in code2wav.named_parameters():
            if "embedding" in name:
                p.normal_(0, 1)
            elif p.dim() >= 2:
                p.normal_(0, (0.7 if name.startswith(blocks) else 1) / math.sqrt(p[0].numel()))
            elif name.endswith(("scale", "gamma")):
                p.fill_(0.5)
            elif name.endswith(("alpha", "beta")):
                p.normal_(0, 0.3)
        code2wav.decoder[-1].conv.weight.mul_(0.3)


def orpheus(path: str | Path, seed: int = 0) -> tuple[Any, Any]:
    """Write ``path/lm`` and ``path/snac``; return (``LlamaForCausalLM``, ``snac.SNAC``)."""
    import snac
    import transformers

    path = Path(path)
    torch.manual_seed(seed)
    lm = transformers.LlamaForCausalLM(transformers.LlamaConfig(**orpheus_cfg.TINY_LM)).eval()
    _widen(lm, 0.1)
    lm.save_pretrained(path / "lm")
    _tokenizer(path / "lm", "orpheus")
    codec = snac.SNAC(**orpheus_cfg.TINY_SNAC.to_dict()).eval()
    with torch.no_grad():
        for name, p in codec.named_parameters():
            if name.endswith(("alpha", "original0")):
                p.mul_(1 + 0.2 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    (path / "snac").mkdir(parents=True, exist_ok=True)
    state = {k: v.contiguous() for k, v in codec.state_dict().items()}
    save_file(state, str(path / "snac" / "model.safetensors"))
    (path / "snac" / "config.json").write_text(json.dumps(orpheus_cfg.TINY_SNAC.to_dict()))
    return lm, codec


def qwen3_omni(path: str | Path, seed: int = 0, *, runtime_layout: bool = False) -> Any:
    """Write a tiny Qwen3-Omni checkpoint at ``path``; return the HF model."""
    import transformers

    path = Path(path)
    torch.manual_seed(seed)
    config = transformers.Qwen3OmniMoeConfig(**omni_cfg.TINY)
    model = transformers.Qwen3OmniMoeForConditionalGeneration(config).eval()
    _widen(model, 0.1, skip="code2wav.")
    _signal(model.code2wav)
    if runtime_layout:
        path.mkdir(parents=True, exist_ok=True)
        state = {k: v.contiguous() for k, v in model.state_dict().items()}
        save_file(state, str(path / "model.safetensors"))
        config.to_json_file(str(path / "config.json"))
    else:
        model.save_pretrained(path)
    _tokenizer(path, "qwen3_omni")
    return model


def _tokenizer(folder: Path, family: str) -> None:
    """The tiny tokenizer beside the weights, where the published folders have theirs."""
    shutil.copyfile(tiny_tokenizers.path_of(family),
                    folder / "tokenizer.json")  # fmt: skip
