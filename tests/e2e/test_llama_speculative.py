"""Speculative decoding (`wgc_models/llama/speculative.walk`): the reply is token for token the
plain greedy decoding of `wgc_models/llama/llama.walk`, on each of its placements (one rank, and the
draft on a rank of its own), for several prompts, lengths, draft lengths and ends (an
end-of-sequence token chosen mid-step), one request at a time and several batched; in process
(`LocalCluster`, where every verify step runs captured: its bounded ports padded and cut back)
and in the reference interpreter here, through `wgc run` and `wgc serve` in the slow tests at the
end."""

from __future__ import annotations

import subprocess
import sys
from base64 import b64decode
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from wgc.driver import Driver  # noqa: E402
from wgc_runtime.contract.flow import Segment  # noqa: E402
from wgc_runtime.host.local import Handle, LocalCluster  # noqa: E402

LLAMA = ROOT / "wgc_models" / "llama"
SPEC = LLAMA / "speculative.walk"
PLACEMENTS = ("spec-cpu", "spec-cpu-split")
EXE = Path(sys.executable).with_name("wgc")
WGC = [str(EXE)] if EXE.exists() else [sys.executable, "-c", "from wgc.cli import main; main()"]
PROMPTS = (b"hello there", b"prompt 3: abcabc", b"the quick brown fox jumps over")


def cluster(tmp: Path, walk: Path, placement: Path, sets: dict[str, str]) -> LocalCluster:
    result = Driver().compile(str(walk), str(placement), sets)
    assert result.ok, [d.message for d in result.errors]
    tmp.mkdir(parents=True, exist_ok=True)
    for name, text in result.files.items():
        (tmp / name).write_text(text)
    return LocalCluster(tmp)


def replies(c: LocalCluster, prompts: tuple[bytes, ...]) -> list[list[int]]:
    """Every prompt submitted at once (their steps batch), each reply's token ids."""
    hs = [c.submit(c.request([Segment("text", torch.tensor(list(p)))], ["text"])) for p in prompts]
    c.run()
    return [ids(h) for h in hs]


def all_captured(c: LocalCluster) -> bool:
    """Whether every verify step of the target and every decode call of the draft ran as its
    captured step (bounded ports padded to their bound and cut back), and some did."""
    for node, total in (("Target", "steps"), ("Draft", "calls")):
        (rank,) = (r for r in c.ranks.values() if node in r.nodes)
        counts = rank.nodes[node].counts  # type: ignore[attr-defined]
        steps = rank.captured
        if not 0 < counts["captured"] == counts[total] or steps.fallbacks:
            return False
    return True


def ids(h: Handle) -> list[int]:
    assert h.error is None, h.error
    return [int(t) for o in h.outputs for t in o.tensor.reshape(-1)]


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize(("k", "max_new"), [(1, 9), (2, 32), (4, 17)])
def test_speculative_replies_equal_plain_greedy(tmp_path: Path, placement: str, k: int, max_new):
    sets = {"max_new_tokens": str(max_new), "eos": "-1"}
    plain = cluster(tmp_path / "plain", LLAMA / "llama.walk", LLAMA / "placements/cpu.yaml", sets)
    want = replies(plain, PROMPTS)
    assert all(len(w) == max_new for w in want)
    where = LLAMA / "placements" / f"{placement}.yaml"
    spec = cluster(tmp_path / "spec", SPEC, where, {**sets, "speculative_tokens": str(k)})
    assert replies(spec, PROMPTS) == want
    assert all_captured(spec)
    alone = cluster(tmp_path / "alone", SPEC, where, {**sets, "speculative_tokens": str(k)})
    assert replies(alone, PROMPTS[:1]) == want[:1]


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_an_end_of_sequence_token_ends_the_reply_where_plain_decoding_does(tmp_path, placement):
    """eos set to a token plain decoding chooses mid-reply: both replies stop before it (and a
    first token that is eos is the whole reply, as in `llama.walk`)."""
    free = {"max_new_tokens": "32", "eos": "-1"}
    plain = cluster(tmp_path / "free", LLAMA / "llama.walk", LLAMA / "placements/cpu.yaml", free)
    (first,) = replies(plain, PROMPTS[1:2])
    where = LLAMA / "placements" / f"{placement}.yaml"
    for n, eos in enumerate({first[0], first[5], first[-1]}):
        sets = {"max_new_tokens": "32", "eos": str(eos)}
        llama = LLAMA / "llama.walk"
        want = replies(
            cluster(tmp_path / f"p{n}", llama, LLAMA / "placements/cpu.yaml", sets), PROMPTS
        )
        spec = cluster(tmp_path / f"s{n}", SPEC, where, sets)
        got = replies(spec, PROMPTS)
        assert got == want and len(want[1]) <= 32
        assert all_captured(spec)


@pytest.mark.parametrize("k", [1, 2, 4])
def test_the_captured_steps_accept_what_forward_accepts(tmp_path: Path, k: int) -> None:
    """The same placement without capture buckets runs every call's `forward`: the same
    replies, and the same guesses proposed and accepted (the captured draft guesses what the
    forward one does, and the captured verify step agrees with the same ones)."""
    sets = {"max_new_tokens": "32", "eos": "-1", "speculative_tokens": str(k)}
    where = LLAMA / "placements/spec-cpu.yaml"
    eager = tmp_path / "eager.yaml"
    eager.write_text(where.read_text().replace("capture: [1, 2, 4, 8, 16]", "capture: []"))
    counts, got = [], []
    for name, placement in (("captured", where), ("forward", eager)):
        c = cluster(tmp_path / name, SPEC, placement, sets)
        got.append(replies(c, PROMPTS))
        target = c.ranks[0].nodes["Target"]
        counts.append({n: target.counts[n] for n in ("steps", "proposed", "accepted")})  # type: ignore[attr-defined]
        assert all_captured(c) == (name == "captured")
    assert got[0] == got[1] and counts[0] == counts[1] and counts[0]["accepted"] > 0


