"""The one wire format: every message a socket carries is a typed msgspec Struct, decoded with
validation into what that socket accepts; tensors intact; malformed frames dropped, not fatal."""

from __future__ import annotations

import msgpack
import msgspec
import pytest
import torch

from wgc_runtime.contract import control as c
from wgc_runtime.contract import messages as m
from wgc_runtime.contract.kinds import DestKind, Edge, FailKind
from wgc_runtime.contract.spec import Dest
from wgc_runtime.host.transport.arena import Arena, leaked_segments
from wgc_runtime.host.transport.codec import Codec, CodecError
from wgc_runtime.host.transport.sockets import ClientPort, Mesh
from wgc_runtime.host.transport.tuning import Tuning

DEST = Dest(kind=DestKind.CALL, edge=Edge.LOOP_INIT, rank=1, ranks=(0, 1))
SAMPLES: list[m.Message] = [
    m.ForgetSession("chat-1"),
    m.StartWalk("r1", 3, "chain", "main", (("temperature", 0.5), ("voice", "tara"))),
    m.ForwardPersisted("r1", 3, "chain", "main", "x", "kv", (DEST,)),
    m.StreamDone("r1", "tokens"),
    m.StreamAbandon("r1", "tokens"),
    m.SkipChunk("r1", "tokens", 4),
    m.Release("r1", "cancelled"),
    m.ExportState("r1", 3, "LLM", (0,), (1, 2)),
    m.CopyKv("r1", 4, "LLM", "cfg_text", "LLM", (0,), (1,)),
    m.Value("r1", 3, "chain", 7, "x", Edge.INTERNAL, "steps", (("steps", 2), ("inner", 0))),
    m.Value("r1", 3, "chain", 7, "x", Edge.INTERNAL, None, (), True, None),
    m.Until("r1", 3, "chain", "steps", (1, 2), 5, True),
    m.StreamItem("r1", "tokens", 9, 0, "text data"),
    m.StreamItem("r1", "tokens", 1, 0, "first", (("max_tokens", 70), ("voice", "tara"))),
    m.StreamItems("tokens", 0, ("r1",), (9,), torch.tensor([[7]])),
    m.StreamAck("r1", "tokens", 9, 1),
    m.StreamAcks("tokens", 1, ("r1", "r2"), (9, 3)),
    m.StatePart("r1", 3, "LLM", "int:x", 0, 5),
    m.StateEnd("r1", 3, "LLM", 0, 2),
    m.WalkDone("r1", 3, "chain", 1),
    m.StateImported("r1", 3, "LLM", 2),
    m.ChunkReady("r1", "tokens", 2, False, True),
    m.ChunksDone("r1", "tokens", 9, 1),
    m.ClientOut("r1", 3, "chain", "main", "tensor", "x10", (1, 2), [1, [2, 3]]),
    m.Emitted("r1\x1f2\x1fclient-1-ab", 3, 1),
    m.Output("r1\x1f2\x1fclient-1-ab", "main", "chain", "tensor", "x10", (1,), 7, True),
    m.Failed("r1", FailKind.NODE, "boom", "main", "chain", "n3", 1),
    c.Hello(0, "tcp://127.0.0.1:5", "127.0.0.1", None),
    c.Peers((c.PeerEntry("conductor", "tcp://127.0.0.1:6"), c.PeerEntry(1, "tcp://h:7", "h"))),
    c.Progress(1, "loading"),
    c.Ready("conductor", 1.5),
    c.StartFailed(0, "ImportError: x"),
    c.Shutdown(),
    c.RankDied("rank 1", "killed"),
    c.GetUsage(),
    c.Usage(1, 2, (("LLM", 3),), 4, 1),
    c.ArenaFree(((64, 3), (128, 4))),
]
INBOX = Codec(c.INBOX)
SECRET = b"s" * 32


