"""The Llama example's node: `Decoder`, a `LlamaDecoder` over the runtime's paged KV pool.

Written against the node API only (`wgc_runtime.contract.node`, `wgc_runtime.contract.capture`)
and the components it runs (`wgc_models.layers`):

- **Weights.** Seeded random weights at the sizes the ``.walk`` declares (``config seed``), or
  a Hugging Face Llama/Qwen2 safetensors folder (``config checkpoint``), whose ``config.json``
  must agree with the declared sizes (they also size the KV pool).
- **`forward`**: every ready call of one walk, as ONE ragged batch: prefill calls append their
  prompt, decode calls their previous token, to the request's sequence in the pool
  (``ctx.kv.pool``, key ``ctx.kv.request``); each gets the greedy next token and whether it is
  ``eos``. Requests join and leave the batch between iterations (the executor batches the
  ready calls of a loop across requests, up to ``batching.max_batch``).
- **`static_step`**: the decode step as a captured unit (`DecoderEngine.decode_unit`: fixed
  buffers per batch bucket, padding rows writing to the runtime's padding page); on a GPU it
  is replayed as a CUDA graph, on the CPU compiled with inductor or run eagerly, as the
  placement's ``batching.backend`` says. The node's `DecodeRunner` (the running batch: page
  tables as one tensor, lengths) appends each row's token slot to its sequence and gives the
  batch's slots, positions, lengths and page tables in one call.

- **Sessions.** A request of a session (``SESSION_OPTION`` in its options) sends the whole
  conversation as its prompt; the sequence (kept from the session's last request, with
  ``ctx.state["ids"]``, its tokens) keeps its longest common prefix with it and only the rest is
  prefilled (`held_tokens`), so a turn equals the conversation prefilled whole.

Greedy decoding is deterministic, so a request's tokens are the same batched or alone,
captured or not, and in the reference interpreter.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import torch

from wgc_models.llama.checkpoint import from_pretrained
from wgc_models.llama.engine import DecoderEngine
from wgc_models.llama.model import LlamaDecoder, lm_config, lm_parts
from wgc_models.llama.text import prompt_format, prompt_ids
from wgc_runtime.contract.capture import CapturedCall, StaticPort, StaticStep
from wgc_runtime.contract.flow import SESSION_OPTION
from wgc_runtime.contract.node import (
    DTYPE_NAMES,
    KvCache,
    Node,
    NodeContext,
    NodeError,
    Work,
)
from wgc_runtime.contract.weights import WeightParts
from wgc_runtime.engines.decode_runner import DecodeRunner, requests_of


def build_model(config: Mapping[str, Any], device: str | torch.device) -> LlamaDecoder:
    """Random weights seeded by ``config seed``, or the checkpoint ``config checkpoint``."""
    cfg = lm_config(config, tied=False)
    path = str(config.get("checkpoint") or "")
    if path:
        model = from_pretrained(path, device=device)
        got = model.config
        want = (cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, cfg.vocab_size)
        have = (got.num_layers, got.num_kv_heads, got.head_dim, got.vocab_size)
        if want != have:
            raise NodeError(
                f"checkpoint `{path}` has (layers, kv_heads, head_dim, vocab) {have}, the .walk "
                f"declares {want}: set the node's config to the checkpoint's sizes"
            )
        return model
    # torch's stub leaves a parameter of each untyped
    with torch.random.fork_rng(devices=[]):  # pyright: ignore[reportUnknownMemberType]
        torch.manual_seed(int(config.get("seed", 0)))  # pyright: ignore[reportUnknownMemberType]
        model = LlamaDecoder(cfg)
        for p in model.parameters():
            torch.nn.init.normal_(p, std=0.5 / cfg.hidden_size**0.5)
    return model.to(device).eval()


def held_tokens(kv: KvCache, state: dict[str, Any], x: torch.Tensor, whole: bool) -> torch.Tensor:
    """What of ``x`` a session's sequence must still take; ``state["ids"]`` follows the tokens
    it holds. A decode step (``whole`` False) takes its token. A prompt (``whole``: the
    conversation so far, sent whole each turn) keeps the longest prefix the sequence already
    holds and takes the rest; at least its last token is fed again, whose logits choose the
    next token. A sequence whose tokens are unknown here (or differ) is cut back first."""
    held: list[int] = state.setdefault("ids", [])
    if not whole:
        held.extend(int(t) for t in x.reshape(-1))
        return x
    new = [int(t) for t in x.reshape(-1)]
    if len(held) != kv.length():  # never seen here: trust none of it
        held.clear()
    keep = 0
    limit = min(len(held), len(new) - 1)
    while keep < limit and held[keep] == new[keep]:
        keep += 1
    if keep < kv.length():
        kv.truncate(keep)
    del held[keep:]
    held.extend(new[keep:])
    return x.reshape(-1)[keep:]


class Decoder(Node):
    """A Llama decoder on the paged pool (see the module docstring)."""

    @classmethod
    def weights(cls, config: Mapping[str, Any]) -> Sequence[WeightParts]:
        return lm_parts("llama", config, tied=False)

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        self.text = prompt_format(self.config, self.name)  # its tokenizer and chat template
        self.model = build_model(self.config, self.device)  # (after it: WG879 builds nothing)
        self.eos = int(self.config.get("eos", -1))
        self.kv_tokens = int(self.config["kv_tokens"])
        self._engine: DecoderEngine | None = None
        self._runner: DecodeRunner | None = None  # the decode step's running batch

    def engine(self, kv: KvCache | None) -> DecoderEngine:
        """The `DecoderEngine` over this rank's pool for the node (built on first use)."""
        if kv is None:
            raise NodeError(f"node `{self.name}` is a kv_cache node but got no KV cache")
        if self._engine is None or self._engine.pool is not kv.pool:
            backend = kv.backend(self.model.config.num_heads)
            self._engine = DecoderEngine(self.model, kv.pool, backend)
        return self._engine

    @torch.inference_mode()
    def forward(self, batch: Sequence[Work]) -> list[dict[str, torch.Tensor]]:
        engine = self.engine(batch[0].ctx.kv)
        seqs: list[tuple[Hashable, str]] = []
        tokens: list[torch.Tensor] = []
        for w in batch:
            kv = w.ctx.kv
            assert kv is not None  # `engine` checked the node is a kv-cache node
            prompt = w.inputs.get("prompt")
            x = w.inputs["token"] if prompt is None else prompt_ids(self.text, prompt, self.name)
            if x is None or x.numel() == 0:
                raise NodeError(f"node `{self.name}`: an empty prompt has nothing to decode")
            if SESSION_OPTION in w.ctx.options:  # a session: the sequence may hold a prefix
                x = held_tokens(kv, w.ctx.state, x, prompt is not None)
            self._check_room(kv, int(x.numel()))
            seqs.append((kv.request, kv.labels[0]))
            tokens.append(x.reshape(-1).to(torch.long))
        nxt = engine.forward(seqs, tokens).argmax(-1).cpu()
        if self._runner is not None:  # sequences the decode step's runner holds grew here
            for request, _ in seqs:
                self._runner.sync(request)
        fed = [int(t[-1]) for t in tokens]
        return [self._result(w, int(t), f) for w, t, f in zip(batch, nxt, fed, strict=True)]

    def _result(self, w: Work, token: int, fed: int) -> dict[str, torch.Tensor]:
        out = {"new_token": torch.tensor([token], dtype=torch.int64)}
        if "stop" in w.ctx.writes:
            # a decode step fed the end-of-sequence token (the prefill's own choice) stops too:
            # `generate` ends there, whatever the step would choose next
            out["stop"] = torch.tensor(token == self.eos or fed == self.eos)
        return out

    def release(self, request_id: str) -> None:
        if self._runner is not None:
            self._runner.leave(request_id)

    def _full(self, w: Work, exc: BaseException) -> BaseException:
        """A row the runner could not grow: the node's own message when its sequence is full."""
        try:
            assert w.ctx.kv is not None
            self._check_room(w.ctx.kv, 1)
        except NodeError as mine:
            return mine
        return exc

    def _check_room(self, kv: KvCache, new: int) -> None:
        have = kv.length()
        if have + new > self.kv_tokens:
            raise NodeError(
                f"node `{self.name}`: request `{kv.request}` would hold {have + new} tokens, more "
                f"than `config kv_tokens = {self.kv_tokens}` (what admission promised it)"
            )

    # ------------------------------------------------------------------ the captured step
    def static_step(self, call: CapturedCall) -> StaticStep | None:
        if set(call.inputs) != {"token"} or call.kv is None:
            return None  # only the decode step (one token per request) is static
        engine = self.engine(call.kv)
        width = engine.width_for(self.kv_tokens)
        bufs = engine.decode_buffers(width)  # allocates the padding page, builds rope tables
        extra = {name: StaticPort(b.dims, DTYPE_NAMES[b.dtype], b.pad) for name, b in bufs.items()}
        del extra["tokens"]  # the `token` port
        eos = self.eos
        kv = call.kv
        pad = engine.pad_slot // engine.pool.page_size
        if self._runner is None or self._runner.pool is not engine.pool:
            self._runner = DecodeRunner(
                engine.pool,
                label=kv.labels[0],
                width=width,
                limit=self.kv_tokens,
                pad_page=pad,
            )
        runner = self._runner

        def fn(ports: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            inputs = dict(ports)
            inputs["tokens"] = ports["token"].reshape(-1)
            out = unit(inputs)
            nxt = out["next_token"]
            return {
                "new_token": nxt.reshape(-1, 1),
                "stop": (nxt == eos) | (inputs["tokens"] == eos),
            }

        def prepare_batch(
            works: Sequence[Work],
        ) -> tuple[dict[str, torch.Tensor], dict[int, BaseException]]:
            """Append each row's token slot to its sequence (`DecodeRunner.step`): the batch's
            slots, positions, lengths and page tables."""
            for w in works:  # a session's sequence: the tokens it holds, for its next turn
                token = w.inputs["token"]
                if SESSION_OPTION in w.ctx.options and token is not None:
                    w.ctx.state.setdefault("ids", []).append(int(token.reshape(-1)[0]))
            meta = runner.step(requests_of(works))
            failed = {i: self._full(works[i], exc) for i, exc in meta.failed.items()}
            return meta.tensors(width), failed

        unit = engine.unit_for(call.backend)
        return StaticStep(fn=fn, extra=extra, prepare_batch=prepare_batch)
