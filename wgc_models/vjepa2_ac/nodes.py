"""V-JEPA 2-AC's nodes: the real architecture (`wgc_models.vjepa2_ac.vjepa2`,
`wgc_models.vjepa2_ac.model`) through the node API.

- `VideoEncoder`: each frame of the clip on its own (repeated to a tubelet, as V-JEPA 2-AC
  encodes) → patch latents, layer-normalised: ``[frames · patches, embed]``.
- `Predictor` (kv-cache): the context's frames — each with its action and state token, row
  ``t`` of ``actions`` / ``states`` for frame ``t`` — into the cache (block-causal), and the
  prediction of the next frame.
- `RolloutPredictor` (its own cache): its first call puts every context frame but the last into
  the cache and returns the last as the current latent, step 0; each rollout step appends the
  current frame (the cache grows by one frame, ``2 + patches`` tokens, per step), predicts the
  next one from everything cached and carries it back: O(H) frames of work for a horizon H,
  where re-running the predictor over the sequence so far every step is O(H²)
  (`wgc_models.vjepa2_ac.model.native_rollout`, equal to ≤ 1e-5). ``stop`` when ``step``
  reaches ``horizon``. Calls of several requests run as one batch over the pool.
- `AcPredictorMpc` (stateless): plan ``config candidate`` rolled forward from the context until
  its actions run out (a dense cache inside the call), the final predicted frame.
- `MpcScorer`: V-JEPA 2-AC's energy, the mean L1 distance of each plan's final frame to the
  goal's latents; ``best`` is the cheapest plan.

Weights: `wgc_models.vjepa2_ac.checkpoint` (``config checkpoint``, else seeded random weights
at the sizes ``config model`` names).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from wgc_models._shared.batched import Batched, need
from wgc_models.layers.block_attention import PagedBlocks
from wgc_models.vjepa2_ac.checkpoint import (
    encoder_parts,
    load_encoder,
    load_predictor,
    predictor_parts,
)
from wgc_models.vjepa2_ac.model import cached_rollout, normalize
from wgc_models.vjepa2_ac.vjepa2 import video_pixels
from wgc_runtime.contract.node import CallContext, KvCache, Node, NodeContext, NodeError, Work
from wgc_runtime.contract.weights import WeightParts


def _frames(z: torch.Tensor, patches: int, node: str) -> torch.Tensor:
    """``[frames · patches, embed]`` → ``[frames, patches, embed]``."""
    if z.shape[0] % patches:
        raise NodeError(f"node `{node}`: {z.shape[0]} latent rows are not frames of {patches}")
    return z.float().reshape(-1, patches, z.shape[-1])


def _rows(x: torch.Tensor, start: int, n: int, what: str, node: str) -> torch.Tensor:
    if start + n > x.shape[0]:
        raise NodeError(
            f"node `{node}`: frame {start + n - 1} needs row {start + n - 1} of `{what}`, which "
            f"has {x.shape[0]} rows (one per frame: context frames, then rollout steps)"
        )
    return x[start : start + n].float()


class VideoEncoder(Batched):
    @classmethod
    def weights(cls, config: Mapping[str, Any]) -> Sequence[WeightParts]:
        return encoder_parts(config)

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        self.model = load_encoder(self.name, self.config, self.device)

    @torch.inference_mode()
    def forward(self, batch: Sequence[Work]) -> list[dict[str, torch.Tensor]]:
        size = self.model.config.crop_size
        out: list[dict[str, torch.Tensor]] = []
        for w in batch:
            video = w.inputs["video"]
            if video is None or video.dim() != 4 or video.shape[-1] != 3:
                raise NodeError(f"node `{self.name}`: a video is u8[F, H, W, 3]")
            z = self.model.encode_frames(video_pixels(video, size).to(self.device))
            out.append({"latents": normalize(z).float().cpu()})
        return out


class _PredictorBase(Batched):
    @classmethod
    def weights(cls, config: Mapping[str, Any]) -> Sequence[WeightParts]:
        return predictor_parts(config)

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        self.model = load_predictor(self.name, self.config, self.device)
        cfg = self.model.config
        want = (cfg.depth, cfg.num_heads, cfg.head_dim)
        have = tuple(int(self.config.get(k, -1)) for k in ("layers", "kv_heads", "head_dim"))
        if want != have:
            raise NodeError(
                f"node `{self.name}`: the .walk's KV geometry (layers, kv_heads, head_dim) "
                f"{have} is not the predictor's {want}"
            )
        self.kv_tokens = int(self.config.get("kv_tokens", 1 << 30))
        self.per_frame = cfg.tokens_per_frame

    def _kv(self, ctx: CallContext, frames: int) -> KvCache:
        kv = ctx.kv
        if kv is None:
            raise NodeError(f"node `{self.name}` is a kv_cache node but got no KV cache")
        need = kv.length() + frames * self.per_frame
        if need > self.kv_tokens:
            raise NodeError(
                f"node `{self.name}`: request `{kv.request}` would hold {need} tokens, more "
                f"than `config kv_tokens = {self.kv_tokens}`"
            )
        return kv

    def _run(
        self, items: list[tuple[KvCache, torch.Tensor, torch.Tensor, torch.Tensor]]
    ) -> list[torch.Tensor]:
        """New frames of several requests as one batch: ``(kv, latents [F, P, E], actions,
        states)`` each; returns each one's predictions ``[F, P, E]``."""
        if not items:
            return []
        starts = [kv.length() // self.per_frame for kv, *_ in items]
        blocks = [self.model.frame_block(kv.request, z.shape[0]) for kv, z, _, _ in items]
        step = PagedBlocks(items[0][0].pool, blocks)
        dev = self.device
        return self.model.step_frames(
            [z.to(dev) for _, z, _, _ in items],
            [a.to(dev) for _, _, a, _ in items],
            [s.to(dev) for _, _, _, s in items],
            starts,
            step,
        )


class Predictor(_PredictorBase):
    @torch.inference_mode()
    def forward(self, batch: Sequence[Work]) -> list[dict[str, torch.Tensor]]:
        items: list[tuple[KvCache, torch.Tensor, torch.Tensor, torch.Tensor]] = []
        for w in batch:
            x = w.inputs
            z = _frames(need(x, "context", self.name), self.model.config.frame_tokens, self.name)
            t = z.shape[0]
            a = _rows(need(x, "actions", self.name), 0, t, "actions", self.name)
            s = _rows(need(x, "states", self.name), 0, t, "states", self.name)
            items.append((self._kv(w.ctx, t), z, a, s))
        preds = self._run(items)
        return [{"prediction": normalize(p[-1]).cpu()} for p in preds]


class RolloutPredictor(_PredictorBase):
    @torch.inference_mode()
    def forward(self, batch: Sequence[Work]) -> list[dict[str, torch.Tensor]]:
        patches = self.model.config.frame_tokens
        items: list[tuple[KvCache, torch.Tensor, torch.Tensor, torch.Tensor]] = []
        results: list[dict[str, torch.Tensor]] = []
        for w in batch:
            x = w.inputs
            if x.get("latent") is None:  # the prefill: every context frame but the last
                z = _frames(need(x, "context", self.name), patches, self.name)
                t = z.shape[0]
                kv = self._kv(w.ctx, t - 1)
                if t > 1:
                    a = _rows(need(x, "actions", self.name), 0, t - 1, "actions", self.name)
                    s = _rows(need(x, "states", self.name), 0, t - 1, "states", self.name)
                    items.append((kv, z[:-1], a, s))
                results.append({"latent": z[-1].contiguous(), "step": torch.tensor(0)})
                continue
            kv = self._kv(w.ctx, 1)
            f = kv.length() // self.per_frame  # the frame this step appends
            a = _rows(need(x, "actions", self.name), f, 1, "actions", self.name)
            s = _rows(need(x, "states", self.name), f, 1, "states", self.name)
            items.append((kv, need(x, "latent", self.name).float()[None], a, s))
            step = int(need(x, "step", self.name)) + 1
            horizon = int(need(x, "horizon", self.name))
            results.append({"step": torch.tensor(step), "stop": torch.tensor(step >= horizon)})
        preds = iter(self._run(items))
        for w, r in zip(batch, results, strict=True):
            if w.inputs.get("latent") is None:
                if need(w.inputs, "context", self.name).shape[0] > patches:
                    next(preds)  # the context's predictions are not needed
                continue
            r["latent"] = normalize(next(preds)[-1]).cpu()
        return results


class AcPredictorMpc(Node):
    @classmethod
    def weights(cls, config: Mapping[str, Any]) -> Sequence[WeightParts]:
        return predictor_parts(config)

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        self.model = load_predictor(self.name, self.config, self.device)

    @torch.inference_mode()
    def forward_one(
        self, inputs: dict[str, torch.Tensor | None], ctx: CallContext
    ) -> dict[str, torch.Tensor]:
        z = _frames(need(inputs, "context", self.name), self.model.config.frame_tokens, self.name)
        plans = need(inputs, "plans", self.name)
        plan = plans[int(self.config.get("candidate", 0))].float()
        states = need(inputs, "states", self.name).float()
        horizon = plan.shape[0] - (z.shape[0] - 1)
        if horizon < 1:
            raise NodeError(
                f"node `{self.name}`: the plans' {plan.shape[0]} rows do not reach "
                f"past the {z.shape[0]} context frames"
            )
        dev = self.device
        out = cached_rollout(self.model, z.to(dev), plan.to(dev), states.to(dev), horizon)
        return {"prediction": out[-1].cpu()}


class MpcScorer(Node):
    def forward_one(
        self, inputs: dict[str, torch.Tensor | None], ctx: CallContext
    ) -> dict[str, torch.Tensor]:
        goal = need(inputs, "goal", self.name).float()
        preds = [need(inputs, f"pred_{i}", self.name).float() for i in range(4)]
        target = goal[-preds[0].shape[0] :]  # the goal's last frame
        costs = torch.stack([(p - target).abs().mean() for p in preds])
        return {"best": costs.argmin(), "costs": costs}
