"""`wgc check PATH...`: run the front end on every `.walk` file and report its diagnostics.

Placement files (`*.yaml`, `*.yml`) are checked too: paired with their model when one is known
(`--model FILE`, or by the folder convention `<dir>/<model>.walk` + `<dir>/placements/*.yaml`:
the one `.walk` file of the placements folder's parent), the placement rules run against it;
alone, everything that needs no model (YAML shape, keys, ranks, sizes, devices). A folder
yields its `.walk` files and the placement files of their `placements/` folders.

`--imports` also imports every node's `impl` and checks its class (`wgc.cli.check_imports`):
opt-in, for environments that have the node code.

Text goes to stderr like rustc's; `json`, `github` and `sarif` go to stdout for CI to consume.
Exit 0 when clean, 1 on any error (or any warning under `-W`).
"""

from __future__ import annotations

import glob
import importlib
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import click

from wgc.cli.errors import EXIT_OK, EXIT_USER, UserError
from wgc.cli.targets import is_name, model_folder
from wgc.config import Env
from wgc.diagnostics.codes import Severity
from wgc.diagnostics.diagnostic import Diagnostic, SourceMap
from wgc.diagnostics.render import (
    render_github,
    render_json,
    render_sarif,
    render_summary,
    render_text,
)
from wgc.diagnostics.suggest import closest

_GLOB_CHARS = frozenset("*?[")
PLACEMENT_SUFFIXES = (".yaml", ".yml")


class FrontEndResult(Protocol):
    """What `wgc.driver.front_end(path)` returns."""

    model: Any
    diagnostics: list[Diagnostic]
    sources: SourceMap


# -- path expansion ------------------------------------------------------------------------------


def _walk_files(directory: Path) -> list[Path]:
    """Every `*.walk` under ``directory``, and the placement files of the `placements/` folder
    beside each, skipping hidden folders such as `.venv` and `.git`."""
    found = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
        found += [Path(root, f) for f in files if f.endswith(".walk")]
        if Path(root).name == "placements" and list(Path(root).parent.glob("*.walk")):
            found += [Path(root, f) for f in files if f.endswith(PLACEMENT_SUFFIXES)]
    return found


def is_placement(path: str) -> bool:
    return path.endswith(PLACEMENT_SUFFIXES)


def paired_model(placement: str) -> str | None:
    """The model of a placement by the folder convention: the one `.walk` file beside the
    `placements/` folder that holds it."""
    folder = Path(placement).parent
    if folder.name != "placements":
        return None
    walks = sorted(folder.parent.glob("*.walk"))
    return os.path.normpath(walks[0]) if len(walks) == 1 else None


def _expand_one(arg: str) -> list[Path]:
    path = Path(arg)
    if path.is_dir():
        return _walk_files(path)
    if path.is_file():
        return [path]
    if _GLOB_CHARS & set(arg):
        matches: list[Path] = []
        for match in glob.glob(arg, recursive=True):
            matches += _expand_one(match) if Path(match).is_dir() else [Path(match)]
        return matches
    if is_name(arg):  # a registered family: its model file and placements (WG840 if none)
        return _expand_one(model_folder(arg))
    raise UserError(f"no such file or directory: `{arg}`")


def expand_paths(args: Iterable[str], placements: bool = True) -> list[str]:
    """Files named by ``args`` (files, folders searched for `*.walk`, or globs), sorted, unique;
    without ``placements``, placement files are left out (`wgc fmt` formats `.walk` files only).

    A path that names nothing is a user error, so a typo in CI never passes as "0 files checked".
    """
    seen: dict[str, str] = {}
    for arg in args:
        files = [f for f in _expand_one(arg) if placements or not is_placement(str(f))]
        if not files:
            what = "`.walk` files (nor placement files)" if placements else "`.walk` files"
            raise UserError(f"`{arg}` matches no {what}")
        for file in files:
            seen.setdefault(os.path.realpath(file), os.path.normpath(file))
    return sorted(seen.values())


# -- running -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Checked:
    path: str
    diagnostics: list[Diagnostic]
    sources: SourceMap


def _check_placement(driver, path: str, model_path: str | None, models: dict) -> _Checked:
    """A placement file, with its model's rules when the model checks clean."""
    from wgc.placement.check import check_placement

    front = None
    if model_path is not None:
        if model_path not in models:
            models[model_path] = driver.front_end(model_path)
        front = models[model_path]
    model = front.model if front is not None and not _has_errors(front.diagnostics) else None
    result = check_placement(model, path)
    sources = front.sources if front is not None else SourceMap()
    sources.add(path, result.text)
    return _Checked(path, list(result.diagnostics), sources)


def _has_errors(diags: Iterable[Diagnostic]) -> bool:
    return any(d.severity is Severity.ERROR for d in diags)


def _driver():
    """One driver for the whole command: the grammar is compiled once, not once per file.
    (Looked up when the command runs, so tests can replace `wgc.driver.Driver`.)"""
    return importlib.import_module("wgc.driver").Driver()


