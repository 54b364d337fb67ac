"""BAGEL's nodes: the real architecture (`wgc_models.bagel.model` and friends) through the
node API.

- `VitEncoder`: an image → SigLIP → connector + ViT positions: the understanding tokens
  ``[V, hidden]`` the LLM reads (an image keeps its aspect ratio, resized as BAGEL's release
  resizes it: `wgc_models.bagel.image`).
- `VaeEncoder`: an image → the FLUX VAE's scaled latents, patchified 2x2 on the image's own
  grid: ``[h, w, latent_dim]`` (an image keeps its aspect ratio, resized by the release's VAE
  rule: `wgc_models.bagel.image`; the ViT reads that image too, as the release's interleaved
  inference feeds it). A generated image is ``latent_side`` square.
- `LLM` (and `LLM_cfg_text`, `LLM_cfg_img`, which read one label of its cache each): the Qwen2
  MoT backbone over the runtime's paged pool, three labels per request (``main``,
  ``cfg_text``, ``cfg_img``) kept as BAGEL's inferencer keeps its three contexts
  (`wgc_models.bagel.model`): a text segment forks ``main`` into ``cfg_text`` first and
  goes into ``main`` and ``cfg_img``; an image (VAE tokens when generating or editing, then
  ViT tokens) goes into ``main`` and forks it into ``cfg_text`` after. A prefill answers
  ``<|im_start|>``, the token decoding starts from (what BAGEL's ``prepare_start_tokens``
  feeds), and the context's layout (`context`: each label's next rotary position and the
  number of images). Decoding appends a token per step to ``main`` (greedy); ``stop`` at
  ``<|im_end|>`` or after option ``max_tokens`` tokens. A denoising call runs latent blocks
  (never cached) against the labels: one pass on its own label when it binds ``velocity``
  (the CFG-parallel walk), else the three passes, BAGEL's guidance and the Euler step.
- `CombineCfg`: BAGEL's guidance and the Euler step for the CFG-parallel walk.
- `VaeDecoder`: latents → pixels (``u8``).

Every call of a batch runs as ONE ragged forward over the pool (`PagedBlocks`): the
executor hands the node all ready calls of one (walk, call) across requests, and, on a rank
that runs the CFG copies beside `LLM`, their passes of the same step too (`Node.serves_copies`):
the CFG-parallel walk's three passes become one forward over the three labels. Guidance follows
BAGEL's two profiles: text-to-image (``cfg_img_scale`` 1.0, interval [0.4, 1], global
renormalisation) and, when the context holds an image, editing (``cfg_img_scale_edit`` 2.0,
[0, 1], ``text_channel``).

Weights: ``config checkpoint`` is BAGEL's release folder (``ema.safetensors`` under BAGEL's
module names, its sizes from ``llm_config.json`` / ``vit_config.json``:
`wgc_models.bagel.checkpoint`) with ``vae/`` (a diffusers ``AutoencoderKL`` folder);
without one, seeded random weights at the sizes ``config model`` names
(`wgc_models.bagel.config`). ``config dtype`` (f32, bf16 or f16) is what the
weights are held and computed in (a checkpoint's tensors are cast as they load; BAGEL ships
bf16); the ports keep their declared types (latents f32, the ViT tokens bf16), cast at the
node's edge. The nodes of one process that need the same part share one copy of its weights
(`wgc_models.bagel.checkpoint`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from wgc_models._shared.batched import Batched, need, weights_dtype
from wgc_models.bagel.checkpoint import bagel_config, bagel_parts, load_bagel, load_vae
from wgc_models.bagel.image import scaled, vae_image, vit_pixels
from wgc_models.bagel.model import (
    ContextBlock,
    euler,
    guidance_from,
    guide,
    latent_stride,
    patchify,
    schedule_from,
    unpatchify,
)
from wgc_models.bagel.text import bagel_tokenizer, text_ids
from wgc_models.layers.block_attention import Block, PagedBlocks
from wgc_runtime.contract.node import CallContext, Node, NodeContext, NodeError, Work
from wgc_runtime.contract.weights import WeightParts

LABELS = ("main", "cfg_text", "cfg_img")


def _start(
    inputs: Mapping[str, torch.Tensor | None], ctx: CallContext, shape: tuple[int, ...]
) -> tuple[torch.Tensor, int]:
    """The denoising state; bare signals start from request-seeded noise at step 0 (every node
    of the request draws the same noise)."""
    latents = inputs.get("latents")
    if latents is None:
        latents = torch.randn(shape, generator=ctx.generator("latents", per_call=False))
    t = inputs.get("time_index")
    return latents.float(), 0 if t is None else int(t)


class VitEncoder(Batched):
    @classmethod
    def weights(cls, config: Mapping[str, Any]) -> Sequence[WeightParts]:
        return bagel_parts("VitEncoder", config, "vit")

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        self.model = load_bagel(self.name, self.config, self.device, "vit")
        self.dtype = weights_dtype(self.config, self.name)
        self.side = int(self.config.get("image_side", 64))
        self.stride = latent_stride(self.model.config)

    @torch.inference_mode()
    def forward(self, batch: Sequence[Work]) -> list[dict[str, torch.Tensor]]:
        v = self.model.config.vit
        out: list[dict[str, torch.Tensor]] = []
        for w in batch:  # one image at a time: each its own size (and a batch rounds otherwise)
            img = vae_image(_image(w, self.name), self.side, self.stride)  # the release's order
            px = vit_pixels(img, v.image_size, v.patch_size)
            px = px.to(self.device, self.dtype)
            out.append({"vit_embeddings": self.model.vit_tokens(px).to(torch.bfloat16).cpu()})
        return out


def _image(w: Work, node: str) -> torch.Tensor:
    img = w.inputs.get("image")
    if img is None or img.dim() != 3 or img.shape[-1] != 3:
        raise NodeError(f"node `{node}`: an image is u8[H, W, 3]")
    return img


class VaeEncoder(Batched):
    @classmethod
    def weights(cls, config: Mapping[str, Any]) -> Sequence[WeightParts]:
        return bagel_parts("VaeEncoder", config, "vae")

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        self.vae = load_vae(self.name, self.config, self.device)
        self.cfg = bagel_config(self.name, self.config)
        self.side = int(self.config.get("image_side", 64))
        self.stride = latent_stride(self.cfg)
        self.dtype = weights_dtype(self.config, self.name)

    @torch.inference_mode()
    def forward(self, batch: Sequence[Work]) -> list[dict[str, torch.Tensor]]:
        p = self.cfg.latent_patch_size
        out: list[dict[str, torch.Tensor]] = []
        for w in batch:  # one image at a time: a batched convolution rounds differently
            # the release resizes twice: before the context update, then in its VAE transform
            img = _image(w, self.name)
            for _ in range(2):
                img = vae_image(img, self.side, self.stride)
            px = scaled(img).to(self.device, self.dtype)
            h, wd = (n // self.stride for n in img.shape[:2])
            z = patchify(self.vae.encode(px)[0], p).float().cpu()
            out.append({"vae_latents": z.reshape(h, wd, z.shape[-1])})
        return out


class VaeDecoder(Batched):
    @classmethod
    def weights(cls, config: Mapping[str, Any]) -> Sequence[WeightParts]:
        return bagel_parts("VaeDecoder", config, "vae")

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        self.vae = load_vae(self.name, self.config, self.device)
        self.cfg = bagel_config(self.name, self.config)
        self.dtype = weights_dtype(self.config, self.name)

    @torch.inference_mode()
    def forward(self, batch: Sequence[Work]) -> list[dict[str, torch.Tensor]]:
        p, c = self.cfg.latent_patch_size, self.cfg.vae.latent_channels
        out: list[dict[str, torch.Tensor]] = []
        for w in batch:  # one image at a time: a batched convolution rounds differently
            latents = w.inputs["latents"]
            assert latents is not None
            img = self.vae.decode(unpatchify(latents, p, c)[None].to(self.device, self.dtype))[0]
            img = ((img.float() * 0.5 + 0.5).clamp(0, 1) * 255).round().to(torch.uint8)
            out.append({"image": img.permute(1, 2, 0).contiguous().cpu()})
        return out


class CombineCfg(Node):
    """BAGEL's guidance and the Euler step, for the CFG-parallel walk."""

    def forward_one(
        self, inputs: dict[str, torch.Tensor | None], ctx: CallContext
    ) -> dict[str, torch.Tensor]:
        latents, i = _start(inputs, ctx, self.out_shape("latents"))
        context = need(inputs, "context", self.name)
        t, dt = schedule_from(self.config).at(i)
        g = guidance_from(self.config, int(context[3]))
        v_main, v_text, v_img = (need(inputs, p, self.name) for p in ("v_main", "v_text", "v_img"))
        v = guide(v_main, v_text, v_img, g, t)
        return {"latents": euler(latents, v, dt), "time_index": torch.tensor(i + 1)}


