"""Toy V-JEPA 2-AC nodes (deterministic stand-ins until the model issue brings real tiny models).

- `VideoEncoder`: two latent rows per frame (pooled pixels through a fixed linear map).
- `Predictor` (a kv-cache node on the runtime's paged pool): appends the context frames; the
  next frame's latents are the mean context, shifted by the actions and states and by what the
  frame reads from the cache.
- `RolloutPredictor` (its own cache, like `Predictor`'s): its prefill call appends the context
  and returns the last context frame as the latent and step 0; each rollout step appends the
  current latent (the cache grows by a frame per step, as the AC predictor's does), shifts it by
  that step's action and state and by what it reads from the whole rollout so far, advances
  `step`, and sets `stop` when `step` reaches `horizon`.
- `AcPredictorMpc`: the final latent after executing plan `config candidate`.
- `MpcScorer`: the L1 distance of each plan's prediction to the goal; `best` is the cheapest.
"""

from __future__ import annotations

import torch

from examples._toy import embed, kv_read, kv_rows
from wgc_runtime.contract.node import Node


def _frame(context: torch.Tensor, shape) -> torch.Tensor:
    return context.float().mean(0).expand(shape).clone()


def _shift(latent, actions, states, upto: int) -> torch.Tensor:
    push = actions[:upto].float().sum() * 0.01 + states[:upto].float().sum() * 0.001
    return (latent.float() + push).to(torch.bfloat16)


class VideoEncoder(Node):
    def forward_one(self, inputs, ctx):
        video = inputs["video"]
        _, dim = self.out_shape("latents", C=1)
        return {"latents": embed(video, 2 * video.shape[0], dim, torch.bfloat16, salt=9)}


def _recall(kv, latent: torch.Tensor) -> torch.Tensor:
    """A small pull of ``latent`` towards what it reads from the cache."""
    return (latent.float() + 0.01 * kv_read(kv, latent, 62)).to(torch.bfloat16)


class Predictor(Node):
    def forward_one(self, inputs, ctx):
        shape = self.out_shape("prediction")
        ctx.kv.append(*kv_rows(inputs["context"], ctx.kv, salt=61))
        frame = _recall(ctx.kv, _frame(inputs["context"], shape))
        return {"prediction": _shift(frame, inputs["actions"], inputs["states"], shape[0])}


class RolloutPredictor(Node):
    def forward_one(self, inputs, ctx):
        shape = self.out_shape("latent")
        kv = ctx.kv
        if "latent" not in inputs:  # prefill: the context into the cache; its latest frame
            kv.append(*kv_rows(inputs["context"], kv, salt=61))
            latent = _frame(inputs["context"], shape).to(torch.bfloat16)
            return {"latent": latent, "step": torch.tensor(0)}
        step = int(inputs["step"])
        kv.append(*kv_rows(inputs["latent"], kv, salt=61))
        latent = _recall(kv, inputs["latent"])
        latent = _shift(latent, inputs["actions"][step:], inputs["states"][step:], 1)
        nxt = step + 1
        return {
            "latent": latent,
            "step": torch.tensor(nxt),
            "stop": torch.tensor(nxt >= int(inputs["horizon"])),
        }


class AcPredictorMpc(Node):
    def forward_one(self, inputs, ctx):
        shape = self.out_shape("prediction")
        plan = inputs["plans"][int(self.config.get("candidate", 0))]
        frame = _frame(inputs["context"], shape)
        return {"prediction": _shift(frame, plan, inputs["states"], plan.shape[0])}


class MpcScorer(Node):
    def forward_one(self, inputs, ctx):
        goal = inputs["goal"].float().mean(0)
        preds = [inputs[f"pred_{i}"].float() for i in range(4)]
        costs = torch.stack([(p - goal).abs().mean() for p in preds])
        return {"best": costs.argmin(), "costs": costs}
