"""`wgc run` runs every example from the command line: segment fields (``--input
NAME=VALUE,FIELD=VALUE``), a JSON request file (``--request``), ``--seed``, and video outputs
written as an array plus one PNG per frame (never exit 2).

Each run's outputs equal the same request submitted to `LocalCluster` on the same compiled plan
with the same seed: V-JEPA 2-AC's rollout from a request file (in this process and as
processes on two ranks), π0.5's action chunk with its `prompt` field as a JSON list, Wan2.2's
video. Bad request files exit 1 with a message naming the place.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.e2e.real_support import compile_to
from wgc.cli.request_input import split_fields
from wgc.cli.run_outputs import video_frames
from wgc.interp import segment
from wgc_runtime.host.local import LocalCluster

ROOT = Path(__file__).resolve().parents[2]
VIDEO = torch.arange(2 * 16 * 16 * 3).reshape(2, 16, 16, 3).remainder(255).to(torch.uint8)
ACTIONS = torch.linspace(-1, 1, 16 * 7).reshape(16, 7)
STATES = torch.linspace(0, 1, 16 * 7).reshape(16, 7)
CAMERAS = torch.arange(3 * 20 * 20 * 3).reshape(3, 20, 20, 3).mul(5).remainder(253).to(torch.uint8)
PROMPT = [5, 17, 3, 99, 42, 7, 250, 12]


def wgc(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("wgc")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-c", "from wgc.cli import main; main()"]
    return subprocess.run([*cmd, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def local(plan: Path, inputs, want, options, seed: int) -> dict[str, list[torch.Tensor]]:
    c = LocalCluster(plan, strict=True)
    h = c.submit(c.request(inputs, want, options), seed=seed).result()
    assert h.ok, h.error
    got: dict[str, list[torch.Tensor]] = {}
    for o in h.outputs:
        got.setdefault(o.modality, []).append(o.tensor)
    return got


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("inputs")
    for name, x in {"video": VIDEO, "actions": ACTIONS, "states": STATES, "cams": CAMERAS}.items():
        np.save(d / f"{name}.npy", x.numpy())
    return d


def test_fields_split_at_a_comma_only_before_a_name_and_equals() -> None:
    assert split_fields("obs.png,prompt=pick it up") == ("obs.png", [("prompt", "pick it up")])
    assert split_fields("hello, world") == ("hello, world", [])
    assert split_fields("a,b=1,c=[1, 2]") == ("a", [("b", "1"), ("c", "[1, 2]")])


@pytest.mark.parametrize(
    ("shape", "frames"),
    [((3, 5, 8, 6), (5, 8, 6, 3)), ((5, 3, 8, 6), (5, 8, 6, 3)), ((5, 8, 6, 3), (5, 8, 6, 3))],
)
def test_video_frames_find_the_channel_axis(shape, frames) -> None:
    got = video_frames(np.zeros(shape, np.uint8))
    assert got is not None and got.shape == frames
    assert video_frames(np.zeros((5, 8, 6, 7), np.uint8)) is None  # no channel axis: npy only


@pytest.mark.slow
def test_vjepa_rollout_from_a_request_file(files, tmp_path) -> None:
    plan = compile_to(tmp_path / "plan", "vjepa2_ac", "cpu", {})
    request = {
        "inputs": [
            {
                "modality": "video",
                "data": "video.npy",  # relative to the request file
                "fields": {"actions": "actions.npy", "states": STATES.tolist()},
            }
        ],
        "want": ["tensor"],
        "options": {"rollout": True, "horizon": 3},
        "seed": 5,
    }
    (files / "rollout.json").write_text(json.dumps(request))
    out = tmp_path / "out"
    r = wgc("run", str(plan), "--local", "--request", str(files / "rollout.json"), "-o", str(out))
    assert r.returncode == 0, r.stderr
    seg = segment("video", VIDEO, actions=ACTIONS, states=STATES)
    want = local(plan, [seg], ["tensor"], {"rollout": True, "horizon": 3}, seed=5)["tensor"]
    got = np.load(out / "tensor_000.npy")
    assert torch.equal(torch.from_numpy(got), want[0])
    # the same request as processes on two ranks, the fields on the command line
    plan2 = compile_to(tmp_path / "plan2", "vjepa2_ac", "cpu-2rank", {})
    fields = f"video={files}/video.npy,actions={files}/actions.npy,states={files}/states.npy"
    args = ["--option", "rollout=true", "--option", "horizon=3", "--want", "tensor"]
    r = wgc("run", str(plan2), "--input", fields, *args, "--seed", "5", "-o", str(tmp_path / "o"))
    assert r.returncode == 0, r.stderr
    assert torch.allclose(torch.from_numpy(np.load(tmp_path / "o" / "tensor_000.npy")), want[0])


@pytest.mark.slow
def test_pi05_action_chunk_with_a_prompt_field(files, tmp_path) -> None:
    """Token ids in the prompt field, with option ``token_ids``."""
    plan = compile_to(tmp_path / "plan", "pi05", "cpu", {})
    field = f"image={files}/cams.npy,prompt={json.dumps(PROMPT)}"
    out = tmp_path / "out"
    ids = ["--option", "token_ids=true"]
    r = wgc("run", str(plan), "--local", "--input", field, *ids, "--seed", "3", "-o", str(out))
    assert r.returncode == 0, r.stderr
    seg = segment("image", CAMERAS, prompt=torch.tensor(PROMPT))
    want = local(plan, [seg], ["action"], {"token_ids": True}, seed=3)["action"][0]
    assert torch.equal(torch.from_numpy(np.load(out / "action_000.npy")), want)


@pytest.mark.slow
def test_pi05_takes_its_prompt_as_text(files, tmp_path) -> None:
    """`wgc run pi05` with the instruction as text (the tiny tokenizer.json, openpi's recipe):
    the chunk of the ids `tokenizers` gives sent as ids; ids without ``token_ids`` are refused."""
    from tokenizers import Tokenizer

    from wgc_models.pi05.text import TINY_FILE

    tok = Tokenizer.from_file(str(TINY_FILE))
    body = tok.encode("pick up the red cup", add_special_tokens=False).ids
    ids = torch.tensor([tok.token_to_id("<bos>"), *body, tok.token_to_id("Ċ")])
    out = tmp_path / "out"
    field = f"image={files}/cams.npy,prompt=pick_up the red cup"
    r = wgc("run", "pi05", "--input", field, "--seed", "3", "-o", str(out))
    assert r.returncode == 0, r.stderr
    plan = compile_to(tmp_path / "plan", "pi05", "cpu", {})
    seg = segment("image", CAMERAS, prompt=ids)
    want = local(plan, [seg], ["action"], {"token_ids": True}, seed=3)["action"][0]
    assert torch.equal(torch.from_numpy(np.load(out / "action_000.npy")), want)
    field = f"image={files}/cams.npy,prompt={json.dumps(PROMPT)}"
    r = wgc("run", "pi05", "--local", "--input", field, "-o", str(tmp_path / "o2"))
    assert r.returncode == 1 and "token_ids" in r.stderr, r.stderr


@pytest.mark.slow
def test_a_video_output_is_an_array_and_its_frames(tmp_path) -> None:
    plan = compile_to(tmp_path / "plan", "wan22", "cpu", {})
    out = tmp_path / "out"
    r = wgc("run", str(plan), "--local", "--input", "text=a cat", "--seed", "1", "-o", str(out))
    assert r.returncode == 0, r.stderr
    want = local(plan, [segment("text", "a cat")], ["video"], {}, seed=1)["video"][0]
    video = np.load(out / "video_000.npy")
    assert torch.equal(torch.from_numpy(video), want)
    pngs = sorted((out / "video_000").glob("frame_*.png"))
    frames = video_frames(video)
    assert frames is not None and len(pngs) == frames.shape[0]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ("[1, 2]", "expected an object with `inputs`"),
        ('{"inputs": []}', "`inputs` must be a non-empty list"),
        ('{"inputs": [{"modality": "video"}], "wants": []}', "unknown key `wants`"),
        ('{"inputs": [{"modality": "video", "data": [[1, 2], [3]]}]}', "inputs[0].data"),
        ('{"inputs": [{"modality": "video", "fields": 3}]}', "inputs[0].fields: expected"),
        ('{"inputs": [{"modality": "video"}], "seed": "x"}', "`seed` must be an integer"),
        ("{not json", "not JSON"),
    ],
)
def test_a_bad_request_file_exits_1_naming_the_place(tmp_path, doc, message) -> None:
    path = tmp_path / "req.json"
    path.write_text(doc)
    r = wgc("run", "generated/vjepa2_ac/cpu", "--local", "--request", str(path), timeout=120)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert message in r.stderr and "Traceback" not in r.stderr, r.stderr
