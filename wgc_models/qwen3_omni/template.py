"""The Thinker's prompt from the checkpoint's own chat template.

A Qwen3-Omni folder ships its chat template (``chat_template.jinja``, or ``chat_template`` in
``tokenizer_config.json``); `wgc_models.layers.chat_template` renders it as transformers'
``apply_chat_template`` does (Jinja2's immutable sandbox, ``messages`` and
``add_generation_prompt``, no ``tools``). The Thinker reads a request a segment at a time
(text, audio, text, …, then the reply), so the template is rendered once, at load, on one user
turn whose parts are marker texts and an audio part, and cut at the markers into the pieces a
segment needs:

* **open**: what comes before the turn's first part (``<|im_start|>user\\n``, and whatever
  system turn the template writes by default);
* **audio**: what an audio part renders to (``<|audio_start|><|audio_pad|><|audio_end|>``),
  its one ``<|audio_pad|>`` id repeated once per encoder frame, as the processor expands it;
* **reply**: what follows the last part with the assistant's turn opened
  (``<|im_end|>\\n<|im_start|>assistant\\n``).

A text part is its text as it is. The cut is checked against whole renders (one text part;
one audio part; two text parts), so a template that does not render a user turn part by part
(one that trims or rewrites the text, or writes something between parts) is refused at load
(``WG880``) rather than prompted differently from transformers. A checkpoint with no
template, and the tiny random model, keep the built-in Qwen chat layout (`prompt.ChatPrompt`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wgc_models.layers.chat_template import ChatTemplate, TemplateError
from wgc_models.layers.tokenizer import TextCodec
from wgc_models.qwen3_omni.omni_config import OmniTokens
from wgc_models.qwen3_omni.prompt import ChatPrompt
from wgc_runtime.contract.node import NodeError

__all__ = ["TemplatePrompt", "chat_prompt"]

_MARKS = ("\u2063wgc-part-a\u2063", "\u2063wgc-part-b\u2063")  # texts no template writes


def _text(text: str) -> dict[str, str]:
    return {"type": "text", "text": text}


_AUDIO = {"type": "audio", "audio": "audio"}


class TemplatePrompt:
    """The Thinker's ids for one request's passes, from a chat template (module docstring);
    the same calls as `prompt.ChatPrompt`."""

    def __init__(self, template: ChatTemplate, codec: TextCodec, audio_pad: int):
        self.codec = codec
        a, b = _MARKS

        def render(*parts: dict[str, str]) -> str:
            return template.render([{"role": "user", "content": list(parts)}])

        whole = render(_text(a), _AUDIO, _text(b))
        if whole.count(a) != 1 or whole.count(b) != 1:
            raise TemplateError("the chat template does not write a user turn's text parts")
        opening, rest = whole.split(a)
        audio, reply = rest.split(b)
        wants = {
            "one text part": (render(_text(a)), opening + a + reply),
            "one audio part": (render(_AUDIO), opening + audio + reply),
            "two text parts": (render(_text(a), _text(b)), opening + a + b + reply),
        }
        for what, (rendered, pieced) in wants.items():
            if rendered != pieced:
                raise TemplateError(
                    f"the chat template does not render a user turn part by part ({what}: "
                    f"{rendered!r}, pieced together {pieced!r})"
                )
        self.opening, self.closing = codec.encode(opening), codec.encode(reply)
        ids = codec.encode(audio)
        if ids.count(audio_pad) != 1:
            raise TemplateError(
                f"the chat template's audio part {audio!r} holds {ids.count(audio_pad)} "
                f"audio placeholders (`audio_token_id` {audio_pad}), not one"
            )
        at = ids.index(audio_pad)
        self.before, self.after = ids[:at], ids[at + 1 :]
        self.audio_pad = audio_pad

    def _open(self, opened: bool) -> list[int]:
        return [] if opened else list(self.opening)

    def text(self, text: str, opened: bool) -> list[int]:
        return [*self._open(opened), *self.codec.encode(text)]

    def audio(self, frames: int, opened: bool) -> list[int]:
        return [*self._open(opened), *self.before, *[self.audio_pad] * frames, *self.after]

    def reply(self, opened: bool) -> list[int]:
        return [*self._open(opened), *self.closing]

    def whole(self, text: str) -> list[int]:
        """One text segment's whole prompt, as the reference pipelines take it."""
        return self.text(text, False) + self.reply(True)


def chat_prompt(
    config: Mapping[str, Any], codec: TextCodec, tokens: OmniTokens, audio: tuple[int, int, int]
) -> TemplatePrompt | ChatPrompt:
    """The checkpoint's chat template when its folder has one, else the built-in layout."""
    path = str(config.get("checkpoint") or "")
    try:
        template = ChatTemplate.from_folder(path) if path else None
        if template is None:
            return ChatPrompt(codec, tokens, audio)
        return TemplatePrompt(template, codec, audio[1])
    except (TemplateError, ValueError) as exc:
        raise NodeError(f"WG880: checkpoint `{path}`: {exc}") from exc
