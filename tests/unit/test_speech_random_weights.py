"""The speech examples' seeded random weights are the seed's alone: every part a node builds
without a checkpoint (Orpheus's LM and SNAC decoder; Qwen3-Omni's Thinker, audio tower, Talker
and Code2Wav) is the same whatever state torch's global generator is in. Each worker process
builds its own nodes, so a draw from the global generator would give every process (and the
reference interpreter) different weights."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
if (
    str(ROOT) not in sys.path
):  # node modules import as `wgc_models.<family>.nodes` (registered: `orpheus.nodes`)
    sys.path.insert(0, str(ROOT))

pytest.importorskip("tokenizers")

from wgc_models._shared.speech import text_codec  # noqa: E402
from wgc_models.orpheus import checkpoint as orpheus  # noqa: E402
from wgc_models.orpheus.snac import SnacConfig  # noqa: E402
from wgc_models.qwen3_omni import checkpoint as omni  # noqa: E402

CPU = torch.device("cpu")
LM = {
    "vocab": 972,
    "layers": 2,
    "kv_heads": 2,
    "head_dim": 16,
    "hidden": 64,
    "intermediate": 128,
    "heads": 4,
    "text_vocab": 512,
    "bos": 496,
    "eot": 505,
    "codebook": 64,
}  # fmt: skip (the tiny sizes of wgc_models/orpheus/orpheus.walk)


def _builders() -> dict[str, Callable[[], torch.nn.Module]]:
    cfg = omni.omni_config({})
    codec = text_codec("", "qwen3_omni")
    snac = SnacConfig(decoder_dim=64, latent_dim=64, codebook_size=64)
    return {
        "orpheus LM": lambda: orpheus.build_lm(LM, CPU),
        "SNAC": lambda: orpheus.seeded_snac(snac, 1),
        "Thinker": lambda: omni.thinker({}, cfg, codec, CPU),
        "audio tower": lambda: omni.audio_tower({}, cfg, CPU),
        "Talker": lambda: omni.talker({}, cfg, CPU),
        "Code2Wav": lambda: omni.code2wav({}, cfg, CPU),
    }


@pytest.mark.parametrize("part", list(_builders()))
def test_random_weights_do_not_depend_on_the_global_generator(part) -> None:
    build = _builders()[part]
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(1)
        a = build().state_dict()
        torch.manual_seed(2)
        b = build().state_dict()
    finally:
        torch.random.set_rng_state(state)
    assert a.keys() == b.keys()
    assert [k for k in a if not torch.equal(a[k], b[k])] == []
