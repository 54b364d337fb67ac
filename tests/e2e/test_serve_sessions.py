"""Sessions through `wgc serve` on the Llama example: the native route's ``session`` field, a
second turn equal to the conversation sent whole without one, the chat route and the ZeroMQ
client naming sessions, ``GET``/``DELETE
/v1/sessions`` (API keys apply); a full session budget answered 429 (``Retry-After``, code
``busy``) until a session is freed."""

from __future__ import annotations

import base64
import json
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.narrow import present

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

pytest.importorskip("fastapi")

from tests.e2e.serve_support import served  # noqa: E402
from tests.e2e.test_llama_sessions import TURN1, TURN2, compiled  # noqa: E402
from wgc_runtime.host.client import Client  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="needs POSIX shm"),
]
NATIVE = "/v1/requests"


def ask(s, prompt: list[int], session: str | None = None) -> list[int]:
    body = {"inputs": [{"modality": "text", "data": prompt, "dtype": "i64"}], "want": ["text"]}
    if session is not None:
        body["session"] = session
    status, got = s.post(NATIVE, body)
    assert status == 200, got
    out = []
    for o in got["outputs"]:
        v = o["value"]
        out += np.frombuffer(base64.b64decode(v["b64"]), dtype=np.int64).tolist()
    return out


def test_a_two_turn_chat_through_wgc_serve(tmp_path) -> None:
    folder = compiled(tmp_path)
    with served(str(folder), "--api-key", "k1") as s:
        status, _, _ = s.request("GET", "/v1/sessions")
        assert status == 401  # API keys apply to the session routes
        s.key = "k1"
        first = list(TURN1)
        reply = ask(s, first, session="chat")
        conversation = first + reply + list(TURN2)
        second = ask(s, conversation, session="chat")
        assert second == ask(s, conversation)  # no session: prefilled whole
        with Client(s.client_address) as client:  # the ZeroMQ client names sessions too
            inputs = [("text", torch.tensor(conversation, dtype=torch.int64))]
            got = client.submit(inputs, ["text"], session="chat", deadline=120).collect()
        assert [int(present(o.value).reshape(-1)[0]) for o in got] == second
        listed = s.get_json("/v1/sessions")
        assert listed["max_sessions"] == 2
        assert [(d["id"], d["running"]) for d in listed["data"]] == [("chat", False)]
        chat = {"messages": [{"role": "user", "content": "hello"}], "session": "talk"}
        status, got = s.post("/v1/chat/completions", chat)
        assert status == 200, got
        reply = got["choices"][0]["message"]["content"]
        chat["messages"] += [
            {"role": "assistant", "content": reply},
            {"role": "user", "content": "and then?"},
        ]
        status, got = s.post("/v1/chat/completions", chat)
        assert status == 200, got
        listed = s.get_json("/v1/sessions")
        assert [d["id"] for d in listed["data"]] == ["chat", "talk"]
        status, got = s.post("/v1/chat/completions", {**chat, "n": 2})
        assert status == 400 and "one conversation" in str(got)
        status, _, _ = s.request("DELETE", "/v1/sessions/chat")
        assert status == 200
        status, _, _ = s.request("DELETE", "/v1/sessions/chat")
        assert status == 404
        assert [d["id"] for d in s.get_json("/v1/sessions")["data"]] == ["talk"]
        bad = {"inputs": [{"modality": "text", "data": "hi"}], "want": ["text"], "session": "a b"}
        status, got = s.post(NATIVE, bad)
        assert status == 400 and "session" in str(got)


def test_a_full_session_budget_is_429_until_a_session_is_freed(tmp_path) -> None:
    """`sessions: {max_sessions: 1}`: while session `a` has a (long) request running, a request
    of a new session `b` is HTTP 429 with ``Retry-After`` and the code ``busy``; once `a`'s
    request is done and `a` is deleted, `b` runs."""
    folder = compiled(
        tmp_path,
        sessions="sessions: {max_sessions: 1}\n",
        sets={"max_new_tokens": "1500", "kv_tokens": "1600", "eos": "-1"},
    )
    with served(str(folder)) as s:
        long: dict[str, list[int]] = {}
        running = threading.Thread(target=lambda: long.update(a=ask(s, list(TURN1), "a")))
        running.start()
        deadline = time.monotonic() + 60
        while not any(d["running"] for d in s.get_json("/v1/sessions")["data"]):
            assert running.is_alive() and time.monotonic() < deadline, "`a` never ran"
            time.sleep(0.02)
        body = {"inputs": [{"modality": "text", "data": list(TURN2), "dtype": "i64"}]}
        status, headers, raw = s.request("POST", NATIVE, {**body, "want": ["text"], "session": "b"})
        assert running.is_alive(), "`a` ended before `b` was asked: make it longer"
        assert status == 429, raw
        assert int(headers["retry-after"]) >= 1
        assert json.loads(raw)["error"]["code"] == "busy"
        running.join(timeout=120)
        assert len(long["a"]) == 1500
        assert [d["id"] for d in s.get_json("/v1/sessions")["data"]] == ["a"]
        status, _, _ = s.request("DELETE", "/v1/sessions/a")
        assert status == 200
        assert ask(s, list(TURN2), "b")
        assert [d["id"] for d in s.get_json("/v1/sessions")["data"]] == ["b"]
