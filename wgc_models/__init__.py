"""The model families wgc ships, one installed folder each, and the layers they share.

Each family folder holds its model (``<family>.walk``), its placements (``placements/*.yaml``),
the architecture (``model.py``, or a few named modules when it has several parts), the node
classes the ``.walk`` names (``nodes.py``), checkpoint names and conversion (``checkpoint.py``),
its sizes (``config.py``, a tiny config beside the real one) and, for the speech families, a tiny
``tokenizer.json``. A family is registered by name under the ``wgc.models`` entry points
(``pyproject.toml``; `wgc_runtime.contract.families`), so ``wgc run orpheus`` and
``impl "orpheus.nodes:LLM"`` resolve from any folder. Shared layers are in `layers`; what the
nodes of several families share (weights, batching, speech I/O, tiny tokenizers) in `_shared`.

The models use the runtime's contract and engines, never its cores, its host layer nor the
compiler (``wgc_models/ruff.toml``); the runtime never imports them.
"""
