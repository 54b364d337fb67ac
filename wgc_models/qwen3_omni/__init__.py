"""Qwen3-Omni (Thinker, Talker, Code2Wav): its .walk file, placements and node implementations
over the real architecture."""
