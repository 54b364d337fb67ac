"""The wan22 example's text-to-video against diffusers' ``WanPipeline``, and its image-to-video
against ``WanImageToVideoPipeline`` with ``expand_timesteps`` (Wan2.2 TI2V's first-frame
conditioning), built from the same tiny
components: transformers' ``UMT5EncoderModel``, two diffusers ``WanTransformer3DModel`` experts
(``transformer`` for the high-noise steps, ``transformer_2`` for the rest, the boundary set
where the ``.walk`` switches), ``AutoencoderKLWan`` and ``UniPCMultistepScheduler`` with
Wan's flow config, each given the example's seeded weights by name, the prompt's UTF-8 bytes as
its tokens and the request's starting noise as its latents. The video the reference
interpreter emits equals the pipeline's, quantised the same way (the runtime and ``wgc run``
are checked equal to the interpreter by the examples' other e2e tests). And ``wgc run`` itself,
with worker processes, on a diffusers folder the packages wrote (``--set checkpoint=``): the
same video as the pipeline over the folder's modules."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the examples' node modules are imported as `examples.<family>`
    sys.path.insert(0, str(ROOT))

from wgc.interp import load_model, make_request, run_request, segment  # noqa: E402
from wgc_models.wan22 import tiny  # noqa: E402
from wgc_models.wan22.scheduler import flow_schedule  # noqa: E402
from wgc_models.wan22.toy import noise  # noqa: E402
from wgc_runtime.contract.flow import SEED_OPTION  # noqa: E402
from wgc_runtime.contract.node import CallContext  # noqa: E402

diffusers = pytest.importorskip("diffusers")
transformers = pytest.importorskip("transformers")

PROMPT = "a cat surfing"
STEPS, HIGH_STEPS = 8, 4  # the .walk's params
MODES = {"t2v": (12.0, 4.0), "i2v": (5.0, 3.5)}  # each mode's default shift and guidance
FRAME = torch.arange(64 * 64 * 3).reshape(64, 64, 3).mul(7).remainder(251).to(torch.uint8)


class ByteTokenizer:
    """The example's tokens: UTF-8 bytes, padded with 0 to ``max_length`` (what the pipeline
    asks of a tokenizer)."""

    def __call__(self, prompts, *, max_length: int, **_):
        ids = torch.zeros(len(prompts), max_length, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, text in enumerate(prompts):
            raw = list(text.encode())[:max_length]
            ids[row, : len(raw)] = torch.tensor(raw, dtype=torch.long)
            mask[row, : len(raw)] = 1
        return SimpleNamespace(input_ids=ids, attention_mask=mask)


def _seeded_parts() -> dict[str, Any]:
    """The packages' classes holding the example's seeded weights (loaded by name)."""
    text = transformers.UMT5EncoderModel(
        transformers.UMT5Config(**dataclasses.asdict(tiny.TEXT), feed_forward_proj="gated-gelu")
    )
    missing, unexpected = text.load_state_dict(tiny.build_text_encoder().state_dict(), strict=False)
    assert set(missing) <= {"encoder.embed_tokens.weight"} and not unexpected
    text.encoder.embed_tokens.weight = text.shared.weight
    parts: dict[str, Any] = {"text_encoder": text.eval()}
    for sub, expert in (("transformer", "high_noise"), ("transformer_2", "low_noise")):
        ref = diffusers.WanTransformer3DModel(**dataclasses.asdict(tiny.DIT))
        ref.load_state_dict(tiny.build_transformer(expert).state_dict(), strict=True)
        parts[sub] = ref.eval()
    vae = diffusers.AutoencoderKLWan(**_vae_config())
    halves = {**tiny.build_vae_decoder().state_dict(), **tiny.build_vae_encoder().state_dict()}
    vae.load_state_dict(halves, strict=True)
    parts["vae"] = vae.eval()
    return parts


def _random_parts() -> dict[str, Any]:
    """The packages' classes at the example's sizes with their own random weights."""
    torch.manual_seed(11)
    text = transformers.UMT5EncoderModel(
        transformers.UMT5Config(**dataclasses.asdict(tiny.TEXT), feed_forward_proj="gated-gelu")
    )
    parts: dict[str, Any] = {"text_encoder": text.eval()}
    for sub in ("transformer", "transformer_2"):
        parts[sub] = diffusers.WanTransformer3DModel(**dataclasses.asdict(tiny.DIT)).eval()
    parts["vae"] = diffusers.AutoencoderKLWan(**_vae_config()).eval()
    with torch.no_grad():
        for part in parts.values():
            for p in part.parameters():
                p.add_(0.1 * torch.randn_like(p))
    parts["tokenizer"] = _word_tokenizer()
    return parts


def _word_tokenizer():
    """A tiny word-level tokenizer ending each prompt with ``</s>`` as umT5's does."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    words = ["<pad>", "</s>", "<unk>", *["a", "cat", "surfing", "on", "the", "wave"]]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="$A </s>", special_tokens=[("</s>", 1)]
    )
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>"
    )


