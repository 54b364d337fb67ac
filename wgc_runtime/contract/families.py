"""Model families by name: the ``wgc.models`` entry-point group, and what a name resolves to.

A package registers a family with one line of its ``pyproject.toml``::

    [project.entry-points."wgc.models"]
    mytts = "mypkg.mytts"

The value is the family's package: the folder that holds ``mytts.walk``, its ``placements/``
and the node modules. The bundled families register the same way, so
a third-party family is no different from a bundled one.

An ``impl`` (or ``flow``) string whose first component names a registered family is read inside
that family's package: ``impl "mytts.nodes:LLM"`` imports ``mypkg.mytts.nodes``. Any other
module path (a user's ``mypkg.nodes:X``, or the full ``mypkg.mytts.nodes:X``) is
imported as written. The lookup reads installed metadata only (no import, no working
directory), so a plan loads the same from any folder.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from functools import cache
from pathlib import Path

__all__ = ["GROUP", "Family", "families", "family", "resolve_impl", "resolve_module"]

GROUP = "wgc.models"


@dataclass(frozen=True)
class Family:
    """One registered family: its name and the package that holds it."""

    name: str
    package: str

    def folder(self) -> Path | None:
        """The package's folder (its ``<name>.walk`` and ``placements/``), found without
        importing the package itself (only its parents); None when it is not importable."""
        try:
            spec = importlib.util.find_spec(self.package)
        except (ImportError, ValueError):
            return None
        if spec is None or not spec.submodule_search_locations:
            return None
        return Path(next(iter(spec.submodule_search_locations)))

    def walk(self) -> Path | None:
        """The family's model file, ``<folder>/<name>.walk``; None when it has none."""
        folder = self.folder()
        if folder is None:
            return None
        path = folder / f"{self.name}.walk"
        return path if path.is_file() else None


@cache
def families() -> dict[str, Family]:
    """Every registered family by name (the installed distributions' ``wgc.models`` entry
    points; the first registration of a name wins, in the order importlib lists them)."""
    from importlib.metadata import entry_points  # only when a name is looked up: start-up

    out: dict[str, Family] = {}
    for ep in entry_points(group=GROUP):
        out.setdefault(ep.name, Family(ep.name, ep.value.partition(":")[0].strip()))
    return out


def family(name: str) -> Family | None:
    """The registered family called ``name``, or None."""
    return families().get(name)


def resolve_module(module: str) -> str:
    """``mytts.nodes`` → ``mypkg.mytts.nodes`` when ``mytts`` is a registered family;
    any other module path as it is."""
    head, dot, rest = module.partition(".")
    fam = families().get(head)
    if fam is None:
        return module
    return fam.package + dot + rest


def resolve_impl(impl: str) -> str:
    """An ``impl`` / ``flow`` string (``module:Name``) with its module resolved
    (`resolve_module`); a string without a module part as it is."""
    module, sep, name = impl.partition(":")
    return resolve_module(module) + sep + name if module else impl
