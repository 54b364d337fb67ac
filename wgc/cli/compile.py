"""`wgc compile MODEL.walk --placement P.yaml`: write the per-rank modules and the conductor.

Errors in the model or the placement are printed like `wgc check` prints them (YAML errors quote
their line) and exit 1. Output goes to ``generated/<model>/<placement stem>/`` unless ``-o DIR``;
files are written atomically, and generated files of an earlier compile that this one no longer
writes (``rank_*.py``, ``conductor.py``, ``plan.json``, ``__init__.py``) are removed; nothing
else in the folder is touched. ``--check`` writes nothing and exits 1 with a diff when the folder
is stale. ``--all`` compiles every ``examples/*/placements/*.yaml`` against its family's model.
"""

from __future__ import annotations

import difflib
import fnmatch
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import click

from wgc.cli.check import _use_color
from wgc.cli.errors import EXIT_OK, EXIT_USER, UserError
from wgc.codegen.pyfmt import comment_text
from wgc.codegen.render import GENERATED_FILES
from wgc.config import Env
from wgc.diagnostics.codes import Severity
from wgc.diagnostics.render import render_summary, render_text
from wgc.driver import CompileResult, Driver


@dataclass(frozen=True, slots=True)
class Outcome:
    written: tuple[str, ...]
    removed: tuple[str, ...]
    diff: str  # --check: what is stale


def is_generated(name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in GENERATED_FILES)


def sync(out_dir: Path, files: dict[str, str], check: bool) -> Outcome:
    """Make ``out_dir`` hold exactly ``files`` among generated names (or, with ``check``, say how
    it differs)."""
    existing = sorted(p.name for p in out_dir.iterdir() if p.is_file()) if out_dir.is_dir() else []
    stale = [n for n in existing if is_generated(n) and n not in files]
    changed = []
    diff = []
    for name, text in files.items():
        path = out_dir / name
        old = path.read_text(encoding="utf-8") if path.is_file() else None
        if old == text:
            continue
        changed.append(name)
        diff += difflib.unified_diff(
            (old or "").splitlines(keepends=True),
            text.splitlines(keepends=True),
            fromfile=str(path) if old is not None else "/dev/null",
            tofile=str(path),
            n=2,
        )
    for name in stale:
        diff.append(f"stale file {out_dir / name} (no longer generated)\n")
    if check:
        return Outcome(tuple(changed), tuple(stale), "".join(diff))
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in changed:
        _write_atomic(out_dir / name, files[name])
    for name in stale:
        (out_dir / name).unlink()
    return Outcome(tuple(changed), tuple(stale), "")


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def example_pairs(root: Path = Path(".")) -> list[tuple[str, str]]:
    """(model.walk, placement.yaml) for every placement under ``examples/*/placements/``. In a
    family with several models, a placement whose name's first word (before a ``-``) starts a
    model's name is that model's (``spec-cpu.yaml``: ``speculative.walk``), any other the
    family's own (``llama/llama.walk``)."""
    pairs = []
    for family in sorted((root / "examples").glob("*/")):
        placements = sorted(family.glob("placements/*.yaml")) + sorted(
            family.glob("placements/*.yml")
        )
        walks = sorted(family.glob("*.walk"))
        for p in placements:
            word = p.stem.split("-")[0]
            mine = [w for w in walks if w.stem != family.name and w.stem.startswith(word)]
            own = [w for w in walks if w.stem == family.name] or walks
            pairs += [
                (w.as_posix(), p.as_posix()) for w in (mine if len(walks) > 1 else walks) or own
            ]
    return sorted(pairs)


