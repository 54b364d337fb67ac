"""The tiny Wan2.2 the example runs without a checkpoint: sizes that fit the ``.walk``'s params
(16 latent channels, a VAE stride of 8 in space and 4 in time, 32 text rows of 32), each part
built with seeded random weights (`build_*`: the same seed, the same weights on every rank),
or loaded from a diffusers Wan folder (``text_encoder/``, ``transformer/``, ``transformer_2/``,
``vae/``) when the node is given one.
"""

from __future__ import annotations

from pathlib import Path

from wgc_models.layers.random_init import init_seeded
from wgc_models.wan22.checkpoint import (
    load_decoder,
    load_encoder,
    load_text_encoder,
    load_transformer,
)
from wgc_models.wan22.scheduler import FlowUniPCConfig
from wgc_models.wan22.text import PromptTokenizer, UMT5Config, UMT5Encoder
from wgc_models.wan22.transformer import WanDitConfig, WanTransformer
from wgc_models.wan22.vae import WanVaeConfig, WanVaeDecoder
from wgc_models.wan22.vae_encoder import WanVaeEncoder

TEXT = UMT5Config(
    vocab_size=256,  # the prompt's UTF-8 bytes are its token ids
    d_model=32,
    d_kv=8,
    d_ff=64,
    num_layers=2,
    num_heads=4,
)
DIT = WanDitConfig(
    num_attention_heads=2,
    attention_head_dim=16,
    in_channels=16,
    out_channels=16,
    text_dim=32,
    freq_dim=32,
    ffn_dim=64,
    num_layers=2,
    rope_max_seq_len=64,
)
VAE = WanVaeConfig(
    base_dim=8,
    z_dim=16,
    dim_mult=(1, 2, 2, 2),
    num_res_blocks=1,
    latents_mean=tuple(round(-0.5 + i / 15, 6) for i in range(16)),
    latents_std=tuple(round(0.8 + 0.05 * i, 6) for i in range(16)),
)
SCHEDULER = FlowUniPCConfig(solver_order=2, solver_type="bh2")  # flow_shift: per request

SEEDS = {
    "text_encoder": 2201,
    "high_noise": 2202,
    "low_noise": 2203,
    "vae": 2204,
    "vae_encoder": 2205,
}
SUBFOLDERS = {"high_noise": "transformer", "low_noise": "transformer_2"}


def build_text_encoder(checkpoint: str = "") -> UMT5Encoder:
    if checkpoint:
        return load_text_encoder(Path(checkpoint) / "text_encoder")
    return init_seeded(UMT5Encoder(TEXT), SEEDS["text_encoder"])


def prompt_tokenizer(checkpoint: str, length: int) -> PromptTokenizer | None:
    """The folder's ``tokenizer/tokenizer.json``; None without a checkpoint (the tiny model's
    tokens are the prompt's UTF-8 bytes). A checkpoint without one is an error: its ids would
    mean nothing to its encoder."""
    if not checkpoint:
        return None
    path = Path(checkpoint) / "tokenizer" / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint `{checkpoint}` has no `tokenizer/tokenizer.json`")
    return PromptTokenizer(path, length)


def build_transformer(expert: str, checkpoint: str = "") -> WanTransformer:
    """``expert``: ``high_noise`` (diffusers' ``transformer``) or ``low_noise``
    (``transformer_2``)."""
    if checkpoint:
        return load_transformer(Path(checkpoint) / SUBFOLDERS[expert])
    return init_seeded(WanTransformer(DIT), SEEDS[expert])


def build_vae_decoder(checkpoint: str = "") -> WanVaeDecoder:
    if checkpoint:
        return load_decoder(Path(checkpoint) / "vae")
    return init_seeded(WanVaeDecoder(VAE), SEEDS["vae"])


def build_vae_encoder(checkpoint: str = "") -> WanVaeEncoder:
    if checkpoint:
        return load_encoder(Path(checkpoint) / "vae")
    return init_seeded(WanVaeEncoder(VAE), SEEDS["vae_encoder"])


def configs(checkpoint: str = "") -> tuple[UMT5Config, dict[str, WanDitConfig], WanVaeConfig]:
    """The parts' sizes: the folder's ``config.json`` files, else the tiny ones."""
    if not checkpoint:
        return TEXT, {"high_noise": DIT, "low_noise": DIT}, VAE
    root = Path(checkpoint)
    dits = {e: WanDitConfig.from_folder(root / sub) for e, sub in SUBFOLDERS.items()}
    return (
        UMT5Config.from_folder(root / "text_encoder"),
        dits,
        WanVaeConfig.from_folder(root / "vae"),
    )
