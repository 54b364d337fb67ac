"""The tiny byte-level BPE tokenizers the speech examples ship (`tiny_tokenizers`): the script
trains them back byte for byte, the tiny configs carry their ids, and `TextCodec` turns every
id back into the exact bytes it stands for (so text streamed a token at a time is the text)."""

from __future__ import annotations

import pytest

from wgc_models._shared import tiny_tokenizers as tiny
from wgc_models.layers.tokenizer import TextCodec
from wgc_models.orpheus import config as orpheus_cfg
from wgc_models.qwen3_omni import config as omni_cfg

FAMILIES = tuple(tiny.FILES)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_script_trains_the_shipped_file_back(family: str) -> None:
    shipped = tiny.path_of(family).read_text(encoding="utf-8")
    assert tiny.build(family).to_str() == shipped


@pytest.mark.parametrize("family", FAMILIES)
def test_the_vocabulary_is_512_ids_with_the_specials_at_the_top(family: str) -> None:
    codec = TextCodec.from_file(tiny.path_of(family))
    assert codec.vocab_size == tiny.SIZE == 512
    specials = tiny.FILES[family]
    assert [codec.token_id(s) for s in specials] == list(range(tiny.REGULAR, tiny.SIZE))


def test_the_tiny_orpheus_config_has_the_tokenizers_ids() -> None:
    codec = TextCodec.from_file(tiny.path_of("orpheus"))
    t = orpheus_cfg.TINY_TOKENS
    assert t.tokeniser_length == codec.vocab_size
    assert t.begin_of_text == codec.token_id("<|begin_of_text|>")
    assert t.end_of_text == codec.token_id("<|eot_id|>")  # Orpheus's "end of text": 128009


def test_the_tiny_qwen3_omni_config_has_the_tokenizers_ids() -> None:
    codec = TextCodec.from_file(tiny.path_of("qwen3_omni"))
    ids = omni_cfg.TINY_TOKENS
    cfg = omni_cfg.TINY
    assert cfg["thinker_config"]["text_config"]["vocab_size"] == codec.vocab_size
    named = {
        "im_start": "<|im_start|>",
        "im_end": "<|im_end|>",
        "audio_start": "<|audio_start|>",
        "audio_end": "<|audio_end|>",
        "audio": "<|audio_pad|>",
        "tts_pad": "<|tts_pad|>",
        "tts_bos": "<|tts_bos|>",
        "tts_eos": "<|tts_eos|>",
        "image": "<|image_pad|>",
        "video": "<|video_pad|>",
        "vision_start": "<|vision_start|>",
    }
    assert {k: codec.token_id(v) for k, v in named.items()} == {k: ids[k] for k in named}
    # the chat template's role words and newline are single tokens, as in Qwen's vocabulary
    words = {"user": "user", "assistant": "assistant", "system": "system"}
    assert {k: codec.encode(v) for k, v in words.items()} == {k: [ids[k]] for k in words}
    assert codec.encode("\n") == [omni_cfg.NEWLINE]


@pytest.mark.parametrize(
    "text", ["hello there", "tara: héllo, wörld!", "你好 🙂 ok", "user\nassistant\n"]
)
def test_each_tokens_bytes_make_the_text_back(text: str) -> None:
    codec = TextCodec.from_file(tiny.path_of("qwen3_omni"))
    ids = codec.encode(text)
    assert b"".join(codec.piece(i) for i in ids) == text.encode("utf-8")
    assert codec.decode(ids) == codec.tokenizer.decode(ids) == text
    assert any(len(codec.piece(i)) > 1 for i in ids)  # merges, not just bytes


def test_special_tokens_and_ids_past_the_vocabulary_stand_for_no_text() -> None:
    codec = TextCodec.from_file(tiny.path_of("qwen3_omni"))
    assert codec.piece(codec.token_id("<|im_end|>")) == b""
    assert codec.piece(codec.vocab_size + 5) == b"" and codec.piece(-1) == b""
    with pytest.raises(KeyError, match="is not a token"):
        codec.token_id("<|nope|>")


def test_the_tiny_llama_text_params_have_the_tokenizers_ids() -> None:
    """``llama/placements/cpu-text.yaml`` sets the tiny BPE's vocabulary and ``<|eot_id|>``;
    a prompt starts with ``<|begin_of_text|>`` (Llama 3's post-processor)."""
    import yaml

    codec = TextCodec.from_file(tiny.path_of("llama"))
    params = yaml.safe_load(
        (tiny.HERE / "llama" / "placements" / "cpu-text.yaml").read_text(encoding="utf-8")
    )["params"]
    assert params == {"tokenizer": "tiny", "vocab": codec.vocab_size, "eos": 505}
    assert codec.token_id("<|eot_id|>") == 505
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tiny.path_of("llama")))
    assert tok.encode("hi").ids[0] == codec.token_id("<|begin_of_text|>")


def test_the_tiny_text_bagel_config_has_the_tokenizers_ids() -> None:
    from wgc_models.bagel.config import TINY_TEXT

    codec = TextCodec.from_file(tiny.path_of("bagel"))
    t = TINY_TEXT.tokens
    assert TINY_TEXT.llm.vocab_size == codec.vocab_size
    assert t.bos == codec.token_id("<|im_start|>")
    assert t.eos == codec.token_id("<|im_end|>")
    assert t.start_of_image == codec.token_id("<|vision_start|>")
    assert t.end_of_image == codec.token_id("<|vision_end|>")


def test_the_tiny_pi05_config_has_the_tokenizers_vocabulary() -> None:
    from wgc_models.pi05.config import TINY

    codec = TextCodec.from_file(tiny.path_of("pi05"))
    assert TINY.text.vocab_size == codec.vocab_size
    assert codec.token_id("<bos>") == tiny.REGULAR + 2  # Gemma's third special, as id 2 there
