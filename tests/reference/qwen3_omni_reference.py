"""Qwen3-Omni as transformers runs it, by hand in one process: what
``Qwen3OmniMoeForConditionalGeneration.generate`` does, step by step, on its own modules.

1. The Thinker (``model.thinker``) decodes the text token by token with its KV cache, keeping
   each pass's input embeddings and accept-layer hidden states (``output_hidden_states``).
2. The Talker's prompt is built by ``generate``'s own code: the user turns
   (``model._get_talker_user_parts``), the assistant prefix and the trailing text rows
   (``model._get_talker_assistant_parts``), with the same user-turn selection.
3. The Talker (``model.talker``) decodes codec frames: its prefill, then per step the code
   predictor (``model.talker.code_predictor``, a fresh cache per frame) for the previous
   frame's residual codes, the summed codec embeddings plus the next text row as the input,
   until the codec end-of-speech (never sampled: the special codec ids are suppressed, as
   ``generate`` does).
4. ``model.code2wav.chunked_decode`` with the stream's chunking (25 new frames, 25 of left
   context; ``generate`` itself uses 300).

Tokens are chosen with `wgc_models.layers.sampling`, from the generators `SpeechOptions`
names, so seeded sampling is comparable; greedy runs equal ``generate`` (a test checks it).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from tests.reference.speech import DEFAULT, Speech, SpeechOptions
from wgc_models.layers.sampling import choose
from wgc_models.qwen3_omni.code_predictor import predictor_sampling


@torch.inference_mode()
def think(model: Any, prompt: list[int], opts: SpeechOptions):
    """The Thinker's tokens, and the embeddings / accept-layer hidden states of every token it
    read (``[1, read, hidden]`` each)."""
    from transformers import DynamicCache

    thinker, accept = model.thinker, model.config.talker_config.accept_hidden_layer
    eos = model.config.im_end_token_id
    gen = opts.generator(0)
    ids = torch.tensor([prompt])
    cache = DynamicCache(config=thinker.config.text_config)
    embeds, hidden, out = [], [], []
    step = ids
    while True:
        res = thinker(input_ids=step, cache=cache, use_cache=True, output_hidden_states=True)
        embeds.append(res.hidden_states[0])
        hidden.append(res.hidden_states[accept])
        tok = choose(res.logits[:, -1].float(), opts.sampling, [ids[0]], gen)
        out.append(int(tok[0]))
        ids = torch.cat((ids, tok[None]), dim=1)
        if out[-1] == eos or len(out) >= opts.max_new_tokens:
            return out, torch.cat(embeds, 1), torch.cat(hidden, 1)
        step = tok[None]


@torch.inference_mode()
def talker_inputs(
    model: Any, prompt: list[int], generated: list[int], embeds, hidden, speaker: int
):
    """``generate``'s Talker prompt (one sequence, no padding): the prefill embeddings and the
    trailing text rows."""
    cfg = model.config
    input_ids = torch.tensor([prompt])
    sequences = torch.tensor([prompt + generated])
    tc = cfg.thinker_config
    mm = (
        (sequences == tc.audio_token_id)
        | (sequences == tc.image_token_id)
        | (sequences == tc.video_token_id)
    )
    n = input_ids.shape[1]
    pos = torch.arange(n)[None]
    starts = torch.where(input_ids == cfg.im_start_token_id, pos, pos.new_full((), -1))
    previous = torch.cummax(starts, dim=-1).values.clamp_min(0)
    roles = input_ids.gather(1, (previous + 1).clamp_max(n - 1))
    user = (roles == cfg.user_token_id)[0]
    full = model._get_talker_user_parts(0, n, mm, hidden, embeds)
    user_embeds = full[:, user]
    heads = (input_ids[:, :-1] == cfg.im_start_token_id) & (
        input_ids[:, 1:] == cfg.assistant_token_id
    )
    start = int(torch.nonzero(heads[0]).flatten()[-1])
    special = torch.tensor([[cfg.tts_bos_token_id, cfg.tts_eos_token_id, cfg.tts_pad_token_id]])
    bos, eos, pad = model.talker.text_projection(
        model.thinker.get_input_embeddings()(special)
    ).chunk(3, dim=1)
    assistant, _, trailing = model._get_talker_assistant_parts(
        start, sequences.shape[-1], speaker, embeds, pad, bos, eos
    )
    return torch.cat((user_embeds, assistant), dim=1), trailing, pad


@torch.inference_mode()
def talk(model: Any, inputs, trailing, pad, opts: SpeechOptions) -> torch.Tensor:
    """The Talker's codec frames ``[frames, groups]`` (``max_frames`` of them at most: HF's
    ``talker_max_new_tokens`` is one more, the last first code having no frame)."""
    from transformers import DynamicCache

    talker, cp = model.talker, model.talker.code_predictor
    tcfg = model.config.talker_config
    groups, eos = tcfg.num_code_groups, tcfg.codec_eos_token_id
    suppress = tuple(
        i
        for i in range(tcfg.code_predictor_config.vocab_size, tcfg.text_config.vocab_size)
        if i != eos
    )
    params = replace(opts.talker_sampling, suppress=opts.talker_sampling.suppress + suppress)
    cp_params = predictor_sampling(params)
    gen = opts.generator(1)
    cache = DynamicCache(config=tcfg.text_config)
    res = talker(inputs_embeds=inputs, cache=cache, use_cache=True, output_hidden_states=True)
    history: list[int] = []
    frames: list[torch.Tensor] = []
    while True:
        c0 = choose(
            res.logits[:, -1].float(), params, [torch.tensor(history, dtype=torch.long)], gen
        )
        history.append(int(c0[0]))
        if history[-1] == eos or len(frames) >= opts.max_frames:
            break
        past = res.hidden_states[0][-1][:, -1:]
        c0_embed = talker.get_input_embeddings()(c0[None])
        pcache = DynamicCache(config=tcfg.code_predictor_config)
        out = cp(inputs_embeds=torch.cat((past, c0_embed), dim=1), cache=pcache, use_cache=True)
        codes, total = [c0], c0_embed
        for j in range(1, groups):
            code = choose(out.logits[:, -1].float(), cp_params, (), gen)
            codes.append(code)
            total = total + cp.get_input_embeddings()[j - 1](code[None])
            if j < groups - 1:
                out = cp(input_ids=code[None], cache=pcache, use_cache=True, generation_steps=j)
        frames.append(torch.cat(codes))
        step = len(frames) - 1
        text = trailing[:, step : step + 1] if step < trailing.shape[1] else pad
        res = talker(
            inputs_embeds=total + text,
            cache=cache,
            use_cache=True,
            output_hidden_states=True,
            generation_step=step,
        )
    return torch.stack(frames) if frames else torch.zeros(0, groups, dtype=torch.long)


@torch.inference_mode()
def run(model: Any, prompt: list[int], opts: SpeechOptions = DEFAULT) -> Speech:
    """One request from the chat prompt's ids (ending ``<|im_start|>assistant\\n``) to the
    waveform, the transformers way."""
    tokens, embeds, hidden = think(model, prompt, opts)
    speaker = model.config.talker_config.speaker_id[opts.speaker]
    inputs, trailing, pad = talker_inputs(model, prompt, tokens, embeds, hidden, speaker)
    codes = talk(model, inputs, trailing, pad, opts)
    wav = model.code2wav.chunked_decode(codes.T[None], chunk_size=25, left_context_size=25)
    return Speech(tokens, wav.reshape(-1).float(), codes=codes)
