"""The speculative-decoding example's nodes (`wgc_models/llama/speculative.walk`): a `Draft` model
proposes ``k`` tokens, the `Target` (the Llama example's decoder) checks them in one step and
accepts the longest prefix it would have chosen itself, plus one token of its own; both rewind
their KV sequence past what was rejected (`KvCache.truncate`). The output is token for token
plain greedy decoding of the target, whatever the draft proposes: the draft only decides how
many target steps it takes.

- **The draft is the target's first `draft_layers` layers and its head** (layer-skip
  self-speculation): the target's weights (the same seed or checkpoint), cut after a layer, so
  it agrees with the target often enough to matter even with random weights. Its sequence lives
  in its own pool (its own `kv_cache` node, sized by ``config layers = draft_layers``), so it
  may run on another rank than the target.
- **What each side holds.** Both keep, per request (``ctx.state``), the committed tokens
  (``seq``: the prompt, then every token the reply has taken) and the tokens their KV sequence
  holds (``ids``). A call first adds the tokens accepted since the last one to ``seq``, cuts its
  sequence back to the longest prefix of ``ids`` that ``seq`` shares (the rejected guesses go),
  then feeds the rest: no token is fed twice, none is missed.
- **`Draft`** (``token``: the tokens accepted last step, the prefill's token first) feeds the
  new tokens and then its own guesses one at a time: ``proposal``, ``k`` tokens.
- **`Target`** feeds the last committed token and the ``k`` guesses in one ragged step and
  reads the greedy choice after each: guess ``i`` is accepted while it equals the choice after
  guess ``i - 1``; ``accepted`` is the accepted guesses and the choice after the last of them
  (1 to k + 1 tokens: ``i64[<=k + 1]``). It keeps the plain walk's ends: the reply holds
  ``max_new_tokens`` tokens at most and stops before a chosen end-of-sequence token (or at the
  prefill's own, which the reply keeps), so ``accepted`` is cut there and ``stop`` says so.
  Counters over every request (`Target.counts`): verify steps, guesses proposed and accepted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from wgc_models._shared.weights import lm_config
from wgc_models.layers.decode_engine import DecoderEngine
from wgc_models.layers.decoder import LlamaDecoder
from wgc_models.llama.nodes import Decoder, build_model
from wgc_models.llama.text import prompt_format, prompt_ids
from wgc_runtime.contract.capture import CapturedCall, StaticStep
from wgc_runtime.contract.node import KvCache, Node, NodeContext, NodeError, Work


def draft_model(config: Mapping[str, Any], device: str | torch.device) -> LlamaDecoder:
    """The target's first ``config layers`` layers and its embeddings, norm and head: the target
    (``config target_layers``, the same seed or checkpoint) built and cut."""
    layers, full_layers = int(config["layers"]), int(config["target_layers"])
    if not 1 <= layers <= full_layers:
        raise NodeError(f"the draft's {layers} layers must be 1 to the target's {full_layers}")
    full = build_model({**config, "layers": full_layers}, device)
    model = LlamaDecoder(lm_config(config, tied=False)).to(device)
    weights = full.state_dict()
    model.load_state_dict({k: weights[k] for k in model.state_dict()})
    return model.eval()


def rewind(kv: KvCache, state: dict[str, Any], new: list[int]) -> list[int]:
    """Add ``new`` to the committed tokens and cut the sequence back to what it shares with them
    (at least the last committed token is fed again, whose logits choose the next); returns the
    tokens to feed. ``state["ids"]`` then holds the committed tokens."""
    seq: list[int] = state.setdefault("seq", [])
    ids: list[int] = state.setdefault("ids", [])
    seq.extend(new)
    keep, limit = 0, min(len(ids), len(seq) - 1)
    while keep < limit and ids[keep] == seq[keep]:
        keep += 1
    if keep < kv.length():
        kv.truncate(keep)  # the rejected guesses (and their pages) go
    state["ids"] = list(seq)
    return seq[keep:]


def _room(node: str, kv: KvCache, new: int, limit: int) -> None:
    if kv.length() + new > limit:
        raise NodeError(
            f"node `{node}`: request `{kv.request}` would hold {kv.length() + new} tokens, more "
            f"than `config kv_tokens = {limit}` (prompt, new tokens and the draft's guesses)"
        )


def _port(w: Work, port: str) -> torch.Tensor:
    value = w.inputs.get(port)
    if value is None:
        raise NodeError(f"a speculative node's call got no `{port}` value")
    return value


def _ids(w: Work, port: str) -> list[int]:
    return [int(t) for t in _port(w, port).reshape(-1)]


def _kv(w: Work) -> KvCache:
    kv = w.ctx.kv
    if kv is None:
        raise NodeError("a speculative node is a kv_cache node but got no KV cache")
    return kv


class Draft(Node):
    """Proposes ``config k`` tokens per call (see the module docstring)."""

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        self.text = prompt_format(self.config, self.name)  # before the weights (WG879)
        self.model = draft_model(self.config, self.device)
        self.k = int(self.config["k"])
        self.kv_tokens = int(self.config["kv_tokens"])
        self._engine: DecoderEngine | None = None

    def engine(self, kv: KvCache) -> DecoderEngine:
        if self._engine is None or self._engine.pool is not kv.pool:
            backend = kv.backend(self.model.config.num_heads)
            self._engine = DecoderEngine(self.model, kv.pool, backend)
        return self._engine

    @torch.inference_mode()
    def forward(self, batch: Sequence[Work]) -> list[dict[str, torch.Tensor]]:
        engine = self.engine(_kv(batch[0]))
        seqs, feeds = [], []
        for w in batch:
            kv = _kv(w)
            prompt = w.inputs.get("prompt")
            if prompt is not None:  # the prefill: the prompt is the sequence
                w.ctx.state.clear()
                new = [int(t) for t in prompt_ids(self.text, prompt, self.name).reshape(-1)]
            else:
                new = _ids(w, "token")
            feed = rewind(kv, w.ctx.state, new)
            _room(self.name, kv, len(feed) + self.k, self.kv_tokens)
            seqs.append((kv.request, kv.labels[0]))
            feeds.append(torch.tensor(feed, dtype=torch.long))
        guess = engine.forward(seqs, feeds).argmax(-1).cpu()
        if batch[0].inputs.get("prompt") is not None:
            return [{} for _ in batch]  # the prefill binds nothing: its sequence is the point
        out = [guess]
        for _ in range(self.k - 1):  # each guess fed back, one token per sequence
            out.append(engine.decode(seqs, out[-1]).argmax(-1).cpu())
        for i, w in enumerate(batch):
            w.ctx.state["ids"].extend(int(g[i]) for g in out[:-1])
        proposals = torch.stack(out, dim=1)
        return [{"proposal": p.clone()} for p in proposals]


class Target(Decoder):
    """The Llama example's decoder with a verify step (see the module docstring)."""

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        self.k = int(self.config["k"])
        self.max_new = int(self.config["max_new_tokens"])
        self.counts = {"steps": 0, "proposed": 0, "accepted": 0}  # every request's, summed

    @torch.inference_mode()
    def forward(self, batch: Sequence[Work]) -> list[dict[str, torch.Tensor]]:
        if batch[0].inputs.get("prompt") is not None:  # the prefill: the decoder's own
            out = super().forward(batch)
            for w in batch:
                prompt = prompt_ids(self.text, _port(w, "prompt"), self.name)
                w.ctx.state.clear()
                w.ctx.state["seq"] = [int(t) for t in prompt.reshape(-1)]
                w.ctx.state["ids"] = list(w.ctx.state["seq"])
            return out
        results: list[dict[str, torch.Tensor] | None] = [None] * len(batch)
        rows, seqs, feeds, guesses = [], [], [], []
        for i, w in enumerate(batch):
            st = w.ctx.state
            new = _ids(w, "token")
            st["emitted"] = st.get("emitted", 0) + len(new)
            if st.get("done") or st["emitted"] >= self.max_new or new[-1] == self.eos:
                results[i] = self._out(w, new[-1:], stop=True)  # the reply is complete
                continue
            kv = _kv(w)
            guess = _ids(w, "proposal")
            feed = rewind(kv, st, new)
            _room(self.name, kv, len(feed) + len(guess), self.kv_tokens)
            rows.append(i)
            seqs.append((kv.request, kv.labels[0]))
            feeds.append(torch.tensor(feed + guess, dtype=torch.long))
            guesses.append(guess)
        if rows:
            logits = self.engine(_kv(batch[rows[0]])).forward(seqs, feeds, all_logits=True)
            for i, lg, guess in zip(rows, logits, guesses, strict=True):
                results[i] = self._verify(batch[i], lg[-len(guess) - 1 :].argmax(-1), guess)
        return [r for r in results if r is not None]

    def _verify(self, w: Work, choice: torch.Tensor, guess: list[int]) -> dict[str, torch.Tensor]:
        """``choice[i]``: the target's greedy token after guess ``i - 1`` (``choice[0]``: after
        the last committed token). Accept the guesses it agrees with, then its own choice."""
        chosen = [int(t) for t in choice.cpu()]
        n = 0
        while n < len(guess) and guess[n] == chosen[n]:
            n += 1
        st = w.ctx.state
        kv = _kv(w)
        kv.truncate(len(st["seq"]) + n)  # keep the accepted guesses, drop the rejected ones
        st["ids"] = st["seq"] + guess[:n]
        self.counts["steps"] += 1
        self.counts["proposed"] += len(guess)
        self.counts["accepted"] += n
        out = chosen[: n + 1]
        if self.eos in out:  # the plain walk stops before a chosen end-of-sequence token
            out = out[: out.index(self.eos)]
            st["done"] = True
        out = out[: self.max_new - st["emitted"]]
        return self._out(w, out, stop=not out)

    def _out(self, w: Work, tokens: list[int], stop: bool) -> dict[str, torch.Tensor]:
        out = {"accepted": torch.tensor(tokens, dtype=torch.int64)}
        if "stop" in w.ctx.writes:
            out["stop"] = torch.tensor(stop)
        return out

    def static_step(self, call: CapturedCall) -> StaticStep | None:
        del call
        return None  # the verify step's `accepted` is bounded: it runs `forward`