def test_the_reference_interpreter_gives_the_same_replies() -> None:
    from wgc.interp import load_model, make_request, run_request, segment

    got = {}
    for walk in ("llama.walk", "speculative.walk"):
        m = load_model(str(LLAMA / walk))
        prompt = segment("text", torch.tensor(list(PROMPTS[2])))
        out = run_request(m, make_request(m, [prompt], ["text"]))
        got[walk] = [
            int(t) for e in out.emitted if e.value is not None for t in e.value.reshape(-1)
        ]
    assert got["speculative.walk"] == got["llama.walk"] and len(got["llama.walk"]) == 32


def test_the_draft_is_the_targets_first_layers_and_head(tmp_path: Path) -> None:
    c = cluster(tmp_path, SPEC, LLAMA / "placements/spec-cpu.yaml", {})
    # the loop's calls are captured at the bound (the prefill's run `forward`)
    report = c.ranks[0].captured.report
    assert not report.skipped
    assert [label for label, _, _ in report.units] == ["decode:0 Draft", "decode:1 Target"]
    nodes = c.ranks[0].nodes
    target, draft = nodes["Target"].model, nodes["Draft"].model  # type: ignore[attr-defined]
    assert len(draft.model.layers) == 1 and len(target.model.layers) == 2
    theirs = target.state_dict()
    for name, w in draft.state_dict().items():
        assert torch.equal(w, theirs[name]), name


@pytest.mark.slow
@pytest.mark.parametrize("placement", PLACEMENTS)
def test_wgc_run_speculative_equals_plain_greedy(tmp_path: Path, placement: str) -> None:
    """`wgc run` (processes, one per rank): the same reply text as the plain walk's."""
    for n, (prompt, max_new) in enumerate([("hello there", "32"), ("abc", "11")]):
        out = {}
        for name, walk, where in (
            ("plain", LLAMA / "llama.walk", LLAMA / "placements/cpu.yaml"),
            ("spec", SPEC, LLAMA / "placements" / f"{placement}.yaml"),
        ):
            folder = tmp_path / f"{name}{n}"
            cmd = [*WGC, "run", str(walk), "-p", str(where)]
            cmd += ["-i", f"text={prompt}", "-w", "text", "-o", str(folder)]
            cmd += ["--set", f"max_new_tokens={max_new}", "--set", "eos=-1"]
            done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stderr
            out[name] = (folder / "text.txt").read_bytes()
        assert out["spec"] == out["plain"] and out["plain"]


def test_an_mstar_config_sets_k_and_the_bound(tmp_path: Path) -> None:
    """M*'s `speculative_tokens` sets the example's param of that name: the nodes' `config k`,
    the proposal's size and the accepted tokens' bound (captured at k + 1), and the reply."""
    (tmp_path / "mstar.yaml").write_text(
        'model: "speculative"\nspeculative_tokens: 2\nnode_groups:\n'
        "  - node_names: [Target, Draft]\n    ranks: [0]\n"
    )
    res = Driver().plan(str(SPEC), str(tmp_path / "mstar.yaml"))
    assert res.plan is not None, [(d.code, d.message) for d in res.errors]
    rank = res.plan.ranks[0]
    assert {n.name: dict(n.config)["k"] for n in rank.nodes} == {"Target": 2, "Draft": 2}
    (cap,) = rank.captures
    assert dict(cap.ports)["1#accepted"].dims == (3,) and "1#accepted" in cap.padded


@pytest.mark.slow
def test_wgc_serve_speculative_equals_plain_greedy(tmp_path: Path) -> None:
    """`wgc serve` (processes; the draft on a rank of its own): the native route's replies, one
    at a time and several at once (their verify steps batch, captured), equal the plain walk's
    served the same way."""
    pytest.importorskip("fastapi")
    from tests.e2e.serve_support import served

    sets = {"max_new_tokens": "24", "eos": "-1"}
    got = {}
    for name, walk, where in (
        ("plain", LLAMA / "llama.walk", LLAMA / "placements/cpu.yaml"),
        ("spec", SPEC, LLAMA / "placements/spec-cpu-split.yaml"),
    ):
        result = Driver().compile(str(walk), str(where), sets)
        assert result.ok, [d.message for d in result.errors]
        folder = tmp_path / name
        folder.mkdir()
        for file, text in result.files.items():
            (folder / file).write_text(text)
        with served(str(folder)) as s:

            def ask(prompt: bytes, s=s) -> list[int]:
                body = {"inputs": [{"modality": "text", "data": list(prompt), "dtype": "i64"}]}
                status, out = s.post("/v1/requests", {**body, "want": ["text"]})
                assert status == 200, out
                values = [o["value"] for o in out["outputs"]]
                return [t for v in values for t in np.frombuffer(b64decode(v["b64"]), np.int64)]

            with ThreadPoolExecutor(len(PROMPTS)) as pool:
                together = list(pool.map(ask, PROMPTS))
            got[name] = ([ask(p) for p in PROMPTS], together)
    assert got["spec"] == got["plain"]
    assert got["plain"][0] == got["plain"][1] and all(len(r) == 24 for r in got["plain"][0])
