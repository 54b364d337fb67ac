"""What a speech pipeline takes besides the prompt (`SpeechOptions`) and what it gives back
(`Speech`), shared by the component and the reference pipelines.

Randomness: greedy by default. With sampling, each model that samples draws from its own
`torch.Generator` seeded from ``seed`` (the Orpheus LM / the Thinker: ``seed``; the Talker and
its code predictor: ``seed + 1``), and SNAC's noise blocks, for the audio window ``k`` (the one
starting at frame ``k``), from ``seed + 2 + k`` (`SpeechOptions.noise`; the reference seeds
torch's global generator with it before each window, which is where the `snac` package
draws). Separate generators keep the draws the same whether the models run one after the
other (the references), interleaved (the component pipelines, as the streams run them) or
batched with other requests (the example nodes); one per window lets windows decode in any
order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from wgc_models.layers.sampling import GREEDY, Sampling


@dataclass(frozen=True, slots=True, kw_only=True)
class SpeechOptions:
    sampling: Sampling = GREEDY  # the text / speech-token model (Orpheus LM, the Thinker)
    talker_sampling: Sampling = GREEDY  # Qwen3-Omni's Talker (its suppressions are added)
    max_new_tokens: int = 64
    max_frames: int = 64  # Qwen3-Omni codec frames
    seed: int = 0
    audio_only: bool = False  # Orpheus: constrain the LM to audio tokens (`audio_mask`)
    speaker: str = "ethan"  # Qwen3-Omni

    def generator(self, offset: int) -> torch.Generator:
        return torch.Generator().manual_seed(self.seed + offset)

    def noise_seed(self, window: int) -> int:
        """The seed of SNAC's noise for audio window ``window`` (module docstring)."""
        return self.seed + 2 + window

    def noise(self, window: int) -> torch.Generator:
        return torch.Generator().manual_seed(self.noise_seed(window))


DEFAULT = SpeechOptions()


@dataclass(slots=True)
class Speech:
    tokens: list[int]  # what the LM / Thinker generated
    audio: torch.Tensor  # fp32 [samples]
    chunks: list[int] = field(default_factory=list)  # samples per emitted audio chunk
    codes: torch.Tensor | None = None  # Qwen3-Omni: the codec frames [frames, groups]
