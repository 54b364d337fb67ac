"""A diffusers Wan folder as the upstream packages write it (``text_encoder/`` by transformers'
``save_pretrained``, ``transformer/``, ``transformer_2/`` and ``vae/`` by diffusers') at the
wan22 example's tiny sizes: every part the example's nodes build from ``config checkpoint``
holds exactly the folder's tensors (the VAE's two halves together, the whole file)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the examples' node modules are imported as `examples.<family>`
    sys.path.insert(0, str(ROOT))

from wgc_models.wan22 import tiny  # noqa: E402
from wgc_models.wan22.nodes import Dit, TextEncoder, VaeDecoder, VaeEncoder  # noqa: E402
from wgc_runtime.host.preflight import part_bytes  # noqa: E402

diffusers = pytest.importorskip("diffusers")
transformers = pytest.importorskip("transformers")


def _random(module: torch.nn.Module) -> torch.nn.Module:
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return module


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    root = tmp_path_factory.mktemp("wan")
    torch.manual_seed(5)
    text = transformers.UMT5EncoderModel(
        transformers.UMT5Config(**dataclasses.asdict(tiny.TEXT), feed_forward_proj="gated-gelu")
    )
    refs: dict[str, Any] = {"text_encoder": _random(text)}
    for sub in ("transformer", "transformer_2"):
        refs[sub] = _random(diffusers.WanTransformer3DModel(**dataclasses.asdict(tiny.DIT)))
    raw = {
        k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(tiny.VAE).items()
    }
    refs["vae"] = _random(diffusers.AutoencoderKLWan(**raw))
    for sub, ref in refs.items():
        ref.save_pretrained(root / sub, safe_serialization=True)
    (root / "tokenizer").mkdir()
    words = {"<pad>": 0, "</s>": 1, "<unk>": 2, "x": 3}
    tok = Tokenizer(models.WordLevel(words, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(root / "tokenizer" / "tokenizer.json"))
    tok.save(str(root / "tokenizer.json"))  # a spare copy for the tests' other folders
    return root, refs


def _same(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert set(got) == set(want)
    assert all(torch.equal(got[k], want[k]) for k in got)


def test_every_part_loads_the_folder(folder):
    root, refs = folder
    path = str(root)
    text = refs["text_encoder"].state_dict()
    text.pop("encoder.embed_tokens.weight")  # tied to shared.weight
    _same(tiny.build_text_encoder(path).state_dict(), text)
    _same(tiny.build_transformer("high_noise", path).state_dict(), refs["transformer"].state_dict())
    _same(
        tiny.build_transformer("low_noise", path).state_dict(), refs["transformer_2"].state_dict()
    )
    halves = {
        **tiny.build_vae_decoder(path).state_dict(),
        **tiny.build_vae_encoder(path).state_dict(),
    }
    _same(halves, refs["vae"].state_dict())
    assert tiny.build_vae_decoder(path).cfg.latents_mean == tiny.VAE.latents_mean


def test_weights_are_said_before_they_are_built(folder):
    """`Node.weights`: each node's parameters at the tiny sizes, and the same count read from
    the folder's headers when it is given (the VAE's halves apart)."""
    root, _ = folder
    built = {
        TextEncoder: tiny.build_text_encoder(),
        Dit: tiny.build_transformer("low_noise"),
        VaeEncoder: tiny.build_vae_encoder(),
        VaeDecoder: tiny.build_vae_decoder(),
    }
    for cls, module in built.items():
        count = sum(p.numel() for p in module.parameters())
        config = {"expert": "low_noise"}
        (alone,) = cls.weights(config)
        assert alone.params == count and part_bytes(alone) == (4 * count, False)
        (given,) = cls.weights({**config, "checkpoint": str(root)})
        assert part_bytes(given) == (4 * count, True), cls


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sets", "problem"),
    [
        (["text_dim=64"], "seeded weights are built at the tiny sizes only"),
        (["latent_channels=48"], "latent_channels 48 (tiny: 16)"),
        (["checkpoint={bad}"], "text_dim 32 (checkpoint: 48)"),
        (["checkpoint={untokenized}"], "has no `tokenizer/tokenizer.json`"),
    ],
)
def test_a_rank_with_other_sizes_refuses_to_start(folder, tmp_path: Path, sets, problem):
    """Sizes the built parts do not have (the params against the tiny sizes or the folder's
    config.json files), or a folder without a tokenizer: `wgc run` exits 1 with the sizes."""
    root, refs = folder
    bad = tmp_path / "bad"
    raw = {**dataclasses.asdict(tiny.DIT), "text_dim": 48}
    for sub in ("transformer", "transformer_2"):
        diffusers.WanTransformer3DModel(**raw).save_pretrained(bad / sub)
    for sub in ("text_encoder", "vae"):
        refs[sub].save_pretrained(bad / sub)
    (bad / "tokenizer").mkdir()
    (bad / "tokenizer" / "tokenizer.json").write_text((root / "tokenizer.json").read_text())
    untokenized = tmp_path / "untokenized"
    for sub in ("text_encoder", "transformer", "transformer_2", "vae"):
        refs[sub].save_pretrained(untokenized / sub)
    args = [
        "run",
        str(ROOT / "wgc_models" / "wan22" / "wan22.walk"),
        "--local",
        "--input",
        "text=x",
        "-o",
        "o",
    ]
    for s in sets:
        args += ["--set", s.format(bad=bad, untokenized=untokenized)]
    cli = [sys.executable, "-c", "from wgc.cli import main; main()", *args]
    cli += ["-o", str(tmp_path / "out")]
    r = subprocess.run(cli, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and problem in r.stderr, r.stderr
