"""Orpheus from wgc's components, stepped as the ``.walk`` file's nodes run it: the LM
(`DecoderEngine` over the paged pool: one prefill, then one decode step per token, the KV kept)
appends every token it produces to the ``tokens`` stream; each time the stream holds a new
``sliding(window = 28, stride = 7)`` window, the vocoder (`OrpheusVocoder`) turns it into one
frame of audio. A trailing fragment shorter than a window is dropped (``final drop``).
"""

from __future__ import annotations

import torch

from tests.reference.speech import DEFAULT, Speech, SpeechOptions
from wgc_models.layers.sampling import choose
from wgc_models.llama.engine import DecoderEngine
from wgc_models.orpheus.model import FRAME, WINDOW_FRAMES, OrpheusVocoder, audio_mask

WINDOW = FRAME * WINDOW_FRAMES


@torch.inference_mode()
def run(
    engine: DecoderEngine,
    vocoder: OrpheusVocoder,
    prompt: list[int],
    opts: SpeechOptions = DEFAULT,
    *,
    request: str = "orpheus",
) -> Speech:
    """One request from prompt ids (`OrpheusTokens.prompt`) to the waveform."""
    tokens = vocoder.tokens
    gen = opts.generator(0)
    seq = [(request, "main")]
    history = torch.tensor(prompt, dtype=torch.long)
    logits = engine.prefill(seq, [history])
    stream: list[int] = []
    chunks: list[torch.Tensor] = []
    try:
        while True:
            if opts.audio_only:
                logits = audio_mask(logits, tokens, [len(stream)])
            tok = choose(logits, opts.sampling, [history], gen)
            stream.append(int(tok[0]))
            history = torch.cat((history, tok))
            if len(stream) >= WINDOW and (len(stream) - WINDOW) % FRAME == 0:
                k = (len(stream) - WINDOW) // FRAME
                audio = vocoder.window(torch.tensor(stream[-WINDOW:]), opts.noise(k))
                if audio is not None:
                    chunks.append(audio)
            if stream[-1] == tokens.end_of_speech or len(stream) >= opts.max_new_tokens:
                break
            logits = engine.decode(seq, tok)
    finally:
        engine.free(request)
    audio = torch.cat(chunks) if chunks else torch.zeros(0)
    return Speech(stream, audio, [c.numel() for c in chunks])
