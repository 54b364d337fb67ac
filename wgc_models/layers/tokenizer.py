"""Text in and out of the speech models: a Hugging Face ``tokenizer.json`` loaded with the
`tokenizers` package (the real checkpoints' own file, or the tiny byte-level BPE shipped for
the random-weight examples, `wgc_models._shared.tokenizers`).

`TextCodec` encodes prompt text to ids and turns each generated id back into the exact bytes
it stands for (byte-level BPE: every token is a run of bytes under GPT-2's byte → character
table), so a model can stream its text one token at a time with no lost characters: a
character split over two tokens arrives as its two byte runs, and the client's incremental
UTF-8 decoder joins them. Special tokens (``<|im_end|>`` ...) stand for no text.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from tokenizers import Tokenizer


@cache
def _byte_of_char() -> dict[str, int]:
    """GPT-2's table from the printable character standing for a byte back to the byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


class TextCodec:
    """A byte-level BPE tokenizer: prompt text → ids, one generated id → its bytes."""

    def __init__(self, tokenizer: Tokenizer, path: str = ""):
        self.tokenizer, self.path = tokenizer, path
        self.vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
        special = {t.content for t in tokenizer.get_added_tokens_decoder().values() if t.special}
        table = _byte_of_char()
        self._bytes: list[bytes] = []
        for i in range(self.vocab_size):
            piece = tokenizer.id_to_token(i)
            if piece is None or piece in special:
                self._bytes.append(b"")
            elif all(ch in table for ch in piece):
                self._bytes.append(bytes(table[ch] for ch in piece))
            else:  # an added, non-special token: its text as it is
                self._bytes.append(piece.encode("utf-8"))

    @classmethod
    def from_file(cls, path: str | Path) -> TextCodec:
        path = Path(path)
        file = path / "tokenizer.json" if path.is_dir() else path
        if not file.is_file():
            raise FileNotFoundError(f"no tokenizer at `{file}`")
        return cls(Tokenizer.from_file(str(file)), str(file))

    def encode(self, text: str) -> list[int]:
        """The ids of ``text`` (no special tokens added: prompts are assembled by the model's
        own rules around them)."""
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def token_id(self, token: str) -> int:
        """The id of one token of the vocabulary (a special token's content, or a piece)."""
        i = self.tokenizer.token_to_id(token)
        if i is None:
            raise KeyError(f"`{token}` is not a token of `{self.path or 'the tokenizer'}`")
        return i

    def piece(self, token: int) -> bytes:
        """The bytes ``token`` stands for (b"" for a special token or an id past the
        vocabulary: the models' extra ids, such as Orpheus's audio tokens)."""
        return self._bytes[token] if 0 <= token < len(self._bytes) else b""

    def decode(self, ids: list[int]) -> str:
        """The text of ``ids`` (special tokens skipped)."""
        return b"".join(self.piece(i) for i in ids).decode("utf-8", errors="replace")
