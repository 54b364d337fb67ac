"""The compact wire form of runtime messages (`wgc_runtime.host.transport.wire`) and the batched
`Mesh.send_messages` path: same meaning as ``from_wire(to_wire(m))``, tensors intact."""

from __future__ import annotations

import dataclasses

import msgpack
import pytest
import torch

from wgc_runtime.contract import messages as m
from wgc_runtime.contract.spec import Dest
from wgc_runtime.host.transport import wire
from wgc_runtime.host.transport.arena import Arena, leaked_segments
from wgc_runtime.host.transport.codec import CodecError, Encoder, decode
from wgc_runtime.host.transport.sockets import Mesh
from wgc_runtime.host.transport.tuning import Tuning

SAMPLES: list[m.Message] = [
    m.StartWalk("r1", 3, "chain", "main", (("temperature", 0.5), ("tags", ("a", "b")))),
    m.ForwardPersisted(
        "r1", 3, "chain", "main", "x", "kv", (Dest(kind="call", edge="e1", rank=1, ranks=(0, 1)),)
    ),
    m.StreamDone("r1", "tokens"),
    m.StreamAbandon("r1", "tokens"),
    m.SkipChunk("r1", "tokens", 4),
    m.Release("r1", "cancelled"),
    m.ExportState("r1", 3, "LLM", (0,), (1, 2)),
    m.Value("r1", 3, "chain", 7, "x", "e12", "steps", (("steps", 2), ("inner", 0)), False, None),
    m.Value("r1", 3, "chain", 7, "x", "e12", None, (), True, None),
    m.Until("r1", 3, "chain", "steps", (1, 2), 5, True),
    m.StreamItem("r1", "tokens", 9, 0, "text data"),
    m.StreamAck("r1", "tokens", 9),
    m.StateEnd("r1", 3, "LLM", 0, 2),
    m.WalkDone("r1", 3, "chain", 1),
    m.StateImported("r1", 3, "LLM", 2),
    m.ChunkReady("r1", "tokens", 2, False, True),
    m.ClientOut("r1", 3, "chain", "main", "tensor", "x10", (1, 2), [1, [2, 3]]),
    m.Failed("r1", "node", "boom", "main", "chain", "n3", 1),
    m.Output("r1", "main", "chain", "text", "y", (), {"k": [1, 2]}),
    m.Finished("r1", True),
]


def _round_trip(msgs: list[m.Message]) -> list[m.Message]:
    frames = Encoder().encode([wire.pack(x) for x in msgs])
    return [wire.unpack(item) for item in decode([bytes(f) for f in frames])]


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda x: type(x).__name__)
def test_same_meaning_as_to_wire(msg: m.Message) -> None:
    expected = m.from_wire(msgpack.unpackb(msgpack.packb(msg.to_wire()), strict_map_key=False))
    assert _round_trip([msg]) == [expected]


def test_every_message_class_has_a_code() -> None:
    assert {k.cls for k in wire.KINDS} == set(m.MESSAGES.values())
    assert {type(x) for x in SAMPLES} == set(m.MESSAGES.values()) - {m.StatePart}


@pytest.mark.parametrize(
    "tensor",
    [
        torch.arange(6, dtype=torch.float32).reshape(2, 3),  # inline in the header
        torch.tensor(3.5, dtype=torch.bfloat16),  # 0-d, a dtype numpy lacks
        torch.zeros(0, 4, dtype=torch.int64),
        torch.arange(24, dtype=torch.int16).reshape(4, 6)[:, ::2],  # a non-contiguous view
        torch.randn(64, 1024),  # 256 KiB: its own frame
    ],
)
def test_tensors_in_a_batch(tensor: torch.Tensor) -> None:
    msgs = [
        m.Value("r1", 1, "w", 0, "x", "e", None, (), False, tensor),
        m.WalkDone("r1", 1, "w", 0),
        m.StatePart("r1", 1, "LLM", "k", 0, tensor),
    ]
    got = _round_trip(msgs)
    assert [type(x) for x in got] == [m.Value, m.WalkDone, m.StatePart]
    for x in (got[0], got[2]):
        assert x.data.dtype == tensor.dtype and torch.equal(x.data, tensor)
    assert dataclasses.replace(got[0], data=None) == dataclasses.replace(msgs[0], data=None)


def test_bad_input_is_a_codec_error() -> None:
    with pytest.raises(CodecError):
        wire.unpack([999, "x"])
    with pytest.raises(CodecError):
        wire.unpack([wire.KINDS[0].code, "too", "few"])


@pytest.mark.parametrize("ipc", [True, False])
def test_mesh_batches_over_ipc_and_tcp(ipc: bool) -> None:
    owner = Arena.create(slots=2, region=4 << 20, tag="wire")
    arenas = [Arena.attach(owner.name, 2, owner.region, slot=s) for s in (0, 1)]
    tuning = Tuning(ipc=ipc, busy_poll_us=200)
    a, b = (Mesh(r, arena=arenas[r], tuning=tuning) for r in (0, 1))
    try:
        a.connect(1, b.address, ipc=b.ipc_address)
        b.connect(0, a.address, ipc=a.ipc_address)
        assert (b.ipc_address is not None) == ipc
        big = torch.randn(256, 256)  # 256 KiB: through the arena
        sent = [m.Value("r", 1, "w", c, "x", "e", None, (), False, big + c) for c in range(3)]
        a.send_messages(1, [*sent, m.WalkDone("r", 1, "w", 0)])
        a.send(1, {"t": "plain", "n": 1})
        got: list = []
        while len(got) < 5:
            got.extend(b.poll(1000))
        assert got[-1] == {"t": "plain", "n": 1}
        for s, r in zip(sent, got[:3], strict=True):
            assert torch.equal(r.data, s.data) and r.call == s.call
        assert isinstance(got[3], m.WalkDone)
        assert arenas[0].live_blocks == 3
        del got, r
        b.flush_releases()
        for _ in range(50):
            if not arenas[0].live_blocks:
                break
            a.poll(20)
        assert arenas[0].live_blocks == 0
    finally:
        a.close()
        b.close()
        for arena in (*arenas, owner):
            arena.close()
    assert owner.name not in leaked_segments()  # (other runs may own segments meanwhile)
