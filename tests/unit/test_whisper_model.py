"""Whisper's components against transformers on a tiny checkpoint transformers wrote itself
(`tests.unit.whisper_support`): the log-mel window equal to ``WhisperFeatureExtractor``'s, the
checkpoint loaded strictly (one file or shards; a missing or an extra name refused), the
encoder's states and the decoder's logits over the paged pool (a prompt, then cached steps,
two requests in one ragged batch) equal to ``WhisperForConditionalGeneration``'s, the decoding
rules' prompt and length limit equal to ``generate``'s, the tiny tokenizer's text equal to
``WhisperTokenizerFast.decode``, and at large-v3's sizes every parameter named and shaped as
transformers' (the real placement declaring those sizes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.unit.whisper_support import clip, generate, hf_model, hf_tokenizer, write_checkpoint
from wgc_models.layers.loading import CheckpointError
from wgc_models.layers.tokenizer import TextCodec
from wgc_models.whisper import config as tiny
from wgc_models.whisper.checkpoint import load_part
from wgc_models.whisper.model import (
    CROSS,
    MAIN,
    WhisperConfig,
    WhisperEncoder,
    WhisperTextDecoder,
    backends,
    window_features,
)
from wgc_models.whisper.text import WhisperTokens
from wgc_runtime.engines.attention.torch_backend import TorchAttention
from wgc_runtime.engines.kv_pool import PagedKVPool

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def hf():
    return hf_model()


@pytest.fixture(scope="module")
def ckpt(hf, tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("whisper"), hf)


@pytest.fixture(scope="module")
def features():
    fe = transformers.WhisperFeatureExtractor(feature_size=80)
    audio = clip()
    return fe(audio.numpy(), sampling_rate=16000, return_tensors="pt").input_features[0]


def ours(ckpt):
    cfg = WhisperConfig.from_pretrained(ckpt)
    enc, dec = WhisperEncoder(cfg), WhisperTextDecoder(cfg)
    load_part(enc, ckpt, "model.encoder.", cfg)
    load_part(dec, ckpt, "", cfg)
    return cfg, enc.eval(), dec.eval()


def test_the_window_features_are_the_feature_extractors(features) -> None:
    assert torch.allclose(window_features(clip(), 80, 3000), features, atol=1e-5, rtol=0)
    full = torch.randn(480000, generator=torch.Generator().manual_seed(1)) * 0.1
    fe = transformers.WhisperFeatureExtractor(feature_size=80)
    want = fe(full.numpy(), sampling_rate=16000, return_tensors="pt").input_features[0]
    assert torch.allclose(window_features(full, 80, 3000), want, atol=1e-4, rtol=0)


def test_the_checkpoint_loads_strictly_whole_or_sharded(hf, ckpt, tmp_path) -> None:
    cfg, enc, dec = ours(ckpt)
    assert not (ckpt / "model.safetensors.index.json").exists()
    sharded = write_checkpoint(tmp_path / "sharded", hf, shard=True)
    assert (sharded / "model.safetensors.index.json").is_file()
    enc2, dec2 = WhisperEncoder(cfg), WhisperTextDecoder(cfg)
    load_part(enc2, sharded, "model.encoder.", cfg)
    load_part(dec2, sharded, "", cfg)
    for a, b in ((enc, enc2), (dec, dec2)):
        for (n, p), q in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
            assert torch.equal(p, q), n
    tensors = load_file(ckpt / "model.safetensors")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text((ckpt / "config.json").read_text())
    missing = dict(tensors)
    del missing["model.encoder.layers.1.fc2.bias"]
    save_file(missing, tmp_path / "bad" / "model.safetensors")
    for part, prefix in ((WhisperTextDecoder(cfg), ""), (WhisperEncoder(cfg), "model.encoder.")):
        with pytest.raises(
            CheckpointError, match=r"missing \(1\): model.encoder.layers.1.fc2.bias"
        ):
            load_part(part, tmp_path / "bad", prefix, cfg)
    save_file({**tensors, "model.extra": torch.zeros(1)}, tmp_path / "bad" / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"unexpected \(1\): model.extra"):
        load_part(WhisperTextDecoder(cfg), tmp_path / "bad", "", cfg)


def test_encoder_states_and_decoder_logits_are_transformers(hf, ckpt, features) -> None:
    cfg, enc, dec = ours(ckpt)
    with torch.no_grad():
        want_states = hf.model.encoder(features[None]).last_hidden_state[0]
        states = enc(features)
    assert (states - want_states).abs().max() < 1e-5
    ids = [[tiny.SOT, tiny.FIRST_LANGUAGE, tiny.TRANSLATE + 1, tiny.NO_TIMESTAMPS, 40, 300, 7],
           [tiny.SOT, tiny.FIRST_LANGUAGE + 2, tiny.TRANSLATE, tiny.NO_TIMESTAMPS, 90]]  # fmt: skip
    pool = PagedKVPool(layers=cfg.decoder_layers, kv_heads=cfg.decoder_attention_heads,
                       head_dim=cfg.head_dim, pages=400, page_size=16, dtype=torch.float32,
                       device=torch.device("cpu"), labels=[MAIN, CROSS])  # fmt: skip
    be = backends(TorchAttention(num_heads=4, num_kv_heads=4, head_dim=16, page_size=16))
    second = torch.roll(states, 7, 0)  # request 1 attends to other states
    for r, s in enumerate((states, second)):
        k, v = dec.cross_kv(s)
        pool.write(pool.append(r, CROSS, s.shape[0]), k, v)
    # a prompt of 4 for both, then request 0's three tokens one by one beside request 1's one
    got: dict[int, list[torch.Tensor]] = {0: [], 1: []}
    steps = [[(0, ids[0][:4]), (1, ids[1][:4])], [(0, ids[0][4:5]), (1, ids[1][4:5])],
             [(0, ids[0][5:6])], [(0, ids[0][6:7])]]  # fmt: skip
    for step in steps:
        b = dec.batch(pool, be, [(r, len(t)) for r, t in step])
        flat = torch.tensor([i for _, t in step for i in t])
        logits = dec.logits(dec.step(flat, b))
        for (r, _), part in zip(step, logits.split([len(t) for _, t in step]), strict=True):
            got[r].append(part)
    for r, s in enumerate((states, second)):
        with torch.no_grad():
            want = hf(encoder_outputs=(s[None],), decoder_input_ids=torch.tensor([ids[r]])).logits
        assert (torch.cat(got[r]) - want[0]).abs().max() < 1e-5


def test_the_prompt_and_limit_are_generates(hf, ckpt, features) -> None:
    codec = TextCodec.from_file(ckpt)
    tokens = WhisperTokens.from_pretrained(
        ckpt, previous=codec.token_id("<|startofprev|>"), max_target_positions=448
    )
    assert tokens.languages["de"] == tiny.FIRST_LANGUAGE + 2
    gen = json.loads((ckpt / "generation_config.json").read_text())
    assert tokens.suppress == tuple(gen["suppress_tokens"])
    prompt = tokens.prompt(tokens.languages["fr"], "translate")
    got = generate(hf, features, language="fr", task="translate")
    assert got[:4] == prompt and len(got) == tokens.limit(4)
    text = codec.encode(" names: Ada")
    assert text == hf_tokenizer().get_prompt_ids("names: Ada").tolist()[1:]
    prompted = tokens.prompt(tokens.languages["en"], "transcribe", text)
    ids = torch.tensor([tokens.previous, *text])
    got = generate(hf, features, language="en", prompt_ids=ids)
    assert got[: len(prompted)] == prompted and len(got) == tokens.limit(len(prompted))


def test_the_text_is_the_tokenizers_decode(ckpt) -> None:
    codec, hf_tok = TextCodec.from_file(ckpt), hf_tokenizer()
    ids = [tiny.SOT, *codec.encode(" Héllo, wörld — ça va?"), 57, 300, tiny.EOT, tiny.NO_TIMESTAMPS]
    text = b"".join(codec.piece(i) for i in ids).decode()
    assert text == hf_tok.decode(ids, skip_special_tokens=True)
    assert text.startswith(" Héllo, wörld — ça va?") and len(text) > len(" Héllo, wörld — ça va?")


def test_the_shipped_tiny_tokenizer_rebuilds_byte_for_byte(tmp_path) -> None:
    out = tmp_path / "t.json"
    tiny.build_tokenizer().save(str(out), pretty=False)
    assert out.read_bytes() == tiny.path_of().read_bytes()


def test_the_real_sizes_name_and_shape_every_parameter_as_transformers() -> None:
    """large-v3's config (`configs.whisper.REAL`): our encoder and decoder hold exactly
    transformers' parameter names, each of its shape (built on the meta device: no weights)."""
    cfg = WhisperConfig.from_dict(tiny.REAL)
    real = transformers.WhisperConfig(**{k: v for k, v in tiny.REAL.items() if k != "model_type"})
    with torch.device("meta"):
        theirs = transformers.WhisperForConditionalGeneration(real).state_dict()
        enc, dec = WhisperEncoder(cfg), WhisperTextDecoder(cfg)
    mine = {f"model.encoder.{k}": v for k, v in enc.state_dict().items()}
    mine.update(dec.state_dict())
    assert {k: tuple(v.shape) for k, v in mine.items()} == {
        k: tuple(v.shape) for k, v in theirs.items()
    }
    assert (cfg.n_frames, cfg.head_dim) == (3000, 64)


