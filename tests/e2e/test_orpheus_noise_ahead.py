"""Orpheus's vocoder draws its windows' noise ahead (`Node.expect` / `Node.idle`, `NoiseAhead`):
the SNAC rank learns each request from the first token that reaches it — its options riding on
that first `StreamItem` from another rank (``cpu-2rank``), or on the local push (``cpu``) — and
an idle rank draws the noise before the windows fill. Every window then decodes with noise drawn
ahead, and the audio is bit for bit the audio of the same deployment drawing it at decode time,
for greedy, seeded-sampling and penalised requests alike; nothing is left held afterwards. A
node whose `idle` raises is not asked again (its calls draw their own noise); one whose `expect`
raises fails that request with the node's name, on either path, leaving nothing behind."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.narrow import present

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

pytest.importorskip("transformers")
pytest.importorskip("snac")

import torch  # noqa: E402

from tests.e2e.speech_support import orpheus  # noqa: E402
from tests.e2e.test_speech_examples import REQUESTS, audio_of, one_thread  # noqa: E402
from wgc_models.orpheus.nodes import SnacDecoder  # noqa: E402
from wgc_runtime.contract.flow import Segment  # noqa: E402
from wgc_runtime.contract.messages import StreamItem, StreamItems, unpack_items  # noqa: E402
from wgc_runtime.host.local import LocalCluster  # noqa: E402


def vocoder(c: LocalCluster) -> SnacDecoder:
    (node,) = [
        n for ex in c.ranks.values() for n in ex.nodes.values() if isinstance(n, SnacDecoder)
    ]
    return node


def run(c: LocalCluster, *, idle: bool) -> dict:
    handles = {
        rid: c.submit(c.request([Segment("text", text)], ["audio"], options), rid, seed=seed)
        for rid, (text, options, seed) in REQUESTS["orpheus"].items()
    }
    while not all(h.done for h in handles.values()):
        if idle:  # as a rank between its calls: everything noted so far is drawn first
            for ex in c.ranks.values():
                while ex.idle():
                    continue
        if not c.step():
            c.settle()
    return handles


@pytest.mark.parametrize("placement", ["cpu", "cpu-2rank"])
def test_noise_drawn_ahead_speaks_the_same_audio(tmp_path, placement) -> None:
    family = orpheus(tmp_path / "ckpt")
    folder = family.compile(tmp_path / placement, placement)
    with one_thread():
        plain = LocalCluster(folder)
        vocoder(plain).ahead.limit = 0  # notes every request, draws nothing ahead
        want = run(plain, idle=True)
        c = LocalCluster(folder)
        sent: list[StreamItem] = []
        send = c._send

        def recording(to, msg) -> None:  # the ranks' messages, the stream items kept
            if isinstance(msg, StreamItem):
                sent.append(msg)
            elif isinstance(msg, StreamItems):  # a decode step's items for one owner
                sent.extend(unpack_items(msg))
            send(to, msg)

        for ex in c.ranks.values():
            ex.outbox = recording
        got = run(c, idle=True)
    node = vocoder(c)
    windows = 0
    for rid, h in got.items():
        assert h.error is None and want[rid].error is None, (rid, h.error)
        audio = audio_of(h)
        assert audio.numel() > 0 and torch.equal(audio, audio_of(want[rid])), rid
        windows += sum(1 for o in h.outputs if o.modality == "audio")
    assert vocoder(plain).ahead.drawn == 0
    assert node.ahead.used == windows > 0  # every window decoded with noise drawn ahead
    assert node.ahead.drawn >= windows and node.ahead.held() == 0  # released with the requests
    if placement == "cpu-2rank":  # one header per request, on its first item
        headed = [m for m in sent if m.options is not None]
        assert len({m.request for m in headed}) == len(headed) == len(got)
        assert all(dict(present(m.options))["max_tokens"] > 0 for m in headed)
        assert len(sent) > len(headed)
    else:
        assert sent == []  # one rank: the header rides on the local push


def test_a_node_failing_at_work_ahead_is_not_asked_again(tmp_path) -> None:
    family = orpheus(tmp_path / "ckpt")
    c = LocalCluster(family.compile(tmp_path / "cpu", "cpu"))
    node = vocoder(c)
    calls = []

    def broken() -> bool:
        calls.append(1)
        raise RuntimeError("boom")

    node.idle = broken  # type: ignore[method-assign]
    (ex,) = c.ranks.values()
    with pytest.raises(RuntimeError, match="boom"):
        ex.idle()
    assert not ex.idle() and calls == [1]  # dropped from the rank's idlers
    h = c.submit(c.request([Segment("text", "hi")], ["audio"], {"max_tokens": 35}), "r")
    c.run()
    assert h.error is None and audio_of(h).numel() > 0  # its calls draw their own noise


@pytest.mark.parametrize("placement", ["cpu", "cpu-2rank"])
def test_a_node_failing_to_prepare_fails_its_request_with_its_name(tmp_path, placement) -> None:
    family = orpheus(tmp_path / "ckpt")
    c = LocalCluster(family.compile(tmp_path / placement, placement))

    def broken(ctx) -> None:
        raise ValueError(f"cannot prepare {ctx.request_id}")

    vocoder(c).expect = broken  # type: ignore[method-assign]
    h = c.submit(c.request([Segment("text", "hi")], ["audio"], {"max_tokens": 35}), "r")
    c.run()
    assert h.error is not None, "the request went on"
    assert "snac_decoder" in str(h.error) and "failed to prepare" in str(h.error), h.error
    for ex in c.ranks.values():  # nothing left behind
        assert not ex.requests and all(n == 0 for n in ex.kv.used_pages().values())
