"""Text out for the Llama example: `Detokenizer`, one generated token → the UTF-8 bytes of the
text it adds, emitted as text.

The tokens come by stream, every one the decoder chooses: the prefill's, then each decode
step's, including the step the loop runs past the end (at ``max_new_tokens``, or after the
prefill chose the end-of-sequence token). The reply's ids are those ``generate`` returns: up to
and including the first ``eos``, at most ``max_new_tokens``; later tokens add nothing.

With a checkpoint folder that has a ``tokenizer.json`` the text is what transformers'
``tokenizer.decode(ids, skip_special_tokens=True)`` makes of the reply's ids, sent token by
token (`wgc_models.layers.incremental_text`; its state in `CallContext.state`, so it moves
with the request between ranks). The reply's last id sends what is pending.

Without a checkpoint the tiny BPE is the tokenizer when param ``tokenizer`` is ``"tiny"``
(`wgc_models.llama.text.text_folder`). Otherwise without a checkpoint, or with a
byte-vocabulary folder that has no tokenizer, a token is one
byte (the tiny model's 256-token vocabulary) and is emitted as that byte; a real checkpoint
without its ``tokenizer.json`` is refused (``WG879``, `wgc_models.llama.text.tokenizer_file`).
"""

from __future__ import annotations

import torch
from tokenizers import Tokenizer

from wgc_models.layers.incremental_text import IncrementalText
from wgc_models.llama.text import text_folder
from wgc_runtime.contract.node import CallContext, Node, NodeContext, NodeError

__all__ = ["Detokenizer", "IncrementalText", "load_tokenizer"]


def load_tokenizer(path: str, node: str, tokenizer: str = "") -> Tokenizer | None:
    """The checkpoint's tokenizer (or the tiny BPE: ``tokenizer``); None where a token is one
    byte (`text.text_folder`)."""
    folder = text_folder({"checkpoint": path, "tokenizer": tokenizer}, node)
    if folder is None:
        return None
    try:
        return Tokenizer.from_file(str(folder / "tokenizer.json"))
    except Exception as exc:  # the tokenizers package's own parse error
        raise NodeError(f"checkpoint `{folder}`: `tokenizer.json` does not load: {exc}") from exc


class Detokenizer(Node):
    """One token → the UTF-8 bytes of the text it adds (module docstring)."""

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        self.tokenizer = load_tokenizer(
            str(self.config.get("checkpoint") or ""),
            self.name,
            str(self.config.get("tokenizer") or ""),
        )
        self.eos = int(self.config.get("eos", -1))
        self.max_new_tokens = int(self.config.get("max_new_tokens", 0))

    def forward_one(
        self, inputs: dict[str, torch.Tensor | None], ctx: CallContext
    ) -> dict[str, torch.Tensor]:
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
