"""Requests in, outputs out: what the reference interpreter takes and returns.

A request is a `wgc_runtime.contract.spec.SimpleRequest` (input segments, wanted output modalities,
options over the model's declared defaults); `make_request` builds one for a model. The result
is an `Outputs`: every emitted value with the flow, walk, modality, channel and loop iterations
that produced it, and the request's error, if it failed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from wgc.ir.model import Model
from wgc_runtime.contract.flow import Segment, SimpleRequest


def segment(modality: str, data: Any = None, **fields: Any) -> Segment:
    """An input segment; ``fields`` are what a flow reads as ``seg.NAME``."""
    return Segment(modality, data, tuple(fields.items()))


def make_request(
    model: Model,
    inputs: Iterable[Segment],
    want: Iterable[str] = (),
    options: Mapping[str, Any] | None = None,
) -> SimpleRequest:
    """A request for ``model``: options default to the model's `option` declarations.

    Options the model does not declare are kept and handed to nodes (`CallContext.options`);
    the examples' toy nodes read a few (`eos_after`, `talker_tail`).
    """
    defaults = model.option_defaults(options)  # per-mode defaults follow their selector
    return SimpleRequest(tuple(inputs), frozenset(want), dict(options or {}), defaults)


@dataclass(frozen=True, slots=True)
class Emitted:
    """One `emit`: ``iteration`` has one entry per enclosing loop of the `emit`."""

    flow: str
    walk: str
    modality: str
    channel: str
    value: torch.Tensor | None
    iteration: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class RequestError:
    """Why a request failed: a `fail` in a flow, a node that raised, a stream misuse, a
    deadlock. ``node`` / ``walk`` / ``flow`` name where, when known."""

    kind: str  # fail | node | output | stream | deadlock | flow | internal
    message: str
    flow: str | None = None
    walk: str | None = None
    node: str | None = None

    def __str__(self) -> str:
        return self.message


@dataclass
class Outputs:
    emitted: list[Emitted] = field(default_factory=list)
    error: RequestError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def by_key(self) -> dict[tuple[str, str, str], list[torch.Tensor | None]]:
        """Emitted values per (flow, walk, modality), in order: the comparison key between the
        interpreter and the compiled runtime (emits of different flows interleave by timing)."""
        out: dict[tuple[str, str, str], list[torch.Tensor | None]] = {}
        for e in self.emitted:
            out.setdefault((e.flow, e.walk, e.modality), []).append(e.value)
        return out

    def of(self, modality: str) -> list[torch.Tensor | None]:
        return [e.value for e in self.emitted if e.modality == modality]


def same_outputs(a: Outputs, b: Outputs) -> bool:
    """Exact equality of two results (errors by kind and message, tensors bit for bit)."""
    if (a.error and (a.error.kind, a.error.message)) != (
        b.error and (b.error.kind, b.error.message)
    ):
        return False
    ka, kb = a.by_key(), b.by_key()
    if ka.keys() != kb.keys():
        return False
    for key, xs in ka.items():
        ys = kb[key]
        if len(xs) != len(ys):
            return False
        for x, y in zip(xs, ys, strict=True):
            if (x is None) != (y is None):
                return False
            if (
                x is not None
                and y is not None
                and (x.dtype != y.dtype or x.shape != y.shape or not torch.equal(x, y))
            ):
                return False
    return True


class RequestFailed(Exception):
    """Raised inside the interpreter to end the request; carries the `RequestError`."""

    def __init__(self, error: RequestError):
        super().__init__(error.message)
        self.error = error
