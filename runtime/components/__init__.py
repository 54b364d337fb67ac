"""The shared component library the examples build on: model layers, one file per family, over
the engines (`wgc_runtime.engines`: KV pool, attention backends, graph capture), never the
other way round.

`config` — the HF ``config.json`` fields a decoder needs (`DecoderConfig`);
`loading` — strict safetensors loading by parameter name;
`norm` — `RMSNorm`;
`rope` — rotary embeddings (`inv_freq` with the config's scaling, `RopeTable`, `apply_rope`);
`linear` — linears fused into one matrix product (`FusedLinears`) and `linear_add`;
`mlp` — the SwiGLU `MLP`;
`attention` — grouped-query `Attention` over the paged KV pool and what a forward's attention
reads: `AttnStep`, the static (graph-capturable) decode path `StaticDecode`;
`decoder` — `DecoderLayer` and the Llama/Qwen2 `LlamaDecoder`, loaded from HF checkpoints;
`decode_engine` — `DecoderEngine`: decoder + pool + backend (prefill, decode, fork, free, the
static decode unit), the step engine a `wgc_runtime.engines.batching.ContinuousBatcher` drives.
"""
