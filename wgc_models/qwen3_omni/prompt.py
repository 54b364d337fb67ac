"""Qwen3-Omni's chat prompt, a segment at a time (`ChatPrompt`): Qwen's chat template as its
Thinker reads it. The first segment opens the user turn (``<|im_start|>user\n``), text is
tokenized, audio is ``<|audio_start|>``, one ``<|audio_pad|>`` per encoder frame,
``<|audio_end|>`` (`audio_ids`); the reply closes it and opens the assistant's
(``<|im_end|>\n<|im_start|>assistant\n``).
"""

from __future__ import annotations

from wgc_models.layers.tokenizer import TextCodec
from wgc_models.qwen3_omni.omni_config import OmniConfig, OmniTokens
from wgc_runtime.contract.node import NodeError


class ChatPrompt:
    """The Thinker's ids for one request's passes (see the module docstring)."""

    def __init__(self, codec: TextCodec, tokens: OmniTokens, audio_ids: tuple[int, int, int]):
        self.codec, self.tokens = codec, tokens
        self.audio_start, self.audio_pad, self.audio_end = audio_ids
        newline = codec.encode("\n")
        if len(newline) != 1:
            raise NodeError(f"tokenizer `{codec.path}`: a newline is not one token")
        self.newline = newline[0]

    def _open(self, opened: bool) -> list[int]:
        return [] if opened else [self.tokens.im_start, self.tokens.user, self.newline]

    def text(self, text: str, opened: bool) -> list[int]:
        return [*self._open(opened), *self.codec.encode(text)]

    def audio(self, frames: int, opened: bool) -> list[int]:
        return [*self._open(opened), self.audio_start, *[self.audio_pad] * frames, self.audio_end]

    def reply(self, opened: bool) -> list[int]:
        t = self.tokens
        return [*self._open(opened), t.im_end, self.newline, t.im_start, t.assistant, self.newline]

    def whole(self, text: str) -> list[int]:
        """One text segment's whole prompt, as the reference pipelines take it."""
        return self.text(text, False) + self.reply(True)


def audio_ids(codec: TextCodec, cfg: OmniConfig) -> tuple[int, int, int]:
    """``<|audio_start|>``, ``<|audio_pad|>`` (the config's ``audio_token_id``) and
    ``<|audio_end|>``."""
    return (
        codec.token_id("<|audio_start|>"),
        cfg.thinker.audio_token_id,
        codec.token_id("<|audio_end|>"),
    )
