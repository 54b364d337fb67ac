"""wgc_runtime: the thin runtime that executes what `wgc compile` generates.

Installed as package ``wgc_runtime`` (the folder is ``runtime/``; the name ``runtime`` is taken on
the package index). Generated modules import only ``wgc_runtime.contract.spec`` and the
standard library; this package never imports the compiler (``wgc``).
"""