def _round_trip(codec: Codec, msgs: list) -> list:
    return codec.decode([bytes(f) for f in codec.encode(msgs)])


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda x: type(x).__name__)
def test_every_inbox_message_round_trips_typed(msg: m.Message) -> None:
    (back,) = _round_trip(INBOX, [msg])
    assert type(back) is type(msg) and back == msg


def test_every_inbox_message_class_is_sampled_and_tags_are_unique() -> None:
    assert {type(x) for x in SAMPLES} == set(c.INBOX)
    every = {*c.INBOX, *c.CLIENT_IN, *c.CLIENT_OUT, c.InputSegment, c.PeerEntry}
    tags = [cls.__struct_config__.tag for cls in every]
    assert len(tags) == len(set(tags))


def test_client_messages_round_trip_and_stay_on_their_socket() -> None:
    client_in, client_out = Codec(c.CLIENT_IN), Codec(c.CLIENT_OUT)
    seg = c.InputSegment("text", "hello", {"goal": torch.ones(2)})
    submit = c.Submit("rid", (seg,), ("audio",), {"n": 3})
    (back,) = _round_trip(client_in, [submit])
    assert back.request == "rid" and back.want == ("audio",) and back.options == {"n": 3}
    assert torch.equal(back.inputs[0].fields["goal"], torch.ones(2))
    outs = [c.Accepted("rid", True), m.Output("rid", "f", "w", "audio", "a", (1,), None)]
    assert (
        _round_trip(client_out, [*outs, c.Alive("rid"), m.Finished("rid", True), c.Pong()])[:2]
        == outs
    )
    with pytest.raises(CodecError, match="invalid message"):
        _round_trip(client_in, [m.WalkDone("r", 1, "w", 0)])  # a core message at the door
    with pytest.raises(CodecError, match="invalid message"):
        _round_trip(INBOX, [submit])  # a client message at an inbox


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
        m.Value("r1", 1, "w", 0, "x", Edge.INPUT, None, (), False, tensor),
        m.WalkDone("r1", 1, "w", 0),
        m.StatePart("r1", 1, "LLM", "k", 0, tensor),
    ]
    got = _round_trip(INBOX, msgs)
    assert [type(x) for x in got] == [m.Value, m.WalkDone, m.StatePart]
    for x in (got[0], got[2]):
        assert x.data.dtype == tensor.dtype and torch.equal(x.data, tensor)
    assert got[1] == msgs[1] and got[0].call == 0 and got[0].edge is Edge.INPUT


@pytest.mark.parametrize(
    "frames",
    [
        [b""],
        [b"\xc1"],  # a never-used msgpack byte
        [msgpack.packb({"t": "l.shutdown"})],  # the old dict form
        [msgpack.packb([[999, "x"]])],  # an unknown tag
        [msgpack.packb([[14, "r", 1]])],  # WalkDone with too few fields
        [msgpack.packb([[14, "r", "one", "w", 0]])],  # a field of the wrong type
        [msgpack.packb([[8, "r", 1, "w", 0, "x", "not-an-edge"]])],  # an unknown enum value
        [
            msgpack.packb(
                [
                    [
                        8,
                        "r",
                        1,
                        "w",
                        0,
                        "x",
                        "input",
                        None,
                        [],
                        False,
                        msgpack.ExtType(1, msgpack.packb([5, "f32", [2]])),
                    ]
                ]
            )
        ],
        [
            msgpack.packb(
                [
                    [
                        8,
                        "r",
                        1,
                        "w",
                        0,
                        "x",
                        "input",
                        None,
                        [],
                        False,
                        msgpack.ExtType(3, b"\x07\x01" + (-4).to_bytes(8, "little", signed=True)),
                    ]
                ]
            )
        ],
    ],
    ids=["empty", "garbage", "dict", "tag", "short", "type", "enum", "frame", "negative-shape"],
)
def test_malformed_frames_are_codec_errors(frames) -> None:
    with pytest.raises(CodecError):
        INBOX.decode(frames)


