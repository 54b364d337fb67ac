"""Toy Orpheus nodes (deterministic stand-ins until the model issue brings real tiny models).

- `LLM`: a kv-cache node on the runtime's paged pool: the prefill appends the prompt's keys and
  values and the first audio token is a hash of what its last position attends to; each decode
  step appends the previous token and does the same, and says `stop` after `eos_after` tokens
  (request option, toy only; default 34, so prefill + decode make 35 tokens: 2 full windows).
  Every token is streamed to the SNAC decoder.
- `SnacDecoder`: a fixed linear map from a 28-token window to one frame of audio.
"""

from __future__ import annotations

import torch

from examples._toy import eos_after, fixed_matrix, kv_rows, kv_summary
from wgc_runtime.contract.node import Node

VOCAB = 4096


class LLM(Node):
    def forward_one(self, inputs, ctx):
        kv, st = ctx.kv, ctx.state
        prefill = "text_inputs" in inputs
        x = inputs["text_inputs"] if prefill else inputs["token"]
        kv.append(*kv_rows(x, kv, salt=11))
        token = self._token(kv_summary(kv, x, salt=12))
        if prefill:
            return {"new_token": token}
        st["decoded"] = st.get("decoded", 0) + 1
        return {"new_token": token, "stop": torch.tensor(st["decoded"] >= eos_after(ctx, 34))}

    @staticmethod
    def _token(h: int) -> torch.Tensor:
        return torch.tensor([h % VOCAB], dtype=torch.int64)


class SnacDecoder(Node):
    def forward_one(self, inputs, ctx):
        window = inputs["window"].float() / VOCAB
        (samples,) = self.out_shape("audio")
        return {"audio": torch.tanh(window @ fixed_matrix(window.shape[0], samples, salt=7))}
