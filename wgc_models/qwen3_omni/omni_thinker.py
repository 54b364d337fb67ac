"""The Qwen3-Omni Thinker: the MoE text model (with its audio encoder) that reads the prompt,
writes the text, and streams what the Talker needs about every token it reads.

Module names are the released checkpoint's under ``thinker.`` (``model.embed_tokens``,
``model.layers.{i}…``, ``model.norm``, ``lm_head``, ``audio_tower.…``); transformers 5's
runtime layout (``model.language_model.…``, ``model.audio_tower.…``) and both expert layouts
load too (`wgc_models.layers.convert`). The vision tower is left out: image and video
segments are not supported (their 3-D rotary positions neither, see
`wgc_models.qwen3_omni.qk_attention`).

`ThinkerEngine` steps it over a paged pool as a node would: `ThinkerEngine.forward` appends
one pass (a prompt segment, or one decode token per request) and returns a `ThinkerPass` per
sequence: the logits of its last token and, per token read, the input embedding and the hidden
state entering layer ``accept_hidden_layer`` (the Talker's ``thinker_embed`` /
``thinker_hidden``), with the token ids (the Talker projects multimodal rows by their hidden
state, text rows by their embedding).
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from wgc_models.layers.convert import load_converted
from wgc_models.qwen3_omni.omni_audio import AudioEncoder
from wgc_models.qwen3_omni.omni_config import ThinkerConfig
from wgc_models.qwen3_omni.qwen3_stack import Qwen3Stack
from wgc_models.qwen3_omni.stack_engine import StackEngine, pool_for
from wgc_runtime.engines.batching import Seq

# transformers 5 runtime layout → the released names
RENAMES = (
    ("model.language_model.", "model."),
    ("model.audio_tower.", "audio_tower."),
    ("model.visual.", "visual."),
)


class _Text(Qwen3Stack):
    """``model``: ``embed_tokens`` + the MoE stack."""

    def __init__(self, cfg: ThinkerConfig):
        super().__init__(cfg.text, cfg.moe)
        self.embed_tokens = nn.Embedding(cfg.text.vocab_size, cfg.text.hidden_size)


class Thinker(nn.Module):
    def __init__(self, cfg: ThinkerConfig, *, audio: bool = True):
        super().__init__()
        self.config = cfg
        self.model = _Text(cfg)
        self.lm_head = nn.Linear(cfg.text.hidden_size, cfg.text.vocab_size, bias=False)
        self.audio_tower = AudioEncoder(cfg.audio) if audio and cfg.audio else None

    @classmethod
    def from_pretrained(
        cls, path: str | Path, *, audio: bool = True, dtype: torch.dtype = torch.float32
    ) -> Thinker:
        """From a Qwen3-Omni checkpoint folder (``config.json`` with ``thinker_config``, or a
        Thinker-only one) and its safetensors, names under ``thinker.``."""
        raw = json.loads((Path(path) / "config.json").read_text())
        model = cls(ThinkerConfig.from_dict(raw.get("thinker_config", raw)), audio=audio)
        skip = ("visual.",) + (() if model.audio_tower is not None else ("audio_tower.",))
        load_converted(model, path, prefix="thinker.", skip=skip, renames=RENAMES)
        return model.to(dtype=dtype).eval()

    def embed(self, ids: torch.Tensor, audio: torch.Tensor | None = None) -> torch.Tensor:
        """Token embeddings ``[n, hidden]``; rows of the audio placeholder id take ``audio``'s
        rows in order (the audio encoder's output), as HF's ``masked_scatter``."""
        x = self.model.embed_tokens(ids)
        if audio is not None:
            mask = ids == self.config.audio_token_id
            x = x.masked_scatter(mask[:, None], audio.to(x.dtype))
        return x

    def multimodal(self, ids: torch.Tensor) -> torch.Tensor:
        """Which rows are audio / image / video placeholders (projected by hidden state)."""
        c = self.config
        return (ids == c.audio_token_id) | (ids == c.image_token_id) | (ids == c.video_token_id)


@dataclass(slots=True)
class ThinkerPass:
    """One sequence's share of a Thinker forward."""

    logits: torch.Tensor  # [vocab] fp32, of the last token
    ids: torch.Tensor  # [n] the tokens read
    embeds: torch.Tensor  # [n, hidden] their input embeddings
    hidden: torch.Tensor  # [n, hidden] hidden states entering layer `accept_hidden_layer`


class ThinkerEngine:
    """A `Thinker` over one paged pool (requests and labels are the pool's)."""

    def __init__(self, thinker: Thinker, engine: StackEngine, accept_hidden_layer: int):
        self.thinker, self.engine = thinker, engine
        self.accept = accept_hidden_layer
        self.pool = engine.pool

    @classmethod
    def build(
        cls, thinker: Thinker, *, accept_hidden_layer: int, pages: int, page_size: int = 16
    ) -> ThinkerEngine:
        pool, backend = pool_for(thinker.model, pages=pages, page_size=page_size)
        return cls(thinker, StackEngine(thinker.model, pool, backend), accept_hidden_layer)

    @torch.inference_mode()
    def forward(
        self,
        seqs: Sequence[Seq],
        ids: Sequence[torch.Tensor],
        audio: Sequence[torch.Tensor | None] | None = None,
    ) -> list[ThinkerPass]:
        """Append ``ids[i]`` (with ``audio[i]``'s embeddings in its audio placeholders) to
        ``seqs[i]``; one `ThinkerPass` per sequence."""
        audio = audio or [None] * len(ids)
        embeds = [self.thinker.embed(t, a) for t, a in zip(ids, audio, strict=True)]
        hidden, kept = self.engine.forward(seqs, embeds, capture=self.accept)
        assert kept is not None
        last = torch.stack([h[-1] for h in hidden])
        logits = self.thinker.lm_head(last).float()
        return [ThinkerPass(logits[i], ids[i], embeds[i], kept[i]) for i in range(len(seqs))]

    def free(self, request: Hashable) -> None:
        self.engine.free(request)
