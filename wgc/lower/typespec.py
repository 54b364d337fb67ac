"""IR tensor types as the contract's `TypeSpec`s, and their byte sizes."""

from __future__ import annotations

from wgc.ir.types import DimKind, DType, TensorType
from wgc_runtime.contract.spec import TypeSpec

# placement `kv_cache.dtype` spellings beyond the language's own dtype names
_EXTRA_ITEMSIZE = {"fp8": 1, "f8": 1, "fp16": 2, "float16": 2, "bfloat16": 2, "fp32": 4}


def type_spec(t: TensorType | None) -> TypeSpec | None:
    """Static dims (ints and params) become ints; symbolic and shape-bucket dims keep their name
    (a bucket's text, `option.frames / 4 + 1`: one size per request, resolved per capture
    entry by `wgc.lower.capture`), a bounded dim is `<=N` (its bound's value: what a value may
    hold at most, the size a capture pads it to), `?` is "?"."""
    if t is None:
        return None
    dims: list[int | str] = []
    for d in t.dims:
        if d.kind in (DimKind.INT, DimKind.PARAM) and d.value is not None:
            dims.append(int(d.value))
        elif d.kind is DimKind.BOUNDED and d.value is not None:
            dims.append(f"<={int(d.value)}")  # the bound evaluated: `wgc_runtime` reads it
        elif d.kind in (DimKind.SYM, DimKind.BUCKET) and d.name:
            dims.append(d.name)
        else:
            dims.append("?")
    return TypeSpec(t.dtype.value, tuple(dims))


def itemsize(dtype: str) -> int:
    """Bytes per element of a dtype name (unknown names count as 2, the common KV width)."""
    try:
        return DType(dtype).itemsize
    except ValueError:
        return _EXTRA_ITEMSIZE.get(dtype, 2)


def spec_nbytes(spec: TypeSpec | None) -> int | None:
    if spec is None:
        return None
    if not spec.is_static:
        return None
    n = itemsize(spec.dtype)
    for d in spec.dims:
        n *= int(d)
    return n
