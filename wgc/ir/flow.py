"""Flows: the per-request state machine, a small structured program over walks."""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass, field

from wgc.diagnostics.diagnostic import Span
from wgc.ir.expr import Expr, Value

MODALITIES = ("text", "image", "audio", "video", "action", "tensor")


# ---------------------------------------------------------------- conditions
@dataclass(frozen=True, slots=True)
class RequestPred:
    """`request.wants(m)` or `request.has(m)`."""

    pred: str  # "wants" | "has"
    modality: str
    span: Span = field(compare=False)


@dataclass(frozen=True, slots=True)
class OptionCond:
    name: str
    span: Span = field(compare=False)


@dataclass(frozen=True, slots=True)
class OptionCmp:
    """`option.NAME OP VALUE`: compares the request's option with a compile-time value
    (``value`` None when it did not evaluate: reported by the builder)."""

    name: str
    op: str  # == != < <= > >=
    value: Value | None
    span: Span = field(compare=False)
    value_span: Span | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class CountCmp:
    """`request.count(m) OP N`: the number of input segments of modality ``modality``."""

    modality: str
    op: str
    value: int | None
    span: Span = field(compare=False)
    value_span: Span | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Placed:
    node: str
    span: Span = field(compare=False)


@dataclass(frozen=True, slots=True)
class ParamCmp:
    """A `param` in a condition: ``NAME`` (a bool param, ``op`` None) or ``NAME OP VALUE``.
    Placement-time, like `Placed`: lowering folds it with the placement's param values."""

    name: str
    op: str | None
    value: Value | None
    span: Span = field(compare=False)
    value_span: Span | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Const:
    value: bool
    span: Span = field(compare=False)


@dataclass(frozen=True, slots=True)
class Not:
    operand: Cond
    span: Span = field(compare=False)


@dataclass(frozen=True, slots=True)
class BoolOp:
    op: str  # "and" | "or"
    left: Cond
    right: Cond
    span: Span = field(compare=False)


Cond = RequestPred | OptionCond | OptionCmp | CountCmp | Placed | ParamCmp | Const | Not | BoolOp


def cond_atoms(c: Cond) -> Iterator[Cond]:
    """Every leaf of a condition, left to right."""
    if isinstance(c, Not):
        yield from cond_atoms(c.operand)
    elif isinstance(c, BoolOp):
        yield from cond_atoms(c.left)
        yield from cond_atoms(c.right)
    else:
        yield c


# ---------------------------------------------------------------- walk arguments
class ArgKind(enum.Enum):
    NAME = "name"  # a bare name: the `for` variable, or a channel persisted earlier
    OPTION = "option"  # `option.NAME`
    SEGMENT_FIELD = "segment_field"  # `seg.FIELD` of the `for` variable
    FIRST = "first"  # `request.first(m)`: the first input segment of modality ``name``


@dataclass(frozen=True, slots=True)
class FArg:
    """`param = value` in a walk call; `param` alone means `param = param`."""

    param: str
    kind: ArgKind
    name: str  # the name, option name, or segment variable
    attr: str | None  # the field for SEGMENT_FIELD
    span: Span = field(compare=False)


# ---------------------------------------------------------------- statements
@dataclass(frozen=True, slots=True)
class WalkCall:
    walk: str
    args: tuple[FArg, ...]
    span: Span = field(compare=False)
    # for a call written in a subflow: the subflow calls that brought it here, innermost first
    via: tuple[tuple[str, Span], ...] = field(default=(), compare=False)


@dataclass(frozen=True, slots=True)
class FBlock:
    stmts: tuple[FStmt, ...]
    span: Span = field(compare=False)


@dataclass(frozen=True, slots=True)
class For:
    """`for VAR in request.inputs { ... }`: once per input segment, in order (at least once)."""

    var: str
    body: FBlock
    span: Span = field(compare=False)


@dataclass(frozen=True, slots=True)
class Arm:
    patterns: tuple[str, ...]  # modalities, or ("_",) for the default arm
    body: FBlock
    span: Span = field(compare=False)


@dataclass(frozen=True, slots=True)
class Match:
    """`match VAR.modality { text => ..., image | video => ..., _ => ... }`."""

    var: str
    arms: tuple[Arm, ...]
    span: Span = field(compare=False)


@dataclass(frozen=True, slots=True)
class OptionArm:
    """One arm of `match option.NAME`: ``values`` (literals), or the `_` arm (``default``)."""

    values: tuple[Value, ...]
    default: bool
    body: FBlock
    span: Span = field(compare=False)


@dataclass(frozen=True, slots=True)
class OptionMatch:
    """`match option.NAME { "a" | "b" => ..., _ => ... }`: the first arm naming the request's
    value of the option, else `_`, else nothing."""

    option: str
    arms: tuple[OptionArm, ...]
    span: Span = field(compare=False)


@dataclass(frozen=True, slots=True)
class If:
    cond: Cond
    then: FBlock
    else_: FBlock | None
    span: Span = field(compare=False)


@dataclass(frozen=True, slots=True)
class Repeat:
    count: Expr
    body: FBlock
    span: Span = field(compare=False)


@dataclass(frozen=True, slots=True)
class Fail:
    """`fail "message"`: end the request with an error (this path persists nothing further)."""

    message: str
    span: Span = field(compare=False)


FStmt = WalkCall | For | Match | OptionMatch | If | Repeat | Fail


class FlowKind(enum.Enum):
    ALWAYS = "always"  # `flow NAME { ... }`
    WHEN = "when"  # `flow NAME when COND { ... }`: runs beside the others when COND holds
    ON_STREAM = "on_stream"  # `flow NAME on STREAM { ... }`: once per chunk of STREAM
    EXTERN = "extern"  # `flow NAME = "module:function"`: a Python generator


@dataclass(frozen=True, slots=True)
class Flow:
    name: str
    kind: FlowKind
    when: Cond | None
    on_stream: str | None
    extern: str | None
    body: FBlock | None
    span: Span = field(compare=False)
    trigger_span: Span | None = field(default=None, compare=False)
    name_span: Span | None = field(default=None, compare=False)  # the declared name's token
    # the body as written, with its subflow calls (``body`` has them expanded)
    written: FBlock | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Subflow:
    """`subflow NAME(P, ...) { ... }`: a named flow fragment. The builder expands every call of
    it in place (its parameters replaced by the call's arguments), so passes, lowering and the
    interpreter see only the expanded flows; ``called`` says whether any flow calls it."""

    name: str
    params: tuple[str, ...]
    body: FBlock
    span: Span = field(compare=False)
    name_span: Span | None = field(default=None, compare=False)
    called: bool = field(default=False, compare=False)


def iter_fstmts(block: FBlock) -> Iterator[FStmt]:
    """Every flow statement in ``block``, depth first in source order."""
    for s in block.stmts:
        yield s
        if isinstance(s, For | Repeat):
            yield from iter_fstmts(s.body)
        elif isinstance(s, Match | OptionMatch):
            for a in s.arms:
                yield from iter_fstmts(a.body)
        elif isinstance(s, If):
            yield from iter_fstmts(s.then)
            if s.else_ is not None:
                yield from iter_fstmts(s.else_)
