"""A Llama-architecture decoder served for text generation (the engines' end-to-end example)."""
