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
- **Captured.** In the decode loop both calls run as captured steps when the plan captures
  them (`draft_step`, `verify`): their bounded ports padded to ``k + 1`` with their lengths
  and cut back by the runtime, the model steps the engine's static decode unit ``k + 1`` times.
  (A batch they do not admit, or a plan without capture buckets, runs `forward`.)
- **Counters** over every request: `Target.counts` (verify steps, guesses proposed and
  accepted, the steps run captured), `Draft.counts` (decode calls, those run captured).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import torch

from wgc_models.llama.draft_step import draft_step
from wgc_models.llama.engine import DecoderEngine
from wgc_models.llama.model import LlamaDecoder, lm_config
from wgc_models.llama.nodes import Decoder, build_model
from wgc_models.llama.text import prompt_format, prompt_ids
from wgc_models.llama.verify import agreed, verify_step
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


def room(node: str, kv: KvCache, new: int, limit: int) -> None:
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
        # decode calls (every request's), and those run as the captured step (`draft_step`)
        self.counts = {"calls": 0, "captured": 0}

    def engine(self, kv: KvCache) -> DecoderEngine:
        if self._engine is None or self._engine.pool is not kv.pool:
            backend = kv.backend(self.model.config.num_heads)
            self._engine = DecoderEngine(self.model, kv.pool, backend)
        return self._engine

    @torch.inference_mode()
    def forward(self, batch: Sequence[Work]) -> list[dict[str, torch.Tensor]]:
        engine = self.engine(_kv(batch[0]))
        seqs: list[tuple[Hashable, str]] = []
        feeds: list[torch.Tensor] = []
        for w in batch:
            kv = _kv(w)
            prompt = w.inputs.get("prompt")
            if prompt is not None:  # the prefill: the prompt is the sequence
                w.ctx.state.clear()
                new = [int(t) for t in prompt_ids(self.text, prompt, self.name).reshape(-1)]
            else:
                new = _ids(w, "token")
            feed = rewind(kv, w.ctx.state, new)
            room(self.name, kv, len(feed) + self.k, self.kv_tokens)
            seqs.append((kv.request, kv.labels[0]))
            feeds.append(torch.tensor(feed, dtype=torch.long))
        guess = engine.forward(seqs, feeds).argmax(-1).cpu()
        if batch[0].inputs.get("prompt") is not None:
            return [{} for _ in batch]  # the prefill binds nothing: its sequence is the point
        self.counts["calls"] += len(batch)
        out = [guess]
        for _ in range(self.k - 1):  # each guess fed back, one token per sequence
            out.append(engine.decode(seqs, out[-1]).argmax(-1).cpu())
        for i, w in enumerate(batch):
            w.ctx.state["ids"].extend(int(g[i]) for g in out[:-1])
        proposals = torch.stack(out, dim=1)
        return [{"proposal": p.clone()} for p in proposals]

    def static_step(self, call: CapturedCall) -> StaticStep | None:
        return draft_step(self, call)  # the decode call: `token` is bounded, padded to k + 1


class Target(Decoder):
    """The Llama example's decoder with a verify step (see the module docstring)."""

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        self.k = int(self.config["k"])
        self.max_new = int(self.config["max_new_tokens"])
        # every request's, summed; ``captured``: the steps run as the captured verify step
        self.counts = {"steps": 0, "proposed": 0, "accepted": 0, "captured": 0}

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
        rows: list[int] = []
        seqs: list[tuple[Hashable, str]] = []
        feeds: list[torch.Tensor] = []
        guesses: list[list[int]] = []
        for i, w in enumerate(batch):
            step = self.begin(w)
            if step is None:  # the reply is complete
                results[i] = self._out(w, _ids(w, "token")[-1:], stop=True)
                continue
            rows.append(i)
            seqs.append(step[0])
            feeds.append(step[1])
            guesses.append(_ids(w, "proposal"))
        if rows:
            logits = self.engine(_kv(batch[rows[0]])).forward(seqs, feeds, all_logits=True)
            for i, lg, guess in zip(rows, logits, guesses, strict=True):
                results[i] = self._verify(batch[i], lg[-len(guess) - 1 :].argmax(-1), guess)
        return [r for r in results if r is not None]

    def begin(self, w: Work) -> tuple[tuple[Any, str], torch.Tensor] | None:
        """A verify call's host half for one request: None when the reply is complete, else
        its KV sequence and the tokens to feed (the committed tail, then the ``k`` guesses);
        the accepted tokens join the committed ones and the rejected guesses leave the KV."""
        st = w.ctx.state
        st["emitted"] = st.get("emitted", 0) + len(_ids(w, "token"))
        if self.complete(w, counted=True):
            return None
        new = _ids(w, "token")
        kv = _kv(w)
        guess = _ids(w, "proposal")
        feed = rewind(kv, st, new)
        room(self.name, kv, len(feed) + len(guess), self.kv_tokens)
        return (kv.request, kv.labels[0]), torch.tensor(feed + guess, dtype=torch.long)

    def complete(self, w: Work, counted: bool = False) -> bool:
        """Whether the reply is complete at this call (its tokens ``counted`` in ``emitted``
        already, or not yet): an end chosen, ``max_new_tokens`` taken, or the prefill's eos."""
        st, new = w.ctx.state, _ids(w, "token")
        emitted = st.get("emitted", 0) + (0 if counted else len(new))
        return bool(st.get("done")) or emitted >= self.max_new or new[-1] == self.eos

    def count(self, proposed: int, accepted: int, captured: bool = False) -> None:
        """One verify step's guesses into `counts`."""
        self.counts["steps"] += 1
        self.counts["captured"] += captured
        self.counts["proposed"] += proposed
        self.counts["accepted"] += accepted

    def _verify(self, w: Work, choice: torch.Tensor, guess: list[int]) -> dict[str, torch.Tensor]:
        """``choice[i]``: the target's greedy token after guess ``i - 1`` (``choice[0]``: after
        the last committed token). Accept the guesses it agrees with, then its own choice."""
        chosen = [int(t) for t in choice.cpu()]
        n = agreed(chosen, guess)
        st = w.ctx.state
        kv = _kv(w)
        kv.truncate(len(st["seq"]) + n)  # keep the accepted guesses, drop the rejected ones
        st["ids"] = st["seq"] + guess[:n]
        self.count(len(guess), n)
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
        if set(call.inputs) != {"token", "proposal"}:
            return None  # the prefill runs `forward`
        return verify_step(self, call)  # `accepted` is bounded: padded to k + 1, cut back
