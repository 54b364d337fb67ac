"""`wgc serve` over raw HTTP (what `curl` sends), on Orpheus with the toy nodes: the native route
(JSON, SSE, NDJSON), the service routes, bad requests answered 400 with the field and what is
allowed, and `/metrics` parsed with prometheus_client's parser (the counters add up, and every
process holds nothing once the requests ended). (Load is tested on the toy model, in
`test_serve_faults`.)"""

from __future__ import annotations

import base64
import http.client
import json
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

pytest.importorskip("fastapi")
pytest.importorskip("prometheus_client")

from tests.e2e.serve_support import served, sse_events  # noqa: E402

pytestmark = pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="needs POSIX shm")

HELLO = {"inputs": [{"modality": "text", "data": "hello"}], "want": ["audio"]}
NATIVE = "/v1/requests"
JSON = {"content-type": "application/json"}


LIMITS = ("--limit", "json_depth=16", "--limit", "request_bytes=1000000")  # above every test's


@pytest.fixture(scope="module")
def orpheus():
    with served("generated/orpheus/cpu", "--seed", "11", *LIMITS) as s:
        yield s


def audio_of(outputs) -> list[bytes]:
    """The raw bytes of every audio output (what `value.b64` encodes, small or not)."""
    return [base64.b64decode(o["value"]["b64"]) for o in outputs if o["modality"] == "audio"]


@pytest.mark.slow
def test_native_json_sse_and_ndjson_carry_the_same_outputs(orpheus) -> None:
    status, body = orpheus.post(NATIVE, HELLO)
    assert status == 200, body
    assert body["model"] == "orpheus" and body["id"].startswith("http-")
    outs = body["outputs"]
    n = len(outs)
    assert n >= 2 and {(o["flow"], o["walk"], o["modality"]) for o in outs} == {
        ("codec", "snac_chunk", "audio")
    }
    assert [o["iteration"] for o in outs] == sorted(o["iteration"] for o in outs)
    value = outs[0]["value"]
    assert value["dtype"] == "f32" and len(value["shape"]) == 1
    assert len(base64.b64decode(value["b64"])) == 4 * value["shape"][0] > 0

    status, headers, raw = orpheus.request("POST", NATIVE, {**HELLO, "stream": "sse"})
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    events = sse_events(raw)
    assert [e for e, _ in events] == ["output"] * n + ["done"]
    assert audio_of([d for e, d in events if e == "output"]) == audio_of(outs)

    status, headers, raw = orpheus.request(
        "POST", NATIVE, {**HELLO, "stream": "ndjson", "trace": True}
    )
    assert status == 200 and headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(x) for x in raw.decode().splitlines()]
    assert audio_of([x for x in lines if x["event"] == "output"]) == audio_of(outs)
    traces = [(x["walk"], x["done"]) for x in lines if x["event"] == "trace"]
    assert ("prefill", False) in traces and ("decode", True) in traces
    assert lines[-1]["event"] == "done" and lines[-1]["outputs"] == n
    # the request's own first audio and real-time factor, in the answer and in its done event
    samples = sum(o["value"]["shape"][0] for o in outs)
    for timing in (body["timing"], events[-1][1]["timing"], lines[-1]["timing"]):
        assert timing["first_output_s"]["audio"] > 0
        assert timing["audio_seconds"] == round(samples / 24_000, 6)
        assert timing["real_time_factor"] > 0
    assert body["timing"]["first_output_s"]["audio"] <= body["seconds"]


