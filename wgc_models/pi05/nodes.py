"""π0.5's nodes: the real architecture (`wgc_models.pi05.model`) through the node API.

**What π0.5 changes from π0** (both are `Pi0`; this example runs π0.5, and the parity tests
check the shared parts against transformers' ``PI0ForConditionalGeneration``):

1. *No state token.* π0 feeds the robot state as one continuous token (``state_proj``) at the
   head of the action expert's suffix; π0.5 discretises the state into the prompt, so it is part
   of the prefix the vision-language model encodes (this example's ``prompt`` port: the
   instruction as text, tokenized here by PaliGemma's tokenizer as openpi does
   (`wgc_models.pi05.text`), or, with request option ``token_ids``, the ids of an
   openpi-tokenized prompt with the state in it), and the suffix is the action tokens alone.
2. *Time through adaptive normalisation.* π0 mixes the flow time into every action token
   (``action_time_mlp_in/out`` over ``[action_in_proj(x), sincos(t)]``); π0.5 embeds the
   actions alone and conditions every RMSNorm of the expert on the time
   (``time_mlp_in/out`` → adaRMS: scale, shift and a gate on each residual).
3. Hence different weights: no ``state_proj`` / ``action_time_mlp_*``; ``time_mlp_*`` and the
   expert norms' ``dense`` layers instead.

The nodes:

- `VitEncoder`: the camera images → SigLIP → ``multi_modal_projector``: image tokens at the
  language model's width (``[cameras · patches, hidden]``).
- `LLM` (kv-cache): ``prefill`` puts ``[image tokens; embedded prompt]`` into the cache in one
  bidirectional pass of the language model (the prefix); each flow-matching step runs the
  noisy chunk (request-seeded noise when a bare signal, ``t = 1``) through the action expert,
  attending to the cached prefix without caching itself, and takes the Euler step ``x ← x -
  v / steps``, ``t ← t - 1 / steps``. Calls of several requests run as one batch.
- `LLM_1` … `LLM_3` (``like LLM { label main }``): the MPC fan-out, each another sample of the
  chunk (its own noise, ``config sample``) denoised against the SAME prefix: they read the
  owner's ``main`` label, so one prefix in the pool serves every sample.
- `ChunkSelector`: of the sampled chunks, the consensus one — the chunk with the smallest mean
  distance to the others — and every chunk's spread (π0.5 has no value head to score with).

Weights: ``config checkpoint`` is a published π0.5 checkpoint (openpi's converted PyTorch
``model.safetensors``, LeRobot's ``pi05_base`` / fine-tunes, or transformers' PI0 names with
π0.5's weights: `wgc_models.pi05.checkpoint`), loaded strictly; without one, seeded
random weights at the sizes ``config model`` names (`wgc_models.pi05.config`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from wgc_models._shared.batched import Batched, need
from wgc_models._shared.weights import part
from wgc_models.layers.block_attention import Block, PagedBlocks
from wgc_models.layers.random_init import init_seeded
from wgc_models.layers.siglip import pixels
from wgc_models.pi05.checkpoint import load_published
from wgc_models.pi05.config import CONFIGS
from wgc_models.pi05.model import PaliVision, Pi0, Pi0Config
from wgc_models.pi05.text import TOKEN_IDS_OPTION, PromptTokenizer, prompt_ids, tokenizer_file
from wgc_runtime.contract.node import CallContext, Node, NodeContext, NodeError, Work
from wgc_runtime.contract.weights import WeightParts
from wgc_runtime.engines.kv_pool import PagedKVPool

_VISION = "paligemma_with_expert.paligemma.model."
_Key = tuple[Any, Any, Any, str, str]  # model, checkpoint, seed (config values), part, device
_WEIGHTS: dict[_Key, Any] = {}


def pi_config(node: str, config: Mapping[str, Any]) -> Pi0Config:
    name = str(config.get("model", "tiny"))
    if name not in CONFIGS:
        raise NodeError(f"node `{node}`: unknown π0.5 model `{name}` ({', '.join(CONFIGS)})")
    return CONFIGS[name]


def _weights(key: _Key, build: Callable[[], Any]) -> Any:
    """One copy per process of each part's weights (LLM and its MPC copies share one)."""
    if key not in _WEIGHTS:
        _WEIGHTS[key] = build()
    return _WEIGHTS[key]


