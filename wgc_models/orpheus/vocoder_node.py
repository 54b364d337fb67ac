"""Orpheus's `SnacDecoder` node (named by the ``.walk`` as ``orpheus.nodes:SnacDecoder``): one
``sliding(28, 7)`` window of LM tokens → the 2048 samples of its second frame, the ready windows
of a batch decoded as one batch, each window's noise drawn ahead while the rank waits (see
`wgc_models.orpheus.nodes`'s docstring).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from wgc_models._shared.batched import cast_weights, weights_dtype
from wgc_models._shared.speech import NOISE, forward_alone, inference, speech_seed
from wgc_models.orpheus import sizes
from wgc_models.orpheus.checkpoint import seeded_snac, snac_from_pretrained
from wgc_models.orpheus.model import DrawnNoise, NoiseAhead, OrpheusVocoder, orpheus_tokens
from wgc_models.orpheus.snac import SnacConfig
from wgc_runtime.contract.kinds import CaptureBackend
from wgc_runtime.contract.node import CallContext, Node, NodeContext, NodeError, Work
from wgc_runtime.contract.weights import WeightParts

IDLE_WINDOWS = 4  # windows' noise drawn per `SnacDecoder.idle` call


class SnacDecoder(Node):
    """The SNAC window vocoder (see the module docstring)."""

    @classmethod
    def weights(cls, config: Mapping[str, Any]) -> Sequence[WeightParts]:
        return sizes.snac_parts(config)

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        path = str(self.config.get("checkpoint") or "")
        if path:
            snac = snac_from_pretrained(path, device=str(self.device))
        else:
            cfg = SnacConfig(
                decoder_dim=int(self.config["decoder_dim"]),
                latent_dim=int(self.config["latent_dim"]),
                codebook_size=int(self.config["codebook"]),
            )
            snac = seeded_snac(cfg, int(self.config.get("seed", 0))).to(self.device)
        snac = cast_weights(snac, weights_dtype(self.config, self.name))
        self.vocoder = OrpheusVocoder(snac, orpheus_tokens(self.config))
        self.ahead = NoiseAhead(self.vocoder.window_noise)
        if ctx.batching.backend == CaptureBackend.INDUCTOR and self.device.type == "cpu":
            t0 = time.perf_counter()
            ctx.say("compiling the window decode (inductor)")
            self.vocoder.compile()  # the windows' decode as one inductor program
            ctx.say(f"compiled the window decode in {time.perf_counter() - t0:.1f} s")
        rate = int(self.config.get("sample_rate", snac.config.sampling_rate))
        if rate != snac.config.sampling_rate:
            raise NodeError(
                f"node `{self.name}`: `config sample_rate = {rate}` but the SNAC model makes "
                f"{snac.config.sampling_rate} Hz audio"
            )

    @inference
    def forward(self, batch: Sequence[Work]) -> list[Any]:
        """Every ready window, from whichever requests, decoded as one batch
        (`OrpheusVocoder.windows`); each with its own noise, so its audio is what it would be
        alone."""
        results: list[Any] = [None] * len(batch)
        rows: list[int] = []
        windows: list[torch.Tensor] = []
        noise: list[torch.Generator | DrawnNoise] = []
        for i, w in enumerate(batch):
            window = w.inputs.get("window")
            if window is None:
                results[i] = NodeError(f"node `{self.name}`: no window to decode")
                continue
            info = w.ctx.chunks.get("window")
            k = info.index if info is not None else 0
            rows.append(i)
            windows.append(window.reshape(-1).to(self.device))
            # drawn while the rank waited, or drawn now from the same seed
            noise.append(self.ahead.window(w.ctx.request_id, speech_seed(w.ctx) + NOISE, k))
        for i, audio in zip(rows, self.vocoder.windows(windows, noise), strict=True):
            # a token that is no audio code: no samples, as the reference
            results[i] = {"audio": torch.zeros(0) if audio is None else audio.cpu()}
        return results

    def expect(self, ctx: CallContext) -> None:
        """Note the request's windows' noise, to draw in `idle` (window ``k``'s from the seed
        ``speech_seed + NOISE + k``, as `forward` would): as many windows as its
        ``max_tokens`` tokens fill."""
        windows = self.vocoder.windows_of(int(ctx.options.get("max_tokens", 0) or 0))
        self.ahead.expect(ctx.request_id, speech_seed(ctx) + NOISE, windows)

    def idle(self) -> bool:
        """Draw a few windows' noise (`IDLE_WINDOWS`, ~0.3 ms at the tiny sizes)."""
        drew = False
        for _ in range(IDLE_WINDOWS):
            if not self.ahead.step():
                break
            drew = True
        return drew

    def release(self, request_id: str) -> None:
        self.ahead.drop(request_id)

    def forward_one(
        self, inputs: dict[str, torch.Tensor | None], ctx: CallContext
    ) -> dict[str, torch.Tensor]:
        return forward_alone(self, inputs, ctx)
