"""The wire codec: msgpack headers, tensors as zero-copy frames, never pickle."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest
import torch
import zmq

from wgc_runtime.host.transport.codec import DTYPES, CodecError, decode, encode


def _sample(dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    if dtype is torch.bool:
        return torch.arange(int(np.prod(shape)) or 0).reshape(shape) % 3 == 0
    return (torch.arange(int(np.prod(shape)) or 0).reshape(shape) * 3 - 7).to(dtype)


@pytest.mark.parametrize("name", sorted(DTYPES))
@pytest.mark.parametrize("shape", [(), (0,), (5,), (2, 3, 4)])
def test_round_trip_every_dtype(name: str, shape: tuple[int, ...]) -> None:
    t = _sample(DTYPES[name], shape)
    msg = {"t": "data", "value": t, "nested": [1, {"x": t}], "s": "é", "b": b"\x00"}
    out = decode(encode(msg))
    for got in (out["value"], out["nested"][1]["x"]):
        assert got.dtype == t.dtype and got.shape == t.shape
        assert torch.equal(got, t)
    assert out["s"] == "é" and out["b"] == b"\x00" and out["nested"][0] == 1


def test_bf16_bits_survive() -> None:
    t = torch.tensor([1.5, -0.0, float("inf"), float("nan"), 3.0e38], dtype=torch.bfloat16)
    got = decode(encode({"v": t}))["v"]
    assert torch.equal(got.view(torch.int16), t.view(torch.int16))


def test_non_contiguous_and_views() -> None:
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    t = base[:, 1::2]
    assert torch.equal(decode(encode({"v": t}))["v"], t)


def test_encode_is_zero_copy() -> None:
    t = torch.arange(1 << 16, dtype=torch.float32)
    frames = encode({"v": t})
    assert len(frames) == 2
    # the frame views the tensor's memory: no copy on the way out
    assert frames[1].__array_interface__["data"][0] == t.data_ptr()
    got = decode(frames)["v"]
    assert got.data_ptr() == frames[1].__array_interface__["data"][0]


def test_zero_copy_through_zmq() -> None:
    ctx = zmq.Context.instance()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    try:
        port = a.bind_to_random_port("tcp://127.0.0.1")
        b.connect(f"tcp://127.0.0.1:{port}")
        t = torch.randn(1000, 100)
        b.send_multipart(encode({"v": t, "k": [1, 2]}), copy=False)
        frames = a.recv_multipart(copy=False)
        got = decode(frames)
        assert torch.equal(got["v"], t) and got["k"] == [1, 2]
    finally:
        a.close(0)
        b.close(0)


def test_no_pickle_and_no_unknown_types() -> None:
    class Evil:
        pass

    with pytest.raises(CodecError):
        encode({"x": Evil()})
    with pytest.raises(CodecError):
        decode([msgpack.packb(msgpack.ExtType(42, b""))])
    with pytest.raises(CodecError):
        decode([b"\xc1"])  # never-used msgpack byte


def test_placed_tensors_become_descriptors() -> None:
    t = torch.ones(4)
    seen = []
    desc = [0, 64, 16, "f32", [4], 3]  # slot, offset, nbytes, dtype, shape, generation
    frames = encode({"v": t}, place=lambda x: desc)
    assert len(frames) == 1
    got = decode(frames, resolve=lambda d: seen.append(d) or torch.zeros(1))
    assert seen == [desc] and torch.equal(got["v"], torch.zeros(1))
    bad = encode({"v": t}, place=lambda x: ["desc", 7])  # not a descriptor: refused on decode
    with pytest.raises(CodecError, match="malformed tensor reference"):
        decode(bad, resolve=lambda d: torch.zeros(1))
    with pytest.raises(CodecError):
        decode(frames)
