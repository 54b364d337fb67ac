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
``{process="conductor"|"rank 0"|...}``, from the launcher). Asked of every process at each scrape
(`Cluster.usage`, when the server has it): the requests each holds
(``wgc_process_requests{process}``), each rank's KV pages per pool
(``wgc_kv_pages_used{process, pool}``, and ``wgc_kv_pages_free`` out of the pool's size in the
plan), the pages the conductor's admission has promised (``wgc_kv_pages_admitted{pool}``), and
the bad traffic each process's sockets dropped (``wgc_dropped_frames_total{process}``,
``wgc_peers_cut_off_total{process}``).
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
    ) -> None:
        self.alive = alive
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
            bounds = [*(f"{b:g}" for b in s.buckets), "+Inf"]
            cumulative = list(zip(bounds, (float(n) for n in counts), strict=True))
            walks.add_metric([name], cumulative, total)
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


class Metrics:
    """The registry and the server's own metrics (see the module docstring)."""

    def __init__(
        self,
        alive: Callable[[], dict[str, bool]],
        usage: Usage | None = None,
        capacity: Mapping[tuple[str, str], int] | None = None,
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
        self.conductor = ConductorCollector(alive, capacity)
        r.register(self.conductor)

    def poll_usage(self) -> Mapping[str, c.Usage] | None:
        """What every process holds now (blocks until they answer: run it in a thread)."""
        return None if self.usage is None else self.usage()

    def render(self, stats: c.Stats | None, usage: Mapping[str, c.Usage] | None = None) -> bytes:
        self.conductor.stats = stats
        self.conductor.usage = usage
        return generate_latest(self.registry)
