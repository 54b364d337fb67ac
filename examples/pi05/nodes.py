"""Toy pi0.5 nodes (deterministic stand-ins until the model issue brings real tiny models).

- `VitEncoder`: one embedding per camera image (pooled pixels through a fixed linear map).
- `LLM`: a kv-cache node on the runtime's paged pool: the prefill appends the image embeddings
  and the prompt; each flow-matching step moves the noisy actions (request-seeded noise when a
  bare signal) towards what they read from that prefix (non-causally: the actions are not in the
  cache) by a fixed Euler step and advances the timestep from 1 towards 0.
"""

from __future__ import annotations

import torch

from examples._toy import embed, kv_read, kv_rows, noise
from wgc_runtime.contract.node import Node

STEPS = 10


class VitEncoder(Node):
    def forward_one(self, inputs, ctx):
        images = inputs["images"]
        _, hidden = self.out_shape("image_embeddings", V=1)
        out = embed(images, images.shape[0], hidden, torch.bfloat16, salt=8)
        return {"image_embeddings": out}


class LLM(Node):
    def forward_one(self, inputs, ctx):
        if "prompt" in inputs or "image_embeddings" in inputs:
            for port in ("image_embeddings", "prompt"):
                if inputs.get(port) is not None:
                    ctx.kv.append(*kv_rows(inputs[port], ctx.kv, salt=51))
            return {}
        actions = inputs.get("noisy_actions")
        if actions is None:
            actions = noise(self.out_shape("noisy_actions"), ctx, "actions")
        t = inputs.get("timestep")
        if t is None:
            t = torch.tensor(1.0)
        velocity = actions - kv_read(ctx.kv, actions, 52)
        return {"noisy_actions": actions - velocity / STEPS, "timestep": t - 1.0 / STEPS}
