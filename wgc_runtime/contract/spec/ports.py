"""Port types and where values come from and go: `TypeSpec`, `Source`, `Dest`, `PortIn`,
`PortOut` (the modes and destination kinds are described in `wgc_runtime.contract.spec`), and
the byte sizes of the dtypes a port or a KV cache may have.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from wgc_runtime.contract.kinds import DestKind, Edge, InputMode, SourceKind

ITEMSIZE = {"bool": 1, "u8": 1, "i32": 4, "i64": 8, "f16": 2, "bf16": 2, "f32": 4}
# KV cache dtypes: the language's, plus the spellings placements (M*'s among them) use
KV_ITEMSIZE = {**ITEMSIZE, "fp32": 4, "fp16": 2, "float16": 2, "bfloat16": 2}

Dims = tuple[int | str, ...]


def type_parts(t: Any) -> tuple[str, Dims]:
    """``(dtype, dims)`` of a TypeSpec-like value: a `wgc_runtime.contract.spec.TypeSpec`, any
    object with ``dtype`` and ``dims``, or a plain ``(dtype, dims)`` pair."""
    if hasattr(t, "dtype") and hasattr(t, "dims"):
        return str(t.dtype), tuple(t.dims)
    dtype, dims = t
    return str(dtype), tuple(dims)


def render_type(t: Any) -> str:
    dtype, dims = type_parts(t)
    return f"{dtype}[{', '.join(str(d) for d in dims)}]"


@dataclass(frozen=True, slots=True)
class TypeSpec:
    """A port type: dtype name and dims (an int, or a str for a symbolic dim or ``?``).

    Ports are per request: the runtime adds the batch dimension in front.
    """

    dtype: str
    dims: tuple[int | str, ...]

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.dims)

    @property
    def nbytes(self) -> int | None:
        """Bytes of one value (one request), or None when a dim is only known at run time."""
        if not self.is_static:
            return None
        n = ITEMSIZE[self.dtype]
        for d in self.dims:
            n *= int(d)
        return n


@dataclass(frozen=True, slots=True, kw_only=True)
class Source:
    """Where an input value comes from: ``input`` (walk input ``name``), ``call`` (output ``port``
    of call ``call`` on rank ``rank``) or ``stream`` (stream ``name``)."""

    kind: SourceKind
    name: str | None = None
    rank: int | None = None
    call: int | None = None
    port: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Dest:
    """Where an output value goes (see `wgc_runtime.contract.spec` for ``kind`` and ``edge``)."""

    kind: DestKind
    edge: Edge
    rank: int | None = None
    call: int | None = None
    port: str | None = None
    name: str | None = None
    loop: str | None = None
    ranks: tuple[int, ...] = ()
    carried: bool = False  # delivered at the next iteration of ``loop`` (never after the last)
    channel: str | None = None  # ``client``: the emitted channel's name
    # ``stream`` on another rank: items the producer may send before their acknowledgements
    # (the owner's buffer capacity); 0: each waits for the previous one's
    credits: int = 0
    # ``call`` on another rank whose piece starts on its first value (no `StartWalk`,
    # `PieceSpec.needs_start`): the first value sent there per walk instance carries the
    # walk's header (`Value.flow`, `Value.options`)
    starts: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class PortIn:
    port: str
    channel: str
    mode: InputMode
    src: Source
    init: Source | None = None  # carried: what iteration 0 reads
    type: TypeSpec | None = None
    optional: bool = False
    loop: str | None = None  # carried: the loop that carries it


@dataclass(frozen=True, slots=True, kw_only=True)
class PortOut:
    port: str
    type: TypeSpec | None = None
    dests: tuple[Dest, ...] = ()
