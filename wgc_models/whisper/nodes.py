"""Whisper's nodes, over `wgc_models.whisper.model` (the model) and `whisper_text` (the
decoding rules of ``WhisperForConditionalGeneration.generate``):

- `Frontend`: one clip of 16 kHz audio → the log-mel features of its 30-second window
  (`window_features`); a longer clip is the request's fault (send one segment per window).
- `Encoder`: features → the encoder's states.
- `Decoder`: the text decoder over the runtime's paged pool, every ready call of a walk as ONE
  ragged batch. An ``encode`` call starts a window: the previous window's sequences are
  dropped and each layer's cross-attention K/V of the states go into label ``cross``. A
  ``start`` call detects the language when the request says ``auto`` (one pass over
  ``<|startoftranscript|>``), appends the prompt and chooses the first token; a ``decode`` call
  appends its token and chooses the next. ``stop`` at end of text or at the length limit;
  a call after that (the loop's one speculative step) runs nothing and says end of text again.
  Each call also gives ``window``: the window's index among the request's audio segments and
  how many tokens (text items) it streamed so far (``report`` emits the window's last); the
  ``start`` call gives ``detected``, the window's language code (the request's, or the one
  detected) as UTF-8 bytes, which ``report`` emits for verbose transcripts.
- `Detokenizer`: one token → the UTF-8 bytes it stands for (none for special and timestamp
  tokens), emitted as text.

Weights: ``config checkpoint``, a Hugging Face Whisper folder as published (``config.json``,
``generation_config.json``, ``tokenizer.json``, ``model.safetensors`` or shards; every file
required, the weights loaded strictly, the sizes checked against the ``.walk``), else seeded
random weights at the ``.walk`` sizes with the tiny tokenizer and generation settings of
`wgc_models.whisper.config`. The encoder and the decoder say what they will hold
before they are built (`Node.weights`, for the launch's preflight): counted from the checkpoint's
headers when given, else at the sizes.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from wgc_models._shared.batched import cast_weights, need, weights_dtype
from wgc_models._shared.speech import (
    RequestGenerator,
    check_sizes,
    forward_alone,
    inference,
    prompt_text,
    speech_seed,
)
from wgc_models.layers.random_init import init_seeded
from wgc_models.layers.sampling import choose
from wgc_models.layers.tokenizer import TextCodec
from wgc_models.whisper import config as tiny
from wgc_models.whisper.checkpoint import load_part, whisper_config, whisper_parts
from wgc_models.whisper.model import (
    CROSS,
    MAIN,
    WhisperEncoder,
    WhisperTextDecoder,
    backends,
    sinusoids,
    window_features,
)
from wgc_models.whisper.text import WhisperTokens
from wgc_models.whisper.timestamps import timestamp_rules
from wgc_runtime.contract.node import (
    CallContext,
    Node,
    NodeContext,
    NodeError,
    NodeInputError,
    Work,
)
from wgc_runtime.contract.weights import WeightParts
from wgc_runtime.engines.attention.base import AttentionBackend

GAIN = 2.0  # random weights at twice fan-in scale: a tiny random decoder's tokens then vary
WINDOW_STATE = ("prompt", "task", "text_ids", "done", "limit", "generated", "streamed", "ids")
TIMESTAMP = re.compile(rb"<\|\d+\.\d+\|>")


def text_codec(checkpoint: str) -> TextCodec:
    """The checkpoint's ``tokenizer.json`` (required), else the tiny one."""
    if not checkpoint:
        return TextCodec.from_file(tiny.path_of())
    if not (Path(checkpoint) / "tokenizer.json").is_file():
        raise NodeError(f"checkpoint `{checkpoint}` has no tokenizer.json: Whisper's text needs it")
    return TextCodec.from_file(checkpoint)


