"""The compiled decode step (`GraphRunner` backend ``"inductor"``, the CPU analogue of graph
capture): the same logits as the eager static step (fp32, max abs error < 1e-4) and the same
greedy tokens, per bucket artifacts, fallback to eager when a unit does not compile, and the
backend argument's validation.

The compiling tests are ``slow`` (one inductor compile each: a few seconds, tens on a loaded
machine) and skip where inductor cannot work (no C++ compiler)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import torch
from torch._dynamo.utils import counters

from wgc_models.layers.config import DecoderConfig
from wgc_models.layers.decode_engine import DecoderEngine
from wgc_models.layers.decoder import LlamaDecoder
from wgc_runtime.engines.batching import ContinuousBatcher, GenRequest
from wgc_runtime.engines.capture import (
    GraphError,
    GraphRunner,
    StaticBuffer,
    inductor_available,
)

NO_INDUCTOR = inductor_available()
needs_inductor = pytest.mark.skipif(NO_INDUCTOR is not None, reason=str(NO_INDUCTOR))

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


def _work():
    """Ragged: different prompt lengths and lengths of generation (rows leave mid-loop, so
    the batch shrinks inside the one bucket and padding rows run)."""
    g = torch.Generator().manual_seed(3)
    lens, news = (3, 11, 6), (9, 4, 12)
    return [
        (torch.randint(0, CFG.vocab_size, (n,), generator=g), new)
        for n, new in zip(lens, news, strict=True)
    ]


def _run(model, backend: str | None, capture: bool = True) -> tuple[list[GenRequest], Any]:
    engine = DecoderEngine.build(model, pages=64, page_size=4)
    b = ContinuousBatcher(
        engine,
        max_batch=4,
        max_seq_len=32,
        buckets=(4,),  # one bucket: one compile
        capture=capture,
        keep_logits=True,
        graph_backend=backend,
    )
    reqs = b.run([GenRequest(i, p, n) for i, (p, n) in enumerate(_work())])
    b.close()
    engine.close()
    assert engine.pool.free_pages == engine.pool.num_pages  # no page leaks
    return sorted(reqs, key=lambda r: r.id), b.runner


@pytest.mark.slow
@needs_inductor
def test_compiled_step_matches_eager_logits_and_tokens(model):
    eager, _ = _run(model, "eager")
    plain, _ = _run(model, None, capture=False)
    compiled, runner = _run(model, "inductor")
    assert runner.backend == "inductor" and runner.compile_error is None
    assert all(b.compiled is not None and b.compiled.direct for b in runner._buckets.values())
    assert set(runner.compile_seconds) == {4}
    assert runner.compiled_runs > 0 and runner.eager_runs == 0
    for got, ref, ref2 in zip(compiled, eager, plain, strict=True):
        assert got.tokens == ref.tokens == ref2.tokens, got.id
        assert len(got.logits) == len(ref.logits)
        for a, b in zip(got.logits, ref.logits, strict=True):
            assert (a - b).abs().max().item() < 1e-4


def _affine(calls: list):
    def fn(bufs):
        calls.append(bufs["x"].shape[0])
        return {"y": bufs["x"] * 2 + bufs["b"], "s": bufs["x"].sum(-1)}

    return fn


def _pure(bufs):
    # no Python side effects: a compiled (like a recorded) unit replays tensor work only
    return {"y": bufs["x"] * 2 + bufs["b"], "s": bufs["x"].sum(-1)}


INPUTS = {"x": StaticBuffer((3,), torch.float32, 0.0), "b": StaticBuffer((3,), torch.float32, -1.0)}


@pytest.mark.slow
@needs_inductor
def test_one_artifact_per_bucket_with_padding_and_carry():
    r = GraphRunner(_pure, INPUTS, (2, 4), backend="inductor", carry={"x": "y"}).capture()
    assert set(r.compile_seconds) == {2, 4}
    graphs = counters["stats"]["unique_graphs"]
    assert graphs >= 2  # (the counter is live: one graph per bucket so far)
    x = torch.arange(9.0).view(3, 3)
    out = r.run({"x": x, "b": torch.ones(3, 3)}, 3)  # bucket 4, one padding row
    assert torch.equal(out["y"], x * 2 + 1) and torch.equal(out["s"], x.sum(-1))
    out = r.run({}, 3)  # the carry fed y back into x inside the compiled step
    assert torch.equal(out["y"], (x * 2 + 1) * 2 + 1)
    out = r.run({"x": x[:2], "b": torch.zeros(2, 3)}, 2)
    assert torch.equal(out["y"], x[:2] * 2)
    assert r.compiled_runs == 3 and r.eager_runs == 0
    assert counters["stats"]["unique_graphs"] == graphs  # no bucket recompiled
    # after its compiling call each bucket runs dynamo's bytecode directly (no wrapper, no
    # guards), carries included: the second run above read the carried value
    assert all(b.compiled is not None and b.compiled.direct for b in r._buckets.values())


def _breaks(bufs):
    y = bufs["x"] * 2
    torch._dynamo.graph_break()  # stands for anything dynamo cannot put in one graph
    return {"y": y + bufs["b"]}


@needs_inductor
def test_a_unit_that_does_not_compile_runs_eagerly_and_says_why(caplog):
    caplog.set_level(logging.WARNING, logger="wgc_runtime.engines.capture.runner")
    r = GraphRunner(_breaks, INPUTS, (2,), backend="inductor", name="breaks").capture()
    assert r.backend == "eager" and r.compile_error and not r.compile_seconds
    assert any("`breaks`: torch.compile failed" in m for m in caplog.messages)
    x = torch.ones(2, 3)
    out = r.run({"x": x, "b": torch.zeros(2, 3)}, 2)
    assert torch.equal(out["y"], x * 2)
    assert r.eager_runs == 1 and r.compiled_runs == 0


def test_backend_argument():
    assert GraphRunner(_affine([]), INPUTS, (2,)).backend == "eager"  # the CPU default
    assert GraphRunner(_affine([]), INPUTS, (2,), capture=False).backend == "eager"
    with pytest.raises(GraphError, match="unknown backend `tensorrt`"):
        GraphRunner(_affine([]), INPUTS, (2,), backend="tensorrt")
    with pytest.raises(GraphError, match="contradicts backend `inductor`"):
        GraphRunner(_affine([]), INPUTS, (2,), backend="inductor", capture=True)
    with pytest.raises(GraphError, match="CUDA graphs need a CUDA device"):
        GraphRunner(_affine([]), INPUTS, (2,), backend="cuda_graph")


@pytest.mark.slow
@needs_inductor
def test_a_compile_leaves_no_process_lock_behind() -> None:
    """Inductor draws a tqdm progress bar while it compiles; tqdm's default lock is a
    multiprocessing one, whose semaphore a worker process left registered at exit (the
    resource tracker then warned of a leak when a deployment stopped). `CompiledBody` gives
    tqdm a threading lock first. Run in a fresh interpreter: tqdm's lock is process-wide."""
    import subprocess
    import sys

    code = (
        "import threading, torch\n"
        "from tqdm import tqdm\n"
        "from wgc_runtime.engines.capture.inductor import CompiledBody\n"
        "run = CompiledBody(lambda bufs: {'y': bufs['x'].sin() + 1}, 'lock_probe')\n"
        "run({'x': torch.randn(8)})\n"
        "lock = tqdm.get_lock()\n"
        "assert type(lock) is type(threading.RLock()), type(lock)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