def _parse_sets(sets: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in sets:
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            raise UserError(f"`--set {item}`: expected NAME=VALUE")
        out[name.strip()] = value
    return out


def _report(result: CompileResult, color: bool) -> None:
    if not result.diagnostics:
        return
    click.echo(render_text(result.diagnostics, result.sources, color=color), err=True, nl=False)
    n_err = sum(d.severity is Severity.ERROR for d in result.diagnostics)
    n_warn = sum(d.severity is Severity.WARNING for d in result.diagnostics)
    if n_err:
        errors = f"{n_err} previous error{'s' if n_err != 1 else ''}"
        warned = f"; {n_warn} warning{'s' if n_warn != 1 else ''} emitted" if n_warn else ""
        click.echo(
            f"error: could not compile `{result.walk_path}` for `{result.placement_path}` "
            f"due to {errors}{warned}\n",
            err=True,
        )
    elif n_warn:
        click.echo(render_summary(0, n_warn, result.walk_path, color) + "\n", err=True)


def _one(
    walk: str,
    placement: str,
    out: str | None,
    sets: dict[str, str],
    check: bool,
    color: bool,
    driver: Driver,
) -> bool:
    result = driver.compile(walk, placement, sets)
    _report(result, color)
    if not result.ok:
        return False
    assert result.plan is not None
    out_dir = Path(out or result.default_output())
    outcome = sync(out_dir, result.files, check)
    ranks = len(result.plan.ranks)
    placement_name = comment_text(result.plan.placement)  # a file stem: any character at all
    head = f"{result.plan.model} @ {placement_name}: {ranks} rank{'s' if ranks != 1 else ''}"
    if check:
        if outcome.diff:
            click.echo(outcome.diff, nl=False)
            click.echo(
                f"error: {out_dir} is stale ({head}); regenerate with "
                f"`wgc compile {walk} --placement {placement}`",
                err=True,
            )
            return False
        click.echo(f"{head}: {out_dir} is up to date", err=True)
        return True
    files = list(result.files)
    # a 10,000-rank plan would print a line of 10,000 names: past a dozen, the first and last
    names = ", ".join(files if len(files) <= 12 else [*files[:3], "...", *files[-4:]])
    names += f"; {len(files):,} files" if len(files) > 12 else ""
    status = "written" if outcome.written or outcome.removed else "unchanged"
    click.echo(f"{head} -> {comment_text(str(out_dir))}/ ({names}) {status}", err=True)
    for name in outcome.removed:
        click.echo(f"  removed stale {out_dir / name}", err=True)
    return True


@click.command()
@click.argument("model", metavar="MODEL.walk", required=False)
@click.option("--placement", "-p", metavar="P.yaml", help="The placement to compile for.")
@click.option(
    "-o", "--output", metavar="DIR", help="Output folder [default: generated/<model>/<placement>]."
)
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="NAME=VALUE",
    help="Override a param (wins over the placement's `params:`).",
)
@click.option("--check", is_flag=True, help="Write nothing; exit 1 with a diff if output is stale.")
@click.option(
    "--all",
    "all_examples",
    is_flag=True,
    help="Compile every examples/*/placements/*.yaml against its family's model.",
)
@click.option(
    "--color",
    type=click.Choice(["auto", "always", "never"]),
    default="auto",
    show_default=True,
    help="Color diagnostics.",
)
@click.pass_obj
def compile(  # named like the command, as click derives it
    env: Env,
    model: str | None,
    placement: str | None,
    output: str | None,
    sets: tuple[str, ...],
    check: bool,
    all_examples: bool,
    color: str,
) -> None:
    """Compile MODEL.walk for a placement into per-rank Python modules and a conductor."""
    use_color = _use_color(color, env)
    parsed_sets = _parse_sets(sets)
    driver = Driver()
    if all_examples:
        if model or placement or output:
            raise UserError("`--all` compiles every example; give no MODEL, --placement or -o")
        pairs = example_pairs()
        if not pairs:
            raise UserError("`--all` found no examples/*/placements/*.yaml under this folder")
        ok = [_one(w, p, None, parsed_sets, check, use_color, driver) for w, p in pairs]
        click.get_current_context().exit(EXIT_OK if all(ok) else EXIT_USER)
    if not model or not placement:
        raise UserError("give MODEL.walk and `--placement P.yaml` (or `--all`)")
    for path in (model, placement):
        if not Path(path).is_file():
            raise UserError(f"no such file: `{path}`")
    ok = _one(model, placement, output, parsed_sets, check, use_color, driver)
    click.get_current_context().exit(EXIT_OK if ok else EXIT_USER)
