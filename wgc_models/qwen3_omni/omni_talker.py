"""The Qwen3-Omni Talker: an MoE decoder over codec embeddings that speaks the Thinker's text,
one codec frame (``num_code_groups`` codes) per step, with its code predictor.

Names as HF's ``Qwen3OmniMoeTalkerForConditionalGeneration`` under ``talker.``:
``model.codec_embedding``, ``model.layers.{i}…`` (every layer sparse with a shared expert),
``model.norm``, ``codec_head``, ``text_projection`` / ``hidden_projection`` (two-layer MLPs,
``linear_fc1``/``linear_fc2``, Thinker width → Talker width) and ``code_predictor.…``
(`wgc_models.qwen3_omni.code_predictor`). The Talker also needs three rows of the Thinker's
embedding table (``tts_bos``, ``tts_eos``, ``tts_pad``): `Talker.from_pretrained` reads just
those rows from the checkpoint, so a Talker on its own rank holds no Thinker weights.

Its inputs (HF ``Qwen3OmniMoeForConditionalGeneration.generate``, assembled by
`wgc_models.qwen3_omni.omni_handoff.TalkerFeed`): the user turns' rows (`Talker.user_rows`:
``hidden_projection`` of the Thinker's accept-layer hidden state for audio/image/video
placeholders, ``text_projection`` of the input embedding for text), then a 9-row assistant
prefix (`Talker.assistant_prefix`), then one step per frame whose input is the previous frame's
codec embedding sum plus one text row (the next Thinker token's projected embedding, then
``tts_eos`` once, then ``tts_pad``).

`TalkerEngine` steps it over a paged pool: `TalkerEngine.forward` (a prefill piece or one
input per request: the last logits and hidden state of each) and `TalkerEngine.frame` (the
code predictor on a batch: the frame's codes and the next input's codec part).
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Sequence
from pathlib import Path

import torch
from torch import nn

from wgc_models.layers.convert import load_converted, read_tensor
from wgc_models.layers.sampling import GREEDY, Sampling
from wgc_models.qwen3_omni.code_predictor import CodePredictor, CodePredictorEngine
from wgc_models.qwen3_omni.omni_config import OmniTokens, TalkerConfig
from wgc_models.qwen3_omni.qwen3_stack import Qwen3Stack
from wgc_models.qwen3_omni.stack_engine import StackEngine, pool_for
from wgc_runtime.engines.batching import Seq

_THINKER_EMBED = (
    "thinker.model.embed_tokens.weight",
    "thinker.model.language_model.embed_tokens.weight",
)


class ResizeMLP(nn.Module):
    """``linear_fc2(silu(linear_fc1(x)))``: Thinker width → Talker width."""

    def __init__(self, cfg: TalkerConfig):
        super().__init__()
        self.linear_fc1 = nn.Linear(cfg.thinker_hidden_size, cfg.text.intermediate_size)
        self.linear_fc2 = nn.Linear(cfg.text.intermediate_size, cfg.text.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_fc2(nn.functional.silu(self.linear_fc1(x)))


class _Text(Qwen3Stack):
    def __init__(self, cfg: TalkerConfig):
        super().__init__(cfg.text, cfg.moe)
        self.codec_embedding = nn.Embedding(cfg.text.vocab_size, cfg.text.hidden_size)


class Talker(nn.Module):
    tts: torch.Tensor  # [3, thinker hidden]: the Thinker's embeddings of tts bos, eos, pad

    def __init__(self, cfg: TalkerConfig, tokens: OmniTokens):
        super().__init__()
        self.config, self.tokens = cfg, tokens
        self.model = _Text(cfg)
        self.codec_head = nn.Linear(cfg.text.hidden_size, cfg.text.vocab_size, bias=False)
        self.text_projection = ResizeMLP(cfg)
        self.hidden_projection = ResizeMLP(cfg)
        self.code_predictor = CodePredictor(cfg.predictor, cfg.num_code_groups)
        self.register_buffer("tts", torch.zeros(3, cfg.thinker_hidden_size), persistent=False)

    @classmethod
    def from_pretrained(cls, path: str | Path, *, dtype: torch.dtype = torch.float32) -> Talker:
        """From a Qwen3-Omni checkpoint folder: the ``talker.`` weights and the three TTS rows
        of the Thinker's embedding table."""
        raw = json.loads((Path(path) / "config.json").read_text())
        model = cls(TalkerConfig.from_dict(raw["talker_config"]), OmniTokens.from_dict(raw))
        load_converted(model, path, prefix="talker.")
        t, table = model.tokens, read_tensor(path, _THINKER_EMBED)
        model.tts.copy_(table[[t.tts_bos, t.tts_eos, t.tts_pad]])
        return model.to(dtype=dtype).eval()

    @torch.inference_mode()
    def tts_rows(self) -> torch.Tensor:
        """``text_projection`` of the TTS rows: ``[3, hidden]`` (bos, eos, pad)."""
        return self.text_projection(self.tts)

    @torch.inference_mode()
    def user_rows(
        self, embeds: torch.Tensor, hidden: torch.Tensor, multimodal: torch.Tensor
    ) -> torch.Tensor:
        """Thinker rows of a user turn → Talker inputs ``[n, hidden]``."""
        out = self.text_projection(embeds)
        if bool(multimodal.any()):
            out[multimodal] = self.hidden_projection(hidden[multimodal])
        return out

    @torch.inference_mode()
    def assistant_prefix(self, rows: torch.Tensor, speaker: int) -> torch.Tensor:
        """The 9 inputs that start speaking: ``rows`` are the Thinker embeddings of the
        assistant turn's first 4 tokens (``<|im_start|>``, ``assistant``, ``\\n``, the first
        generated token)."""
        c, text = self.config, self.text_projection(rows)
        bos, _, pad = self.tts_rows()
        text_part = torch.cat((text[:3], pad.expand(4, -1), bos[None], text[3:4]))
        special = [
            c.codec_nothink,
            c.codec_think_bos,
            c.codec_think_eos,
            speaker,
            c.codec_pad,
            c.codec_bos,
        ]
        codec = self.model.codec_embedding(torch.tensor(special, device=rows.device))
        return text_part + torch.cat((codec.new_zeros(3, codec.shape[1]), codec))