class _Call:
    """One work item's part of the LLM's forward: its blocks (with their context blocks) and
    what turns their hidden states into the item's result."""

    def __init__(
        self,
        blocks: list[tuple[Block, ContextBlock]],
        finish: Callable[[list[torch.Tensor]], dict[str, torch.Tensor]],
    ) -> None:
        self.blocks = blocks
        self.finish = finish


class LLM(Batched):
    """The MoT backbone over the paged pool (module docstring). Its copies' guidance passes
    may come in its batches (`serves_copies`): every call reads its own work's KV handle."""

    serves_copies = True

    @classmethod
    def weights(cls, config: Mapping[str, Any]) -> Sequence[WeightParts]:
        return bagel_parts("LLM", config, "llm")

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        self.model = load_bagel(self.name, self.config, self.device, "llm")
        self.tokenizer = bagel_tokenizer(self.name, self.config)  # the release's, if given
        self.cfg = self.model.config
        llm = self.cfg.llm
        want = (llm.num_hidden_layers, llm.num_key_value_heads, llm.head_dim)
        have = tuple(int(self.config.get(k, -1)) for k in ("layers", "kv_heads", "head_dim"))
        if want != have:
            raise NodeError(
                f"node `{self.name}`: the .walk's KV geometry (layers, kv_heads, head_dim) "
                f"{have} is not model `{self.config.get('model')}`'s {want}"
            )
        self.kv_tokens = int(self.config.get("kv_tokens", 1 << 30))
        self.schedule = schedule_from(self.config)

    # ------------------------------------------------------------------ bookkeeping
    @staticmethod
    def _rope(st: Mapping[str, Any], label: str) -> int:
        return int(st.get(f"rope_{label}", 0))

    def _context(self, st: Mapping[str, Any]) -> torch.Tensor:
        ropes = [self._rope(st, label) for label in LABELS]
        return torch.tensor([*ropes, int(st.get("images", 0))], dtype=torch.int64)

    def _room(self, w: Work, label: str, n: int) -> None:
        kv = w.ctx.kv
        assert kv is not None
        have = kv.length(label)
        if have + n > self.kv_tokens:
            raise NodeError(
                f"node `{self.name}`: request `{kv.request}` would hold {have + n} tokens in "
                f"`{label}`, more than `config kv_tokens = {self.kv_tokens}`"
            )

    def _fork(self, w: Work, src: str, dst: str) -> None:
        assert w.ctx.kv is not None
        if w.ctx.kv.length(src):
            w.ctx.kv.fork(src, dst)
        w.ctx.state[f"rope_{dst}"] = self._rope(w.ctx.state, src)

    # ------------------------------------------------------------------ the batch
    @torch.inference_mode()
    def forward(self, batch: Sequence[Work]) -> list[Any]:  # a failed call's item: its error
        kv = batch[0].ctx.kv
        if kv is None:
            raise NodeError(f"node `{self.name}` is a kv_cache node but got no KV cache")
        calls: list[_Call | Exception] = []
        for w in batch:
            try:
                calls.append(self._plan(w))
            except (NodeError, ValueError, KeyError) as e:
                calls.append(e)
        live = [c for c in calls if isinstance(c, _Call)]
        pairs = [p for c in live for p in c.blocks]
        hidden: list[torch.Tensor] = []
        if pairs:
            step = PagedBlocks(kv.pool, [b for b, _ in pairs])
            x = torch.cat([cb.x for _, cb in pairs])
            pos = torch.cat([cb.positions for _, cb in pairs])
            gen = torch.cat([cb.gen for _, cb in pairs])
            out = self.model.language_model(x, pos, step, gen)
            hidden = list(torch.split(out, [cb.x.shape[0] for _, cb in pairs]))
        results: list[dict[str, torch.Tensor] | Exception] = []
        for c in calls:
            if isinstance(c, Exception):
                results.append(c)
                continue
            mine, hidden = hidden[: len(c.blocks)], hidden[len(c.blocks) :]
            results.append(c.finish(mine))
        return results

    def _plan(self, w: Work) -> _Call:
        x = w.inputs
        if x.get("text_inputs") is not None:
            return self._text(w)
        if x.get("vit_embeddings") is not None:
            return self._image(w, need(x, "vit_embeddings", self.name), gen=False)
        if x.get("vae_latents") is not None:
            latents = need(x, "vae_latents", self.name)
            tokens = self.model.latent_tokens(latents.to(self.device), 0.0)
            return self._image(w, tokens, gen=True)
        if x.get("token") is not None:
            return self._decode(w)
        return self._denoise(w)

    def _block(
        self, w: Work, label: str, cb: ContextBlock, write: bool
    ) -> tuple[Block, ContextBlock]:
        kv = w.ctx.kv
        assert kv is not None
        if write:
            self._room(w, label, cb.x.shape[0])
        return (Block(kv.request, label, cb.x.shape[0], write=write, causal=cb.causal), cb)

    def _text(self, w: Work) -> _Call:
        st, ids = w.ctx.state, w.inputs["text_inputs"]
        assert ids is not None
        ids = text_ids(self.tokenizer, ids, self.name)
        self._fork(w, "main", "cfg_text")  # the text-free branch: main without this text
        blocks = [
            self._block(w, label, self.model.text_block(ids, self._rope(st, label)), True)
            for label in ("main", "cfg_img")
        ]

        def finish(_: list[torch.Tensor]) -> dict[str, torch.Tensor]:
            for label, (_b, cb) in zip(("main", "cfg_img"), blocks, strict=True):
                st[f"rope_{label}"] = cb.next_rope
            return self._prefilled(w)

        return _Call(blocks, finish)

    def _image(self, w: Work, tokens: torch.Tensor, gen: bool) -> _Call:
        st = w.ctx.state
        cb = self.model.image_block(tokens.to(self.device).float(), self._rope(st, "main"), gen)
        blocks = [self._block(w, "main", cb, True)]

        def finish(_: list[torch.Tensor]) -> dict[str, torch.Tensor]:
            st["rope_main"] = cb.next_rope
            st["images"] = int(st.get("images", 0)) + 1
            self._fork(w, "main", "cfg_text")  # the text-free branch keeps the image
            return {} if gen else self._prefilled(w)

        return _Call(blocks, finish)

    def _prefilled(self, w: Work) -> dict[str, torch.Tensor]:
        out = {"new_token": torch.tensor([self.cfg.tokens.bos], dtype=torch.int64)}
        if "context" in w.ctx.writes:
            out["context"] = self._context(w.ctx.state)
        return out

    def _decode(self, w: Work) -> _Call:
        st, token = w.ctx.state, w.inputs["token"]
        assert token is not None
        cb = self.model.token_block(int(token.reshape(-1)[0]), self._rope(st, "main"))
        blocks = [self._block(w, "main", cb, True)]
        limit = int(w.ctx.options.get("max_tokens", 500))

        def finish(hidden: list[torch.Tensor]) -> dict[str, torch.Tensor]:
            st["rope_main"] = cb.next_rope
            st["decoded"] = n = int(st.get("decoded", 0)) + 1
            nxt = int(self.model.language_model.logits(hidden[0][-1:]).argmax(-1))
            stop = nxt == self.cfg.tokens.eos or n >= limit
            return {"new_token": torch.tensor([nxt], dtype=torch.int64), "stop": torch.tensor(stop)}

        return _Call(blocks, finish)

    def _denoise(self, w: Work) -> _Call:
        kv, st = w.ctx.kv, w.ctx.state
        assert kv is not None
        latents, i = _start(w.inputs, w.ctx, self.out_shape("latents"))
        t, dt = self.schedule.at(i)
        tokens = self.model.latent_tokens(latents.to(self.device), t)
        if "velocity" in w.ctx.writes:  # one guidance pass: this node's own label
            label = kv.labels[0]
            context = w.inputs.get("context")
            if kv.writable:
                rope = self._rope(st, label)
            elif context is not None:
                rope = int(context[LABELS.index(label)])
            else:
                raise NodeError(f"node `{self.name}` reads `{label}` and needs the `context`")
            blocks = [self._block(w, label, self.model.image_block(tokens, rope, True), False)]

            def one(hidden: list[torch.Tensor]) -> dict[str, torch.Tensor]:
                return {"velocity": self.model.velocity(hidden[0]).cpu()}

            return _Call(blocks, one)
        g = guidance_from(self.config, int(st.get("images", 0)))
        text, img = g.scales(t)
        labels = (
            ["main"] + (["cfg_text"] if text > 1.0 else []) + (["cfg_img"] if img > 1.0 else [])
        )
        blocks = [
            self._block(w, lb, self.model.image_block(tokens, self._rope(st, lb), True), False)
            for lb in labels
        ]

        def three(hidden: list[torch.Tensor]) -> dict[str, torch.Tensor]:
            vs = dict(zip(labels, (self.model.velocity(h).cpu() for h in hidden), strict=True))
            v = guide(
                vs["main"], vs.get("cfg_text", vs["main"]), vs.get("cfg_img", vs["main"]), g, t
            )
            return {"latents": euler(latents, v, dt), "time_index": torch.tensor(i + 1)}

        return _Call(blocks, three)
