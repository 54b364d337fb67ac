"""The shared component library the examples build on: model layers, one file per family, over
the engines (`wgc_runtime.engines`: KV pool, attention backends, graph capture), never the
other way round.

Decoders (Llama / Qwen2):
`config` — the HF ``config.json`` fields a decoder needs (`DecoderConfig`);
`loading` — strict safetensors loading by parameter name;
`convert` — loading that converts names on the way (a sub-model's prefix, per-expert MoE
weights, legacy weight-norm names), as strictly;
`norm` — `RMSNorm`;
`rope` — rotary embeddings (`inv_freq` with the config's scaling, `RopeTable`, `apply_rope`);
`linear` — linears fused into one matrix product (`FusedLinears`) and `linear_add`;
`mlp` — the SwiGLU `MLP`;
`attention` — grouped-query `Attention` over the paged KV pool and what a forward's attention
reads: `AttnStep`, the static (graph-capturable) decode path `StaticDecode`;
`decoder` — `DecoderLayer` and the Llama/Qwen2 `LlamaDecoder`, loaded from HF checkpoints;
`decode_engine` — `DecoderEngine`: decoder + pool + backend (prefill, decode, fork, free, the
static decode unit), the step engine a `wgc_runtime.engines.batching.ContinuousBatcher` drives;
`sampling` — the next token from logits as HF ``generate`` chooses it (greedy; temperature,
top-k, top-p, repetition penalty from a `torch.Generator`).

Qwen3 stacks (MoE) and Qwen3-Omni:
`qk_attention` — `QKNormAttention` (Qwen3's per-head q/k RMSNorm) over the same pool;
`moe` — `SparseMoeBlock` (top-k router, fused experts, optional gated shared expert);
`qwen3_stack` — `Qwen3Stack`, layers + norm fed with embeddings (optionally returning one
layer's hidden states); `stack_engine` — `StackEngine`, a stack stepped over a pool;
`omni_config` — Qwen3-Omni's ``config.json``; `omni_audio` — the audio encoder;
`omni_thinker` — the Thinker and `ThinkerEngine` (per pass: logits, embeddings, accept-layer
hidden states); `omni_talker` — the Talker and `TalkerEngine`; `code_predictor` — the Talker's
code predictor for the residual codebooks (a scratch pool per frame); `omni_handoff` —
`TalkerFeed`, the Thinker → Talker hand-off streamed; `code2wav` — Code2Wav, chunked.

SNAC and Orpheus:
`snac` — the SNAC 24 kHz decoder under the `snac` package's names;
`orpheus` — Orpheus's token ids, the audio-token → SNAC-code mapping, the window vocoder.

`configs` — each family's tiny config with the real one beside it; `pipelines` — whole
requests in one process, from the components and from the reference implementations.
"""
