"""Orpheus as its public reference runs it, by hand in one process: a transformers
``LlamaForCausalLM`` decoding token by token (its own KV cache), then the Orpheus streaming
decoder's rules over the tokens (canopyai/Orpheus-TTS ``orpheus_tts/decoder.py``:
``turn_token_into_id``, ``tokens_decoder``, ``convert_to_audio``) with ``snac.SNAC.decode``.

The tokens are chosen with `wgc_models.layers.sampling` (HF ``generate``'s processing) so
that sampling with a seed is comparable; the noise of SNAC's noise blocks comes from torch's
global generator, seeded before each window (`SpeechOptions.noise_seed`).
"""

from __future__ import annotations

from typing import Any

import torch

from tests.reference.speech import DEFAULT, Speech, SpeechOptions
from wgc_models.layers.sampling import choose
from wgc_models.orpheus.model import FRAME, WINDOW_FRAMES, OrpheusTokens, audio_mask

WINDOW = FRAME * WINDOW_FRAMES


@torch.inference_mode()
def generate(lm: Any, prompt: list[int], tokens: OrpheusTokens, opts: SpeechOptions) -> list[int]:
    """The LM's tokens after ``prompt``, up to and with ``end_of_speech``."""
    from transformers import DynamicCache

    gen = opts.generator(0)
    ids = torch.tensor([prompt])
    cache = DynamicCache(config=lm.config)
    logits = lm(input_ids=ids, cache=cache, use_cache=True).logits[:, -1].float()
    out: list[int] = []
    while True:
        if opts.audio_only:
            logits = audio_mask(logits, tokens, [len(out)])
        tok = choose(logits, opts.sampling, [ids[0]], gen)
        out.append(int(tok[0]))
        ids = torch.cat((ids, tok[None]), dim=1)
        if out[-1] == tokens.end_of_speech or len(out) >= opts.max_new_tokens:
            return out
        logits = lm(input_ids=tok[None], cache=cache, use_cache=True).logits[:, -1].float()


def _turn_token_into_id(token: int, index: int, tokens: OrpheusTokens) -> int | None:
    """``int(N) − 10 − (index % 7) · 4096`` for ``<custom_token_N>``, None for other ids."""
    if token < tokens.tokeniser_length:
        return None
    return token - tokens.audio_offset - (index % FRAME) * tokens.codebook_size


@torch.inference_mode()
def vocode(
    snac: Any, generated: list[int], tokens: OrpheusTokens, opts: SpeechOptions
) -> list[torch.Tensor]:
    """``tokens_decoder``: the audio chunks the reference streams for ``generated``."""
    spf = snac.hop_length * snac.vq_strides[0]
    buffer: list[int] = []
    chunks: list[torch.Tensor] = []
    for tok in generated:
        code = _turn_token_into_id(tok, len(buffer), tokens)
        if code is None or code <= 0:
            continue
        buffer.append(code)
        if len(buffer) % FRAME == 0 and len(buffer) > WINDOW - 1:
            f = buffer[-WINDOW:]
            c0: list[int] = []
            c1: list[int] = []
            c2: list[int] = []
            for i in range(0, WINDOW, FRAME):  # `convert_to_audio`
                c0.append(f[i])
                c1 += [f[i + 1], f[i + 4]]
                c2 += [f[i + 2], f[i + 3], f[i + 5], f[i + 6]]
            if any(c >= tokens.codebook_size for c in c0 + c1 + c2):
                continue
            codes = [torch.tensor([c]) for c in (c0, c1, c2)]
            torch.manual_seed(opts.noise_seed((len(buffer) - WINDOW) // FRAME))
            chunks.append(snac.decode(codes)[0, 0, spf : 2 * spf].float())
    return chunks


def run(
    lm: Any,
    snac: Any,
    prompt: list[int],
    tokens: OrpheusTokens,
    opts: SpeechOptions = DEFAULT,
) -> Speech:
    """One request from prompt ids to the waveform, the reference way."""
    generated = generate(lm, prompt, tokens, opts)
    chunks = vocode(snac, generated, tokens, opts)
    audio = torch.cat(chunks) if chunks else torch.zeros(0)
    return Speech(generated, audio, [c.numel() for c in chunks])
