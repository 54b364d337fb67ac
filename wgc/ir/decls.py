"""Top-level declarations: params, named types, request options, nodes and streams."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from wgc.diagnostics.diagnostic import Span
from wgc.ir.expr import Expr, Value
from wgc.ir.types import TensorType


@dataclass(frozen=True, slots=True)
class Param:
    """`param NAME = EXPR`: a compile-time constant (``value`` None if it failed to evaluate)."""

    name: str
    expr: Expr
    value: Value | None
    span: Span = field(compare=False)
    name_span: Span | None = field(default=None, compare=False)  # the declared name's token


@dataclass(frozen=True, slots=True)
class TypeAlias:
    name: str
    type: TensorType | None
    ref: str | None  # `type A = B`: the alias it names (resolved into ``type`` when known)
    span: Span = field(compare=False)
    name_span: Span | None = field(default=None, compare=False)  # the declared name's token


OPTION_TYPES = ("bool", "int", "float", "str")


@dataclass(frozen=True, slots=True)
class OptionDecl:
    """`option NAME: TYPE [in [V, ...]] = DEFAULT`: a per-request option with a declared default.

    ``choices``: the values a request may give (empty: any value of ``type``); an `int` option
    with choices is a *shape bucket* when a dim reads it. A per-mode default
    (`= match option.MODE { V => D, _ => D }`) names its selector ``default_by`` and lists
    ``by_value`` (selector value -> default); ``default`` is the `_` arm's (or, without one, the
    default for the selector's own default value)."""

    name: str
    type: str
    default: Value
    span: Span = field(compare=False)
    name_span: Span | None = field(default=None, compare=False)  # the declared name's token
    default_expr: Expr | None = field(default=None, compare=False)  # as written
    choices: tuple[Value, ...] = ()
    default_by: str | None = None
    by_value: tuple[tuple[Value, Value], ...] = ()
    # each per-mode arm's value as written
    arm_exprs: tuple[Expr, ...] = field(default=(), compare=False)
    choices_span: Span | None = field(default=None, compare=False)

    def default_for(self, values: dict[str, Value]) -> Value:
        """The default a request gets, given the options it set (``values``) and their own
        defaults: a per-mode default looks up its selector's value."""
        if self.default_by is None or self.default_by not in values:
            return self.default
        return dict(self.by_value).get(values[self.default_by], self.default)


class PortDir(enum.Enum):
    IN = "in"
    OUT = "out"


@dataclass(frozen=True, slots=True)
class Port:
    name: str
    direction: PortDir
    type: TensorType | None  # None when the type name did not resolve (see ``type_ref``)
    type_ref: str | None  # the alias name written, if any
    span: Span = field(compare=False)


class EngineKind(enum.Enum):
    STATELESS = "stateless"
    KV_CACHE = "kv_cache"


@dataclass(frozen=True, slots=True)
class Node:
    """A component. A `like` node copies its base's engine, impl and ports, then its own items
    override; ``labels`` is the node's own KV labels (for `like X { label L }`: just ``(L,)``)."""

    name: str
    engine: EngineKind
    labels: tuple[str, ...]
    impl: str | None
    inputs: tuple[Port, ...]
    outputs: tuple[Port, ...]
    config: tuple[tuple[str, Value], ...]
    like: str | None
    label: str | None
    span: Span = field(compare=False)
    label_span: Span | None = field(default=None, compare=False)
    impl_span: Span | None = field(default=None, compare=False)
    name_span: Span | None = field(default=None, compare=False)  # the declared name's token
    # `config KEY = EXPR` as written (``config`` holds the values), for lints that need names
    config_exprs: tuple[tuple[str, Expr], ...] = field(default=(), compare=False)
    # `reads option.NAME, ...`: the request options the implementation reads
    # (`CallContext.options`), with the span of each
    reads: tuple[str, ...] = ()
    read_spans: tuple[Span, ...] = field(default=(), compare=False)
    # `label L writable`: this copy writes its label of the base's pool (a draft model's own
    # sequence beside the trunk's), on the base's only rank group (`WG828`)
    writable: bool = False

    def input(self, name: str) -> Port | None:
        return next((p for p in self.inputs if p.name == name), None)

    def output(self, name: str) -> Port | None:
        return next((p for p in self.outputs if p.name == name), None)

    def port(self, name: str) -> Port | None:
        return self.input(name) or self.output(name)


class PolicyKind(enum.Enum):
    FIXED = "fixed"
    SLIDING = "sliding"
    LEFT_CONTEXT = "left_context"


POLICY_PARAMS = {
    PolicyKind.FIXED: ("k",),
    PolicyKind.SLIDING: ("window", "stride"),
    PolicyKind.LEFT_CONTEXT: ("chunk", "left"),
}


@dataclass(frozen=True, slots=True)
class PolicyArg:
    name: str | None  # None for a positional argument
    expr: Expr
    value: int | None
    span: Span = field(compare=False)


@dataclass(frozen=True, slots=True)
class ChunkPolicy:
    kind: PolicyKind
    args: tuple[PolicyArg, ...]
    span: Span = field(compare=False)

    def get(self, name: str) -> int | None:
        """The value of parameter ``name`` (named, or positional by its place), if given."""
        names = POLICY_PARAMS[self.kind]
        for i, a in enumerate(self.args):
            if a.name == name or (a.name is None and i < len(names) and names[i] == name):
                return a.value
        return None


class FinalMode(enum.Enum):
    PARTIAL = "partial"
    PAD = "pad"
    DROP = "drop"


@dataclass(frozen=True, slots=True)
class PortRef:
    node: str
    port: str
    span: Span = field(compare=False)

    def __str__(self) -> str:
        return f"{self.node}.{self.port}"


@dataclass(frozen=True, slots=True)
class Stream:
    name: str
    producer: PortRef
    consumer: PortRef
    policy: ChunkPolicy
    final: FinalMode
    after_done_continue: bool
    span: Span = field(compare=False)
    final_span: Span | None = field(default=None, compare=False)
    after_done_span: Span | None = field(default=None, compare=False)
    name_span: Span | None = field(default=None, compare=False)  # the declared name's token
    # False when the written `chunk` policy or `final` mode did not build (WG005/WG006): a
    # default stands in, and
    # checks that depend on the policy are skipped rather than reported against the stand-in
    policy_valid: bool = True
