"""What Orpheus's SNAC decoder will hold (`Node.weights`; its LM is
`wgc_models.llama.model.lm_parts`):
counted at the ``.walk``'s sizes on the meta device, or from the checkpoint's safetensors
headers when one is given (`wgc_runtime.host.preflight`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wgc_models._shared.weights import part
from wgc_models.orpheus.snac import SnacConfig
from wgc_models.orpheus.snac import SnacDecoder as Snac
from wgc_runtime.contract.weights import WeightParts


def snac_parts(config: Mapping[str, Any]) -> list[WeightParts]:
    """SNAC's decoder side (a published ``pytorch_model.bin`` is counted at the config's
    sizes: its header says nothing without unpickling it)."""
    cfg = SnacConfig(
        decoder_dim=int(config["decoder_dim"]),
        latent_dim=int(config["latent_dim"]),
        codebook_size=int(config["codebook"]),
    )
    return [part("orpheus", "snac", config, lambda: Snac(cfg), skip=("encoder.",))]
