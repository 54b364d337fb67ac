"""Malformed ZeroMQ traffic for the hostile-input soak (`test_hostile_frames`), run as its own
process (another local process, as an attacker's would be):

    python tests/e2e/frame_fuzz.py TARGETS.json FRAMES SEED

``TARGETS.json`` lists ``{"kind": "inbox" | "client", "address": ...}``; ``secret`` (hex, optional)
also sends frames that carry the deployment's secret but are malformed after it (what a broken
process of the deployment could send). Every target gets ``FRAMES`` messages, from a fresh socket
every `PER_SOCKET` (so a peer that is cut off comes back as a new connection), drawn from:

* random bytes, one frame or several;
* a random 32-byte token and a well-formed message (any protocol's: `Shutdown`, `Peers`, a
  `Value`, a `Submit` ...): structurally plausible, but without the secret;
* well-formed msgpack of the wrong shape: wrong tags, wrong field types, deep nesting, maps,
  huge integers, tensor extensions pointing at frames that are not there or outside the arena;
* mutations (bit flips, truncation, extension) of encodings of real messages;
* for the client port: the same, plus real client messages for requests that do not exist;
* for every TCP endpoint: plain TCP connections sending noise, or a ZMTP greeting then noise.

Prints ``sent N`` per target when done. The run is deterministic for a seed.
"""

from __future__ import annotations

import contextlib
import json
import random
import socket
import sys
import time
from pathlib import Path

import msgpack
import zmq

from wgc_runtime.contract import control as c
from wgc_runtime.contract import messages as m
from wgc_runtime.contract.kinds import Edge, FailKind
from wgc_runtime.host.transport.control_codec import ControlCodec

PER_SOCKET = 250

ANY = ControlCodec(c.INBOX + c.CLIENT_IN)  # encodes any message without tensors
SAMPLES = [
    [c.Shutdown()],
    [c.Peers((c.PeerEntry(1, "tcp://127.0.0.1:1"),))],
    [c.RankDied("rank 1", "a lie", True)],
    [c.GetUsage()],
    [m.Value("r", 1, "main", 0, "x", Edge.INPUT, None, (), False, [1.0, 2.0])],
    [m.StartWalk("r", 1, "main", "run", (("steps", 3),))],
    [m.Release("r", "finished")],
    [m.Failed("r", FailKind.NODE, "boom")],
    [c.Submit("fuzz", (c.InputSegment("x", [1.0, 2.0, 3.0, 4.0]),), ("tensor",), {"steps": 2})],
    [c.Cancel("fuzz")],
    [c.Ping()],
    [c.GetStats()],
]
ENCODED = [ANY.encode(s)[0] for s in SAMPLES]
# what a mutation may turn into a valid message without harm (a request nobody has): the only
# bodies sent *with* the secret, which makes a well-formed `Shutdown` or `Peers` a real one
HARMLESS = [ANY.encode(s)[0] for s in SAMPLES[4:8]]


def pack(obj: object) -> bytes:
    """msgpack's bytes for ``obj`` (its stubs allow None: that is for a stream packer)."""
    raw = msgpack.packb(obj)
    assert isinstance(raw, bytes)
    return raw


def deep(depth: int) -> bytes:
    return b"\x91" * depth + b"\xc0"


def wrong_shapes(rng: random.Random, trusted: bool = False) -> bytes:
    choice = rng.choice([0, 1, 3, 4, 5, 6] if trusted else range(8))
    if choice == 0:
        return deep(rng.choice([10, 1000, 100_000]))
    if choice == 1:
        return pack({"t": "shutdown", "x": [1, 2]})
    if choice == 2:
        return pack([[rng.randrange(-5, 200), *([0] * rng.randrange(12))]])
    if choice == 3:
        return pack([[8, "r", 2**63, None, "x" * 10_000]])
    if choice == 4:  # a tensor frame reference past the frames sent
        ref = msgpack.packb([rng.randrange(-3, 9), "f32", [rng.randrange(-4, 1 << 40)]])
        return pack([[8, "r", 1, "w", 0, "x", "input", None, [], False,
                               msgpack.ExtType(1, ref)]])  # fmt: skip
    if choice == 5:  # an arena descriptor outside any region
        desc = msgpack.packb([rng.randrange(-2, 9), 1 << 40, 16, "f32", [4], 1])
        return pack([[8, "r", 1, "w", 0, "x", "input", None, [], False,
                               msgpack.ExtType(2, desc)]])  # fmt: skip
    if choice == 6:  # an inline tensor whose header lies
        return pack([[8, "r", 1, "w", 0, "x", "input", None, [], False,
                               msgpack.ExtType(3, bytes(rng.randrange(64)))]])  # fmt: skip
    return pack([[rng.randrange(100), rng.random(), [None] * rng.randrange(40)]])