class TalkerEngine:
    """A `Talker` over one paged pool, with its code predictor's scratch pool."""

    def __init__(self, talker: Talker, engine: StackEngine, predictor: CodePredictorEngine):
        self.talker, self.engine, self.predictor = talker, engine, predictor
        self.pool = engine.pool

    @classmethod
    def build(
        cls, talker: Talker, *, pages: int, page_size: int = 16, max_batch: int = 16
    ) -> TalkerEngine:
        pool, backend = pool_for(talker.model, pages=pages, page_size=page_size)
        predictor = CodePredictorEngine(talker.code_predictor, max_batch=max_batch)
        return cls(talker, StackEngine(talker.model, pool, backend), predictor)

    @torch.inference_mode()
    def forward(
        self, seqs: Sequence[Seq], embeds: Sequence[torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``embeds[i]`` ``[n_i, hidden]`` to ``seqs[i]``: the codec logits ``[B,
        vocab]`` (fp32) and the normed hidden state ``[B, hidden]`` of each last row."""
        hidden, _ = self.engine.forward(seqs, embeds)
        last = torch.stack([h[-1] for h in hidden])
        return self.talker.codec_head(last).float(), last

    @torch.inference_mode()
    def frame(
        self,
        hidden: torch.Tensor,
        c0: torch.Tensor,
        *,
        sampling: Sampling = GREEDY,
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The frame whose first code is ``c0`` ``[B]``, after the Talker's ``hidden``
        ``[B, hidden]``: its codes ``[B, groups]`` and the codec part of the next input."""
        c0_embed = self.talker.model.codec_embedding(c0)
        return self.predictor.frames(hidden, c0, c0_embed, sampling=sampling, generator=generator)

    def free(self, request: Hashable) -> None:
        self.engine.free(request)
