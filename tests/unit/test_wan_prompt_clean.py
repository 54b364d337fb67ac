"""Wan's prompt cleaning (`clean_prompt`) against diffusers' Wan pipeline's ``prompt_clean``, with
ftfy installed (its repairs made, as the pipeline makes them) and without it (neither makes
them): mojibake, HTML entities escaped twice, runs of whitespace."""

from __future__ import annotations

import sys

import pytest

from wgc_models.wan22 import text as wan_text

pipeline_wan = pytest.importorskip("diffusers.pipelines.wan.pipeline_wan")

PROMPTS = (
    "A cat  walks\ton the\n\ngrass ",
    "the cafÃ© on the cornerâ€™s roof",  # UTF-8 read as Latin-1: ftfy repairs it
    "rock &amp;amp; roll &lt;b&gt;loud&lt;/b&gt;",  # escaped twice
    "  ＡＢＣ fullwidth and\u00a0no-break space  ",
    "ﬁne ligatures and \u201csmart quotes\u201d",
    "",
)


def test_with_ftfy_the_prompt_is_cleaned_as_the_pipeline_cleans_it() -> None:
    pytest.importorskip("ftfy")
    assert pipeline_wan.is_ftfy_available()
    fix = wan_text._ftfy_fix()
    assert fix is not None
    for prompt in PROMPTS:
        assert wan_text.clean_prompt(prompt, fix) == pipeline_wan.prompt_clean(prompt), prompt
    # ftfy's repair is made: the test can tell the two paths apart
    assert wan_text.clean_prompt(PROMPTS[1], fix) == "the café on the corner's roof"
    assert "Ã©" in wan_text.clean_prompt(PROMPTS[1], None)


def test_without_ftfy_neither_makes_its_repairs(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "ftfy", None)  # `import ftfy` raises ImportError
    monkeypatch.setattr(pipeline_wan, "is_ftfy_available", lambda: False)
    assert wan_text._ftfy_fix() is None
    for prompt in PROMPTS:
        assert wan_text.clean_prompt(prompt, None) == pipeline_wan.prompt_clean(prompt), prompt
