"""Text in for the Llama example: a checkpoint folder with a ``tokenizer.json`` (and, for an
instruct model, a chat template) turns the request's text into prompt ids as transformers'
``apply_chat_template`` does (`wgc_models.layers.chat_template`).

Bytes as ids: without a checkpoint (the tiny random model, a 256-token vocabulary) the prompt's
UTF-8 bytes are its ids and each generated id is one byte of the reply. A checkpoint folder
without a ``tokenizer.json`` keeps that only when its ``config.json`` declares a vocabulary of
at most 256 ids (the byte-vocabulary test checkpoints); a real vocabulary without its tokenizer
is refused (``WG879``, `tokenizer_file`): its ids would be read as bytes, silently.

The tiny BPE: without a checkpoint, param ``tokenizer = "tiny"`` (the text placements set it, with
``vocab`` 512 and ``eos`` its ``<|eot_id|>``) makes the random weights speak through this
folder's ``tokenizer.json`` (`wgc_models._shared.tiny_tokenizers`: 496 byte-level BPE ids, then
Llama 3's specials), so text in is text and text out is text; a checkpoint's own tokenizer
always wins (`text_folder`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from wgc_models._shared.speech import prompt_text
from wgc_models.layers.chat_template import PromptFormat, TemplateError
from wgc_runtime.contract.node import NodeError

BYTE_VOCAB = 256  # a vocabulary whose ids are bytes
TINY_FOLDER = Path(__file__).resolve().parent  # its tokenizer.json: the tiny BPE


def _vocab(folder: Path) -> int | None:
    """The checkpoint's ``config.json`` ``vocab_size`` (None when it does not say)."""
    try:
        vocab = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("vocab_size")
    except (OSError, ValueError, AttributeError):
        return None
    return vocab if isinstance(vocab, int) else None


def tokenizer_file(path: str, node: str) -> Path | None:
    """The checkpoint's ``tokenizer.json``; None where a token is one byte (no checkpoint, or a
    byte-vocabulary one); a real checkpoint without it is refused (module docstring)."""
    if not path:
        return None
    folder = Path(path)
    if (folder / "tokenizer.json").is_file():
        return folder / "tokenizer.json"
    vocab = _vocab(folder)
    if vocab is not None and vocab <= BYTE_VOCAB:
        return None
    says = f"a vocabulary of {vocab} ids" if vocab is not None else "no byte vocabulary"
    raise NodeError(
        f"WG879: node `{node}`: checkpoint `{path}` has no `tokenizer.json` and its config.json "
        f"declares {says}: the prompt's bytes would be read as token ids. Copy the published "
        f"folder whole (its `tokenizer.json`, `tokenizer_config.json`; docs/checkpoints.md)"
    )


def text_folder(config: Mapping[str, Any], node: str) -> Path | None:
    """The folder whose ``tokenizer.json`` (and chat template) the text goes through: the
    checkpoint's (`tokenizer_file`); without one, this package's tiny BPE when param
    ``tokenizer`` is ``"tiny"``; None where a token is one byte (module docstring)."""
    path = str(config.get("checkpoint") or "")
    if path:
        file = tokenizer_file(path, node)
        return None if file is None else file.parent
    name = str(config.get("tokenizer") or "")
    if name == "tiny":
        return TINY_FOLDER
    if name:
        raise NodeError(
            f'node `{node}`: tokenizer `{name}` is not known: "" (the checkpoint\'s, or bytes) '
            f'or "tiny" (the shipped tiny BPE)'
        )
    return None


def prompt_format(config: Mapping[str, Any], node: str) -> PromptFormat | None:
    folder = text_folder(config, node)
    if folder is None:
        return None
    try:
        return PromptFormat.from_folder(folder)
    except TemplateError as exc:
        raise NodeError(f"checkpoint `{folder}`: {exc}") from exc


def prompt_ids(fmt: PromptFormat | None, prompt: torch.Tensor, node: str) -> torch.Tensor:
    """The prompt port's value (the text's UTF-8 bytes) as the model's prompt ids."""
    if fmt is None:
        return prompt
    try:
        ids = fmt.ids(prompt_text(prompt, node))
    except TemplateError as exc:
        raise NodeError(f"node `{node}`: {exc}") from exc
    return torch.tensor(ids, dtype=torch.long)
