"""Qwen3-Omni's Talker node: the Thinker's streamed passes in, one codec frame per step out.

Built from wgc's components: `TalkerFeed` (the Thinker → Talker hand-off: user-turn rows, the
assistant prefix, one text row per step, as HF ``generate`` assembles them), `TalkerEngine`
(the MoE Talker over the runtime's paged pool, ``ctx.kv.pool``, and its code predictor on a
scratch pool) and `sampling`. Every ready call of a walk runs as ONE batch:

- ``talker_prefill`` (a call that binds nothing): one Thinker pass into the hand-off; its
  user-turn rows into the Talker's KV cache;
- ``talker_last_prefill`` (binds ``talker_input_embeds``): the first decode pass, which
  completes the assistant prefix; the Talker reads it and speaks the first frame: its first
  code from the codec head, the other 15 from the code predictor (``codec_tokens``, streamed
  to Code2Wav) and their embedding sum, the next step's input;
- ``talker_decode`` (binds ``stop`` too): one more Thinker pass (its token's text row; once the
  Thinker is done, ``tts_eos`` then ``tts_pad``) plus the carried embedding sum → the next
  frame, until the codec's end of speech or ``max_frames`` frames (then ``stop``, no frame).

Codes are chosen as ``generate`` chooses them (greedy, or ``talker_temperature`` /
``talker_top_p`` / ``talker_repetition_penalty`` with HF's rule for the code predictor, seeded
per request; the codec's special ids are never sampled). A request's hand-off lives in its
node state (``ctx.state``), which cannot move to another rank: the Talker's walks run on one
rank group.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

import torch

from wgc_models._shared.batched import cast_weights, weights_dtype
from wgc_models._shared.speech import TALKER, forward_alone, inference, sampling, speech_seed
from wgc_models.layers.sampling import Sampling, choose
from wgc_models.qwen3_omni import checkpoint
from wgc_models.qwen3_omni.code_predictor import CodePredictorEngine, predictor_sampling
from wgc_models.qwen3_omni.omni_config import OmniConfig
from wgc_models.qwen3_omni.omni_handoff import TalkerFeed
from wgc_models.qwen3_omni.omni_talker import TalkerEngine
from wgc_models.qwen3_omni.omni_thinker import Thinker, ThinkerPass
from wgc_models.qwen3_omni.stack_engine import StackEngine
from wgc_runtime.contract.node import CallContext, KvCache, Node, NodeContext, NodeError, Work
from wgc_runtime.contract.weights import WeightParts


class _Multimodal:
    """What the hand-off asks of the Thinker (its placeholder ids), without its weights."""

    def __init__(self, cfg: OmniConfig):
        c = cfg.thinker
        self.ids = (c.audio_token_id, c.image_token_id, c.video_token_id)

    def multimodal(self, ids: torch.Tensor) -> torch.Tensor:
        return (ids == self.ids[0]) | (ids == self.ids[1]) | (ids == self.ids[2])


@dataclass(slots=True)
class Speech:
    """One request's Talker state."""

    feed: TalkerFeed
    params: Sampling
    generator: torch.Generator
    spoken: list[int] = field(default_factory=list[int])  # first codes so far (repetition penalty)
    frames: int = 0
    ended: bool = False


@dataclass(slots=True)
class _Row:
    """One call of a batch on its way through the Talker."""

    index: int
    work: Work
    speech: Speech
    embeds: torch.Tensor | None = None  # what it appends to the Talker's sequence
    speaks: bool = False  # a first code to choose (and maybe a frame) after the forward


