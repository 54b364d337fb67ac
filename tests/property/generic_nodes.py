"""One deterministic node implementation for every node of a generated model (`gen_models`).

`Generic` reads nothing but its `NodeContext` (declared output port types) and the call: every
declared output is filled, to its static shape, from a digest of everything the semantics say a
call depends on — the node, walk, call id, loop iterations, each input port's name and exact
bytes (a bare signal counts as ``none``), the `ChunkInfo` of stream-fed ports, and, for a
``kv_cache`` node, the request's state so far (a running digest and a call counter kept in
`CallContext.state`, so the order of a request's calls of that node, and a state handoff between
ranks, show in its outputs). Float values are multiples of 1/8 below 128: exactly representable,
so "the same" means bit-equal.

A ``bool[]`` output (the generated models' stop port ``s``) becomes true at iteration
``stop_at + call % 2`` of the innermost loop (1-based), ``stop_at`` being the request option
(default 2), so `until` loops end at a request-controlled point; outside a loop it is a digest
bit.

The request options ``fail_walk`` and ``fail_call`` make that call raise (every time it runs),
so the request fails.
"""

from __future__ import annotations

import hashlib

import torch

from wgc_runtime.contract.node import DTYPES, CallContext, Node, type_parts


def _digest(*parts: bytes | str) -> int:
    h = hashlib.blake2b(digest_size=8)
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\x00")
    return int.from_bytes(h.digest()) >> 1  # 63 bits: fits an int64 state entry


def _tensor_bytes(t: torch.Tensor | None) -> bytes:
    if t is None:
        return b"none"
    t = t.detach().cpu().contiguous()
    return f"{t.dtype}{tuple(t.shape)}".encode() + t.numpy().tobytes()


def call_digest(node: str, inputs: dict[str, torch.Tensor | None], ctx: CallContext) -> int:
    parts: list[bytes | str] = [node, ctx.walk, str(ctx.call), repr(ctx.iteration)]
    for port in sorted(inputs):
        parts += [port, _tensor_bytes(inputs[port])]
        info = ctx.chunks.get(port)
        if info is not None:
            parts.append(repr((info.index, info.items, info.valid, info.size, info.final)))
    return _digest(*parts)


def fill(seed: int, port: str, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    n = 1
    for d in shape:
        n *= d
    base = _digest(str(seed), port)
    vals = (torch.arange(n, dtype=torch.int64) * 37 + base) % 1024
    if dtype is torch.bool:
        return (vals % 2 == 1).reshape(shape)
    if dtype.is_floating_point:
        return (vals.to(torch.float64) / 8).to(dtype).reshape(shape)
    return vals.to(dtype).reshape(shape)


class Generic(Node):
    def forward_one(self, inputs: dict[str, torch.Tensor | None], ctx: CallContext) -> dict:
        if ctx.call == ctx.options.get("fail_call") and ctx.walk == ctx.options.get("fail_walk"):
            raise RuntimeError(f"asked to fail at call {ctx.call} of `{ctx.walk}`")
        seed = call_digest(self.name, inputs, ctx)
        if self.ctx.engine == "kv_cache":
            st = ctx.state
            st["calls"] = st.get("calls", 0) + 1
            st["acc"] = _digest(str(st.get("acc", 0)), str(seed))
            seed = _digest(str(st["acc"]), str(st["calls"]))
        out: dict[str, torch.Tensor] = {}
        for port, t in self.ctx.outputs.items():
            dtype, dims = type_parts(t)
            shape = tuple(d if isinstance(d, int) else 1 for d in dims)
            if dtype == "bool" and shape == () and ctx.iteration:
                stop_at = int(ctx.options.get("stop_at", 2)) + ctx.call % 2
                out[port] = torch.tensor(ctx.iteration[-1] + 1 >= stop_at)
            else:
                out[port] = fill(seed, port, DTYPES[dtype], shape)
        return out
