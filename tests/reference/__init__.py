"""Whole requests run in one process, for the end-to-end tests and the benchmarks: per speech
family, the pipeline built from wgc's components (stepped as nodes would: KV kept across steps,
the streams' windows and chunks) and the reference pipeline (the transformers / snac modules
driven by hand in a Python loop), which must give the same waveform on the same weights.

`speech` — the options and the result both kinds share; `orpheus` / `orpheus_reference`;
`qwen3_omni` / `qwen3_omni_reference`; `pi05_reference`, π0.5's action flow called directly.
"""
