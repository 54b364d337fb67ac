"""Orpheus end to end in one process: the reference pipeline (transformers ``LlamaForCausalLM`` +
``snac.SNAC`` driven by hand with Orpheus's streaming decoder rules) and the pipeline of wgc's
components (`DecoderEngine` stepped token by token over the paged pool, the sliding(28, 7)
stream, `OrpheusVocoder`) give the same tokens and the same waveform on the same weights:
greedy and seeded sampling, constrained to audio tokens or not.

The tiny LM is the Orpheus config (`TINY_LM`: Llama 3 rotary scaling, tied embeddings, the
audio-token vocabulary; `checkpoints.orpheus` writes both checkpoints); its logits are checked
against transformers first.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace

import pytest
import torch

transformers = pytest.importorskip("transformers")
snac = pytest.importorskip("snac")

from tests.reference import checkpoints, orpheus, orpheus_reference  # noqa: E402
from tests.reference.speech import SpeechOptions  # noqa: E402
from wgc_models.layers.config import DecoderConfig  # noqa: E402
from wgc_models.layers.sampling import Sampling  # noqa: E402
from wgc_models.llama.checkpoint import from_pretrained  # noqa: E402
from wgc_models.llama.engine import DecoderEngine  # noqa: E402
from wgc_models.orpheus.checkpoint import snac_from_pretrained  # noqa: E402
from wgc_models.orpheus.config import (  # noqa: E402
    REAL_LM,
    TINY_SNAC,
    TINY_TOKENS,
)
from wgc_models.orpheus.model import OrpheusVocoder  # noqa: E402

TOL = 1e-4
PROMPT = TINY_TOKENS.prompt([5, 6, 7, 8, 9])
SAMPLED = Sampling(do_sample=True, temperature=0.6, top_p=0.8, repetition_penalty=1.3)


@contextlib.contextmanager
def one_thread():
    """Tiny tensors: one intra-op thread (waking a second costs more than the op)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    with one_thread():
        path = tmp_path_factory.mktemp("orpheus")
        lm, codec = checkpoints.orpheus(path, seed=0)
        decoder = from_pretrained(path / "lm")
        engine = DecoderEngine.build(decoder, pages=64, page_size=16)
        vocoder = OrpheusVocoder(snac_from_pretrained(path / "snac"), TINY_TOKENS)
        yield lm, codec, engine, vocoder


def test_lm_logits_match_transformers(models):
    lm, _, engine, _ = models
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, TINY_TOKENS.vocab_size, (len(PROMPT) + 12,), generator=g)
    with torch.no_grad():
        ref = lm(ids[None]).logits[0].float()
    n = len(PROMPT)
    err = (engine.prefill([("r", "main")], [ids[:n]], all_logits=True)[0] - ref[:n]).abs().max()
    for i in range(n, ids.numel()):
        step = engine.decode([("r", "main")], ids[i : i + 1])
        err = max(err, (step[0] - ref[i]).abs().max())
    engine.free("r")
    assert float(err) <= TOL


def test_real_lm_config_reads_as_orpheus_3b():
    cfg = DecoderConfig.from_dict(transformers.LlamaConfig(**REAL_LM).to_dict())
    assert (cfg.vocab_size, cfg.hidden_size, cfg.num_layers) == (156940, 3072, 28)
    assert (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim) == (24, 8, 128)
    assert (cfg.rope_type, cfg.rope_factor, cfg.tie_word_embeddings) == ("llama3", 32.0, True)


def _both(models, opts):
    lm, codec, engine, vocoder = models
    ours = orpheus.run(engine, vocoder, PROMPT, opts)
    ref = orpheus_reference.run(lm, codec, PROMPT, TINY_TOKENS, opts)
    assert engine.pool.used_pages == 0  # the request's pages were given back
    return ours, ref


@pytest.mark.parametrize(
    "opts",
    [
        SpeechOptions(max_new_tokens=63, audio_only=True),
        SpeechOptions(max_new_tokens=63, audio_only=True, sampling=SAMPLED, seed=3),
    ],
    ids=["greedy", "sampled"],
)
def test_same_waveform_as_the_reference(models, opts):
    ours, ref = _both(models, opts)
    assert ours.tokens == ref.tokens
    assert ours.chunks == ref.chunks and ours.chunks, "no audio at all"
    assert set(ours.chunks) == {TINY_SNAC.samples_per_frame}
    # n frames of tokens give n - 3 frames of audio (the first and the last two are context)
    frames = len(ours.tokens) // 7
    if TINY_TOKENS.end_of_speech not in ours.tokens:
        assert len(ours.chunks) == frames - 3
    assert (ours.audio - ref.audio).abs().max().item() <= TOL


def test_unconstrained_greedy_tokens_match(models):
    """Without the audio constraint a random LM speaks few valid windows; the tokens still
    agree (the stream and the reference's filter may then differ on which windows decode)."""
    ours, ref = _both(models, SpeechOptions(max_new_tokens=30))
    assert ours.tokens == ref.tokens


def test_seeded_sampling_is_deterministic(models):
    _, _, engine, vocoder = models
    opts = SpeechOptions(max_new_tokens=35, audio_only=True, sampling=SAMPLED, seed=11)
    a = orpheus.run(engine, vocoder, PROMPT, opts)
    b = orpheus.run(engine, vocoder, PROMPT, opts)
    c = orpheus.run(engine, vocoder, PROMPT, replace(opts, seed=12))
    assert a.tokens == b.tokens and torch.equal(a.audio, b.audio)
    assert a.tokens != c.tokens
