"""Long-form explanations of diagnostic codes, shipped as package data.

Each live code has ``wgc/diagnostics/explanations/<CODE>.md`` (format in that folder's
README.md): a heading, a few lines of prose, a failing example and a fixed example. The test-suite
compiles both examples, so an explanation can never drift from what the compiler does.
"""

from __future__ import annotations

import re
from importlib import resources
from importlib.resources.abc import Traversable

from wgc.diagnostics.codes import REGISTRY

__all__ = [
    "all_codes_with_explanations",
    "examples",
    "explanation",
    "normalize_code",
    "parse_examples",
    "placement_examples",
]

_CODE_FILE = re.compile(r"^WG\d{3}\.md$")
_SECTION = re.compile(r"^## (Failing|Fixed) example\s*$", re.MULTILINE)
_FENCE = re.compile(r"^```walk[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
_YAML_FENCE = re.compile(r"^```yaml[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def _folder() -> Traversable:
    return resources.files("wgc.diagnostics") / "explanations"


def normalize_code(text: str) -> str:
    """``wg401``, ``WG401`` and ``401`` all mean ``WG401``; anything else is just upper-cased."""
    text = text.strip().upper()
    if text.isdigit():
        return f"WG{int(text):03d}"
    return text


def load_text(code: str) -> str | None:
    """The raw markdown for ``code``, or None when no file ships for it."""
    path = _folder() / f"{code}.md"
    if not path.is_file():
        return None
    return path.read_text(encoding="utf-8")


def explanation(code: str) -> str:
    """The explanation of a registered ``code`` (KeyError for an unknown or unexplained one)."""
    if code not in REGISTRY:
        raise KeyError(code)
    text = load_text(code)
    if text is None:
        raise KeyError(code)
    return text


def parse_examples(text: str) -> tuple[str, str]:
    """(failing, fixed) sources from the first ``walk`` fence after each example heading."""
    found: dict[str, str] = {}
    headings = list(_SECTION.finditer(text))
    for i, heading in enumerate(headings):
        end = headings[i + 1].start() if i + 1 < len(headings) else len(text)
        fence = _FENCE.search(text, heading.end(), end)
        if fence is None:
            raise ValueError(f"`## {heading.group(1)} example` has no ```walk block")
        found.setdefault(heading.group(1), fence.group(1))
    missing = [k for k in ("Failing", "Fixed") if k not in found]
    if missing:
        raise ValueError(f"explanation lacks a `## {missing[0]} example` section")
    return found["Failing"], found["Fixed"]


def examples(code: str) -> tuple[str, str]:
    """(failing, fixed) example programs of ``code``."""
    return parse_examples(explanation(code))


def placement_examples(code: str) -> tuple[str, str, str, str]:
    """(walk_failing, yaml_failing, walk_fixed, yaml_fixed) of a placement-stage ``code``: each
    example section holds a ```walk model, then the ```yaml placement checked against it."""
    text = explanation(code)
    found: dict[str, tuple[str, str]] = {}
    headings = list(_SECTION.finditer(text))
    for i, heading in enumerate(headings):
        end = headings[i + 1].start() if i + 1 < len(headings) else len(text)
        walk = _FENCE.search(text, heading.end(), end)
        if walk is None:
            raise ValueError(f"`## {heading.group(1)} example` has no ```walk block")
        placement = _YAML_FENCE.search(text, walk.end(), end)
        if placement is None:
            raise ValueError(
                f"`## {heading.group(1)} example` has no ```yaml block after its model"
            )
        found.setdefault(heading.group(1), (walk.group(1), placement.group(1)))
    missing = [k for k in ("Failing", "Fixed") if k not in found]
    if missing:
        raise ValueError(f"explanation lacks a `## {missing[0]} example` section")
    return (*found["Failing"], *found["Fixed"])


def all_codes_with_explanations() -> tuple[str, ...]:
    """Every code that has an explanation file, sorted."""
    folder = _folder()
    if not folder.is_dir():
        return ()
    names = (entry.name for entry in folder.iterdir() if _CODE_FILE.match(entry.name))
    return tuple(sorted(name.removesuffix(".md") for name in names))
