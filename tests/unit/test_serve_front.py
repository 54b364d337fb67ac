"""The serving surface's pieces that need no process: the door's bounds
(`wgc_runtime.core.conductor.bounds`) and input limits at admission, API keys (`auth`), the
body checks (`body_limits`), the OpenAI field mapping (`openai_params`), the access log line,
the loopback test of `wgc serve --host`, ``WGC_API_KEY``, and a large body refused on its
first bytes or parsed once, off the loop, for its route (`parsed_route`)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

pytest.importorskip("fastapi")

from fastapi import Request  # noqa: E402
from pydantic import BaseModel  # noqa: E402

from wgc.cli.serve import is_loopback  # noqa: E402
from wgc.config import Env  # noqa: E402
from wgc_runtime.contract.flow import Segment  # noqa: E402
from wgc_runtime.host.admission import admit  # noqa: E402
from wgc_runtime.host.inputs import InputError, Limits  # noqa: E402
from wgc_runtime.host.loading import load_conductor  # noqa: E402
from wgc_runtime.host.server.access_log import line  # noqa: E402
from wgc_runtime.host.server.auth import ApiKeys, key_of, matches  # noqa: E402
from wgc_runtime.host.server.body_limits import BodyLimits, counts, early, is_json  # noqa: E402
from wgc_runtime.host.server.parsed_route import PARSED, ParsedRoute  # noqa: E402


def refused(family: str, segments, want, options=None, limits=None) -> dict[str, str]:
    spec = load_conductor(ROOT / "generated" / family / "cpu")
    request = spec.request(segments, want, options)
    _, problems = admit(spec, request, strict=True, limits=limits)
    return {p.field: p.message for p in problems}


@pytest.mark.parametrize("value", [-1, 0, 2**63 - 1, 641])
def test_a_token_limit_is_at_least_1_and_within_kv_tokens(value) -> None:
    got = refused("bagel", [Segment("text", "hi")], ["text"], {"max_tokens": value})
    assert set(got) == {"options.max_tokens"}
    assert ("at least 1" if value < 1 else "(`kv_tokens`)") in got["options.max_tokens"]
    assert refused("bagel", [Segment("text", "hi")], ["text"], {"max_tokens": 640}) == {}


@pytest.mark.parametrize(
    ("name", "value"),
    [("temperature", 1e308), ("temperature", -0.5), ("top_p", 0.0), ("top_p", 1.5),
     ("repetition_penalty", -1.0), ("talker_temperature", 1e9)],
)  # fmt: skip
def test_sampling_values_are_bounded(name, value) -> None:
    got = refused("qwen3_omni", [Segment("text", "hi")], ["text"], {name: value})
    assert list(got) == [f"options.{name}"], got
    assert refused("qwen3_omni", [Segment("text", "hi")], ["text"], {name: 0.5}) == {}


def test_token_ids_are_within_the_vocabulary() -> None:
    ids = np.array([1, 2, 600], dtype=np.int64)  # Orpheus: text_vocab 512
    got = refused("orpheus", [Segment("text", ids)], ["audio"])
    assert got == {"inputs[0].data": "token id 600 is not in [0, 512)"}
    got = refused("qwen3_omni", [Segment("text", np.array([-3]))], ["text"])  # no vocab param
    assert got == {"inputs[0].data": "token id -3 is not in at least 0"}


def test_a_prompt_over_kv_tokens_is_refused() -> None:
    got = refused("bagel", [Segment("text", "x" * 641)], ["text"])
    assert "the prompt is 641 tokens, over the 640" in got["inputs"]


def test_the_input_limits_come_first_segment_count_before_anything() -> None:
    many = [Segment("text", "a")] * 20_001
    got = refused("bagel", many, ["text"], limits=Limits(segments=20_000))
    assert got == {"inputs": "its segment count is 20,001, over the limit of 20,000 (`segments`)"}
    got = refused("bagel", [Segment("text", "a" * 11)], ["text"], limits=Limits(text_chars=10))
    assert list(got) == ["inputs[0].data"]


def test_keys_are_compared_whole() -> None:
    keys = (b"sk-one", b"sk-two")
    assert matches(b"sk-two", keys) and not matches(b"sk-tw", keys)
    assert not matches(None, keys) and not matches(b"", keys)
    assert key_of([(b"authorization", b"bearer  sk-one ")]) == b"sk-one"
    assert key_of([(b"authorization", b"Basic abc")]) is None


def _call(app, path: str, headers, body: bytes = b"", method: str = "POST", chunks=None):
    sent: list[dict] = []
    messages = chunks if chunks is not None else [{"type": "http.request", "body": body}]

    async def receive():
        if messages:
            return messages.pop(0)
        await asyncio.sleep(3600)

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path, "headers": headers}
    asyncio.run(app(scope, receive, send))
    return sent


async def _ok(scope, receive, send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def test_api_keys_guard_every_route_but_health() -> None:
    app = ApiKeys(_ok, ["sk-a", "sk-b"])
    no_key = _call(app, "/v1/models", [], method="GET")
    assert no_key[0]["status"] == 401
    assert (b"www-authenticate", b"Bearer") in no_key[0]["headers"]
    assert json.loads(no_key[1]["body"])["error"]["code"] == "invalid_api_key"
    assert _call(app, "/", [(b"authorization", b"Bearer sk-c")], method="GET")[0]["status"] == 401
    assert _call(app, "/", [(b"authorization", b"Bearer sk-b")], method="GET")[0]["status"] == 200
    assert _call(app, "/health", [], method="GET")[0]["status"] == 200
    assert _call(ApiKeys(_ok, []), "/v1/models", [], method="GET")[0]["status"] == 200


@pytest.mark.parametrize(
    "kind", [b"application/json", b"APPLICATION/JSON", b"Application/Json; charset=utf-8",
             b"application/vnd.api+json", b"text/plain+JSON"],
)  # fmt: skip
def test_every_json_content_type_has_its_depth_checked(kind) -> None:
    assert is_json(kind)
    app = BodyLimits(_ok, Limits(json_depth=8))
    sent = _call(app, "/v1/requests", [(b"content-type", kind)], b"[" * 50 + b"]" * 50)
    assert sent[0]["status"] == 400
    assert json.loads(sent[1]["body"])["error"]["code"] == "too_deep"


def test_segments_and_parts_are_counted_before_parsing() -> None:
    limits = Limits(segments=3)
    body = {"inputs": [{"modality": "text", "data": "a"}] * 4}
    with pytest.raises(InputError, match="`segments`"):
        counts(json.dumps(body).encode(), limits)
    chat = {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}] * 4}]}
    with pytest.raises(InputError, match="messages: its segment count is 4"):
        counts(json.dumps(chat).encode(), limits)
    counts(json.dumps({"inputs": body["inputs"][:3]}).encode(), limits)


def test_a_prefix_that_already_holds_too_much_is_refused_on_it() -> None:
    limits = Limits(segments=3)
    seg = b'{"modality": "text", "data": "a"}, '
    assert "`segments`" in (
        early(bytearray(b'{"inputs": [' + seg * 4 + b'{"mo'), limits, None) or ""
    )
    assert early(bytearray(b'{"inputs": [' + seg * 3 + b'{"mo'), limits, None) is None
    # braces inside a string are not segments: the closed prefix does not parse
    inside = b'{"inputs": [{"modality": "text", "data": "' + b"{}, " * 10
    assert early(bytearray(inside), limits, None) is None
    tokens = b'{"inputs": [{"modality": "text", "data": [' + b"1, " * 20
    assert "`kv_tokens`" in (early(bytearray(tokens), limits, 10) or "")
    assert early(bytearray(tokens), limits, 30) is None


def test_a_body_refused_on_its_first_chunks_is_not_read_on() -> None:
    app = BodyLimits(_ok, Limits(segments=3))
    seg = b'{"modality": "text", "data": "a"},'
    chunks = [
        {"type": "http.request", "body": b'{"inputs": [' + seg * 5, "more_body": True},
        {"type": "http.request", "body": seg * 5, "more_body": True},  # never read
    ]
    sent = _call(app, "/v1/requests", [(b"content-type", b"application/json")], chunks=chunks)
    assert sent[0]["status"] == 400 and len(chunks) == 1
    assert json.loads(sent[1]["body"])["error"]["code"] == "too_many_segments"


class _Body(BaseModel):
    inputs: list[dict]


def test_a_large_body_is_parsed_once_off_the_loop_and_handed_to_its_route() -> None:
    from fastapi import APIRouter, FastAPI
    from fastapi.testclient import TestClient

    seen: list[bool] = []
    api = APIRouter(route_class=ParsedRoute)

    @api.post("/x")
    async def x(body: _Body, http: Request) -> dict:
        seen.append(PARSED in http.scope)
        return {"n": len(body.inputs)}

    app = FastAPI()
    app.include_router(api)
    app.add_middleware(BodyLimits, limits=Limits())
    with TestClient(app) as c:
        big = {"inputs": [{"modality": "text", "data": "a" * 100}] * 3000}  # > 256 KiB
        assert c.post("/x", json=big).json() == {"n": 3000}
        assert c.post("/x", json={"inputs": []}).json() == {"n": 0}
        bad = c.post("/x", content=b'{"inputs": [' + b'{"a": 1},' * 40000 + b"]",
                     headers={"content-type": "application/json"})  # fmt: skip
        assert bad.status_code == 422 and bad.json()["detail"][0]["type"] == "json_invalid"
    assert seen == [True, False]


def test_a_body_that_stops_arriving_is_408() -> None:
    app = BodyLimits(_ok, Limits(), body_timeout_s=0.05)
    chunks = [{"type": "http.request", "body": b"{", "more_body": True}]
    sent = _call(app, "/v1/requests", [(b"content-type", b"application/json")], chunks=chunks)
    assert sent[0]["status"] == 408 and (b"connection", b"close") in sent[0]["headers"]


def test_log_lines() -> None:
    fields = {"id": "http-1", "route": "/v1/requests", "status": 200, "outputs": {"text": 3}}
    assert json.loads(line(fields, "json")) == fields
    assert line(fields, "text") == 'id=http-1 route=/v1/requests status=200 outputs={"text":3}'


def test_loopback_hosts() -> None:
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2", "[::1]"):
        assert is_loopback(host), host
    for host in ("0.0.0.0", "::", "10.0.0.1", "example.org"):
        assert not is_loopback(host), host


def test_api_keys_from_the_environment() -> None:
    assert Env.from_environ({"WGC_API_KEY": "sk-1, sk-2,"}).api_keys == ("sk-1", "sk-2")
    assert Env.from_environ({}).api_keys == ()


def test_every_zeromq_socket_bounds_its_frames() -> None:
    """A client's frame past 256 MiB is never received (it was: 512 MB, decoded); frames
    between the deployment's processes, and to a client, are bounded too."""
    import zmq

    from wgc_runtime.host.client import Client
    from wgc_runtime.host.transport.sockets import CLIENT_FRAME_BYTES, MAX_FRAME_BYTES, ClientPort

    ctx = zmq.Context()
    port = ClientPort(ctx=ctx)
    try:
        assert port.sock.getsockopt(zmq.MAXMSGSIZE) == CLIENT_FRAME_BYTES == 256 << 20
        with Client(port.address) as client:
            assert client.sock.getsockopt(zmq.MAXMSGSIZE) == MAX_FRAME_BYTES
    finally:
        port.close()
        ctx.term()