def _key(config: Mapping[str, Any], part: str, device: torch.device) -> _Key:
    return (config.get("model"), config.get("checkpoint"), config.get("seed"), part, str(device))


def load_vision(node: str, config: Mapping[str, Any], device: torch.device) -> PaliVision:
    cfg = pi_config(node, config)
    path, seed = str(config.get("checkpoint") or ""), int(config.get("seed", 0))

    def build() -> PaliVision:
        model = PaliVision(cfg.vision, cfg.text.hidden_size)
        if path:
            load_published(model, path, prefix=_VISION, skip=("language_model.",))
        else:
            init_seeded(model, seed + 1)
        return model.to(device).eval()

    return _weights(_key(config, "vision", device), build)


def load_policy(node: str, config: Mapping[str, Any], device: torch.device) -> Pi0:
    cfg = pi_config(node, config)
    path, seed = str(config.get("checkpoint") or ""), int(config.get("seed", 0))

    def build() -> Pi0:
        model = Pi0(cfg, vision=False)
        if path:
            skip = (f"{_VISION}vision_tower.", f"{_VISION}multi_modal_projector.")
            load_published(model, path, skip=skip)
        else:
            init_seeded(model, seed + 2)
        return model.to(device).eval()

    return _weights(_key(config, "policy", device), build)


_VISION_NAMES = ("vision_tower.", "multi_modal_projector.")


class VitEncoder(Batched):
    @classmethod
    def weights(cls, config: Mapping[str, Any]) -> Sequence[WeightParts]:
        cfg = pi_config("vit_encoder", config)
        build = lambda: PaliVision(cfg.vision, cfg.text.hidden_size)  # noqa: E731
        return [part("pi05", "vision", config, build, names=_VISION_NAMES, dtype="f32")]

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        tokenizer_file(str(self.config.get("checkpoint") or ""), self.name)  # WG879 first
        self.model = load_vision(self.name, self.config, self.device)

    @torch.inference_mode()
    def forward(self, batch: Sequence[Work]) -> list[dict[str, torch.Tensor]]:
        size = self.model.vision_tower.config.image_size
        out: list[dict[str, torch.Tensor]] = []
        for w in batch:
            images = w.inputs["images"]
            if images is None or images.dim() != 4 or images.shape[-1] != 3:
                raise NodeError(f"node `{self.name}`: the cameras are u8[N, H, W, 3]")
            tokens = self.model(pixels(images, size).to(self.device))
            out.append({"image_embeddings": tokens.to(torch.bfloat16).cpu()})
        return out


