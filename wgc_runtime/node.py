"""Deprecated alias of `wgc_runtime.contract.node` (the node API's one import path), kept for one
release: nodes written against ``from wgc_runtime.node import Node`` keep working, with a
`DeprecationWarning` naming the new path. Importing this module *is* importing the new one
(``wgc_runtime.node is wgc_runtime.contract.node``), so classes and `isinstance` agree."""

from __future__ import annotations

import sys
import warnings

from wgc_runtime.contract import node as _node

warnings.warn(
    "`wgc_runtime.node` moved to `wgc_runtime.contract.node`; import from there "
    "(this alias goes away in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = _node
