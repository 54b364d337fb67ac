"""BAGEL's nodes: the real architecture (`wgc_models.bagel.model` and friends) through the
node API.

- The image-side nodes (`VitEncoder`, `VaeEncoder`, `VaeDecoder`): `wgc_models.bagel.pixels`.
- `LLM` (and `LLM_cfg_text`, `LLM_cfg_img`, which read one label of its cache each): the Qwen2
  MoT backbone over the runtime's paged pool, three labels per request (``main``,
  ``cfg_text``, ``cfg_img``) kept as BAGEL's inferencer keeps its three contexts
  (`wgc_models.bagel.model`): a text segment forks ``main`` into ``cfg_text`` first and
  goes into ``main`` and ``cfg_img``; an image (VAE tokens when generating or editing, then
  ViT tokens) goes into ``main`` and forks it into ``cfg_text`` after. A prefill answers
  ``<|im_start|>``, the token decoding starts from (what BAGEL's ``prepare_start_tokens``
  feeds), and the context's layout (`context`: each label's next rotary position, the
  number of images, and the last VAE image's grid). Decoding appends a token per step to
  ``main`` (greedy); ``stop`` at ``<|im_end|>`` or after option ``max_tokens`` tokens. A
  denoising call runs latent blocks (never cached) against the labels: one pass on its own
  label when it binds ``velocity`` (the CFG-parallel walk), else the three passes, BAGEL's
  guidance and the Euler step. Text-to-image denoises the ``latent_side`` square (``latents``);
  an edit (``edit_latents``, ``edit_velocity``) the last input image's VAE grid, from noise
  drawn at that shape: the release generates an edit at the input's resized shape.
- `CombineCfg`: BAGEL's guidance and the Euler step for the CFG-parallel walk.

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

from wgc_models._shared.batched import Batched, need
from wgc_models.bagel.checkpoint import bagel_parts, load_bagel
from wgc_models.bagel.model import (
    ContextBlock,
    Guidance,
    Schedule,
    euler,
    guide,
)
from wgc_models.bagel.text import bagel_tokenizer, text_ids
from wgc_models.layers.block_attention import Block, PagedBlocks
from wgc_models.layers.host_values import int_list
from wgc_runtime.contract.node import CallContext, Node, NodeContext, NodeError, Work
from wgc_runtime.contract.weights import WeightParts

LABELS = ("main", "cfg_text", "cfg_img")


def _guidance(config: Mapping[str, Any], images: int) -> Guidance:
    text = float(config.get("cfg_text_scale", 4.0))
    if images > 0:
        return Guidance.editing(text, float(config.get("cfg_img_scale_edit", 2.0)))
    return Guidance(text, float(config.get("cfg_img_scale", 1.0)))


def _schedule(config: Mapping[str, Any]) -> Schedule:
    return Schedule(int(config.get("steps", 50)), float(config.get("timestep_shift", 3.0)))


def _start(
    inputs: Mapping[str, torch.Tensor | None],
    ctx: CallContext,
    shape: tuple[int, ...],
    port: str = "latents",
) -> tuple[torch.Tensor, int]:
    """The denoising state; bare signals start from request-seeded noise at step 0 (every node
    of the request draws the same noise)."""
    latents = inputs.get(port)
    if latents is None:
        latents = torch.randn(shape, generator=ctx.generator("latents", per_call=False))
    t = inputs.get("time_index")
    return latents.float(), 0 if t is None else int(t)


def _edit_shape(node: str, grid: list[int], dim: int) -> tuple[int, int, int]:
    """An edit's latent shape: the last VAE image's grid (from the context or the state)."""
    rows, cols = grid
    if rows <= 0 or cols <= 0:
        raise NodeError(f"node `{node}`: an edit needs an input image's latents in its context")
    return rows, cols, dim


class CombineCfg(Node):
    """BAGEL's guidance and the Euler step, for the CFG-parallel walk."""

    def forward_one(
        self, inputs: dict[str, torch.Tensor | None], ctx: CallContext
    ) -> dict[str, torch.Tensor]:
        context = need(inputs, "context", self.name)
        if "edit_latents" in ctx.writes:  # an edit: on the context's grid
            port, vs = "edit_latents", ("e_main", "e_text", "e_img")
            dim = int(self.out_shape("latents")[-1])
            shape = _edit_shape(self.name, [int(n) for n in context[4:6]], dim)
        else:
            port, vs, shape = "latents", ("v_main", "v_text", "v_img"), self.out_shape("latents")
        latents, i = _start(inputs, ctx, shape, port)
        t, dt = _schedule(self.config).at(i)
        g = _guidance(self.config, int(context[3]))
        v_main, v_text, v_img = (need(inputs, p, self.name) for p in vs)
        v = guide(v_main, v_text, v_img, g, t)
        return {port: euler(latents, v, dt), "time_index": torch.tensor(i + 1)}


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
        self.schedule = _schedule(self.config)

    # ------------------------------------------------------------------ bookkeeping
    @staticmethod
    def _rope(st: Mapping[str, Any], label: str) -> int:
        return int(st.get(f"rope_{label}", 0))

    def _context(self, st: Mapping[str, Any]) -> torch.Tensor:
        ropes = [self._rope(st, label) for label in LABELS]
        grid = [int(st.get(k, 0)) for k in ("grid_rows", "grid_cols")]
        return torch.tensor([*ropes, int(st.get("images", 0)), *grid], dtype=torch.int64)

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
            hidden = list(out.split([cb.x.shape[0] for _, cb in pairs]))
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
            st = w.ctx.state  # the last VAE image's grid: the shape an edit is generated at
            st["grid_rows"], st["grid_cols"] = int(latents.shape[0]), int(latents.shape[1])
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
        context = w.inputs.get("context")
        edit = bool({"edit_latents", "edit_velocity"} & set(w.ctx.writes))
        out, vel = ("edit_latents", "edit_velocity") if edit else ("latents", "velocity")
        shape = self.out_shape("latents")
        if edit:  # an edit: on the input image's grid (the context's, else this request's)
            keys = ("grid_rows", "grid_cols")
            grid = [int(st.get(k, 0)) for k in keys] if context is None else int_list(context[4:6])
            shape = _edit_shape(self.name, grid, int(shape[-1]))
        latents, i = _start(w.inputs, w.ctx, shape, out)
        t, dt = self.schedule.at(i)
        tokens = self.model.latent_tokens(latents.to(self.device), t)
        if vel in w.ctx.writes:  # one guidance pass: this node's own label
            label = kv.labels[0]
            if kv.writable:
                rope = self._rope(st, label)
            elif context is not None:
                rope = int(context[LABELS.index(label)])
            else:
                raise NodeError(f"node `{self.name}` reads `{label}` and needs the `context`")
            blocks = [self._block(w, label, self.model.image_block(tokens, rope, True), False)]

            def one(hidden: list[torch.Tensor]) -> dict[str, torch.Tensor]:
                return {vel: self.model.velocity(hidden[0]).cpu().reshape(latents.shape)}

            return _Call(blocks, one)
        g = _guidance(self.config, int(st.get("images", 0)))
        text, img = g.scales(t)
        labels = (
            ["main"] + (["cfg_text"] if text > 1.0 else []) + (["cfg_img"] if img > 1.0 else [])
        )
        blocks = [
            self._block(w, lb, self.model.image_block(tokens, self._rope(st, lb), True), False)
            for lb in labels
        ]

        def three(hidden: list[torch.Tensor]) -> dict[str, torch.Tensor]:
            vs = {
                lb: self.model.velocity(h).cpu().reshape(latents.shape)
                for lb, h in zip(labels, hidden, strict=True)
            }
            v = guide(
                vs["main"], vs.get("cfg_text", vs["main"]), vs.get("cfg_img", vs["main"]), g, t
            )
            return {out: euler(latents, v, dt), "time_index": torch.tensor(i + 1)}

        return _Call(blocks, three)
