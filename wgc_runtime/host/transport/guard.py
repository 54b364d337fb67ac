"""What a process does about a peer that sends it garbage: count, say so once a minute, cut off.

Every socket that reads from peers it cannot trust (a runtime inbox, the conductor's client
port) keeps one `PeerGuard`. A bad frame (one without the deployment's secret, one that does not
decode into the messages the socket accepts) is *dropped* and reported here with the peer it
came from (`peer`: an ``ipc`` peer's ``uid:gid:pid`` as ZeroMQ reports it, a TCP peer's address,
a client's routing id):

* **counted**: `dropped` in all, and per peer;
* **logged once per peer per minute**: the first bad frame of a peer in a minute prints one line
  on stderr (with how many more that peer sent since its last line), the rest are only counted,
  so a flood cannot fill a disk or starve the loop with printing; at most ``peer_lines`` peers
  get a line in a minute (a sender that takes a new name per connection), the rest are summed up
  in one line the next minute;
* **cut off** once a peer sent ``limit`` bad frames within one minute: `bad` says so (once), the
  socket stops reading that peer (see `wgc_runtime.host.transport.sockets`), and `is_cut` stays
  true for ``ban_s`` seconds.

A guard remembers at most ``max_peers`` peers (the least recently heard are forgotten first), so
a peer that changes its name for every frame costs a bounded amount of memory; what it sends is
still counted and logged at most once a minute per name.
"""

from __future__ import annotations

import sys
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

WINDOW_S = 60.0
LIMIT = 100  # bad frames within a window before the peer is cut off
BAN_S = 600.0
MAX_PEERS = 1024
PEER_LINES = 10  # peers that get a line of their own per window


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass(slots=True)
class _Peer:
    window_start: float
    in_window: int = 0
    unlogged: int = 0
    logged_at: float = -1e18
    cut_until: float = 0.0
    total: int = 0


class PeerGuard:
    """Bad traffic of one socket, per peer (see the module docstring). ``who`` names the socket
    in log lines ("rank 1", "the client port")."""

    def __init__(
        self,
        who: str,
        *,
        limit: int = LIMIT,
        window_s: float = WINDOW_S,
        ban_s: float = BAN_S,
        max_peers: int = MAX_PEERS,
        peer_lines: int = PEER_LINES,
        log: Callable[[str], None] = _stderr,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.who = who
        self.limit = max(1, limit)
        self.window_s = window_s
        self.ban_s = ban_s
        self.max_peers = max(1, max_peers)
        self.peer_lines = max(1, peer_lines)
        self.log = log
        self.clock = clock
        self.dropped = 0  # bad frames in all
        self.cut_offs = 0  # peers cut off so far
        self.last_bad = -1e18  # clock time of the last bad frame (sockets get wary after one)
        self._peers: OrderedDict[str, _Peer] = OrderedDict()
        self._lines_since = -1e18  # start of the current window of peer lines
        self._lines = 0  # peer lines printed in it
        self._unshown: set[str] = set()  # peers not shown in it, and their frames
        self._unshown_frames = 0

    def bad(self, peer: str, why: str, *, may_cut: bool = True) -> bool:
        """A bad frame from ``peer`` was dropped (``why``: what was wrong); True when this frame
        cuts the peer off (once). ``may_cut``: False for a peer that must never be cut off (a
        message that carried the deployment's secret, from one of its own processes)."""
        now = self.clock()
        self.dropped += 1
        self.last_bad = now
        p = self._peers.get(peer)
        if p is None:
            p = self._peers[peer] = _Peer(now)
            while len(self._peers) > self.max_peers:
                self._peers.popitem(last=False)
        else:
            self._peers.move_to_end(peer)
        p.total += 1
        if now - p.window_start >= self.window_s:
            p.window_start, p.in_window = now, 0
        p.in_window += 1
        if now - self._lines_since >= self.window_s:
            if self._unshown:
                self.log(
                    f"wgc: {self.who} also dropped {self._unshown_frames} frames from "
                    f"{len(self._unshown)} other peers"
                )
            self._lines_since, self._lines = now, 0
            self._unshown, self._unshown_frames = set(), 0
        if now - p.logged_at >= self.window_s and self._lines < self.peer_lines:
            more = f" ({p.unlogged} more from it since the last line)" if p.unlogged else ""
            self.log(f"wgc: {self.who} dropped a frame from {peer}: {why}{more}")
            p.logged_at, p.unlogged = now, 0
            self._lines += 1
        else:
            p.unlogged += 1
            if now - p.logged_at >= self.window_s:
                self._unshown.add(peer)
                self._unshown_frames += 1
        if may_cut and p.in_window >= self.limit and p.cut_until <= now:
            p.cut_until = now + self.ban_s
            self.cut_offs += 1
            if peer not in self._unshown:  # a peer summed up is cut off without a line
                self.log(
                    f"wgc: {self.who} cut off {peer} after {p.in_window} bad frames within "
                    f"{self.window_s:.0f} s (for {self.ban_s:.0f} s)"
                )
            return True
        return False

    def is_cut(self, peer: str) -> bool:
        p = self._peers.get(peer)
        return p is not None and p.cut_until > self.clock()

    def wary(self) -> bool:
        """Whether a bad frame arrived within the last window (sockets then take the trouble to
        learn every sender's name)."""
        return self.clock() - self.last_bad < self.window_s

    def sent_by(self, peer: str) -> int:
        """Bad frames from ``peer`` so far (0 for a peer forgotten or never heard)."""
        p = self._peers.get(peer)
        return p.total if p is not None else 0
