"""The layers more than one family builds on, over the engines (`wgc_runtime.engines`: KV pool,
attention backends, graph capture), never the other way round.

Decoders (Llama / Qwen2, and the LMs built on them):
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
`moe` — `SparseMoeBlock` (top-k router, fused experts, optional gated shared expert);
`attention` — grouped-query `Attention` over the paged KV pool and what a forward's attention
reads: `AttnStep`, the static (graph-capturable) decode path `StaticDecode`;
`qk_attention` — `QKNormAttention` (per-head q/k RMSNorm) over the same pool;
`block_attention` — attention over blocks of a prefix (dense or paged);
`decoder` — `DecoderLayer` and the Llama/Qwen2 `LlamaDecoder`, loaded from HF checkpoints;
`decode_engine` — `DecoderEngine`: decoder + pool + backend (prefill, decode, fork, free, the
static decode unit), the step engine a `wgc_runtime.engines.batching.ContinuousBatcher` drives;
`sampling` — the next token from logits as HF ``generate`` chooses it (greedy; temperature,
top-k, top-p, repetition penalty from a `torch.Generator`).

Other shared parts: `conv1d` (1-D convolutions as the audio codecs run them), `siglip` (the
SigLIP vision tower), `whisper_mel` (log-mel features), `tokenizer` (a ``tokenizer.json`` text
codec), `chat_template` (a checkpoint's prompt format), `incremental_text` (detokenizing as
tokens arrive).
"""
