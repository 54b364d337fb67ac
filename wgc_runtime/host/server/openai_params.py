"""The OpenAI fields of the routes served: each honoured, or refused with a 400 naming it.

A field is honoured by passing it to the model's option of the same meaning, when the model
declares one (`OPTION_FOR`: ``max_tokens`` and ``max_completion_tokens`` set ``max_tokens``;
``temperature``, ``top_p``, ``speed``, ``language`` set the option of their name; ``voice``
sets ``voice``, else ``speaker``), then checked at the door like any option (its type, its
choices, its bounds: `wgc_runtime.core.conductor.bounds`); a model without such an option
answers 400 naming the field. What a wgc model never does (``logprobs``, ``tools``, ``stop``
...) is refused when a request asks for it, and accepted when it is the OpenAI default
(``logprobs: false``, ``presence_penalty: 0`` ...), so the fields a client always sends still
pass. A field no route documents is refused too (the bodies forbid extra fields, `schemas`).

``model`` is checked against the served model's names (its name, and ``NAME@PLACEMENT``:
``mymodel``, ``mymodel@cpu``): any other answers 404 (``model_not_found``), as OpenAI does.
``finish_reason`` is ``length`` when the text outputs reached the request's token limit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wgc_runtime.core.conductor.door import Problem
from wgc_runtime.host.server.calls import HttpError, Server

# OpenAI field -> the model options that mean the same, in order of preference
OPTION_FOR: dict[str, tuple[str, ...]] = {
    "max_tokens": ("max_tokens",),
    "max_completion_tokens": ("max_tokens",),
    "temperature": ("temperature",),
    "top_p": ("top_p",),
    "voice": ("voice", "speaker"),
    "speed": ("speed",),
    "language": ("language",),
}

# fields a wgc model cannot honour, with the value that asks for nothing (None: any value asks)
NEVER: dict[str, tuple[Any, ...]] = {
    "stop": (None, [], ""),
    "presence_penalty": (None, 0, 0.0),
    "frequency_penalty": (None, 0, 0.0),
    "logit_bias": (None, {}),
    "logprobs": (None, False),
    "top_logprobs": (None, 0),
    "tools": (None, []),
    "tool_choice": (None, "none", "auto"),
    "functions": (None, []),
    "function_call": (None, "none", "auto"),
    "parallel_tool_calls": (None, True, False),
    "prediction": (None,),
    "web_search_options": (None,),
    "reasoning_effort": (None,),
    "store": (None, False),
    "metadata": (None, {}),
    "service_tier": (None, "auto", "default"),
    "instructions": (None, ""),
    "stream_format": (None, "audio"),
    "quality": (None, "auto", "standard"),
    "style": (None,),
    "background": (None, "auto"),
    "moderation": (None, "auto"),
    "output_format": (None, "png"),
    "output_compression": (None, 100),
    "size": (None, "auto"),  # the model's image size is its own (a placement param)
}


def bad(field: str, why: str, status: int = 400, code: str = "unsupported_field") -> HttpError:
    return HttpError(status, f"{field}: {why}", code=code, problems=[Problem(field, why)])


def check_model(server: Server, name: str | None) -> None:
    """404 unless ``name`` (when given) is the served model."""
    info = server.info
    names = (info.name, f"{info.name}@{info.placement}")
    if name is not None and name not in names:
        served = ", ".join(f"`{n}`" for n in names)
        raise bad(
            "model",
            f"the model `{name}` does not exist here; this server serves {served}",
            404,
            "model_not_found",
        )


def _same(value: Any, ok: Any) -> bool:
    return value == ok and isinstance(value, bool) == isinstance(ok, bool)


def options_of(server: Server, fields: Mapping[str, Any], given: Mapping[str, Any]) -> Options:
    """``given`` (the request's ``options``) with the OpenAI ``fields`` mapped onto the model's
    options; a field the model cannot honour is a 400 naming it."""
    declared = {o.name: o for o in server.spec.options}
    out = Options(given)
    for name, value in fields.items():
        if name in NEVER:
            if not any(_same(value, ok) for ok in NEVER[name]):
                raise bad(name, f"`{server.info.name}` cannot honour `{name}` ({value!r})")
            continue
        if value is None or name not in OPTION_FOR:
            continue
        option = next((declared[o] for o in OPTION_FOR[name] if o in declared), None)
        if option is None:
            if name == "speed" and value == 1.0:
                continue  # the default speed asks for nothing
            raise bad(name, f"`{server.info.name}` has no option for `{name}`")
        if option.choices and value not in option.choices:
            listed = ", ".join(f"`{c}`" for c in option.choices)
            raise bad(name, f"`{value}` is not one of {listed}", code="invalid_value")
        if option.name in out and out[option.name] != value:
            raise bad(name, f"`options.{option.name}` says otherwise ({out[option.name]!r})")
        out[option.name] = value
        out.fields[option.name] = name
    return out


class Options(dict):
    """A request's options, and which OpenAI field set each (``fields``: option -> field)."""

    def __init__(self, given: Mapping[str, Any]) -> None:
        super().__init__(given)
        self.fields: dict[str, str] = {}

    def named(self, exc: HttpError) -> HttpError:
        """``exc`` (the door's refusal) with each problem of an option set by an OpenAI field
        named by that field (``max_tokens``, not ``options.max_tokens``)."""
        if not self.fields or not exc.problems:
            return exc
        problems = [
            Problem(self.fields.get(p.field.removeprefix("options."), p.field), p.message)
            for p in exc.problems
        ]
        message = "; ".join(str(p) for p in problems)
        return HttpError(exc.status, message, code=exc.code, problems=problems, headers=exc.headers)


def token_limit(server: Server, options: Mapping[str, Any]) -> int | None:
    """The request's text token limit (its ``max_tokens`` option, else the default)."""
    for o in server.spec.options:
        if o.name == "max_tokens":
            value = options.get("max_tokens", o.default)
            return value if isinstance(value, int) else None
    return None


def finish_reason(server: Server, options: Mapping[str, Any], tokens: int) -> str:
    limit = token_limit(server, options)
    return "length" if limit is not None and tokens >= limit else "stop"
