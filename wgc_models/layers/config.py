"""The decoder's configuration, read from a Hugging Face ``config.json``.

Only the fields a Llama/Qwen2-style decoder needs are read; everything else in the file is
ignored. Both spellings of the rotary settings are understood: the older top-level
``rope_theta`` / ``rope_scaling`` and the newer ``rope_parameters`` dict (transformers ≥ 5).
Rotary scaling types ``default``, ``linear`` and ``llama3`` are supported; any other type is
refused with a clear error rather than silently computing different angles.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SUPPORTED_ROPE = ("default", "linear", "llama3")
# model types whose q/k/v projections carry a bias even when the config does not say so
_QKV_BIAS_TYPES = ("qwen2",)


class ConfigError(ValueError):
    """The config file is missing a field we need, or asks for something we do not support."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DecoderConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_type: str = "default"
    rope_factor: float = 1.0
    # llama3 scaling only
    rope_low_freq_factor: float = 1.0
    rope_high_freq_factor: float = 4.0
    rope_original_max_pos: int = 8192
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 2048
    model_type: str = "llama"

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> DecoderConfig:
        def need(key: str) -> Any:
            if key not in raw:
                raise ConfigError(f"config.json has no `{key}`, which a decoder needs")
            return raw[key]

        act = raw.get("hidden_act", "silu")
        if act != "silu":
            raise ConfigError(f"hidden_act `{act}` is not supported (the MLP is SwiGLU: `silu`)")
        heads = int(need("num_attention_heads"))
        kv_heads = int(raw.get("num_key_value_heads") or heads)
        hidden = int(need("hidden_size"))
        if heads % kv_heads:
            raise ConfigError(f"{heads} attention heads do not divide into {kv_heads} KV heads")
        model_type = str(raw.get("model_type", "llama"))
        attn_bias = bool(raw.get("attention_bias", False))
        return cls(
            vocab_size=int(need("vocab_size")),
            hidden_size=hidden,
            intermediate_size=int(need("intermediate_size")),
            num_layers=int(need("num_hidden_layers")),
            num_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=int(raw.get("head_dim") or hidden // heads),
            rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
            qkv_bias=attn_bias or model_type in _QKV_BIAS_TYPES,
            o_bias=attn_bias,
            mlp_bias=bool(raw.get("mlp_bias", False)),
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
            max_position_embeddings=int(raw.get("max_position_embeddings", 2048)),
            model_type=model_type,
            **_rope(raw),
        )

    @classmethod
    def from_pretrained(cls, path: str | Path) -> DecoderConfig:
        """Read ``config.json`` from a checkpoint folder (or the file itself)."""
        path = Path(path)
        file = path / "config.json" if path.is_dir() else path
        if not file.is_file():
            raise ConfigError(f"no config.json at `{file}`")
        return cls.from_dict(json.loads(file.read_text()))


def _rope(raw: dict[str, Any]) -> dict[str, Any]:
    params = dict(raw.get("rope_parameters") or raw.get("rope_scaling") or {})
    theta = params.get("rope_theta", raw.get("rope_theta", 10000.0))
    kind = params.get("rope_type", params.get("type", "default")) or "default"
    if kind not in SUPPORTED_ROPE:
        raise ConfigError(
            f"rotary scaling `{kind}` is not supported (supported: {', '.join(SUPPORTED_ROPE)})"
        )
    out: dict[str, Any] = {"rope_theta": float(theta), "rope_type": kind}
    if kind in ("linear", "llama3"):
        out["rope_factor"] = float(params.get("factor", 1.0))
    if kind == "llama3":
        out["rope_low_freq_factor"] = float(params.get("low_freq_factor", 1.0))
        out["rope_high_freq_factor"] = float(params.get("high_freq_factor", 4.0))
        out["rope_original_max_pos"] = int(params.get("original_max_position_embeddings", 8192))
    return out
