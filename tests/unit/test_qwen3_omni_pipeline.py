"""Qwen3-Omni end to end in one process: the reference pipeline (transformers' modules driven by
hand, `qwen3_omni_reference`) equals ``Qwen3OmniMoeForConditionalGeneration.generate``, and the
pipeline of wgc's components (`qwen3_omni`: the Thinker, Talker and Code2Wav stepped side by
side over their paged pools, Thinker → Talker one pass per step, Talker → Code2Wav in
left_context(25, 25) chunks) gives the same text, codec frames and waveform as the reference,
greedy and with seeded sampling.
"""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import replace

import pytest
import torch

from tests.narrow import all_present, present

transformers = pytest.importorskip("transformers")

from tests.reference import checkpoints, qwen3_omni, qwen3_omni_reference  # noqa: E402
from tests.reference.speech import SpeechOptions  # noqa: E402
from wgc_models.layers.sampling import Sampling  # noqa: E402
from wgc_models.qwen3_omni.code2wav import Code2Wav  # noqa: E402
from wgc_models.qwen3_omni.config import NEWLINE, TINY_TOKENS  # noqa: E402
from wgc_models.qwen3_omni.omni_handoff import TalkerFeed  # noqa: E402
from wgc_models.qwen3_omni.omni_talker import Talker, TalkerEngine  # noqa: E402
from wgc_models.qwen3_omni.omni_thinker import Thinker, ThinkerEngine  # noqa: E402

TOL = 1e-4
T = TINY_TOKENS
SYSTEM = [T["im_start"], T["system"], NEWLINE, 30, 31, T["im_end"], NEWLINE]
USER = [T["im_start"], T["user"], NEWLINE, 20, 21, 22, T["im_end"], NEWLINE]
EARLIER = [T["im_start"], T["assistant"], NEWLINE, 40, 41, T["im_end"], NEWLINE]
ASK = [T["im_start"], T["assistant"], NEWLINE]
PROMPT = SYSTEM + USER + ASK
# two user turns around an earlier answer: the Talker hears only the user turns
CHAT = SYSTEM + USER + EARLIER + [T["im_start"], T["user"], NEWLINE, 23, T["im_end"], NEWLINE] + ASK
VARIED = Sampling(
    repetition_penalty=1.5
)  # greedy, but a random Thinker then says more than one word
SAMPLED = Sampling(do_sample=True, temperature=0.9, top_k=50, top_p=0.9, repetition_penalty=1.05)


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
def omni(tmp_path_factory):
    with one_thread():
        path = tmp_path_factory.mktemp("omni")
        model = checkpoints.qwen3_omni(path, seed=1)
        thinker, talker = Thinker.from_pretrained(path, audio=False), Talker.from_pretrained(path)
        engines = (
            ThinkerEngine.build(
                thinker, accept_hidden_layer=talker.config.accept_hidden_layer, pages=32
            ),
            TalkerEngine.build(talker, pages=32),
            Code2Wav.from_pretrained(path),
        )
        yield model, engines


def _ours(omni, prompt, opts):
    _, (thinker, talker, code2wav) = omni
    out = qwen3_omni.run(thinker, talker, code2wav, prompt, opts)
    assert thinker.pool.used_pages == talker.pool.used_pages == 0  # pages given back
    return out


@pytest.mark.slow
def test_reference_equals_generate(omni):
    """The hand-driven reference is what ``generate`` does (greedy; ``generate`` decodes the
    codes in chunks of 300, so the codes are compared through that decode)."""
    model, _ = omni
    opts = SpeechOptions(max_new_tokens=5, max_frames=12)
    ref = qwen3_omni_reference.run(model, PROMPT, opts)
    with torch.no_grad():
        seq, wav = model.generate(
            torch.tensor([PROMPT]), speaker="ethan", thinker_max_new_tokens=5,
            thinker_do_sample=False, talker_do_sample=False, talker_max_new_tokens=13,
            talker_repetition_penalty=1.0,
        )  # fmt: skip
        ref_wav = model.code2wav.chunked_decode(
            present(ref.codes).T[None], chunk_size=300, left_context_size=25
        )
    assert seq[0, len(PROMPT) :].tolist() == ref.tokens
    assert present(ref.codes).shape[1] == 16 and 5 < present(ref.codes).shape[0] <= 12
    assert torch.equal(ref_wav.reshape(-1), wav.reshape(-1).float())


