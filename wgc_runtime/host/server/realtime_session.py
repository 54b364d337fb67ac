"""What a ``/v1/realtime`` transcription session's update may set (`realtime`), in both shapes
OpenAI's clients send it, and its refusals.

* The beta shape (``transcription_session.update``, or ``session.update`` without a ``type``):
  ``input_audio_format`` (``"pcm16"`` only), ``input_audio_transcription`` (``model``,
  ``language``, ``prompt``), ``turn_detection`` (null only).
* The GA shape (``session.update`` with ``session.type: "transcription"``, or with ``audio``):
  ``audio.input.format`` (``{"type": "audio/pcm", "rate": 24000}``: another ``type``, such as
  ``audio/pcmu`` or ``audio/pcma``, or another ``rate`` is refused with code
  ``unsupported_audio_format``), ``audio.input.transcription`` (as above),
  ``audio.input.turn_detection`` and ``audio.input.noise_reduction`` (null only), ``include``
  (empty only), and a described session's ``id``, ``object`` and ``expires_at`` (ignored); any
  other field is refused by name, and so is ``type: "realtime"`` (a
  conversation: this route only transcribes).

`read_update` gives the `Update` either shape asks for; `ga_session` describes a session in the
GA shape (``session.updated``). Every refusal is a `Refused` naming the field as OpenAI's
``param`` does (``session.audio.input.format.rate``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

RATE = 24_000  # OpenAI's pcm16 / audio/pcm: 24 kHz, 16-bit, mono, little-endian
PCM = "audio/pcm"
GA_FIELDS = {"type", "audio", "include", "id", "object", "expires_at"}  # the last 3: read only
GA_INPUT_FIELDS = {"format", "transcription", "turn_detection", "noise_reduction"}


class Refused(Exception):
    """An event the session refuses: an ``error`` event naming ``param``, with ``code``."""

    def __init__(self, param: str, message: str, code: str = "invalid_value") -> None:
        super().__init__(message)
        self.param, self.code = param, code


@dataclass(frozen=True)
class Update:
    """What a session update sets: the transcription settings (``model``, ``language``,
    ``prompt``; under ``where``, the field's name for a refusal), and whether it came in the GA
    shape (answered with ``session.updated`` in that shape)."""

    transcription: dict[str, Any]
    where: str
    ga: bool


def read_update(session: Any) -> Update:
    """The `Update` ``session`` (an update event's ``session``) asks for, or `Refused`."""
    if not isinstance(session, dict):
        raise Refused("session", "`session` is an object")
    kind = session.get("type")
    if kind is None and "audio" not in session:
        return _beta(session)
    if kind not in (None, "transcription"):
        raise Refused("session.type", f"`{kind}` sessions are not served: this route "
                      "transcribes (`transcription`)", "unsupported_session_type")  # fmt: skip
    _known(session, GA_FIELDS, "session")
    if session.get("include"):
        raise Refused("session.include", "nothing more is included (no logprobs)")
    audio = _object(session.get("audio"), "session.audio")
    _known(audio, {"input"}, "session.audio")
    where = "session.audio.input"
    given = _object(audio.get("input"), where)
    _known(given, GA_INPUT_FIELDS, where)
    _format(given.get("format"), f"{where}.format")
    if given.get("turn_detection") is not None:
        raise Refused(f"{where}.turn_detection", "no server-side turn detection: commit the buffer")
    if given.get("noise_reduction") is not None:
        raise Refused(f"{where}.noise_reduction", "no noise reduction: send the audio as it is")
    asr = _object(given.get("transcription"), f"{where}.transcription")
    return Update(asr, f"{where}.transcription", ga=True)


def ga_session(ident: str, model: str, language: str | None, prompt: str) -> dict[str, Any]:
    """A transcription session in the GA shape (``session.updated``)."""
    return {
        "id": ident,
        "object": "realtime.transcription_session",
        "type": "transcription",
        "audio": {
            "input": {
                "format": {"type": PCM, "rate": RATE},
                "transcription": {"model": model, "language": language, "prompt": prompt},
                "turn_detection": None,
                "noise_reduction": None,
            }
        },
        "include": [],
    }


def _beta(session: dict[str, Any]) -> Update:
    fmt = session.get("input_audio_format", "pcm16")
    if fmt != "pcm16":
        raise Refused("session.input_audio_format", f"`{fmt}` is not supported (pcm16)",
                      "unsupported_audio_format")  # fmt: skip
    if session.get("turn_detection") is not None:
        raise Refused("session.turn_detection", "no server-side turn detection: commit the buffer")
    where = "session.input_audio_transcription"
    return Update(_object(session.get("input_audio_transcription"), where), where, ga=False)


def _format(fmt: Any, where: str) -> None:
    if fmt is None:
        return
    if not isinstance(fmt, dict):
        raise Refused(where, f'an object: {{"type": "{PCM}", "rate": {RATE}}}')
    _known(fmt, {"type", "rate"}, where)
    kind, rate = fmt.get("type", PCM), fmt.get("rate", RATE)
    if kind != PCM:
        raise Refused(f"{where}.type", f"`{kind}` is not supported: {PCM} (16-bit mono at "
                      f"{RATE} Hz) only", "unsupported_audio_format")  # fmt: skip
    if rate != RATE or isinstance(rate, bool):
        raise Refused(f"{where}.rate", f"{rate} Hz is not supported: {PCM} at {RATE} Hz only",
                      "unsupported_audio_format")  # fmt: skip


def _object(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Refused(where, f"`{where.rpartition('.')[2]}` is an object")
    return value


def _known(given: dict[str, Any], fields: set[str], where: str) -> None:
    for name in given:
        if name not in fields:
            raise Refused(
                f"{where}.{name}", f"`{name}` is not a field here ({', '.join(sorted(fields))})"
            )
