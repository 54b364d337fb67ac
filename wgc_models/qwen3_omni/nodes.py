"""Qwen3-Omni's nodes: the audio encoder, the Thinker, the detokenizer and Code2Wav (the
Talker is in `wgc_models.qwen3_omni.talker`), built from wgc's components (`omni_audio`,
`whisper_mel`, `omni_thinker`, `code2wav`) with the weights of `wgc_models.qwen3_omni.checkpoint`.

- **`AudioEncoder`**: a 16 kHz waveform → Whisper log-mel features → the Thinker's audio tower:
  one embedding per 80 ms of audio.
- **`Thinker`**: the MoE text model over the runtime's paged pool (``ctx.kv.pool``), every ready
  call of a walk in ONE ragged batch (`ThinkerEngine`). Its passes: one per input segment
  (text, tokenized; audio, as placeholders carrying the encoder's embeddings), the reply's
  opening (which chooses the first token), then one per generated token. Every pass streams
  what the Talker needs of the tokens it read: ``thinker_states`` (per token, its input
  embedding and its hidden state entering layer ``accept_hidden_layer``, side by side) and
  ``thinker_ids`` (the token ids; -1 on the padding rows of the ``state_rows`` block). Tokens
  are chosen as HF ``generate`` would (greedy, or ``temperature`` / ``top_p`` /
  ``repetition_penalty``, seeded per request); ``stop`` at ``<|im_end|>`` or after
  ``max_tokens`` tokens. A pass after the last token reads nothing (an empty block), as
  ``generate`` never reads its last token back.
- **`Detokenizer`**: each chosen token (stream ``text_tokens``) → the bytes it stands for in
  the tokenizer's vocabulary (`TextCodec.piece`), emitted as text: a client's incremental
  UTF-8 decoder joins a character split over two tokens.
- **`Code2Wav`**: one ``left_context(25, 25)`` chunk of codec frames → the audio of its new
  frames (decoding only the valid frames, with the chunk's left context), as HF's
  ``chunked_decode``.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import torch

from wgc_models._shared.batched import cast_weights, weights_dtype
from wgc_models._shared.speech import (
    TOKENS,
    RequestGenerator,
    forward_alone,
    inference,
    prompt_text,
    sampling,
    speech_seed,
)
from wgc_models._shared.speech import text_codec as load_codec
from wgc_models.layers.host_values import int_list
from wgc_models.layers.sampling import choose
from wgc_models.layers.whisper_mel import log_mel
from wgc_models.qwen3_omni import checkpoint
from wgc_models.qwen3_omni.omni_thinker import ThinkerEngine, ThinkerPass
from wgc_models.qwen3_omni.prompt import audio_ids
from wgc_models.qwen3_omni.stack_engine import StackEngine
from wgc_models.qwen3_omni.template import chat_prompt
from wgc_runtime.contract.node import CallContext, KvCache, Node, NodeContext, NodeError, Work
from wgc_runtime.contract.weights import WeightParts


class AudioEncoder(Node):
    """Waveform → audio embeddings (see the module docstring)."""

    @classmethod
    def weights(cls, config: Mapping[str, Any]) -> Sequence[WeightParts]:
        return checkpoint.parts(config, "audio")

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        cfg = checkpoint.omni_config(self.config)
        tower = checkpoint.audio_tower(self.config, cfg, self.device)
        self.tower = cast_weights(tower, weights_dtype(self.config, self.name))
        self.bins = int(cfg.thinker.audio.get("num_mel_bins", 128))

    @inference
    def forward_one(
        self, inputs: dict[str, torch.Tensor | None], ctx: CallContext
    ) -> dict[str, torch.Tensor]:
        audio = inputs["audio"]
        if audio is None or audio.numel() < 160:
            raise NodeError(f"node `{self.name}`: an audio segment needs 10 ms of 16 kHz audio")
        feats = log_mel(audio.to(self.device), self.bins)
        out = self.tower(feats, torch.tensor([feats.shape[1]]))
        return {"audio_embeddings": out.float().cpu()}


class Thinker(Node):
    """The Thinker on the paged pool (see the module docstring)."""

    @classmethod
    def weights(cls, config: Mapping[str, Any]) -> Sequence[WeightParts]:
        return checkpoint.parts(config, "thinker")

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        cfg = self.omni = checkpoint.omni_config(self.config)
        text = cfg.thinker.text
        checkpoint.check_geometry(self.name, self.config, text.num_layers, text.num_kv_heads,
                               text.head_dim)  # fmt: skip
        self.codec = load_codec(str(self.config.get("checkpoint") or ""), "qwen3_omni")
        model = checkpoint.thinker(self.config, cfg, self.codec, self.device)
        self.model = cast_weights(model, weights_dtype(self.config, self.name))
        audio = audio_ids(self.codec, cfg)
        self.prompt = chat_prompt(self.config, self.codec, cfg.tokens, audio)  # its template
        self.accept = cfg.talker.accept_hidden_layer
        self.kv_tokens = int(self.config["kv_tokens"])
        self.rows, dim = self.out_shape("thinker_states")
        if dim != 2 * text.hidden_size:
            raise NodeError(
                f"node `{self.name}`: `thinker_states` rows are {dim} wide, the Thinker streams "
                f"2 x {text.hidden_size} (set `hidden` to the model's)"
            )
        self._engine: ThinkerEngine | None = None

    def engine(self, kv: KvCache | None) -> ThinkerEngine:
        if kv is None:
            raise NodeError(f"node `{self.name}` is a kv_cache node but got no KV cache")
        if self._engine is None or self._engine.pool is not kv.pool:
            backend = kv.backend(self.omni.thinker.text.num_heads)
            stack = StackEngine(self.model.model, kv.pool, backend)
            self._engine = ThinkerEngine(self.model, stack, self.accept)
        return self._engine

    def forward_one(
        self, inputs: dict[str, torch.Tensor | None], ctx: CallContext
    ) -> dict[str, torch.Tensor]:
        return forward_alone(self, inputs, ctx)

    @inference
    def forward(self, batch: Sequence[Work]) -> list[Any]:
        engine = self.engine(batch[0].ctx.kv)
        results: list[Any] = [None] * len(batch)
        rows: list[int] = []
        seqs: list[tuple[Hashable, str]] = []
        ids: list[torch.Tensor] = []
        audio: list[torch.Tensor | None] = []
        for i, w in enumerate(batch):
            try:
                pass_ids, pass_audio = self._pass(w)
            except NodeError as exc:
                results[i] = exc
                continue
            if pass_ids is None:  # nothing left to read: the request's text has ended
                results[i] = self._ended(w)
                continue
            kv = w.ctx.kv
            assert kv is not None
            rows.append(i)
            seqs.append((kv.request, kv.labels[0]))
            ids.append(pass_ids)
            audio.append(pass_audio)
        if rows:
            passes = engine.forward(seqs, ids, audio)
            for out, i in zip(passes, rows, strict=True):
                results[i] = self._result(batch[i], out)
        return results

    def _pass(self, w: Work) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """The ids this call reads (None after the last token), and audio embeddings."""
        st, kv = w.ctx.state, w.ctx.kv
        assert kv is not None
        opened = bool(st.get("opened", False))
        emb = None
        if "text_inputs" in w.inputs:
            ids = self.prompt.text(prompt_text(w.inputs["text_inputs"], self.name), opened)
            st["opened"] = True
        elif "audio_embeddings" in w.inputs:
            emb = w.inputs["audio_embeddings"]
            if emb is None:
                raise NodeError(f"node `{self.name}`: an audio segment without embeddings")
            ids = self.prompt.audio(int(emb.shape[0]), opened)
            st["opened"] = True
        elif "token" in w.inputs:
            if st.get("ended"):
                return None, None
            token = w.inputs["token"]
            assert token is not None
            ids = int_list(token)
        else:  # the reply: close the user turn, open the assistant's
            ids = self.prompt.reply(opened)
            st["opened"] = False
        if len(ids) > self.rows:
            raise NodeError(
                f"node `{self.name}`: a prompt segment of {len(ids)} tokens does not fit the "
                f"{self.rows} rows a Thinker pass streams (`state_rows`): raise it, or send "
                "shorter segments"
            )
        have = kv.length()
        if have + len(ids) > self.kv_tokens:
            raise NodeError(
                f"node `{self.name}`: request `{kv.request}` would hold {have + len(ids)} "
                f"tokens, more than `config kv_tokens = {self.kv_tokens}`"
            )
        tensor = torch.tensor(ids, dtype=torch.long)
        if "token" not in w.inputs:  # a decode pass reads a token already in the history
            seen = st.get("history", torch.zeros(0, dtype=torch.long))
            st["history"] = torch.cat((seen, tensor))
        return tensor.to(self.device), emb

    def _result(self, w: Work, out: ThinkerPass) -> dict[str, torch.Tensor]:
        n = int(out.ids.numel())
        states = torch.zeros(self.rows, 2 * out.embeds.shape[1])
        states[:n] = torch.cat((out.embeds, out.hidden), dim=1).float().cpu()
        ids = torch.full((self.rows,), -1, dtype=torch.long)
        ids[:n] = out.ids.cpu()
        result = {"thinker_states": states, "thinker_ids": ids}
        if "new_token" in w.ctx.writes:
            token = self._choose(w, out.logits[None])
            result["new_token"] = torch.tensor([token], dtype=torch.int64)
            if "stop" in w.ctx.writes:
                result["stop"] = torch.tensor(bool(w.ctx.state.get("ended")))
        return result

    def _choose(self, w: Work, logits: torch.Tensor) -> int:
        st = w.ctx.state
        params = sampling(w.ctx.options)
        history = [st["history"]]
        if params.do_sample:
            with RequestGenerator(st, "thinker_generator", speech_seed(w.ctx) + TOKENS) as g:
                token = int(choose(logits, params, history, g)[0])
        else:
            token = int(choose(logits, params, history)[0])
        st["history"] = torch.cat((st["history"], torch.tensor([token])))
        st["generated"] = int(st.get("generated", 0)) + 1
        limit = int(w.ctx.options.get("max_tokens", 0) or 0)
        done = token == self.omni.tokens.im_end or (0 < limit <= st["generated"])
        st["ended"] = done
        return token

    def _ended(self, w: Work) -> dict[str, torch.Tensor]:
        """A decode call after the last token: an empty pass, and stop."""
        token = w.inputs["token"]
        assert token is not None
        return {
            "thinker_states": torch.zeros(self.rows, 2 * self.omni.thinker.text.hidden_size),
            "thinker_ids": torch.full((self.rows,), -1, dtype=torch.long),
            "new_token": token.reshape(1).to(torch.int64),
            "stop": torch.tensor(True),
        }


class Detokenizer(Node):
    """One token → the bytes of its text (b"" for a special token)."""

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        self.codec = load_codec(str(self.config.get("checkpoint") or ""), "qwen3_omni")

    @inference
    def forward_one(
        self, inputs: dict[str, torch.Tensor | None], ctx: CallContext
    ) -> dict[str, torch.Tensor]:
        token = inputs["token"]
        piece = self.codec.piece(int(token.reshape(-1)[0])) if token is not None else b""
        return {"text": torch.tensor(list(piece), dtype=torch.uint8)}


class Code2Wav(Node):
    """Codec frames → audio (see the module docstring)."""

    @classmethod
    def weights(cls, config: Mapping[str, Any]) -> Sequence[WeightParts]:
        return checkpoint.parts(config, "code2wav")

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        cfg = checkpoint.omni_config(self.config)
        model = checkpoint.code2wav(self.config, cfg, self.device)
        self.model = cast_weights(model, weights_dtype(self.config, self.name))
        self.chunk = int(self.config["chunk"])
        per_frame = int(self.config["samples_per_frame"])
        if per_frame != self.model.total_upsample:
            raise NodeError(
                f"node `{self.name}`: `samples_per_frame = {per_frame}`, but the model makes "
                f"{self.model.total_upsample} samples per codec frame"
            )

    @inference
    def forward_one(
        self, inputs: dict[str, torch.Tensor | None], ctx: CallContext
    ) -> dict[str, torch.Tensor]:
        codes = inputs["codes"]
        if codes is None:
            raise NodeError(f"node `{self.name}`: no codec frames to decode")
        info = ctx.chunks.get("codes")
        valid = info.valid if info is not None else int(codes.shape[0])
        if valid == 0:
            return {"audio": torch.zeros(0)}
        context = info.index * self.chunk - info.start if info is not None else 0
        audio = self.model.chunk(codes[:valid].to(self.device), context)
        return {"audio": audio.float().cpu()}
