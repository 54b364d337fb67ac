"""Toy Orpheus nodes (deterministic stand-ins until the model issue brings real tiny models).

- `LLM`: the prefill hashes the prompt into the first audio token; each decode step hashes the
  context and the previous token into the next one and says `stop` after `eos_after` tokens
  (request option, toy only; default 34, so prefill + decode make 35 tokens: 2 full windows).
  Every token is streamed to the SNAC decoder.
- `SnacDecoder`: a fixed linear map from a 28-token window to one frame of audio.
"""

from __future__ import annotations

import torch

from examples._toy import digest, eos_after, fixed_matrix
from wgc_runtime.contract.node import Node

VOCAB = 4096


class LLM(Node):
    def forward_one(self, inputs, ctx):
        st = ctx.state
        if "text_inputs" in inputs:
            st["context"] = digest("prompt", inputs["text_inputs"])
            return {"new_token": self._token(st["context"])}
        st["decoded"] = st.get("decoded", 0) + 1
        st["context"] = digest(st["context"], inputs["token"])
        stop = st["decoded"] >= eos_after(ctx, 34)
        return {"new_token": self._token(st["context"]), "stop": torch.tensor(stop)}

    @staticmethod
    def _token(h: int) -> torch.Tensor:
        return torch.tensor([h % VOCAB], dtype=torch.int64)


class SnacDecoder(Node):
    def forward_one(self, inputs, ctx):
        window = inputs["window"].float() / VOCAB
        (samples,) = self.out_shape("audio")
        return {"audio": torch.tanh(window @ fixed_matrix(window.shape[0], samples, salt=7))}
