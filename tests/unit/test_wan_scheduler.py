"""Wan's sampler against diffusers' ``UniPCMultistepScheduler`` configured as Wan's
``scheduler_config.json`` (flow sigmas, flow prediction): the same sigmas and integer timesteps,
and the same sample after every step, for the shifts Wan uses, solver orders 1-3, with and
without the lower final order and with the corrector disabled at a step; a config selecting
another schedule is refused."""

from __future__ import annotations

import pytest
import torch

from wgc_models.wan22.scheduler import (
    FlowUniPCConfig,
    SchedulerConfigError,
    UniState,
    flow_schedule,
    uni_step,
)

diffusers = pytest.importorskip("diffusers")

WAN = {  # Wan2.2's scheduler_config.json, less the shift
    "num_train_timesteps": 1000,
    "beta_start": 0.0001,
    "beta_end": 0.02,
    "beta_schedule": "linear",
    "prediction_type": "flow_prediction",
    "use_flow_sigmas": True,
    "solver_order": 2,
    "solver_type": "bh2",
    "predict_x0": True,
    "lower_order_final": True,
    "disable_corrector": [],
    "final_sigmas_type": "zero",
}


def _velocity(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """A stand-in model: smooth in the sample, depending on the timestep."""
    return torch.tanh(0.7 * x + float(t) / 1000.0) - 0.3 * x


CASES = [
    {"flow_shift": 5.0},
    {"flow_shift": 12.0},
    {"flow_shift": 1.0},
    {"flow_shift": 3.0, "solver_order": 1},
    {"flow_shift": 3.0, "solver_order": 3},
    {"flow_shift": 5.0, "solver_type": "bh1", "final_sigmas_type": "sigma_min"},
    {"flow_shift": 5.0, "disable_corrector": [2]},
    {"flow_shift": 8.0, "final_sigmas_type": "sigma_min"},
]


@pytest.mark.parametrize("steps", [4, 10])
@pytest.mark.parametrize("over", CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_equal_to_diffusers_step_for_step(over: dict, steps: int):
    raw = {**WAN, **over}
    ref = diffusers.UniPCMultistepScheduler(**raw)
    ref.set_timesteps(steps)
    cfg = FlowUniPCConfig.from_dict(raw)
    sched = flow_schedule(cfg, steps)
    assert torch.equal(sched.timesteps, ref.timesteps)
    assert torch.equal(sched.sigmas, ref.sigmas)

    x_ref = torch.randn(2, 4, 3, 4, 4, generator=torch.Generator().manual_seed(0))
    x_ours, state = x_ref.clone(), UniState()
    for i, t in enumerate(ref.timesteps):
        x_ref = ref.step(_velocity(x_ref, t), t, x_ref, return_dict=False)[0]
        x_ours, state = uni_step(cfg, sched, state, _velocity(x_ours, sched.timesteps[i]), x_ours)
        diff = (x_ours - x_ref).abs().max().item()
        assert diff <= 1e-5, f"step {i}: {diff}"
    with pytest.raises(SchedulerConfigError, match="past"):
        uni_step(cfg, sched, state, x_ours, x_ours)


@pytest.mark.parametrize(
    "bad",
    [
        {"use_flow_sigmas": False},
        {"prediction_type": "epsilon"},
        {"use_karras_sigmas": True},
        {"thresholding": True},
        {"solver_type": "midpoint"},
    ],
)
def test_other_schedules_are_refused(bad: dict):
    with pytest.raises(SchedulerConfigError):
        FlowUniPCConfig.from_dict({**WAN, **bad})
