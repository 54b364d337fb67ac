"""How the transport's sockets are made: where they listen (`bind_address`: loopback unless the
placement names hosts; an inbox's private ``ipc://`` socket, `IpcPath`), the options every socket
gets (`tune`), the deployment's secret (`new_secret`), the codec a socket uses by default, and
the names the rest of the transport shares (`Peer`, `TransportError`, the limits). See
`wgc_runtime.host.transport.sockets` for the whole picture.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import socket
import sys
import tempfile
from collections.abc import Iterable, Sequence
from typing import Any, Protocol, TypeVar, cast

import zmq

LOOPBACK = {"127.0.0.1", "localhost", "::1", ""}
WILDCARD = {"0.0.0.0", "*", "::"}
SEND_TIMEOUT_MS = 5000
HWM = 100_000
# ZMQ_MAXMSGSIZE of every socket: between processes of the deployment (a tensor too large for
# the arena travels inline), and from a client (a request's frames: its JSON body is at most
# `Limits.request_bytes`, 64 MiB, and decodes to no more than 4x that as tensors)
MAX_FRAME_BYTES = 1 << 32

Peer = int | str  # a rank, "conductor" or "launcher"

# plain ints: pyzmq's enum flags cost a Python-level `Flag.__and__` (~1 µs) per use on the hot path
EVENTS, POLLIN, RCVMORE = int(zmq.EVENTS), int(zmq.POLLIN), int(zmq.RCVMORE)
NOBLOCK = int(zmq.NOBLOCK)


class TransportError(RuntimeError):
    """A peer cannot be reached (its queue is full past the send deadline, or it is gone)."""


class FrameCodec(Protocol):
    """What a mesh encodes and decodes with (`codec.Codec`; the launcher's is tensor-free)."""

    def encode(self, msg: Any, place: Any = None) -> list[Any]: ...

    def decode(self, frames: Sequence[Any], resolve: Any = None) -> Any: ...


_S = TypeVar("_S", bound=zmq.Socket)


def watch(sock: _S, events: int) -> _S:
    """``sock.get_monitor_socket(events)`` at an inproc address of its own. pyzmq's default names
    the address by the socket's file descriptor, and a closed socket's monitor endpoint can
    outlive the descriptor (libzmq's reaper unbinds it later), so a new socket reusing the
    number could not be watched ("Address already in use": seen with many clients in threads)."""
    addr = f"inproc://wgc-monitor-{secrets.token_hex(8)}"
    return cast(_S, sock.get_monitor_socket(events, addr=addr))  # asyncio in, asyncio out


def is_loopback(host: str) -> bool:
    return host in LOOPBACK


def named_hosts(hosts: Iterable[str]) -> bool:
    """Whether a placement's hosts name any machine but this one's loopback."""
    return not all(is_loopback(h) for h in hosts)


def bind_address(own: str, hosts: Iterable[str], listen: str | None = None) -> str:
    """The interface a process on host ``own`` binds: ``listen`` when given (``0.0.0.0`` is the
    only way to get every interface), loopback when no host is named, else ``own`` resolved to
    an address (ZeroMQ binds addresses and interface names, not host names)."""
    if listen:
        return "0.0.0.0" if listen in WILDCARD else _resolve(listen)
    if not named_hosts(hosts):
        return "127.0.0.1"
    if own in WILDCARD:
        raise TransportError(
            f"`{own}` is not a host: name the machine a rank runs on (to listen on every "
            "interface, ask for it with `listen`)"
        )
    return _resolve(own)


def _resolve(host: str) -> str:
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    try:
        return socket.gethostbyname(host)
    except OSError as exc:
        raise TransportError(f"cannot bind to host `{host}`: {exc}") from None


def tune(sock: zmq.Socket, send: bool) -> None:
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME_BYTES)  # a peer's frame past it: dropped, unread
    if send:
        sock.setsockopt(zmq.SNDHWM, HWM)
        sock.setsockopt(zmq.SNDTIMEO, SEND_TIMEOUT_MS)
    else:
        sock.setsockopt(zmq.RCVHWM, HWM)


def peer_address(frame: Any) -> str:
    """The sender of a received ``zmq.Frame``, as ZeroMQ names it (``Peer-Address``)."""
    try:
        return str(frame.get("Peer-Address")) or "a local peer"
    except (zmq.ZMQError, AttributeError, UnicodeDecodeError):
        return "an unknown peer"


def default_codec(accepts: Sequence[type]) -> FrameCodec:
    from wgc_runtime.host.transport.codec import Codec  # torch: not for the launcher

    return Codec(accepts)


def new_secret() -> bytes:
    """A fresh deployment secret (32 random bytes)."""
    return secrets.token_bytes(32)


class IpcPath:
    """A filesystem ``ipc://`` socket for an inbox, in a private folder (mode 0700): the
    deployment's (``ipc_dir``, made by the launcher and removed by it), or one of its own. Other
    local users cannot connect to it (abstract sockets have no permissions at all)."""

    def __init__(self, me: Peer, ipc_dir: str | None) -> None:
        self.own_dir = ipc_dir is None
        self.dir = ipc_dir if ipc_dir is not None else tempfile.mkdtemp(prefix="wgc-ipc-")
        self.path = os.path.join(self.dir, f"{_file_name(me)}-{secrets.token_hex(4)}.sock")

    def bind(self, sock: zmq.Socket) -> str | None:
        """The bound address, or None where ipc sockets are not available (or the path is
        too long for a Unix socket)."""
        if sys.platform.startswith("win") or len(self.path) > 100:
            return None
        address = f"ipc://{self.path}"
        try:
            sock.bind(address)
        except zmq.ZMQError:
            return None
        return address

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        if self.own_dir:
            with contextlib.suppress(OSError):
                os.rmdir(self.dir)


def _file_name(peer: Peer) -> str:
    return f"rank{peer}" if isinstance(peer, int) else str(peer)


def peer_label(peer: Peer) -> str:
    return f"rank {peer}" if isinstance(peer, int) else str(peer)
