"""Tensor types of ports and channels: a dtype and a tuple of dims.

A dim is an integer, a compile-time `param` (kept by name, with its value), a *shape bucket*
(an expression over `option`s declared with a fixed set of values, `option.frames / 4 + 1`: one
of a few sizes per request, kept by its text with its value for every combination of those
options), a symbolic per-request name such as ``T``, a *bounded* dim ``<=K`` (any size from 0 to
the static bound K per value: a step that emits a variable number of tokens, kept by its text
with the bound as its value), or ``?``. A shape is *static* when every dim is an integer or a
param, and *static per bucket* when every dim is static, a bucket or bounded: a loop over it is
captured once per bucket, a bounded dim at its bound (padded). Types compare by structure; a
param dim compares equal to an int dim of the same value.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class DType(enum.Enum):
    BOOL = "bool"
    U8 = "u8"
    I32 = "i32"
    I64 = "i64"
    F16 = "f16"
    BF16 = "bf16"
    F32 = "f32"

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self]


_ITEMSIZE = {
    DType.BOOL: 1,
    DType.U8: 1,
    DType.I32: 4,
    DType.I64: 8,
    DType.F16: 2,
    DType.BF16: 2,
    DType.F32: 4,
}

DTYPE_NAMES = tuple(d.value for d in DType)
_MISSING = object()


class DimKind(enum.Enum):
    INT = "int"
    PARAM = "param"
    BUCKET = "bucket"
    SYM = "sym"
    BOUNDED = "bounded"
    ANY = "any"


# One case of a bucket dim: the values of the options it reads (sorted by option name), and the
# dim's size for them.
Case = tuple[tuple[tuple[str, object], ...], int]


@dataclass(frozen=True, slots=True)
class Dim:
    """One dimension. ``value`` is set for INT, PARAM and BOUNDED (its bound), ``name`` for PARAM,
    BUCKET, SYM and BOUNDED (``<=`` and the bound as written), ``cases`` for BUCKET (every
    combination of its options' values, with the dim's size)."""

    kind: DimKind
    value: int | None = None
    name: str | None = None
    cases: tuple[Case, ...] = ()

    @staticmethod
    def int_(v: int) -> Dim:
        return Dim(DimKind.INT, v)

    @staticmethod
    def param(name: str, v: int) -> Dim:
        return Dim(DimKind.PARAM, v, name)

    @staticmethod
    def bucket(name: str, cases: tuple[Case, ...]) -> Dim:
        return Dim(DimKind.BUCKET, None, name, cases)

    @staticmethod
    def sym(name: str) -> Dim:
        return Dim(DimKind.SYM, None, name)

    @staticmethod
    def bounded(text: str, bound: int) -> Dim:
        """``<=text``: 0..``bound`` elements per value."""
        return Dim(DimKind.BOUNDED, bound, f"<={text}")

    @staticmethod
    def any_() -> Dim:
        return Dim(DimKind.ANY)

    @property
    def is_static(self) -> bool:
        return self.kind in (DimKind.INT, DimKind.PARAM)

    @property
    def is_bucket_static(self) -> bool:
        """Static, one of a fixed set of sizes per request (a shape bucket), or bounded (captured
        at its bound)."""
        return self.is_static or self.kind in (DimKind.BUCKET, DimKind.BOUNDED)

    @property
    def is_bounded(self) -> bool:
        return self.kind is DimKind.BOUNDED

    @property
    def options(self) -> tuple[str, ...]:
        """The options a bucket dim reads (sorted); () for every other dim."""
        return tuple(name for name, _ in self.cases[0][0]) if self.cases else ()

    @property
    def sizes(self) -> tuple[int, ...]:
        """Every size the dim can have: its value, or a bucket's sizes (ascending, once each)."""
        if self.kind is DimKind.BUCKET:
            return tuple(sorted({size for _, size in self.cases}))
        return (self.value,) if self.value is not None else ()

    def size_for(self, values: dict[str, object]) -> int | None:
        """The dim's size when the options have ``values`` (None when it is not known)."""
        if self.kind is not DimKind.BUCKET:
            return self.value
        for assign, size in self.cases:
            if all(values.get(k, _MISSING) == v for k, v in assign):
                return size
        return None

    def agrees(self, other: Dim) -> bool:
        """True unless two known sizes can differ: static dims of different values, or a bucket
        and a static dim or another bucket that differ in some case both can be in (dynamic
        dims are checked at run time). Bounded dims, where ``self`` is the value's and
        ``other`` the port it flows into: a bounded dim of the same bound agrees, a static
        value within a bounded port's bound too (it is one of its sizes: a carried value's
        first iteration, `i64[1]` into `i64[<=k + 1]`), a bounded value into a static port
        never; a dynamic dim agrees with either."""
        if self.is_bounded and other.is_bounded:
            return self.value == other.value
        if self.is_bounded or other.is_bounded:
            if self.is_static:
                return (self.value or 0) <= (other.value or 0)
            return not (other.is_static or DimKind.BUCKET in (self.kind, other.kind))
        if self.is_static and other.is_static:
            return self.value == other.value
        if not (self.is_bucket_static and other.is_bucket_static):
            return True
        for a, size_a in self.cases or (((), self.value),):
            for b, size_b in other.cases or (((), other.value),):
                shared = dict(a).keys() & dict(b).keys()
                if all(dict(a)[k] == dict(b)[k] for k in shared) and size_a != size_b:
                    return False
        return True

    def __str__(self) -> str:
        if self.kind is DimKind.INT:
            return str(self.value)
        if self.kind in (DimKind.PARAM, DimKind.BUCKET, DimKind.BOUNDED):
            return str(self.name)
        if self.kind is DimKind.SYM:
            return str(self.name)
        return "?"


@dataclass(frozen=True, slots=True)
class TensorType:
    dtype: DType
    dims: tuple[Dim, ...]

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def is_static(self) -> bool:
        return all(d.is_static for d in self.dims)

    @property
    def is_bucket_static(self) -> bool:
        """Every dim static or a shape bucket: static once the request's bucket is known."""
        return all(d.is_bucket_static for d in self.dims)

    def numel(self) -> int | None:
        """Element count when static, else None."""
        if not self.is_static:
            return None
        n = 1
        for d in self.dims:
            assert d.value is not None  # a static dim has its value
            n *= d.value
        return n

    def nbytes(self) -> int | None:
        n = self.numel()
        return None if n is None else n * self.dtype.itemsize

    def agrees(self, other: TensorType) -> bool:
        return (
            self.dtype is other.dtype
            and self.rank == other.rank
            and all(a.agrees(b) for a, b in zip(self.dims, other.dims, strict=True))
        )

    def with_leading(self, dim: Dim) -> TensorType:
        return TensorType(self.dtype, (dim, *self.dims))

    def __str__(self) -> str:
        return f"{self.dtype.value}[{', '.join(str(d) for d in self.dims)}]"