class Frontend(Node):
    def forward_one(
        self, inputs: dict[str, torch.Tensor | None], ctx: CallContext
    ) -> dict[str, torch.Tensor]:
        mels, frames = self.out_shape("mel")
        audio = need(inputs, "audio", self.name)
        if audio.numel() > frames * 160:
            raise NodeInputError(
                f"node `{self.name}`: a clip of {audio.numel()} samples is longer than the "
                f"{frames * 160 // 16000} s window: send it as one audio segment per window"
            )
        return {"mel": window_features(audio, mels, frames)}


class Encoder(Node):
    @classmethod
    def weights(cls, config: Mapping[str, Any]) -> Sequence[WeightParts]:
        return whisper_parts("encoder", config)

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        cfg = whisper_config(self.name, self.config)
        model = WhisperEncoder(cfg)
        path = str(self.config.get("checkpoint") or "")
        if path:
            load_part(model, path, "model.encoder.", cfg)
        else:
            init_seeded(model, int(self.config.get("seed", 0)), GAIN, keep=("embed_positions",))
            with torch.no_grad():
                model.embed_positions.weight.copy_(sinusoids(cfg.max_source_positions, cfg.d_model))
        self.model = cast_weights(model.eval(), weights_dtype(self.config, self.name))
        self.model.to(self.device)

    @inference
    def forward_one(
        self, inputs: dict[str, torch.Tensor | None], ctx: CallContext
    ) -> dict[str, torch.Tensor]:
        states = self.model(need(inputs, "mel", self.name).to(self.device))
        return {"audio_features": states.float().cpu()}