def _check_pass_name(name: str) -> None:
    from wgc.driver import PASS_NAMES

    if name not in PASS_NAMES:
        close = closest(name, PASS_NAMES)
        hint = f"; did you mean `{close}`?" if close else ""
        raise UserError(f"unknown pass `{name}`{hint} (passes: {', '.join(PASS_NAMES)})")


def _use_color(choice: str, env: Env) -> bool:
    if choice != "auto":
        return choice == "always"
    if env.no_color:
        return False
    return env.force_color or sys.stderr.isatty()


def _count(diags: Iterable[Diagnostic], severity: Severity) -> int:
    return sum(d.severity is severity for d in diags)


def _emit_text(
    results: Sequence[_Checked], *, color: bool, quiet: bool, warnings_as_errors: bool
) -> None:
    shown = {Severity.ERROR} if quiet and not warnings_as_errors else set(Severity)
    for result in results:
        diags = [d for d in result.diagnostics if d.severity in shown]
        if not diags:
            continue
        click.echo(render_text(diags, result.sources, color=color), err=True, nl=False)
        if not quiet:
            n_err = _count(diags, Severity.ERROR)
            summary = render_summary(n_err, _count(diags, Severity.WARNING), result.path, color)
            click.echo(summary + "\n", err=True)
    if not quiet:
        every = [d for r in results for d in r.diagnostics]
        n_files = f"{len(results)} file" + ("" if len(results) == 1 else "s")
        errors, warnings = _count(every, Severity.ERROR), _count(every, Severity.WARNING)
        e_word = "error" if errors == 1 else "errors"
        w_word = "warning" if warnings == 1 else "warnings"
        click.echo(f"checked {n_files}: {errors} {e_word}, {warnings} {w_word}", err=True)


def _emit_machine(fmt: str, results: Sequence[_Checked]) -> None:
    every = [d for r in results for d in r.diagnostics]
    render = {"json": render_json, "github": render_github, "sarif": render_sarif}[fmt]
    click.echo(render(every), nl=False)


@click.command()
@click.argument("paths", nargs=-1, required=True)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json", "github", "sarif"]),
    default="text",
    show_default=True,
    help="text for people (stderr); json, github or sarif for CI (stdout).",
)
@click.option("-W", "--warnings-as-errors", is_flag=True, help="Fail (exit 1) on warnings too.")
@click.option(
    "--color",
    type=click.Choice(["auto", "always", "never"]),
    default="auto",
    show_default=True,
    help="Color text output.",
)
@click.option("-q", "--quiet", is_flag=True, help="Text output: only errors, no summary.")
@click.option(
    "--model",
    "model_path",
    metavar="FILE",
    default=None,
    help="The model to check placement files against (default: by folder convention).",
)
@click.option(
    "--imports",
    is_flag=True,
    help="Also import every node's `impl` and check its class (needs the node code).",
)
@click.option(
    "--dump-after",
    metavar="PASS",
    default=None,
    help="Stop after PASS (`build` or a verifier pass; see `wgc explain --list`) and print the IR "
    "to stdout.",
)
@click.pass_obj
def check(
    env: Env,
    paths: tuple[str, ...],
    fmt: str,
    warnings_as_errors: bool,
    color: str,
    quiet: bool,
    model_path: str | None,
    imports: bool,
    dump_after: str | None,
) -> None:
    """Check .walk files and placement files: parse, resolve, type-check and verify them.

    PATHS are files, folders (searched recursively for *.walk and their placements/ files) or
    glob patterns.
    """
    if dump_after is not None:
        _check_pass_name(dump_after)
    results = []
    driver = _driver()
    models: dict[str, FrontEndResult] = {}
    for path in expand_paths(paths):
        if is_placement(path):
            results.append(_check_placement(driver, path, model_path or paired_model(path), models))
            continue
        outcome: FrontEndResult = driver.front_end(path, stop_after=dump_after)
        diags = list(outcome.diagnostics)
        if imports and outcome.model is not None and not _has_errors(diags):
            from wgc.cli.check_imports import check_imports

            diags += check_imports(outcome.model)
        results.append(_Checked(path, diags, outcome.sources))
        if dump_after is not None and outcome.model is not None:
            from wgc.show.text import render_text as render_ir

            click.echo(f"# IR of {path} after `{dump_after}`")
            click.echo(render_ir(outcome.model), nl=False)
    if fmt == "text":
        use_color = _use_color(color, env)
        _emit_text(results, color=use_color, quiet=quiet, warnings_as_errors=warnings_as_errors)
    else:
        _emit_machine(fmt, results)
    every = [d for r in results for d in r.diagnostics]
    failing = {Severity.ERROR, Severity.WARNING} if warnings_as_errors else {Severity.ERROR}
    code = EXIT_USER if any(d.severity in failing for d in every) else EXIT_OK
    click.get_current_context().exit(code)
