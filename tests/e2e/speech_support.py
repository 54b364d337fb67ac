"""What the speech examples' end-to-end tests share: tiny checkpoints in the references' own
formats (`tests.reference.checkpoints`), the examples compiled against them
(``--set checkpoint=...``), and the reference pipelines run on the same request: the same
prompt (built by the examples' own prompt rules), options and seed."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if (
    str(ROOT) not in sys.path
):  # node modules import as `wgc_models.<family>.nodes` (registered: `orpheus.nodes`)
    sys.path.insert(0, str(ROOT))

from tests.reference import (  # noqa: E402
    checkpoints,
    orpheus_reference,
    qwen3_omni_reference,
)
from tests.reference.speech import Speech, SpeechOptions  # noqa: E402
from wgc.cli.compile import sync  # noqa: E402
from wgc.driver import Driver  # noqa: E402
from wgc_models._shared.speech import request_seed, text_codec  # noqa: E402
from wgc_models.layers.sampling import Sampling  # noqa: E402
from wgc_models.orpheus.config import TINY_TOKENS  # noqa: E402
from wgc_models.orpheus.model import prompt_ids  # noqa: E402
from wgc_models.qwen3_omni.omni_config import OmniConfig  # noqa: E402
from wgc_models.qwen3_omni.prompt import ChatPrompt, audio_ids  # noqa: E402

PLACEMENTS = ("cpu", "cpu-2rank", "cpu-3rank")


@dataclass
class Family:
    name: str
    checkpoint: Path
    sets: dict[str, str]
    reference: Any  # the reference modules

    def compile(self, out: Path, placement: str) -> Path:
        walk = ROOT / "wgc_models" / self.name / f"{self.name}.walk"
        place = ROOT / "wgc_models" / self.name / "placements" / f"{placement}.yaml"
        result = Driver().compile(str(walk), str(place), self.sets)
        assert result.ok, [d.message for d in result.errors]
        out.mkdir(parents=True, exist_ok=True)
        sync(out, result.files, check=False)
        return out


def orpheus(path: Path) -> Family:
    lm, codec = checkpoints.orpheus(path, seed=0)
    sets = {"checkpoint": str(path / "lm"), "snac_checkpoint": str(path / "snac")}
    return Family("orpheus", path, sets, (lm, codec))


def qwen3_omni(path: Path) -> Family:
    model = checkpoints.qwen3_omni(path, seed=1)
    return Family("qwen3_omni", path, {"checkpoint": str(path)}, model)


def _sampling(options: dict[str, Any], prefix: str = "") -> Sampling:
    t = float(options.get(prefix + "temperature", 0.0))
    return Sampling(
        do_sample=t > 0,
        temperature=t if t > 0 else 1.0,
        top_p=float(options.get(prefix + "top_p", 1.0)),
        repetition_penalty=float(options.get(prefix + "repetition_penalty", 1.0)),
    )


def reference(family: Family, text: str, options: dict[str, Any], rid: str, seed=None) -> Speech:
    """The reference pipeline's run of the request ``text`` with ``options`` (defaults as the
    ``.walk`` declares them), seeded as the example's nodes seed the request ``rid``."""
    base = request_seed(rid, seed)
    if family.name == "orpheus":
        lm, codec = family.reference
        voice = str(options.get("voice", "tara"))
        prompt = prompt_ids(text_codec("", "orpheus"), TINY_TOKENS, voice, text)
        opts = SpeechOptions(
            sampling=_sampling(options),
            max_new_tokens=int(options.get("max_tokens", 280)),
            audio_only=True,
            seed=base,
        )
        return orpheus_reference.run(lm, codec, prompt, TINY_TOKENS, opts)
    codec = text_codec("", "qwen3_omni")
    cfg = OmniConfig.from_pretrained(family.checkpoint)
    prompt = ChatPrompt(codec, cfg.tokens, audio_ids(codec, cfg)).whole(text)
    opts = SpeechOptions(
        sampling=_sampling(options),
        talker_sampling=_sampling(options, "talker_"),
        max_new_tokens=int(options.get("max_tokens", 24)),
        max_frames=int(options.get("max_frames", 75)),
        speaker=str(options.get("speaker", "ethan")),
        seed=base,
    )
    return qwen3_omni_reference.run(family.reference, prompt, opts)
