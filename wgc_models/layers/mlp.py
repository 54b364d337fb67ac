"""The SwiGLU MLP of a Llama/Qwen2 layer, gate and up as one matrix product."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from wgc_models.layers.config import DecoderConfig
from wgc_models.layers.linear import FusedLinears


class MLP(nn.Module):
    """SwiGLU: ``down(silu(gate(x)) * up(x))``."""

    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        h, i, b = cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias
        self.gate_proj = nn.Linear(h, i, bias=b)
        self.up_proj = nn.Linear(h, i, bias=b)
        self.down_proj = nn.Linear(i, h, bias=b)
        self._gate_up = FusedLinears((self.gate_proj, self.up_proj))

    def hidden(self, x: torch.Tensor) -> torch.Tensor:
        """``silu(gate(x)) * up(x)``: the input of ``down_proj``."""
        w, b = self._gate_up.get()
        gu = F.linear(x, w, b)
        i = self.gate_proj.weight.shape[0]
        return F.silu(gu[..., :i]) * gu[..., i:]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.hidden(x))
