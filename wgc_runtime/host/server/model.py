"""What the served model takes and emits, and therefore which HTTP routes it gets.

Read from the plan (`ConductorSpec.segments`, `WalkSpec.emits`, the options) and the ranks (an
emitting node's ``config sample_rate``, default 24 kHz). The OpenAI routes need these
modalities:

============================  ======================  ==============
route                         takes                   emits
============================  ======================  ==============
``/v1/chat/completions``      text (images, audio)    text (+ audio)
``/v1/audio/speech``          text                    audio
``/v1/images/generations``    text                    image
``/v1/images/edits``          text and image          image
``/v1/audio/transcriptions``  audio                   text
``/v1/realtime`` (websocket)  audio                   text
============================  ======================  ==============

A route the model cannot serve is not registered; asking for it answers 404 with the reason
(`ModelInfo.missing`). The native route (``/v1/requests``) serves every model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wgc_runtime.contract.conductor import ConductorSpec
from wgc_runtime.contract.kinds import DestKind
from wgc_runtime.contract.spec import RankSpec
from wgc_runtime.host.audio import input_rate

DEFAULT_SAMPLE_RATE = 24_000

CHAT = "/v1/chat/completions"
SPEECH = "/v1/audio/speech"
IMAGES = "/v1/images/generations"
EDITS = "/v1/images/edits"
TRANSCRIPTIONS = "/v1/audio/transcriptions"  # and the websocket /v1/realtime (`realtime`)
REALTIME = "/v1/realtime"
NATIVE = "/v1/requests"

_NEEDS: dict[str, tuple[tuple[str, ...], str]] = {
    CHAT: (("text",), "text"),
    SPEECH: (("text",), "audio"),
    IMAGES: (("text",), "image"),
    EDITS: (("text", "image"), "image"),
    TRANSCRIPTIONS: (("audio",), "text"),
}


@dataclass(frozen=True)
class ModelInfo:
    """The served model as the routes see it."""

    name: str
    placement: str
    takes: tuple[str, ...]  # input modalities some flow takes
    any_input: bool  # some flow takes any modality
    fields: dict[str, tuple[str, ...]]  # modality -> segment fields the flows may read
    emits: tuple[str, ...]
    options: tuple[dict[str, Any], ...]
    sample_rates: dict[str, int] = field(default_factory=dict)
    max_concurrent: int = 1
    input_rate: int | None = None  # the rate audio inputs are resampled to (`audio.input_rate`)

    @classmethod
    def of(cls, spec: ConductorSpec, ranks: list[RankSpec]) -> ModelInfo:
        return cls(
            name=spec.model,
            placement=spec.placement,
            takes=tuple(s.modality for s in spec.segments),
            any_input=spec.any_segment,
            fields={s.modality: s.fields for s in spec.segments},
            emits=spec.emits(),
            options=tuple(
                {
                    "name": o.name,
                    "type": str(o.type),
                    "default": o.default,
                    "choices": list(o.choices),
                    "default_by": o.default_by,
                }
                for o in spec.options
            ),
            sample_rates=sample_rates(ranks),
            max_concurrent=spec.max_concurrent_requests,
            input_rate=input_rate(ranks),
        )

    def takes_modality(self, modality: str) -> bool:
        return self.any_input or modality in self.takes

    def serves(self, route: str) -> bool:
        return self.missing(route) is None

    def missing(self, route: str) -> str | None:
        """Why the model cannot serve ``route`` (None when it can)."""
        if route not in _NEEDS:
            return None
        ins, out = _NEEDS[route]
        if out not in self.emits:
            return (
                f"`{self.name}` cannot produce {out} (it emits {_names(self.emits)}), so it has "
                f"no `{route}` route; `{NATIVE}` serves every model"
            )
        lacking = [m for m in ins if not self.takes_modality(m)]
        if lacking:
            return (
                f"`{self.name}` takes no {' or '.join(lacking)} input (it takes "
                f"{_names(self.takes)}), so it has no `{route}` route; `{NATIVE}` serves every "
                "model"
            )
        return None

    def rate(self, modality: str) -> int:
        return self.sample_rates.get(modality, DEFAULT_SAMPLE_RATE)

    def to_json(self, routes: list[str]) -> dict[str, Any]:
        return {
            "model": self.name,
            "placement": self.placement,
            "inputs": [{"modality": m, "fields": list(self.fields.get(m, ()))} for m in self.takes],
            "any_input": self.any_input,
            "emits": list(self.emits),
            "options": list(self.options),
            "sample_rates": {m: self.rate(m) for m in self.emits if m.startswith("audio")},
            "input_sample_rate": self.input_rate,
            "max_concurrent_requests": self.max_concurrent,
            "routes": routes,
            "missing": {r: why for r in _NEEDS if (why := self.missing(r))},
        }


def sample_rates(ranks: list[RankSpec]) -> dict[str, int]:
    """Emitted modality -> the emitting node's ``sample_rate`` config, where it has one."""
    out: dict[str, int] = {}
    for rank in ranks:
        configs = {n.name: dict(n.config) for n in rank.nodes}
        for piece in rank.pieces:
            for call in piece.calls:
                rate = configs.get(call.node, {}).get("sample_rate")
                if not isinstance(rate, int):
                    continue
                for o in call.outputs:
                    for d in o.dests:
                        if d.kind is DestKind.CLIENT and d.name:
                            out.setdefault(d.name, rate)
    return out


def _names(names: tuple[str, ...]) -> str:
    return ", ".join(f"`{n}`" for n in names) or "nothing"
