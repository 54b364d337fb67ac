"""Decode lanes (`wgc_runtime.core.executor.lanes`): Orpheus's running decode rows step
wholesale on the LM rank (the token stream is the vocoder rank's) and give exactly the outputs
of the general path (the lanes turned off), requests of different lengths at once; a request
cancelled mid-decode, or whose row fails in the lane's step, ends alone and leaves no row behind,
in the lane or the node's runner."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.e2e.test_local_cluster import cluster, model  # noqa: E402
from tests.narrow import present  # noqa: E402
from wgc.interp import make_request, segment  # noqa: E402
from wgc_runtime.contract.node import NodeError  # noqa: E402
from wgc_runtime.core.executor.core import RankExecutor  # noqa: E402
from wgc_runtime.host.local import Handle, LocalCluster  # noqa: E402

REQUESTS = {"a": ("hello", 40), "b": ("how are you", 75), "c": ("hi", 61), "d": ("bye", 90)}


def serve(
    lanes: bool, cancel: str | None = None, fail: str | None = None
) -> tuple[LocalCluster, dict[str, Handle]]:
    c = cluster("orpheus", "cpu-2rank")
    if fail is not None:
        failing(lm_rank(c), fail)
    if not lanes:
        for ex in c.ranks.values():
            ex.lanes.lanes.clear()  # every running row goes through the general path
    m = model("orpheus")
    handles = {
        rid: c.submit(make_request(m, [segment("text", text)], ["audio"], {"max_tokens": n}), rid)
        for rid, (text, n) in REQUESTS.items()
    }
    if cancel is not None:
        while len(handles[cancel].outputs) < 2:
            assert c.step()
        handles[cancel].cancel()
    c.run()
    return c, handles


def audio(h: Handle) -> torch.Tensor:
    return torch.cat([o.tensor for o in h.outputs if o.modality == "audio"])


def lm_rank(c: LocalCluster) -> RankExecutor:
    (ex,) = [ex for ex in c.ranks.values() if ex.captured.units]
    return ex


def failing(ex: RankExecutor, request: str) -> None:
    """The decode step's preparation fails ``request``'s row from its 20th iteration on."""
    for units in ex.captured.units.values():
        for u in units:
            prepare = u.step.prepare_batch
            assert prepare is not None

            def prep(works, prepare=prepare):
                extra, failed = prepare(works)
                ran = [i for i in range(len(works)) if i not in failed]
                bad = [
                    j
                    for j, i in enumerate(ran)
                    if works[i].ctx.request_id == request and works[i].ctx.iteration[-1] >= 20
                ]
                if not bad:
                    return extra, failed
                # as a node's own failed row: its extra buffers leave the batch's
                keep = [j for j in range(len(ran)) if j not in bad]
                extra = {k: v[keep] for k, v in extra.items()}
                return extra, {**failed, **{ran[j]: NodeError("this row fails") for j in bad}}

            u.step = dataclasses.replace(u.step, prepare_batch=prep)


def test_lanes_give_the_general_paths_outputs_and_cancel_one_row() -> None:
    plain, want = serve(lanes=False)
    assert lm_rank(plain).lanes.rows == 0
    on, got = serve(lanes=True, cancel="c")
    ex = lm_rank(on)
    assert ex.lanes.rows > 0 and ex.lanes.steps < ex.lanes.rows  # rows stepped together
    assert not ex.lanes.pending()
    for rid in REQUESTS:
        if rid == "c":
            assert present(got[rid].error).kind == "cancelled"
            continue
        assert got[rid].error is None, got[rid].error
        assert torch.equal(audio(got[rid]), audio(want[rid])), rid
    assert all(not e.requests for e in on.ranks.values())
    llm = ex.nodes["LLM"]
    runner = getattr(llm, "_runner", None)
    assert runner is None or len(runner) == 0  # every row left the node's running batch


def test_a_row_that_fails_in_the_lane_ends_only_its_request() -> None:
    _, want = serve(lanes=False)
    on, got = serve(lanes=True, fail="b")
    assert lm_rank(on).lanes.rows > 0
    assert "this row fails" in (present(got["b"].error).message or "")
    for rid in ("a", "c", "d"):
        assert got[rid].error is None, got[rid].error
        assert torch.equal(audio(got[rid]), audio(want[rid])), rid
    assert all(not e.requests for e in on.ranks.values())


def test_a_step_that_reads_its_works_inputs_sees_each_rows_token() -> None:
    """A node's step that reads its works' inputs (`StaticStep.reads_inputs`, the default)
    finds each row's carried token in its work at every lane step; Orpheus's, which does not,
    lets them lag (the lane's column holds them) and gives the same audio."""
    _, want = serve(lanes=False)
    c = cluster("orpheus", "cpu-2rank")
    ex = lm_rank(c)
    last: dict[str, int] = {}
    checked = [0]
    wrong: list[tuple[str, tuple[int, ...], int, int]] = []  # a hook's failure fails its batch
    for units in ex.captured.units.values():
        for u in units:
            assert not u.step.reads_inputs  # Orpheus's own
            prepare, finish = u.step.prepare_batch, u.step.finish
            assert prepare is not None and finish is not None

            def prep(works, prepare=prepare):
                for w in works:
                    if w.ctx.request_id in last:
                        token = int(w.inputs["token"].reshape(-1)[0])
                        if token != last[w.ctx.request_id]:
                            wrong.append(
                                (w.ctx.request_id, w.ctx.iteration, token, last[w.ctx.request_id])
                            )
                        checked[0] += 1
                return prepare(works)

            def fin(works, outputs, finish=finish):
                finish(works, outputs)
                for i, w in enumerate(works):
                    last[w.ctx.request_id] = int(outputs["new_token"][i, 0])

            u.step = dataclasses.replace(u.step, prepare_batch=prep, finish=fin, reads_inputs=True)
    ex.lanes.lanes.clear()  # rebuilt from the steps that read their inputs
    ex.lanes.build(ex.stepper.steps, ex.batcher)
    assert ex.lanes.lanes and not any(lane.lazy for lane in ex.lanes.lanes.values())
    m = model("orpheus")
    got = {
        rid: c.submit(make_request(m, [segment("text", text)], ["audio"], {"max_tokens": n}), rid)
        for rid, (text, n) in REQUESTS.items()
    }
    c.run()
    assert not wrong, wrong[:5]
    assert ex.lanes.rows > 0 and checked[0] > ex.lanes.rows // 2
    for rid in REQUESTS:
        assert got[rid].error is None, got[rid].error
        assert torch.equal(audio(got[rid]), audio(want[rid])), rid
