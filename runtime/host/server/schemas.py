"""The request bodies, as pydantic models: FastAPI validates them and derives the OpenAPI schema
(``/openapi.json``, browsable at ``/docs``) from them.

The OpenAI bodies accept the fields the OpenAI clients send; those that mean nothing to a wgc
model (``temperature``, ``max_tokens``, ``voice`` ...) are accepted and ignored. Every body also
takes the wgc extras (``options``, ``seed``, ``deadline``), which the OpenAI client passes with
``extra_body``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field


class Extras(BaseModel, extra="allow"):
    """What every route takes beside its own fields (and the fields it ignores)."""

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


# ---------------------------------------------------------------- chat


class ChatMessage(BaseModel, extra="allow"):
    role: str
    content: str | list[dict[str, Any]] | None = None


class AudioParams(BaseModel, extra="allow"):
    """``voice`` is accepted and ignored (the model decides)."""

    format: str = "wav"


class StreamOptions(BaseModel, extra="allow"):
    include_usage: bool = False


class ChatRequest(Extras):
    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    modalities: list[str] | None = None
    audio: AudioParams | None = None
    stream_options: StreamOptions | None = None


# ---------------------------------------------------------------- speech and images


class SpeechRequest(Extras):
    """``voice`` and ``speed`` are accepted and ignored (the model decides)."""

    model: str | None = None
    input: str = Field(min_length=1)
    response_format: str = "wav"


class ImageRequest(Extras):
    model: str | None = None
    prompt: str = Field(min_length=1)
    n: int = Field(1, ge=1, le=8)
    size: str | None = None
    response_format: str | None = None
