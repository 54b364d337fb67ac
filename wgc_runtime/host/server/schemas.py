"""The request bodies, as pydantic models: FastAPI validates them and derives the OpenAPI schema
(``/openapi.json``, browsable at ``/docs``) from them.

The OpenAI bodies declare every documented field of their routes; `openai_params` honours each
(mapped to the model's option of the same meaning) or refuses it, and a field no route
documents is refused (400 naming it: extra fields are forbidden). Every body also takes the wgc
extras (``options``, ``seed``, ``deadline``), which the OpenAI client passes with
``extra_body``. A body that does not validate is every problem at once, each named like the
door's (`validation_problems`: ``inputs[0].modality``, ``stream``, ``body`` for what is not a JSON
object).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field

from wgc_runtime.core.conductor.door import Problem

# how pydantic names the member of a union a value failed to be (not a field of the body)
_UNION_TAGS = {"str", "int", "float", "bool", "none", "list", "dict", "any"}


class Extras(BaseModel, extra="forbid"):
    """What every route takes beside its own fields."""

    options: dict[str, Any] = Field(
        default_factory=dict, description="Request options, as the model declares them."
    )
    seed: int | None = Field(
        None, description="What the nodes seed their randomness from (default: the server's)."
    )
    deadline: float | None = Field(
        None, gt=0, description="Seconds the request may take; past it: 504 (or an error event)."
    )


# ---------------------------------------------------------------- native


class SegmentIn(BaseModel):
    """One input segment: ``data`` is text, a number, nested lists (of ``dtype`` when given),
    an encoded tensor ``{"dtype", "shape", "b64"}`` or a ``data:`` URL (an image or a WAV);
    ``fields`` are what a flow reads as ``seg.NAME``, encoded the same way."""

    modality: str = Field(min_length=1)
    data: Any = None
    dtype: str | None = None
    fields: dict[str, Any] = Field(default_factory=dict)


class NativeRequest(Extras):
    """A request to any model: segments in order, the wanted modalities, options."""

    inputs: list[SegmentIn] = Field(default_factory=list)
    want: list[str] = Field(default_factory=list)
    stream: Literal["sse", "ndjson"] | bool = Field(
        False, description="Stream outputs as they are emitted: `sse` (or true), `ndjson`."
    )
    trace: bool = Field(False, description="Also report every walk's start and finish.")
    session: str | None = Field(
        None,
        description="The session this request continues: its KV is kept between requests "
        "(the placement's `sessions:`), so a turn prefills only what the session does not hold.",
    )


# ---------------------------------------------------------------- chat


class ChatMessage(BaseModel, extra="allow"):
    role: str
    content: str | list[dict[str, Any]] | None = None


class AudioParams(BaseModel, extra="forbid"):
    """``voice``: the model's ``voice`` (or ``speaker``) option."""

    format: str = "wav"
    voice: str | None = None


class StreamOptions(BaseModel, extra="allow"):
    include_usage: bool = False


class ChatRequest(Extras):
    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    modalities: list[str] | None = None
    audio: AudioParams | None = None
    stream_options: StreamOptions | None = None
    n: int = Field(1, ge=1, le=8, description="Samples: n requests, seeded seed, seed + 1 ...")
    session: str | None = Field(
        None,
        description="The session this request continues: its KV is kept between requests "
        "(the placement's `sessions:`), so a turn prefills only what the session does not hold.",
    )
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    user: str | None = Field(None, description="Who asks: written in the request's log line.")
    response_format: dict[str, Any] | None = None
    # what no wgc model does: refused unless the OpenAI default (`openai_params.NEVER`)
    stop: str | list[str] | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, Any] | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    functions: list[Any] | None = None
    function_call: Any = None
    parallel_tool_calls: bool | None = None
    prediction: Any = None
    web_search_options: Any = None
    reasoning_effort: str | None = None
    store: bool | None = None
    metadata: dict[str, Any] | None = None
    service_tier: str | None = None


# ---------------------------------------------------------------- speech and images


class SpeechRequest(Extras):
    """``voice`` sets the model's ``voice`` (or ``speaker``) option, ``speed`` its ``speed``."""

    model: str | None = None
    input: str = Field(min_length=1)
    voice: str | None = None
    response_format: str = "wav"
    speed: float | None = None
    instructions: str | None = None
    stream_format: str | None = None


class ImageRequest(Extras):
    model: str | None = None
    prompt: str = Field(min_length=1)
    n: int = Field(1, ge=1, le=8)
    size: str | None = None
    response_format: str | None = None
    user: str | None = None
    quality: str | None = None
    style: str | None = None
    background: str | None = None
    moderation: str | None = None
    output_format: str | None = None
    output_compression: int | None = None


# the fields each route reads itself
_OWN = ("options", "seed", "deadline", "model", "messages", "input", "prompt", "stream")
_OWN += ("session",)
_OWN += ("stream_options", "modalities", "audio", "n", "user", "response_format")


def openai_fields(body: BaseModel, *names: str) -> dict[str, Any]:
    """The OpenAI fields of ``body`` that `openai_params` maps or refuses (all but ``names``),
    as given."""
    skip = {*_OWN, *names}
    return {k: v for k, v in body.model_dump().items() if k not in skip}


# ---------------------------------------------------------------- errors


def validation_problems(errors: Iterable[Mapping[str, Any]]) -> list[Problem]:
    """Pydantic's errors as the door's problems: the field as ``a.b[0].c`` (no ``body``
    prefix, no union members), one problem per field (a value no member of a union takes says
    what each would need), and a body that is not JSON said so, with where it breaks."""
    out: dict[str, list[str]] = {}
    for e in errors:
        loc = list(e.get("loc", ()))[1:]  # the first is where: "body"
        kind = e.get("type", "")
        if kind == "json_invalid":
            why = (e.get("ctx") or {}).get("error", "")
            at = f" at character {loc[0]}" if loc and isinstance(loc[0], int) else ""
            out.setdefault("body", []).append(f"not valid JSON{at}: {why}".rstrip(": "))
            continue
        field = ""
        for part in loc:
            if isinstance(part, int):
                field += f"[{part}]"
            elif "[" in str(part) or str(part) in _UNION_TAGS:
                continue
            else:
                field += f".{part}" if field else str(part)
        message = str(e.get("msg", ""))
        if not field and kind == "missing":
            message = "no body: send a JSON object"
        messages = out.setdefault(field or "body", [])
        if message not in messages:
            messages.append(message)
    return [Problem(f, "; or: ".join(ms)) for f, ms in out.items()]
