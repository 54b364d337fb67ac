"""The layers more than one family builds on, over the engines (`wgc_runtime.engines`: KV pool,
attention backends, graph capture), never the other way round.

Decoders (Llama / Qwen2 in `wgc_models.llama.model`, Qwen3 in `wgc_models.qwen3_omni`):
`config` — the HF ``config.json`` fields a decoder needs (`DecoderConfig`);
`loading` — strict safetensors loading by parameter name;
`convert` — loading that converts names on the way (a sub-model's prefix, per-expert MoE
weights, legacy weight-norm names), as strictly;
`random_init` — seeded random weights;
`norm` — `RMSNorm`;
`rope` — rotary embeddings (`inv_freq` with the config's scaling, `RopeTable`, `apply_rope`);
`linear` — linears fused into one matrix product (`FusedLinears`) and `linear_add`;
`invariant` — a batch-invariant `Linear`;
`mlp` — the SwiGLU `MLP`;
`attention` — grouped-query `Attention` over the paged KV pool and what a forward's attention
reads: `AttnStep`, the static (graph-capturable) decode path `StaticDecode`;
`block_attention` — attention over blocks of a prefix (dense or paged);
`sampling` — the next token from logits as HF ``generate`` chooses it (greedy; temperature,
top-k, top-p, repetition penalty from a `torch.Generator`).

Other shared parts: `siglip` (the SigLIP vision tower), `whisper_mel` (log-mel features),
`tokenizer` (a ``tokenizer.json`` text codec), `chat_template` (a checkpoint's prompt format),
`incremental_text` (detokenizing as tokens arrive), `host_values` (small tensors read back as
typed lists).
"""