class Talker(Node):
    """The Talker (see the module docstring)."""

    @classmethod
    def weights(cls, config: Mapping[str, Any]) -> Sequence[WeightParts]:
        return checkpoint.parts(config, "talker")

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        cfg = self.omni = checkpoint.omni_config(self.config)
        text = cfg.talker.text
        checkpoint.check_geometry(self.name, self.config, text.num_layers, text.num_kv_heads,
                               text.head_dim)  # fmt: skip
        self.dtype = weights_dtype(self.config, self.name)
        self.model = cast_weights(checkpoint.talker(self.config, cfg, self.device), self.dtype)
        self.thinker = cast(Thinker, _Multimodal(cfg))
        self.width = cfg.talker.thinker_hidden_size
        self._engine: TalkerEngine | None = None

    def engine(self, kv: KvCache | None) -> TalkerEngine:
        if kv is None:
            raise NodeError(f"node `{self.name}` is a kv_cache node but got no KV cache")
        if self._engine is None or self._engine.pool is not kv.pool:
            backend = kv.backend(self.omni.talker.text.num_heads)
            stack = StackEngine(self.model.model, kv.pool, backend)
            predictor = CodePredictorEngine(
                self.model.code_predictor, max_batch=self.ctx.batching.max_batch
            )
            self._engine = TalkerEngine(self.model, stack, predictor)
        return self._engine

    # ------------------------------------------------------------------ per request
    def _speech(self, w: Work) -> Speech:
        st = w.ctx.state
        sp = st.get("speech")
        if sp is None:
            speaker = str(w.ctx.options.get("speaker", "ethan")).lower()
            speakers = self.omni.talker.speakers
            if speaker not in speakers:
                known = ", ".join(f"`{s}`" for s in sorted(speakers))
                raise NodeError(f"node `{self.name}`: unknown speaker `{speaker}` ({known})")
            params = sampling(w.ctx.options, "talker_")
            params = replace(params, suppress=params.suppress + self.omni.talker.suppressed())
            gen = torch.Generator().manual_seed(speech_seed(w.ctx) + TALKER)
            feed = TalkerFeed(self.thinker, self.model, speakers[speaker])
            sp = st["speech"] = Speech(feed, params, gen)
        return sp

    def _pass(self, w: Work) -> ThinkerPass | None:
        """The Thinker pass of the call's chunk, or None when the Thinker is done."""
        info = w.ctx.chunks.get("thinker_states")
        ids, states = w.inputs["thinker_ids"], w.inputs["thinker_states"]
        if (info is not None and info.empty) or ids is None or states is None:
            return None
        n = int((ids >= 0).sum())
        if n == 0:
            return None  # the pass after the Thinker's last token reads nothing
        states = states[:n].to(self.device, self.dtype)
        embeds, hidden = states[:, : self.width], states[:, self.width :]
        return ThinkerPass(torch.zeros(0), ids[:n].to(self.device), embeds, hidden)

    def forward_one(
        self, inputs: dict[str, torch.Tensor | None], ctx: CallContext
    ) -> dict[str, torch.Tensor]:
        return forward_alone(self, inputs, ctx)

    # ------------------------------------------------------------------ a batch
    @inference
    def forward(self, batch: Sequence[Work]) -> list[Any]:
        engine = self.engine(batch[0].ctx.kv)
        results: list[Any] = [None] * len(batch)
        rows: list[_Row] = []
        for i, w in enumerate(batch):
            try:
                row = self._prepare(_Row(i, w, self._speech(w)))
            except NodeError as exc:
                results[i] = exc
                continue
            rows.append(row)
            results[i] = self._silent(w) if not row.speaks else None
        fed = [r for r in rows if r.embeds is not None]
        if fed:
            seqs: list[tuple[Hashable, str]] = []
            for r in fed:
                kv = r.work.ctx.kv
                assert kv is not None
                seqs.append((kv.request, kv.labels[0]))
            logits, hidden = engine.forward(seqs, [cast(torch.Tensor, r.embeds) for r in fed])
            speaking = [(j, r) for j, r in enumerate(fed) if r.speaks]
            spoken = self._speak(engine, speaking, logits, hidden)
            for (_, r), out in zip(speaking, spoken, strict=True):
                results[r.index] = out
        return results

    def _prepare(self, row: _Row) -> _Row:
        """What the call appends to the Talker's sequence, and whether it speaks."""
        w, sp = row.work, row.speech
        writes = w.ctx.writes
        thinker = self._pass(w)
        if "talker_input_embeds" not in writes:  # talker_prefill
            if thinker is not None:
                row.embeds, _ = sp.feed.push(thinker, decode=False)
            return row
        if "talker_input_embeds" not in w.inputs:  # talker_last_prefill
            rows, prefix = sp.feed.push(thinker, decode=True) if thinker else (None, None)
            if prefix is None:  # the Thinker ended before its first decode pass
                sp.ended = True
                return row
            row.embeds = prefix if rows is None else torch.cat((rows, prefix))
            row.speaks = True
            return row
        if sp.ended:  # talker_decode after the end of speech
            return row
        if thinker is None:
            sp.feed.thinker_done()
        else:
            sp.feed.push(thinker, decode=True)
        text = sp.feed.text_row()
        carried = w.inputs["talker_input_embeds"]
        if text is None or carried is None:
            raise NodeError(f"node `{self.name}`: a decode step with no text row to speak")
        row.embeds = carried.to(self.device, self.dtype) + text[None]
        row.speaks = True
        return row

    def _speak(
        self,
        engine: TalkerEngine,
        speaking: Sequence[tuple[int, _Row]],
        logits: torch.Tensor,
        hidden: torch.Tensor,
    ) -> list[dict[str, torch.Tensor]]:
        """Per speaking row: its first code, then (unless it ends) its frame."""
        outs: list[dict[str, torch.Tensor]] = [{} for _ in speaking]
        framed: list[tuple[int, torch.Tensor]] = []  # (position in `speaking`, first code)
        for k, (j, r) in enumerate(speaking):
            sp = r.speech
            history = [torch.tensor(sp.spoken, dtype=torch.long)]
            c0 = choose(logits[j : j + 1], sp.params, history, sp.generator)
            sp.spoken.append(int(c0[0]))
            limit = int(r.work.ctx.options.get("max_frames", 0) or 0)
            if int(c0[0]) == self.omni.talker.codec_eos or (0 < limit <= sp.frames):
                sp.ended = True
                outs[k] = self._silent(r.work)
            else:
                framed.append((k, c0))
        greedy = [(k, c0) for k, c0 in framed if not speaking[k][1].speech.params.do_sample]
        sampled = [(k, c0) for k, c0 in framed if speaking[k][1].speech.params.do_sample]
        groups = [greedy] if greedy else []
        groups += [[one] for one in sampled]  # each sampling request draws from its own
        for group in groups:
            ks = [k for k, _ in group]
            rows = torch.stack([hidden[speaking[k][0]] for k in ks])
            c0s = torch.cat([c0 for _, c0 in group])
            sp0 = speaking[ks[0]][1].speech
            params = predictor_sampling(sp0.params)
            gen = sp0.generator if sp0.params.do_sample else None
            codes, embeds = engine.frame(rows, c0s, sampling=params, generator=gen)
            for n, k in enumerate(ks):
                r = speaking[k][1]
                r.speech.frames += 1
                outs[k] = self._spoken(r.work, codes[n], embeds[n])
        return outs

    def _spoken(
        self, w: Work, codes: torch.Tensor, embeds: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        out = {
            "talker_input_embeds": embeds[None].float().cpu(),
            "codec_tokens": codes[None].to(torch.int64).cpu(),
        }
        if "stop" in w.ctx.writes:
            out["stop"] = torch.tensor(False)
        return out

    def _silent(self, w: Work) -> dict[str, torch.Tensor]:
        """A call that speaks no frame: a prefill, or the end of speech."""
        if "talker_input_embeds" not in w.ctx.writes:
            return {}
        hidden = self.omni.talker.text.hidden_size
        out = {"talker_input_embeds": torch.zeros(1, hidden)}
        if "stop" in w.ctx.writes:
            out["stop"] = torch.tensor(True)
        return out

    def export_state(self, request_id: str, kept: dict[str, Any]) -> dict[str, torch.Tensor]:
        raise NodeError(
            f"node `{self.name}` keeps a request's Thinker hand-off in its state, which cannot "
            "move between ranks: place the Talker's walks on one rank group"
        )