@pytest.mark.slow
def test_service_routes(orpheus) -> None:
    health = orpheus.get_json("/health")
    assert health["status"] == "ok" and health["processes"] == {"conductor": True, "rank 0": True}
    assert orpheus.get_json("/v1/models")["data"][0]["id"] == "orpheus"
    info = orpheus.get_json("/v1/wgc/model")
    assert info["inputs"] == [{"modality": "text", "fields": []}] and info["emits"] == ["audio"]
    assert info["routes"] == ["/v1/requests", "/v1/audio/speech"]
    assert "cannot produce text" in info["missing"]["/v1/chat/completions"]
    schema = orpheus.get_json("/openapi.json")
    assert {"/v1/requests", "/v1/audio/speech"} <= set(schema["paths"])
    assert "/v1/chat/completions" not in schema["paths"]
    status, _, page = orpheus.request("GET", "/")
    assert status == 200 and b"wgc serve" in page and b'"model": "orpheus"' in page
    status, _, plan = orpheus.request("GET", "/plan")
    assert status == 200 and b"<svg" in plan and b"walk decode" in plan


@pytest.mark.slow
def test_a_missing_route_says_why(orpheus) -> None:
    status, body = orpheus.post("/v1/chat/completions", {"messages": [{"role": "user"}]})
    assert status == 404
    assert body["error"]["message"].startswith("`orpheus` cannot produce text (it emits `audio`)")


