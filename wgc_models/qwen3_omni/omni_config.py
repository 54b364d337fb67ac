"""Qwen3-Omni's configuration, read from its Hugging Face ``config.json`` (``model_type``
``qwen3_omni_moe``: ``thinker_config``, ``talker_config``, ``code2wav_config`` and the chat /
TTS token ids at the top level).

Only the fields the components need are read, by their HF names. Each decoder stack becomes a
`DecoderConfig` (its attention geometry, norms, rotary base) plus a `MoeConfig` where it is
sparse; `OmniTokens` holds the special ids the Thinker → Talker hand-off uses.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from wgc_models.layers.config import ConfigError, DecoderConfig
from wgc_models.qwen3_omni.moe import MoeConfig


def _stack(raw: dict[str, Any], **extra: Any) -> DecoderConfig:
    return DecoderConfig.from_dict({**raw, **extra})


@dataclass(frozen=True, slots=True, kw_only=True)
class OmniTokens:
    """The chat and TTS ids (top level of the config; the real values are the defaults)."""

    im_start: int = 151644
    im_end: int = 151645
    user: int = 872
    assistant: int = 77091
    tts_pad: int = 151671
    tts_bos: int = 151672
    tts_eos: int = 151673

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> OmniTokens:
        names = {
            "im_start": "im_start_token_id",
            "im_end": "im_end_token_id",
            "user": "user_token_id",
            "assistant": "assistant_token_id",
            "tts_pad": "tts_pad_token_id",
            "tts_bos": "tts_bos_token_id",
            "tts_eos": "tts_eos_token_id",
        }
        return cls(**{ours: int(raw[hf]) for ours, hf in names.items() if hf in raw})


@dataclass(frozen=True, slots=True, kw_only=True)
class ThinkerConfig:
    text: DecoderConfig
    moe: MoeConfig
    audio_token_id: int
    image_token_id: int
    video_token_id: int
    audio: dict[str, Any] = field(default_factory=dict[str, Any])  # ``audio_config``, as read

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ThinkerConfig:
        text = raw["text_config"]
        return cls(
            text=_stack(text),
            moe=MoeConfig.from_dict(text),
            audio_token_id=int(raw.get("audio_token_id", 151646)),
            image_token_id=int(raw.get("image_token_id", 151655)),
            video_token_id=int(raw.get("video_token_id", 151656)),
            audio=dict(raw.get("audio_config") or {}),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class TalkerConfig:
    text: DecoderConfig
    moe: MoeConfig  # every Talker layer is sparse, with a shared expert
    predictor: DecoderConfig  # the code predictor's dense stack; vocab = codebook size
    num_code_groups: int
    thinker_hidden_size: int
    accept_hidden_layer: int
    codec_eos: int
    codec_pad: int
    codec_bos: int
    codec_nothink: int
    codec_think_bos: int
    codec_think_eos: int
    speakers: dict[str, int]

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> TalkerConfig:
        speaker_ids: dict[str, Any] = raw.get("speaker_id") or {}
        text, pred = raw["text_config"], raw["code_predictor_config"]
        if "shared_expert_intermediate_size" not in text:
            raise ConfigError("the talker's text_config has no `shared_expert_intermediate_size`")
        moe = MoeConfig.from_dict(text, shared=True)
        return cls(
            text=_stack(text),
            moe=replace(moe, sparse_step=1, mlp_only_layers=()),
            predictor=_stack(pred),
            num_code_groups=int(raw.get("num_code_groups", pred.get("num_code_groups", 32))),
            thinker_hidden_size=int(raw["thinker_hidden_size"]),
            accept_hidden_layer=int(raw["accept_hidden_layer"]),
            codec_eos=int(raw["codec_eos_token_id"]),
            codec_pad=int(raw["codec_pad_id"]),
            codec_bos=int(raw["codec_bos_id"]),
            codec_nothink=int(raw["codec_nothink_id"]),
            codec_think_bos=int(raw["codec_think_bos_id"]),
            codec_think_eos=int(raw["codec_think_eos_id"]),
            speakers={k.lower(): int(v) for k, v in speaker_ids.items()},
        )

    @property
    def codebook_size(self) -> int:
        return self.predictor.vocab_size

    def suppressed(self) -> tuple[int, ...]:
        """Codec ids the Talker must never sample: every special id but end-of-speech (HF's
        ``generate`` suppresses ``range(vocab − 1024, vocab)`` minus EOS, and in the released
        model ``vocab − 1024`` is the codebook size: the ids above the codes)."""
        return tuple(
            i for i in range(self.codebook_size, self.text.vocab_size) if i != self.codec_eos
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Code2WavConfig:
    codebook_size: int
    num_quantizers: int
    transformer: DecoderConfig  # the pre-transformer (sliding-window attention)
    sliding_window: int
    layer_scale: float
    upsample_rates: tuple[int, ...]
    upsampling_ratios: tuple[int, ...]
    decoder_dim: int

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Code2WavConfig:
        defaults = {"rms_norm_eps": 1e-5, "num_hidden_layers": 8, "sliding_window": 72}
        raw = {**defaults, **raw}
        q, size = int(raw.get("num_quantizers", 16)), int(raw.get("codebook_size", 2048))
        return cls(
            codebook_size=size,
            num_quantizers=q,
            transformer=_stack(raw, vocab_size=size * q),
            sliding_window=int(raw["sliding_window"]),
            layer_scale=float(raw.get("layer_scale_initial_scale", 0.01)),
            upsample_rates=tuple(raw.get("upsample_rates", (8, 5, 4, 3))),
            upsampling_ratios=tuple(raw.get("upsampling_ratios", (2, 2))),
            decoder_dim=int(raw.get("decoder_dim", 1536)),
        )

    @property
    def total_upsample(self) -> int:
        """Audio samples per codec frame (1920 at 24 kHz / 12.5 Hz)."""
        n = 1
        for r in (*self.upsample_rates, *self.upsampling_ratios):
            n *= r
        return n


@dataclass(frozen=True, slots=True, kw_only=True)
class OmniConfig:
    thinker: ThinkerConfig
    talker: TalkerConfig
    code2wav: Code2WavConfig
    tokens: OmniTokens

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> OmniConfig:
        return cls(
            thinker=ThinkerConfig.from_dict(raw["thinker_config"]),
            talker=TalkerConfig.from_dict(raw["talker_config"]),
            code2wav=Code2WavConfig.from_dict(raw["code2wav_config"]),
            tokens=OmniTokens.from_dict(raw),
        )

    @classmethod
    def from_pretrained(cls, path: str | Path) -> OmniConfig:
        path = Path(path)
        file = path / "config.json" if path.is_dir() else path
        if not file.is_file():
            raise ConfigError(f"no config.json at `{file}`")
        return cls.from_dict(json.loads(file.read_text()))
