"""The flow protocol: what a request looks like to a flow, and what a flow yields.

A flow body (a generator function in a generated conductor module, or an ``extern`` one named
``module:function``) takes a `Request` and yields `RunWalk` (run a walk to completion, with
arguments that are request segments, `Persisted` channels or option values) or `Fail` (end the
request with an error). The conductor resumes the generator when the walk is done. Standard
library only: generated modules import this without torch.
"""

from __future__ import annotations

import abc
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

SEED_OPTION = "wgc.seed"
"""The request option carrying a request's seed (``wgc run --seed``, ``"seed"`` over HTTP): the
entry points set it, `CallContext.seed` reads it; no declared option can have this name."""
SESSION_OPTION = "wgc.session"
"""The request option carrying a request's session id (its ``session`` field over HTTP): the
entry points set it, the ranks keep the session's KV between its requests
(`wgc_runtime.core.executor.sessions`); no declared option can have this name."""


@dataclass(frozen=True, slots=True)
class Segment:
    """One input segment of a request: a modality, its payload, and named side fields
    (``seg.goal`` in a flow reads ``field("goal")``)."""

    modality: str
    data: Any = None
    fields: tuple[tuple[str, Any], ...] = ()

    def field(self, name: str) -> Any:
        for key, value in self.fields:
            if key == name:
                return value
        raise KeyError(f"input segment ({self.modality}) has no field `{name}`")


class Request(abc.ABC):
    """What a flow reads of a request."""

    @property
    @abc.abstractmethod
    def inputs(self) -> Sequence[Segment]:
        """The input segments, in order."""

    @abc.abstractmethod
    def wants(self, modality: str) -> bool:
        """True when the client asked for output of ``modality``."""

    @abc.abstractmethod
    def has(self, modality: str) -> bool:
        """True when some input segment has ``modality``."""

    @abc.abstractmethod
    def option(self, name: str) -> Any:
        """The request's value of option ``name``, or its declared default."""

    def count(self, modality: str) -> int:
        """How many input segments have ``modality`` (`request.count(m)`)."""
        return sum(1 for s in self.inputs if s.modality == modality)

    def first(self, modality: str) -> Segment:
        """The first input segment of ``modality`` (`request.first(m)`; a compiled flow only
        asks where it knows there is one)."""
        for s in self.inputs:
            if s.modality == modality:
                return s
        raise LookupError(f"the request has no `{modality}` input segment")


@dataclass(frozen=True, slots=True)
class SimpleRequest(Request):
    """A plain `Request`: inputs, the wanted output modalities, and options over defaults."""

    segments: tuple[Segment, ...]
    outputs: frozenset[str] = frozenset()
    options: Mapping[str, Any] = field(default_factory=dict[str, Any])
    defaults: Mapping[str, Any] = field(default_factory=dict[str, Any])

    @property
    def inputs(self) -> Sequence[Segment]:
        return self.segments

    def wants(self, modality: str) -> bool:
        return modality in self.outputs

    def has(self, modality: str) -> bool:
        return any(s.modality == modality for s in self.segments)

    def option(self, name: str) -> Any:
        if name in self.options:
            return self.options[name]
        if name in self.defaults:
            return self.defaults[name]
        raise KeyError(f"unknown request option `{name}`")

    def option_values(self) -> dict[str, Any]:
        """Every option's value: the defaults with the request's values over them."""
        return {**self.defaults, **self.options}


@dataclass(frozen=True, slots=True)
class Persisted:
    """A walk argument: the channel ``name`` an earlier walk of this request persisted."""

    name: str


@dataclass(frozen=True, slots=True)
class RunWalk:
    """Run walk ``walk`` to completion; ``args`` maps walk inputs to segments, `Persisted`
    channels or option values (an optional input left out arrives as a bare signal)."""

    walk: str
    args: Mapping[str, Any] = field(default_factory=dict[str, Any])


@dataclass(frozen=True, slots=True)
class Fail:
    """End the request with an error the client sees."""

    message: str


FlowStep = RunWalk | Fail
FlowGen = Generator[FlowStep, None, None]
