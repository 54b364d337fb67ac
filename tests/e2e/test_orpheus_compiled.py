"""Orpheus on `cpu-2rank-compiled` (the LLM's decode step compiled by inductor, one artifact per
batch bucket, and the SNAC decoder's window decode compiled, `snac_compiled`): the same requests
as `test_speech_examples` choose the eager `cpu-2rank` deployment's tokens and speak its audio to
float rounding (the compiled vocoder's fused loops round differently: within 2e-4, the same
number of samples), every decode step runs compiled, every window decodes compiled, and a
request wanting more tokens than the deployment's `kv_tokens` holds fails with a message naming
it (and frees its pages).

The shipped placement compiles five buckets at three page-table widths at worker start; this
test compiles one bucket (``capture: [4]``: every batch of the three requests, three rows down to
one, runs in it) at two widths (``kv_tokens = 128``, ``decode_widths = 2``: tables of 64 and 128
tokens; the longest request outgrows the narrow one, so rows move between forms mid-request) to
keep CI's time down."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

pytest.importorskip("transformers")
pytest.importorskip("snac")

from tests.e2e.speech_support import orpheus  # noqa: E402
from tests.e2e.test_speech_examples import REQUESTS, audio_of, one_thread  # noqa: E402
from wgc.cli.compile import sync  # noqa: E402
from wgc.driver import Driver  # noqa: E402
from wgc_models.orpheus.nodes import SnacDecoder  # noqa: E402
from wgc_runtime.contract.flow import Segment  # noqa: E402
from wgc_runtime.engines.capture import inductor_available  # noqa: E402
from wgc_runtime.host.local import LocalCluster  # noqa: E402

pytestmark = pytest.mark.skipif(inductor_available() is not None, reason=str(inductor_available()))

PLACEMENTS = ROOT / "wgc_models" / "orpheus" / "placements"


def compiled_plan(family, out: Path) -> Path:
    text = (PLACEMENTS / "cpu-2rank-compiled.yaml").read_text()
    shipped = "capture: [1, 2, 4, 8, 16]"
    assert shipped in text and "backend: inductor" in text
    place = out / "compiled-1-bucket.yaml"
    widths = "params: {kv_tokens: 320, decode_widths: 3}"
    assert widths in text
    text = text.replace(widths, "params: {kv_tokens: 128, decode_widths: 2}")
    place.write_text(text.replace(shipped, "capture: [4]"))
    walk = ROOT / "wgc_models" / "orpheus" / "orpheus.walk"
    result = Driver().compile(str(walk), str(place), family.sets)
    assert result.ok, [d.message for d in result.errors]
    sync(out / "plan", result.files, check=False)
    return out / "plan"


def run_all(folder: Path, requests: dict) -> tuple[LocalCluster, dict]:
    c = LocalCluster(folder)
    handles = {
        rid: c.submit(c.request([Segment("text", text)], ["audio"], options), rid, seed=seed)
        for rid, (text, options, seed) in requests.items()
    }
    c.run()
    return c, handles


@pytest.mark.slow
def test_the_compiled_step_speaks_as_the_eager_one(tmp_path) -> None:
    family = orpheus(tmp_path / "ckpt")
    with one_thread():
        _, want = run_all(family.compile(tmp_path / "eager", "cpu-2rank"), REQUESTS["orpheus"])
        c, got = run_all(compiled_plan(family, tmp_path), REQUESTS["orpheus"])
        for rid, h in got.items():
            assert h.error is None, (rid, h.error)
            audio, eager = audio_of(h), audio_of(want[rid])
            assert audio.numel() > 0 and audio.shape == eager.shape, rid
            assert (audio - eager).abs().max() <= 2e-4, rid
        (decode,) = [ex for ex in c.ranks.values() if ex.captured.units]
        runners = [u.runner for us in decode.captured.units.values() for u in us]
        assert runners and all(r.backend == "inductor" and r.compile_error is None for r in runners)
        assert sum(r.compiled_runs for r in runners) == decode.captured.runs > 0
        # the narrow form while every sequence fits 64 tokens, the wide one after
        assert len(runners) == 2 and all(r.compiled_runs > 0 for r in runners)
        assert decode.captured.fallbacks == 0
        (node,) = [ex.nodes[n] for ex in c.ranks.values() for n in ex.nodes if n == "snac_decoder"]
        assert isinstance(node, SnacDecoder)
        assert node.vocoder.compiled  # every window decoded by the compiled program
        assert sum(cs.runs for cs in node.vocoder.snac.compiled_spans.values()) > 0

        # more than `kv_tokens = 128` holds: a clear failure, and nothing left behind
        h = c.submit(c.request([Segment("text", "hello")], ["audio"], {"max_tokens": 400}), "long")
        c.run()
    assert h.error is not None and "kv_tokens" in str(h.error), h.error
    for ex in c.ranks.values():
        assert not ex.requests and all(n == 0 for n in ex.kv.used_pages().values())
        for n in ex.nodes.values():  # the LM's per-request sampling options went with them
            assert not getattr(n, "_params", {}), n


def test_no_page_table_width_is_refused_at_start(tmp_path) -> None:
    family = orpheus(tmp_path / "ckpt")
    family = replace(family, sets={**family.sets, "decode_widths": "0"})
    with pytest.raises(Exception, match="decode_widths = 0"):
        LocalCluster(family.compile(tmp_path / "plan", "cpu"))
