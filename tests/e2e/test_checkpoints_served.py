"""Tiny checkpoints in the published layouts through `wgc run` and `wgc serve` as a user runs
them (processes, the CLI, the HTTP server's native route), text in and text out where the model
has text: the families whose checkpoint tests run in-process only.

* Llama: a transformers folder (``save_pretrained``, its tokenizer and chat template) on
  ``cpu-text``: `wgc run`'s text and the served text are ``tokenizer.decode`` of transformers'
  greedy ids.
* BAGEL: a release folder at the tiny-text sizes (``ema.safetensors`` with the ViT's patch
  embedding as BAGEL's ``Linear``, ``llm_config.json`` / ``vit_config.json`` written by
  transformers' config classes, FLUX's ``ae.safetensors``, the tiny BPE as its
  ``tokenizer.json``), loaded strictly by the nodes; image understanding on ``cpu-text``:
  `wgc run`'s text and the served text equal the in-process run of the same plan, and are the
  tokenizer's text of its ids.
* Orpheus and Qwen3-Omni (their `wgc run` is `test_speech_processes`): served audio equal to
  the reference pipelines (Qwen3-Omni's text too).
* π0.5 (openpi's ``model.safetensors``, PaliGemma's ``tokenizer.json`` copied beside it: the
  tiny one stands for it) and V-JEPA 2-AC (the encoder under ``VJEPA2Model``'s names, Meta's
  ``vjepa2-ac-vitg.pt`` for the predictor): `wgc run` and `wgc serve` give the same outputs for
  the same request and seed; π0.5's instruction as text gives, through both, the chunk of the
  ids `tokenizers` gives for openpi's prompt sent as ids (option ``token_ids``), and the folder
  without its ``tokenizer.json`` is refused (WG879).
* Wan2.2 (its `wgc run` is `test_wan22_diffusers`): served from a diffusers folder, the video
  equal to ``WanPipeline``'s.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

pytest.importorskip("fastapi")
transformers = pytest.importorskip("transformers")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="needs POSIX shm"),
]

from tests.e2e.real_support import compile_to, run_local  # noqa: E402
from tests.e2e.serve_support import served  # noqa: E402
from wgc.interp import segment  # noqa: E402

NATIVE = "/v1/requests"
SEED = 7
PHOTO = torch.arange(24 * 40 * 3).reshape(24, 40, 3).mul(3).remainder(251).to(torch.uint8)


def wgc(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("wgc")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-c", "from wgc.cli import main; main()"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [*cmd, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env
    )


def enc(t: torch.Tensor) -> dict[str, Any]:
    name = {torch.float32: "f32", torch.int64: "i64", torch.uint8: "u8"}[t.dtype]
    raw = t.contiguous().numpy().tobytes()
    return {"dtype": name, "shape": list(t.shape), "b64": base64.b64encode(raw).decode()}


def body(segments: list[tuple[str, Any]], want: list[str], options: dict) -> dict[str, Any]:
    inputs = [
        {"modality": m, "data": enc(d) if isinstance(d, torch.Tensor) else d, "fields": {}}
        for m, d in segments
    ]
    return {"inputs": inputs, "want": want, "options": options, "seed": SEED}


def outputs(reply: dict, modality: str) -> list[np.ndarray]:
    dtypes = {"f32": "<f4", "i64": "<i8", "u8": "u1"}
    out = []
    for o in reply["outputs"]:
        if o["modality"] == modality:
            v = o["value"]
            raw = base64.b64decode(v["b64"])
            out.append(np.frombuffer(raw, dtypes[v["dtype"]]).reshape(v["shape"]))
    return out


def served_text(plan: Path, request: dict) -> str:
    with served(str(plan), timeout=300) as s:
        status, reply = s.post(NATIVE, request, timeout=300)
    assert status == 200, reply
    return b"".join(bytes(a.tobytes()) for a in outputs(reply, "text")).decode("utf-8")


# ---------------------------------------------------------------------------- Llama
def test_llama_checkpoint_speaks_text_through_run_and_serve(tmp_path: Path) -> None:
    from tests.e2e.test_llama_text import _greedy
    from tests.unit.test_chat_template import TEMPLATE, _tokenizer

    fast = _tokenizer(TEMPLATE)
    torch.manual_seed(3)
    cfg = transformers.LlamaConfig(
        vocab_size=len(fast), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
    )  # fmt: skip
    hf = transformers.LlamaForCausalLM(cfg).eval()
    hf.save_pretrained(tmp_path / "ckpt")
    fast.save_pretrained(tmp_path / "ckpt")
    ids = fast.apply_chat_template(
        [{"role": "user", "content": "hello there"}], add_generation_prompt=True, tokenize=True
    )
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    expected = fast.decode(_greedy(hf, ids, -1), skip_special_tokens=True)
    assert expected
    sets = {"checkpoint": str(tmp_path / "ckpt"), "vocab": str(len(fast)), "eos": "-1"}
    plan = compile_to(tmp_path / "plan", "llama", "cpu-text", sets)
    out = tmp_path / "out"
    r = wgc("run", str(plan), "--input", "text=hello there", "--want", "text", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert (out / "text.txt").read_text(encoding="utf-8") == expected
    assert served_text(plan, body([("text", "hello there")], ["text"], {})) == expected


# ---------------------------------------------------------------------------- BAGEL
def bagel_release(folder: Path) -> Path:
    """BAGEL-7B-MoT's folder layout at the tiny-text sizes (module docstring)."""
    from safetensors.torch import save_file

    from tests.unit.test_published_layouts import _ldm_name
    from wgc_models.bagel.autoencoder_kl import AutoencoderKL
    from wgc_models.bagel.checkpoint import AE
    from wgc_models.bagel.config import TINY_TEXT
    from wgc_models.bagel.model import Bagel
    from wgc_models.bagel.text import TINY_TOKENIZER
    from wgc_models.layers.random_init import init_seeded

    folder.mkdir(parents=True)
    full = init_seeded(Bagel(TINY_TEXT), 41, keep=("pos_embed",))
    state = {k: v.contiguous() for k, v in full.state_dict().items()}
    key = "vit_model.vision_model.embeddings.patch_embedding.weight"
    state[key] = state[key].permute(0, 2, 3, 1).reshape(state[key].shape[0], -1).contiguous()
    save_file(state, folder / "ema.safetensors")
    m, v = TINY_TEXT.llm, TINY_TEXT.vit
    transformers.Qwen2Config(
        vocab_size=m.vocab_size, hidden_size=m.hidden_size, intermediate_size=m.intermediate_size,
        num_hidden_layers=m.num_hidden_layers, num_attention_heads=m.num_attention_heads,
        num_key_value_heads=m.num_key_value_heads, rope_theta=m.rope_theta,
    ).to_json_file(folder / "llm_config.json")  # fmt: skip
    transformers.SiglipVisionConfig(
        hidden_size=v.hidden_size, intermediate_size=v.intermediate_size,
        num_hidden_layers=v.num_hidden_layers + 1, num_attention_heads=v.num_attention_heads,
        image_size=v.image_size, patch_size=v.patch_size,
    ).to_json_file(folder / "vit_config.json")  # fmt: skip
    vae = init_seeded(AutoencoderKL(TINY_TEXT.vae), 42)
    blocks = len(TINY_TEXT.vae.block_out_channels)
    ldm = {}
    for name, t in vae.state_dict().items():
        if ".attentions.0.to_" in name and name.endswith("weight"):
            t = t[:, :, None, None]
        ldm[_ldm_name(name, blocks)] = t.contiguous()
    save_file(ldm, folder / AE)
    (folder / "tokenizer.json").write_bytes(TINY_TOKENIZER.read_bytes())
    return folder


