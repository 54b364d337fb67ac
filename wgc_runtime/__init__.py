"""wgc_runtime: the thin runtime that executes what `wgc compile` generates.

Generated modules import only ``wgc_runtime.contract.spec`` and the
standard library; this package never imports the compiler (``wgc``).
"""
