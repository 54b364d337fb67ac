"""Compiled units (`GraphRunner` backend ``"inductor"``, the CPU analogue of graph capture): per
bucket artifacts, fallback to eager when a unit does not compile, and the backend argument's
validation. (A served decoder's compiled decode step against its eager one is
`tests/e2e/test_decoder_engines.py`'s; the check here that drove the decoder through the removed
``ContinuousBatcher`` went with it.)

The compiling tests are ``slow`` (one inductor compile each: a few seconds, tens on a loaded
machine) and skip where inductor cannot work (no C++ compiler)."""

from __future__ import annotations

import logging

import pytest
import torch
from torch._dynamo.utils import counters

from wgc_runtime.engines.capture import (
    GraphError,
    GraphRunner,
    StaticBuffer,
    inductor_available,
)

NO_INDUCTOR = inductor_available()
needs_inductor = pytest.mark.skipif(NO_INDUCTOR is not None, reason=str(NO_INDUCTOR))


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
