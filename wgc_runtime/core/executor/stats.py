"""What one rank counts about its node calls and stream buffers, for `/metrics` (`NodeStats`).

Owned here, kept by the executor on its hot path, so each hook is a few integer adds:

* per node, every call (one `Node.forward`, or one captured step, of a batch of rows): its
  time into a latency histogram (`CALL_BUCKETS`, seconds), and its rows into a batch-size
  histogram (`BATCH_BUCKETS`);
* per stream owned here, every item a buffer accepts: the buffer's fill after it (items held /
  capacity) into a histogram (`FILL_BUCKETS`); and every *underrun*: a consumer call whose other
  inputs were all there found no chunk ready (counted once per chunk it waited for).

Counts are per bucket (not cumulative) and since the rank started; `report` turns them into
the `Usage` fields the worker ships (`control.NodeCalls`, `control.StreamFill`: cumulative
bucket counts, sums, no raw samples), so histograms add up across processes and scrapes.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable

import msgspec

from wgc_runtime.contract import control as c

CALL_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
FILL_BUCKETS = (0.1, 0.25, 0.5, 0.75, 0.9, 1.0)


class _Node:
    __slots__ = ("counts", "rows", "seconds", "sizes")

    def __init__(self) -> None:
        self.counts = [0] * (len(CALL_BUCKETS) + 1)
        self.seconds = 0.0
        self.sizes = [0] * (len(BATCH_BUCKETS) + 1)
        self.rows = 0


class _Stream:
    __slots__ = ("counts", "fill", "underruns")

    def __init__(self) -> None:
        self.counts = [0] * (len(FILL_BUCKETS) + 1)
        self.fill = 0.0
        self.underruns = 0


def _cumulative(counts: list[int]) -> tuple[int, ...]:
    out: list[int] = []
    total = 0
    for n in counts:
        total += n
        out.append(total)
    return tuple(out)


class NodeStats:
    """One rank's counters (see the module docstring)."""

    def __init__(self) -> None:
        self.nodes: dict[str, _Node] = {}
        self.streams: dict[str, _Stream] = {}

    def call(self, node: str, rows: int, seconds: float) -> None:
        """One call of ``node`` on a batch of ``rows`` took ``seconds``."""
        s = self.nodes.get(node)
        if s is None:
            s = self.nodes[node] = _Node()
        s.counts[bisect_left(CALL_BUCKETS, seconds)] += 1
        s.seconds += seconds
        s.sizes[bisect_left(BATCH_BUCKETS, rows)] += 1
        s.rows += rows

    def pushed(self, stream: str, held: int, capacity: int) -> None:
        """A buffer of ``stream`` accepted an item; it now holds ``held`` of ``capacity``."""
        s = self.streams.get(stream)
        if s is None:
            s = self.streams[stream] = _Stream()
        fill = held / capacity if capacity > 0 else 0.0
        s.counts[bisect_left(FILL_BUCKETS, fill)] += 1
        s.fill += fill

    def underrun(self, stream: str) -> None:
        """A consumer of ``stream`` found no chunk ready."""
        s = self.streams.get(stream)
        if s is None:
            s = self.streams[stream] = _Stream()
        s.underruns += 1

    def report(
        self, held: Iterable[tuple[str, int]] = ()
    ) -> tuple[tuple[c.NodeCalls, ...], tuple[c.StreamFill, ...]]:
        """The counters as `Usage` fields; ``held``: (stream, items) of every live buffer now."""
        now: dict[str, int] = {}
        for name, n in held:
            now[name] = now.get(name, 0) + n
        nodes = tuple(
            c.NodeCalls(name, _cumulative(s.counts), s.seconds, _cumulative(s.sizes), s.rows)
            for name, s in sorted(self.nodes.items())
        )
        streams = tuple(
            c.StreamFill(
                name,
                _cumulative(s.counts) if s else (0,) * (len(FILL_BUCKETS) + 1),
                s.fill if s else 0.0,
                s.underruns if s else 0,
                now.get(name, 0),
            )
            for name in sorted({*self.streams, *now})
            for s in (self.streams.get(name),)
        )
        return nodes, streams

    def usage(self, base: c.Usage, held: Iterable[tuple[str, int]] = ()) -> c.Usage:
        """``base`` with the counters and their bucket bounds added (`report`)."""
        nodes, streams = self.report(held)
        return msgspec.structs.replace(
            base,
            call_buckets=CALL_BUCKETS,
            batch_buckets=tuple(float(b) for b in BATCH_BUCKETS),
            fill_buckets=FILL_BUCKETS,
            nodes=nodes,
            streams=streams,
        )
