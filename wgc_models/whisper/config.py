"""Whisper's configs: the tiny one the random-weight example and the tests run, the real one
(``openai/whisper-large-v3``) beside it, and the tiny tokenizer the random model speaks through
(``python -m wgc_models.whisper.config`` rewrites ``whisper/tokenizer.json``; a
test checks that rebuilding gives it back byte for byte).

What shrinks: the width (1280 → 64), the layers (32 + 32 → 2 + 2), the heads (20 → 4) and the
text vocabulary: the shared tiny byte-level BPE (`tiny_tokenizers`: 496 regular ids) with
Whisper's special tokens after it in Whisper's order (``<|endoftext|>``, then
``<|startoftranscript|>``, the 100 language tokens of large-v3, ``<|translate|>``,
``<|transcribe|>``, ``<|startoflm|>``, ``<|startofprev|>``, ``<|nospeech|>``,
``<|notimestamps|>`` and the 1501 timestamps ``<|0.00|>`` ... ``<|30.00|>``): 2105 ids. What
stays real: 80 mel bins (large-v3 has 128, every other size 80), the 30-second window (3000
frames, 1500 encoder positions), the 448 decoder positions and the generation settings'
structure (suppressed symbols, the begin-suppressed space and end of text); only their
``max_length`` shrinks (448 → 24 tokens after the prompt), so a random model's transcript ends.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Tokenizer

from wgc_models._shared import tiny_tokenizers

# large-v3's language tokens, in its order (<|en|> first)
LANGUAGES = (
    "en",
    "zh",
    "de",
    "es",
    "ru",
    "ko",
    "fr",
    "ja",
    "pt",
    "tr",
    "pl",
    "ca",
    "nl",
    "ar",
    "sv",
    "it",
    "id",
    "hi",
    "fi",
    "vi",
    "he",
    "uk",
    "el",
    "ms",
    "cs",
    "ro",
    "da",
    "hu",
    "ta",
    "no",
    "th",
    "ur",
    "hr",
    "bg",
    "lt",
    "la",
    "mi",
    "ml",
    "cy",
    "sk",
    "te",
    "fa",
    "lv",
    "bn",
    "sr",
    "az",
    "sl",
    "kn",
    "et",
    "mk",
    "br",
    "eu",
    "is",
    "hy",
    "ne",
    "mn",
    "bs",
    "kk",
    "sq",
    "sw",
    "gl",
    "mr",
    "pa",
    "si",
    "km",
    "sn",
    "yo",
    "so",
    "af",
    "oc",
    "ka",
    "be",
    "tg",
    "sd",
    "gu",
    "am",
    "yi",
    "lo",
    "uz",
    "fo",
    "ht",
    "ps",
    "tk",
    "nn",
    "mt",
    "sa",
    "lb",
    "my",
    "bo",
    "tl",
    "mg",
    "as",
    "tt",
    "haw",
    "ln",
    "ha",
    "ba",
    "jw",
    "su",
    "yue",
)
AFTER_LANGUAGES = ("translate", "transcribe", "startoflm", "startofprev", "nospeech",
                   "notimestamps")  # fmt: skip
SPECIALS = (
    "<|endoftext|>",
    "<|startoftranscript|>",
    *(f"<|{code}|>" for code in LANGUAGES),
    *(f"<|{name}|>" for name in AFTER_LANGUAGES),
)
TIMESTAMPS = tuple(f"<|{i * 0.02:.2f}|>" for i in range(1501))
# the single-character symbols large-v3 suppresses (its `suppress_tokens` ids 1-93)
SUPPRESSED_SYMBOLS = '"#()*+/:;<=>@[\\]^_`{|}~'

TINY_TEXT = tiny_tokenizers.REGULAR  # 496 regular ids: <|endoftext|> is id 496
EOT = TINY_TEXT
SOT = EOT + 1
FIRST_LANGUAGE = SOT + 1
TRANSLATE = FIRST_LANGUAGE + len(LANGUAGES)
NO_TIMESTAMPS = TRANSLATE + 5
TINY_VOCAB = NO_TIMESTAMPS + 1 + len(TIMESTAMPS)  # 2105
TINY_MAX_LENGTH = 24  # real: 448 (generation_config.json's `max_length`)

# `transformers.WhisperConfig(**REAL)`: openai/whisper-large-v3's config.json
REAL: dict[str, Any] = {
    "model_type": "whisper",
    "vocab_size": 51866,
    "num_mel_bins": 128,
    "d_model": 1280,
    "encoder_layers": 32,
    "encoder_attention_heads": 20,
    "encoder_ffn_dim": 5120,
    "decoder_layers": 32,
    "decoder_attention_heads": 20,
    "decoder_ffn_dim": 5120,
    "max_source_positions": 1500,
    "max_target_positions": 448,
    "activation_function": "gelu",
    "decoder_start_token_id": 50258,
    "eos_token_id": 50257,
    "pad_token_id": 50256,
    "bos_token_id": 50257,
    "begin_suppress_tokens": [220, 50257],
    "tie_word_embeddings": True,
}

TINY: dict[str, Any] = {
    **REAL,
    "vocab_size": TINY_VOCAB,
    "num_mel_bins": 80,
    "d_model": 64,
    "encoder_layers": 2,
    "encoder_attention_heads": 4,
    "encoder_ffn_dim": 128,
    "decoder_layers": 2,
    "decoder_attention_heads": 4,
    "decoder_ffn_dim": 128,
    "decoder_start_token_id": SOT,
    "eos_token_id": EOT,
    "pad_token_id": EOT,
    "bos_token_id": EOT,
}


def build_tokenizer() -> Tokenizer:
    """The tiny tokenizer (module docstring)."""
    tok = tiny_tokenizers.train()
    # tokenizers' stub leaves the lists' element type unknown
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIALS])  # pyright: ignore[reportUnknownMemberType]
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TIMESTAMPS])  # pyright: ignore[reportUnknownMemberType]
    if tok.get_vocab_size() != TINY_VOCAB:
        raise RuntimeError(f"the tiny Whisper vocabulary has {tok.get_vocab_size()} ids")
    return tok


def tiny_generation(tok: Tokenizer) -> dict[str, Any]:
    """The tiny model's ``generation_config.json`` fields, as large-v3's are laid out."""
    symbols = [tok.token_to_id(c) for c in SUPPRESSED_SYMBOLS]  # printable ASCII: itself
    space = tok.token_to_id("Ġ")
    return {
        "decoder_start_token_id": SOT,
        "eos_token_id": EOT,
        "pad_token_id": EOT,
        "bos_token_id": EOT,
        "no_timestamps_token_id": NO_TIMESTAMPS,
        "prev_sot_token_id": TRANSLATE + 3,
        "is_multilingual": True,
        "lang_to_id": {f"<|{c}|>": FIRST_LANGUAGE + i for i, c in enumerate(LANGUAGES)},
        "task_to_id": {"translate": TRANSLATE, "transcribe": TRANSLATE + 1},
        # large-v3's symbols and specials, and (tiny only: a random model would speak them)
        # the language tokens and <|notimestamps|>
        "suppress_tokens": sorted(i for i in symbols if i is not None)
        + list(range(SOT, NO_TIMESTAMPS + 1)),
        "begin_suppress_tokens": [space, EOT],
        "max_length": TINY_MAX_LENGTH,
    }


def path_of() -> Path:
    return tiny_tokenizers.path_of("whisper")


def main() -> None:
    build_tokenizer().save(str(path_of()), pretty=False)
    print(f"wrote {path_of()}")


if __name__ == "__main__":
    main()
