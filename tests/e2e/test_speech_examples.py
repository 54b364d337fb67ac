"""The speech examples' real architectures end to end on the compiled runtime (`LocalCluster`:
the conductor and every rank's executor in one thread), on every CPU placement (1, 2 and 3
ranks), against the reference pipelines (transformers' and snac's modules driven by hand,
`tests.reference`) on the same tiny checkpoints.

Several requests run at once (batched across requests; Orpheus's decode step as the captured
unit), greedy and seeded sampling: each one's audio equals its reference run's (≤ 1e-4), its
text is the reference's tokens through the tokenizer, the audio is bit for bit the same on
every placement, and the reference interpreter gives exactly the runtime's outputs.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

pytest.importorskip("transformers")
pytest.importorskip("snac")

from tests.e2e.speech_support import (  # noqa: E402
    PLACEMENTS,
    Family,
    orpheus,
    qwen3_omni,
    reference,
)
from wgc.driver import Driver  # noqa: E402
from wgc.interp import make_request, run_request, same_outputs, segment  # noqa: E402
from wgc_models._shared.speech import text_codec  # noqa: E402
from wgc_models.orpheus.config import TINY_TOKENS  # noqa: E402
from wgc_runtime.contract.flow import Segment  # noqa: E402
from wgc_runtime.host.local import Handle, LocalCluster  # noqa: E402

TOL = 1e-4
SAMPLED = {"temperature": 0.8, "top_p": 0.9, "repetition_penalty": 1.1}
REQUESTS = {  # id -> (text, options, seed)
    "orpheus": {
        "greedy": ("hello", {"max_tokens": 70}, None),
        "sampled": ("how are you today", {**SAMPLED, "voice": "leo", "max_tokens": 56}, 7),
        "penalty": ("hi", {"repetition_penalty": 1.3, "max_tokens": 49}, None),
    },
    "qwen3_omni": {
        "greedy": (
            "hello there", {"repetition_penalty": 1.5, "max_tokens": 8, "max_frames": 40}, None
        ),
        "sampled": (
            "say something",
            {**SAMPLED, **{f"talker_{k}": v for k, v in SAMPLED.items()}, "speaker": "aiden",
             "max_tokens": 6, "max_frames": 30},
            3,
        ),
    },
}  # fmt: skip


@contextlib.contextmanager
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


@pytest.fixture(scope="module")
def families(tmp_path_factory) -> dict[str, Family]:
    with one_thread():
        return {
            "orpheus": orpheus(tmp_path_factory.mktemp("orpheus")),
            "qwen3_omni": qwen3_omni(tmp_path_factory.mktemp("omni")),
        }


def wants(family: str) -> list[str]:
    return ["audio"] if family == "orpheus" else ["text", "audio"]


def audio_of(h: Handle) -> torch.Tensor:
    chunks = [o.tensor for o in h.outputs if o.modality == "audio"]
    return torch.cat(chunks) if chunks else torch.zeros(0)


def text_of(h: Handle) -> bytes:
    return b"".join(bytes(o.tensor.tolist()) for o in h.outputs if o.modality == "text")


@pytest.fixture(scope="module")
def served(families, tmp_path_factory) -> dict[tuple[str, str], tuple[LocalCluster, dict]]:
    """Every family's requests, all at once, on every CPU placement."""
    out = {}
    with one_thread():
        for name, family in families.items():
            for placement in PLACEMENTS:
                folder = family.compile(tmp_path_factory.mktemp(f"{name}-{placement}"), placement)
                c = LocalCluster(folder)
                handles = {
                    rid: c.submit(
                        c.request([Segment("text", text)], wants(name), options), rid, seed=seed
                    )
                    for rid, (text, options, seed) in REQUESTS[name].items()
                }
                c.run()
                out[(name, placement)] = (c, handles)
    return out


@pytest.fixture(scope="module")
def references(families) -> dict[tuple[str, str], object]:
    with one_thread():
        return {
            (name, rid): reference(families[name], text, options, rid, seed)
            for name, requests in REQUESTS.items()
            for rid, (text, options, seed) in requests.items()
        }


