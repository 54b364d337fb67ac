"""Port values as tensors: the dtype names ports use (`DTYPES`), the check of a call's result
against its node's declared output ports (`check_outputs`), and walk arguments as tensors
(`to_tensor`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, cast

import torch

from wgc_runtime.contract.node.errors import NodeOutputError
from wgc_runtime.contract.spec import render_type, type_parts

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


def check_outputs(
    node_name: str,
    port_types: Mapping[str, Any],
    outputs: Any,
    required: Iterable[str] = (),
) -> None:
    """Check one call's result against the node's declared output ports.

    ``port_types`` maps output port -> TypeSpec-like ``(dtype, dims)`` (an int dim must match, a
    bounded dim ``"<=N"`` holds at most N (WG864), any other str dim is symbolic and matches any
    size). ``required`` are the ports the call binds. Raises
    `NodeOutputError` on the first problem: not a dict, a missing required port, an undeclared
    port, a value that is not a tensor, a wrong dtype, rank or static dim.
    """
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
        if isinstance(d, int) and d != shape[i]:
            tail = f" (dim {i} is {shape[i]}, not {d})"
            raise _output_error(node_name, port, t, value, "", paren=False, tail=tail)
        if isinstance(d, str) and d[:2] == "<=" and shape[i] > int(d[2:]):
            tail = f" (dim {i} holds {shape[i]}, more than its bound {d[2:]})"
            err = _output_error(node_name, port, t, value, "", paren=False, tail=tail)
            raise NodeOutputError(f"WG864: {err}")


def _output_error(
    node_name: str, port: str, t: Any, value: Any, what: str, paren: bool = True, tail: str = ""
) -> NodeOutputError:
    """``node `n` output `p`: expected <what><type>, got <tensor><tail>`` (the type in
    parentheses after ``what`` when ``paren``)."""
    want = render_type(t)
    want = f"({want})" if paren else want
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