BAD = [
    ({**HELLO, "options": {"eos_after": 3}}, "options.eos_after", "unknown option `eos_after`"),
    (
        {**HELLO, "want": ["audoi"]},
        "want",
        "`orpheus` never emits `audoi` (did you mean `audio`?); it emits `audio`",
    ),
    ({**HELLO, "want": []}, "want", "no output wanted: ask for one of `audio`"),
    (
        {
            "inputs": [{"modality": "image", "data": [[[0, 0, 0]]], "dtype": "u8"}],
            "want": ["audio"],
        },
        "inputs[0].modality",
        "`orpheus` takes no `image` input; it takes `text`",
    ),
    (
        {"inputs": [{"modality": "text", "data": [1.5, 2.5]}], "want": ["audio"]},
        "inputs[0].data",
        "expected dtype i64, got f32[2]; flow `speech` passes this `text` segment to walk "
        "`prefill` input `text_inputs` (i64[T])",
    ),
    (
        {
            "inputs": [{"modality": "text", "data": {"dtype": "i64", "b64": "!!"}}],
            "want": ["audio"],
        },
        "inputs[0].data",
        "`b64` is not base64",
    ),
    (
        {**HELLO, "seed": "seven"},
        "seed",
        "Input should be a valid integer, unable to parse string as an integer",
    ),
    ({"inputs": "hello", "want": ["audio"]}, "inputs", "Input should be a valid list"),
    ({**HELLO, "want": [1]}, "want[0]", "Input should be a valid string"),
    (
        {**HELLO, "stream": "xml"},
        "stream",
        "Input should be 'sse' or 'ndjson'; or: Input should be a valid boolean",
    ),
    (
        {"inputs": [{"modality": "text", "data": [104, 1.5], "dtype": "i64"}], "want": ["audio"]},
        "inputs[0].data[1]",
        "`1.5` does not fit dtype i64",  # never truncated to 1
    ),
    (
        {"inputs": [{"modality": "text", "data": [104, 300], "dtype": "u8"}], "want": ["audio"]},
        "inputs[0].data[1]",
        "`300` does not fit dtype u8",  # never wrapped to 44
    ),
    (
        {
            "inputs": [
                {
                    "modality": "text",
                    "data": {"dtype": "i64", "shape": ["a"], "b64": "AAAAAAAAAAA="},
                }
            ],
            "want": ["audio"],
        },
        "inputs[0].data",
        "`shape` is a list of sizes (integers >= 0), got `['a']`",
    ),
    (
        {
            "inputs": [{"modality": "text", "data": {"dtype": "i64", "shape": [2], "b64": "AAAA"}}],
            "want": ["audio"],
        },
        "inputs[0].data",
        "buffer size must be a multiple of element size",
    ),
    (
        {"inputs": [{"modality": "text", "data": {"dtype": "i64", "data": [[1], [2, 3]]}}]},
        "inputs[0].data",
        "not a tensor (expected sequence of length 1 at dim 1 (got 2))",
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize(("body", "field", "message"), BAD, ids=[b[1] for b in BAD])
def test_bad_requests_are_400_naming_the_field(orpheus, body, field, message) -> None:
    status, reply = orpheus.post(NATIVE, body)
    assert status == 400, reply
    error = reply["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == field
    assert any(  # the message starts with this (it goes on to name what is allowed)
        p["field"] == field and p["message"].startswith(message) for p in error["problems"]
    ), error["problems"]


@pytest.mark.slow
def test_metrics_add_up(orpheus) -> None:
    def samples():
        return orpheus.metrics()

    def get(m, name, **labels):
        return m.get((name, tuple(sorted(labels.items()))), 0.0)

    before = samples()
    for _ in range(5):
        assert orpheus.post(NATIVE, HELLO)[0] == 200
    for _ in range(2):
        assert orpheus.post(NATIVE, {**HELLO, "want": ["nope"]})[0] == 400
    speech = orpheus.request("POST", "/v1/audio/speech", {"input": "hi", "model": "orpheus"})
    assert speech[0] == 200
    after = samples()

    def delta(name, **labels):
        return get(after, name, **labels) - get(before, name, **labels)

    assert delta("wgc_requests_total", route=NATIVE, outcome="ok") == 5
    assert delta("wgc_requests_total", route=NATIVE, outcome="rejected") == 2
    assert delta("wgc_requests_total", route="/v1/audio/speech", outcome="ok") == 1
    assert delta("wgc_request_duration_seconds_count", route=NATIVE) == 5
    assert delta("wgc_time_to_first_output_seconds_count", route=NATIVE, modality="audio") == 5
    assert delta("wgc_audio_real_time_factor_count", route=NATIVE) == 5
    assert delta("wgc_conductor_requests_total", outcome="ok") == 6  # the door's 400s never ran
    assert delta("wgc_walk_duration_seconds_count", walk="prefill") == 6
    assert get(after, "wgc_walk_duration_seconds_bucket", walk="prefill", le="+Inf") == get(
        after, "wgc_walk_duration_seconds_count", walk="prefill"
    )
    assert get(after, "wgc_requests_in_flight") == 0
    assert get(after, "wgc_conductor_requests_queued") == 0
    assert get(after, "wgc_process_up", process="rank 0") == 1
    # every process was asked what it holds: nothing, once the requests ended; the LLM's KV
    # pool (orpheus's one kv_cache node) is all free again
    assert get(after, "wgc_process_requests", process="conductor") == 0
    assert get(after, "wgc_process_requests", process="rank 0") == 0
    pools = {dict(k)["pool"]: v for (n, k), v in after.items() if n == "wgc_kv_pages_free"}
    assert set(pools) == {"LLM"} and pools["LLM"] > 0
    assert get(after, "wgc_kv_pages_used", process="rank 0", pool="LLM") == 0
    # the speech stream, heard from its first chunk: a buffer sample per later audio chunk
    chunks = delta(
        "wgc_time_to_first_output_seconds_count", route="/v1/audio/speech", modality="audio"
    )
    assert chunks == 1
    assert delta("wgc_audio_buffer_seconds_count", route=NATIVE) > 0
    underruns = delta("wgc_audio_underruns_total", route=NATIVE)
    assert 0 <= underruns <= delta("wgc_audio_buffer_seconds_count", route=NATIVE)


@pytest.mark.slow
def test_a_value_the_node_refuses_is_400_with_its_message(orpheus) -> None:
    """The door takes an empty text; Orpheus's LLM refuses it (`NodeInputError`): 400 with the
    node's message, not a server error. A negative ``repetition_penalty`` never reaches the
    node: the door's bounds refuse it (`wgc_runtime.core.conductor.bounds`)."""
    empty = {**HELLO, "inputs": [{"modality": "text", "data": ""}]}
    status, reply = orpheus.post(NATIVE, empty)
    assert status == 400, reply
    assert reply["error"]["code"] == "invalid_value"
    assert "an empty text prompt has nothing to say" in reply["error"]["message"]
    status, reply = orpheus.post(NATIVE, {**HELLO, "options": {"repetition_penalty": -1.0}})
    assert status == 400 and reply["error"]["code"] == "rejected", reply
    assert reply["error"]["param"] == "options.repetition_penalty"


@pytest.mark.slow
def test_node_and_stream_metrics_count_what_the_plan_runs(orpheus) -> None:
    """Each request of ``max_tokens`` N calls the LLM for N rows (its prefill, then one decode
    step per token until ``max_tokens``: the toy's audio-only sampling never ends speech
    early), each pushing one item into stream ``tokens``, and the SNAC decoder once per
    non-empty chunk of that stream (the plan's sliding windows over N items). One request alone
    runs every call on one row; concurrent requests' decode steps run as batches."""
    from concurrent.futures import ThreadPoolExecutor

    from wgc_runtime.core.streams import Policy, chunk_plan
    from wgc_runtime.host.loading import load_plan

    _, ranks = load_plan(ROOT / "generated/orpheus/cpu")
    (tokens,) = [s for r in ranks for s in r.streams if s.name == "tokens"]
    policy = Policy.of(tokens.policy, dict(tokens.params))

    def windows(n: int) -> int:
        return sum(1 for start, end, _ in chunk_plan(policy, tokens.final, n) if end > start)

    def node(m, name, node, **more):
        return m.get((name, tuple(sorted({"process": "rank 0", "node": node, **more}.items()))), 0)

    def stream(m, name, **more):
        key = {"process": "rank 0", "stream": "tokens", **more}
        return m.get((name, tuple(sorted(key.items()))), 0)

    def run(lengths: list[int]) -> tuple[dict, dict]:
        before = orpheus.metrics()
        with ThreadPoolExecutor(len(lengths)) as pool:
            bodies = [{**HELLO, "options": {"max_tokens": n}} for n in lengths]
            assert [st for st, _ in pool.map(lambda b: orpheus.post(NATIVE, b), bodies)] == [
                200
            ] * len(lengths)
        return before, orpheus.metrics()

    for lengths in ([45], [60, 64, 70, 75]):
        before, after = run(lengths)

        def delta(get, *args, **labels):
            return get(after, *args, **labels) - get(before, *args, **labels)  # noqa: B023

        rows = {"LLM": sum(lengths), "snac_decoder": sum(windows(n) for n in lengths)}
        for name, expected in rows.items():
            calls = delta(node, "wgc_node_call_duration_seconds_count", name)
            assert delta(node, "wgc_node_batch_size_sum", name) == expected, (name, lengths)
            assert delta(node, "wgc_node_batch_size_count", name) == calls
            assert delta(node, "wgc_node_call_duration_seconds_bucket", name, le="+Inf") == calls
            assert delta(node, "wgc_node_call_duration_seconds_sum", name) > 0
            if len(lengths) == 1:  # alone: one row per call
                assert calls == expected
                assert delta(node, "wgc_node_batch_size_bucket", name, le="1") == calls
        # together: fewer LLM calls than rows, some of them batches of several requests
        llm_calls = delta(node, "wgc_node_batch_size_count", "LLM")
        if len(lengths) > 1:
            assert llm_calls < rows["LLM"]
            assert delta(node, "wgc_node_batch_size_bucket", "LLM", le="1") < llm_calls
        # every token went through the stream's buffer: a fill sample per accepted item
        assert delta(stream, "wgc_stream_buffer_fill_ratio_count") == rows["LLM"]
        fill = delta(stream, "wgc_stream_buffer_fill_ratio_sum")
        assert 0 < fill <= rows["LLM"]
        assert stream(after, "wgc_stream_buffer_items") == 0  # the requests ended
        # the codec flow's walks start once their chunk is ready: no consumer ever waits
        assert stream(after, "wgc_stream_underruns_total") == 0
    assert orpheus.metrics()[("wgc_process_restarts_total", (("process", "rank 0"),))] == 0


@pytest.mark.slow
@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b'{"inputs": [', "not valid JSON at character 12"),
        (b"", "no body: send a JSON object"),
        (b"[1, 2]", "Input should be a valid dictionary"),
    ],
)
def test_a_body_that_is_not_a_json_object_is_400(orpheus, raw, message) -> None:
    conn = http.client.HTTPConnection(*orpheus.host_port, timeout=30)
    try:
        conn.request("POST", NATIVE, raw, {"content-type": "application/json"})
        resp = conn.getresponse()
        status, reply = resp.status, json.loads(resp.read())
    finally:
        conn.close()
    assert status == 400
    assert reply["error"]["param"] == "body" and reply["error"]["code"] == "invalid"
    assert reply["error"]["problems"][0]["message"].startswith(message), reply


