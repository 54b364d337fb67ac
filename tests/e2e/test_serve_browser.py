"""The playground in headless Chromium (Playwright driving Debian's ``/usr/bin/chromium``; no
browser download): a request submitted from the page plays back, and the page shows the
request's walks and lights them up in the plan drawing.

Skipped, saying why, where Playwright or Chromium is missing (`.ci/run` installs both)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

pytest.importorskip("fastapi")
sync_api = pytest.importorskip("playwright.sync_api", reason="needs `pip install playwright`")

from tests.e2e.serve_support import served  # noqa: E402

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--autoplay-policy=no-user-gesture-required",
]

pytestmark = [
    pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="needs POSIX shm"),
    pytest.mark.skipif(
        not Path(CHROMIUM).exists(), reason="needs Chromium (`apt-get install -y chromium`)"
    ),
]


@pytest.mark.slow
def test_a_request_from_the_playground_plays_back() -> None:
    with served("generated/orpheus/cpu", "--seed", "3") as s, sync_api.sync_playwright() as pw:
        # what the page should get: the same request over the native route (the server's seed)
        prompt = "hello from the browser"
        before = s.get_json("/v1/wgc/nodes")["nodes"]
        status, want = s.post(
            "/v1/requests", {"inputs": [{"modality": "text", "data": prompt}], "want": ["audio"]}
        )
        assert status == 200, want
        # the node calls it made: the counters now less those before (nothing else ran)
        was = {(n["rank"], n["node"]): n for n in before}
        calls = {}
        for n in s.get_json("/v1/wgc/nodes")["nodes"]:
            b = was.get((n["rank"], n["node"]), {"calls": 0, "rows": 0})
            calls[n["node"]] = (n["calls"] - b["calls"], n["rows"] - b["rows"])
        assert set(calls) == {"LLM", "snac_decoder"} and all(c > 0 for c, _ in calls.values())
        outputs = len(want["outputs"])
        samples = sum(o["value"]["shape"][0] for o in want["outputs"])
        assert outputs >= 1 and samples > 0
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            sent: list[dict] = []
            page.on(
                "request",
                lambda r: r.url.endswith("/v1/requests") and sent.append(r.post_data_json),
            )
            page.goto(s.url + "/")
            assert page.title() == "wgc · orpheus"
            assert page.locator("#flow option").all_inner_texts() == ["text → audio"]
            # every option offered, those with declared values as a choice among them
            options = s.get_json("/v1/wgc/model")["options"]
            assert page.locator(".option").count() == len(options)
            assert page.locator("select.option").count() == sum(bool(o["choices"]) for o in options)
            page.fill("#prompt", prompt)
            page.click("#run")
            page.wait_for_function("window.wgc.done === true", timeout=30_000)
            # untouched options are not sent: the model's defaults (per mode, too) apply
            assert [b["options"] for b in sent] == [{}]
            assert page.evaluate("window.wgc.outputs") == outputs
            assert page.evaluate("window.wgc.samples") == samples  # scheduled on Web Audio
            page.wait_for_function(
                "document.getElementById('player').readyState >= 1", timeout=10_000
            )
            duration = page.evaluate("document.getElementById('player').duration")
            assert abs(duration - samples / 24_000) < 1e-3  # the WAV of what played
            walks = page.locator("#walks li").all_inner_texts()
            assert any(w.startswith("speech · decode · ") and w.endswith(" ms") for w in walks)
            assert not [w for w in walks if w.endswith("running")]  # the request ended them all
            lit = page.frame_locator("#plan").locator("g.cluster.walk rect[style*='stroke']")
            assert lit.count() == 3  # prefill, decode, snac_chunk
            assert page.locator("#status").inner_text().startswith("done in")
            # per-node timings: the page's share of the counters is the same request's
            shown = page.evaluate("window.wgc.nodes")
            assert {n["node"]: (n["calls"], n["rows"]) for n in shown} == calls
            assert all(n["seconds"] > 0 for n in shown)
            assert page.locator("#nodes tbody tr").count() == len(calls)
            subs = page.frame_locator("#plan").locator("g.node.call text.sub").all_text_contents()
            timed = [t for t in subs if t.endswith(" ms")]
            assert len(timed) == 3, subs  # LLM in prefill and decode, snac_decoder
            assert any(t.startswith(f"#0 · {calls['LLM'][0]}× ") for t in timed), timed
            assert errors == []
        finally:
            browser.close()