def test_the_real_placement_declares_the_real_sizes(tmp_path) -> None:
    """On the compiled real-1gpu plan: the decoder's KV geometry, the feature and state ports
    and every size a node checks against its checkpoint are large-v3's."""
    from wgc.cli.compile import sync
    from wgc.driver import Driver
    from wgc_runtime.contract.spec import TypeSpec
    from wgc_runtime.host.loading import load_plan

    root = Path(__file__).resolve().parents[2] / "wgc_models" / "whisper"
    result = Driver().compile(str(root / "whisper.walk"), str(root / "placements/real-1gpu.yaml"))
    assert result.ok, [d.message for d in result.errors]
    sync(tmp_path, result.files, check=False)
    _, ranks = load_plan(tmp_path)
    nodes = {n.name: n for r in ranks for n in r.nodes}
    real = WhisperConfig.from_dict(tiny.REAL)
    config = {name: dict(n.config) for name, n in nodes.items()}
    dec = config["decoder"]
    assert (
        (dec["layers"], dec["kv_heads"], dec["head_dim"])
        == (32, 20, 64)
        == (
            real.decoder_layers,
            real.decoder_attention_heads,
            real.head_dim,
        )
    )
    for name in ("encoder", "decoder"):
        c = config[name]
        got = (c["n_mels"], c["audio_ctx"], c["d_model"], c["ffn"], c["vocab"], c["dtype"])
        want = (real.num_mel_bins, real.max_source_positions, real.d_model)
        assert got == (*want, real.decoder_ffn_dim, real.vocab_size, "f16")
    assert config["encoder"]["layers"] == real.encoder_layers
    assert dict(nodes["frontend"].outputs)["mel"] == TypeSpec("f32", (128, 3000))
    assert dict(nodes["encoder"].outputs)["audio_features"] == TypeSpec("f32", (1500, 1280))


