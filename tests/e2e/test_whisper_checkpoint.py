"""Whisper served from a checkpoint transformers wrote (`tests.unit.whisper_support`), end to
end: audio in, text out, through the compiled runtime (`LocalCluster`, both placements) and as
processes (`wgc run` with a WAV file), equal to ``WhisperForConditionalGeneration.generate``
on the feature extractor's features of the same audio, decoded by ``WhisperTokenizerFast``:
a given language, a detected one, translation, a text prompt, an early end of text, two
windows in one request, four requests decoded as one batch; sampling seeded by the request; a
checkpoint without its tokenizer, timestamps, a clip past the window and an overlong prompt
refused with their reasons."""

from __future__ import annotations

import copy
import subprocess
import wave

import pytest
import torch

from tests.e2e.real_support import ROOT, compile_to, run_local
from tests.unit.whisper_support import clip, generate, hf_model, hf_tokenizer, write_checkpoint
from wgc.interp import segment
from wgc_models.whisper import config as tiny

transformers = pytest.importorskip("transformers")
TEXT = ("text", "detokenize", "text")


def features(audio: torch.Tensor) -> torch.Tensor:
    fe = transformers.WhisperFeatureExtractor(feature_size=80)
    return fe(audio.numpy(), sampling_rate=16000, return_tensors="pt").input_features[0]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(transformers' model, its checkpoint, the plans per placement); its end-of-text row
    scaled until ``generate`` ends the first clip early (EOS before the length limit)."""
    root = tmp_path_factory.mktemp("whisper_e2e")
    feats = features(clip())
    for scale in (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0):
        hf = hf_model(eos_scale=scale)
        got = generate(hf, feats, language="en")
        if tiny.EOT in got[5:-1] or (got[-1] == tiny.EOT and len(got) > 6):
            break
    else:
        pytest.fail("no end-of-text scale ends transformers' generate early")
    ckpt = write_checkpoint(root / "ckpt", hf)
    plans = {
        p: compile_to(root / p, "whisper", p, {"checkpoint": str(ckpt)})
        for p in ("cpu", "cpu-2rank")
    }
    return hf, ckpt, plans


def expected(hf, audio: torch.Tensor, prompt: int = 4, **kw) -> str:
    new = generate(hf, features(audio), **kw)[prompt:]
    return hf_tokenizer().decode(new, skip_special_tokens=True)


def text_of(outputs) -> str:
    return b"".join(bytes(t.tolist()) for t in outputs.get(TEXT, [])).decode(errors="replace")


@pytest.mark.parametrize("placement", ["cpu", "cpu-2rank"])
def test_transcripts_are_generates(served, placement) -> None:
    hf, _, plans = served
    audio = clip()
    cases = [
        ({"language": "en"}, {"language": "en"}),
        ({}, {"task": "transcribe"}),  # `auto`: detected from the audio
        ({"language": "fr", "task": "translate"}, {"language": "fr", "task": "translate"}),
    ]
    for i, (options, kw) in enumerate(cases):
        got = run_local(plans[placement], [segment("audio", audio)], ["text"], options, rid=f"r{i}")
        assert text_of(got) == expected(hf, audio, **kw), options
    other = clip(2.5, seed=5)
    assert expected(hf, other, language="de") != expected(hf, audio, language="de")


def test_an_early_end_of_text_stops_as_generate_does(served) -> None:
    hf, _, plans = served
    audio = clip()
    got = run_local(plans["cpu"], [segment("audio", audio)], ["text"], {"language": "en"})
    new = generate(hf, features(audio), language="en")[4:]
    assert tiny.EOT in new
    assert len(got[TEXT]) == len(new)  # one text item per token, end of text included
    assert text_of(got) == hf_tokenizer().decode(new, skip_special_tokens=True)


def test_a_text_prompt_and_two_windows(served) -> None:
    hf, _, plans = served
    first, second = clip(), clip(2.0, seed=9)
    inputs = [segment("text", "names: Ada"), segment("audio", first), segment("audio", second)]
    got = run_local(plans["cpu-2rank"], inputs, ["text"], {"language": "en"})
    tok = hf_tokenizer()
    ids = torch.tensor(tok.get_prompt_ids("names: Ada"))
    n = len(ids) + 4
    want = expected(hf, first, n, language="en", prompt_ids=ids)
    want += expected(hf, second, n, language="en", prompt_ids=ids)
    assert text_of(got) == want


def test_a_checkpoint_without_its_tokenizer_is_refused(served, tmp_path) -> None:
    from wgc_runtime.host.local import LocalCluster

    _, ckpt, _ = served
    bare = tmp_path / "bare"
    bare.mkdir()
    for f in ("config.json", "generation_config.json", "model.safetensors"):
        (bare / f).write_bytes((ckpt / f).read_bytes())
    plan = compile_to(tmp_path / "plan", "whisper", "cpu", {"checkpoint": str(bare)})
    with pytest.raises(Exception, match=r"has no tokenizer\.json"):
        LocalCluster(plan)


@pytest.mark.slow
def test_wgc_run_reads_a_wav_and_writes_the_transcript(served, tmp_path) -> None:
    hf, ckpt, _ = served
    audio = clip()
    pcm = (audio.clamp(-1, 1) * 32767).round().to(torch.int16)
    wav = tmp_path / "clip.wav"
    with wave.open(str(wav), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(pcm.numpy().tobytes())
    cmd = [
        str(ROOT / ".venv" / "bin" / "wgc"), "run", str(ROOT / "wgc_models/whisper/whisper.walk"),
        "--placement", str(ROOT / "wgc_models/whisper/placements/cpu-2rank.yaml"),
        "--set", f"checkpoint={ckpt}", "--input", f"audio={wav}", "--want", "text",
        "--option", "language=en", "-o", str(tmp_path / "out"),
    ]  # fmt: skip
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    want = expected(hf, pcm.float() / 32767, language="en")
    assert (tmp_path / "out" / "text.txt").read_text() == want
    assert run.stdout.startswith(want)


def test_concurrent_requests_decode_as_one_batch_with_their_own_results(served, monkeypatch):
    """Five requests at once (a given language, a detected one, translation, a prompt with
    each): the decoder runs their ready calls together (prompts, detection passes and decode
    steps in one ragged batch), and each transcript is still `generate`'s."""
    from wgc_models.whisper import nodes
    from wgc_runtime.host.local import LocalCluster

    hf, _, plans = served
    sizes: list[int] = []
    forward = nodes.Decoder.forward

    def counting(self, batch):
        sizes.append(len(batch))
        return forward(self, batch)

    monkeypatch.setattr(nodes.Decoder, "forward", counting)
    audio, other = clip(), clip(2.0, seed=4)
    tok = hf_tokenizer()
    ids = torch.tensor(tok.get_prompt_ids("names: Ada"))
    cases = [
        ([segment("audio", audio)], {"language": "en"}, expected(hf, audio, language="en")),
        ([segment("audio", other)], {}, expected(hf, other, task="transcribe")),
        (
            [segment("audio", other)],
            {"language": "fr", "task": "translate"},
            expected(hf, other, language="fr", task="translate"),
        ),
        (
            [segment("text", "names: Ada"), segment("audio", audio)],
            {"language": "en"},
            expected(hf, audio, len(ids) + 4, language="en", prompt_ids=ids),
        ),
        (  # detected from the audio alone, then the prompt before the start of transcript
            [segment("text", "names: Ada"), segment("audio", other)],
            {},
            expected(hf, other, len(ids) + 4, task="transcribe", prompt_ids=ids),
        ),
    ]
    c = LocalCluster(plans["cpu"], strict=True)
    handles = [
        c.submit(c.request(inputs, ["text"], options), f"c{i}")
        for i, (inputs, options, _) in enumerate(cases)
    ]
    for h, (_, _, want) in zip(handles, cases, strict=True):
        done = h.result()
        assert done.ok, done.error
        got = b"".join(bytes(o.tensor.tolist()) for o in done.outputs if o.modality == "text")
        assert got.decode(errors="replace") == want
    assert max(sizes) > 1


def test_timestamps_are_the_tokens_generate_chooses_with_return_timestamps(served) -> None:
    """``timestamps``: the prompt ends at the task and the decoder chooses generate's tokens
    (timestamp pairs among the text, one text item each: a timestamp's is empty)."""
    hf, _, plans = served
    for i, audio in enumerate((clip(), clip(2.0, seed=9))):
        gc = copy.deepcopy(hf.generation_config)
        out = hf.generate(features(audio)[None], generation_config=gc, language="en",
                          return_timestamps=True, return_dict_in_generate=True)  # fmt: skip
        # the window's one pass, prompt (<|startoftranscript|><|en|><|transcribe|>) and all
        new = out["segments"][0][0]["result"]["sequences"].tolist()[3:]
        assert any(t > tiny.NO_TIMESTAMPS for t in new)  # it does speak in timestamps
        options = {"language": "en", "timestamps": True}
        got = run_local(plans["cpu"], [segment("audio", audio)], ["text"], options, rid=f"t{i}")
        pieces = [bytes(o.tolist()) for o in got[TEXT]]
        assert len(pieces) == len(new)
        assert all(p == b"" for p, t in zip(pieces, new, strict=True) if t > tiny.NO_TIMESTAMPS)
        text = hf_tokenizer().decode(new, skip_special_tokens=True)
        assert text and b"".join(pieces).decode(errors="replace") == text


def test_requests_the_decoder_cannot_serve_fail_with_their_reason(served) -> None:
    from wgc_runtime.host.local import LocalCluster

    _, _, plans = served
    c = LocalCluster(plans["cpu"], strict=True)
    for inputs, options, reason in (
        ([segment("audio", clip(31.0))], {}, "longer than the 30 s window"),
        ([segment("text", "x " * 300), segment("audio", clip())], {}, "Whisper takes at most 223"),
    ):
        h = c.submit(c.request(inputs, ["text"], options)).result()
        assert not h.ok and reason in str(h.error), h.error


def test_sampling_at_a_temperature_is_seeded_by_the_request(served) -> None:
    _, _, plans = served
    audio = [segment("audio", clip())]
    hot = {"language": "en", "temperature": 1.5}
    a = text_of(run_local(plans["cpu"], audio, ["text"], hot, rid="s0"))
    b = text_of(run_local(plans["cpu-2rank"], audio, ["text"], hot, rid="s0"))
    c = text_of(run_local(plans["cpu"], audio, ["text"], hot, rid="s1"))
    greedy = text_of(run_local(plans["cpu"], audio, ["text"], {"language": "en"}, rid="s0"))
    assert a == b and a != c and a != greedy
