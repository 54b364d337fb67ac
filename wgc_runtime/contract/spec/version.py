"""The version of the plan records, and how ``plan.json`` stays byte-identical as they grow.

Every generated module states the `SPEC_VERSION` it was written for; the runtime refuses a
module of another version before importing it (`check_spec_version`), and ``plan.json`` carries
it as ``"version"``. Any change to the records (`wgc_runtime.contract.spec`) that an older module
could not satisfy bumps it. A field added later carries `OMIT_DEFAULT`, so plans written before
it keep their bytes.
"""

from __future__ import annotations

SPEC_VERSION = 7
"""The version of these records that generated modules and ``plan.json`` are written for."""

OMIT_DEFAULT = {"omit_default": True}
"""Field metadata: ``plan.json`` leaves the field out while it has its default (a field added
after plans were generated, so those stay byte-identical)."""


class SpecVersionError(RuntimeError):
    """A generated module (or plan) written for another version of these records."""


def check_spec_version(found: int | None, where: str) -> None:
    """Raise `SpecVersionError` unless ``found`` (the version ``where`` was written for; None
    when it names none) is `SPEC_VERSION`."""
    if found == SPEC_VERSION:
        return
    said = "names no spec version" if found is None else f"was generated for spec version {found}"
    raise SpecVersionError(
        f"`{where}` {said}, but this runtime reads spec version {SPEC_VERSION}: recompile it "
        "with this wgc (`wgc compile MODEL.walk --placement P.yaml`)"
    )
