"""The Llama example as transformers runs it: a checkpoint folder's tokenizer and chat template
make the prompt ids (`apply_chat_template`), and the end of sequence stops as in `generate`:
when the prefill's own choice (the first generated token) is the end-of-sequence token,
decoding stops there — one token out, not `max_new_tokens` — captured and eager."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.e2e.test_decoder_engines import CPU, compiled, placement, serve, tokens  # noqa: E402

PROMPT = "prompt 3: abcabc"


@pytest.mark.parametrize("batching", ["captured", "eager"])
def test_a_first_token_at_eos_ends_the_request(tmp_path: Path, batching: str) -> None:
    where = CPU if batching == "captured" else placement(tmp_path, "{max_batch: 4}")
    (tmp_path / "free").mkdir()
    _, (free,) = serve(compiled(tmp_path / "free", where, {"eos": "-1"}), [PROMPT])
    first = tokens(free)
    assert len(first) == 32 and first[0] not in first[1:3]  # a long run without stopping
    (tmp_path / "eos").mkdir()
    _, (h,) = serve(compiled(tmp_path / "eos", where, {"eos": str(first[0])}), [PROMPT])
    assert tokens(h) == [first[0]]


def test_a_checkpoint_with_a_chat_template_speaks_through_it(tmp_path: Path) -> None:
    """A transformers Llama saved with a tokenizer and a chat template: the served tokens are
    `transformers`' greedy continuation of `apply_chat_template`'s ids."""
    import torch
    import transformers

    from tests.unit.test_chat_template import TEMPLATE, _tokenizer

    fast = _tokenizer(TEMPLATE)
    vocab = len(fast)
    torch.manual_seed(2)
    cfg = transformers.LlamaConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
    )  # fmt: skip
    hf = transformers.LlamaForCausalLM(cfg).eval()
    ckpt = tmp_path / "ckpt"
    hf.save_pretrained(ckpt)
    fast.save_pretrained(ckpt)
    (tmp_path / "plan").mkdir()
    sets = {"checkpoint": str(ckpt), "eos": "-1", "vocab": str(vocab)}
    _, (h,) = serve(compiled(tmp_path / "plan", CPU, sets), ["hello there"])
    ids = fast.apply_chat_template(
        [{"role": "user", "content": "hello there"}], add_generation_prompt=True, tokenize=True
    )
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    want, seq = [], torch.tensor([ids])
    with torch.no_grad():
        for _ in range(32):
            want.append(int(hf(seq).logits[0, -1].argmax()))
            seq = torch.cat([seq, torch.tensor([[want[-1]]])], dim=1)
    assert tokens(h) == want


TEXT_CPU = ROOT / "wgc_models" / "llama" / "placements" / "cpu-text.yaml"


def _text(h) -> str:
    assert h.error is None, h.error
    return b"".join(bytes(o.tensor.tolist()) for o in h.outputs).decode("utf-8")


def _greedy(hf, ids: list[int], eos: int, n: int = 32) -> list[int]:
    """`generate`'s greedy ids: ``n`` new tokens, or up to and including ``eos``."""
    import torch

    want, seq = [], torch.tensor([ids])
    with torch.no_grad():
        while len(want) < n and (not want or want[-1] != eos):
            want.append(int(hf(seq).logits[0, -1].argmax()))
            seq = torch.cat([seq, torch.tensor([[want[-1]]])], dim=1)
    return want


