"""`NodeStats`: a rank's node-call and stream-buffer counters, reported as cumulative bucket
counts and sums in `Usage` (which older senders, without these fields, still decode into), and
exported by the server's collector as Prometheus histograms."""

from __future__ import annotations

import msgspec
import pytest

from tests.narrow import present
from wgc_runtime.contract import control as c
from wgc_runtime.core.executor.stats import BATCH_BUCKETS, CALL_BUCKETS, FILL_BUCKETS, NodeStats
from wgc_runtime.host.transport.codec import Codec


def test_calls_go_into_their_buckets_cumulatively() -> None:
    s = NodeStats()
    s.call("LLM", 1, 0.0002)  # in (0.0001, 0.00025]
    s.call("LLM", 3, 0.003)  # rows 3: in (2, 4]
    s.call("LLM", 300, 20.0)  # past every bound: +Inf only
    s.call("vae", 1, CALL_BUCKETS[0])  # on a bound: in that bucket (le)
    nodes, streams = s.report()
    assert streams == ()
    llm, vae = nodes
    assert (llm.node, vae.node) == ("LLM", "vae")
    assert len(llm.calls) == len(CALL_BUCKETS) + 1 and len(llm.sizes) == len(BATCH_BUCKETS) + 1
    le = dict(zip((*CALL_BUCKETS, float("inf")), llm.calls, strict=True))
    assert (le[0.0001], le[0.00025], le[0.0025], le[0.005], le[10.0], le[float("inf")]) == (
        0,
        1,
        1,
        2,
        2,
        3,
    )
    rows = dict(zip((*BATCH_BUCKETS, float("inf")), llm.sizes, strict=True))
    assert (rows[1], rows[2], rows[4], rows[256], rows[float("inf")]) == (1, 1, 2, 2, 3)
    assert llm.rows == 304 and llm.seconds == pytest.approx(20.0032)
    assert vae.calls[0] == 1 and vae.calls[-1] == 1 and vae.rows == 1


def test_stream_fill_underruns_and_items_held_now() -> None:
    s = NodeStats()
    for held in (1, 2, 3, 4):
        s.pushed("tokens", held, 4)  # fills 0.25, 0.5, 0.75, 1.0
    s.underrun("tokens")
    s.underrun("tokens")
    _, (audio, tokens) = s.report([("tokens", 2), ("audio", 5), ("tokens", 1)])  # by name
    assert tokens.stream == "tokens" and tokens.underruns == 2 and tokens.held == 3
    le = dict(zip((*FILL_BUCKETS, float("inf")), tokens.fills, strict=True))
    assert (le[0.1], le[0.25], le[0.5], le[0.75], le[0.9], le[1.0]) == (0, 1, 2, 3, 3, 4)
    assert tokens.fill_sum == pytest.approx(2.5)
    # a stream with live buffers but nothing pushed yet: zero counts, its items now
    assert audio.stream == "audio" and audio.held == 5 and set(audio.fills) == {0}


def test_usage_carries_the_counts_and_old_senders_still_decode() -> None:
    s = NodeStats()
    s.call("LLM", 2, 0.01)
    s.pushed("tokens", 1, 8)
    usage = s.usage(c.Usage(0, 1, (("LLM", 3),), 0, 0), [("tokens", 1)])
    assert usage.requests == 1 and usage.kv_pages == (("LLM", 3),)
    assert usage.call_buckets == CALL_BUCKETS and usage.fill_buckets == FILL_BUCKETS
    codec = Codec(c.INBOX)
    (back,) = codec.decode([bytes(f) for f in codec.encode([usage])])
    assert back == usage and back.nodes[0].sizes[1] == 1  # rows 2: bucket le=2
    # a sender without the new fields (``[tag, who, requests, kv_pages, dropped, cut_off]``)
    old = msgspec.msgpack.decode(msgspec.msgpack.encode([50, 1, 2, [], 4, 1]), type=c.Usage)
    assert (old.who, old.requests, old.dropped, old.nodes, old.streams) == (1, 2, 4, (), ())


