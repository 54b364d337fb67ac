"""Text out for the Llama example: `Detokenizer`, one generated token → the UTF-8 bytes of the
text it adds, emitted as text.

The tokens come by stream, every one the decoder chooses: the prefill's, then each decode
step's, including the step the loop runs past the end (at ``max_new_tokens``, or after the
prefill chose the end-of-sequence token). The reply's ids are those ``generate`` returns: up to
and including the first ``eos``, at most ``max_new_tokens``; later tokens add nothing.

With a checkpoint folder that has a ``tokenizer.json`` the text is what transformers'
``tokenizer.decode(ids, skip_special_tokens=True)`` makes of the generated ids. A token's text
depends on its neighbours (a SentencePiece ``▁`` becomes a space except at the start, a
character's UTF-8 bytes may be split over byte-fallback or byte-level tokens), so each call
decodes the request's ids so far and emits what the new token added to the text (decoding the
whole list keeps every decoder rule exact; a window of the last tokens would be cheaper for long
replies). While the decoded text ends in U+FFFD (a character whose bytes have not all arrived)
nothing is emitted; the next complete character brings them all. At the reply's last token (its
``eos`` or its ``max_new_tokens``-th) what is pending goes out as decoded, U+FFFD included, as
transformers shows it.

The request's ids and how much of their text was sent live in `CallContext.state` (a tensor and
an int), so they move with the request when prefill and decode run on different ranks.

Without a checkpoint, or with a folder that has no tokenizer, a token is one byte (the tiny
model's 256-token vocabulary) and is emitted as that byte, as before.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer

from wgc_runtime.contract.node import CallContext, Node, NodeContext, NodeError

_INCOMPLETE = "\ufffd"


def load_tokenizer(path: str) -> Tokenizer | None:
    """The checkpoint's tokenizer, or None without a checkpoint or a ``tokenizer.json``."""
    if not path or not (Path(path) / "tokenizer.json").is_file():
        return None
    try:
        return Tokenizer.from_file(str(Path(path) / "tokenizer.json"))
    except Exception as exc:  # the tokenizers package's own parse error
        raise NodeError(f"checkpoint `{path}`: `tokenizer.json` does not load: {exc}") from exc


class IncrementalText:
    """Decodes one request's ids as they come (module docstring); ``state`` holds its ids
    (``ids``, i64) and the length of the text sent (``sent``, characters)."""

    def __init__(self, tokenizer: Tokenizer, state: dict):
        self.tok, self.state = tokenizer, state

    def push(self, token: int, last: bool = False) -> str:
        """The text ``token`` adds to the request's ("" while a character is incomplete, unless
        ``token`` is the reply's last: then what is pending goes out as decoded)."""
        st = self.state
        prev = st.get("ids")
        ids = (prev.tolist() if isinstance(prev, torch.Tensor) else []) + [token]
        st["ids"] = torch.tensor(ids, dtype=torch.int64)
        text, sent = self.tok.decode(ids, skip_special_tokens=True), int(st.get("sent", 0))
        if len(text) <= sent or (text.endswith(_INCOMPLETE) and not last):
            return ""  # a special token (nothing to add) or a character still arriving
        st["sent"] = len(text)
        return text[sent:]


class Detokenizer(Node):
    """One token → the UTF-8 bytes of the text it adds (module docstring)."""

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        self.tokenizer = load_tokenizer(str(self.config.get("checkpoint") or ""))
        self.eos = int(self.config.get("eos", -1))
        self.max_new_tokens = int(self.config.get("max_new_tokens", 0))

    def forward_one(self, inputs, ctx: CallContext):
        token = inputs["token"]
        if token is None or token.numel() != 1:
            raise NodeError(f"node `{self.name}`: expects one token, got {token}")
        tid = int(token.reshape(-1)[0])
        taken = int(ctx.state.get("taken", 0))
        if taken < 0 or taken >= self.max_new_tokens > 0:
            return {"text": torch.zeros(0, dtype=torch.uint8)}  # past the reply's last id
        ctx.state["taken"] = -1 if tid == self.eos else taken + 1
        if self.tokenizer is None and tid == self.eos:
            piece = b""  # a byte-token model's end of sequence is no text
        elif self.tokenizer is None:
            if not 0 <= tid < 256:
                raise NodeError(
                    f"node `{self.name}`: token {tid} is not a byte (without a checkpoint's "
                    "tokenizer a token is one byte of UTF-8 text)"
                )
            piece = bytes([tid])
        else:  # the eos is decoded too: a special token adds nothing, as in transformers
            last = tid == self.eos or taken + 1 == self.max_new_tokens
            piece = IncrementalText(self.tokenizer, ctx.state).push(tid, last).encode("utf-8")
        return {"text": torch.tensor(list(piece), dtype=torch.uint8)}
