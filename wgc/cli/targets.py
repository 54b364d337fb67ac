"""Models and placements by name: `wgc run orpheus --placement cpu-2rank`.

Wherever a command takes a ``.walk`` path it also takes the name of a registered model family
(the ``wgc.models`` entry points, `wgc_runtime.contract.families`): the family's
``<name>.walk``, found in its installed package, so the command works from any folder. A
placement may be given by name too, resolved in the ``placements/`` folder beside the model.
A path that exists always wins; an argument that looks like a path (a folder separator, a glob,
a ``.walk`` / ``.yaml`` suffix) is left to the command's own "no such file" error. An unknown
name is an error with its code and the closest names (WG840 for a model, WG841 for a
placement).
"""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

import click

from wgc.cli.errors import UserError
from wgc.diagnostics.suggest import did_you_mean
from wgc_runtime.contract.families import families, family

__all__ = [
    "UnknownName",
    "family_pairs",
    "is_name",
    "model_file",
    "model_folder",
    "placement_file",
    "resolve_names",
]

_PATH_MARKS = set("/\\*?[")
_SUFFIXES = (".walk", ".yaml", ".yml")
_PLACEMENT_SUFFIXES = (".yaml", ".yml")


class UnknownName(UserError):
    """A model or placement name that names nothing: ``error[CODE]: message`` and its help."""

    def __init__(self, code: str, message: str, help: str) -> None:
        super().__init__(message)
        self.code = code
        self.help = help

    def show(self, file: TextIO | None = None) -> None:
        click.echo(f"error[{self.code}]: {self.message}", err=file is None, file=file)
        click.echo(f"  = help: {self.help}", err=file is None, file=file)


def is_name(arg: str) -> bool:
    """Whether ``arg`` reads as a name rather than a path (no separator, glob or file suffix)."""
    return bool(arg) and not (_PATH_MARKS & set(arg)) and not arg.endswith(_SUFFIXES)


def shown(path: Path, root: Path | None = None) -> str:
    """``path`` relative to ``root`` (the working folder) when it lies under it (so generated
    files and diagnostics name ``wgc_models/orpheus/orpheus.walk`` in a checkout), else
    absolute."""
    path = path.resolve()
    try:
        return path.relative_to((root or Path.cwd()).resolve()).as_posix()
    except ValueError:
        return str(path)


def _family_walk(name: str) -> Path:
    fam = family(name)
    walk = fam.walk() if fam is not None else None
    if walk is not None:
        return walk
    known = sorted(n for n, f in families().items() if f.walk() is not None)
    close = did_you_mean(name, known, end=" ")
    listing = f"registered families: {', '.join(known)}" if known else "no family is registered"
    why = "its package has no model file" if fam is not None else "nor a registered model family"
    raise UnknownName(
        "WG840",
        f"`{name}` is neither a file {why}",
        f"{close}({listing}; a package registers one under the `wgc.models` entry points)",
    )


def model_file(arg: str) -> str:
    """The ``.walk`` file ``arg`` names: a path as it is, a family name as its model file."""
    if Path(arg).exists() or not is_name(arg):
        return arg
    return shown(_family_walk(arg))


def model_folder(arg: str) -> str:
    """The folder a family name stands for in `wgc check` / `wgc fmt` (its model file and its
    placements); a path as it is."""
    if Path(arg).exists() or not is_name(arg):
        return arg
    return shown(_family_walk(arg).parent)


def resolve_names(model: str, placement: str | None) -> tuple[Path, str | None]:
    """``model`` (`model_file`) and, when it is a file, ``placement`` (`placement_file`) beside
    it; a folder's placement is left as given (a generated folder takes none). A family name
    with one of its placements runs the model that placement is for (`paired_model`: `wgc run
    llama -p spec-cpu` runs ``speculative.walk``)."""
    path = Path(model_file(model))
    if not path.is_file():
        return path, placement
    where = placement_file(placement, str(path))
    if where is not None and model != str(path) and placement == Path(where).stem:
        path = Path(shown(paired_model(path, Path(where))))
    return path, where


def placement_file(arg: str | None, walk: str) -> str | None:
    """The placement file ``arg`` names: a path as it is, a name as
    ``<walk's folder>/placements/<name>.yaml``."""
    if arg is None or Path(arg).exists() or not is_name(arg):
        return arg
    folder = Path(walk).parent / "placements"
    for suffix in _PLACEMENT_SUFFIXES:
        if (folder / f"{arg}{suffix}").is_file():
            return shown(folder / f"{arg}{suffix}")
    names = _placement_names(folder)
    close = did_you_mean(arg, names, end=" ")
    listing = f"placements there: {', '.join(names)}" if names else "that folder has none"
    raise UnknownName(
        "WG841",
        f"`{arg}` is neither a file nor a placement in `{shown(folder)}`",
        f"{close}({listing})",
    )


def _placements(folder: Path) -> list[Path]:
    """The placement files in ``folder``, sorted (none when it is not a folder)."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.suffix in _PLACEMENT_SUFFIXES)


def _placement_names(folder: Path) -> list[str]:
    return [p.stem for p in _placements(folder)]


def family_pairs(root: Path | None = None) -> list[tuple[str, str]]:
    """(model.walk, placement.yaml) for every placement of every registered family, relative to
    ``root`` (the working folder) when under it. In a family folder with several models, a
    placement whose name's first word (before a ``-``) starts another model's name is that
    model's (llama's ``spec-cpu.yaml``: ``speculative.walk``), any other the family's own."""
    pairs = []
    for _, fam in sorted(families().items()):
        walk = fam.walk()
        if walk is None:
            continue
        for p in _placements(walk.parent / "placements"):
            pairs.append((shown(paired_model(walk, p), root), shown(p, root)))
    return pairs


def paired_model(walk: Path, placement: Path) -> Path:
    """The model file of ``walk``'s folder that ``placement`` is for: another model whose name
    starts with the placement name's first word (before a ``-``), else ``walk`` itself."""
    word = placement.stem.split("-")[0]
    others = sorted(w for w in walk.parent.glob("*.walk") if w.resolve() != walk.resolve())
    return next((w for w in others if w.stem.startswith(word)), walk)
