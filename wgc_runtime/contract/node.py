"""The node interface: what a node implementation (`impl "module:Class"`) provides.

A node class subclasses `Node`. The runtime constructs it once per rank that hosts the node, with
a `NodeContext` (its name, the `config` values of its `.walk` declaration, its device, engine
kind, KV labels, tensor-parallel rank and size, its declared port types, the plan's capture units
for its calls, and the rank's serving settings: KV cache, batching, attention), then calls
`forward` with the requests that are ready together for one (node, walk) pair.

Contract:

* **Port values are per request**: no batch dimension. A port's value is a `torch.Tensor`, or
  `None` for a *bare signal* (an optional walk input the flow did not pass; the node makes its own
  default, e.g. noise seeded from the request).
* A call reads only the ports it names (plus the node's stream-fed ports) and returns a dict with
  at least the output ports it binds (`CallContext.writes`). Streamed producer ports it returns
  are appended to their streams whether or not the call binds them; a node may leave them out of
  a call's result (a Talker prefill step produces no codec token).
* Returned tensors must match the declared port types: dtype and every static dim
  (`check_outputs`). The runtime checks every call and fails the request with a
  `NodeOutputError` naming node, port, expected and actual type.
* Per-request state lives in `CallContext.state`, a dict the runtime keeps per (request, node)
  for the whole request and drops when it ends (then it calls `release(request_id)`).
* **A `kv_cache` node's cache is the runtime's** (`CallContext.kv`, a `KvCache`): the request's
  sequences, one per label, in the rank's paged pool for the node (sized by the placement's
  ``kv_cache:`` and the node's ``config layers / kv_heads / head_dim``). A call appends its tokens'
  keys and values (`KvCache.append`), reads them back (`KvCache.keys_values`), attends over them
  (`KvCache.attend`, the paged-attention function of the placement's backend, computed on the CPU
  with torch), forks a label into another (copy on branch) or drops one. The pages are freed when
  the request ends, fails, is cancelled or passes its deadline. A ``like X { label L }`` copy reads
  X's label L (its handle is read-only): in X's pool when both run on one rank group, else in a copy
  the runtime makes before each walk that reads it. Engines that batch requests themselves (a
  decoder's continuous batching) take the pool and the request's key from the handle. A node class
  that sets `Node.serves_copies` may be handed its copies' calls in its own batches.
* When a placement runs a kv-cache node's walks on different rank groups (prefill on one,
  decode on another), the request's state moves between them: its KV pages (every label) and
  what `export_state` turns the rest into (named tensors, which travel like any port value;
  `import_state` takes them on the new group), before the next walk of the node starts there.
  The defaults move the `CallContext.state` dict (tensors, ints, floats and bools); a node
  keeping state elsewhere overrides both.
* A stream-fed input port comes with a `ChunkInfo` in `CallContext.chunks[port]`: chunk index,
  valid rows on dim 0 (the rest is padding), and whether it is the stream's final chunk.
* A call the plan lists as capturable (a static loop body's step) runs as a captured unit when
  the node offers one (`Node.static_step`, `wgc_runtime.contract.capture`): batched, padded to
  a bucket, recorded once per bucket. It must compute what `forward` computes.
* Nodes are deterministic given their inputs and context (seed any sampling from
  `CallContext.seed()`), so the reference interpreter and the compiled runtime agree exactly.

This module needs torch and nothing else; it never imports the compiler.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, cast

import torch

from wgc_runtime.contract.capture import CapturedCall, StaticStep
from wgc_runtime.contract.flow import SEED_OPTION
from wgc_runtime.contract.kinds import Engine
from wgc_runtime.contract.spec import (
    AttentionSpec,
    BatchingSpec,
    CaptureSpec,
    KvCacheSpec,
    render_type,
    type_parts,
)
from wgc_runtime.contract.weights import WeightParts

DTYPES: dict[str, torch.dtype] = {
    "bool": torch.bool,
    "u8": torch.uint8,
    "i32": torch.int32,
    "i64": torch.int64,
    "f16": torch.float16,
    "bf16": torch.bfloat16,
    "f32": torch.float32,
}
DTYPE_NAMES: dict[torch.dtype, str] = {v: k for k, v in DTYPES.items()}


def render_tensor(x: Any) -> str:
    if not isinstance(x, torch.Tensor):
        return type(x).__name__
    return f"{DTYPE_NAMES.get(x.dtype, str(x.dtype))}[{', '.join(str(d) for d in x.shape)}]"


@dataclass(frozen=True, slots=True)
class ChunkInfo:
    """Where a stream chunk sits in its stream.

    ``index``: chunk number (0, 1, ...). ``start``: the stream index of its first item.
    ``items``: how many real items it holds; ``valid``: how many rows on dim 0 are real (items
    times the item's leading dim; scalar items count one row each); ``size``: rows delivered
    (``size - valid`` rows of zero padding at the end). ``final``: the stream's one final chunk.
    ``after_done``: an empty chunk offered after the final one (`after_done continue`).
    """

    index: int
    start: int
    items: int
    valid: int
    size: int
    final: bool
    after_done: bool = False

    @property
    def empty(self) -> bool:
        return self.items == 0


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeContext:
    """What a node instance is constructed with (once per hosting rank)."""

    name: str
    impl: str = ""
    config: Mapping[str, Any] = field(default_factory=dict[str, Any])
    device: str = "cpu"
    engine: str = Engine.STATELESS  # an `Engine`: stateless | kv_cache
    labels: tuple[str, ...] = ()  # the node's own KV labels (`like X { label L }`: just L)
    tp_rank: int = 0
    tp_size: int = 1
    inputs: Mapping[str, Any] = field(default_factory=dict[str, Any])  # port -> TypeSpec-like
    outputs: Mapping[str, Any] = field(default_factory=dict[str, Any])
    # the plan's capture units this node takes part in on this rank (`CaptureSpec`s: a whole
    # shape-static loop body or one node step, with its batch buckets): an engine builds its
    # graph runner from them (`wgc_runtime.engines.capture.runner_for`); eager nodes ignore it
    captures: tuple[CaptureSpec, ...] = ()
    # the placement's serving settings, as the rank runs under them: the page pool of a
    # kv-cache node, the batch buckets, the paged-attention backend
    kv_cache: KvCacheSpec = KvCacheSpec()
    batching: BatchingSpec = BatchingSpec()
    attention: AttentionSpec = AttentionSpec()
    # where a node says what its start-up is doing (a line each, shown with the rank's loading
    # progress, e.g. a compile that takes seconds); None when nobody listens
    progress: Callable[[str], None] | None = field(default=None, compare=False, repr=False)

    def say(self, line: str) -> None:
        """Report one line of start-up progress (nothing when nobody listens)."""
        if self.progress is not None:
            self.progress(f"`{self.name}`: {line}")


class KvCache(Protocol):
    """A request's KV cache of one kv-cache node, as a call sees it (`CallContext.kv`).

    Keys and values are ``[layers, tokens, kv_heads, head_dim]`` (``kv_heads`` and
    ``head_dim`` of the node's pool); ``label`` defaults to the node's first label (``main``
    for a node that declares none; a copy's own label)."""

    labels: tuple[str, ...]
    layers: int
    kv_heads: int
    head_dim: int
    writable: bool
    # for engines that batch requests themselves (a decoder over the paged pool): the rank's
    # pool (`wgc_runtime.engines.kv_pool.PagedKVPool`) and this request's key in it
    pool: Any
    request: Hashable

    def length(self, label: str | None = None) -> int:
        """Tokens in ``label``'s sequence (0 before the first append)."""
        ...

    def append(self, k: torch.Tensor, v: torch.Tensor, label: str | None = None) -> None:
        """Append ``tokens`` positions to ``label``'s sequence (pages are allocated as
        needed; a full pool fails the request with the pool's numbers)."""
        ...

    def keys_values(
        self, layer: int = 0, label: str | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(K, V)`` of ``label``'s sequence in ``layer``, each ``[length, kv_heads,
        head_dim]`` (a copy)."""
        ...

    def attend(
        self, q: torch.Tensor, layer: int = 0, label: str | None = None, *, causal: bool = True
    ) -> torch.Tensor:
        """Attention of ``q`` (``[tokens, heads, head_dim]``: the last ``tokens`` positions
        of the sequence, or new queries with ``causal=False``) over ``label``'s keys and values
        in ``layer``; ``[tokens, heads, head_dim]``. ``heads`` is a multiple of ``kv_heads``
        (grouped-query attention)."""
        ...

    def truncate(self, length: int, label: str | None = None) -> None:
        """Cut ``label``'s sequence back to its first ``length`` tokens (rewind: a speculative
        step's rejected tokens); the pages past it return to the pool, kept for this request
        by admission. ``length`` may not exceed `length` (`ValueError`)."""
        ...

    def fork(self, src: str, dst: str) -> None:
        """Make ``dst`` a snapshot of ``src`` (copy on branch: full pages are shared)."""
        ...

    def backend(self, heads: int) -> Any:
        """The placement's paged-attention backend over the pool for ``heads`` query heads
        (`wgc_runtime.engines.attention.base.AttentionBackend`: ``plan``, then ``forward`` per
        layer)."""
        ...

    def drop(self, label: str) -> None:
        """Free ``label``'s pages."""
        ...


@dataclass(slots=True, kw_only=True)
class CallContext:
    """One request's call of a node.

    ``iteration`` has one entry per enclosing loop (``loops``), outermost first. ``reads`` are
    the input ports the call takes (with the stream-fed ports), ``writes`` the output ports it
    binds to channels. ``state`` is this request's persistent dict for this node.
    """

    request_id: str
    walk: str
    call: int
    node: str = ""
    flow: str = ""
    loops: tuple[str, ...] = ()
    iteration: tuple[int, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict[str, Any])
    state: dict[str, Any] = field(default_factory=dict[str, Any])
    chunks: Mapping[str, ChunkInfo] = field(default_factory=dict[str, ChunkInfo])
    reads: frozenset[str] = frozenset()
    writes: frozenset[str] = frozenset()
    kv: KvCache | None = None  # a kv-cache node's cache for this request (see `KvCache`)

    def seed(self, salt: str = "") -> int:
        """A deterministic 63-bit seed from the request, walk, call, iteration and ``salt``."""
        key = f"{self._seed_base()}|{self.walk}|{self.call}|{self.iteration}|{salt}"
        return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest()) >> 1

    def request_seed(self, salt: str = "") -> int:
        """A deterministic seed from the request and ``salt`` only: every call (and every node)
        that asks with the same salt gets the same seed (e.g. the starting noise of a denoising
        loop that several nodes must agree on)."""
        key = f"{self._seed_base()}|{salt}"
        return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest()) >> 1

    def _seed_base(self) -> str:
        """What the seeds derive from: the request's seed (`SEED_OPTION`) when it was given
        one, else its id (so requests with one seed compute the same, whatever their ids)."""
        seed = self.options.get(SEED_OPTION)
        return self.request_id if seed is None else str(seed)

    def generator(self, salt: str = "", per_call: bool = True) -> torch.Generator:
        """A torch generator seeded by `seed` (``per_call``) or `request_seed`."""
        g = torch.Generator()
        g.manual_seed(self.seed(salt) if per_call else self.request_seed(salt))
        return g


@dataclass(slots=True)
class Work:
    """One ready call: its input port values and its context."""

    inputs: dict[str, torch.Tensor | None]
    ctx: CallContext


class Node:
    """Base class of node implementations. Override `forward_one` (one request at a time) or
    `forward` (a batch of ready requests of one walk); optionally `release`, and `expect` with
    `idle` to prepare for a request ahead of its calls.

    ``serves_copies``: True when the class's batched `forward` may be handed, in one batch, the
    ready calls of its ``like`` copies that read its pool on the same rank (a CFG branch's
    passes beside the main one, in a ``par`` block) together with its own: each `Work`'s
    context names its own node, KV handle (label) and state, so the node must read them from
    the work, never from ``self``. The executor then runs the copies' calls in the owner's
    `forward` (one forward instead of one per copy)."""

    serves_copies: ClassVar[bool] = False

    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx
        self.name = ctx.name
        self.config = dict(ctx.config)
        self.device = torch.device(ctx.device)

    @classmethod
    def weights(cls, config: Mapping[str, Any]) -> Sequence[WeightParts]:
        """The weights a node of this class would hold with ``config`` (its `.walk` config
        values), said before it is built (`wgc_runtime.contract.weights`); none by default."""
        del config
        return ()

    def forward(self, batch: Sequence[Work]) -> list[dict[str, torch.Tensor]]:
        """Outputs for every ready call, in order. The default runs `forward_one` per call."""
        return [self.forward_one(w.inputs, w.ctx) for w in batch]

    def forward_one(
        self, inputs: dict[str, torch.Tensor | None], ctx: CallContext
    ) -> dict[str, torch.Tensor]:
        raise NotImplementedError(f"node `{self.name}` implements neither forward nor forward_one")

    def release(self, request_id: str) -> None:
        """The request ended; drop anything held for it outside `CallContext.state`. For a
        stateless node called in a piece that leaves nothing behind (`PieceSpec.needs_release`
        false), the request ends here when that piece is done: a later walk of the request
        may call the node again, and release it again."""

    def expect(self, ctx: CallContext) -> None:
        """A request will call this node on this rank: the first item of a stream that feeds
        one of its ports arrived here (once per request and stream, before the stream's first
        chunk). ``ctx`` has the request's id, options and this node's `CallContext.state`
        (``walk`` empty, ``call`` -1). A node may note work it can do ahead for the request
        (e.g. random draws that depend on the request's seed only) to do in `idle`; nothing
        it prepares may change what its calls compute. The default does nothing."""

    def idle(self) -> bool:
        """Do a little of the work noted by `expect` (a fraction of a millisecond: the rank
        looks for messages between calls) while the rank has nothing to run; True when some
        was done, False when none is left. Called only between calls, never with one running;
        the default has none."""
        return False

    def static_step(self, call: CapturedCall) -> StaticStep | Sequence[StaticStep] | None:
        """The call as a shape-static unit the runtime may capture
        (`wgc_runtime.contract.capture`; several: forms of the call, the first that admits a
        batch runs it), or None (the default): the call runs `forward`."""
        return None

    def export_state(self, request_id: str, kept: dict[str, Any]) -> dict[str, torch.Tensor]:
        """The request's state of this node as named tensors, to move it to another rank group
        (prefill/decode disaggregation: the plan's handoffs). ``kept`` is the request's
        `CallContext.state` dict here; the runtime drops it afterwards, and a node keeping state
        elsewhere (KV pages) frees it here: the state *moves*. The default encodes ``kept``
        (`encode_state`: tensors, ints, floats and bools)."""
        return encode_state(self.name, kept)

    def import_state(
        self, request_id: str, state: Mapping[str, torch.Tensor], kept: dict[str, Any]
    ) -> None:
        """Take the state another rank's `export_state` produced for the request, before the
        request's next walk of this node runs here. ``kept`` is the request's (fresh)
        `CallContext.state` dict here. The default decodes ``state`` into it."""
        kept.update(decode_state(state))

    # helpers for implementations
    def out_shape(self, port: str, **symbols: int) -> tuple[int, ...]:
        """The declared static shape of output ``port`` (symbolic dims from ``symbols``)."""
        _, dims = type_parts(self.ctx.outputs[port])
        return tuple(d if isinstance(d, int) else symbols[d] for d in dims)

    def out_dtype(self, port: str) -> torch.dtype:
        return DTYPES[type_parts(self.ctx.outputs[port])[0]]


_STATE_KINDS = {"tensor", "int", "float", "bool"}


def encode_state(node_name: str, kept: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """A `CallContext.state` dict as tensors: each entry ``key`` becomes ``"<kind>:key"`` (a
    tensor as it is; an int, float or bool as a 0-dim i64 / f64 / bool tensor), so
    `decode_state` gives back the same values. Anything else raises `NodeError`: the node must
    override `Node.export_state`."""
    out: dict[str, torch.Tensor] = {}
    for key, v in kept.items():
        if isinstance(v, torch.Tensor):
            out[f"tensor:{key}"] = v
        elif isinstance(v, bool):
            out[f"bool:{key}"] = torch.tensor(v, dtype=torch.bool)
        elif isinstance(v, int):
            out[f"int:{key}"] = torch.tensor(v, dtype=torch.int64)
        elif isinstance(v, float):
            out[f"float:{key}"] = torch.tensor(v, dtype=torch.float64)
        else:
            raise NodeError(
                f"node `{node_name}` keeps `{key}` ({type(v).__name__}) in its request state, "
                "which the default `export_state` cannot move (tensors, ints, floats and bools "
                "only): override `export_state` / `import_state`"
            )
    return out


def decode_state(state: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    """The inverse of `encode_state` (keys without a known ``kind:`` prefix stay tensors)."""
    out: dict[str, Any] = {}
    for name, t in state.items():
        kind, sep, key = name.partition(":")
        if not sep or kind not in _STATE_KINDS:
            out[name] = t
        elif kind == "tensor":
            out[key] = t
        elif kind == "bool":
            out[key] = bool(t.item())
        elif kind == "int":
            out[key] = int(t.item())
        else:
            out[key] = float(t.item())
    return out


class NodeError(Exception):
    """A node failed a request; the message names the node (and port) involved."""


class NodeOutputError(NodeError):
    """A node returned something its declared ports do not allow."""


class NodeInputError(NodeError, ValueError):
    """A node cannot take a value of the request (an option out of its range, an empty prompt):
    the request's fault, reported as such (`Cause.INPUT`: HTTP 400, `wgc run` exit 1). Only
    this class counts: any other exception, a plain `ValueError` included (it may be a bug), is
    the deployment's (HTTP 500)."""


def check_outputs(
    node_name: str,
    port_types: Mapping[str, Any],
    outputs: Any,
    required: Iterable[str] = (),
) -> None:
    """Check one call's result against the node's declared output ports.

    ``port_types`` maps output port -> TypeSpec-like ``(dtype, dims)`` (an int dim must match, a
    bounded ``"<=N"`` holds at most N (WG864), another str dim is symbolic: any size). ``required``
    are the ports the call binds. Raises `NodeOutputError` on the first problem: not a dict, a
    missing required port, an undeclared port, a value not a tensor, a wrong dtype, rank or dim."""
    if not isinstance(outputs, Mapping):
        raise NodeOutputError(
            f"node `{node_name}` returned {type(outputs).__name__}, "
            "expected a dict of port -> tensor"
        )
    for port in required:
        if port not in outputs:
            raise NodeOutputError(
                f"node `{node_name}` did not return output port `{port}`, which the call binds"
            )
    for port, value in cast(Mapping[str, Any], outputs).items():
        if port not in port_types:
            known = ", ".join(f"`{p}`" for p in port_types) or "none"
            raise NodeOutputError(
                f"node `{node_name}` returned unknown port `{port}` (declared outputs: {known})"
            )
        _check_one(node_name, port, port_types[port], value)


def _check_one(node_name: str, port: str, t: Any, value: Any) -> None:
    if t is None:
        return  # the compiler could not type the port; nothing to check against
    dtype, dims = type_parts(t)
    # the hot path (every output of every call) only compares; texts are built when raising
    if not isinstance(value, torch.Tensor):
        raise _output_error(node_name, port, t, value, "a tensor ", paren=False)
    if DTYPES.get(dtype) is not value.dtype:
        raise _output_error(node_name, port, t, value, f"dtype {dtype} ")
    shape = value.shape
    if len(shape) != len(dims):
        raise _output_error(node_name, port, t, value, f"rank {len(dims)} ")
    for i, d in enumerate(dims):
        over = isinstance(d, str) and d[:2] == "<=" and shape[i] > int(d[2:])  # WG864
        if over or (isinstance(d, int) and d != shape[i]):
            why = f"holds {shape[i]}, more than its bound {str(d)[2:]}" if over else None
            tail = f" (dim {i} {why or f'is {shape[i]}, not {d}'})"
            err = _output_error(node_name, port, t, value, "", paren=False, tail=tail)
            raise NodeOutputError(f"WG864: {err}") if over else err


def _output_error(
    node_name: str, port: str, t: Any, value: Any, what: str, paren: bool = True, tail: str = ""
) -> NodeOutputError:
    """``node `n` output `p`: expected <what><type>, got <tensor><tail>`` (the type in
    parentheses after ``what`` when ``paren``)."""
    want = f"({render_type(t)})" if paren else render_type(t)
    got = render_tensor(value)
    return NodeOutputError(
        f"node `{node_name}` output `{port}`: expected {what}{want}, got {got}{tail}"
    )


def to_tensor(value: Any) -> torch.Tensor | None:
    """A walk argument as a tensor: tensors as they are; ``str`` as its UTF-8 bytes (``i64``,
    a stand-in tokenizer until real tokenizers arrive); bool / int / float as ``bool`` / ``i64`` /
    ``f32`` scalars; numpy arrays and nested lists through `torch.as_tensor`; None stays None."""
    if value is None or isinstance(value, torch.Tensor):
        return value
    if isinstance(value, str):
        return torch.tensor(list(value.encode("utf-8")), dtype=torch.int64)
    if isinstance(value, bool):
        return torch.tensor(value, dtype=torch.bool)
    if isinstance(value, int):
        return torch.tensor(value, dtype=torch.int64)
    if isinstance(value, float):
        return torch.tensor(value, dtype=torch.float32)
    return torch.as_tensor(value)
