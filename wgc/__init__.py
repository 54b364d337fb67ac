"""wgc: a compiler for composite multimodal models written as `.walk` walk graphs."""

__version__ = "0.1.0"
