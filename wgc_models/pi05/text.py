"""π0.5's text prompt: the request's instruction turned into the ids the prefix embeds, as openpi
tokenizes a prompt without a discrete state (``PaligemmaTokenizer.tokenize(prompt)``).

openpi's recipe (facts of its tokenizer; this code is this project's): the text is stripped and
its ``_`` and ``"\\n"`` become spaces; its ids are PaliGemma's ``<bos>``, the cleaned text's
pieces, then the pieces of ``"\\n"`` (encoded on its own: the "start of answer"); at most
`MAX_TOKENS` ids (openpi's ``max_token_len`` for π0.5; openpi truncates past it, this refuses).
openpi pads to that length and masks the padding out of attention (its positions are the
mask's running count), which is the same prefix as no padding, so none is added here.

The tokenizer is PaliGemma's SentencePiece vocabulary as a Hugging Face ``tokenizer.json`` (the
`tokenizers` package): the checkpoint folder's own, or for the tiny random weights (no
checkpoint) this folder's `tokenizer.json` (`wgc_models._shared.tiny_tokenizers`: the shared
byte-level BPE with Gemma's specials). A checkpoint folder without one is refused before any
weight is built (``WG879``, as Llama's; both nodes, the vision encoder and the LLM, check it
first): no other vocabulary may stand in for it.

Token ids still go in as they are: with request option ``token_ids`` the prompt field holds ids
(an openpi-tokenized prompt, the discrete state in it). Every id must be within the model's
vocabulary. A text prompt that is not UTF-8 or holds control characters (ids sent without the
option) is refused rather than read as text.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer

from wgc_models.layers.host_values import int_list
from wgc_runtime.contract.node import NodeError, NodeInputError

MAX_TOKENS = 200  # openpi's max_token_len for π0.5 (48 for π0)
BOS = "<bos>"
TINY_FILE = Path(__file__).resolve().parent / "tokenizer.json"
TOKEN_IDS_OPTION = "token_ids"
_ALLOWED_CONTROLS = frozenset("\t\n\r")


def clean(text: str) -> str:
    """openpi's cleaning of a prompt: stripped, ``_`` and ``"\\n"`` as spaces."""
    return text.strip().replace("_", " ").replace("\n", " ")


def tokenizer_file(checkpoint: str, node: str) -> Path:
    """The ``tokenizer.json`` the prompt goes through: the checkpoint folder's, or the tiny one
    without a checkpoint; a checkpoint without one is refused (``WG879``, as Llama's)."""
    if not checkpoint:
        return TINY_FILE
    folder = Path(checkpoint)
    file = folder / "tokenizer.json" if folder.is_dir() else folder.parent / "tokenizer.json"
    if file.is_file():
        return file
    raise NodeError(
        f"WG879: node `{node}`: checkpoint `{checkpoint}` has no `tokenizer.json`: π0.5's "
        f"prompt goes through PaliGemma's tokenizer. Copy google/paligemma-3b-pt-224's "
        f"`tokenizer.json` into the folder (docs/checkpoints.md)"
    )


@dataclass(frozen=True)
class PromptTokenizer:
    """PaliGemma's tokenizer as openpi applies it to a π0.5 prompt (module docstring)."""

    tokenizer: Tokenizer
    bos: int
    newline: tuple[int, ...]
    vocab_size: int
    path: str

    @classmethod
    def load(cls, file: Path, node: str) -> PromptTokenizer:
        try:
            tok = Tokenizer.from_file(str(file))
        except Exception as exc:  # the package's own error type is not exported
            raise NodeError(f"node `{node}`: `{file}` is not a tokenizer.json: {exc}") from exc
        bos = tok.token_to_id(BOS)
        if bos is None:
            raise NodeError(f"node `{node}`: `{file}` has no `{BOS}` token (PaliGemma's)")
        newline = tuple(tok.encode("\n", add_special_tokens=False).ids)
        size = tok.get_vocab_size(with_added_tokens=True)
        return cls(tok, bos, newline, size, str(file))

    def ids(self, text: str) -> list[int]:
        """``<bos>``, the cleaned text's ids, then ``"\\n"``'s."""
        body = self.tokenizer.encode(clean(text), add_special_tokens=False).ids
        return [self.bos, *body, *self.newline]


def prompt_ids(
    tok: PromptTokenizer, value: torch.Tensor, token_ids: bool, vocab: int, node: str
) -> torch.Tensor:
    """The prompt field as the prefix's ids: text (its UTF-8 bytes, as the runtime hands text
    over) through ``tok``, or, with ``token_ids``, the ids as sent (module docstring)."""
    raw = int_list(value)
    if not raw:
        raise NodeInputError(f"node `{node}`: an empty prompt")
    ids = raw if token_ids else tok.ids(_text(raw, node))
    bad = [i for i in ids if not 0 <= i < vocab]
    if bad:
        raise NodeInputError(
            f"node `{node}`: token id {bad[0]} is outside the model's vocabulary "
            f"(0..{vocab - 1})" + ("" if token_ids else f" (`{tok.path}` gave it)")
        )
    if len(ids) > MAX_TOKENS:
        raise NodeInputError(
            f"node `{node}`: the prompt is {len(ids)} tokens, over π0.5's "
            f"{MAX_TOKENS} (openpi's max_token_len)"
        )
    return torch.tensor(ids, dtype=torch.long)


def _text(raw: list[int], node: str) -> str:
    hint = f"(token ids go with request option `{TOKEN_IDS_OPTION}`)"
    if not all(0 <= b < 256 for b in raw):
        raise NodeInputError(f"node `{node}`: the prompt is not text {hint}")
    try:
        text = bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        raise NodeInputError(f"node `{node}`: the prompt is not UTF-8 text {hint}") from None
    if any(ch < " " and ch not in _ALLOWED_CONTROLS for ch in text):
        raise NodeInputError(f"node `{node}`: the prompt holds control characters, not text {hint}")
    return text