def _vae_config() -> dict[str, Any]:
    raw = dataclasses.asdict(tiny.VAE)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in raw.items()}


def _pipeline(mode: str, parts: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    shift = MODES[mode][0]
    sched_raw = {
        **{k: getattr(tiny.SCHEDULER, k) for k in tiny.SCHEDULER.__dataclass_fields__},
        "flow_shift": shift,
        "use_flow_sigmas": True,
        "prediction_type": "flow_prediction",
    }
    sched_raw["disable_corrector"] = list(sched_raw["disable_corrector"])
    scheduler = diffusers.UniPCMultistepScheduler(**sched_raw)
    ts = flow_schedule(dataclasses.replace(tiny.SCHEDULER, flow_shift=shift), STEPS)
    ts = ts.timesteps.tolist()
    boundary = (ts[HIGH_STEPS - 1] + ts[HIGH_STEPS]) / 2 / 1000  # high: t >= boundary
    parts = {"tokenizer": ByteTokenizer(), **parts, "scheduler": scheduler}
    parts["boundary_ratio"] = boundary
    t2v = diffusers.WanPipeline(**parts)
    if mode == "t2v":
        return t2v, {"prompt": PROMPT, "negative_prompt": ""}
    # the prompts through the t2v pipeline's encode_prompt: the i2v module cleans prompts with
    # ftfy unconditionally (not installed here); the encoding is the same code
    pos, neg = t2v.encode_prompt(PROMPT, "", max_sequence_length=32)
    i2v = diffusers.WanImageToVideoPipeline(
        **parts, image_processor=None, image_encoder=None, expand_timesteps=True
    )
    return i2v, {"prompt_embeds": pos, "negative_prompt_embeds": neg}


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["t2v", "i2v"])
def test_video_equals_wan_pipeline(mode: str) -> None:
    model = load_model(str(ROOT / "wgc_models" / "wan22" / "wan22.walk"))
    inputs = [segment("text", PROMPT)]
    if mode == "i2v":
        inputs.append(segment("image", FRAME))
    out = run_request(model, make_request(model, inputs, ["video"], {"mode": mode}))
    assert out.ok, out.error
    (video,) = out.of("video")  # [F, H, W, 3] u8
    assert video is not None

    ctx = CallContext(request_id="request-0", walk="generate", call=0)
    start = noise((16, 5, 8, 8), ctx, "wan22-latents")  # the request's starting latents
    ref = _reference(mode, _seeded_parts(), start)
    _assert_equal_video(video, ref)


def _reference(mode: str, parts: dict[str, Any], start: torch.Tensor) -> torch.Tensor:
    """The pipeline's video, ``[F, 3, H, W]`` in [0, 1]."""
    pipe, extra = _pipeline(mode, parts)
    if mode == "i2v":
        extra["image"] = FRAME.permute(2, 0, 1)[None].float() / 255
    with torch.no_grad():
        return pipe(
            height=64,
            width=64,
            num_frames=17,
            num_inference_steps=STEPS,
            guidance_scale=MODES[mode][1],
            latents=start[None],
            max_sequence_length=32,
            output_type="pt",
            return_dict=False,
            **extra,
        )[0][0]


def _assert_equal_video(video: torch.Tensor, ref: torch.Tensor) -> None:
    want = (ref.permute(0, 2, 3, 1) * 255).round().to(torch.uint8)
    assert video.shape == want.shape == (17, 64, 64, 3)
    diff = (video.int() - want.int()).abs()
    assert diff.max().item() <= 1  # a level apart only where the value sits on a rounding edge
    assert (diff > 0).float().mean().item() < 1e-3
    assert (video > 0).float().mean().item() > 0.1 and video.float().std().item() > 10


@pytest.mark.slow
def test_wgc_run_with_a_diffusers_folder_equals_wan_pipeline(tmp_path: Path) -> None:
    """``wgc run`` (worker processes) on the tiny placement with ``--set checkpoint=`` a folder
    the packages wrote, its tokenizer included (the prompt cleaned, ``</s>`` added; the
    negative prompt is ``</s>`` alone): the video equals the pipeline's over the same
    modules."""
    parts = _random_parts()
    for sub, part in parts.items():
        part.save_pretrained(tmp_path / "wan" / sub, safe_serialization=True)
    out = tmp_path / "out"
    exe = Path(sys.executable).with_name("wgc")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-c", "from wgc.cli import main; main()"]
    args = ["run", "wgc_models/wan22/wan22.walk", "-p", "wgc_models/wan22/placements/cpu.yaml"]
    args += ["--set", f"checkpoint={tmp_path / 'wan'}", "--input", f"text={PROMPT}  "]
    args += ["--seed", "1", "-o", str(out)]
    r = subprocess.run([*cmd, *args], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    video = torch.from_numpy(np.load(out / "video_000.npy"))
    ctx = CallContext(request_id="x", walk="generate", call=0, options={SEED_OPTION: 1})
    start = noise((16, 5, 8, 8), ctx, "wan22-latents")
    _assert_equal_video(video, _reference("t2v", parts, start))
