"""``GET /metrics``: the server's Prometheus registry (one per server, no global state).

Measured here, per HTTP request:

* ``wgc_requests_total{route, outcome}``: every request, by how it ended (``ok``, ``rejected``
  at the door, ``overloaded`` (429), ``timeout``, ``disconnected``, or the `FailKind` it failed
  with);
* ``wgc_request_duration_seconds{route}``: from admission to the end;
* ``wgc_time_to_first_output_seconds{route, modality}``: from admission to the first output of
  each modality (a token, an audio chunk, an image);
* ``wgc_audio_real_time_factor{route}``: seconds spent per second of audio produced (below 1:
  faster than real time);
* ``wgc_audio_buffer_seconds{route}`` and ``wgc_audio_underruns_total{route}``: the audio a
  client playing the stream from its first chunk has in hand when each later chunk arrives, and
  how often it ran dry (the chunk came after the audio before it had finished playing; the
  player then waits, and plays on from there);
* ``wgc_requests_in_flight``: admitted and not yet ended.

Asked of the deployment at each scrape (`ConductorCollector`): the conductor's queue
(``wgc_conductor_requests_running``, ``wgc_conductor_requests_queued``), the requests it ended by
outcome (``wgc_conductor_requests_total``), each walk's latency on the ranks
(``wgc_walk_duration_seconds{walk}``), and whether each process is alive (``wgc_process_up``
``{process="conductor"|"rank 0"|...}``, from the launcher) and how often each worker was
restarted (``wgc_process_restarts_total{process}``). Asked of every process at each scrape
(`Cluster.usage`, when the server has it): the requests each holds
(``wgc_process_requests{process}``), each rank's KV pages per pool
(``wgc_kv_pages_used{process, pool}``, and ``wgc_kv_pages_free`` out of the pool's size in the
plan), the pages the conductor's admission has promised (``wgc_kv_pages_admitted{pool}``), and
the bad traffic each process's sockets dropped (``wgc_dropped_frames_total{process}``,
``wgc_peers_cut_off_total{process}``), and what each rank's executor counted since it started
(`NodeStats`, shipped as bucket counts and sums): every node call's time
(``wgc_node_call_duration_seconds{process, node}``) and rows (``wgc_node_batch_size``), each
stream buffer's fill after every item it accepted (``wgc_stream_buffer_fill_ratio{process,
stream}``), the items its live buffers hold (``wgc_stream_buffer_items``) and the consumers that
waited for a chunk (``wgc_stream_underruns_total``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from wgc_runtime.contract import control as c
from wgc_runtime.contract.spec import RankSpec

LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
RTF = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 100.0)
BUFFER = (0.0, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)

Usage = Callable[[], Mapping[str, c.Usage]]


def kv_capacity(ranks: list[RankSpec]) -> dict[tuple[str, str], int]:
    """(process, pool) -> the pool's pages, as each rank allocates them (a pool is keyed by its
    owner, a copy with a pool of its own by its name: `KvPools`)."""
    out: dict[tuple[str, str], int] = {}
    for rank in ranks:
        for node in rank.nodes:
            kv = node.kv
            if kv is None or kv.shared:
                continue
            pool = kv.owner if kv.owner == node.name else node.name
            out[(f"rank {rank.rank}", pool)] = kv.pages
    return out


class ConductorCollector(Collector):
    """The deployment's numbers, from the last `Stats` the conductor sent and the launcher's
    view of its processes (``alive()``: process name -> up)."""

    def __init__(
        self,
        alive: Callable[[], dict[str, bool]],
        capacity: Mapping[tuple[str, str], int] | None = None,
        restarts: Callable[[], Mapping[str, int]] | None = None,
    ) -> None:
        self.alive = alive
        self.restarts = restarts
        self.capacity = dict(capacity or {})
        self.stats: c.Stats | None = None
        self.usage: Mapping[str, c.Usage] | None = None

    def collect(self) -> Iterator[object]:
        up = GaugeMetricFamily(
            "wgc_process_up", "Whether a process of the deployment is alive.", labels=["process"]
        )
        for name, alive in sorted(self.alive().items()):
            up.add_metric([name], 1.0 if alive else 0.0)
        yield up
        if self.restarts is not None:
            restarted = CounterMetricFamily(
                "wgc_process_restarts",
                "Times the launcher started a dead worker again.",
                labels=["process"],
            )
            counts = self.restarts()
            for name in sorted(self.alive().keys() - {"conductor"} | counts.keys()):
                restarted.add_metric([name], counts.get(name, 0))
            yield restarted
        if self.usage is not None:
            yield from self._usage(self.usage)
        s = self.stats
        if s is None:
            return
        yield GaugeMetricFamily(
            "wgc_conductor_requests_running", "Requests the conductor runs now.", value=s.running
        )
        yield GaugeMetricFamily(
            "wgc_conductor_requests_queued",
            "Requests waiting behind the admission cap (the queue depth).",
            value=s.queued,
        )
        ended = CounterMetricFamily(
            "wgc_conductor_requests",
            "Requests the conductor ended, by outcome.",
            labels=["outcome"],
        )
        for outcome, n in s.outcomes:
            ended.add_metric([outcome], n)
        yield ended
        walks = HistogramMetricFamily(
            "wgc_walk_duration_seconds",
            "A walk instance's time on its ranks, from its start to the last rank's report.",
            labels=["walk"],
        )
        for name, counts, total, _ in s.walks:
            walks.add_metric([name], _buckets(s.buckets, counts), total)
        yield walks

    def _usage(self, usage: Mapping[str, c.Usage]) -> Iterator[object]:
        held = GaugeMetricFamily(
            "wgc_process_requests", "Requests a process holds now.", labels=["process"]
        )
        used = GaugeMetricFamily(
            "wgc_kv_pages_used", "KV pages requests hold, per pool.", labels=["process", "pool"]
        )
        free = GaugeMetricFamily(
            "wgc_kv_pages_free",
            "KV pages of a pool no request holds (its size in the plan less those used).",
            labels=["process", "pool"],
        )
        admitted = GaugeMetricFamily(
            "wgc_kv_pages_admitted",
            "KV pages the conductor's admission promised to the requests it runs, per pool.",
            labels=["pool"],
        )
        dropped = CounterMetricFamily(
            "wgc_dropped_frames", "Bad frames a process's sockets dropped.", labels=["process"]
        )
        cut = CounterMetricFamily(
            "wgc_peers_cut_off", "Peers a process stopped listening to.", labels=["process"]
        )
        seen: set[tuple[str, str]] = set()
        for who, u in sorted(usage.items()):
            held.add_metric([who], u.requests)
            dropped.add_metric([who], u.dropped)
            cut.add_metric([who], u.cut_off)
            for pool, n in u.kv_pages:
                if who == "conductor":
                    admitted.add_metric([pool], n)
                    continue
                seen.add((who, pool))
                used.add_metric([who, pool], n)
                if (who, pool) in self.capacity:
                    free.add_metric([who, pool], self.capacity[(who, pool)] - n)
        for who, pool in sorted(self.capacity.keys() - seen):
            if who in usage:  # a pool the rank reported nothing for holds nothing
                used.add_metric([who, pool], 0)
                free.add_metric([who, pool], self.capacity[(who, pool)])
        yield from (held, used, free, admitted, dropped, cut)
        yield from _ranks(usage)


def _bounds(buckets: tuple[float, ...]) -> list[str]:
    return [*(f"{b:g}" for b in buckets), "+Inf"]


def _buckets(buckets: tuple[float, ...], counts: tuple[int, ...]) -> list[tuple[str, float]]:
    return list(zip(_bounds(buckets), (float(n) for n in counts), strict=True))


def _ranks(usage: Mapping[str, c.Usage]) -> Iterator[object]:
    """What each rank's executor counted (`NodeStats`): node calls and stream buffers."""
    calls = HistogramMetricFamily(
        "wgc_node_call_duration_seconds",
        "Time of one node call (a forward or a captured step of a batch), per node and rank.",
        labels=["process", "node"],
    )
    sizes = HistogramMetricFamily(
        "wgc_node_batch_size",
        "Rows (requests) in one node call, per node and rank.",
        labels=["process", "node"],
    )
    fill = HistogramMetricFamily(
        "wgc_stream_buffer_fill_ratio",
        "A stream buffer's items held / capacity after each item it accepted, per stream.",
        labels=["process", "stream"],
    )
    held = GaugeMetricFamily(
        "wgc_stream_buffer_items",
        "Items the live buffers of a stream hold now.",
        labels=["process", "stream"],
    )
    under = CounterMetricFamily(
        "wgc_stream_underruns",
        "Consumer calls that had taken a chunk and found the next one not ready.",
        labels=["process", "stream"],
    )
    for who, u in sorted(usage.items()):
        for n in u.nodes:
            if len(n.calls) == len(u.call_buckets) + 1:
                calls.add_metric([who, n.node], _buckets(u.call_buckets, n.calls), n.seconds)
            if len(n.sizes) == len(u.batch_buckets) + 1:
                sizes.add_metric([who, n.node], _buckets(u.batch_buckets, n.sizes), n.rows)
        for s in u.streams:
            if len(s.fills) == len(u.fill_buckets) + 1:
                fill.add_metric([who, s.stream], _buckets(u.fill_buckets, s.fills), s.fill_sum)
            held.add_metric([who, s.stream], s.held)
            under.add_metric([who, s.stream], s.underruns)
    yield from (calls, sizes, fill, held, under)


