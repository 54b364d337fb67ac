"""Tensor types of ports and channels: a dtype and a tuple of dims.

A dim is an integer, a compile-time `param` (kept by name, with its value), a symbolic per-request
name such as ``T``, or ``?``. A shape is *static* when every dim is an integer or a param.
Types compare by structure; a param dim compares equal to an int dim of the same value.
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


class DimKind(enum.Enum):
    INT = "int"
    PARAM = "param"
    SYM = "sym"
    ANY = "any"


@dataclass(frozen=True, slots=True)
class Dim:
    """One dimension. ``value`` is set for INT and PARAM, ``name`` for PARAM and SYM."""

    kind: DimKind
    value: int | None = None
    name: str | None = None

    @staticmethod
    def int_(v: int) -> Dim:
        return Dim(DimKind.INT, v)

    @staticmethod
    def param(name: str, v: int) -> Dim:
        return Dim(DimKind.PARAM, v, name)

    @staticmethod
    def sym(name: str) -> Dim:
        return Dim(DimKind.SYM, None, name)

    @staticmethod
    def any_() -> Dim:
        return Dim(DimKind.ANY)

    @property
    def is_static(self) -> bool:
        return self.kind in (DimKind.INT, DimKind.PARAM)

    def agrees(self, other: Dim) -> bool:
        """True unless both dims are static and differ (dynamic dims are checked at run time)."""
        if self.is_static and other.is_static:
            return self.value == other.value
        return True

    def __str__(self) -> str:
        if self.kind is DimKind.INT:
            return str(self.value)
        if self.kind is DimKind.PARAM:
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
