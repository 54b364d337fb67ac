"""Deprecated alias of `wgc_runtime.core.streams` (stream buffers and chunk policies), kept for
one release: code importing ``wgc_runtime.streams`` keeps working, with a `DeprecationWarning`
naming the new path. Importing this module *is* importing the new one."""

from __future__ import annotations

import sys
import warnings

from wgc_runtime.core import streams as _streams

warnings.warn(
    "`wgc_runtime.streams` moved to `wgc_runtime.core.streams`; import from there "
    "(this alias goes away in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = _streams
