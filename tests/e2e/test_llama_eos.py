"""Llama's end of sequence as `generate` has it: when the prefill's own choice (the first
generated token) is the end-of-sequence token, decoding stops there — one token out, not
`max_new_tokens` — on the captured decode step and on the eager one."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.e2e.test_decoder_engines import CPU, compiled, placement, serve, tokens  # noqa: E402

PROMPT = "prompt 3: abcabc"


@pytest.mark.parametrize("batching", ["captured", "eager"])
def test_a_first_token_at_eos_ends_the_request(tmp_path: Path, batching: str) -> None:
    where = CPU if batching == "captured" else placement(tmp_path, "{max_batch: 4}")
    (tmp_path / "free").mkdir()
    _, (free,) = serve(compiled(tmp_path / "free", where, {"eos": "-1"}), [PROMPT])
    first = tokens(free)
    assert len(first) == 32 and first[0] not in first[1:3]  # a long run without stopping
    (tmp_path / "eos").mkdir()
    _, (h,) = serve(compiled(tmp_path / "eos", where, {"eos": str(first[0])}), [PROMPT])
    assert tokens(h) == [first[0]]
