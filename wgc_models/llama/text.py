"""Text in for the Llama example: a checkpoint folder with a ``tokenizer.json`` (and, for an
instruct model, a chat template) turns the request's text into prompt ids as transformers'
``apply_chat_template`` does (`wgc_models.layers.chat_template`). Without a checkpoint
(the tiny random model, a 256-token vocabulary) or with a folder that has no tokenizer, the
prompt's UTF-8 bytes are its ids, as before."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from wgc_models._shared.speech import prompt_text
from wgc_models.layers.chat_template import PromptFormat, TemplateError
from wgc_runtime.contract.node import NodeError


def prompt_format(config: Mapping[str, Any]) -> PromptFormat | None:
    path = str(config.get("checkpoint") or "")
    if not path or not (Path(path) / "tokenizer.json").is_file():
        return None
    try:
        return PromptFormat.from_folder(path)
    except TemplateError as exc:
        raise NodeError(f"checkpoint `{path}`: {exc}") from exc


def prompt_ids(fmt: PromptFormat | None, prompt: torch.Tensor, node: str) -> torch.Tensor:
    """The prompt port's value (the text's UTF-8 bytes) as the model's prompt ids."""
    if fmt is None:
        return prompt
    try:
        ids = fmt.ids(prompt_text(prompt, node))
    except TemplateError as exc:
        raise NodeError(f"node `{node}`: {exc}") from exc
    return torch.tensor(ids, dtype=torch.long)
