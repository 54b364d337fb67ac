"""Toy Qwen3-Omni nodes (deterministic stand-ins until the model issue brings real tiny models).

- `AudioEncoder` / `VisionEncoder`: pooled features through a fixed linear map.
- `Thinker`: a kv-cache node on the runtime's paged pool: every pass appends its input rows
  (a prefill segment, or the previous token when decoding) and streams a block of `state_rows`
  hidden-state rows (from what the last position attends to) plus the mask of the real rows;
  decode passes make the next token the same way and stop after `eos_after` tokens (request
  option, toy only; default 4).
- `Talker`: a kv-cache node too: a prefill call (no channel bound) only appends its Thinker
  chunk's real rows; a call that binds `talker_input_embeds` also appends its input embedding
  and produces one codec frame from what it attends to. Once the Thinker is done it receives
  empty chunks; it says `stop` on the `talker_tail`-th empty one (request option, toy only;
  default 2).
- `Code2Wav`: a fixed linear map from codec frames to audio, keeping the new frames of a chunk
  (25 frames of left context after the first chunk).
"""

from __future__ import annotations

import torch

from examples._toy import embed, eos_after, fixed_matrix, kv_rows, kv_summary
from wgc_runtime.contract.node import Node

VOCAB = 1000
CODEBOOK = 2048
LEFT = 25  # frames of left context (the stream's `left`)


class AudioEncoder(Node):
    def forward_one(self, inputs, ctx):
        _, hidden = self.out_shape("audio_embeddings", A=2)
        return {"audio_embeddings": embed(inputs["audio"], 2, hidden, torch.bfloat16, salt=3)}


class VisionEncoder(Node):
    def forward_one(self, inputs, ctx):
        pixels = inputs["pixels"]
        _, hidden = self.out_shape("vision_embeddings", V=1)
        out = embed(pixels, pixels.shape[0], hidden, torch.bfloat16, salt=4)
        return {"vision_embeddings": out}


class Thinker(Node):
    def forward_one(self, inputs, ctx):
        kv = ctx.kv
        rows, dim = self.out_shape("thinker_states")
        if "token" in inputs:
            out, h = self._decode(inputs["token"], ctx)
            real, text = 1, True
        else:
            port, value = next(iter(inputs.items()))
            kv.append(*kv_rows(value, kv, salt=31))
            h = kv_summary(kv, value, salt=32)
            real, text = min(rows, value.shape[0]), port == "text_inputs"
            out = {"new_token": self._token(h)}
        states = torch.zeros(rows, dim)
        states[:real] = embed(torch.tensor([float(h % 9973)]), 1, dim, torch.float32)
        mask = torch.zeros(rows, 2, dtype=torch.bool)
        mask[:real, 0 if not text else 1] = True
        out["thinker_states"] = states.to(torch.bfloat16)
        out["thinker_mask"] = mask
        return out

    @staticmethod
    def _token(h: int) -> torch.Tensor:
        return torch.tensor([1 + h % (VOCAB - 1)], dtype=torch.int64)

    def _decode(self, token, ctx):
        kv, st = ctx.kv, ctx.state
        kv.append(*kv_rows(token, kv, salt=31))
        h = kv_summary(kv, token, salt=32)
        st["decoded"] = st.get("decoded", 0) + 1
        stop = st["decoded"] >= eos_after(ctx, 4)
        new = torch.tensor([0], dtype=torch.int64) if stop else self._token(h)
        return {"new_token": new, "stop": torch.tensor(stop)}, h


class Talker(Node):
    def forward_one(self, inputs, ctx):
        kv, st = ctx.kv, ctx.state
        info = ctx.chunks.get("thinker_states")
        states = inputs["thinker_states"]
        valid = info.valid if info is not None else states.shape[0]
        kv.append(*kv_rows(states[:valid], kv, salt=41))
        if info is not None and info.valid == 0:
            st["empty"] = st.get("empty", 0) + 1
        if "talker_input_embeds" not in ctx.writes:
            return {}  # prefill: nothing but the KV cache
        embeds_in = inputs.get("talker_input_embeds")
        if embeds_in is not None:
            kv.append(*kv_rows(embeds_in, kv, salt=41))
        last = embeds_in if embeds_in is not None else states[:valid]
        _, groups = self.out_shape("codec_tokens")
        h = kv_summary(kv, last, salt=42)
        codes = torch.tensor([[(h >> g) % CODEBOOK for g in range(groups)]], dtype=torch.int64)
        _, hidden = self.out_shape("talker_input_embeds")
        embeds = embed(codes, 1, hidden, torch.bfloat16, salt=5)
        out = {"talker_input_embeds": embeds, "codec_tokens": codes}
        if "stop" in ctx.writes:
            out["stop"] = torch.tensor(st.get("empty", 0) >= int(ctx.options.get("talker_tail", 2)))
        return out


class Code2Wav(Node):
    def forward_one(self, inputs, ctx):
        codes = inputs["codes"]
        info = ctx.chunks.get("codes")
        valid = info.valid if info is not None else codes.shape[0]
        context = 0 if info is None or info.index == 0 else min(LEFT, valid)
        (samples,) = self.out_shape("audio")
        frames = codes.shape[0] - LEFT
        per_frame = samples // frames
        wave = (codes.float() / CODEBOOK) @ fixed_matrix(codes.shape[1], per_frame, salt=6)
        new = wave[context:valid].reshape(-1)
        audio = torch.zeros(samples)
        audio[: new.numel()] = new[:samples]
        return {"audio": audio}
