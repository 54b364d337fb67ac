"""The shared component library the examples build on.

`llama` — a Llama/Qwen2-style decoder over the paged KV pool (`LlamaDecoder`, `DecoderEngine`);
`loading` — strict safetensors loading by parameter name; `config` — the HF ``config.json``
fields a decoder needs.
"""
