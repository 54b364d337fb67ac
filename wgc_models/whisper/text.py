"""Whisper's decoding rules, as ``WhisperForConditionalGeneration.generate`` applies them to one
window of at most 30 s (its short-form path; timestamps: `wgc_models.whisper.timestamps`).

* **The prompt** (`WhisperTokens.prompt`): ``<|startoftranscript|> <|lang|> <|task|>
  <|notimestamps|>``, after ``<|startofprev|>`` and the text prompt's ids when the request has
  one (``WhisperProcessor.get_prompt_ids``: the text stripped, after one space).
* **The language** (`WhisperTokens.language_scores`): given, or detected as ``detect_language``
  does: one decoder pass over ``<|startoftranscript|>`` alone, the largest logit among the
  language tokens.
* **Each token** (`WhisperTokens.sampling`): the logits with ``suppress_tokens`` set to -inf,
  and ``begin_suppress_tokens`` too for the first generated token; greedy, or sampled at the
  request's temperature.
* **The end** (`WhisperTokens.limit`): the end-of-text token (kept, as ``generate`` keeps it:
  it stands for no text), or the sequence reaching ``min(max_length + min(max_target_positions
  // 2 - 1, prompt), max_target_positions)`` tokens.

The ids come from the checkpoint's ``generation_config.json`` (`WhisperTokens.from_dict`), the
file the published checkpoints carry; the ``<|startofprev|>`` id from its tokenizer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch

from wgc_models.layers.sampling import Sampling

TASKS = ("transcribe", "translate")


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


class GenerationConfigError(ValueError):
    """``generation_config.json`` lacks what Whisper's decoding needs."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WhisperTokens:
    start: int  # decoder_start_token_id: <|startoftranscript|>
    eos: int
    no_timestamps: int
    previous: int  # <|startofprev|>
    languages: Mapping[str, int]  # "en" -> the id of <|en|>
    tasks: Mapping[str, int]
    suppress: tuple[int, ...]
    begin_suppress: tuple[int, ...]
    max_length: int
    max_target_positions: int
    max_initial_timestamp: int | None = None  # timestamp steps the first may be in, at most

    @classmethod
    def from_dict(
        cls, raw: Mapping[str, Any], *, previous: int, max_target_positions: int
    ) -> WhisperTokens:
        need = ("decoder_start_token_id", "eos_token_id", "no_timestamps_token_id", "lang_to_id",
                "task_to_id")  # fmt: skip
        missing = [k for k in need if raw.get(k) is None]
        if missing:
            keys = ", ".join(f"`{k}`" for k in missing)
            raise GenerationConfigError(f"generation_config.json has no {keys}")
        eos = raw["eos_token_id"]
        tasks = {t: int(raw["task_to_id"][t]) for t in TASKS if t in raw["task_to_id"]}
        return cls(
            start=int(raw["decoder_start_token_id"]),
            eos=int(cast(list[Any], eos)[0] if isinstance(eos, list) else eos),
            no_timestamps=int(raw["no_timestamps_token_id"]),
            previous=previous,
            languages={k.strip("<|>"): int(v) for k, v in raw["lang_to_id"].items()},
            tasks=tasks,
            suppress=tuple(int(i) for i in raw.get("suppress_tokens") or ()),
            begin_suppress=tuple(int(i) for i in raw.get("begin_suppress_tokens") or ()),
            max_length=int(raw.get("max_length") or max_target_positions),
            max_target_positions=max_target_positions,
            max_initial_timestamp=_int_or_none(raw.get("max_initial_timestamp_index")),
        )

    @classmethod
    def from_pretrained(
        cls, path: str | Path, *, previous: int, max_target_positions: int
    ) -> WhisperTokens:
        file = Path(path) / "generation_config.json"
        if not file.is_file():
            raise GenerationConfigError(
                f"no generation_config.json at `{file}` (Whisper's checkpoints carry its special "
                "ids and suppressed tokens there)"
            )
        raw = json.loads(file.read_text())
        return cls.from_dict(raw, previous=previous, max_target_positions=max_target_positions)

    @property
    def max_prompt(self) -> int:
        """Text-prompt ids that may precede the start of transcript (Whisper's half context)."""
        return self.max_target_positions // 2 - 1

    def prompt(
        self, language: int, task: str, text_ids: Sequence[int] = (), *, timestamps: bool = False
    ) -> list[int]:
        """The decoder's prompt (module docstring); ``text_ids`` the text prompt's ids; with
        ``timestamps`` it ends at the task (`wgc_models.whisper.timestamps`)."""
        head = [self.previous, *text_ids] if text_ids else []
        tail = [] if timestamps else [self.no_timestamps]
        return [*head, self.start, language, self.tasks[task], *tail]

    def limit(self, prompt: int) -> int:
        """The longest the sequence may grow (prompt and generated tokens, with EOS)."""
        initial = min(self.max_target_positions // 2 - 1, prompt)
        return min(self.max_length + initial, self.max_target_positions)

    def language_scores(self, logits: torch.Tensor) -> torch.Tensor:
        """``logits`` (``[..., vocab]``) with every non-language token at -inf."""
        keep = torch.zeros(logits.shape[-1], dtype=torch.bool, device=logits.device)
        keep[list(self.languages.values())] = True
        return logits.masked_fill(~keep, float("-inf"))

    def sampling(self, first: bool, temperature: float) -> Sampling:
        """How the next token is chosen (``first``: the first generated one)."""
        suppress = self.suppress + (self.begin_suppress if first else ())
        if temperature > 0:
            return Sampling(do_sample=True, temperature=temperature, suppress=suppress)
        return Sampling(suppress=suppress)
