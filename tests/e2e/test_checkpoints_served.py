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
"""

from __future__ import annotations

import base64
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
