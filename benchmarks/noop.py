"""No-op nodes for the runtime benchmarks (`benchmarks/runtime_hops.py`, `hot_path.py`)."""

from __future__ import annotations

import torch

from wgc_runtime.contract.node import Node


class Noop(Node):
    """Returns its input unchanged (``x`` in, ``x`` out): pure dispatch cost. One call at a
    time (`forward_one`: nothing to gain from a batch), so a plain piece of these runs as its
    generated code (`wgc_runtime.core.executor.direct`)."""

    def forward_one(self, inputs, ctx):
        return {"x": inputs["x"]}


class CountingLM(Node):
    """A kv-cache LM with no compute: the prefill's token is the prompt's length, each decode
    step the previous token + 1, and `stop` after option ``eos_after`` decode steps."""

    def forward_one(self, inputs, ctx):
        if "text_inputs" in inputs:
            return {"new_token": torch.tensor([inputs["text_inputs"].numel()])}
        n = ctx.state["n"] = ctx.state.get("n", 0) + 1
        token = inputs["token"] + 1
        return {"new_token": token, "stop": torch.tensor(n >= int(ctx.options["eos_after"]))}


class Vocoder(Node):
    """One window of tokens -> 4 samples (their mean, repeated)."""

    def forward_one(self, inputs, ctx):
        return {"audio": inputs["window"].float().mean().repeat(4)}
