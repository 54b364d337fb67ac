"""Hostile and malformed traffic at a conductor's ZeroMQ client port, and what it costs the
server (issue 33: every probe refused in under 100 ms of server time).

The cost is the conductor process's CPU time (``/proc/<pid>/stat``: user + system, every thread,
libzmq's I/O thread and the ZAP handler's included) over ``n`` probes, less what it spends idle
over the same wall time (its poll loop), per probe. The probe's client work (encoding a body,
connecting) runs in this process and is not counted. `conductor_of` finds the conductor among
`wgc serve`'s processes by the port it listens on (TCP, or its ``ipc://`` socket's path).

Probes (`PROBES`: name -> (how many, one probe)):

* requests the door refuses (kind ``rejected``, answered): 20,000 segments, a 1.1 M-character
  text, a 60 MB text (under the port's frame cap, so it is received and decoded), 7.5 M token
  ids as one tensor, ``max_tokens`` 0;
* frames that never decode (dropped, the sender cut off after a few): one garbage frame from a
  fresh connection, 100 from one;
* a connection that sends nothing, and a frame past the port's ``MAXMSGSIZE`` (libzmq drops
  the connection before reading it);
* a loopback deployment's port is an ``ipc://`` socket in its private folder (mode 0700):
  another user's process (`other_user_probe`, uid 65534: needs root here) cannot connect at
  all, whatever it would send;
* for a CURVE port (`curve_probes`): a plain client and one with a wrong key, sending 1 KB to
  4 frames at ``MAXMSGSIZE`` (refused during the handshake, by the ZAP handler, before a frame of
  the message is read: `stranger_probe` waits for the refusal), and (`holder_probes`) the key
  holder's frames at and past the port's frame cap (the door's byte limit: `frame_limit`).
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import zmq
from zmq.utils.monitor import recv_monitor_message

from tests.e2e.runtime_support import listening
from wgc_runtime.host.client import Client, RequestFailed
from wgc_runtime.host.transport.keys import ClientKey
from wgc_runtime.host.transport.sockets import CLIENT_FRAME_BYTES

NOBODY = 65534  # the other user of `other_user_probe`
FAILED_HANDSHAKE = (
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)

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
    """The process under ``root`` that listens on client ``address`` (``tcp://host:port`` or
    ``ipc://path``)."""
    path = address.removeprefix("ipc://")
    port = int(address.rpartition(":")[2]) if path == address else -1
    for pid in descendants(root):
        with contextlib.suppress(OSError):
            if any(p == port for _, p in listening(pid)) or path in unix_listening(pid):
                return pid
    raise LookupError(f"no process under {root} listens on {address}")


def unix_listening(pid: int) -> set[str]:
    """The paths of the Unix sockets process ``pid`` listens on (Linux)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    with open("/proc/net/unix") as f:
        rows = [line.split() for line in f.readlines()[1:]]
    return {r[7] for r in rows if len(r) > 7 and r[6] in inodes and r[5] == "01"}  # LISTEN


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
                sock.send_multipart(frames, zmq.NOBLOCK, copy=False)  # big frames: not copied
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


def sizes(frame_cap: int) -> dict[str, list[bytes]]:
    """What a stranger sends (name -> frames): a request's worth up to 4 frames at the cap."""
    frame = b"\x01" * (frame_cap - 1024)
    return {"1 KB": [b"\x01" * 1024], "60 MB": [b"\x01" * 60_000_000], "a frame at the cap":
            [frame], "4 frames at the cap": [frame] * 4}  # fmt: skip


def stranger_probe(address: str, frames: list[bytes], key: ClientKey | None) -> Callable[[], None]:
    """A CURVE port's stranger (no key, or ``key``, one it never made) sends ``frames``; the
    probe waits until the handshake is refused (an AssertionError if it is not within 30 s)."""

    def probe() -> None:
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        if key is not None:
            key.apply(sock)
        monitor = sock.get_monitor_socket()
        sock.connect(address)
        with contextlib.suppress(zmq.Again):
            sock.send_multipart(frames, zmq.NOBLOCK, copy=False)
        event = 0
        try:
            while not event & FAILED_HANDSHAKE and monitor.poll(30_000):
                event = recv_monitor_message(monitor)["event"]
                assert event != zmq.EVENT_HANDSHAKE_SUCCEEDED, "a stranger was let in"
        finally:
            sock.disable_monitor()
            monitor.close(0)
            sock.close(0)
        assert event & FAILED_HANDSHAKE, f"no refusal, last event {event}"

    return probe


def curve_probes(
    address: str, key: ClientKey, frame_cap: int
) -> dict[str, tuple[int, Callable[[], None]]]:
    """A CURVE port's (``key``: the deployment's client key; ``frame_cap``: the port's
    ``MAXMSGSIZE``): strangers without a key and with a key the deployment never made, sending
    every size."""
    public, secret = (k.decode() for k in zmq.curve_keypair())
    stranger = ClientKey(key.server_public, public, secret)
    table: dict[str, tuple[int, Callable[[], None]]] = {}
    every = sizes(frame_cap)
    for size, frames in every.items():
        n = 20 if len(frames[0]) < 1 << 20 else 3
        table[f"no key, {size}"] = (n, stranger_probe(address, frames, None))
        table[f"unknown key, {size}"] = (n, stranger_probe(address, frames, stranger))
    return table


def holder_probes(
    address: str, key: ClientKey, frame_cap: int
) -> dict[str, tuple[int, Callable[[], None]]]:
    """The key holder's garbage at a CURVE port: a frame at its cap, 4 in one message (received
    and decrypted whole before the conductor sees them), a frame past it (dropped unread). Sent
    in the background after the probe returns: measure with a long ``settle``."""
    frame = [b"\x01" * (frame_cap - 1024)]
    past = [b"\x01" * (frame_cap + 1)]
    return {
        "key holder, a frame at the cap": (3, raw_probe(address, frame, key=key)),
        "key holder, 4 frames at the cap": (1, raw_probe(address, frame * 4, key=key)),
        "key holder, a frame past the cap": (3, raw_probe(address, past, key=key)),
    }


def other_user_probe(address: str, size: int, count: int) -> Callable[[], None]:
    """A process of another user (a child forked here that becomes uid `NOBODY`: this process
    must be root) connects to ``address`` (an ``ipc://`` port in its owner's private folder) and,
    were it let in, would send ``count`` frames' worth of ``size`` bytes; an AssertionError if it
    connects."""
    path = address.removeprefix("ipc://")

    def probe() -> None:
        pid = os.fork()
        if pid == 0:  # the child: only system calls, then `_exit`
            code = 3
            try:
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                    sock.settimeout(5)
                    try:
                        sock.connect(path)
                    except PermissionError:
                        code = 0  # refused by the kernel: nothing reached the conductor
                    else:
                        code = 1
                        sock.sendall(b"\x01" * size * count)
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        assert code == 0, f"another user's process {'connected' if code == 1 else 'failed'}"

    return probe


def other_user_probes(address: str, frame_cap: int) -> dict[str, tuple[int, Callable[[], None]]]:
    """`other_user_probe` with the sizes of `sizes`."""
    shapes = {"1 KB": (1024, 1), "60 MB": (60_000_000, 1), "a frame at the cap":
              (frame_cap - 1024, 1), "4 frames at the cap": (frame_cap - 1024, 4)}  # fmt: skip
    return {f"another user, {k}": (3, other_user_probe(address, *v)) for k, v in shapes.items()}


def run_all(
    pid: int, table: dict[str, tuple[int, Callable[[], None]]], settle: float = 0.5
) -> Iterator[Cost]:
    """Every probe of ``table`` measured against conductor ``pid``, one after the other."""
    idle = idle_rate(pid)
    for name, (n, probe) in table.items():
        yield measure(pid, name, n, probe, idle, settle)