def test_bagel_release_folder_speaks_text_through_run_and_serve(tmp_path: Path) -> None:
    from PIL import Image
    from tokenizers import Tokenizer

    from wgc_models.bagel.text import TINY_TOKENIZER

    release = bagel_release(tmp_path / "release")
    sets = {"checkpoint": str(release)}
    options = {"max_tokens": 8}
    ids_plan = compile_to(tmp_path / "ids", "bagel", "cpu", {**sets, "model": "tiny-text"})
    request = ([segment("image", PHOTO), segment("text", "what is it?")], ["text"], options)
    ids = torch.cat(run_local(ids_plan, *request, rid="r")[("main", "decode", "text")])
    tok = Tokenizer.from_file(str(TINY_TOKENIZER))
    expected = tok.decode([int(t) for t in ids], skip_special_tokens=True)
    plan = compile_to(tmp_path / "plan", "bagel", "cpu-text", sets)
    got = run_local(plan, *request, rid="r")[("text", "detokenize", "text")]
    assert expected and b"".join(bytes(t.tolist()) for t in got).decode("utf-8") == expected
    png = tmp_path / "photo.png"
    Image.fromarray(PHOTO.numpy()).save(png)
    out = tmp_path / "out"
    args = ["run", str(plan), "--input", f"image={png}", "--input", "text=what is it?"]
    r = wgc(*args, "--want", "text", "--option", "max_tokens=8", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert (out / "text.txt").read_text(encoding="utf-8") == expected
    segs = [("image", PHOTO), ("text", "what is it?")]
    assert served_text(plan, body(segs, ["text"], options)) == expected


# ---------------------------------------------------------------------------- speech
@pytest.mark.parametrize("family", ["orpheus", "qwen3_omni"])
def test_speech_checkpoints_are_served_as_their_references(tmp_path: Path, family: str) -> None:
    pytest.importorskip("snac")
    from tests.e2e.speech_support import orpheus, qwen3_omni, reference
    from tests.e2e.test_speech_processes import REQUESTS
    from wgc_models._shared.speech import text_codec

    fam = (orpheus if family == "orpheus" else qwen3_omni)(tmp_path / "ckpt")
    plan = fam.compile(tmp_path / "plan", "cpu")
    text, options, wants = REQUESTS[family]
    ref = reference(fam, text, options, "any-id", SEED)
    with served(str(plan), timeout=300) as s:
        status, reply = s.post(NATIVE, body([("text", text)], wants, options), timeout=300)
    assert status == 200, reply
    audio = np.concatenate([a.reshape(-1) for a in outputs(reply, "audio")])
    want = ref.audio.numpy().reshape(-1)
    assert audio.shape == want.shape and np.abs(audio - want).max() <= 1e-4
    assert audio.std() > 0.01  # a signal
    if family == "qwen3_omni":
        said = b"".join(bytes(a.tobytes()) for a in outputs(reply, "text"))
        codec = text_codec("", "qwen3_omni")  # every token's bytes, as the Thinker chose it
        assert said and said == b"".join(codec.piece(t) for t in ref.tokens)


# ---------------------------------------------------------------------------- no text
VIDEO = torch.arange(2 * 16 * 16 * 3).reshape(2, 16, 16, 3).remainder(255).to(torch.uint8)
ACTIONS = torch.linspace(-1, 1, 16 * 7).reshape(16, 7)
STATES = torch.linspace(0, 1, 16 * 7).reshape(16, 7)
CAMERAS = torch.arange(3 * 16 * 16 * 3).reshape(3, 16, 16, 3).remainder(251).to(torch.uint8)


def pi05_openpi(folder: Path) -> tuple[dict, str]:
    """openpi's ``model.safetensors`` (``PI0Pytorch``'s names, pi05) and a ``tokenizer.json``
    (PaliGemma's is copied in by hand: the tiny one here); the prompt as ids."""
    import shutil

    from safetensors.torch import save_file

    from tests.unit.test_pi05_openpi import openpi_state_dict
    from wgc_models.pi05.text import TINY_FILE

    folder.mkdir(parents=True)
    save_file(
        {k: v.clone().contiguous() for k, v in openpi_state_dict().items()},
        folder / "model.safetensors",
    )
    shutil.copy(TINY_FILE, folder / "tokenizer.json")
    fields = {"prompt": torch.arange(12)}
    options = {"token_ids": True}
    return {"segments": [("image", CAMERAS, fields)], "want": ["action"], "options": options}, (
        "action"
    )


def vjepa2_ac_release(folder: Path) -> tuple[dict, str]:
    """The encoder under ``VJEPA2Model``'s names (``encoder/``) and Meta's training checkpoint
    ``vjepa2-ac-vitg.pt`` (the predictor under ``module.backbone.``)."""
    from tests.e2e.real_support import save_module
    from wgc_models.layers.random_init import init_seeded
    from wgc_models.vjepa2_ac.config import CONFIGS
    from wgc_models.vjepa2_ac.model import ACPredictor
    from wgc_models.vjepa2_ac.vjepa2 import VJEPA2Encoder

    tiny = CONFIGS["tiny"]
    encoder = init_seeded(VJEPA2Encoder(tiny.encoder), 21)
    save_module(encoder, folder / "encoder" / "model.safetensors", prefix="encoder.")
    predictor = init_seeded(ACPredictor(tiny.predictor), 22)
    released = {
        "encoder": {},
        "predictor": {f"module.backbone.{k}": v for k, v in predictor.state_dict().items()},
        "epoch": 315,
    }
    torch.save(released, folder / "vjepa2-ac-vitg.pt")
    fields = {"actions": ACTIONS, "states": STATES}
    options = {"rollout": True, "horizon": 3}
    return {
        "segments": [("video", VIDEO, fields)],
        "want": ["tensor"],
        "options": options,
    }, "tensor"


WRITERS = {"pi05": pi05_openpi, "vjepa2_ac": vjepa2_ac_release}


def request_json(folder: Path, request: dict) -> Path:
    """``--request`` JSON: each tensor an ``.npy`` file beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    inputs = []
    for i, (modality, data, fields) in enumerate(request["segments"]):
        np.save(folder / f"in{i}.npy", data.numpy())
        names = {}
        for k, v in fields.items():
            np.save(folder / f"in{i}_{k}.npy", v.numpy())
            names[k] = f"in{i}_{k}.npy"
        inputs.append({"modality": modality, "data": f"in{i}.npy", "fields": names})
    path = folder / "request.json"
    body_ = {"inputs": inputs, "want": request["want"], "options": request["options"]}
    path.write_text(json.dumps({**body_, "seed": SEED}))
    return path


@pytest.mark.parametrize("family", sorted(WRITERS))
def test_published_checkpoints_run_and_serve_the_same_outputs(tmp_path: Path, family: str) -> None:
    """`wgc run` and `wgc serve` on the published layout: the same outputs for the same request
    and seed (the nodes load it strictly: a missing or unexpected name is an error)."""
    request, modality = WRITERS[family](tmp_path / "ckpt")
    plan = compile_to(tmp_path / "plan", family, "cpu", {"checkpoint": str(tmp_path / "ckpt")})
    out = tmp_path / "out"
    r = wgc(
        "run", str(plan), "--request", str(request_json(tmp_path / "req", request)), "-o", str(out)
    )
    assert r.returncode == 0, r.stderr
    ran = [np.load(p) for p in sorted(out.glob(f"{modality}_*.npy"))]
    assert ran
    with served(str(plan), timeout=300) as s:
        segs = request["segments"]
        native = {
            "inputs": [
                {"modality": m, "data": enc(d), "fields": {k: enc(v) for k, v in f.items()}}
                for m, d, f in segs
            ],
            "want": request["want"],
            "options": request["options"],
            "seed": SEED,
        }
        status, reply = s.post(NATIVE, native, timeout=300)
    assert status == 200, reply
    got = outputs(reply, modality)
    assert len(got) == len(ran)
    for a, b in zip(got, ran, strict=True):
        assert a.shape == b.shape and np.allclose(a, b, atol=1e-6) and np.isfinite(a).all()


def test_pi05_checkpoint_takes_its_prompt_as_text_through_run_and_serve(tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    folder = tmp_path / "ckpt"
    pi05_openpi(folder)
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    body_ids = tok.encode("pick up the red cup", add_special_tokens=False).ids
    ids = torch.tensor([tok.token_to_id("<bos>"), *body_ids, tok.token_to_id("Ċ")])  # Ċ: "\n"
    text = " pick_up the red cup\n"  # openpi strips it and reads "_" and "\n" as spaces
    plan = compile_to(tmp_path / "plan", "pi05", "cpu", {"checkpoint": str(folder)})
    np.save(tmp_path / "cams.npy", CAMERAS.numpy())
    out = tmp_path / "out"
    field = f"image={tmp_path / 'cams.npy'},prompt={text}"
    r = wgc("run", str(plan), "--input", field, "--seed", str(SEED), "-o", str(out))
    assert r.returncode == 0, r.stderr
    ran = np.load(out / "action_000.npy")

    def request(prompt: Any, options: dict) -> dict:
        seg = {"modality": "image", "data": enc(CAMERAS), "fields": {"prompt": prompt}}
        return {"inputs": [seg], "want": ["action"], "options": options, "seed": SEED}

    with served(str(plan), timeout=300) as s:
        status, as_text = s.post(NATIVE, request(text, {}), timeout=300)
        assert status == 200, as_text
        status, as_ids = s.post(NATIVE, request(enc(ids), {"token_ids": True}), timeout=300)
        assert status == 200, as_ids
    (a,), (b,) = outputs(as_text, "action"), outputs(as_ids, "action")
    assert a.shape == (50, 32) and np.isfinite(a).all()
    assert np.array_equal(a, b) and np.allclose(a, ran, atol=1e-6)

    (folder / "tokenizer.json").unlink()
    r = wgc("run", str(plan), "--local", "--input", field, "-o", str(tmp_path / "o2"))
    assert r.returncode == 1
    assert "WG879: node `" in r.stderr and "has no `tokenizer.json`" in r.stderr, r.stderr


def test_wan22_diffusers_folder_is_served_as_wan_pipeline(tmp_path: Path) -> None:
    """`wgc serve` on a diffusers folder the packages wrote (its `wgc run` is
    `test_wan22_diffusers`): text in, the video equal to ``WanPipeline``'s over the same
    modules, from the noise the request's seed draws."""
    pytest.importorskip("diffusers")
    from tests.e2e.test_wan22_diffusers import (
        PROMPT,
        _assert_equal_video,
        _random_parts,
        _reference,
    )
    from wgc_models.wan22.toy import noise
    from wgc_runtime.contract.flow import SEED_OPTION
    from wgc_runtime.contract.node import CallContext

    parts = _random_parts()
    for sub, part in parts.items():
        part.save_pretrained(tmp_path / "wan" / sub, safe_serialization=True)
    plan = compile_to(tmp_path / "plan", "wan22", "cpu", {"checkpoint": str(tmp_path / "wan")})
    with served(str(plan), timeout=300) as s:
        request = {**body([("text", f"{PROMPT}  ")], ["video"], {}), "seed": 1}
        status, reply = s.post(NATIVE, request, timeout=600)
    assert status == 200, reply
    (video,) = outputs(reply, "video")
    ctx = CallContext(request_id="x", walk="generate", call=0, options={SEED_OPTION: 1})
    start = noise((16, 5, 8, 8), ctx, "wan22-latents")
    _assert_equal_video(torch.from_numpy(video.copy()), _reference("t2v", parts, start))
