"""Text in for BAGEL: the release folder's ``tokenizer.json`` (Qwen2.5's) encodes a text
segment without special tokens, as BAGEL's inferencer calls ``tokenizer.encode``; the
component frames it (``<|im_start|> … <|im_end|>``, `wgc_models.bagel.model`). A
release folder (it has ``llm_config.json``) without its tokenizer is an error; with no
checkpoint the ``tiny-text`` model speaks through the shipped tiny BPE (this folder's
``tokenizer.json``, `wgc_models._shared.tiny_tokenizers`); the ``tiny`` random model (a
vocabulary of the 256 bytes and BAGEL's four special ids) or a bare weights folder takes the
segment's UTF-8 bytes as its ids.

Text out (`Detokenizer`, placed by a placement that wants text rather than ids): each decoded
token's text as that tokenizer decodes the reply."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer

from wgc_models._shared.speech import prompt_text
from wgc_models.bagel import checkpoint as release
from wgc_models.bagel.config import CONFIGS
from wgc_models.layers.incremental_text import IncrementalText
from wgc_runtime.contract.node import CallContext, Node, NodeContext, NodeError

TINY_TEXT = "tiny-text"  # the model that speaks through the shipped tiny BPE
TINY_TOKENIZER = Path(__file__).resolve().parent / "tokenizer.json"


def bagel_tokenizer(node: str, config: Mapping[str, Any]) -> Tokenizer | None:
    path = str(config.get("checkpoint") or "")
    if not path:
        tiny = str(config.get("model", "tiny")) == TINY_TEXT
        return Tokenizer.from_file(str(TINY_TOKENIZER)) if tiny else None
    file = Path(path) / "tokenizer.json"
    if file.is_file():
        return Tokenizer.from_file(str(file))
    if release.has_config(path):
        raise NodeError(
            f"node `{node}`: BAGEL's release folder `{path}` has no `tokenizer.json`: copy the "
            f"published folder whole (docs/checkpoints.md)"
        )
    return None


def text_ids(tokenizer: Tokenizer | None, segment: torch.Tensor, node: str) -> torch.Tensor:
    """A text segment's ids (its UTF-8 bytes as the port carries them → the tokenizer's)."""
    if tokenizer is None:
        return segment
    ids = tokenizer.encode(prompt_text(segment, node), add_special_tokens=False).ids
    return torch.tensor(ids, dtype=torch.long)


class Detokenizer(Node):
    """Text out: each token LLM chooses → the UTF-8 bytes it adds to the reply's text, as the
    release folder's tokenizer decodes the reply (special tokens left out, `IncrementalText`);
    without a tokenizer a token under 256 is that byte and BAGEL's special ids add nothing.

    The tokens come by stream: each prefill's start token (``<|im_start|>``: no text), then the
    decoded ones, including the one LLM stops at. The reply is what the ``decode`` walk emits:
    the decoded tokens before ``<|im_end|>`` and before the ``max_tokens``-th (LLM's ``stop``);
    a decoded ``<|im_start|>`` is not counted (nothing tells it from a prefill's). At the end
    the bytes of an incomplete character go out as the tokenizer decodes them (U+FFFD)."""

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        self.tokenizer = bagel_tokenizer(self.name, self.config)
        name = str(self.config.get("model", "tiny"))
        if name not in CONFIGS:
            raise NodeError(f"node `{self.name}`: unknown BAGEL model `{name}`")
        tokens = CONFIGS[name].tokens  # a release keeps BAGEL's special ids
        self.bos, self.eos = tokens.bos, tokens.eos

    def forward_one(
        self, inputs: dict[str, torch.Tensor | None], ctx: CallContext
    ) -> dict[str, torch.Tensor]:
        token = inputs["token"]
        if token is None or token.numel() != 1:
            raise NodeError(f"node `{self.name}`: expects one token, got {token}")
        tid, st = int(token.reshape(-1)[0]), ctx.state
        limit = int(ctx.options.get("max_tokens", 500))
        decoded = int(st.get("decoded", 0)) + (tid != self.bos)
        if st.get("ended") or tid == self.eos or decoded >= limit:
            piece = b""
            if not st.get("ended") and self.tokenizer is not None:
                # the reply ends: what is pending goes out as decoded (U+FFFD included); the
                # end token is special, so it adds nothing itself
                piece = IncrementalText(self.tokenizer, st).push(self.eos, True).encode("utf-8")
            st["ended"] = True
            return {"text": torch.tensor(list(piece), dtype=torch.uint8)}
        st["decoded"] = decoded
        if self.tokenizer is None:
            piece = bytes([tid]) if 0 <= tid < 256 else b""
        else:
            piece = IncrementalText(self.tokenizer, st).push(tid).encode("utf-8")
        return {"text": torch.tensor(list(piece), dtype=torch.uint8)}
