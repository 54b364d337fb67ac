"""Where the grammar lives: `grammar/walk.lark` in a checkout, packaged as `wgc._grammar`."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parents[2] / "grammar" / "walk.lark"


def grammar_text() -> str:
    if _CHECKOUT.is_file():
        return _CHECKOUT.read_text(encoding="utf-8")
    return (resources.files("wgc._grammar") / "walk.lark").read_text(encoding="utf-8")
