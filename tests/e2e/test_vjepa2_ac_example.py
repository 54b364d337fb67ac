"""V-JEPA 2-AC's example on its real (tiny) architecture against the components called
directly, on checkpoints this test writes (``encoder/`` under ``VJEPA2Model``'s names,
``predictor/`` under the AC predictor's), loaded by the nodes' own loader:

* a single prediction, a rollout (whole and streamed) and MPC planning through `LocalCluster`
  on every CPU placement equal the reference pipeline — the encoder frame by frame, then the
  predictor re-run over the whole growing sequence at every step (`native_rollout`, no cache):
  the cached rollout through the runtime (a KV cache that grows per step) equals it to 1e-5;
* the same through processes (a conductor and a worker per rank), requests side by side;
* the checkpoint is what runs: the default seeded weights give other latents.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.e2e.real_support import (
    PLACEMENTS,
    compile_to,
    run_local,
    run_processes,
    save_module,
    start,
)
from wgc.interp import segment
from wgc_models.layers.random_init import init_seeded
from wgc_models.vjepa2_ac.config import TINY
from wgc_models.vjepa2_ac.model import ACPredictor, native_rollout, normalize
from wgc_models.vjepa2_ac.vjepa2 import VJEPA2Encoder, video_pixels

TOL = 1e-5
VIDEO = torch.arange(2 * 16 * 16 * 3).reshape(2, 16, 16, 3).remainder(255).to(torch.uint8)
GOAL = torch.arange(16 * 16 * 3).reshape(1, 16, 16, 3).mul(7).remainder(251).to(torch.uint8)
ACTIONS = torch.linspace(-1, 1, 16 * 7).reshape(16, 7)
STATES = torch.linspace(0, 1, 16 * 7).reshape(16, 7)
PLANS = torch.stack([ACTIONS * (k + 1) / 4 for k in range(4)])
WALKS = {"single": "prefill_video", "rollout": "prefill_video_rollout"}


@pytest.fixture(autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    """(checkpoint folder, encoder, predictor): seeded weights saved under the real names."""
    path = tmp_path_factory.mktemp("vjepa2_ac")
    encoder = init_seeded(VJEPA2Encoder(TINY.encoder), 21).eval()
    predictor = init_seeded(ACPredictor(TINY.predictor), 22).eval()
    save_module(encoder, path / "encoder" / "model.safetensors", prefix="encoder.")
    save_module(predictor, path / "predictor" / "model.safetensors")
    return path, encoder, predictor


@pytest.fixture(scope="module")
def plans(weights, tmp_path_factory):
    sets = {"checkpoint": str(weights[0])}
    return {p: compile_to(tmp_path_factory.mktemp(p), "vjepa2_ac", p, sets) for p in PLACEMENTS}


@torch.no_grad()
def encode(encoder: VJEPA2Encoder, video: torch.Tensor) -> torch.Tensor:
    """``[frames, patches, embed]``: each frame alone, layer-normalised."""
    z = normalize(encoder.encode_frames(video_pixels(video, TINY.encoder.crop_size)))
    return z.reshape(video.shape[0], -1, z.shape[-1])


@torch.no_grad()
def reference(weights, case: str, horizon: int = 4) -> dict[str, torch.Tensor]:
    _, encoder, predictor = weights
    z = encode(encoder, VIDEO)
    if case == "single":  # one pass over the context: the last frame's prediction
        return {"tensor": native_rollout(predictor, z, ACTIONS, STATES, 1)[0]}
    if case == "rollout":
        return {"tensor": native_rollout(predictor, z, ACTIONS, STATES, horizon)}
    goal = encode(encoder, GOAL)[-1]
    steps = PLANS.shape[1] - (z.shape[0] - 1)  # until the plan's actions run out
    finals = [native_rollout(predictor, z, plan, STATES, steps)[-1] for plan in PLANS]
    costs = torch.stack([(f - goal).abs().mean() for f in finals])
    return {"action": costs.argmin(), "tensor": costs}


def request(case: str, horizon: int = 4, stream: bool = False):
    if case == "mpc":
        seg = segment("video", VIDEO, goal=GOAL, plans=PLANS, states=STATES)
        return [seg], ["action"], {}
    seg = segment("video", VIDEO, actions=ACTIONS, states=STATES)
    if case == "single":
        return [seg], ["tensor"], {}
    return [seg], ["tensor"], {"rollout": True, "horizon": horizon, "stream_rollout": stream}


def check(got, case: str, want: dict[str, torch.Tensor], stream: bool = False) -> None:
    if case == "mpc":
        (best,) = got[("main", "prefill_video_mpc", "action")]
        (costs,) = got[("main", "prefill_video_mpc", "tensor")]
        assert (costs - want["tensor"]).abs().max() <= TOL
        assert int(best) == int(want["action"])
        return
    if stream:
        frames = got[("main", "prefill_video_rollout_streaming", "tensor")]
        value = torch.stack(frames)
    else:
        (value,) = got[("main", WALKS[case], "tensor")]
    assert value.shape == want["tensor"].shape
    assert (value - want["tensor"]).abs().max() <= TOL


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("case", ["single", "rollout", "mpc"])
def test_the_example_equals_the_components_called_directly(weights, plans, placement, case):
    got = run_local(plans[placement], *request(case))
    check(got, case, reference(weights, case))


@pytest.mark.parametrize("horizon", [1, 15])
def test_a_rollout_streamed_step_by_step_equals_the_native_re_run(weights, plans, horizon):
    got = run_local(plans["cpu-2rank"], *request("rollout", horizon, stream=True))
    check(got, "rollout", reference(weights, "rollout", horizon), stream=True)


def test_the_checkpoint_is_what_runs(weights, plans, tmp_path):
    default = compile_to(tmp_path / "default", "vjepa2_ac", "cpu", {})
    ours = run_local(plans["cpu"], *request("single"))
    other = run_local(default, *request("single"))
    key = ("main", "prefill_video", "tensor")
    assert (ours[key][0] - other[key][0]).abs().max() > 1e-2


@pytest.mark.slow
@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="needs POSIX shm")
def test_processes_serve_rollouts_and_plans_side_by_side(weights, plans):
    cluster = start(plans["cpu-3rank"])
    try:
        cases = [("rollout", 4), ("mpc", 0), ("rollout", 6), ("single", 0)]
        reqs = [(*request(c, h or 4), f"v{i}") for i, (c, h) in enumerate(cases)]
        outs = run_processes(cluster, reqs)
    finally:
        cluster.stop()
    for (case, horizon), got in zip(cases, outs, strict=True):
        check(got, case, reference(weights, case, horizon or 4))