def mutate(rng: random.Random, raw: bytes) -> bytes:
    b = bytearray(raw)
    for _ in range(rng.randrange(1, 6)):
        op = rng.randrange(3)
        if op == 0 and b:
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1 and b:
            del b[rng.randrange(len(b)) :]
        else:
            b += rng.randbytes(rng.randrange(1, 16))
    return bytes(b)


def body(rng: random.Random) -> list[bytes]:
    """One malformed message body (the frames after any token)."""
    kind = rng.randrange(4)
    if kind == 0:
        return [rng.randbytes(rng.randrange(0, 200)) for _ in range(rng.randrange(1, 4))]
    if kind == 1:
        return [wrong_shapes(rng)]
    if kind == 2:
        return [mutate(rng, rng.choice(ENCODED))]
    return [rng.choice(ENCODED), rng.randbytes(rng.randrange(64))]  # a stray extra frame


def trusted_body(rng: random.Random) -> list[bytes]:
    """A malformed body to send after the secret: never one that decodes into a control
    message (a well-formed `Shutdown` with the secret is a real one)."""
    kind = rng.randrange(3)
    if kind == 0:
        return [rng.randbytes(rng.randrange(0, 200))]
    if kind == 1:
        return [wrong_shapes(rng, trusted=True)]
    return [mutate(rng, rng.choice(HARMLESS))]


def inbox_frames(rng: random.Random, secret: bytes | None) -> list[bytes]:
    kind = rng.randrange(5)
    if kind == 0:  # raw garbage
        return [rng.randbytes(rng.randrange(0, 300))]
    if kind == 1:  # plausible, no secret
        return [rng.randbytes(32), rng.choice(ENCODED)]
    if kind == 2:  # a token of the wrong length
        return [rng.randbytes(rng.randrange(0, 64)), *body(rng)]
    if kind == 3 and secret is not None:  # the secret, then garbage
        return [secret, *trusted_body(rng)]
    return [rng.randbytes(32), *body(rng)]


def client_frames(rng: random.Random) -> list[bytes]:
    kind = rng.randrange(4)
    if kind == 0:
        return [rng.randbytes(rng.randrange(0, 300))]
    if kind == 1:  # a real client message for nobody's request (a cancel, a ping, stats)
        return [ANY.encode([rng.choice([c.Cancel(f"nobody-{rng.random()}"), c.Ping()])])[0]]
    return body(rng)


def fuzz(target: dict, frames: int, rng: random.Random, secret: bytes | None) -> int:
    ctx = zmq.Context.instance()
    sent = 0
    while sent < frames:
        sock = ctx.socket(zmq.DEALER if target["kind"] == "client" else zmq.PUSH)
        sock.setsockopt(zmq.LINGER, 200)
        sock.setsockopt(zmq.SNDTIMEO, 200)
        sock.setsockopt(zmq.SNDHWM, 1000)
        sock.connect(target["address"])
        for _ in range(min(PER_SOCKET, frames - sent)):
            msg = client_frames(rng) if target["kind"] == "client" else inbox_frames(rng, secret)
            with contextlib.suppress(zmq.Again):  # cut off (or slow): still a frame sent
                sock.send_multipart(msg)
            sent += 1
        sock.close()
    return sent


def raw_stream(address: str, connections: int, rng: random.Random) -> int:
    """Plain stream connections (TCP, or Unix for an ``ipc://`` endpoint) that send bytes no
    ZeroMQ peer would: pure noise, or a ZMTP greeting's signature followed by noise (a broken or
    hostile handshake)."""
    for _ in range(connections):
        noise = rng.randbytes(rng.randrange(1, 512))
        if rng.random() < 0.5:
            noise = b"\xff" + bytes(8) + b"\x7f" + bytes([3, rng.randrange(256)]) + noise
        with contextlib.suppress(OSError), _connect(address) as s:
            s.sendall(noise)
    return connections


def _connect(address: str) -> socket.socket:
    if address.startswith("ipc://"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(5)
        try:
            s.connect(address[len("ipc://") :])
        except OSError:
            s.close()
            raise
        return s
    host, port = address[len("tcp://") :].rsplit(":", 1)
    return socket.create_connection((host, int(port)), 5)


def main() -> None:
    targets = json.loads(Path(sys.argv[1]).read_text())
    frames, seed = int(sys.argv[2]), int(sys.argv[3])
    secret = bytes.fromhex(targets.pop(0)["secret"]) if "secret" in targets[0] else None
    rng = random.Random(seed)
    t0 = time.monotonic()
    for target in targets:
        print(f"sent {fuzz(target, frames, rng, secret)} to {target['address']}", flush=True)
        if target["address"].startswith("tcp://") or target["kind"] == "client":
            n = raw_stream(target["address"], max(1, frames // 20), rng)
            print(f"raw {n} connections to {target['address']}", flush=True)
    print(f"done in {time.monotonic() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
