"""Hostile and malformed traffic at a conductor's ZeroMQ client port, and what it costs the
server (issue 33: every probe refused in under 100 ms of server time).

The cost is the conductor process's CPU time (``/proc/<pid>/stat``: user + system, every thread,
libzmq's I/O thread and the ZAP handler's included) over ``n`` probes, less what it spends idle
over the same wall time (its poll loop), per probe. The probe's client work (encoding a body,
connecting) runs in this process and is not counted. `conductor_of` finds the conductor among
`wgc serve`'s processes by the port it listens on.

Probes (`PROBES`: name -> (how many, one probe)):

* requests the door refuses (kind ``rejected``, answered): 20,000 segments, a 1.1 M-character
  text, a 60 MB text (under the port's frame cap, so it is received and decoded), 7.5 M token
  ids as one tensor, ``max_tokens`` 0;
* frames that never decode (dropped, the sender cut off after a few): one garbage frame from a
  fresh connection, 100 from one;
* a connection that sends nothing, and a frame past the port's ``MAXMSGSIZE`` (libzmq drops
  the connection before reading it);
* for a CURVE port (`curve_probes`): a plain client and one with a wrong key (refused during
  the handshake, by the ZAP handler).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import zmq

from tests.e2e.runtime_support import listening
from wgc_runtime.contract import control as c
from wgc_runtime.host.client import Client, RequestFailed
from wgc_runtime.host.transport.codec import Codec
from wgc_runtime.host.transport.sockets import CLIENT_FRAME_BYTES

TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Cost:
    """One probe kind's server cost: CPU and wall milliseconds per probe over ``probes``."""

    name: str
    probes: int
    cpu_ms: float
    wall_ms: float


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime: fields 14 and 15


def rss_mb(pid: int) -> float:
    """Resident memory of process ``pid``, MB."""
    with open(f"/proc/{pid}/status") as f:
        kb = next(int(x.split()[1]) for x in f if x.startswith("VmRSS:"))
    return kb / 1024


def descendants(pid: int) -> list[int]:
    """Every process under ``pid`` (Linux)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError), open(f"/proc/{entry}/stat") as f:
            ppid = int(f.read().rpartition(")")[2].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def conductor_of(root: int, address: str) -> int:
    """The process under ``root`` that listens on client ``address`` (``tcp://host:port``)."""
    port = int(address.rpartition(":")[2])
    for pid in descendants(root):
        with contextlib.suppress(OSError):
            if any(p == port for _, p in listening(pid)):
                return pid
    raise LookupError(f"no process under {root} listens on {address}")


def idle_rate(pid: int, seconds: float = 2.0) -> float:
    """CPU seconds per second that ``pid`` spends with nothing to do."""
    time.sleep(0.5)  # past any busy-polling after the last activity
    t0, c0 = time.monotonic(), cpu_seconds(pid)
    time.sleep(seconds)
    return (cpu_seconds(pid) - c0) / (time.monotonic() - t0)


def measure(
    pid: int, name: str, n: int, probe: Callable[[], None], idle: float, settle: float = 0.5
) -> Cost:
    """``probe`` run ``n`` times: the conductor's CPU per probe above its ``idle`` rate,
    ``settle`` seconds after the last (what a probe without an answer left the server to do:
    a frame still arriving, a dropped connection)."""
    time.sleep(0.3)
    t0, c0 = time.monotonic(), cpu_seconds(pid)
    for _ in range(n):
        probe()
    time.sleep(settle)
    wall, cpu = time.monotonic() - t0, cpu_seconds(pid) - c0
    return Cost(name, n, max(0.0, cpu - idle * wall) * 1000 / n, wall * 1000 / n)


def _refused(address: str, inputs, options=None) -> Callable[[], None]:
    def probe() -> None:
        with Client(address) as client:
            try:
                client.submit(inputs, ["text"], options or {}, deadline=60).collect()
            except RequestFailed as exc:
                assert exc.error.kind == "rejected", exc
                return
            raise AssertionError("the probe was answered, not refused")

    return probe


def raw_probe(address: str, frames: list[bytes], times: int = 1, key=None) -> Callable[[], None]:
    """A fresh DEALER connection that sends ``frames`` ``times`` and closes."""

    def probe() -> None:
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 30_000)  # sent in the background after `close`
        if key is not None:
            key.apply(sock)
        sock.connect(address)
        for _ in range(times if frames else 0):
            with contextlib.suppress(zmq.Again):
                sock.send_multipart(frames, zmq.NOBLOCK)
        if not frames:
            time.sleep(0.02)  # connected (the handshake done), then gone
        sock.close()

    return probe


def probes(address: str) -> dict[str, tuple[int, Callable[[], None]]]:
    """The plain port's probes (see the module docstring): name -> (how many, probe)."""
    garbage = [np.random.default_rng(0).bytes(1000)]
    huge = [b"\x00" * (CLIENT_FRAME_BYTES + 1)]
    tokens = np.ones(7_500_000, dtype=np.int64)  # 60 MB of token ids
    return {
        "20,000 segments": (20, _refused(address, [("text", "a")] * 20_000)),
        "1.1 M characters": (20, _refused(address, [("text", "x" * 1_100_000)])),
        "60 MB text": (5, _refused(address, [("text", "x" * 60_000_000)])),
        "60 MB of token ids": (5, _refused(address, [("text", tokens)])),
        "max_tokens 0": (20, _refused(address, [("text", "hi")], {"max_tokens": 0})),
        "garbage frame": (50, raw_probe(address, garbage)),
        "100 garbage frames": (10, raw_probe(address, garbage, times=100)),
        "connect, send nothing": (50, raw_probe(address, [])),
        "frame past MAXMSGSIZE": (2, raw_probe(address, huge)),
    }


def curve_probes(address: str, server_public: str) -> dict[str, tuple[int, Callable[[], None]]]:
    """A CURVE port's (``server_public``: its key, which a client must know to even start the
    handshake): connections without a key, and with a key the deployment never made."""
    from wgc_runtime.host.transport.keys import ClientKey

    public, secret = (k.decode() for k in zmq.curve_keypair())
    stranger = ClientKey(server_public, public, secret)
    submit = Codec(c.CLIENT_IN).encode([c.Submit("probe", (), ("text",))])
    return {
        "plain client at a CURVE port": (50, raw_probe(address, submit)),
        "unknown CURVE key": (50, raw_probe(address, submit, key=stranger)),
    }


def run_all(pid: int, table: dict[str, tuple[int, Callable[[], None]]]) -> Iterator[Cost]:
    """Every probe of ``table`` measured against conductor ``pid``, one after the other."""
    idle = idle_rate(pid)
    for name, (n, probe) in table.items():
        yield measure(pid, name, n, probe, idle)
