"""The Thinker → Talker hand-off of Qwen3-Omni, streamed: Thinker passes in, Talker inputs out.

HF's ``Qwen3OmniMoeForConditionalGeneration.generate`` waits for the Thinker to finish, then
builds the Talker's prompt from the whole sequence. The same inputs come out when they are
built a Thinker pass at a time (`TalkerFeed`), because each depends only on rows already read:

* **user turns** — every prompt row whose turn (the token after the last ``<|im_start|>`` at or
  before it) is ``user``: `Talker.user_rows` (``_get_talker_user_parts``). System turns and
  earlier assistant turns are left out, as HF does;
* **the assistant prefix** — at the first decode pass, the prompt's last assistant turn's
  first 4 rows (``<|im_start|>``, ``assistant``, ``\\n`` and the first generated token, whose
  embedding that pass brings): `Talker.assistant_prefix` (``_get_talker_assistant_parts``);
* **one text row per Talker step** — the assistant turn's later rows, one per step (each
  generated token once the Thinker reads it back), then ``tts_eos`` once the Thinker is done,
  then ``tts_pad`` (``trailing_text_hidden`` / ``tts_pad_embed``). The Thinker's final token
  (its end-of-turn) is never read back, so never spoken, as in HF.
"""

from __future__ import annotations

from collections import deque

import torch

from wgc_models.layers.host_values import int_list
from wgc_models.qwen3_omni.omni_talker import Talker
from wgc_models.qwen3_omni.omni_thinker import Thinker, ThinkerPass

Row = tuple[int, torch.Tensor, torch.Tensor]  # token id, input embedding, accept-layer hidden


class TalkerFeed:
    """One request's hand-off state (see the module docstring)."""

    def __init__(self, thinker: Thinker, talker: Talker, speaker: int):
        self.thinker, self.talker, self.speaker = thinker, talker, speaker
        self.tokens = talker.tokens
        self._role: int | None = None  # the current turn's role token
        self._pending: Row | None = None  # an `<|im_start|>` row waiting for its role
        self._assistant: list[torch.Tensor] = []  # embeddings of the last assistant turn
        self._started = False
        self._text: deque[torch.Tensor] = deque()
        self._done = False
        self._eos_sent = False

    @torch.inference_mode()
    def push(
        self, out: ThinkerPass, *, decode: bool
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """Take one Thinker pass, a prompt segment or (``decode``) a decode step: the user rows
        to prefill now (``[n, talker hidden]`` or None) and, at the first decode step, the
        9-row prefix to prefill after them (else None). Only then is the prompt known whole,
        so which assistant turn is its last."""
        user: list[Row] = []
        for i, tok in enumerate(int_list(out.ids)):
            row = (tok, out.embeds[i], out.hidden[i])
            if self._pending is not None:  # this token names the turn `<|im_start|>` opened
                self._role = tok
                self._classify(self._pending, user, opens_turn=True)
                self._pending = None
            if tok == self.tokens.im_start and not self._started:
                self._pending = row
                continue
            self._classify(row, user, opens_turn=False)
        rows = None
        if user:
            ids = torch.tensor([r[0] for r in user], device=out.ids.device)
            embeds = torch.stack([r[1] for r in user])
            hidden = torch.stack([r[2] for r in user])
            rows = self.talker.user_rows(embeds, hidden, self.thinker.multimodal(ids))
        prefix = None
        if decode and not self._started and len(self._assistant) >= 4:
            self._started = True
            prefix = self.talker.assistant_prefix(torch.stack(self._assistant[:4]), self.speaker)
            self._text.extend(self._assistant[4:])
        return rows, prefix

    def _classify(self, row: Row, user: list[Row], *, opens_turn: bool) -> None:
        if self._started:
            self._text.append(row[1])
        elif self._role == self.tokens.user:
            user.append(row)
        elif self._role == self.tokens.assistant:
            if opens_turn:  # only the last assistant turn speaks
                self._assistant = []
            self._assistant.append(row[1])

    @property
    def started(self) -> bool:
        """Whether the assistant prefix has been handed out (the Talker may decode)."""
        return self._started

    def thinker_done(self) -> None:
        self._done = True

    @torch.inference_mode()
    def text_row(self) -> torch.Tensor | None:
        """The text part of the next Talker step's input ``[talker hidden]``: the next
        assistant row, else ``tts_eos`` (once, after `thinker_done`), else ``tts_pad``; None
        while the Thinker has not yet read the row this step needs."""
        if self._text:
            return self.talker.text_projection(self._text.popleft())
        if not self._done:
            return None
        rows = self.talker.tts_rows()
        if not self._eos_sent:
            self._eos_sent = True
            return rows[1]
        return rows[2]
