"""The engines on the compiled path, end to end on the Llama example (`wgc_models/llama`): a real
`LlamaDecoder` whose K/V live in the runtime's paged pool, decode steps of concurrent requests
batched across requests (joining and leaving between iterations), and the decode step run as
the plan's captured unit. Every request's tokens equal the reference interpreter's (one request
at a time, no batching, no capture); capture is consumed, and so are the pages."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.narrow import present

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from wgc.driver import Driver  # noqa: E402
from wgc.interp import load_model, make_request, run_request, segment  # noqa: E402
from wgc_runtime.contract.flow import Segment  # noqa: E402
from wgc_runtime.engines.capture import inductor_available  # noqa: E402
from wgc_runtime.host.loading import load_plan  # noqa: E402
from wgc_runtime.host.local import Handle, LocalCluster  # noqa: E402

WALK = ROOT / "wgc_models" / "llama" / "llama.walk"
CPU = ROOT / "wgc_models" / "llama" / "placements" / "cpu.yaml"
NO_INDUCTOR = inductor_available()
PROMPTS = [f"prompt {i}: " + "abc" * (i % 4) for i in range(8)]


def compiled(tmp: Path, placement: Path, sets: dict[str, str] | None = None) -> Path:
    result = Driver().compile(str(WALK), str(placement), sets)
    assert result.ok, [d.message for d in result.errors]
    for name, text in result.files.items():
        (tmp / name).write_text(text)
    return tmp


def placement(tmp: Path, batching: str, pages: int = 512) -> Path:
    p = tmp / "placement.yaml"
    p.write_text(
        "devices: [cpu]\nplace:\n  - nodes: [LLM]\n    ranks: [0]\n"
        f"kv_cache: {{page_size: 16, pages: {pages}, dtype: f32}}\n"
        f"batching: {batching}\nmax_concurrent_requests: 16\n"
    )
    return p


def tokens(h: Handle) -> list[int]:
    assert h.error is None, h.error
    return [int(o.tensor) for o in h.outputs]


@pytest.fixture(scope="module")
def reference() -> dict[str, list[int]]:
    m = load_model(str(WALK))
    out = {}
    for p in PROMPTS:
        req = make_request(m, [segment("text", p)], ["text"])
        # the placements here place the decoder alone: token ids out, not the detokenizer's text
        res = run_request(m, req, placed={"LLM"}, kv_dtype="f32")
        assert res.error is None, res.error
        out[p] = [int(present(e.value)) for e in res.emitted]
    return out


def serve(folder: Path, prompts: list[str], **kw) -> tuple[LocalCluster, list[Handle]]:
    c = LocalCluster(folder, **kw)
    hs = [c.submit(c.request([Segment("text", p)], ["text"])) for p in prompts]
    c.run()
    return c, hs


def test_batched_captured_decode_equals_the_reference(tmp_path, reference) -> None:
    c, hs = serve(compiled(tmp_path, CPU), PROMPTS)
    ex = c.ranks[0]
    assert [tokens(h) for h in hs] == [reference[p] for p in PROMPTS]
    report = ex.captured.report
    assert [u[0] for u in report.units] == ["decode:0 LLM"] and report.backend == "eager"
    # one decode call per emitted token (a request stops early at `eos`), in far fewer
    # batches than calls: batched across requests
    assert ex.captured.fallbacks == 0
    assert ex.captured.rows == sum(len(reference[p]) for p in PROMPTS)
    assert ex.captured.runs < ex.captured.rows / 4
    assert max(ex.captured.batch_sizes) == len(PROMPTS)
    assert ex.kv.used_pages() == {"LLM": 0}  # every request's pages came back
    ex.kv.check()


def test_requests_join_and_leave_between_iterations(tmp_path, reference) -> None:
    """Requests submitted while others decode join the running batch at an iteration
    boundary, and leave it when they stop; nobody's tokens change."""
    c = LocalCluster(compiled(tmp_path, CPU))
    first = [c.submit(c.request([Segment("text", p)], ["text"])) for p in PROMPTS[:4]]
    for _ in range(8):  # the first four prefill, then decode a few tokens
        c.step()
    assert c.ranks[0].captured.batch_sizes == {4: 7}
    late = [c.submit(c.request([Segment("text", p)], ["text"])) for p in PROMPTS[4:]]
    c.run()
    assert [tokens(h) for h in first + late] == [reference[p] for p in PROMPTS]
    sizes = c.ranks[0].captured.batch_sizes
    assert 8 in sizes and 4 in sizes  # all eight together, and the first four alone


