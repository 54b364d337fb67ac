"""Orpheus's nodes: the Llama LM that speaks in SNAC codec tokens, and the SNAC window vocoder.

Written against the node API (`wgc_runtime.contract.node`, `wgc_runtime.contract.capture`)
over wgc's components (`wgc_models.layers`: `LlamaDecoder` / `DecoderEngine`, `orpheus`,
`snac`, `sampling`):

- **`LLM`**: a `LlamaDecoder` over the runtime's paged pool (``ctx.kv.pool``). `forward` runs
  every ready call of a walk as ONE ragged batch: a prefill call turns its text segment into
  Orpheus's prompt (``"{voice}: {text}"`` between its special tokens, `OrpheusTokens.prompt`,
  tokenized by the checkpoint's tokenizer or the shipped tiny BPE); a decode call appends its
  previous token. Each gets its next token, chosen as HF ``generate`` would (greedy, or the
  request's ``temperature`` / ``top_p`` / ``repetition_penalty``, seeded per request), among
  the audio tokens of its position only when ``config audio_only`` (`audio_mask`), and
  ``stop`` at ``end_of_speech`` or after ``option max_tokens`` tokens. `static_step` is the
  decode step as a captured unit (`DecoderEngine.decode_unit`, masked and greedy in the
  graph); its running batch is the node's `DecodeRunner` (page tables as one tensor, lengths,
  and per request its audio position and token budget: a step's stops are array operations over
  the batch); rows of requests that sample are re-chosen from its
  logits in ``finish``.
- **`SnacDecoder`** (in `wgc_models.orpheus.vocoder_node`, imported here for the ``.walk``): one
  ``sliding(28, 7)`` window of LM tokens → the 2048 samples of its
  second frame (`OrpheusVocoder.window`), or no samples for a window with a token that is not
  an audio code (as the reference's range check). The ready windows of a batch, from any
  requests, decode as one batch (the decoder is batch-invariant), each with SNAC's noise drawn
  from its own generator (`wgc_models._shared.speech`), so its audio is the same whatever
  else ran in its batch. Under ``batching.backend: inductor`` on the CPU the decode is one compiled
  program (`OrpheusVocoder.compile`, built when the node starts). Window ``k``'s noise depends
  on the request's seed and ``k`` only, so the node draws it ahead (`Node.expect` notes a
  request when its first token reaches the rank, `Node.idle` draws a few windows' noise at a
  time while the rank waits for the LM: `NoiseAhead`, at most the windows ``option
  max_tokens`` allows): the same numbers, off the decodes' path.

Weights (`wgc_models.orpheus.checkpoint`): a Hugging Face Llama checkpoint folder (``config
checkpoint``; its ``config.json`` must agree with the ``.walk`` sizes, which size the KV pool)
and a SNAC folder (``config checkpoint`` of the vocoder: the package's ``config.json`` and a
safetensors state dict), or seeded random weights at the declared sizes.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from wgc_models._shared.batched import cast_weights, weights_dtype
from wgc_models._shared.speech import (
    TOKENS,
    RequestGenerator,
    forward_alone,
    inference,
    normal_tensors,
    plain,
    prompt_text,
    sampling,
    speech_seed,
    text_codec,
)
from wgc_models.layers.sampling import Sampling, choose
from wgc_models.llama.engine import DecoderEngine
from wgc_models.llama.model import lm_parts
from wgc_models.orpheus.checkpoint import build_lm
from wgc_models.orpheus.model import audio_mask, orpheus_tokens, prompt_ids
from wgc_models.orpheus.vocoder_node import SnacDecoder as SnacDecoder  # named by the .walk
from wgc_runtime.contract.capture import CapturedCall, StaticPort, StaticStep
from wgc_runtime.contract.node import (
    DTYPE_NAMES,
    CallContext,
    KvCache,
    Node,
    NodeContext,
    NodeError,
    Work,
)
from wgc_runtime.contract.weights import WeightParts
from wgc_runtime.engines.decode_runner import DecodeRunner, requests_of


class LLM(Node):
    """Orpheus's LM on the paged pool (see the module docstring)."""

    @classmethod
    def weights(cls, config: Mapping[str, Any]) -> Sequence[WeightParts]:
        return lm_parts("orpheus", config, tied=True)

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        self.tokens = orpheus_tokens(self.config)
        dtype = weights_dtype(self.config, self.name)
        self.model = cast_weights(build_lm(self.config, self.device), dtype)
        self.text = text_codec(str(self.config.get("checkpoint") or ""), "orpheus")
        self.audio_only = bool(self.config.get("audio_only", True))
        self.kv_tokens = int(self.config["kv_tokens"])
        self.decode_widths = int(self.config.get("decode_widths", 1))
        if self.decode_widths < 1:
            raise NodeError(
                f"node `{self.name}`: `config decode_widths = {self.decode_widths}`: the "
                "compiled decode step needs at least one page-table width"
            )
        self._engine: DecoderEngine | None = None
        self._params: dict[str, Sampling] = {}  # each running request's sampling options
        self._runner: DecodeRunner | None = None  # the decode step's running batch
        self._sampling: set[Hashable] = set()  # its requests that do not decode plainly

    def engine(self, kv: KvCache | None) -> DecoderEngine:
        if kv is None:
            raise NodeError(f"node `{self.name}` is a kv_cache node but got no KV cache")
        if self._engine is None or self._engine.pool is not kv.pool:
            backend = kv.backend(self.model.config.num_heads)
            self._engine = DecoderEngine(self.model, kv.pool, backend)
        return self._engine

    def forward_one(
        self, inputs: dict[str, torch.Tensor | None], ctx: CallContext
    ) -> dict[str, torch.Tensor]:
        return forward_alone(self, inputs, ctx)

    # ------------------------------------------------------------------ the plain path
    @inference
    def forward(self, batch: Sequence[Work]) -> list[Any]:
        engine = self.engine(batch[0].ctx.kv)
        results: list[Any] = [None] * len(batch)
        rows: list[int] = []
        seqs: list[tuple[Hashable, str]] = []
        feeds: list[torch.Tensor] = []
        for i, w in enumerate(batch):
            self._spoken_in(w)
            try:
                feed = self._feed(w)
            except NodeError as exc:  # fails this request only
                results[i] = exc
                continue
            kv = w.ctx.kv
            assert kv is not None
            rows.append(i)
            seqs.append((kv.request, kv.labels[0]))
            feeds.append(feed)
        if not rows:
            return results
        logits = engine.forward(seqs, feeds)
        if self._runner is not None:  # sequences the decode step's runner holds grew here
            for request, _ in seqs:
                self._runner.sync(request)
        for j, i in enumerate(rows):
            w = batch[i]
            masked = self._mask(logits[j : j + 1], w)
            token = self._choose(w, lambda m=masked: m, None)
            results[i] = self._result(w, token)
            self._spoken_out(w)
        return results

    def _feed(self, w: Work) -> torch.Tensor:
        """A prefill call's prompt (its history starts), or a decode call's token."""
        kv = w.ctx.kv
        assert kv is not None
        st = w.ctx.state
        text = w.inputs.get("text_inputs")
        if "text_inputs" in w.inputs:
            voice = str(w.ctx.options.get("voice", "tara"))
            ids = prompt_ids(self.text, self.tokens, voice, prompt_text(text, self.name))
            feed = torch.tensor(ids, dtype=torch.long)
            # the prompt; the chosen tokens join it where a repetition penalty reads them
            st["history"], st["spoken"] = feed, 0
        else:
            token = w.inputs.get("token")
            if token is None or "history" not in st:
                raise NodeError(f"node `{self.name}`: a decode step before the prompt")
            feed = token.reshape(-1).to(torch.long)
        self._check_room(kv, int(feed.numel()))
        return feed

    def _mask(self, logits: torch.Tensor, w: Work) -> torch.Tensor:
        if not self.audio_only:
            return logits
        return audio_mask(logits, self.tokens, [int(w.ctx.state["spoken"])])

    def _choose(self, w: Work, masked: Callable[[], torch.Tensor], greedy: int | None) -> int:
        """The request's next token from its (masked) logits ``[1, vocab]`` (``masked()``, read
        only when the request samples or penalises); ``greedy``: the captured step's argmax,
        kept when the request decodes plainly."""
        st = w.ctx.state
        params = self._params_of(w)
        if greedy is not None and plain(params):
            token = greedy
        elif params.do_sample:
            with RequestGenerator(st, "lm_generator", speech_seed(w.ctx) + TOKENS) as g:
                token = int(choose(masked(), params, [st["history"]], g)[0])
        else:
            token = int(choose(masked(), params, [st["history"]])[0])
        if params.repetition_penalty != 1.0:  # the one reader of the history
            st["history"] = torch.cat((st["history"], torch.tensor([token])))
        st["spoken"] = int(st["spoken"]) + 1
        return token

    def _params_of(self, w: Work) -> Sampling:
        params = self._params.get(w.ctx.request_id)
        if params is None:  # read once a request: its options do not change
            params = self._params[w.ctx.request_id] = sampling(w.ctx.options)
        return params

    def _result(self, w: Work, token: int) -> dict[str, torch.Tensor]:
        out = {"new_token": torch.tensor([token], dtype=torch.int64)}
        if "stop" in w.ctx.writes:
            out["stop"] = torch.tensor(self._stops(w, token))
        return out

    def _stops(self, w: Work, token: int) -> bool:
        limit = int(w.ctx.options.get("max_tokens", 0) or 0)
        spoken = int(w.ctx.state["spoken"])
        return token == self.tokens.end_of_speech or (limit > 0 and spoken >= limit)

    def release(self, request_id: str) -> None:
        self._params.pop(request_id, None)
        self._sampling.discard(request_id)
        if self._runner is not None:
            self._runner.leave(request_id)

    def export_state(self, request_id: str, kept: dict[str, Any]) -> dict[str, torch.Tensor]:
        r = self._runner
        if r is not None and request_id in r:  # the runner's audio position is the current one
            kept["spoken"] = int(r.get(request_id, "spoken"))
        self.release(request_id)  # the request moves on to another rank
        return super().export_state(request_id, normal_tensors(kept))

    def _check_room(self, kv: KvCache, new: int) -> None:
        have = kv.length()
        if have + new > self.kv_tokens:
            raise NodeError(
                f"node `{self.name}`: request `{kv.request}` would hold {have + new} tokens, more "
                f"than `config kv_tokens = {self.kv_tokens}` (what admission promised it): ask "
                "for fewer `max_tokens` or a shorter text"
            )

    # ------------------------------------------------------------------ the captured step
    def static_step(self, call: CapturedCall) -> list[StaticStep] | None:
        if set(call.inputs) != {"token"} or call.kv is None:
            return None  # only the decode step (one token per request) is static
        engine = self.engine(call.kv)
        # compiled on the CPU the step reads its whole static page table: narrower forms too
        forms = self.decode_widths if call.backend == "inductor" else 1
        widths = engine.width_forms(self.kv_tokens, forms)
        return [self._decode_form(call, engine, w, w == widths[-1]) for w in widths]

    def _decode_runner(self, engine: DecoderEngine, call: CapturedCall) -> DecodeRunner:
        """The node's one running batch (`DecodeRunner`), shared by its step's forms."""
        if self._runner is None or self._runner.pool is not engine.pool:
            kv = call.kv
            assert kv is not None
            width = engine.width_for(self.kv_tokens)
            pad = engine.pad_slot // engine.pool.page_size
            self._runner = DecodeRunner(
                engine.pool,
                label=kv.labels[0],
                width=width,
                limit=self.kv_tokens,
                pad_page=pad,
                columns={"spoken": np.int64, "budget": np.int64},
            )
        return self._runner

    def _join_row(self, runner: DecodeRunner, w: Work) -> None:
        """A request's row joined the running batch: its audio position and token budget go
        to the runner's columns, and whether it samples to `_sampling` (the runner's ``spoken``
        is the current one from now on: `_spoken_in`, `_spoken_out`)."""
        kv = w.ctx.kv
        assert kv is not None
        spoken = int(w.ctx.state["spoken"])
        limit = int(w.ctx.options.get("max_tokens", 0) or 0)
        runner.set(kv.request, "spoken", spoken)
        runner.set(kv.request, "budget", limit if limit > 0 else np.iinfo(np.int64).max)
        if not plain(self._params_of(w)):
            self._sampling.add(kv.request)

    def _spoken_in(self, w: Work) -> None:
        """Before a plain call of a request the decode runner holds: its audio position."""
        r = self._runner
        if r is not None and w.ctx.kv is not None and w.ctx.kv.request in r:
            w.ctx.state["spoken"] = int(r.get(w.ctx.kv.request, "spoken"))

    def _spoken_out(self, w: Work) -> None:
        r = self._runner
        if r is not None and w.ctx.kv is not None and w.ctx.kv.request in r:
            r.set(w.ctx.kv.request, "spoken", int(w.ctx.state["spoken"]))

    def _full(self, w: Work, exc: BaseException) -> BaseException:
        """A row the runner could not grow: the node's own message when its sequence is full."""
        try:
            assert w.ctx.kv is not None
            self._check_room(w.ctx.kv, 1)
        except NodeError as mine:
            return mine
        return exc

    def _decode_form(
        self, call: CapturedCall, engine: DecoderEngine, width: int, widest: bool
    ) -> StaticStep:
        """The decode step with page tables of ``width`` pages (the ``widest`` admits every
        batch; a narrower one, batches whose rows all fit it after this step's token)."""
        bufs = engine.decode_buffers(width)
        extra = {name: StaticPort(b.dims, DTYPE_NAMES[b.dtype], b.pad) for name, b in bufs.items()}
        del extra["tokens"]  # the `token` port
        extra["spoken"] = StaticPort((), "i64", 0)  # each row's audio position (the mask)
        unit = engine.unit_for(call.backend)
        tokens, audio_only = self.tokens, self.audio_only
        stash: dict[int, torch.Tensor] = {}  # the step's logits, per bucket
        room = width * engine.pool.page_size
        drops = tokens.drops(engine.model.config.vocab_size, engine.device)

        def fn(ports: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            inputs = dict(ports)
            inputs["tokens"] = ports["token"].reshape(-1)
            logits = unit(inputs)["logits"]
            logits = tokens.masked(logits, drops, ports["spoken"]) if audio_only else logits
            stash[logits.shape[0]] = logits  # a graph's output buffer: valid after replays
            nxt = logits.argmax(-1)
            return {"new_token": nxt.reshape(-1, 1), "stop": nxt == tokens.end_of_speech}

        runner = self._decode_runner(engine, call)
        asked: list[Any] = [None, []]  # the works `prepare_batch` last saw, and their requests

        def admits(works: Sequence[Work]) -> bool:
            """Every row's sequence, with this step's token, fits ``width`` pages."""
            return runner.longest(requests_of(works)) < room

        def prepare_batch(
            works: Sequence[Work],
        ) -> tuple[dict[str, torch.Tensor], dict[int, BaseException]]:
            """Append each row's token slot to its sequence (`DecodeRunner.step`): the batch's
            slots, positions, lengths, page tables, and audio positions."""
            requests = requests_of(works)
            asked[:] = works, requests
            meta = runner.step(requests)
            for i in runner.fresh(requests):  # rows that joined: their columns, once
                self._join_row(runner, works[i])
            extra = meta.tensors(width)
            extra["spoken"] = torch.as_tensor(runner.columns["spoken"][meta.row_ids])
            failed = {i: self._full(works[i], exc) for i, exc in meta.failed.items()}
            return extra, failed

        def finish(works: Sequence[Work], outputs: Mapping[str, torch.Tensor]) -> None:
            """The batch's audio positions and stops as array operations over its rows (the
            runner's columns: the step's own stop at ``end_of_speech`` stands, and a row that
            reached its ``max_tokens`` stops); a request that samples or penalises repetition
            is re-chosen alone from the step's logits."""
            # the batch `prepare_batch` saw (every row ran): its requests, not read again
            requests = asked[1] if works is asked[0] else requests_of(works)
            asked[:] = None, []
            rows = runner.rows_of(requests)
            cols = runner.columns
            spoken = cols["spoken"][rows]  # before this step's token (a copy)
            sampling = self._sampling
            sampled = [i for i, r in enumerate(requests) if r in sampling] if sampling else ()
            if sampled:
                with torch.inference_mode():  # a compiled step's outputs are inference tensors
                    resample(works, outputs, sampled, spoken)
            spoken += 1
            cols["spoken"][rows] = spoken
            budget = spoken >= cols["budget"][rows]
            if budget.any():  # `max_tokens` reached: those rows stop
                with torch.inference_mode():
                    outputs["stop"].logical_or_(torch.as_tensor(budget))

        def resample(
            works: Sequence[Work],
            outputs: Mapping[str, torch.Tensor],
            sampled: Sequence[int],
            spoken: npt.NDArray[Any],
        ) -> None:
            """The rows of requests that sample, chosen from the step's logits."""
            logits = stash[min(b for b in stash if b >= len(works))]
            new, stop = outputs["new_token"], outputs["stop"]
            for i in sampled:
                w = works[i]
                w.ctx.state["spoken"] = int(spoken[i])  # the runner's is the current one
                greedy = int(new[i, 0])

                def row(i: int = i) -> torch.Tensor:
                    return logits[i : i + 1].float()

                token = self._choose(w, row, greedy)
                new[i, 0], stop[i] = token, token == tokens.end_of_speech

        return StaticStep(
            fn=fn,
            extra=extra,
            prepare_batch=prepare_batch,
            finish=finish,
            admits=None if widest else admits,
            label=f"page tables of {room} tokens",
            reads_inputs=False,  # its hooks read the works' contexts only
        )