@pytest.mark.slow
def test_speech_that_fails_mid_stream_breaks_the_transfer(orpheus) -> None:
    """Past its deadline after the first audio went out, the speech's connection drops before
    the chunked body's end: the client sees a broken transfer, not a short WAV."""

    def speech(deadline: float | None) -> tuple[float, float, bytes, bool]:
        conn = http.client.HTTPConnection(*orpheus.host_port, timeout=60)
        body = {"model": "orpheus", "input": "hello there, a longer sentence", "deadline": deadline}
        t0 = time.monotonic()
        try:
            conn.request("POST", "/v1/audio/speech", json.dumps(body), JSON)
            resp = conn.getresponse()
            assert resp.status == 200
            head = resp.read(46)  # the header and the first sample
            first = time.monotonic() - t0
            try:
                rest, whole = resp.read(), True
            except http.client.IncompleteRead as exc:
                rest, whole = exc.partial, False
            return first, time.monotonic() - t0, head + rest, whole
        finally:
            conn.close()

    first, total, audio, whole = speech(None)
    assert whole and len(audio) > 46
    if total - first < 0.3:
        pytest.skip(f"the speech takes {total:.2f} s, its first audio {first:.2f} s: too quick")
    _, _, cut, whole = speech(first + (total - first) / 2)
    assert not whole and 46 <= len(cut) < len(audio)