def node_table(usage: Mapping[str, c.Usage]) -> dict[str, list[dict[str, object]]]:
    """Every rank's node calls and stream buffers since it started, as JSON (``GET
    /v1/wgc/nodes``, what the playground shows on the plan drawing)."""
    nodes: list[dict[str, object]] = []
    streams: list[dict[str, object]] = []
    for who, u in sorted(usage.items()):
        rank = who.removeprefix("rank ")
        if not rank.isdigit():
            continue
        for n in u.nodes:
            calls = n.calls[-1] if n.calls else 0
            nodes.append(
                {
                    "rank": int(rank),
                    "node": n.node,
                    "calls": calls,
                    "rows": n.rows,
                    "seconds": n.seconds,
                }
            )
        for s in u.streams:
            pushed = s.fills[-1] if s.fills else 0
            streams.append(
                {
                    "rank": int(rank),
                    "stream": s.stream,
                    "items": pushed,
                    "mean_fill": s.fill_sum / pushed if pushed else 0.0,
                    "held": s.held,
                    "underruns": s.underruns,
                }
            )
    return {"nodes": nodes, "streams": streams}


class Metrics:
    """The registry and the server's own metrics (see the module docstring)."""

    def __init__(
        self,
        alive: Callable[[], dict[str, bool]],
        usage: Usage | None = None,
        capacity: Mapping[tuple[str, str], int] | None = None,
        restarts: Callable[[], Mapping[str, int]] | None = None,
    ) -> None:
        self.usage = usage  # blocking (it asks every process): call `poll_usage` off the loop
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "wgc_requests", "HTTP requests, by route and outcome.", ["route", "outcome"], registry=r
        )
        self.duration = Histogram(
            "wgc_request_duration_seconds",
            "HTTP request time from admission to its end.",
            ["route"],
            buckets=LATENCY,
            registry=r,
        )
        self.first_output = Histogram(
            "wgc_time_to_first_output_seconds",
            "Time from admission to the first output of each modality.",
            ["route", "modality"],
            buckets=LATENCY,
            registry=r,
        )
        self.rtf = Histogram(
            "wgc_audio_real_time_factor",
            "Seconds spent per second of audio produced.",
            ["route"],
            buckets=RTF,
            registry=r,
        )
        self.buffer = Histogram(
            "wgc_audio_buffer_seconds",
            "Audio a client playing the stream has in hand when each later chunk arrives.",
            ["route"],
            buckets=BUFFER,
            registry=r,
        )
        self.underruns = Counter(
            "wgc_audio_underruns",
            "Audio chunks that arrived after the audio before them had finished playing.",
            ["route"],
            registry=r,
        )
        self.in_flight = Gauge("wgc_requests_in_flight", "Admitted, not yet ended.", registry=r)
        self.conductor = ConductorCollector(alive, capacity, restarts)
        r.register(self.conductor)

    def poll_usage(self) -> Mapping[str, c.Usage] | None:
        """What every process holds now (blocks until they answer: run it in a thread)."""
        return None if self.usage is None else self.usage()

    def render(self, stats: c.Stats | None, usage: Mapping[str, c.Usage] | None = None) -> bytes:
        self.conductor.stats = stats
        self.conductor.usage = usage
        return generate_latest(self.registry)