@pytest.mark.parametrize("ipc", [True, False])
def test_mesh_batches_over_ipc_and_tcp(ipc: bool) -> None:
    owner = Arena.create(slots=2, region=4 << 20, tag="wire")
    arenas = [Arena.attach(owner.name, 2, owner.region, slot=s) for s in (0, 1)]
    tuning = Tuning(ipc=ipc, busy_poll_us=200)
    a, b = (Mesh(r, arena=arenas[r], tuning=tuning, secret=SECRET) for r in (0, 1))
    try:
        a.connect(1, b.address, ipc=b.ipc_address)
        b.connect(0, a.address, ipc=a.ipc_address)
        assert (b.ipc_address is not None) == ipc
        big = torch.randn(256, 256)  # 256 KiB: through the arena
        sent = [
            m.Value("r", 1, "w", k, "x", Edge.INPUT, None, (), False, big + k) for k in range(3)
        ]
        a.send(1, [*sent, m.WalkDone("r", 1, "w", 0)])
        a.send(1, [c.Shutdown()])
        got: list = []
        while len(got) < 5:
            got.extend(b.poll(1000))
        assert got[-1] == c.Shutdown()
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


def test_a_bad_frame_is_dropped_and_the_next_one_arrives() -> None:
    import zmq

    owner = Arena.create(slots=1, region=1 << 20, tag="bad")
    arena = Arena.attach(owner.name, 1, owner.region, slot=0)
    b = Mesh(0, arena=arena, tuning=Tuning(ipc=False, busy_poll_us=0), secret=SECRET)
    sock = zmq.Context.instance().socket(zmq.PUSH)
    try:
        sock.connect(b.address)
        for junk in (b"random bytes", msgpack.packb({"t": "l.shutdown"})):
            sock.send_multipart([SECRET, junk])
        bogus = [0, 1 << 40, 16, "f32", [4], 1]  # outside the region
        value = [8, "r", 1, "w", 0, "x", "input", None, [], False,
                 msgpack.ExtType(2, msgpack.packb(bogus))]  # fmt: skip
        sock.send_multipart([SECRET, msgpack.packb([value])])
        done = Codec(c.INBOX).encode([m.WalkDone("r", 1, "w", 0)])
        sock.send_multipart([SECRET, *done])
        got: list = []
        for _ in range(50):
            got.extend(b.poll(100))
            if got:
                break
        assert got == [m.WalkDone("r", 1, "w", 0)] and b.rejected == 3
    finally:
        sock.close(0)
        b.close()
        arena.close()
        owner.close()


@pytest.mark.parametrize("ipc", [True, False])
def test_only_the_deployment_steers_the_deployment(ipc: bool) -> None:
    """A message without the deployment's secret (a `Shutdown` from anyone who can reach the
    port or socket) is dropped and counted; with it, it arrives."""
    import zmq

    b = Mesh(0, tuning=Tuning(ipc=ipc, busy_poll_us=0), secret=SECRET)
    sock = zmq.Context.instance().socket(zmq.PUSH)
    try:
        sock.connect(b.ipc_address if ipc else b.address)
        shutdown = Codec(c.INBOX).encode([c.Shutdown()])
        for frames in (shutdown, [b"x" * 32, *shutdown], [b"", *shutdown], [b"s" * 31, *shutdown]):
            sock.send_multipart(frames)
        sock.send_multipart([SECRET, *Codec(c.INBOX).encode([m.WalkDone("r", 1, "w", 0)])])
        got: list = []
        for _ in range(50):
            got.extend(b.poll(100))
            if got:
                break
        assert got == [m.WalkDone("r", 1, "w", 0)] and b.unauthenticated == 4
    finally:
        sock.close(0)
        b.close()


