"""The qwen3_omni example: its .walk file and toy node implementations."""