def test_the_nodes_say_their_weights_before_they_are_built(hf, ckpt, tmp_path) -> None:
    """`Node.weights` (the launch's preflight): the encoder and the decoder at the `.walk`'s
    sizes count what they build; with the checkpoint, its headers count the whole model once
    (the tied output projection not twice), in the node's dtype; at large-v3's sizes, its
    1.54e9 parameters in f16."""
    from wgc_models.whisper.checkpoint import whisper_config
    from wgc_models.whisper.nodes import Decoder, Encoder
    from wgc_runtime.host.preflight import part_bytes

    walk = {"n_mels": 80, "audio_ctx": 1500, "d_model": 64, "ffn": 128, "vocab": 2105,
            "layers": 2, "decoder_layers": 2, "heads": 4, "seed": 0, "dtype": "f32"}  # fmt: skip
    (enc,), (dec,) = Encoder.weights(walk), Decoder.weights(dict(walk, seed=1))
    cfg = whisper_config("encoder", walk)
    built = [WhisperEncoder(cfg), WhisperTextDecoder(cfg)]
    assert [enc.params, dec.params] == [sum(p.numel() for p in m.parameters()) for m in built]
    assert enc.key != dec.key and not enc.checkpoint and enc.dtype_bytes == 4
    n_hf = sum(p.numel() for p in hf.parameters())  # tied: the embedding once
    sizes = WhisperConfig.from_pretrained(ckpt)
    real = dict(walk, n_mels=sizes.num_mel_bins, audio_ctx=sizes.max_source_positions,
                d_model=sizes.d_model, ffn=sizes.decoder_ffn_dim, vocab=sizes.vocab_size,
                checkpoint=str(ckpt), dtype="f16")  # fmt: skip
    (enc,), (dec,) = Encoder.weights(real), Decoder.weights(real)
    (e_bytes, e_file), (d_bytes, d_file) = part_bytes(enc), part_bytes(dec)
    assert e_file and d_file and e_bytes + d_bytes == 2 * n_hf
    assert (e_bytes // 2, d_bytes // 2) == (enc.params, dec.params)
    large = {"n_mels": tiny.REAL["num_mel_bins"], "audio_ctx": 1500, "d_model": 1280,
             "ffn": 5120, "vocab": tiny.REAL["vocab_size"], "layers": 32, "decoder_layers": 32,
             "heads": 20, "dtype": "f16"}  # fmt: skip
    total = sum(p.params for node in (Encoder, Decoder) for p in node.weights(large))
    assert round(total / 1e9, 2) == 1.54
