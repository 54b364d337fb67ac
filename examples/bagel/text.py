"""Text in for BAGEL: the release folder's ``tokenizer.json`` (Qwen2.5's) encodes a text
segment without special tokens, as BAGEL's inferencer calls ``tokenizer.encode``; the
component frames it (``<|im_start|> … <|im_end|>``, `wgc_runtime.components.bagel`). A
release folder (it has ``llm_config.json``) without its tokenizer is an error; with no
checkpoint (the tiny random model, a vocabulary of the 256 bytes and BAGEL's four special
ids) or a bare weights folder, the segment's UTF-8 bytes are its ids."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer

from examples._speech import prompt_text
from wgc_runtime.components import bagel_checkpoint as release
from wgc_runtime.contract.node import NodeError


def bagel_tokenizer(node: str, config: Mapping[str, Any]) -> Tokenizer | None:
    path = str(config.get("checkpoint") or "")
    if not path:
        return None
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
