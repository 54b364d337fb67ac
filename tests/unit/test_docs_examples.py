"""Every ```walk block in the docs is a complete program that compiles without diagnostics,
and is already in `wgc fmt`'s canonical layout (docs teach the layout the formatter writes)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from wgc.driver import Driver
from wgc.fmt import format_source

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "docs" / "language.md", ROOT / "README.md"]
_BLOCK = re.compile(r"^```walk\n(.*?)^```", re.S | re.M)


def _blocks():
    for doc in DOCS:
        if not doc.exists():
            continue
        text = doc.read_text(encoding="utf-8")
        for i, m in enumerate(_BLOCK.finditer(text)):
            line = text[: m.start()].count("\n") + 2
            yield pytest.param(m.group(1), id=f"{doc.name}:{line}#{i}")


BLOCKS = list(_blocks())


def test_docs_have_walk_examples():
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize("source", BLOCKS)
def test_doc_example_compiles_clean(source):
    result = Driver().front_end("doc.walk", source)
    assert result.model is not None
    assert not result.diagnostics, [(d.code, d.message, d.span.line) for d in result.diagnostics]


@pytest.mark.parametrize("source", BLOCKS)
def test_doc_example_is_formatted(source):
    formatted = format_source(source, "doc.walk")
    assert not formatted.diagnostics
    assert formatted.text == source
