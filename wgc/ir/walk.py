"""Walks: calls, `par`, loops, `emit`, `persist`, and the resolved channel edges of each walk.

The builder resolves every channel read once (`wgc.ir.resolve`) and stores the result here as
explicit `Edge`s, each with an `EdgeKind`; reads that could not be resolved are kept as
`Issue`s for the verifier passes to report.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass, field

from wgc.diagnostics.diagnostic import Span
from wgc.ir.expr import Expr
from wgc.ir.types import TensorType


@dataclass(frozen=True, slots=True)
class Bind:
    """In a call's reads: port ``port`` reads channel ``channel``.
    In its writes: channel ``channel`` is bound from port ``port``."""

    port: str
    channel: str
    span: Span = field(compare=False)


@dataclass(frozen=True, slots=True)
class Call:
    id: int  # unique within the walk, in source order
    node: str
    reads: tuple[Bind, ...]
    writes: tuple[Bind, ...]
    loops: tuple[str, ...]  # enclosing loops, outermost first
    span: Span = field(compare=False)
    name_span: Span | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Block:
    stmts: tuple[Stmt, ...]
    span: Span = field(compare=False)


@dataclass(frozen=True, slots=True)
class Par:
    branches: tuple[Block, ...]
    span: Span = field(compare=False)


@dataclass(frozen=True, slots=True)
class Named:
    """A channel name written somewhere (yield lists, `until`), with its own span."""

    name: str
    span: Span = field(compare=False)


@dataclass(frozen=True, slots=True)
class Loop:
    name: str
    max_expr: Expr
    max: int | None  # None when `max_expr` is not a static integer (WG303)
    until: Named | None
    eager: bool
    speculate: bool  # False under `nospeculate`
    body: Block
    yield_last: tuple[Named, ...]
    yield_all: tuple[Named, ...]
    span: Span = field(compare=False)
    header_span: Span | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Emit:
    channel: str
    modality: str
    span: Span = field(compare=False)


@dataclass(frozen=True, slots=True)
class Persist:
    channel: str
    span: Span = field(compare=False)


Stmt = Call | Par | Loop | Emit | Persist


@dataclass(frozen=True, slots=True)
class WalkInput:
    name: str
    optional: bool  # `name?`: may arrive as a bare signal
    type: TensorType | None  # declared type, if written
    type_ref: str | None
    span: Span = field(compare=False)


class EndKind(enum.Enum):
    CALL = "call"  # a port of a call (``call``, ``port``)
    INPUT = "input"  # a walk input (``name``)
    CLIENT = "client"  # `emit ... as MODALITY` (``name`` = modality)
    PERSIST = "persist"  # the request's persisted store (``name`` = channel)
    STREAM = "stream"  # a declared stream (``name``)
    UNTIL = "until"  # a loop's stop condition (``name`` = loop)


@dataclass(frozen=True, slots=True)
class End:
    kind: EndKind
    call: int | None = None
    port: str | None = None
    name: str | None = None

    def __str__(self) -> str:
        if self.kind is EndKind.CALL:
            return f"#{self.call}.{self.port}"
        return f"{self.kind.value}:{self.name}"


class EdgeKind(enum.Enum):
    INPUT = "input"  # walk input -> port, same scope
    INTERNAL = "internal"  # producer -> consumer in the same iteration / scope
    LOOP_INIT = "loop_init"  # value before the loop -> iteration 0 of a loop-carried read
    LOOP_CARRIED = "loop_carried"  # iteration i's binding -> iteration i+1's read
    LOOP_INVARIANT = "loop_invariant"  # bound before the loop, delivered once, read every iteration
    TERMINAL = "terminal"  # `yield last`: the final iteration's value -> after the loop
    ACCUMULATED = "accumulated"  # `yield all`: every iteration's value, stacked -> after the loop
    EMITTED = "emitted"  # -> the client
    PERSISTED = "persisted"  # -> the request's store, for later walks
    STREAMED = "streamed"  # producer port -> stream, or stream -> consumer port
    UNTIL = "until"  # the loop's `stop` channel -> its loop


@dataclass(frozen=True, slots=True)
class Edge:
    kind: EdgeKind
    channel: str
    src: End
    dst: End
    loop: str | None  # the loop an iteration-scoped edge belongs to
    type: TensorType | None  # the value's type as produced (stacked for `yield all`)
    span: Span = field(compare=False)
    # when the value read is a loop's `yield last` / `yield all` but the kind does not say so
    # (an emit or persist after that loop, or a later loop's initial or invariant value):
    # TERMINAL / ACCUMULATED, and ``via_loop`` names the yielding loop. The value exists, and
    # travels, once: when that loop has ended.
    via: EdgeKind | None = None
    via_loop: str | None = None


class IssueKind(enum.Enum):
    UNBOUND = "unbound"  # read of a channel nothing binds (WG601 / WG606)
    NO_INIT = "no_init"  # loop-carried read with no value before the loop (WG605)
    LOOP_LOCAL = "loop_local"  # read after a loop of a channel the loop did not yield (WG406)
    SIBLING_READ = "sibling_read"  # a `par` branch reads a sibling's write (WG405)
    YIELD_UNBOUND = "yield_unbound"  # yield / until of a channel the body never binds (WG404/604)
    NESTED_CARRIED = "nested_carried"  # an inner loop starts from an outer loop's carried value


@dataclass(frozen=True, slots=True)
class Issue:
    kind: IssueKind
    channel: str
    span: Span = field(compare=False)
    other: Span | None = field(default=None, compare=False)  # e.g. the loop, or sibling's write
    loop: str | None = None
    reader: str = ""  # what read it: "port `x` of `N`", "emit", "persist", "yield", "until"


@dataclass(frozen=True, slots=True)
class Walk:
    name: str
    inputs: tuple[WalkInput, ...]
    body: Block
    calls: tuple[Call, ...]  # every call, indexed by `Call.id`
    loops: tuple[Loop, ...]  # every loop, outermost first in source order
    edges: tuple[Edge, ...]
    issues: tuple[Issue, ...]
    span: Span = field(compare=False)
    name_span: Span | None = field(default=None, compare=False)  # the declared name's token

    def input(self, name: str) -> WalkInput | None:
        return next((i for i in self.inputs if i.name == name), None)

    def loop(self, name: str) -> Loop | None:
        return next((lp for lp in self.loops if lp.name == name), None)


def iter_stmts(block: Block) -> Iterator[Stmt]:
    """Every statement of ``block``, depth first in source order (loops and pars included)."""
    for s in block.stmts:
        yield s
        if isinstance(s, Par):
            for b in s.branches:
                yield from iter_stmts(b)
        elif isinstance(s, Loop):
            yield from iter_stmts(s.body)