@pytest.mark.slow
def test_the_deployments_limits_bound_its_bodies(orpheus) -> None:
    """`wgc serve --limit` reaches the server (every input case: `test_serve_input_edge`)."""
    deep = {"inputs": [{"modality": "text", "data": json.loads("[" * 20 + "]" * 20)}]}
    status, reply = orpheus.post(NATIVE, {**deep, "want": ["audio"]})
    assert status == 400 and reply["error"]["param"] == "body", reply
    assert "nesting depth is 23, over the limit of 16 (`json_depth`)" in reply["error"]["message"]
    big = {"inputs": [{"modality": "text", "data": "x" * 1_000_000}], "want": ["audio"]}
    status, reply = orpheus.post(NATIVE, big)
    assert status == 413, reply
    assert "over the limit of 1,000,000 (`request_bytes`)" in reply["error"]["message"], reply


def test_a_failure_after_the_first_audio_is_never_a_short_wav() -> None:
    """The speech body itself: the header, the audio so far, then `StreamBroken` (which makes
    the server drop the connection) instead of a clean end."""
    import asyncio

    import torch

    from wgc_runtime.contract import messages as m
    from wgc_runtime.host.server.calls import HttpError
    from wgc_runtime.host.server.openai_media import StreamBroken, _audio

    async def events():
        yield m.Output("r", "speech", "decode", "audio", "audio", (), torch.zeros(8))
        raise HttpError(504, "the request's deadline (1 s) passed", code="timeout")

    async def body() -> list[bytes]:
        out = []
        with pytest.raises(StreamBroken, match="deadline"):
            async for chunk in _audio(events(), 24_000, True):
                out.append(chunk)
        return out

    assert [len(c) for c in asyncio.run(body())] == [44, 16]