@pytest.mark.parametrize("eos", ["-1", "tokenizer"])
def test_with_the_detokenizer_placed_the_reply_is_the_generated_text(
    tmp_path: Path, eos: str
) -> None:
    """Text out: the served reply is `tokenizer.decode(generate's ids,
    skip_special_tokens=True)`, token by token (the stream's extra step past the end, and the
    end-of-sequence token, add nothing)."""
    import torch
    import transformers

    from tests.unit.test_chat_template import TEMPLATE, _tokenizer

    fast = _tokenizer(TEMPLATE)
    vocab = len(fast)
    torch.manual_seed(3)
    cfg = transformers.LlamaConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
    )  # fmt: skip
    hf = transformers.LlamaForCausalLM(cfg).eval()
    ids = fast.apply_chat_template(
        [{"role": "user", "content": "hello there"}], add_generation_prompt=True, tokenize=True
    )
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    want = _greedy(hf, ids, -1)
    stop = -1
    if eos == "tokenizer":  # the tokenizer's eos takes the place of a later choice: it stops
        stop = fast.convert_tokens_to_ids("<|eot_id|>")
        k = next(i for i in range(3, 32) if want[i] not in want[:i] and stop not in want[:i])
        with torch.no_grad():
            hf.lm_head.weight[[stop, want[k]]] = hf.lm_head.weight[[want[k], stop]]
        want = _greedy(hf, ids, stop)
        assert len(want) == k + 1 and want[-1] == stop
    ckpt = tmp_path / "ckpt"
    hf.save_pretrained(ckpt)
    fast.save_pretrained(ckpt)
    (tmp_path / "plan").mkdir()
    sets = {"checkpoint": str(ckpt), "eos": str(stop), "vocab": str(vocab)}
    _, (h,) = serve(compiled(tmp_path / "plan", TEXT_CPU, sets), ["hello there"])
    expected = fast.decode(want, skip_special_tokens=True)
    assert expected and _text(h) == expected


def test_without_a_tokenizer_the_text_is_the_token_bytes(tmp_path: Path) -> None:
    """The tiny random model with the detokenizer placed and no tokenizer (the byte vocabulary,
    as the plain placements run it): its token ids are the reply's bytes (the end-of-sequence
    token left out)."""
    (tmp_path / "ids").mkdir()
    _, (ids,) = serve(compiled(tmp_path / "ids", CPU), [PROMPT])
    (tmp_path / "text").mkdir()
    sets = {"tokenizer": "", "vocab": "256", "eos": "0"}  # cpu-text.yaml's params undone
    _, (h,) = serve(compiled(tmp_path / "text", TEXT_CPU, sets), [PROMPT])
    assert h.error is None, h.error
    got = b"".join(bytes(o.tensor.tolist()) for o in h.outputs)
    assert got == bytes(t for t in tokens(ids) if t != 0) and len(got) > 0  # eos = 0


def test_the_tiny_text_placement_speaks_through_the_shipped_bpe(tmp_path: Path) -> None:
    """``cpu-text.yaml`` without a checkpoint: the random weights read the prompt through the
    shipped tiny BPE (``llama/tokenizer.json``: its ids, with ``<|begin_of_text|>`` first) and
    the reply is that tokenizer's ``decode`` of the ids the same model chooses (up to its
    ``<|eot_id|>``, special tokens left out): text in, text out."""
    from tokenizers import Tokenizer

    from wgc_models.llama.text import TINY_FOLDER

    tok = Tokenizer.from_file(str(TINY_FOLDER / "tokenizer.json"))
    sets = {"tokenizer": "tiny", "vocab": "512", "eos": "505"}  # what cpu-text.yaml sets
    (tmp_path / "ids").mkdir()
    _, (ids,) = serve(compiled(tmp_path / "ids", CPU, sets), ["hello there"])
    got_ids = tokens(ids)
    assert any(t >= 256 for t in got_ids)  # merged BPE ids, not bytes
    (tmp_path / "text").mkdir()
    _, (h,) = serve(compiled(tmp_path / "text", TEXT_CPU), ["hello there"])
    expected = tok.decode(got_ids, skip_special_tokens=True)
    assert expected and _text(h) == expected
    # the prompt went in as the tokenizer's ids: a byte-for-byte prompt gives other tokens
    (tmp_path / "bytes").mkdir()
    raw = {**sets, "tokenizer": ""}
    _, (b,) = serve(compiled(tmp_path / "bytes", CPU, raw), ["hello there"])
    assert tokens(b) != got_ids
    assert tok.encode("hello there").ids[0] == tok.token_to_id("<|begin_of_text|>") == 496