def test_the_collector_exports_them_as_histograms() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from wgc_runtime.host.server.metrics import Metrics

    s = NodeStats()
    for rows in (1, 1, 4):
        s.call("LLM", rows, 0.002)
    s.pushed("tokens", 2, 8)
    s.underrun("tokens")
    usage = {"rank 0": s.usage(c.Usage(0), [("tokens", 2)])}
    metrics = Metrics(lambda: {"conductor": True, "rank 0": True}, restarts=lambda: {"rank 0": 2})
    text = metrics.render(None, usage).decode()
    got = {
        (x.name, tuple(sorted(x.labels.items()))): x.value
        for f in text_string_to_metric_families(text)
        for x in f.samples
    }
    llm = (("node", "LLM"), ("process", "rank 0"))
    assert got[("wgc_node_call_duration_seconds_count", llm)] == 3
    assert got[("wgc_node_call_duration_seconds_bucket", (("le", "0.0025"), *llm))] == 3
    assert got[("wgc_node_call_duration_seconds_bucket", (("le", "0.001"), *llm))] == 0
    assert got[("wgc_node_batch_size_bucket", (("le", "1"), *llm))] == 2
    assert got[("wgc_node_batch_size_sum", llm)] == 6
    tokens = (("process", "rank 0"), ("stream", "tokens"))
    assert got[("wgc_stream_buffer_fill_ratio_bucket", (("le", "0.25"), *tokens))] == 1
    assert got[("wgc_stream_buffer_fill_ratio_bucket", (("le", "0.1"), *tokens))] == 0
    assert got[("wgc_stream_buffer_items", tokens)] == 2
    assert got[("wgc_stream_underruns_total", tokens)] == 1
    assert got[("wgc_process_restarts_total", (("process", "rank 0"),))] == 2
    assert ("wgc_process_restarts_total", (("process", "conductor"),)) not in got


def test_a_consumer_that_outpaces_its_producer_is_an_underrun_once_per_chunk(tmp_path) -> None:
    """`tests/unit/test_interp.py`'s stream model on two ranks (producer `p` on 0, consumer `c`
    and the buffer on 1), driven by hand: rank 1 takes chunk 0 as soon as its two items are
    there, and the next `cons` walk then finds chunk 1 not ready: one underrun (counted once,
    however often the consumer is looked at). Node rows and fill samples are what the plan runs:
    a `p` per segment, a `c` per chunk, a fill sample per item."""
    import torch

    from tests.unit.test_interp import STREAMS
    from wgc.driver import Driver
    from wgc.interp import make_request, node_context, segment
    from wgc_runtime.contract.node import Node
    from wgc_runtime.core.streams import Policy, chunk_plan
    from wgc_runtime.host.local import LocalCluster

    class Produce(Node):
        def forward_one(self, inputs, ctx):
            return {"v": present(inputs["x"]).float()}

    class Consume(Node):
        def forward_one(self, inputs, ctx):
            return {"s": present(inputs["v"]).sum()}

    (tmp_path / "s.walk").write_text(STREAMS, encoding="utf-8")
    two = (
        "devices: [cpu, cpu]\nplace:\n  - {nodes: [p], ranks: [0]}\n  - {nodes: [c], ranks: [1]}\n"
    )
    (tmp_path / "two.yaml").write_text(two, encoding="utf-8")
    result = Driver().compile(str(tmp_path / "s.walk"), str(tmp_path / "two.yaml"))
    assert result.ok, [d.message for d in result.diagnostics]
    out = tmp_path / "gen"
    out.mkdir()
    for name, text in result.files.items():
        (out / name).write_text(text, encoding="utf-8")
    classes = {"p": Produce, "c": Consume}
    model = result.model
    assert model is not None

    def nodes(rank):
        names = {n.name for n in rank.nodes}
        return {n.name: classes[n.name](node_context(n)) for n in model.nodes if n.name in names}

    cluster = LocalCluster(out, nodes_factory=nodes)
    items = 5
    segments = [segment("tensor", torch.tensor(float(i))) for i in range(items)]
    h = cluster.submit(make_request(model, segments, ["tensor"]))
    producer, consumer = cluster.ranks[0], cluster.ranks[1]

    def turn(*ranks) -> bool:
        moved = cluster._drain()
        for ex in ranks:
            moved = ex.step() or moved
            moved = cluster._drain() or moved
        for ex in cluster.ranks.values():
            ex.end_turn()
        cluster.conductor.tick()
        return moved

    def produced() -> int:
        req_state = consumer.requests.get(next(iter(cluster.handles)))
        inlet = req_state.streams.get("s") if req_state else None
        return 0 if inlet is None else inlet.buf.produced

    def producer_until(n: int) -> None:  # the producer alone, until n items are on rank 1
        while produced() < n:
            assert turn(producer), "stuck"

    producer_until(2)  # chunk 0's items
    while turn(consumer):  # the consumer alone: cons 1 runs, cons 2 waits for chunk 1
        pass
    assert consumer.stats.streams["s"].underruns == 1
    producer_until(3)  # one more item wakes the waiting consumer: chunk 1 is still not ready
    while turn(consumer):
        pass
    assert consumer.stats.streams["s"].underruns == 1  # counted once per chunk
    cluster.run()
    assert h.ok, h.error
    chunks = chunk_plan(Policy.of("fixed", k=2), "partial", items)
    (c_calls,), (s_stream,) = consumer.stats.report()
    (p_calls,), no_streams = producer.stats.report()
    assert no_streams == ()
    assert (p_calls.node, p_calls.rows, c_calls.node, c_calls.rows) == (
        "p",
        items,
        "c",
        len(chunks),
    )
    assert s_stream.fills[-1] == items
    assert 1 <= s_stream.underruns <= len(chunks) - 1  # at most once per chunk after the first
