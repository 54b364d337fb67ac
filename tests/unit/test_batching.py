"""Continuous batching: joins and leaves mid-loop give the same per-request results as running
each request alone; the capture path (static buffers, eager on the CPU) matches the plain path;
pages are freed as requests leave; admission waits or refuses."""

from __future__ import annotations

import pytest
import torch

from wgc_models.layers.config import DecoderConfig
from wgc_models.layers.decode_engine import DecoderEngine
from wgc_models.layers.decoder import LlamaDecoder
from wgc_runtime.engines.batching import ContinuousBatcher, GenRequest, default_buckets

CFG = DecoderConfig(
    vocab_size=96,
    hidden_size=48,
    intermediate_size=96,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=12,
    rope_theta=1000.0,
)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = LlamaDecoder(CFG).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, 0.3)
    return m


def _work(n=10, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [
        (
            torch.randint(
                0, CFG.vocab_size, (int(torch.randint(1, 20, (1,), generator=g)),), generator=g
            ),
            int(torch.randint(1, 16, (1,), generator=g)),
        )
        for _ in range(n)
    ]


def _batcher(model, pages=256, **kw):
    engine = DecoderEngine.build(model, pages=pages, page_size=4)
    kw.setdefault("max_seq_len", 64)
    return ContinuousBatcher(engine, keep_logits=True, **kw)


def _alone(model, work, capture=False):
    """Each request on its own (batch of one, plain path): the reference."""
    out = []
    for i, (prompt, n) in enumerate(work):
        b = _batcher(model, max_batch=1, capture=capture)
        out.append(b.run([GenRequest(i, prompt, n)])[0])
    return out


def _same(got: GenRequest, ref: GenRequest, tol=1e-5):
    assert got.tokens == ref.tokens, got.id
    assert len(got.logits) == len(ref.logits)
    for a, b in zip(got.logits, ref.logits, strict=True):
        assert (a - b).abs().max().item() < tol


@pytest.mark.parametrize("capture", [False, True], ids=["plain", "capture"])
def test_joins_and_leaves_mid_loop_match_unbatched(model, capture):
    work = _work()
    refs = _alone(model, work)
    b = _batcher(model, max_batch=3, capture=capture)
    reqs = [GenRequest(i, p, n) for i, (p, n) in enumerate(work)]
    for r in reqs[:4]:
        b.submit(r)
    b.step()
    b.step()
    for r in reqs[4:]:  # arrive while others are mid-loop
        b.submit(r)
    while not b.idle:
        b.step()
    for r, ref in zip(reqs, refs, strict=True):
        _same(r, ref)
    # requests really joined a running batch, at different positions, and left early
    assert max(b.batch_sizes) == 3
    assert len({r.joined_at for r in reqs}) > 3
    assert min(r.left_at for r in reqs) < max(r.joined_at for r in reqs)
    b.engine.pool.check()
    b.engine.close()
    assert b.engine.pool.used_pages == 0


def test_capture_path_matches_plain_path(model):
    work = _work(12, seed=5)
    outs = {}
    for capture, thread in ((False, None), (True, False), (True, True)):
        b = _batcher(model, max_batch=5, capture=capture, plan_thread=thread)
        reqs = [GenRequest(i, p, n) for i, (p, n) in enumerate(work)]
        b.run(reqs)
        b.close()
        outs[(capture, thread)] = reqs
        if capture:
            assert b.runner.eager_runs > 0 and b.runner.replays == 0  # CPU: eager, same buffers
    plain = outs[(False, None)]
    for key in ((True, False), (True, True)):
        for got, ref in zip(outs[key], plain, strict=True):
            _same(got, ref)


def test_slowest_request_does_not_hold_the_batch(model):
    prompt = torch.arange(1, 6)
    b = _batcher(model, max_batch=2, capture=True)
    slow = b.submit(GenRequest("slow", prompt, 40))
    fast = [b.submit(GenRequest(f"f{i}", prompt + i, 3)) for i in range(5)]
    b.run()
    assert all(f.left_at < slow.left_at for f in fast)
    # the four later fast requests ran beside the slow one, not after it
    assert all(f.joined_at < slow.left_at for f in fast)
    assert b.batch_sizes.count(2) >= 8


def test_stop_token_leaves_early_and_frees(model):
    work = _work(3, seed=7)
    refs = _alone(model, work)
    stop = refs[0].tokens[2]
    b = _batcher(model, max_batch=3, capture=True)
    reqs = [GenRequest(i, p, n, stop_tokens=frozenset({stop})) for i, (p, n) in enumerate(work)]
    b.run(reqs)
    for r, ref in zip(reqs, refs, strict=True):
        cut = ref.tokens.index(stop) + 1 if stop in ref.tokens else len(ref.tokens)
        assert r.tokens == ref.tokens[:cut]
    b.engine.close()
    b.engine.pool.check()
    assert b.engine.pool.used_pages == 0


def test_cancel_frees_pages(model):
    b = _batcher(model, max_batch=4, capture=True)
    reqs = [b.submit(GenRequest(i, torch.arange(1, 9), 30)) for i in range(4)]
    for _ in range(5):
        b.step()
    b.cancel(1)
    b.cancel(3)
    assert reqs[1].error == "cancelled" and reqs[1].done
    b.run()
    assert [len(r.tokens) for r in reqs] == [30, 5, 30, 5]
    b.engine.close()
    b.engine.pool.check()
    assert b.engine.pool.used_pages == 0


def test_admission_waits_then_refuses(model):
    # 1 pad page + room for exactly two requests of 8 + 8 tokens (4 pages each, page size 4)
    b = _batcher(model, pages=9, max_batch=4, capture=True)
    reqs = [b.submit(GenRequest(i, torch.arange(1, 9), 8)) for i in range(3)]
    b.step()
    assert [r.joined_at for r in reqs] == [0, 0, -1]  # the third waits for pages
    b.run()
    assert all(len(r.tokens) == 8 and r.error is None for r in reqs)
    assert reqs[2].joined_at >= min(reqs[0].left_at, reqs[1].left_at)
    huge = b.submit(GenRequest("huge", torch.arange(1, 30), 30))
    b.run()
    assert huge.error is not None and "kv pool full" in huge.error


def test_submit_checks_lengths(model):
    b = _batcher(model, max_batch=2, capture=False, max_seq_len=16)
    with pytest.raises(ValueError, match="over max_seq_len 16"):
        b.submit(GenRequest("x", torch.arange(10), 10))
    with pytest.raises(ValueError, match="empty prompt"):
        b.submit(GenRequest("y", torch.zeros(0, dtype=torch.long), 1))


def test_default_buckets():
    assert default_buckets(16) == (1, 2, 4, 8, 16)
    assert default_buckets(12) == (1, 2, 4, 8, 12)
    assert default_buckets(1) == (1,)