def test_without_capture_the_same_tokens(tmp_path, reference) -> None:
    folder = compiled(tmp_path, placement(tmp_path, "{max_batch: 8, capture: []}"))
    _, ranks = load_plan(folder)
    assert ranks[0].captures == ()
    c, hs = serve(folder, PROMPTS[:8])
    assert c.ranks[0].captured.units == {}
    assert [tokens(h) for h in hs] == [reference[p] for p in PROMPTS[:8]]


def test_batches_above_every_bucket_run_the_plain_path(tmp_path, reference) -> None:
    folder = compiled(tmp_path, placement(tmp_path, "{max_batch: 8, capture: [1, 2]}"))
    c, hs = serve(folder, PROMPTS[:6])
    assert [tokens(h) for h in hs] == [reference[p] for p in PROMPTS[:6]]
    [unit] = c.ranks[0].captured.units[("decode", 0)]
    runner = unit.runner
    assert runner.buckets == [1, 2] and runner.eager_runs > 0


def test_a_request_longer_than_its_promise_fails_alone(tmp_path, reference) -> None:
    """`kv_tokens` is what admission promised a request: a prompt past it fails that request
    with the node's message; the others finish and no page is left behind."""
    folder = compiled(tmp_path, CPU, {"kv_tokens": "48"})
    long = "x" * 40  # 40 prompt tokens + 32 decode steps > 48
    assert len(PROMPTS[0]) + 32 <= 48 < len(long) + 32
    c, hs = serve(folder, [PROMPTS[0], long])
    assert hs[1].error is not None and "config kv_tokens = 48" in (hs[1].error.message or "")
    assert tokens(hs[0]) == reference[PROMPTS[0]]
    assert c.ranks[0].kv.used_pages() == {"LLM": 0}


@pytest.mark.slow
@pytest.mark.skipif(NO_INDUCTOR is not None, reason=str(NO_INDUCTOR))
def test_inductor_backend_compiles_the_decode_step_at_start(tmp_path, reference) -> None:
    folder = compiled(
        tmp_path, placement(tmp_path, "{max_batch: 2, capture: [2], backend: inductor}")
    )
    c, hs = serve(folder, PROMPTS[:2])
    [unit] = c.ranks[0].captured.units[("decode", 0)]
    assert unit.runner.backend == "inductor", unit.runner.compile_error
    assert 2 in unit.runner.compile_seconds and unit.runner.compiled_runs > 0
    assert [tokens(h) for h in hs] == [reference[p] for p in PROMPTS[:2]]


def _hf_greedy(hf, prompt: str, n: int) -> list[int]:
    import torch

    ids = torch.tensor([list(prompt.encode())])
    out = []
    with torch.no_grad():
        for _ in range(n):
            nxt = int(hf(ids).logits[0, -1].argmax())
            out.append(nxt)
            ids = torch.cat([ids, torch.tensor([[nxt]])], dim=1)
    return out


def test_a_transformers_checkpoint_serves_the_same_tokens_as_transformers(tmp_path) -> None:
    """`--set checkpoint=DIR` loads a Hugging Face Llama checkpoint by its parameter names; the
    served, batched, captured decode gives `transformers`' greedy tokens."""
    import torch
    import transformers

    torch.manual_seed(1)
    cfg = transformers.LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=False,
    )
    hf = transformers.LlamaForCausalLM(cfg).eval()
    ckpt = tmp_path / "ckpt"
    hf.save_pretrained(ckpt)
    (tmp_path / "plan").mkdir()
    folder = compiled(tmp_path / "plan", CPU, {"checkpoint": str(ckpt), "eos": "-1"})
    _, hs = serve(folder, PROMPTS[:3])
    for p, h in zip(PROMPTS[:3], hs, strict=True):
        assert tokens(h) == _hf_greedy(hf, p, 32)


def test_a_checkpoint_of_other_sizes_is_refused_with_both_sizes(tmp_path) -> None:
    import transformers

    cfg = transformers.LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    ckpt = tmp_path / "ckpt"
    transformers.LlamaForCausalLM(cfg).save_pretrained(ckpt)
    (tmp_path / "plan").mkdir()
    folder = compiled(tmp_path / "plan", CPU, {"checkpoint": str(ckpt)})
    with pytest.raises(Exception, match=r"\(3, 2, 16, 256\).*declares \(2, 2, 16, 256\)"):
        LocalCluster(folder)
