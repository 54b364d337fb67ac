"""The incremental detokenizer (`wgc_models.layers.incremental_text`, the Llama and BAGEL
examples' text out): the text it sends token by token, joined, is ``tokenizer.decode(ids,
skip_special_tokens=True)`` of the whole reply, for byte-level ids that split characters (and
leave one unfinished at the end)."""

from __future__ import annotations

import random

from wgc_models.layers.incremental_text import IncrementalText


def _pieces(tok, ids: list[int]) -> list[str]:
    inc = IncrementalText(tok, {})
    return [inc.push(t, last=i == len(ids) - 1) for i, t in enumerate(ids)]


def test_the_pieces_join_to_the_decoded_reply() -> None:
    from tests.unit.test_chat_template import TEMPLATE, _tokenizer

    tok = _tokenizer(TEMPLATE).backend_tokenizer
    text = "héllo wörld — 日本語 ok"
    ids = tok.encode(text, add_special_tokens=False).ids
    eot = tok.token_to_id("<|eot_id|>")
    ids = [*ids[:3], eot, *ids[3:]]  # a special token mid-reply adds nothing
    pieces = _pieces(tok, ids)
    assert "".join(pieces) == tok.decode(ids, skip_special_tokens=True) == text
    assert "" in pieces  # a character's bytes waited for the rest of it
    rng = random.Random(0)
    for _ in range(20):  # arbitrary ids: invalid and unfinished bytes decode as U+FFFD
        ids = [rng.randrange(tok.get_vocab_size()) for _ in range(rng.randrange(1, 24))]
        assert "".join(_pieces(tok, ids)) == tok.decode(ids, skip_special_tokens=True)


def test_an_unfinished_character_is_held_until_the_last_token() -> None:
    from tests.unit.test_chat_template import TEMPLATE, _tokenizer

    tok = _tokenizer(TEMPLATE).backend_tokenizer
    lead = tok.token_to_id("Ã")  # the byte-level symbol of 0xC3: a 2-byte character's start
    assert lead is not None
    assert IncrementalText(tok, {}).push(lead) == ""
    assert IncrementalText(tok, {}).push(lead, last=True) == "\ufffd"
