"""The real-size placements of BAGEL, V-JEPA 2-AC and π0.5 (``placements/real-*.yaml``) set every
size of their ``.walk`` at once, and the sizes are the real configs' (what the nodes check when
they load, and what the ports carry): the KV geometry of every kv_cache node, the widths and
the latent grid. Checked on the compiled plans, without building the models."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from wgc.cli.compile import sync  # noqa: E402
from wgc.driver import Driver  # noqa: E402
from wgc_models.bagel import config as bagel  # noqa: E402
from wgc_models.pi05 import config as pi05  # noqa: E402
from wgc_models.vjepa2_ac import config as vjepa2_ac  # noqa: E402
from wgc_runtime.contract.spec import TypeSpec  # noqa: E402
from wgc_runtime.host.loading import load_plan  # noqa: E402


def nodes(tmp_path: Path, family: str, placement: str) -> dict[str, tuple[dict, dict]]:
    """Each node's (config, {port: TypeSpec}) on the compiled plan."""
    walk = ROOT / "wgc_models" / family / f"{family}.walk"
    place = ROOT / "wgc_models" / family / "placements" / f"{placement}.yaml"
    result = Driver().compile(str(walk), str(place))
    assert result.ok, [d.message for d in result.errors]
    sync(tmp_path, result.files, check=False)
    _, ranks = load_plan(tmp_path)
    return {
        n.name: (dict(n.config), dict(n.inputs) | dict(n.outputs)) for r in ranks for n in r.nodes
    }


def geometry(config: dict) -> tuple[int, int, int]:
    return (int(config["layers"]), int(config["kv_heads"]), int(config["head_dim"]))


def test_bagel_real_3xh100(tmp_path) -> None:
    real, got = bagel.REAL, nodes(tmp_path, "bagel", "real-3xh100")
    llm = real.llm
    for name in ("LLM", "LLM_cfg_text", "LLM_cfg_img"):
        config, _ = got[name]
        assert config["model"] == "real"
        assert geometry(config) == (llm.num_hidden_layers, llm.num_key_value_heads, llm.head_dim)
    _, ports = got["LLM"]
    assert ports["vit_embeddings"] == TypeSpec("bf16", ("V", llm.hidden_size))
    side = 1024 // 2 ** (len(real.vae.block_out_channels) - 1)  # the VAE's 8x
    p = real.latent_patch_size
    assert ports["latents"] == TypeSpec("f32", ((side // p) ** 2, real.patch_latent_dim))
    assert side // p <= real.max_latent_size
    assert ports["edit_latents"] == TypeSpec("f32", ("Gh", "Gw", real.patch_latent_dim))
    _, ports = got["vae_decoder"]  # the square (text-to-image) or the edited image's shape
    assert ports["image"] == TypeSpec("u8", ("Ih", "Iw", 3))
    assert {got[n][0]["model"] for n in ("vit_encoder", "vae_encoder", "vae_decoder")} == {"real"}


def test_vjepa2_ac_real_1gpu(tmp_path) -> None:
    real, got = vjepa2_ac.REAL, nodes(tmp_path, "vjepa2_ac", "real-1gpu")
    pred = real.predictor
    for name in ("predictor", "rollout_predictor"):
        config, ports = got[name]
        assert config["model"] == "real"
        assert geometry(config) == (pred.depth, pred.num_heads, pred.head_dim)
        assert int(config["kv_tokens"]) == 32 * pred.tokens_per_frame  # 32 frames
        assert ports["prediction"] == TypeSpec("f32", (real.encoder.frame_tokens, pred.embed_dim))
    _, ports = got["video_encoder"]
    assert ports["latents"] == TypeSpec("f32", ("C", real.encoder.hidden_size))
    assert pred.embed_dim == real.encoder.hidden_size


@pytest.mark.parametrize("name", ["LLM", "LLM_1", "LLM_2", "LLM_3"])
def test_pi05_real_1gpu(tmp_path, name) -> None:
    real, got = pi05.REAL, nodes(tmp_path, "pi05", "real-1gpu")
    text = real.text
    config, ports = got[name]
    assert config["model"] == "real"
    assert geometry(config) == (text.num_hidden_layers, text.num_key_value_heads, text.head_dim)
    assert ports["image_embeddings"] == TypeSpec("bf16", ("V", text.hidden_size))
    assert ports["noisy_actions"] == TypeSpec("f32", (real.chunk_size, real.max_action_dim))
    cameras = 3 * real.vision.num_patches  # three cameras' image tokens, then the prompt
    assert cameras < int(config["kv_tokens"])
