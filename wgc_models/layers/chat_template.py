"""A checkpoint's own prompt format: its ``tokenizer.json`` (the `tokenizers` package) and its
chat template rendered as transformers' ``apply_chat_template`` renders it.

The template is the checkpoint's: ``chat_template.jinja`` beside the weights (what
transformers writes today), else ``tokenizer_config.json``'s ``chat_template`` (a string, or a
list of named templates of which ``default`` is used). It is untrusted text from the Hub, so it
runs in Jinja2's immutable sandbox, set up as transformers sets it up (blocks trimmed, leading
whitespace of a block stripped, ``break`` / ``continue``, a ``tojson`` filter that keeps
non-ASCII text, ``raise_exception`` and ``strftime_now``), with the tokenizer's special tokens
(``bos_token``, ``eos_token``, …) as variables. The rendered text is tokenized without adding
special tokens (the template wrote them), as ``apply_chat_template(tokenize=True)`` does.

`PromptFormat.ids` turns a request's text into the model's prompt ids: through the template as
one user message (with the assistant's turn opened) when the checkpoint has one, else the
tokenizer's own encoding with its special tokens (a base model's BOS).
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any, cast

from tokenizers import Tokenizer

_SPECIAL = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token")


class TemplateError(ValueError):
    """A chat template that does not parse or fails as it renders (its own message)."""


def _raise(message: str) -> None:
    raise TemplateError(message)


def _tojson(value: Any, indent: int | None = None, **kwargs: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=indent, **kwargs)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _content(token: object) -> str | None:
    """A special token as ``tokenizer_config.json`` writes it (a string or an added-token
    record)."""
    if isinstance(token, dict):
        token = cast(dict[str, object], token).get("content")
    return token if isinstance(token, str) else None


class ChatTemplate:
    """One compiled chat template and the special tokens it may name."""

    def __init__(self, source: str, special: dict[str, str] | None = None):
        import jinja2
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
        )
        # jinja types these tables by their default entries (or leaves them unknown)
        filters = cast(dict[str, Any], env.filters)  # pyright: ignore[reportUnknownMemberType]
        names = cast(dict[str, Any], env.globals)  # pyright: ignore[reportUnknownMemberType]
        filters["tojson"] = _tojson
        names["raise_exception"] = _raise
        names["strftime_now"] = _strftime_now
        try:
            self._template = env.from_string(source)
        except jinja2.TemplateError as exc:
            raise TemplateError(f"the chat template does not parse: {exc}") from exc
        self.special = dict(special or {})

    @classmethod
    def from_folder(cls, path: str | Path) -> ChatTemplate | None:
        """The checkpoint's template (module docstring), or None when it has none."""
        folder = Path(path)
        config: dict[str, Any] = {}
        if (folder / "tokenizer_config.json").is_file():
            config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
        special = {k: v for k in _SPECIAL if (v := _content(config.get(k))) is not None}
        if (folder / "chat_template.jinja").is_file():
            return cls((folder / "chat_template.jinja").read_text(encoding="utf-8"), special)
        source: object = config.get("chat_template")
        if isinstance(source, list):  # named templates
            listed = cast(list[object], source)
            entries = [cast(dict[str, object], t) for t in listed if isinstance(t, dict)]
            named = {t.get("name"): t.get("template") for t in entries}
            source = named.get("default")
        return cls(source, special) if isinstance(source, str) else None

    def render(self, messages: list[dict[str, Any]], *, add_generation_prompt: bool = True) -> str:
        import jinja2

        try:
            return self._template.render(
                messages=messages,
                add_generation_prompt=add_generation_prompt,
                tools=None,
                documents=None,
                **self.special,
            )
        except jinja2.TemplateError as exc:
            raise TemplateError(f"the chat template fails: {exc}") from exc


class PromptFormat:
    """A checkpoint's tokenizer and chat template: text → prompt ids, ids → text."""

    def __init__(self, tokenizer: Tokenizer, template: ChatTemplate | None):
        self.tokenizer, self.template = tokenizer, template

    @classmethod
    def from_folder(cls, path: str | Path) -> PromptFormat:
        folder = Path(path)
        file = folder / "tokenizer.json"
        if not file.is_file():
            raise FileNotFoundError(f"checkpoint `{folder}` has no `tokenizer.json`")
        return cls(Tokenizer.from_file(str(file)), ChatTemplate.from_folder(folder))

    def ids(self, text: str) -> list[int]:
        """The prompt ids of one user message (module docstring)."""
        if self.template is None:
            return self.tokenizer.encode(text, add_special_tokens=True).ids
        rendered = self.template.render([{"role": "user", "content": text}])
        return self.tokenizer.encode(rendered, add_special_tokens=False).ids

    def text(self, ids: list[int]) -> str:
        """The text of generated ids, special tokens left out."""
        return self.tokenizer.decode(ids, skip_special_tokens=True)