@pytest.mark.slow
@pytest.mark.parametrize(
    "prompt,opts",
    [
        (PROMPT, SpeechOptions(max_new_tokens=8, max_frames=27, sampling=VARIED)),
        (CHAT, SpeechOptions(max_new_tokens=5, max_frames=27, sampling=VARIED, speaker="aiden")),
        (PROMPT, SpeechOptions(max_new_tokens=8, max_frames=27, sampling=SAMPLED,
                               talker_sampling=SAMPLED, seed=5)),
    ],
    ids=["greedy", "chat", "sampled"],
)  # fmt: skip
def test_same_waveform_as_the_reference(omni, prompt, opts):
    model, _ = omni
    ours = _ours(omni, prompt, opts)
    ref = qwen3_omni_reference.run(model, prompt, opts)
    assert ours.tokens == ref.tokens and len(set(ours.tokens)) > 1
    assert ours.codes is not None and ref.codes is not None
    assert torch.equal(ours.codes, ref.codes) and ours.codes.shape[0] > 25  # two chunks at least
    assert ours.audio.shape == ref.audio.shape
    assert (ours.audio - ref.audio).abs().max().item() <= TOL
    assert ours.audio.std().item() > 0.05
    # streamed as the codes stream chunks them: 25 frames a chunk, the last one short
    frames = ours.codes.shape[0]
    code2wav = omni[1][2]
    sizes = [min(25, frames - s) for s in range(0, frames, 25)]  # new frames per chunk
    ctx = [min(25, s) for s in range(0, frames, 25)]
    want = [code2wav.samples(c + n) - c * 1920 for c, n in zip(ctx, sizes, strict=True)]
    assert ours.chunks == want


def test_seeded_sampling_is_deterministic(omni):
    opts = SpeechOptions(max_new_tokens=5, max_frames=8, sampling=SAMPLED,
                         talker_sampling=SAMPLED, seed=21)  # fmt: skip
    a, b = _ours(omni, PROMPT, opts), _ours(omni, PROMPT, opts)
    c = _ours(omni, PROMPT, replace(opts, seed=22))
    assert a.tokens == b.tokens and torch.equal(a.audio, b.audio)
    assert a.codes is not None and c.codes is not None
    assert a.tokens != c.tokens or not torch.equal(a.codes, c.codes)


@pytest.mark.parametrize("cuts", [(), (4,), (1, 8, 15, 22), tuple(range(1, len(CHAT)))])
def test_handoff_in_pieces_equals_generates_inputs(omni, cuts):
    """The Talker's inputs built a Thinker pass at a time (prompt segments cut anywhere, even
    right after an ``<|im_start|>``, then one pass per generated token) are ``generate``'s."""
    model, (thinker, talker, _) = omni
    opts = SpeechOptions(max_new_tokens=5, sampling=VARIED)
    tokens, embeds, hidden = qwen3_omni_reference.think(model, CHAT, opts)
    speaker = talker.talker.config.speakers["ethan"]
    want, trailing, _ = qwen3_omni_reference.talker_inputs(
        model, CHAT, tokens, embeds, hidden, speaker
    )
    feed = TalkerFeed(thinker.thinker, talker.talker, speaker)
    bounds = [0, *cuts, len(CHAT)]
    passes = [(CHAT[a:b], False) for a, b in itertools.pairwise(bounds)]
    passes += [([t], True) for t in tokens[:-1]]  # the last token is never read back
    got = []
    for ids, decode in passes:
        out = thinker.forward([("h", "main")], [torch.tensor(ids)])[0]
        rows, prefix = feed.push(out, decode=decode)
        got += [r for r in (rows, prefix) if r is not None]
    thinker.free("h")
    assert feed.started
    feed.thinker_done()
    text = all_present(feed.text_row() for _ in range(trailing.shape[1] + 1))
    assert all(t is not None for t in text)
    with torch.no_grad():
        pad = model.talker.text_projection(
            model.thinker.get_input_embeddings()(torch.tensor([T["tts_pad"]]))
        )
    assert (torch.cat(got) - want[0]).abs().max().item() <= TOL
    assert (torch.stack(text[:-1]) - trailing[0]).abs().max().item() <= TOL  # ends with tts_eos
    assert (text[-1] - pad[0]).abs().max().item() <= TOL  # then tts_pad
