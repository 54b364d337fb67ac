"""Qwen3-Omni's configs: the tiny one the tests and CPU examples run, and the real one
(``Qwen/Qwen3-Omni-30B-A3B-Instruct``'s ``config.json``, the fields that matter) beside it.
``transformers.Qwen3OmniMoeConfig(**TINY)`` builds the reference; `OmniConfig.from_dict`
reads either.

What shrinks: widths (Thinker 2048 → 64, Talker and code predictor 1024 → 32, Code2Wav 1024 →
32), depths (48 / 20 / 5 / 8 layers → 2 each), experts (128 → 8 top-2 in the Thinker, 128 → 4
top-2 + shared in the Talker), the text vocabulary (152064 → 512: the shipped tiny byte-level
BPE, `tiny_tokenizers`, its special ids at the top), the codebooks (2048 → 32 codes; the
Talker's vocabulary keeps its 1024 special ids above the codes, as the real 3072 = 2048 + 1024
does, so HF's own suppression rule still holds), the audio encoder (32 layers of 1280 → 1 of
32, 128 → 16 mel bins, attention windows of 8 → 2 chunks; a chunk stays 100 mel frames,
``n_window`` 50, because HF's length formula counts 13 frames per full chunk whatever the
config says) and Code2Wav's widths (its decoder 1536 → 32 channels). Kept as in the real
model: Code2Wav's upsampling (8·5·4·3·2·2 = 1920 samples per codec frame, 24 kHz at 12.5
frames a second, so the tiny model's audio lasts as long as the real one's for the same
frames), 16 code groups, MoE in every layer, q/k norms, the accept layer halfway down the
Thinker, the shared expert, Code2Wav's sliding-window transformer (its window shrinks 72 → 8 so
that the tests reach it), the interleaved M-RoPE sections (scaled to the head size).
"""

from __future__ import annotations

import copy
from typing import Any, cast


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], cast(dict[str, Any], v))
        else:
            out[k] = v
    return out


def _rope(theta: float, sections: list[int]) -> dict[str, Any]:
    return {
        "rope_type": "default",
        "rope_theta": theta,
        "mrope_section": sections,
        "interleaved": True,
    }


REAL: dict[str, Any] = {
    "im_start_token_id": 151644,
    "im_end_token_id": 151645,
    "system_token_id": 8948,
    "user_token_id": 872,
    "assistant_token_id": 77091,
    "tts_pad_token_id": 151671,
    "tts_bos_token_id": 151672,
    "tts_eos_token_id": 151673,
    "thinker_config": {
        "audio_token_id": 151675,
        "image_token_id": 151655,
        "video_token_id": 151656,
        "audio_start_token_id": 151669,
        "vision_start_token_id": 151652,
        "user_token_id": 872,
        "position_id_per_seconds": 13,
        "text_config": {
            "vocab_size": 152064,
            "hidden_size": 2048,
            "intermediate_size": 768,
            "num_hidden_layers": 48,
            "num_attention_heads": 32,
            "num_key_value_heads": 4,
            "head_dim": 128,
            "moe_intermediate_size": 768,
            "num_experts": 128,
            "num_experts_per_tok": 8,
            "norm_topk_prob": True,
            "rms_norm_eps": 1e-6,
            "max_position_embeddings": 65536,
            "rope_parameters": _rope(1e6, [24, 20, 20]),
        },
        "audio_config": {
            "num_mel_bins": 128,
            "encoder_layers": 32,
            "encoder_attention_heads": 20,
            "encoder_ffn_dim": 5120,
            "d_model": 1280,
            "output_dim": 2048,
            "n_window": 50,
            "n_window_infer": 800,
            "downsample_hidden_size": 480,
            "max_source_positions": 1500,
        },
        "vision_config": {
            "depth": 27,
            "hidden_size": 1152,
            "intermediate_size": 4304,
            "num_heads": 16,
            "out_hidden_size": 2048,
            "patch_size": 16,
            "spatial_merge_size": 2,
            "deepstack_visual_indexes": [8, 16, 24],
        },
    },
    "talker_config": {
        "num_code_groups": 16,
        "thinker_hidden_size": 2048,
        "accept_hidden_layer": 24,
        "codec_pad_id": 2148,
        "codec_bos_id": 2149,
        "codec_eos_token_id": 2150,
        "codec_nothink_id": 2155,
        "codec_think_bos_id": 2156,
        "codec_think_eos_id": 2157,
        "speaker_id": {"chelsie": 2301, "ethan": 2302, "aiden": 2303},
        "spatial_merge_size": 2,  # not a declared field, but read by the HF Talker
        "audio_token_id": 151675,
        "image_token_id": 151655,
        "video_token_id": 151656,
        "audio_start_token_id": 151669,
        "vision_start_token_id": 151652,
        "position_id_per_seconds": 13,
        "text_config": {
            "vocab_size": 3072,
            "hidden_size": 1024,
            "intermediate_size": 2048,
            "num_hidden_layers": 20,
            "num_attention_heads": 16,
            "num_key_value_heads": 2,
            "head_dim": 128,
            "moe_intermediate_size": 384,
            "num_experts": 128,
            "num_experts_per_tok": 6,
            "norm_topk_prob": True,
            "shared_expert_intermediate_size": 768,
            "rms_norm_eps": 1e-6,
            "max_position_embeddings": 65536,
            "rope_parameters": _rope(1e6, [24, 20, 20]),
        },
        "code_predictor_config": {
            "vocab_size": 2048,
            "hidden_size": 1024,
            "intermediate_size": 3072,
            "num_hidden_layers": 5,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "num_code_groups": 16,
            "rms_norm_eps": 1e-6,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1e6},
        },
    },
    "code2wav_config": {
        "codebook_size": 2048,
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_hidden_layers": 8,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "sliding_window": 72,
        "rms_norm_eps": 1e-5,
        "layer_scale_initial_scale": 0.01,
        "num_quantizers": 16,
        "upsample_rates": [8, 5, 4, 3],
        "upsampling_ratios": [2, 2],
        "decoder_dim": 1536,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000},
    },
}

