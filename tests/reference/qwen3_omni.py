"""Qwen3-Omni from wgc's components, stepped as the ``.walk`` file's three models run side by
side: every Thinker pass (`ThinkerEngine`) is handed to the Talker (`TalkerFeed`: the
``fixed(1)`` ``thinker_states`` stream); the Talker (`TalkerEngine`) prefills the user turns
(``talker_prefill``), then the assistant prefix once the first decode pass arrives
(``talker_last_prefill``), then takes one step per pass (``talker_decode``, on ``tts_eos`` /
``tts_pad`` rows after the Thinker is done) until the codec end-of-speech; every frame goes to
the ``codes`` stream, which hands Code2Wav 25 new frames with up to 25 of left context
(``left_context(25, 25)``, the last chunk short).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from tests.reference.speech import DEFAULT, Speech, SpeechOptions
from wgc_models.layers.sampling import choose
from wgc_models.qwen3_omni.code2wav import Code2Wav
from wgc_models.qwen3_omni.code_predictor import predictor_sampling
from wgc_models.qwen3_omni.omni_handoff import TalkerFeed
from wgc_models.qwen3_omni.omni_talker import TalkerEngine
from wgc_models.qwen3_omni.omni_thinker import ThinkerEngine

CHUNK, LEFT = 25, 25


@dataclass(slots=True)
class _Codes:
    """The ``codes`` stream into Code2Wav: ``left_context(CHUNK, LEFT)``."""

    code2wav: Code2Wav
    frames: list[torch.Tensor]
    sent: int = 0

    def chunks(self, final: bool) -> list[torch.Tensor]:
        out = []
        while len(self.frames) - self.sent >= CHUNK or (final and len(self.frames) > self.sent):
            end = min(self.sent + CHUNK, len(self.frames))
            ctx = min(LEFT, self.sent)
            window = torch.stack(self.frames[self.sent - ctx : end])
            out.append(self.code2wav.chunk(window, ctx))
            self.sent = end
        return out


@torch.inference_mode()
def run(
    thinker: ThinkerEngine,
    talker: TalkerEngine,
    code2wav: Code2Wav,
    prompt: list[int],
    opts: SpeechOptions = DEFAULT,
    *,
    request: str = "omni",
) -> Speech:
    """One request from the chat prompt's ids (ending ``<|im_start|>assistant\\n``) to the
    waveform."""
    cfg, tokens = talker.talker.config, talker.talker.tokens
    feed = TalkerFeed(thinker.thinker, talker.talker, cfg.speakers[opts.speaker])
    t_gen, s_gen = opts.generator(0), opts.generator(1)
    params = replace(
        opts.talker_sampling, suppress=opts.talker_sampling.suppress + cfg.suppressed()
    )
    cp_params = predictor_sampling(params)
    seq = [(request, "main")]
    history = torch.tensor(prompt, dtype=torch.long)
    text: list[int] = []
    thinker_done = False
    step = history
    c0: torch.Tensor | None = None
    hidden: torch.Tensor | None = None
    spoken: list[int] = []
    stream = _Codes(code2wav, [])
    audio: list[torch.Tensor] = []
    try:
        while True:
            if not thinker_done:  # one Thinker pass, handed to the Talker
                out = thinker.forward(seq, [step])[0]
                rows, prefix = feed.push(out, decode=len(text) > 0)
                if rows is not None:
                    talker.forward(seq, [rows])
                tok = choose(out.logits[None], opts.sampling, [history], t_gen)
                text.append(int(tok[0]))
                history = torch.cat((history, tok))
                step = tok
                if text[-1] == tokens.im_end or len(text) >= opts.max_new_tokens:
                    thinker_done = True
                    feed.thinker_done()
                if prefix is not None:  # talker_last_prefill
                    logits, hidden = talker.forward(seq, [prefix])
                    c0 = _first_code(logits, params, spoken, s_gen)
                    continue
            if c0 is None or hidden is None:
                if thinker_done:
                    break  # the Thinker ended before the Talker could start
                continue
            if c0.item() == cfg.codec_eos or len(stream.frames) >= opts.max_frames:
                break
            row = feed.text_row()
            if row is None:
                continue  # wait for the Thinker's next pass
            codes, embed = talker.frame(hidden, c0, sampling=cp_params, generator=s_gen)
            stream.frames.append(codes[0])
            audio += stream.chunks(final=False)
            logits, hidden = talker.forward(seq, [embed + row[None]])
            c0 = _first_code(logits, params, spoken, s_gen)
        audio += stream.chunks(final=True)
    finally:
        thinker.free(request)
        talker.free(request)
    frames = torch.stack(stream.frames) if stream.frames else torch.zeros(0, cfg.num_code_groups)
    wav = torch.cat(audio) if audio else torch.zeros(0)
    return Speech(text, wav, [a.numel() for a in audio], codes=frames.long())


def _first_code(logits, params, spoken: list[int], gen) -> torch.Tensor:
    c0 = choose(logits, params, [torch.tensor(spoken, dtype=torch.long)], gen)
    spoken.append(int(c0[0]))
    return c0
