"""The CUDA-graph runner's logic on the CPU: buckets, padding, static buffers, carries, loop
bodies built from the plan's capture list, and double-buffered metadata planning. (On a CPU the
runner runs the unit eagerly on the same static buffers; tests/gpu/test_gpu_graphs.py replays
real graphs.)"""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path

import pytest
import torch

from wgc_runtime.contract.kinds import CaptureScope, DestKind, Edge, InputMode, SourceKind
from wgc_runtime.contract.spec import (
    CallSpec,
    CaptureSpec,
    Dest,
    PieceSpec,
    PortIn,
    PortOut,
    Source,
    TypeSpec,
)
from wgc_runtime.engines.capture import (
    GraphError,
    GraphRunner,
    MetadataPlanner,
    StaticBuffer,
    body_unit,
    runner_for,
    split_ports,
)

ROOT = Path(__file__).resolve().parents[2]


def _affine(calls: list):
    def fn(bufs):
        calls.append(bufs["x"].shape[0])
        return {"y": bufs["x"] * 2 + bufs["b"], "s": bufs["x"].sum(-1)}

    return fn


INPUTS = {"x": StaticBuffer((3,), torch.float32, 0.0), "b": StaticBuffer((3,), torch.float32, -1.0)}


def test_smallest_bucket_padding_and_views():
    seen: list[int] = []
    r = GraphRunner(_affine(seen), INPUTS, (8, 2, 4)).capture()
    assert r.buckets == [2, 4, 8]
    assert [r.bucket_for(n) for n in (1, 2, 3, 5, 8, 9)] == [2, 2, 4, 8, 8, None]
    x = torch.arange(9.0).view(3, 3)
    out = r.run({"x": x, "b": torch.ones(3, 3)}, 3)
    assert seen == [4]  # ran at bucket 4
    assert out["y"].shape == (3, 3) and torch.equal(out["y"], x * 2 + 1)
    pad = r.static_inputs(3)
    assert torch.equal(pad["b"][3], torch.full((3,), -1.0)) and torch.equal(
        pad["x"][3], torch.zeros(3)
    )
    assert r.eager_runs == 1 and r.replays == 0


def test_static_buffers_are_reused_and_stale_rows_repadded():
    r = GraphRunner(_affine([]), INPUTS, (4,)).capture()
    ptr = r.static_inputs(4)["x"].data_ptr()
    r.run({"x": torch.ones(4, 3), "b": torch.zeros(4, 3)}, 4)
    r.run({"x": torch.full((2, 3), 5.0), "b": torch.zeros(2, 3)}, 2)
    bufs = r.static_inputs(2)
    assert bufs["x"].data_ptr() == ptr
    assert torch.equal(bufs["x"][2:], torch.zeros(2, 3))  # rows 2-3 of the earlier batch: padded


def test_larger_than_every_bucket_runs_plain():
    seen: list[int] = []
    r = GraphRunner(_affine(seen), INPUTS, (2,)).capture()
    out = r.run({"x": torch.ones(5, 3), "b": torch.ones(5, 3)}, 5)
    assert seen == [5] and out["y"].shape == (5, 3)
    with pytest.raises(GraphError, match="missing"):
        r.run({"x": torch.ones(5, 3)}, 5)


def test_carry_chains_steps_without_the_host():
    def step(bufs):
        return {"next": (bufs["tok"] * 3 + 1) % 97}

    r = GraphRunner(step, {"tok": StaticBuffer((), torch.long, 0)}, (4,), carry={"tok": "next"})
    out = r.run({"tok": torch.tensor([1, 2, 3])}, 3)["next"].clone()
    want = (torch.tensor([1, 2, 3]) * 3 + 1) % 97
    assert torch.equal(out, want)
    for _ in range(5):  # no input: the carried tokens feed the next step
        out = r.run({}, 3)["next"].clone()
        want = (want * 3 + 1) % 97
        assert torch.equal(out, want)


def test_bad_declarations():
    with pytest.raises(GraphError, match="buckets must be positive"):
        GraphRunner(_affine([]), INPUTS, ())
    with pytest.raises(GraphError, match="carried inputs"):
        GraphRunner(_affine([]), INPUTS, (1,), carry={"nope": "y"})
    with pytest.raises(GraphError, match="CUDA device"):
        GraphRunner(_affine([]), INPUTS, (1,), capture=True)
    r = GraphRunner(_affine([]), INPUTS, (1,))
    with pytest.raises(GraphError, match="unknown inputs"):
        r.run({"z": torch.ones(1, 3)}, 1)
    with pytest.raises(GraphError, match="static dims"):
        StaticBuffer.of(TypeSpec("f32", ("n",)))


# ---------------------------------------------------------------- loop bodies from the plan


