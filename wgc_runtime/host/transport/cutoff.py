"""Closing the connections one peer holds on a bound ZeroMQ socket (Linux).

ZeroMQ has no call that drops one peer of a bound socket, but its connections are ordinary
sockets of this process: `shut_down` finds those accepted on the given endpoints (by their local
address) whose peer is the one named (an ``ipc`` peer by its process id, from ``SO_PEERCRED``; a
TCP peer by its address) and shuts them down (``shutdown(2)`` on a duplicate descriptor: ZeroMQ
sees the connection end and cleans up after itself; the descriptor stays ZeroMQ's). A peer that
reconnects is shut down again the next time it is caught sending garbage.

Peer names are what ZeroMQ reports as a frame's ``Peer-Address``: ``[host:]uid:gid:pid`` for
``ipc``, the address for TCP. Elsewhere than Linux (no ``/proc/self/fd``) nothing is closed and
the caller only ignores the peer.
"""

from __future__ import annotations

import os
import socket
import stat
import struct
from collections.abc import Iterable

_UCRED = struct.Struct("3i")  # pid, uid, gid


def peer_pid(peer: str) -> int | None:
    """The process id in an ``ipc`` peer name (its last ``:`` field), or None."""
    tail = peer.rsplit(":", 1)[-1]
    return int(tail) if ":" in peer and tail.isdigit() else None


def _tcp(endpoint: str) -> tuple[str, int] | None:
    host, _, port = endpoint.removeprefix("tcp://").rpartition(":")
    return (host.strip("[]"), int(port)) if port.isdigit() else None


def shut_down(endpoints: Iterable[str], peer: str) -> int:
    """Shut down every connection accepted on ``endpoints`` (``ipc://`` and ``tcp://``
    addresses this process bound) from ``peer``; how many were."""
    try:
        fds = [int(n) for n in os.listdir("/proc/self/fd")]
    except OSError:
        return 0
    paths = {e.removeprefix("ipc://") for e in endpoints if e.startswith("ipc://")}
    tcp = {t for e in endpoints if e.startswith("tcp://") and (t := _tcp(e)) is not None}
    pid = peer_pid(peer)
    done = 0
    for fd in fds:
        try:
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                continue
            s = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        with s:
            try:
                if _matches(s, paths, tcp, pid, peer):
                    s.shutdown(socket.SHUT_RDWR)
                    done += 1
            except OSError:
                continue
    return done


_WILDCARD = ("0.0.0.0", "*", "::")


def _matches(
    s: socket.socket, paths: set[str], tcp: set[tuple[str, int]], pid: int | None, peer: str
) -> bool:
    if s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
        return False  # the listening socket itself
    if s.family == socket.AF_UNIX:
        if pid is None or s.getsockname() not in paths:
            return False
        cred = s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
        return _UCRED.unpack(cred)[0] == pid
    if s.family in (socket.AF_INET, socket.AF_INET6):
        host, port = s.getsockname()[:2]
        if (host, port) not in tcp and not any((w, port) in tcp for w in _WILDCARD):
            return False
        return s.getpeername()[0] == peer
    return False
