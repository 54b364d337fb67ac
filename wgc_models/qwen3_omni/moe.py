"""Sparse mixture-of-experts MLPs (Qwen3-MoE style): a top-k softmax router over SwiGLU
experts, optionally with a gated shared expert (the Qwen3-Omni Talker's).

Names follow transformers 5's runtime modules: ``gate.weight`` (the router, ``[experts,
hidden]``), ``experts.gate_up_proj`` (``[experts, 2·inter, hidden]``, gate rows then up rows),
``experts.down_proj`` (``[experts, hidden, inter]``), and for the shared expert
``shared_expert.{gate,up,down}_proj.weight`` and ``shared_expert_gate.weight`` (``[1, hidden]``).
The per-expert names of the released checkpoints are merged on load
(`wgc_models.layers.convert.merge_experts`).

Routing as HF: ``softmax(x · gateᵀ)`` in fp32, the top-k experts, renormalised to sum 1 when
``norm_topk_prob``, cast back to the activations' dtype; the shared expert adds
``sigmoid(x · shared_expert_gateᵀ) · shared_expert(x)``. Compute: a step with few tokens
gathers each token's k experts' weights and runs them as two batched matrix products (no
host synchronisation, a fixed number of operations per step: the decode path); a longer
forward (prefill) runs each expert that was hit once over its tokens, as HF does.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from wgc_models.layers.config import DecoderConfig
from wgc_models.layers.host_values import int_list
from wgc_models.layers.mlp import MLP

# at most this many (token, expert) pairs take the gathered path: gathering copies each pair's
# expert weights, which is cheap for a decode batch and wasteful for a long prefill
GATHER_PAIRS = 64


@dataclass(frozen=True, slots=True, kw_only=True)
class MoeConfig:
    """The MoE fields of a Qwen3-MoE text config (HF names in `from_dict`)."""

    num_experts: int
    top_k: int
    intermediate: int  # per expert (``moe_intermediate_size``)
    norm_topk_prob: bool
    shared_intermediate: int = 0  # 0: no shared expert
    sparse_step: int = 1  # ``decoder_sparse_step``: layer i is sparse when (i + 1) % step == 0
    mlp_only_layers: tuple[int, ...] = ()

    @classmethod
    def from_dict(cls, raw: dict[str, Any], *, shared: bool = False) -> MoeConfig:
        experts = int(raw.get("num_experts", raw.get("num_local_experts", 0)))
        return cls(
            num_experts=experts,
            top_k=int(raw["num_experts_per_tok"]),
            intermediate=int(raw["moe_intermediate_size"]),
            norm_topk_prob=bool(raw.get("norm_topk_prob", False)),
            shared_intermediate=int(raw["shared_expert_intermediate_size"]) if shared else 0,
            sparse_step=int(raw.get("decoder_sparse_step", 1)),
            mlp_only_layers=tuple(raw.get("mlp_only_layers") or ()),
        )

    def is_sparse(self, layer: int) -> bool:
        return (
            layer not in self.mlp_only_layers
            and self.num_experts > 0
            and (layer + 1) % self.sparse_step == 0
        )


class Router(nn.Module):
    """The top-k softmax router (HF's ``…TopKRouter``)."""

    def __init__(self, hidden: int, moe: MoeConfig):
        super().__init__()
        self.top_k, self.norm_topk_prob = moe.top_k, moe.norm_topk_prob
        self.weight = nn.Parameter(torch.zeros(moe.num_experts, hidden))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x`` ``[T, hidden]`` → expert ids ``[T, k]`` and their weights ``[T, k]``."""
        logits = F.linear(x, self.weight)
        probs = F.softmax(logits, dim=-1, dtype=torch.float)
        top, idx = torch.topk(probs, self.top_k, dim=-1)
        if self.norm_topk_prob:
            top = top / top.sum(dim=-1, keepdim=True)
        return idx, top.to(logits.dtype)


class Experts(nn.Module):
    """SwiGLU experts stored fused, ``down(silu(gate(x)) · up(x))`` each."""

    def __init__(self, hidden: int, moe: MoeConfig):
        super().__init__()
        e, i = moe.num_experts, moe.intermediate
        self.intermediate = i
        self.gate_up_proj = nn.Parameter(torch.empty(e, 2 * i, hidden).normal_(std=0.02))
        self.down_proj = nn.Parameter(torch.empty(e, hidden, i).normal_(std=0.02))

    def forward(self, x: torch.Tensor, idx: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        if idx.numel() <= GATHER_PAIRS:
            return self._gathered(x, idx, weight)
        return self._per_expert(x, idx, weight)

    def _gathered(self, x: torch.Tensor, idx: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        t, k = idx.shape
        flat = idx.reshape(-1)
        xs = x.repeat_interleave(k, dim=0)[:, :, None]  # [T·k, hidden, 1]
        gu = torch.bmm(self.gate_up_proj.index_select(0, flat), xs)[..., 0]
        h = F.silu(gu[:, : self.intermediate]) * gu[:, self.intermediate :]
        out = torch.bmm(self.down_proj.index_select(0, flat), h[:, :, None])[..., 0]
        return (out.view(t, k, -1) * weight[..., None]).sum(1)

    def _per_expert(self, x: torch.Tensor, idx: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(x)
        experts = cast(torch.Tensor, idx.unique())  # pyright: ignore[reportUnknownMemberType] (stub: untyped)
        for e in int_list(experts):
            tok, slot = torch.where(idx == e)
            gu = F.linear(x[tok], self.gate_up_proj[e])
            h = F.silu(gu[:, : self.intermediate]) * gu[:, self.intermediate :]
            y = F.linear(h, self.down_proj[e]) * weight[tok, slot, None]
            out.index_add_(0, tok, y.to(out.dtype))
        return out


class SparseMoeBlock(nn.Module):
    """Router + experts (+ the gated shared expert when ``moe.shared_intermediate``)."""

    def __init__(self, cfg: DecoderConfig, moe: MoeConfig):
        super().__init__()
        h = cfg.hidden_size
        self.gate = Router(h, moe)
        self.experts = Experts(h, moe)
        self.shared_expert: MLP | None = None
        self.shared_expert_gate: nn.Linear | None = None
        if moe.shared_intermediate:
            self.shared_expert = MLP(replace(cfg, intermediate_size=moe.shared_intermediate))
            self.shared_expert_gate = nn.Linear(h, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        idx, weight = self.gate(x)
        out = self.experts(x, idx, weight)
        if self.shared_expert is not None and self.shared_expert_gate is not None:
            out = out + torch.sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x)
        return out
