"""Wan's sampler: UniPC multistep over flow-matching sigmas (diffusers' ``UniPCMultistepScheduler``
with ``use_flow_sigmas``, ``prediction_type="flow_prediction"``, as Wan's
``scheduler_config.json`` sets it), as pure functions of frozen records.

* `FlowUniPCConfig`: the ``scheduler_config.json`` fields that matter (``flow_shift``,
  ``solver_order``, ``solver_type``, ...); any other sigma schedule or thresholding is refused.
* `flow_schedule(cfg, steps)`: the shifted sigmas ``s·σ / (1 + (s - 1)·σ)`` of a linear
  ``1 → 1/T`` ramp, the final sigma 0, and the integer timesteps ``⌊1000·σ⌋`` the model is
  given.
* `uni_step(cfg, schedule, state, velocity, sample) → (next sample, next state)`: the model's
  velocity turned into an x0 prediction (``x - σ·v``), the UniC corrector over the previous
  step's result (except after step 0 and where ``disable_corrector`` says), then the UniP
  predictor of the step's order (warming up from 1, lower at the end with
  ``lower_order_final``). `UniState` carries what the next step needs: the last ``order``
  x0 predictions, the sample before the predictor, the order used.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch


class SchedulerConfigError(ValueError):
    """A ``scheduler_config.json`` this sampler does not run."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowUniPCConfig:
    num_train_timesteps: int = 1000
    flow_shift: float = 1.0
    solver_order: int = 2
    solver_type: str = "bh2"
    lower_order_final: bool = True
    disable_corrector: tuple[int, ...] = ()
    final_sigmas_type: str = "zero"

    # fields whose other values select schedules or predictions not built here
    _REQUIRED = {  # noqa: RUF012 - a class constant
        "use_flow_sigmas": True,
        "prediction_type": "flow_prediction",
        "predict_x0": True,
        "thresholding": False,
        "use_dynamic_shifting": False,
        "use_karras_sigmas": False,
        "use_exponential_sigmas": False,
        "use_beta_sigmas": False,
        "shift_terminal": None,
        "solver_p": None,
        "timestep_spacing": "linspace",
    }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> FlowUniPCConfig:
        for key, want in cls._REQUIRED.items():
            if key in raw and raw[key] != want:
                raise SchedulerConfigError(f"`{key}: {raw[key]!r}` is not run (only {want!r})")
        if raw.get("solver_type", "bh2") not in ("bh1", "bh2"):
            raise SchedulerConfigError(f"solver_type {raw['solver_type']!r}: only bh1 / bh2")
        if raw.get("final_sigmas_type", "zero") not in ("zero", "sigma_min"):
            raise SchedulerConfigError(f"final_sigmas_type {raw['final_sigmas_type']!r}")
        names = set(cls.__dataclass_fields__)
        kw = {k: v for k, v in raw.items() if k in names}
        if "disable_corrector" in kw:
            kw["disable_corrector"] = tuple(kw["disable_corrector"])
        return cls(**kw)

    @classmethod
    def from_file(cls, path: str | Path) -> FlowUniPCConfig:
        return cls.from_dict(json.loads(Path(path).read_text()))


@dataclass(frozen=True, slots=True)
class FlowSchedule:
    sigmas: torch.Tensor  # [steps + 1], fp32, the last 0 (or the smallest sigma)
    timesteps: torch.Tensor  # [steps], int64: what the model is given


def flow_schedule(cfg: FlowUniPCConfig, steps: int) -> FlowSchedule:
    if steps < 1:
        raise SchedulerConfigError(f"steps must be ≥ 1, got {steps}")
    t = cfg.num_train_timesteps
    # numpy's float64 linspace, as the reference computes it: the timesteps truncate
    # ``1000·σ``, so the last bit decides an integer
    base = np.linspace(1.0, 1.0 / t, steps + 1)[:-1]
    s = cfg.flow_shift
    sig = s * base / (1 + (s - 1) * base)
    if abs(sig[0] - 1) < 1e-6:
        sig[0] -= 1e-6
    timesteps = torch.as_tensor((sig * t).copy()).to(torch.int64)
    last = sig[-1] if cfg.final_sigmas_type == "sigma_min" else 0.0
    sigmas = np.concatenate([sig, [last]]).astype(np.float32)
    return FlowSchedule(torch.as_tensor(sigmas), timesteps)


@dataclass(frozen=True, slots=True)
class UniState:
    """Between steps: the step index, the last x0 predictions (oldest first), the sample the
    last predictor started from, and that predictor's order."""

    index: int = 0
    x0s: tuple[torch.Tensor, ...] = ()
    last_sample: torch.Tensor | None = None
    order: int = 0