def implied(family: str, ref) -> int:
    """The samples the reference's tokens imply: Orpheus, 2048 per frame but the first and the
    last two (context) of each window; Qwen3-Omni, 1920 per codec frame less 555 per chunk
    of 25 (its decoder's transposed convolutions trim them, as the released model's)."""
    if family == "orpheus":
        assert TINY_TOKENS.end_of_speech not in ref.tokens  # every request runs to its cap
        return 2048 * (len(ref.tokens) // 7 - 3)
    frames = ref.codes.shape[0]
    return 1920 * frames - 555 * -(-frames // 25)


CASES = [(f, p) for f in REQUESTS for p in PLACEMENTS]


@pytest.mark.slow
@pytest.mark.parametrize(("family", "placement"), CASES, ids=[f"{f}-{p}" for f, p in CASES])
def test_the_audio_is_the_reference_pipelines(served, references, family, placement) -> None:
    c, handles = served[(family, placement)]
    for rid, h in handles.items():
        assert h.error is None, (rid, h.error)
        ref = references[(family, rid)]
        got = audio_of(h)
        assert got.shape == ref.audio.shape and got.numel() == implied(family, ref), rid
        assert (got - ref.audio).abs().max().item() <= TOL, rid
        assert got.abs().max().item() <= 1.0 and got.std().item() > 0.01, rid  # a signal
        if family == "qwen3_omni":  # every token the Thinker chose, through the tokenizer
            codec = text_codec("", "qwen3_omni")
            assert text_of(h) == b"".join(codec.piece(t) for t in ref.tokens), rid
    for ex in c.ranks.values():  # every page is back
        assert not ex.requests and all(n == 0 for n in ex.kv.used_pages().values())


@pytest.mark.parametrize("family", list(REQUESTS))
def test_every_placement_makes_the_same_audio(served, family) -> None:
    runs = [served[(family, p)][1] for p in PLACEMENTS]
    for rid in REQUESTS[family]:
        first = audio_of(runs[0][rid])
        assert all(torch.equal(first, audio_of(r[rid])) for r in runs[1:]), rid


def test_orpheus_decodes_batched_through_its_captured_step(served) -> None:
    for placement in PLACEMENTS:
        c, _ = served[("orpheus", placement)]
        decode = [ex for ex in c.ranks.values() if ex.captured.units]
        assert len(decode) == 1, placement  # the rank that runs the decode loop
        captured = decode[0].captured
        assert captured.fallbacks == 0 and captured.rows > 0
        assert max(captured.batch_sizes) == len(REQUESTS["orpheus"])  # the requests batched
        # the stream's owner is another rank: running rows step in the decode lane
        lanes = decode[0].lanes
        assert (lanes.rows > 0) == (placement != "cpu"), placement
        assert not lanes.pending()  # nothing left in a lane once the requests ended


def test_the_interpreter_gives_the_runtimes_outputs(families, served) -> None:
    with one_thread():
        for name, family in families.items():
            walk = ROOT / "wgc_models" / name / f"{name}.walk"
            place = walk.parent / "placements" / "cpu.yaml"
            model = Driver().compile(str(walk), str(place), family.sets).model
            assert model is not None
            _, handles = served[(name, "cpu")]
            rid = "sampled"
            text, options, seed = REQUESTS[name][rid]
            opts = {**options, "wgc.seed": seed}
            req = make_request(model, [segment("text", text)], wants(name), opts)
            ref = run_request(model, req, request_id=rid)
            got = handles[rid]
            assert ref.error is None, ref.error
            assert same_outputs(ref, _outputs(got)), name


def _outputs(h: Handle):
    from wgc.interp import Emitted, Outputs

    out = Outputs()
    for o in h.outputs:
        out.emitted.append(Emitted(o.meta["flow"], o.meta["walk"], o.modality, o.channel, o.tensor))
    return out
