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
* ``wgc_requests_in_flight``: admitted and not yet ended.

Asked of the deployment at each scrape (`ConductorCollector`): the conductor's queue
(``wgc_conductor_requests_running``, ``wgc_conductor_requests_queued``), the requests it ended by
outcome (``wgc_conductor_requests_total``), each walk's latency on the ranks
(``wgc_walk_duration_seconds{walk}``), and whether each process is alive (``wgc_process_up``
``{process="conductor"|"rank 0"|...}``, from the launcher).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from wgc_runtime.contract import control as c

LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
RTF = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 100.0)


class ConductorCollector(Collector):
    """The deployment's numbers, from the last `Stats` the conductor sent and the launcher's
    view of its processes (``alive()``: process name -> up)."""

    def __init__(self, alive: Callable[[], dict[str, bool]]) -> None:
        self.alive = alive
        self.stats: c.Stats | None = None

    def collect(self) -> Iterator[object]:
        up = GaugeMetricFamily(
            "wgc_process_up", "Whether a process of the deployment is alive.", labels=["process"]
        )
        for name, alive in sorted(self.alive().items()):
            up.add_metric([name], 1.0 if alive else 0.0)
        yield up
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


class Metrics:
    """The registry and the server's own metrics (see the module docstring)."""

    def __init__(self, alive: Callable[[], dict[str, bool]]) -> None:
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
        self.in_flight = Gauge("wgc_requests_in_flight", "Admitted, not yet ended.", registry=r)
        self.conductor = ConductorCollector(alive)
        r.register(self.conductor)

    def render(self, stats: c.Stats | None) -> bytes:
        self.conductor.stats = stats
        return generate_latest(self.registry)