def _lam(sigma: torch.Tensor) -> torch.Tensor:
    """``log(α) - log(σ)`` with flow ``α = 1 - σ``."""
    return torch.log(1 - sigma) - torch.log(sigma)


def _coefficients(cfg: FlowUniPCConfig, hh: torch.Tensor, rks: torch.Tensor, order: int):
    """UniPC's ``h·φ₁``, ``B(h)``, ``R`` (``rks`` powers) and ``b`` for an order."""
    h_phi_1 = torch.expm1(hh)
    h_phi_k = h_phi_1 / hh - 1
    b_h = hh if cfg.solver_type == "bh1" else torch.expm1(hh)
    rows: list[torch.Tensor] = []
    b: list[torch.Tensor] = []
    fact = 1
    for i in range(1, order + 1):
        rows.append(torch.pow(rks, i - 1))
        b.append(h_phi_k * fact / b_h)
        fact *= i + 1
        h_phi_k = h_phi_k / hh - 1 / fact
    return h_phi_1, b_h, torch.stack(rows), torch.stack(b)


def _solve(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``torch.linalg.solve`` (its stub leaves it untyped)."""
    return cast(torch.Tensor, torch.linalg.solve(a, b))  # pyright: ignore[reportUnknownMemberType]


def _update(
    cfg: FlowUniPCConfig,
    sigmas: torch.Tensor,
    at: int,
    src: int,
    x0s: tuple[torch.Tensor, ...],
    x: torch.Tensor,
    order: int,
    corrector_x0: torch.Tensor | None,
) -> torch.Tensor:
    """From ``x`` at sigma index ``src`` to index ``at``, ``x0s[-1]`` the x0 at ``src`` and the
    earlier ones at ``src - 1, ...``; ``corrector_x0`` (the x0 at ``at``) makes it the UniC
    corrector, else the UniP predictor."""
    sigma_t, sigma_s0 = sigmas[at], sigmas[src]
    alpha_t = 1 - sigma_t
    h = _lam(sigma_t) - _lam(sigma_s0)
    m0 = x0s[-1]
    rks: list[torch.Tensor] = []
    d1s: list[torch.Tensor] = []
    for i in range(1, order):
        rk = (_lam(sigmas[src - i]) - _lam(sigma_s0)) / h
        rks.append(rk)
        d1s.append((x0s[-(i + 1)] - m0) / rk)
    rks.append(torch.ones(()))
    h_phi_1, b_h, r, b = _coefficients(cfg, -h, torch.stack(rks), order)
    base = sigma_t / sigma_s0 * x - alpha_t * h_phi_1 * m0
    if corrector_x0 is None:
        if not d1s:
            return base.to(x.dtype)
        rhos = torch.full((1,), 0.5) if order == 2 else _solve(r[:-1, :-1], b[:-1])
        res = sum(rho * d for rho, d in zip(rhos.to(x.dtype), d1s, strict=True))
        return (base - alpha_t * b_h * res).to(x.dtype)
    rhos = torch.full((1,), 0.5) if order == 1 else _solve(r, b)
    rhos = rhos.to(x.dtype)
    res = sum((rho * d for rho, d in zip(rhos[:-1], d1s, strict=True)), torch.zeros_like(x))
    return (base - alpha_t * b_h * (res + rhos[-1] * (corrector_x0 - m0))).to(x.dtype)


def uni_step(
    cfg: FlowUniPCConfig,
    schedule: FlowSchedule,
    state: UniState,
    velocity: torch.Tensor,
    sample: torch.Tensor,
) -> tuple[torch.Tensor, UniState]:
    """One sampler step at ``state.index``: ``velocity`` is the model's output for ``sample``
    at ``schedule.timesteps[state.index]``."""
    k, sigmas = state.index, schedule.sigmas
    steps = len(schedule.timesteps)
    if k >= steps:
        raise SchedulerConfigError(f"step {k} past the schedule's {steps} steps")
    x0 = (sample - sigmas[k] * velocity).to(sample.dtype)
    if k > 0 and (k - 1) not in cfg.disable_corrector and state.last_sample is not None:
        sample = _update(cfg, sigmas, k, k - 1, state.x0s, state.last_sample, state.order, x0)
    x0s = (*state.x0s, x0)[-cfg.solver_order :]
    order = min(cfg.solver_order, steps - k) if cfg.lower_order_final else cfg.solver_order
    order = min(order, k + 1)
    nxt = _update(cfg, sigmas, k + 1, k, x0s, sample, order, None)
    return nxt, UniState(k + 1, x0s, sample, order)
