"""Code generation: a `Plan` becomes readable Python modules.

`render(plan)` returns the files of ``generated/<model>/<placement>/``: one ``rank_<r>.py`` per
rank (``RANK = RankSpec(...)``), ``conductor.py`` (the flows as generator functions and
``CONDUCTOR = ConductorSpec(...)``), ``plan.json`` and ``__init__.py``. Generated modules import
only the torch-free contract (``wgc_runtime.contract``) and state the `SPEC_VERSION` they were
written for; node implementations are named by ``module:Class`` strings and imported by the
runtime, never by the generated code or the compiler.
"""

from wgc.codegen.render import GENERATED_FILES, render

__all__ = ["GENERATED_FILES", "render"]
