"""Pieces of walks: the part of one walk that one rank runs (`PieceSpec`), its calls
(`CallSpec`), its sink units (`SinkSpec`) and its copies of loops (`LoopSpec`); see
`wgc_runtime.contract.spec` for how a worker runs them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from wgc_runtime.contract.spec.ports import Dest, PortIn, PortOut, Source
from wgc_runtime.contract.spec.version import OMIT_DEFAULT


@dataclass(frozen=True, slots=True, kw_only=True)
class CallSpec:
    """One call of a node in a walk; ``id`` is unique within the walk (across every rank)."""

    id: int
    node: str
    rank: int
    loops: tuple[str, ...] = ()  # enclosing loops, outermost first
    inputs: tuple[PortIn, ...] = ()
    outputs: tuple[PortOut, ...] = ()
    # the output ports the call binds to channels in the source, in the node's port order: what
    # the node must return (`CallContext.writes`)
    writes: tuple[str, ...] = ()
    pushes: tuple[str, ...] = ()  # the streams its outputs are appended to
    source: str = ""  # "file.walk:line"


@dataclass(frozen=True, slots=True, kw_only=True)
class SinkSpec:
    """An `emit` / `persist` in a loop of a value from outside the loop's iteration: a unit of
    the piece that fires once per iteration of ``loops`` (iteration 0 only from ``input.init``
    when the input is ``carried``), like a call without a node. ``id`` is unique among the
    walk's call ids; ``input`` (port ``value``) is fed like a call input; ``dest`` (``client``
    or ``persist``) gets the value with the instance's iterations. The properties let the
    executor treat it like a `CallSpec` with one input and no outputs."""

    id: int
    rank: int
    loops: tuple[str, ...] = ()
    input: PortIn
    dest: Dest
    source: str = ""

    @property
    def node(self) -> str:
        return ""

    @property
    def inputs(self) -> tuple[PortIn, ...]:
        return (self.input,)

    @property
    def outputs(self) -> tuple[PortOut, ...]:
        return ()

    @property
    def writes(self) -> tuple[str, ...]:
        return ()

    @property
    def pushes(self) -> tuple[str, ...]:
        return ()


Unit = CallSpec | SinkSpec  # what runs in a piece: a call, or a sink unit


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopSpec:
    """One rank's copy of a loop: at most ``max`` iterations, ending early when ``until`` (a
    ``bool[]`` from some rank) is true.

    ``chain``: the loop's enclosing loops, outermost first, itself last. ``calls``: this rank's
    calls in the body (nested loops included). ``body``: this rank's units directly in the body
    (calls and sink units), ``nested``: the loops directly in it; an iteration is complete when
    both have finished. ``pushes``: the streams this rank's calls in the body push to.
    ``order``: the loop's place in the walk's statement order among the units of its scope (the
    smallest unit id inside it here): stream items of one walk go in statement order."""

    name: str
    parent: str | None = None
    chain: tuple[str, ...] = ()
    max: int
    until: Source | None = None
    eager: bool = False
    speculate: bool = True
    ranks: tuple[int, ...] = ()
    calls: tuple[int, ...] = ()
    body: tuple[int, ...] = ()
    nested: tuple[str, ...] = ()
    pushes: tuple[str, ...] = ()
    order: int = 0
    yield_last: tuple[str, ...] = ()
    yield_all: tuple[str, ...] = ()
    source: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class PieceSpec:
    """The part of walk ``walk`` that rank ``rank`` runs.

    ``body`` / ``nested``: the units and loops at the walk's top level here (the piece is done
    when they all are). ``producers``: stream -> the calls here that push to it; ``consumers``:
    stream -> the calls here that take its chunks.

    The control messages (`wgc.lower.control`): ``needs_start``: the piece waits for
    `StartWalk` (else it starts on the first value carrying the walk's header);
    ``reports_done``: it sends `WalkDone` when done (else the conductor learns it from the
    walk's other messages); ``needs_release``: it leaves request state behind (else the rank
    drops the request's bookkeeping itself once the piece is done)."""

    walk: str
    rank: int
    inputs: tuple[str, ...] = ()  # walk inputs this piece reads
    loops: tuple[LoopSpec, ...] = ()
    calls: tuple[CallSpec, ...] = ()
    sinks: tuple[SinkSpec, ...] = ()
    body: tuple[int, ...] = ()
    nested: tuple[str, ...] = ()
    producers: tuple[tuple[str, tuple[int, ...]], ...] = ()
    consumers: tuple[tuple[str, tuple[int, ...]], ...] = ()
    needs_start: bool = True
    reports_done: bool = True
    needs_release: bool = True
    source: str = ""
    direct: Callable[[Any], Callable[[Any, Any], None]] | None = field(
        default=None, metadata=OMIT_DEFAULT, compare=False, repr=False
    )

    def call(self, id: int) -> CallSpec | None:
        return next((c for c in self.calls if c.id == id), None)

    def loop(self, name: str) -> LoopSpec | None:
        return next((lp for lp in self.loops if lp.name == name), None)
