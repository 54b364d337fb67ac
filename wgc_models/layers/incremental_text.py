"""Text out of generated ids, token by token: `IncrementalText` sends what each new id adds to
``tokenizer.decode(ids, skip_special_tokens=True)`` of the reply so far (transformers' decode of
``generate``'s ids).

A token's text depends on its neighbours (a SentencePiece ``▁`` becomes a space except at the
start, a character's UTF-8 bytes may be split over byte-fallback or byte-level tokens), so each
call decodes the request's ids so far and sends what the new id added (decoding the whole list
keeps every decoder rule exact; a window of the last ids would be cheaper for long replies).
While the decoded text ends in U+FFFD (a character whose bytes have not all arrived) nothing is
sent; the next complete character brings them all. At the reply's last id (``last``) what is
pending goes out as decoded, U+FFFD included, as transformers shows it.

Its state is the caller's dict (a node's `CallContext.state`): the ids as an i64 tensor and the
length of the text sent, which the runtime can move between ranks.
"""

from __future__ import annotations

from typing import Any

import torch
from tokenizers import Tokenizer

from wgc_models.layers.host_values import int_list

_INCOMPLETE = "\ufffd"


class IncrementalText:
    """Decodes one request's ids as they come (module docstring); ``state`` holds its ids
    (``ids``, i64) and the length of the text sent (``sent``, characters)."""

    def __init__(self, tokenizer: Tokenizer, state: dict[str, Any]):
        self.tok, self.state = tokenizer, state

    def push(self, token: int, last: bool = False) -> str:
        """The text ``token`` adds to the request's ("" while a character is incomplete, unless
        ``token`` is the reply's last: then what is pending goes out as decoded)."""
        st = self.state
        prev = st.get("ids")
        ids = (int_list(prev) if isinstance(prev, torch.Tensor) else []) + [token]
        st["ids"] = torch.tensor(ids, dtype=torch.int64)
        text, sent = self.tok.decode(ids, skip_special_tokens=True), int(st.get("sent", 0))
        if len(text) <= sent or (text.endswith(_INCOMPLETE) and not last):
            return ""  # a special token (nothing to add) or a character still arriving
        st["sent"] = len(text)
        return text[sent:]