_TINY_VOCAB = 512
# the ids of the shipped tiny tokenizer (`tiny_tokenizers`, `qwen3_omni/tokenizer.json`): its
# specials at the top of the vocabulary, the role words and "\n" trained BPE tokens
_IDS = {
    "im_start": 497,
    "im_end": 498,
    "audio_start": 499,
    "audio_end": 500,
    "audio": 501,
    "tts_pad": 502,
    "tts_bos": 503,
    "tts_eos": 504,
    "image": 505,
    "video": 506,
    "vision_start": 507,
    "user": 320,
    "assistant": 375,
    "system": 389,
}
NEWLINE = 198  # "\n" of the tiny vocabulary (the chat template's `<|im_start|>assistant\n`)
_CODES = 32  # codebook size

_MM = {
    "audio_token_id": _IDS["audio"],
    "image_token_id": _IDS["image"],
    "video_token_id": _IDS["video"],
    "audio_start_token_id": _IDS["audio_start"],
    "vision_start_token_id": _IDS["vision_start"],
}

TINY: dict[str, Any] = _merge(
    REAL,
    {
        "im_start_token_id": _IDS["im_start"],
        "im_end_token_id": _IDS["im_end"],
        "system_token_id": _IDS["system"],
        "user_token_id": _IDS["user"],
        "assistant_token_id": _IDS["assistant"],
        "tts_pad_token_id": _IDS["tts_pad"],
        "tts_bos_token_id": _IDS["tts_bos"],
        "tts_eos_token_id": _IDS["tts_eos"],
        "thinker_config": {
            **_MM,
            "user_token_id": _IDS["user"],
            "text_config": {
                "vocab_size": _TINY_VOCAB,
                "hidden_size": 64,
                "intermediate_size": 128,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "head_dim": 16,
                "moe_intermediate_size": 32,
                "num_experts": 8,
                "num_experts_per_tok": 2,
                "rope_parameters": _rope(1e6, [2, 3, 3]),
            },
            "audio_config": {
                "num_mel_bins": 16,
                "encoder_layers": 1,
                "encoder_attention_heads": 2,
                "encoder_ffn_dim": 64,
                "d_model": 32,
                "output_dim": 64,
                "n_window": 50,
                "n_window_infer": 200,
                "downsample_hidden_size": 8,
                "max_source_positions": 64,
            },
            "vision_config": {
                "depth": 1,
                "hidden_size": 16,
                "intermediate_size": 32,
                "num_heads": 2,
                "out_hidden_size": 64,
                "patch_size": 4,
                "deepstack_visual_indexes": [0],
                "num_position_embeddings": 16,
            },
        },
        "talker_config": {
            **_MM,
            "thinker_hidden_size": 64,
            "accept_hidden_layer": 1,
            "codec_pad_id": _CODES,
            "codec_bos_id": _CODES + 1,
            "codec_eos_token_id": _CODES + 2,
            "codec_nothink_id": _CODES + 7,
            "codec_think_bos_id": _CODES + 8,
            "codec_think_eos_id": _CODES + 9,
            "speaker_id": {"chelsie": _CODES + 153, "ethan": _CODES + 154, "aiden": _CODES + 155},
            "text_config": {
                "vocab_size": _CODES + 1024,
                "hidden_size": 32,
                "intermediate_size": 64,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "head_dim": 8,
                "moe_intermediate_size": 16,
                "num_experts": 4,
                "num_experts_per_tok": 2,
                "shared_expert_intermediate_size": 32,
                "rope_parameters": _rope(1e6, [1, 1, 2]),
            },
            "code_predictor_config": {
                "vocab_size": _CODES,
                "hidden_size": 32,
                "intermediate_size": 64,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "head_dim": 8,
            },
        },
        "code2wav_config": {
            "codebook_size": _CODES,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
            "sliding_window": 8,
            "upsample_rates": [8, 5, 4, 3],
            "upsampling_ratios": [2, 2],
            "decoder_dim": 32,
        },
    },
)
TINY_TOKENS = dict(_IDS)