def test_inbox_sockets_are_private_files() -> None:
    import os
    import stat

    b = Mesh(0, tuning=Tuning(ipc=True), secret=SECRET)
    try:
        assert b.ipc_address is not None and not b.ipc_address.startswith("ipc://@")
        path = b.ipc_address.removeprefix("ipc://")
        folder = os.path.dirname(path)
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
        assert os.path.exists(path)
    finally:
        b.close()
    assert not os.path.exists(path) and not os.path.exists(folder)


def test_the_client_port_drops_what_is_not_a_client_message() -> None:
    import zmq

    port = ClientPort()
    sock = zmq.Context.instance().socket(zmq.DEALER)
    try:
        sock.connect(port.address)
        sock.send(b"\x00\x01junk")
        sock.send_multipart(Codec(c.CLIENT_IN).encode([c.Ping()]))
        got: list = []
        for _ in range(50):
            if port.sock.poll(100):
                got.extend(port.recv_all())
            if got:
                break
        assert [msg for _, msg in got] == [c.Ping()] and port.rejected == 1
    finally:
        sock.close(0)
        port.close()


def _item(rid: str, seq: int, value: int = 0, stream: str = "tokens", **kw) -> m.StreamItem:
    return m.StreamItem(rid, stream, seq, 0, torch.tensor([value]), **kw)


def test_consecutive_stream_items_travel_as_one_message_and_come_back_in_order() -> None:
    done = m.StreamDone("r9", "tokens")
    msgs: list[m.Message] = [
        _item("r1", 1, 10, options=(("voice", "tara"),)),  # a header: sent as it is
        _item("r1", 2, 11),
        _item("r2", 3, 12),
        _item("r1", 4, 13),
        done,  # ends the run: nothing moves past another message
        _item("r2", 5, 14),
        _item("r3", 6, 15, stream="other"),  # another stream: a run of one stays an item
        m.StreamItem("r4", "other", 7, 0, torch.zeros(600)),  # too large to stack
        m.StreamItem("r4", "other", 8, 0, torch.zeros(600)),
    ]
    packed = m.pack_items(msgs)
    kinds = [type(x).__name__ for x in packed]
    assert kinds == [
        "StreamItem", "StreamItems", "StreamDone", "StreamItem", "StreamItem", "StreamItem",
        "StreamItem",
    ]  # fmt: skip
    run = packed[1]
    assert isinstance(run, m.StreamItems)
    assert run.requests == ("r1", "r2", "r1") and run.seqs == (2, 3, 4)
    (back,) = _round_trip(INBOX, [run])  # one tensor on the wire for the three items
    unpacked = m.unpack_items(back)
    assert [(x.request, x.seq, int(x.data[0])) for x in unpacked] == [
        ("r1", 2, 11),
        ("r2", 3, 12),
        ("r1", 4, 13),
    ]
    assert all(x.data.shape == (1,) and x.options is None for x in unpacked)
    flat = [y for x in packed for y in (m.unpack_items(x) if isinstance(x, m.StreamItems) else [x])]
    assert [(type(x), getattr(x, "seq", None)) for x in flat] == [
        (type(x), getattr(x, "seq", None)) for x in msgs
    ]


def test_stream_items_whose_lengths_disagree_are_refused() -> None:
    with pytest.raises(ValueError, match="one of each per item"):
        m.StreamItems("tokens", 0, ("r1", "r2"), (1,), torch.zeros(2, 1))
    with pytest.raises(ValueError, match="one of each per item"):
        m.StreamItems("tokens", 0, ("r1",), (1,), "not a tensor")
    bad = m.StreamItems("tokens", 0, ("r1", "r2"), (1, 2), torch.zeros(2, 1))
    frames = INBOX.encode([bad])
    cut = msgspec.msgpack.decode(frames[0])  # the same message with one seq missing
    cut[0][4] = cut[0][4][:1]
    with pytest.raises(CodecError):
        INBOX.decode([msgspec.msgpack.encode(cut)])
