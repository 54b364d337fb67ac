"""GPT-2's nodes (docs/nodes.md): `Decoder`, `model.py`'s GPT2 on the runtime's paged KV pool,
and `Detokenizer`, the reply's text.

- **Weights**: seeded random ones at the sizes the ``.walk`` declares, or the checkpoint folder
  ``config checkpoint`` (read by `checkpoint.py`; its ``config.json`` must agree with the
  declared sizes, which also size the KV pool). With the folder's ``tokenizer.json`` the
  prompt's text is tokenized; without it a prompt's UTF-8 bytes are its ids.
- **`forward`**: every ready call of one walk as ONE ragged batch: a prefill call appends its
  prompt, a decode call its last token, to the request's sequence in the pool; each gets the
  greedy next token and whether it stops (it is, or follows, the end-of-sequence token ``eos``).
- **`static_step`**: the decode step as a captured unit (`model.decode_unit`). A
  `DecodeRunner` keeps the running batch's page tables and lengths and appends each row's
  token slot to its sequence (``prepare_batch``).
- **`Detokenizer`**: one chosen token → the UTF-8 bytes it adds (its ``tokenizer.json`` piece;
  without one, the byte it is). Its tokens come by stream: the prefill's, then each decode
  step's, one more than the reply (the step past ``max_new_tokens``); the reply is the ids
  transformers' ``generate`` returns, up to the end-of-sequence token (which adds no text).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import torch

from wgc_models.gpt2.checkpoint import load, read_config
from wgc_models.gpt2.model import GPT2, GPT2Config, decode_unit, last_logits
from wgc_models.layers.host_values import int_list
from wgc_models.layers.random_init import init_seeded
from wgc_models.layers.tokenizer import TextCodec
from wgc_runtime.contract.capture import CapturedCall, StaticPort, StaticStep
from wgc_runtime.contract.node import (
    CallContext,
    KvCache,
    Node,
    NodeContext,
    NodeError,
    NodeInputError,
    Work,
)
from wgc_runtime.engines.attention.base import AttentionBackend
from wgc_runtime.engines.decode_runner import DecodeRunner, requests_of


def build(config: Mapping[str, Any]) -> GPT2:
    """Random weights seeded by ``config seed``, or the checkpoint ``config checkpoint``."""
    sizes = ("vocab", "positions", "hidden", "layers", "heads")
    cfg = GPT2Config(**{k: int(config[k]) for k in sizes})
    path = str(config.get("checkpoint") or "")
    if not path:
        return init_seeded(GPT2(cfg), int(config["seed"]), gain=2.0)
    have = read_config(path)
    diff = [f"{k} {getattr(have, k)} (the .walk: {getattr(cfg, k)})" for k in sizes]
    diff = [d for d, k in zip(diff, sizes, strict=True) if getattr(have, k) != getattr(cfg, k)]
    if diff:
        raise NodeError(f"checkpoint `{path}` has {', '.join(diff)}: set the params to its sizes")
    return load(GPT2(have), path)


class Decoder(Node):
    """GPT-2 on the paged KV pool: prompt or token in, the greedy next token out."""

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        self.model = build(self.config).to(self.device).eval()
        self.eos, self.kv_tokens = int(self.config["eos"]), int(self.config["kv_tokens"])
        if self.kv_tokens > self.model.config.positions:
            raise NodeError(f"node `{self.name}`: kv_tokens is past the model's positions")
        path = Path(str(self.config.get("checkpoint") or ""), "tokenizer.json")
        self.codec = TextCodec.from_file(path) if path.is_file() else None
        self._backend: AttentionBackend | None = None
        self._runner: DecodeRunner | None = None  # the captured decode step's running batch

    def backend(self, kv: KvCache) -> AttentionBackend:
        """The placement's attention backend over this rank's pool (made once)."""
        if self._backend is None:
            self._backend = backend = cast(AttentionBackend, kv.backend(self.model.config.heads))
            return backend
        return self._backend

    def prompt_ids(self, prompt: torch.Tensor) -> torch.Tensor:
        if self.codec is None:
            return prompt
        text = bytes(int_list(prompt)).decode("utf-8", errors="replace")
        return torch.tensor(self.codec.encode(text), dtype=torch.long)

    def forward(self, batch: Sequence[Work]) -> list[Any]:
        first = batch[0].ctx.kv
        if first is None:
            raise NodeError(f"node `{self.name}` is a kv_cache node but got no KV cache")
        backend = self.backend(first)
        results: list[dict[str, torch.Tensor] | BaseException | None] = [None] * len(batch)
        rows: list[int] = []
        seqs: list[tuple[Hashable, str]] = []
        tokens: list[torch.Tensor] = []
        for i, w in enumerate(batch):
            kv = w.ctx.kv
            assert kv is not None  # every call of a kv_cache node has one
            prompt = w.inputs.get("prompt")
            x = w.inputs["token"] if prompt is None else self.prompt_ids(prompt)
            n = 0 if x is None else x.numel()
            if x is None or n == 0 or kv.length() + n > self.kv_tokens:
                results[i] = NodeInputError(
                    f"node `{self.name}`: {n} new tokens after {kv.length()}: none, or past "
                    f"kv_tokens = {self.kv_tokens}"
                )
                continue
            rows.append(i)
            seqs.append((kv.request, kv.labels[0]))
            tokens.append(x.reshape(-1).long())
        if not rows:
            return results
        nxt = int_list(last_logits(self.model, first.pool, backend, seqs, tokens).argmax(-1))
        for i, token, x, (request, _) in zip(rows, nxt, tokens, seqs, strict=True):
            if self._runner is not None:  # the captured step's copy of this sequence grew
                self._runner.sync(request)
            results[i] = self.result(token, int(x[-1]))
        return results

    def result(self, token: int, fed: int) -> dict[str, torch.Tensor]:
        stop = token == self.eos or fed == self.eos
        return {"new_token": torch.tensor([token]), "stop": torch.tensor(stop)}

    def release(self, request_id: str) -> None:
        if self._runner is not None:
            self._runner.leave(request_id)

    def static_step(self, call: CapturedCall) -> StaticStep | None:
        if set(call.inputs) != {"token"} or call.kv is None or call.backend == "inductor":
            return None  # only the decode step is static; this model offers no compiled form
        pad, eos = call.kv, self.eos  # `pad`: the runtime's padding sequence in our pool
        pool, label, backend = pad.pool, pad.labels[0], self.backend(pad)
        width = pool.pages_for(self.kv_tokens)
        slot = int(pool.append(pad.request, label, 1)[0])  # where padding rows write
        page = slot // pool.page_size
        runner = self._runner = DecodeRunner(
            pool, label=label, width=width, limit=self.kv_tokens, pad_page=page
        )
        extra = {
            "positions": StaticPort((), "i64", 0),
            "slots": StaticPort((), "i64", slot),
            "kv_lens": StaticPort((), "i32", 1),
            "block_tables": StaticPort((width,), "i32", page),
        }

        def fn(bufs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            tokens = bufs["token"].reshape(-1)
            nxt = decode_unit(self.model, pool, backend, {**bufs, "tokens": tokens})
            return {"new_token": nxt.reshape(-1, 1), "stop": (nxt == eos) | (tokens == eos)}

        def prepare_batch(
            works: Sequence[Work],
        ) -> tuple[dict[str, torch.Tensor], dict[int, BaseException]]:
            meta = runner.step(requests_of(works))
            return meta.tensors(width), meta.failed

        return StaticStep(fn=fn, extra=extra, prepare_batch=prepare_batch)


class Detokenizer(Node):
    """One chosen token in, the bytes it adds to the reply's text out."""

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        path = Path(str(self.config.get("checkpoint") or ""), "tokenizer.json")
        self.codec = TextCodec.from_file(path) if path.is_file() else None
        self.eos, self.most = int(self.config["eos"]), int(self.config["max_new_tokens"])

    def forward_one(
        self, inputs: dict[str, torch.Tensor | None], ctx: CallContext
    ) -> dict[str, torch.Tensor]:
        x = inputs["token"]
        assert x is not None  # every token of the stream is one
        token = int(x.reshape(-1)[0])
        taken = ctx.state.get("taken", 0)  # the reply's tokens so far; -1 after its end
        if taken < 0 or taken >= self.most or token == self.eos:
            ctx.state["taken"] = -1
            return {"text": torch.zeros(0, dtype=torch.uint8)}
        ctx.state["taken"] = taken + 1
        if self.codec is None and not 0 <= token < 256:
            raise NodeError(f"node `{self.name}`: token {token} is no byte, and no tokenizer.json")
        piece = bytes([token]) if self.codec is None else self.codec.piece(token)
        return {"text": torch.tensor(list(piece), dtype=torch.uint8)}
