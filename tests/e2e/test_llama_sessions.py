"""Sessions end to end on the Llama example (`wgc_models/llama`, compiled, one CPU rank): a
two-turn chat whose second turn continues the session's KV equals the same conversation
prefilled whole, and the second turn prefills only its new tokens.

The client sends the conversation so far each turn (as chat APIs do); the decoder keeps the
longest prefix its session's sequence holds and prefills the rest (`held_tokens`)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from wgc.driver import Driver  # noqa: E402
from wgc_runtime.contract.flow import Segment  # noqa: E402
from wgc_runtime.host.local import Handle, LocalCluster  # noqa: E402

WALK = ROOT / "wgc_models" / "llama" / "llama.walk"
TURN1 = b"hello there, how are you? "
TURN2 = b"and what about tomorrow? "


def compiled(
    tmp: Path, sessions: str = "sessions: {max_sessions: 2}\n", sets: dict[str, str] | None = None
) -> Path:
    p = tmp / "placement.yaml"
    p.write_text(
        "devices: [cpu]\nplace:\n  - nodes: [LLM]\n    ranks: [0]\n"
        "kv_cache: {page_size: 16, pages: 256, dtype: f32}\n"
        "batching: {max_batch: 4, backend: eager}\nmax_concurrent_requests: 4\n" + sessions
    )
    result = Driver().compile(str(WALK), str(p), sets)
    assert result.ok, [d.message for d in result.errors]
    for name, text in result.files.items():
        (tmp / name).write_text(text)
    return tmp


def ids(data: bytes | list[int]) -> torch.Tensor:
    return torch.tensor(list(data), dtype=torch.int64)


def tokens(h: Handle) -> list[int]:
    assert h.error is None, h.error
    return [int(o.tensor) for o in h.outputs]


def ask(c: LocalCluster, prompt: list[int], session: str | None = None) -> Handle:
    h = c.submit(c.request([Segment("text", ids(prompt))], ["text"]), session=session)
    c.run()
    return h


class Prefilled:
    """Counts the tokens the decoder's engine is given (prefill and decode rows)."""

    def __init__(self, c: LocalCluster) -> None:
        self.node = c.ranks[0].nodes["LLM"]
        self.counts: list[int] = []

    def __enter__(self) -> Prefilled:
        # the llama node's private engine: this test counts the tokens its forward is given
        engine = self.node._engine  # pyright: ignore[reportAttributeAccessIssue]
        forward = engine.forward

        def counted(seqs, toks):
            self.counts.extend(int(t.numel()) for t in toks)
            return forward(seqs, toks)

        engine.forward = counted
        return self

    def __exit__(self, *exc) -> None:
        del self.node._engine.forward  # pyright: ignore[reportAttributeAccessIssue]


def test_second_turn_equals_the_whole_conversation_and_prefills_only_its_tokens(tmp_path):
    c = LocalCluster(compiled(tmp_path))
    first = list(TURN1)
    reply = tokens(ask(c, first, session="chat"))
    assert reply
    conversation = first + reply + list(TURN2)
    with Prefilled(c) as turn2:
        second = tokens(ask(c, conversation, session="chat"))
    # the decode loop feeds every token it emits (`emit token`, then `LLM(token)`), so the
    # sequence held the first turn's prompt and whole reply: the second turn prefills the new
    # text alone
    assert turn2.counts[0] == len(TURN2)
    with Prefilled(c) as whole:
        alone = tokens(ask(c, conversation))  # no session: the conversation prefilled whole
    assert whole.counts[0] == len(conversation)
    assert second == alone
    info = {s.session: s for s in c.ranks[0].sessions.list()}
    assert set(info) == {"chat"} and info["chat"].pages > 0 and not info["chat"].active
    used = c.ranks[0].kv.used_pages()
    assert sum(used.values()) == info["chat"].pages  # the ended plain request freed its own


def test_a_diverging_history_is_cut_back_to_the_common_prefix(tmp_path):
    c = LocalCluster(compiled(tmp_path))
    first = list(TURN1)
    ask(c, first, session="chat")
    other = list(TURN1[:5]) + list(b"something else entirely ")
    edited = tokens(ask(c, other, session="chat"))
    fresh = tokens(ask(c, other))
    assert edited == fresh


def test_sessions_are_evicted_least_recently_used_first(tmp_path):
    c = LocalCluster(compiled(tmp_path))  # max_sessions: 2
    for name in ("a", "b", "a", "c"):
        tokens(ask(c, list(TURN1), session=name))
    kept = c.ranks[0].sessions
    assert [s.session for s in kept.list()] == ["a", "c"]  # `b` was forgotten for `c`
    assert [s[0] for s in c.conductor.sessions.listing(0.0)] == ["a", "c"]
    assert c.conductor.drop_session("a") and not c.conductor.drop_session("a")
    c.step()  # deliver `ForgetSession`
    assert [s.session for s in kept.list()] == ["c"]
    pages = sum(c.ranks[0].kv.used_pages().values())
    assert pages == kept.list()[0].pages  # nothing but `c`'s pages held
    c.ranks[0].kv.check()


def test_a_session_runs_one_request_at_a_time(tmp_path):
    c = LocalCluster(compiled(tmp_path))
    req = c.request([Segment("text", ids(list(TURN1)))], ["text"])
    first = c.submit(req, session="chat")
    second = c.submit(req, session="chat")
    c.run()
    tokens(first)
    assert second.finished is not None and second.finished.kind == "busy"


def test_a_placement_without_sessions_refuses_a_session_at_the_door(tmp_path):
    c = LocalCluster(compiled(tmp_path, sessions=""))
    h = ask(c, list(TURN1), session="chat")
    assert h.error is not None and "keeps no sessions" in str(h.error)
    h = ask(LocalCluster(compiled(tmp_path)), list(TURN1), session="no spaces")
    assert h.error is not None and "session id" in str(h.error)
    split = tmp_path / "split"  # prefill and decode on two groups: the state moves
    split.mkdir()
    p = split / "placement.yaml"
    p.write_text(
        "devices: [cpu, cpu]\nplace:\n  - nodes: [LLM]\n    ranks: [0]\n    walks: [prefill]\n"
        "  - nodes: [LLM]\n    ranks: [1]\n    walks: [decode]\n"
        "kv_cache: {page_size: 16, pages: 256, dtype: f32}\nsessions: {max_sessions: 2}\n"
    )
    result = Driver().compile(str(WALK), str(p), None)
    assert result.ok, [d.message for d in result.errors]
    for name, text in result.files.items():
        (split / name).write_text(text)
    h = ask(LocalCluster(split), list(TURN1), session="chat")
    assert h.error is not None and "between rank groups" in str(h.error)


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__, "-q"])
