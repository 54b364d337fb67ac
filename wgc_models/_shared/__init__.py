"""Each speech family's tiny config in one place, with the real sizes beside it: `orpheus`
(the Llama LM, SNAC 24 kHz, the token ranges) and `qwen3_omni` (Thinker, Talker with its code
predictor, Code2Wav, the special token ids)."""