def _two_call_body():
    """Loop ``L``: call 0 reads ``h`` (carried from call 1's ``h2``) and ``ctx`` (once); call 1
    reads call 0's ``mid`` in the same iteration and writes ``h2`` and ``stop``."""
    f3 = TypeSpec("f32", (3,))
    c0 = CallSpec(
        id=0,
        node="A",
        rank=0,
        loops=("L",),
        inputs=(
            PortIn(
                port="h",
                channel="h",
                mode=InputMode.CARRIED,
                src=Source(kind=SourceKind.CALL, rank=0, call=1, port="h2"),
                init=Source(kind=SourceKind.INPUT, name="h0"),
                type=f3,
            ),
            PortIn(
                port="ctx",
                channel="ctx",
                mode=InputMode.ONCE,
                src=Source(kind=SourceKind.INPUT, name="ctx"),
                type=f3,
            ),
        ),
        outputs=(
            PortOut(
                port="mid", type=f3, dests=(Dest(kind=DestKind.CALL, edge=Edge.INTERNAL, call=1),)
            ),
        ),
    )
    c1 = CallSpec(
        id=1,
        node="B",
        rank=0,
        loops=("L",),
        inputs=(
            PortIn(
                port="m",
                channel="mid",
                mode=InputMode.PER_ITERATION,
                src=Source(kind=SourceKind.CALL, rank=0, call=0, port="mid"),
                type=f3,
            ),
        ),
        outputs=(PortOut(port="h2", type=f3), PortOut(port="stop", type=TypeSpec("bool", ()))),
    )
    piece = PieceSpec(walk="w", rank=0, calls=(c0, c1))
    ports = (("0#h", f3), ("0#ctx", f3), ("0#mid", f3), ("1#m", f3), ("1#h2", f3))
    ports += (("1#stop", TypeSpec("bool", ())),)
    spec = CaptureSpec(
        walk="w",
        rank=0,
        scope=CaptureScope.LOOP,
        loop="L",
        calls=(0, 1),
        ports=ports,
        buckets=(2, 4),
    )
    return spec, piece


def _calls(call_id, ports):
    if call_id == 0:
        return {"mid": torch.tanh(ports["h"] + ports["ctx"])}
    h2 = ports["m"] * 0.5 + 0.1
    return {"h2": h2, "stop": h2.sum(-1) > 100}


def test_loop_body_is_one_unit_with_internal_handoff_and_carry():
    spec, piece = _two_call_body()
    ins, outs = split_ports(spec, piece)
    assert ins == ["0#h", "0#ctx", "1#m"] and outs == ["0#mid", "1#h2", "1#stop"]
    unit = body_unit(spec, piece, _calls)
    assert set(unit.inputs) == {"0#h", "0#ctx"}  # 1#m is handed off inside the body
    assert unit.carry == {"0#h": "1#h2"}
    r = runner_for(spec, piece, _calls).capture()
    h, ctx = torch.randn(3, 3), torch.randn(3, 3)
    out = r.run({"0#h": h, "0#ctx": ctx}, 3)
    for _ in range(4):
        mid = torch.tanh(h + ctx)
        h = mid * 0.5 + 0.1
        assert torch.allclose(out["1#h2"], h) and torch.allclose(out["0#mid"], mid)
        out = r.run({}, 3)  # carried h and once ctx stay in the static buffers


def test_runner_from_a_generated_capture_list():
    path = ROOT / "generated" / "orpheus" / "cpu" / "rank_0.py"
    if not path.is_file():
        pytest.skip("generated orpheus module not present")
    mod_spec = importlib.util.spec_from_file_location("_orpheus_rank0", path)
    assert mod_spec is not None and mod_spec.loader is not None
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    rank = mod.RANK
    spec = next(c for c in rank.captures if c.scope == "loop")
    piece = rank.piece(spec.walk)

    def llm(call_id, ports):
        nxt = (ports["token"] * 7 + 3) % 101
        return {"new_token": nxt, "stop": (nxt == 0).reshape(-1)}

    r = runner_for(spec, piece, llm).capture()
    assert r.carry == {"0#token": "0#new_token"}
    tok = torch.tensor([[5], [9]])
    out = r.run({"0#token": tok}, 2)
    for _ in range(3):
        tok = (tok * 7 + 3) % 101
        assert torch.equal(out["0#new_token"], tok)
        out = r.run({}, 2)


# ---------------------------------------------------------------- double-buffered planning


@pytest.mark.parametrize("threaded", [False, True])
def test_planner_double_buffers(threaded):
    threads: list[str] = []

    def plan(step, out):
        threads.append(threading.current_thread().name)
        out["pos"].fill_(step)

    p = MetadataPlanner(plan, {"pos": ((4,), torch.long)}, threaded=threaded)
    p.submit(1)
    a = p.take()
    p.submit(2)
    b = p.take()
    assert a is not b  # two staging sets alternate
    assert int(a["pos"][0]) == 1 and int(b["pos"][0]) == 2
    p.submit(3)
    assert p.take() is a
    with pytest.raises(GraphError, match="no plan is pending"):
        p.take()
    p.submit(4)
    with pytest.raises(GraphError, match="already pending"):
        p.submit(5)
    p.take()
    p.close()
    main = threading.current_thread().name
    assert all((t != main) == threaded for t in threads)
