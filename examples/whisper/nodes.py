"""Toy Whisper nodes (deterministic stand-ins until the model issue brings the real model).

- `Frontend`: pools the clip's samples into ``n_frames`` columns of ``n_mels`` log-mel-like
  features (a fixed linear map and a log), padded as 30-second windows are.
- `Encoder`: a fixed linear map of the features into ``audio_ctx`` rows of ``d_model``.
- `Decoder`: a kv-cache node on the runtime's paged pool. The audio features' keys and values
  go into label `main` (standing in for cross-attention); the start-of-transcript prompt
  (language, task, the optional text prompt: UTF-8 bytes) is appended and the first token is
  a hash of what it attends to; each decode step appends the previous token. It says `stop`
  after `eos_after` tokens of the window (request option, toy only; default 12). The options it
  reads (`timestamps`, `temperature`, `beams`) salt its tokens, so they change the transcript.
"""

from __future__ import annotations

import torch

from examples._toy import digest, embed, eos_after, kv_rows, kv_summary
from wgc_runtime.contract.node import Node

VOCAB = 51866  # Whisper's multilingual vocabulary


class Frontend(Node):
    def forward_one(self, inputs, ctx):
        mels, frames = self.out_shape("mel")
        audio = inputs["audio"].float().reshape(-1, 1)
        feats = embed(audio, frames, mels, torch.float32, salt=3)  # [frames, mels]
        return {"mel": torch.log1p(feats.abs()).T.contiguous()}


class Encoder(Node):
    def forward_one(self, inputs, ctx):
        rows, width = self.out_shape("audio_features")
        return {"audio_features": embed(inputs["mel"].T, rows, width, torch.float32, salt=5)}


class Decoder(Node):
    def forward_one(self, inputs, ctx):
        kv, st = ctx.kv, ctx.state
        if "audio_features" in inputs:
            kv.append(*kv_rows(inputs["audio_features"], kv, salt=21))
            return {}
        if "token" in inputs:
            x = inputs["token"]
            kv.append(*kv_rows(x, kv, salt=23))
            st["decoded"] = st.get("decoded", 0) + 1
            stop = torch.tensor(st["decoded"] >= eos_after(ctx, 12))
            return {"new_token": self._token(kv_summary(kv, x, salt=24), ctx), "stop": stop}
        parts = [inputs["language"], inputs["task"]]
        if inputs.get("prompt") is not None:
            parts.append(inputs["prompt"])
        x = torch.cat([p.reshape(-1).to(torch.int64) for p in parts])
        kv.append(*kv_rows(x, kv, salt=22))
        st["decoded"] = 0  # a new window: its own transcript
        return {"new_token": self._token(kv_summary(kv, x, salt=24), ctx)}

    @staticmethod
    def _token(h: int, ctx) -> torch.Tensor:
        o = ctx.options
        salt = digest(o.get("timestamps"), o.get("temperature"), o.get("beams"))
        return torch.tensor([(h ^ salt) % VOCAB], dtype=torch.int64)