class Decoder(Node):
    """Whisper's text decoder on the paged pool (see the module docstring)."""

    @classmethod
    def weights(cls, config: Mapping[str, Any]) -> Sequence[WeightParts]:
        return whisper_parts("decoder", config)

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        cfg = self.cfg = whisper_config(self.name, self.config)
        geometry = {"layers": cfg.decoder_layers, "kv_heads": cfg.decoder_attention_heads,
                    "head_dim": cfg.head_dim}  # fmt: skip
        check_sizes(self.name, "the model", {k: int(self.config[k]) for k in geometry}, geometry)
        path = str(self.config.get("checkpoint") or "")
        self.text = text_codec(path)
        previous = self.text.token_id("<|startofprev|>")
        model = WhisperTextDecoder(cfg)
        if path:
            load_part(model, path, "", cfg)
            self.tokens = WhisperTokens.from_pretrained(
                path, previous=previous, max_target_positions=cfg.max_target_positions
            )
        else:
            init_seeded(model, int(self.config.get("seed", 1)), GAIN)
            raw = tiny.tiny_generation(self.text.tokenizer)
            self.tokens = WhisperTokens.from_dict(
                raw, previous=previous, max_target_positions=cfg.max_target_positions
            )
            with torch.no_grad():  # else a random model speaks in timestamps (no text)
                model.model.decoder.embed_tokens.weight[self.tokens.no_timestamps + 1 :] = 0
        self._codes = {i: code for code, i in self.tokens.languages.items()}  # <|en|> -> "en"
        self.model = cast_weights(model.eval(), weights_dtype(self.config, self.name))
        self.model.to(self.device)
        # self- and cross-attention, for `_pool`
        self._backends: tuple[AttentionBackend, AttentionBackend] | None = None
        self._pool: object = None

    def forward_one(
        self, inputs: dict[str, torch.Tensor | None], ctx: CallContext
    ) -> dict[str, torch.Tensor]:
        return forward_alone(self, inputs, ctx)

    @inference
    def forward(self, batch: Sequence[Work]) -> list[Any]:
        results: list[Any] = [None] * len(batch)
        rows: list[tuple[int, list[int]]] = []
        detect: list[tuple[int, list[int]]] = []
        for i, w in enumerate(batch):
            try:
                if "audio_features" in w.inputs:
                    results[i] = self._encode(w)
                elif "token" in w.inputs:
                    if w.ctx.state.get("done", True):
                        results[i] = self._ended(w)
                    else:
                        token = need(w.inputs, "token", self.name)
                        rows.append((i, [int(token.reshape(-1)[0])]))
                else:
                    (detect if self._open(w) else rows).append((i, w.ctx.state["prompt"]))
            except (NodeError, NodeInputError) as exc:  # fails this request only
                results[i] = exc
        if detect:  # language detection: one pass over <|startoftranscript|>
            logits = self._step(batch, [(i, [self.tokens.start]) for i, _ in detect])
            for (i, _), row in zip(detect, logits, strict=True):
                w = batch[i]
                lang = int(self.tokens.language_scores(row).argmax())
                w.ctx.state["language"] = self._codes.get(lang, "")
                rows.append((i, self._prompt(w, lang, detected=True)))
        if rows:
            logits = self._step(batch, rows)
            for (i, _), row in zip(rows, logits, strict=True):
                results[i] = self._choose(batch[i], row)
        return results

    # ------------------------------------------------------------------ the calls
    def _encode(self, w: Work) -> dict[str, torch.Tensor]:
        kv = w.ctx.kv
        assert kv is not None
        for label in (MAIN, CROSS):  # a new window: the last one's sequences go
            if kv.length(label):
                kv.drop(label)
        k, v = self.model.cross_kv(need(w.inputs, "audio_features", self.name).to(self.device))
        kv.append(k, v, label=CROSS)
        for key in WINDOW_STATE:
            w.ctx.state.pop(key, None)
        w.ctx.state["window"] = w.ctx.state.get("window", -1) + 1  # its index in the request
        return {}

    def _open(self, w: Work) -> bool:
        """Sets the request's prompt; whether its language is still to be detected."""
        o, st = w.ctx.options, w.ctx.state
        st["timestamps"] = bool(o.get("timestamps"))
        st["no_timestamps"] = self.tokens.no_timestamps  # for `_result`'s stamps
        task = prompt_text(w.inputs["task"], self.name)
        if task not in self.tokens.tasks:
            raise NodeInputError(f"node `{self.name}`: this checkpoint has no task `{task}`")
        text = w.inputs.get("prompt")
        ids = (
            self.text.encode(" " + prompt_text(text, self.name).strip()) if text is not None else []
        )
        if len(ids) > self.tokens.max_prompt:
            raise NodeInputError(
                f"node `{self.name}`: the text prompt is {len(ids)} tokens; Whisper takes at "
                f"most {self.tokens.max_prompt}"
            )
        st.update(task=task, text_ids=ids, done=True)
        language = prompt_text(w.inputs["language"], self.name)
        if language == "auto":
            st["prompt"] = [self.tokens.start]
            return True
        if language not in self.tokens.languages:
            raise NodeInputError(
                f"node `{self.name}`: this checkpoint has no language `{language}`"
            )
        st["language"] = language
        st["prompt"] = self._prompt(w, self.tokens.languages[language], detected=False)
        return False

    def _prompt(self, w: Work, language: int, *, detected: bool) -> list[int]:
        """The request's prompt for ``language``; what of it is still to be appended (after a
        detection pass, the pass's ``<|startoftranscript|>`` is kept unless a text prompt must
        come before it)."""
        st, kv = w.ctx.state, w.ctx.kv
        assert kv is not None
        prompt = self.tokens.prompt(
            language, st["task"], st["text_ids"], timestamps=st["timestamps"]
        )
        limit = self.tokens.limit(len(prompt))
        most = int(w.ctx.options.get("max_tokens") or 0)
        st.update(limit=min(limit, len(prompt) + most) if most > 0 else limit, generated=0, ids=[])
        if not detected:
            return prompt
        if st["text_ids"]:
            kv.drop(MAIN)
            return prompt
        return prompt[1:]

    def _step(self, batch: Sequence[Work], rows: list[tuple[int, list[int]]]) -> torch.Tensor:
        """One ragged pass of ``rows`` (batch index, new ids): each row's last logits."""
        kv = batch[rows[0][0]].ctx.kv
        if kv is None:
            raise NodeError(f"node `{self.name}` is a kv_cache node but got no KV cache")
        if self._backends is None or self._pool is not kv.pool:
            self._pool = kv.pool
            self._backends = backends(kv.backend(self.cfg.decoder_attention_heads))
        seqs: list[tuple[Hashable, int]] = []
        for i, ids in rows:
            handle = batch[i].ctx.kv
            assert handle is not None
            seqs.append((handle.request, len(ids)))
        step = self.model.batch(kv.pool, self._backends, seqs)
        flat = torch.tensor([t for _, ids in rows for t in ids], device=self.device)
        hidden = self.model.step(flat, step)
        last = torch.tensor([len(ids) for _, ids in rows], device=self.device).cumsum(0) - 1
        return self.model.logits(hidden[last])

    def _choose(self, w: Work, logits: torch.Tensor) -> dict[str, torch.Tensor]:
        st, kv = w.ctx.state, w.ctx.kv
        assert kv is not None
        first = st["generated"] == 0
        temperature = float(w.ctx.options.get("temperature") or 0.0)
        if temperature < 0:
            raise NodeInputError(f"node `{self.name}`: temperature {temperature} is negative")
        params = self.tokens.sampling(first, temperature)
        if st.get("timestamps"):  # after the suppressed tokens, as generate orders them
            t = self.tokens
            logits = logits.index_fill(
                -1,
                torch.tensor(params.suppress, dtype=torch.long, device=logits.device),
                float("-inf"),
            )
            logits = timestamp_rules(logits, st["ids"], no_timestamps=t.no_timestamps, eos=t.eos,
                                     max_initial=t.max_initial_timestamp)  # fmt: skip
        if params.do_sample:
            with RequestGenerator(st, "generator", speech_seed(w.ctx)) as g:
                token = int(choose(logits[None], params, (), g)[0])
        else:
            token = int(choose(logits[None], params)[0])
        st["generated"] += 1
        st["ids"].append(token)
        st["done"] = token == self.tokens.eos or kv.length(MAIN) + 1 >= st["limit"]
        return self._result(w, token, st["done"])

    def _ended(self, w: Work) -> dict[str, torch.Tensor]:
        if "done" not in w.ctx.state:
            raise NodeError(f"node `{self.name}`: a decode step before the prompt")
        return self._result(w, self.tokens.eos, True)

    @staticmethod
    def _result(w: Work, token: int, stop: bool) -> dict[str, torch.Tensor]:
        """The token (streamed: one text item each), ``stop``, and ``window``: the window's
        index and how many tokens it streamed with this one (``report`` emits the last)."""
        st = w.ctx.state
        st["streamed"] = st.get("streamed", 0) + 1
        out = {"new_token": torch.tensor([token], dtype=torch.int64)}
        if "stop" in w.ctx.writes:
            out["stop"] = torch.tensor(stop)
        if "window" in w.ctx.writes:
            out["window"] = torch.tensor([st.get("window", 0), st["streamed"]])
        if "stamps" in w.ctx.writes:  # the window's index, then (item, centiseconds) pairs
            first, ids = st.get("no_timestamps", 0) + 1, st.get("ids", [])
            pairs = [x for j, t in enumerate(ids) if t >= first for x in (j, 2 * (t - first))]
            out["stamps"] = torch.tensor([st.get("window", 0), *pairs], dtype=torch.int64)
        if "detected" in w.ctx.writes:  # the start call: the window's language
            code = str(st.get("language", "")).encode("utf-8")
            out["detected"] = torch.tensor(list(code), dtype=torch.uint8)
        return out


class Detokenizer(Node):
    """One token → the bytes of its text (b"" for a special or timestamp token)."""

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        self.codec = text_codec(str(self.config.get("checkpoint") or ""))

    def forward_one(
        self, inputs: dict[str, torch.Tensor | None], ctx: CallContext
    ) -> dict[str, torch.Tensor]:
        token = inputs["token"]
        piece = self.codec.piece(int(token.reshape(-1)[0])) if token is not None else b""
        if TIMESTAMP.fullmatch(piece):
            piece = b""
        return {"text": torch.tensor(list(piece), dtype=torch.uint8)}