class LLM(Batched):
    """The PaliGemma prefix and the action expert over the paged pool (module docstring)."""

    @classmethod
    def weights(cls, config: Mapping[str, Any]) -> Sequence[WeightParts]:
        cfg = pi_config("LLM", config)
        skip = (*_VISION_NAMES, "gemma_expert.lm_head")  # the expert's head is never used
        build = lambda: Pi0(cfg, vision=False)  # noqa: E731
        return [part("pi05", "policy", config, build, skip=skip, dtype="f32")]

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        file = tokenizer_file(str(self.config.get("checkpoint") or ""), self.name)  # WG879 first
        self.text = PromptTokenizer.load(file, self.name)
        self.model = load_policy(self.name, self.config, self.device)
        cfg = self.model.config
        want = (cfg.text.num_hidden_layers, cfg.text.num_key_value_heads, cfg.text.head_dim)
        have = tuple(int(self.config.get(k, -1)) for k in ("layers", "kv_heads", "head_dim"))
        if want != have:
            raise NodeError(
                f"node `{self.name}`: the .walk's KV geometry (layers, kv_heads, head_dim) "
                f"{have} is not model `{self.config.get('model')}`'s {want}"
            )
        self.steps = int(self.config.get("flow_steps", cfg.num_inference_steps))
        self.sample = int(self.config.get("sample", 0))
        self.kv_tokens = int(self.config.get("kv_tokens", 1 << 30))
        self.vocab = cfg.text.vocab_size

    @torch.inference_mode()
    def forward(self, batch: Sequence[Work]) -> list[dict[str, torch.Tensor]]:
        kv = batch[0].ctx.kv
        if kv is None:
            raise NodeError(f"node `{self.name}` is a kv_cache node but got no KV cache")
        if (
            batch[0].inputs.get("prompt") is not None
            or batch[0].inputs.get("image_embeddings") is not None
        ):
            return self._prefill(batch, kv.pool)
        return self._denoise(batch, kv.pool)

    @staticmethod
    def _ids_sent(w: Work) -> bool:
        """Whether the request's prompt holds token ids (option ``token_ids``), not text."""
        return bool(w.ctx.options.get(TOKEN_IDS_OPTION, False))

    def _prefill(self, batch: Sequence[Work], pool: PagedKVPool) -> list[dict[str, torch.Tensor]]:
        parts: list[torch.Tensor] = []
        blocks: list[Block] = []
        positions: list[torch.Tensor] = []
        for w in batch:
            kv = w.ctx.kv
            assert kv is not None
            img, prompt = w.inputs.get("image_embeddings"), w.inputs.get("prompt")
            if img is None or prompt is None:
                raise NodeError(f"node `{self.name}`: the prefix is the images and the prompt")
            ids = prompt_ids(self.text, prompt, self._ids_sent(w), self.vocab, self.name)
            x = self.model.prefix_embeddings(img.to(self.device).float(), ids.to(self.device))
            if kv.length() + x.shape[0] > self.kv_tokens:
                raise NodeError(
                    f"node `{self.name}`: a prefix of {x.shape[0]} tokens is more than "
                    f"`config kv_tokens = {self.kv_tokens}`"
                )
            parts.append(x)
            blocks.append(Block(kv.request, kv.labels[0], x.shape[0]))
            positions.append(self.model.config.positions(x.shape[0])[0])
        step = PagedBlocks(pool, blocks)
        self.model.prefill(torch.cat(parts), torch.cat(positions).to(self.device), step)
        return [{} for _ in batch]

    def _denoise(self, batch: Sequence[Work], pool: PagedKVPool) -> list[dict[str, torch.Tensor]]:
        cfg = self.model.config
        xs: list[torch.Tensor] = []
        ts: list[torch.Tensor] = []
        blocks: list[Block] = []
        positions: list[torch.Tensor] = []
        for w in batch:
            kv = w.ctx.kv
            assert kv is not None
            x = w.inputs.get("noisy_actions")
            if x is None:
                gen = w.ctx.generator(f"actions{self.sample}", per_call=False)
                x = torch.randn(self.out_shape("noisy_actions"), generator=gen)
            t = w.inputs.get("timestep")
            xs.append(x.float())
            ts.append(torch.tensor(1.0) if t is None else t.float())
            prefix = kv.length("main") if "main" in kv.labels else kv.length()
            suffix = cfg.positions(prefix)[1]
            blocks.append(
                Block(
                    kv.request,
                    kv.labels[0],
                    len(suffix),
                    write=False,
                    groups=self.model.suffix_groups(),
                )
            )
            positions.append(suffix)
        step = PagedBlocks(pool, blocks)
        x, t = torch.stack(xs).to(self.device), torch.stack(ts).to(self.device)
        v = self.model.velocity(x, t, torch.cat(positions).to(self.device), step)
        nxt = self.model.euler(x, v, self.steps).cpu()
        return [
            {"noisy_actions": nxt[i].contiguous(), "timestep": (ts[i] - 1.0 / self.steps)}
            for i in range(len(batch))
        ]


class ChunkSelector(Node):
    """The consensus chunk of the samples (module docstring)."""

    def forward_one(
        self, inputs: dict[str, torch.Tensor | None], ctx: CallContext
    ) -> dict[str, torch.Tensor]:
        chunks = torch.stack([need(inputs, f"a_{i}", self.name).float() for i in range(4)])
        flat = chunks.reshape(chunks.shape[0], -1)
        dist = torch.cdist(flat, flat) / flat.shape[1] ** 0.5
        spread = dist.sum(1) / (chunks.shape[0] - 1)
        best = spread.argmin()
        return {"actions": chunks[best].contiguous(), "best": best, "spread": spread}
